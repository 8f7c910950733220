"""Every name of a file or folder that gpumeter writes or reads, in one place.

The warehouse (docs/deploy.md, docs/billing.md):

    <root>/<zone>/<table>/cluster=<cluster>/day=<YYYY-MM-DD>/data.parquet   a daily table (the raw zone's day
                                                                           may be several part files)
    <root>/<zone>/<table>/period=<YYYY-MM>/data.parquet                     a monthly table (invoice lines)
    <root>/raw/k8s/cluster=<cluster>/day=<YYYY-MM-DD>/                       DRA object snapshots of the day
    <root>/exports/<YYYY-MM>/                                               CSV, FOCUS, HTML and PDF exports
    <root>/periods/<YYYY-MM>/manifest.json, invoice_lines.parquet           a closed period (its manifest and lines)
    <root>/periods/audit.jsonl                                              every close and reopen
    <root>/alerts/budget_alerts.jsonl                                       every budget alert delivered
    <root>/.locks/budget_alerts.lock                                        held while one alert is delivered
    <root>/.locks/cluster=<cluster>/day=<YYYY-MM-DD>.lock                   the (cluster, day) lock
    <root>/.tmp/                                                            DuckDB spill and staged writes
    <root>/.journals/cluster=<cluster>.day=<YYYY-MM-DD>.json                 a (cluster, day) commit under way:
                                                                           its staged → target files (a
                                                                           killed run's is rolled forward)
    <root>/provisional/<zone>/<table>/cluster=<c>/day=<d>/data.parquet      today so far: a day metered up to
                                                                           its last full hour, until the
                                                                           nightly run replaces it

A Parquet source and the DRA snapshot folder use the same `cluster=<c>/day=<d>` partition folders. The
functions take and return paths of either kind (pathlib.Path, or UPath on an object store): they only join
names.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import PurePath
from typing import TypeVar

P = TypeVar("P")  # pathlib.Path or upath.UPath: whatever the caller's root is

# Zones of the warehouse: the model layers' tables, and what billing keeps beside them.
RAW = "raw"
STAGING = "staging"
INTERMEDIATE = "intermediate"
MARTS = "marts"
PERIODS = "periods"
EXPORTS = "exports"
LOCKS = ".locks"
SCRATCH = ".tmp"
JOURNALS = ".journals"  # one file per (cluster, day) commit under way (storage.day_commit)
# A day metered before its end (raw pull and marts, in the zones above under this folder): never billed.
PROVISIONAL = "provisional"

DATA_FILE = "data.parquet"  # one stored table partition
PART_FILE = "part-{index:05d}.parquet"  # one part of a raw day written in parts
LOOKBACK_FILE = "lookback-{index:05d}.parquet"  # a raw day's copy of the previous day's last seconds
DAY_FILES_GLOB = f"cluster=*/day=*/{DATA_FILE}"

# Kubernetes DRA objects: where the raw zone (and a Parquet source) keeps them, and the kinds kept.
K8S = "k8s"
RESOURCE_CLAIMS = "resourceclaims"
RESOURCE_SLICES = "resourceslices"
SNAPSHOT_KINDS = (RESOURCE_CLAIMS, RESOURCE_SLICES)

# A closed period's folder.
MANIFEST = "manifest.json"
CLOSED_LINES = "invoice_lines.parquet"
AUDIT_LOG = "audit.jsonl"

# The mart of each day's charges per tenant, which budgets and their alerts read.
TENANT_DAILY_COST = "tenant_daily_cost"

# Budget alerts: the ledger of those delivered (one JSON line each), and the lock of one delivery.
ALERTS = "alerts"
ALERT_LEDGER = "budget_alerts.jsonl"
ALERT_LOCK = "budget_alerts.lock"

# The monthly table of invoice lines (the marts zone's only period-partitioned table).
INVOICE_LINES = "invoice_lines"
ALL_TENANTS = "all"  # the scope of the all-tenants export files
FOCUS_SUFFIX = ".focus.csv"


# --- partitions ----------------------------------------------------------------------------------


def partition_dir(base: P, cluster: str, day: date) -> P:
    """The (cluster, day) folder under a table (or a source's table, or the snapshot folder)."""
    return base / f"cluster={cluster}" / f"day={day.isoformat()}"  # type: ignore[operator]


def period_dir(base: P, period: str) -> P:
    """The period folder under a monthly table."""
    return base / f"period={period}"  # type: ignore[operator]


def day_folder_name(day: date) -> str:
    return f"day={day.isoformat()}"


def partition_of(path: PurePath | object) -> tuple[str, date]:
    """(cluster, day) of a file in a partition folder (`…/cluster=<c>/day=<d>/<file>`)."""
    parts = str(path).rstrip("/").split("/")
    return parts[-3].removeprefix("cluster="), date.fromisoformat(parts[-2].removeprefix("day="))


def lock_file(root: P, cluster: str, day: date) -> P:
    return root / LOCKS / f"cluster={cluster}" / f"day={day.isoformat()}.lock"  # type: ignore[operator]


def journal_file(root: P, cluster: str, day: date) -> P:
    """The journal of a (cluster, day) commit under way, beside the lock that guards it."""
    return root / JOURNALS / f"cluster={cluster}.day={day.isoformat()}.json"  # type: ignore[operator]


def journal_day(name: str) -> tuple[str, date] | None:
    """(cluster, day) of a journal's file name, None for anything else in the journals folder."""
    found = re.fullmatch(r"cluster=(?P<cluster>.+)\.day=(?P<day>\d{4}-\d{2}-\d{2})\.json", name)
    return (found["cluster"], date.fromisoformat(found["day"])) if found else None


def provisional_root(root: P) -> P:
    """The provisional zone: a warehouse of its own layout inside the warehouse, which only the readers of
    today's figures look at."""
    return root / PROVISIONAL  # type: ignore[operator]


def alert_ledger(root: P) -> P:
    return root / ALERTS / ALERT_LEDGER  # type: ignore[operator]


def alert_lock(root: P) -> P:
    return root / LOCKS / ALERT_LOCK  # type: ignore[operator]


def snapshot_name(kind: str, taken_ms: int | None = None) -> str:
    """A kept DRA snapshot: `resourceclaims-20261101T100000.000Z.json` (the kind and the UTC time it was taken,
    to the millisecond), or `resourceclaims.json` for a snapshot of unknown time."""
    if kind not in SNAPSHOT_KINDS:
        raise ValueError(f"unknown snapshot kind {kind!r} (one of {', '.join(SNAPSHOT_KINDS)})")
    if taken_ms is None:
        return f"{kind}.json"
    moment = datetime.fromtimestamp(taken_ms // 1000, UTC)
    return f"{kind}-{moment:%Y%m%dT%H%M%S}.{taken_ms % 1000:03d}Z.json"


# A snapshot's name: its kind, and the time it was taken when known (gpumeter.ingest.k8s_objects reads it).
SNAPSHOT_NAME = re.compile(rf"^({'|'.join(SNAPSHOT_KINDS)})(?:-(?P<time>[^/]*))?\.json$")


# --- exports of a period -------------------------------------------------------------------------


def invoice_csv_name(period: object, scope: str = ALL_TENANTS) -> str:
    """The invoice-lines CSV of the output contract: all tenants (`all`) or one tenant's."""
    return f"invoice_lines_{period}_{scope}.csv"


def focus_csv_name(period: object, scope: str = ALL_TENANTS) -> str:
    # Sorts right after the contract's `invoice_lines_<P>_all.csv`, which readers list first.
    return f"invoice_lines_{period}_{scope}{FOCUS_SUFFIX}"


def invoice_document_name(period: object, tenant: str, suffix: str = ".html") -> str:
    """The invoice a person reads, one per tenant and period."""
    return f"tenant_invoice_{period}_{tenant}{suffix}"


def export_kind(name: str) -> str:
    """What an export file is, by its name (for listings)."""
    if name.endswith(FOCUS_SUFFIX):
        return "FOCUS"
    if name.startswith("tenant_invoice_"):
        return f"invoice ({name.rsplit('.', 1)[-1].upper()})"
    return "invoice lines"


# --- a period's lifecycle ------------------------------------------------------------------------


def reopened_manifest(stamp: str) -> str:
    return f"reopened-{stamp}.manifest.json"


def reopened_lines(stamp: str) -> str:
    return f"reopened-{stamp}.{CLOSED_LINES}"
