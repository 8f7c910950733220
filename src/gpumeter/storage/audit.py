"""The audit log: one JSON line per act that changes what was billed (a period closed or reopened, a day
replaced with less), appended and made durable, never rewritten."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime
from pathlib import Path

from gpumeter.storage import paths
from gpumeter.storage.files import append_line
from gpumeter.storage.warehouse import Warehouse


def audit_log_path(warehouse: Warehouse) -> Path:
    return warehouse.periods_dir() / paths.AUDIT_LOG


def append_audit(warehouse: Warehouse, event: dict) -> None:
    """One JSON line per event, appended and made durable; earlier lines are never changed."""
    append_line(audit_log_path(warehouse), json.dumps(event, sort_keys=True, ensure_ascii=False) + "\n")


def read_audit(warehouse: Warehouse) -> list[dict]:
    path = audit_log_path(warehouse)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def who(by: str | None) -> str:
    """Who acts: the name given, else the login name."""
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "unknown"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
