"""The ledger of budget alerts delivered (docs/tariffs.md, "Budget alerts"): `<warehouse>/alerts/
budget_alerts.jsonl`, one JSON line per alert the webhook took, appended with storage.files.append_line.

The ledger is what makes an alert once: a re-metered day, a new sensor cursor or a fresh Dagster instance
finds the alert here and sends nothing. A delivery checks it again under the ledger's lock (`held`) before it
posts, and writes its line only after the webhook said yes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpumeter.billing.alerts import BudgetAlert, moment_text, share_text
from gpumeter.storage import locks, paths
from gpumeter.storage.files import append_line
from gpumeter.storage.warehouse import Warehouse

LOCK_TIMEOUT_SECONDS = 600.0


def ledger_path(warehouse: Warehouse) -> Path:
    return paths.alert_ledger(warehouse.root)


@contextmanager
def held(warehouse: Warehouse) -> Iterator[None]:
    """Hold the ledger's lock: one delivery at a time checks and writes the ledger (and on an object store
    an append is a rewrite of the whole file)."""
    with locks.hold(paths.alert_lock(warehouse.root), "the budget alert ledger", LOCK_TIMEOUT_SECONDS):
        yield


def read_ledger(warehouse: Warehouse) -> dict[str, dict[str, Any]]:
    """Alert key -> its delivery record. A line that does not parse (the torn end of a killed append) is
    skipped: at worst that alert is sent again."""
    path = ledger_path(warehouse)
    if not path.exists():
        return {}
    delivered = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("key"), str):
            delivered.setdefault(record["key"], record)
    return delivered


def record_delivery(warehouse: Warehouse, alert: BudgetAlert, *, fmt: str, status: int, run_id: str) -> dict:
    """Append the delivery of `alert` to the ledger (one line, made durable) and return the record."""
    record = {
        "key": alert.key,
        "tenant": alert.tenant,
        "cost_center": alert.cost_center,
        "period": alert.period,
        "basis": alert.basis,
        "threshold": share_text(alert.threshold),
        "amount": alert.rounded(alert.amount),
        "budget": alert.rounded(alert.budget),
        "currency": alert.currency,
        "provisional_through": moment_text(alert.provisional_through),
        "format": fmt,
        "http_status": status,
        "run_id": run_id,
        "sent_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    append_line(ledger_path(warehouse), json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
    return record
