"""FOCUS exports checked by the FinOps Foundation's own validator (focus-validator 2.2.1, FOCUS 1.2 rule set).

It runs from .venv-focus, a Python 3.12 virtualenv of its own that `make focus-validator` builds (.ci/run
does). Without it the tests skip, saying how to build it; under CI (CI=true) they fail instead.

The files: a draft month like the demo's (whole GPUs and MIG slices, cost centers, efficiency, energy, idle
and unmapped workloads), the same month closed, and the next month carrying adjustments for it (R16), as a
draft and closed. No rule fails on any of them. The validator reports one branch of InvoiceId's nullability
(InvoiceId-C-003-C: null when no invoice is issued, C-004-C, or not null when one is, C-005-C) as failed on
every file, because it checks both branches on every row; the branch not taken is asserted, by status.

FOCUS 1.3 exports (`focus_version: "1.3"`) are not run through it: 2.2.1 bundles the 1.2 rule set only
(focus_validator/rules/model-1.2.0.1.json) and would fetch another version's from GitHub, which these runs
block. tests/test_focus_13.py checks them with our own validator; the last test here fails once a pinned
release bundles a 1.3 rule set, to say the official run should take a 1.3 export too.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from focus_validator import BUILD_HINT, OfficialResult, official_package, run_official_validator
from test_invoices import DEC, config, daily
from test_periods import DEC_ROWS, _store

from gpumeter.billing import periods
from gpumeter.billing.invoices import Period
from gpumeter.billing.month import roll_up_month
from gpumeter.storage import paths
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse

if official_package() is None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the FOCUS validator is not built: {BUILD_HINT}", pytrace=False)
    pytest.skip(f"the FOCUS validator is not built: {BUILD_HINT}", allow_module_level=True)

NOV_29, NOV_30, DEC_1 = date(2026, 11, 29), date(2026, 11, 30), date(2026, 12, 1)
# (tenant, charge type, GPU model, MIG profile, device-s, GPU-s, amount, busy GPU-s, energy J)
DEMO_LIKE = [
    ("ml-training", "reserved", "H100-80GB", None, "7200", "7200", "8", "5400", "0"),
    (
        "ml-training",
        "reserved",
        "H100-80GB",
        "3g.40gb",
        "3600",
        "1542.857142857143",
        "1.714285714286",
        "0",
        "0",
    ),
    ("serving", "reserved", "H100-80GB", None, "1800", "1800", "2", "900", "0"),
    ("serving", "reserved", "H100-80GB", "1g.10gb", "3600", "514.285714285714", "0.571428571429", "0", "0"),
    ("serving", "energy", "H100-80GB", None, "0", "0", "0.36", "0", "4320000"),
    ("__unallocated__", "reserved", "H100-80GB", None, "900", "900", "1", "0", "0"),
    ("__idle__", "idle", "H100-80GB", None, "0", "3600", "4", "0", "0"),
]
DRAFT_BRANCH, CLOSED_BRANCH = "InvoiceId-C-005-C", "InvoiceId-C-004-C"  # the branch that does not apply


def _store_demo_like(wh: Warehouse, day: date) -> None:
    """A day like the demo's: test_periods._store's marts with busy GPU-seconds and energy added."""
    table = daily([(day, *r[:7]) for r in DEMO_LIKE])
    table = table.append_column("busy_gpu_seconds", pa.array([Decimal(r[7]) for r in DEMO_LIKE], DEC))
    table = table.append_column("energy_joules", pa.array([Decimal(r[8]) for r in DEMO_LIKE], DEC))
    wh.write_day(MARTS, "tenant_daily_cost", "c1", day, table)
    pool = pa.table(
        {
            "day": pa.array([day], pa.date32()),
            "pool_cost": pa.array([sum((Decimal(r[6]) for r in DEMO_LIKE), Decimal(0))], DEC),
        }
    )
    wh.write_day(MARTS, "pool_daily_cost", "c1", day, pool)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The FOCUS file of each state, copied out as it was written."""
    root = tmp_path_factory.mktemp("focus-official")
    wh = Warehouse.at(root / "wh")
    files: dict[str, Path] = {}

    def keep(name: str, key: str) -> None:
        files[name] = Path(shutil.copy(periods.exports_dir(wh, key) / paths.focus_csv_name(key), root / name))

    for day in (NOV_29, NOV_30):
        _store_demo_like(wh, day)
    roll_up_month(config(), wh, "2026-11")
    keep("draft-nov.csv", "2026-11")
    periods.close_period(config(), wh, Period.parse("2026-11"), by="finance")
    keep("closed-nov.csv", "2026-11")
    # Late samples for Nov 30: ml-training held one more GPU-hour and half an hour of serving was unmapped.
    late = [
        ("ml-training", "reserved", "H100-80GB", None, "10800", "10800", "12"),
        ("serving", "reserved", "H100-80GB", None, "900", "900", "1"),
        ("__unallocated__", "reserved", "H100-80GB", None, "1800", "1800", "2"),
        ("__idle__", "idle", "H100-80GB", None, "0", "3600", "4"),
    ]
    _store(wh, NOV_30, late)
    _store(wh, DEC_1, DEC_ROWS)
    roll_up_month(config(), wh, "2026-12")
    keep("draft-dec-adjusting-nov.csv", "2026-12")
    periods.close_period(config(), wh, Period.parse("2026-12"), by="finance")
    keep("closed-dec-adjusting-nov.csv", "2026-12")
    return files


@pytest.fixture(scope="module")
def verdicts(exports: dict[str, Path]) -> dict[str, OfficialResult]:
    """The validator on every file, two at a time (a run takes seconds, most of it loading its rules)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(exports, pool.map(run_official_validator, exports.values()), strict=True))


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.mark.parametrize(
    ("name", "closed"),
    [
        ("draft-nov.csv", False),
        ("closed-nov.csv", True),
        ("draft-dec-adjusting-nov.csv", False),
        ("closed-dec-adjusting-nov.csv", True),
    ],
)
def test_the_official_validator_finds_no_failed_rule(
    exports: dict[str, Path], verdicts: dict[str, OfficialResult], name: str, closed: bool
) -> None:
    rows, result = _rows(exports[name]), verdicts[name]
    assert result.failed == [] and result.errored == [], (result.counts(), result.messages)
    # The InvoiceId nullability branch not taken is the one for the other status, and the rule passed.
    assert result.not_taken == [DRAFT_BRANCH if not closed else CLOSED_BRANCH], result.counts()
    assert "InvoiceId-C-003-C" in result.passed
    assert len(result.passed) >= 130, result.counts()  # it did check the file (136 on the demo's)
    invoice_ids = {r["InvoiceId"] for r in rows}
    if closed:
        assert invoice_ids == {f"INV-{r['BillingPeriodStart'][:7]}-{r['SubAccountId'].upper()}" for r in rows}
    else:
        assert invoice_ids == {""}
    if "adjusting" in name:
        assert {r["x_CorrectsPeriod"] for r in rows if r["ChargeClass"] == "Correction"} == {"2026-11"}
    else:
        assert {r["PricingUnit"] for r in rows} == {"GPU-Hours", "kWh"}
        assert any(r["x_MigProfile"] for r in rows) and any(r["x_GpuEfficiency"] for r in rows)


def test_the_bundled_rule_sets_are_1_2_only() -> None:
    """When this fails, the pinned validator bundles another FOCUS version: run it on a 1.3 export."""
    package = official_package()
    assert package is not None
    assert sorted(p.name for p in (package / "rules").glob("model-*.json")) == ["model-1.2.0.1.json"]
