"""Billing: monthly invoice lines from the daily marts, the period lifecycle (close, reopen, adjustments),
exports (CSV, FOCUS, HTML) and budgets."""
