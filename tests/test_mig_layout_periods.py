"""The MIG layout page's averages for a week and for a whole month: each instance's average compute slices are
its slice-seconds over its GPU's observed seconds of every day in the period, so that a GPU's slices add up
to 7 whatever the period's length. The stored mart is written by hand, and so is the truth."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from gpumeter.billing.invoices import Period
from gpumeter.config import parse_config
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.filters import Filters
from gpumeter.views.identity import Viewer
from gpumeter.views.scoped import Views

DAY_S = 86_400
SLICE = pa.decimal128(38, 12)
SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("day", pa.date32()),
        ("node", pa.string()),
        ("uuid", pa.string()),
        ("layout", pa.string()),
        ("gpu_i_id", pa.string()),
        ("gpu_model", pa.string()),
        ("mig_profile", pa.string()),
        ("compute_slices", pa.int32()),
        ("observed_seconds", pa.float64()),
        ("held_slice_seconds", SLICE),
        ("busy_slice_seconds", SLICE),
        ("free_slice_seconds", SLICE),
        ("unpartitioned_slice_seconds", SLICE),
    ]
)
LAYOUT = "3g.40gb+2g.20gb"


def observed(day: int) -> int:
    """Day 2 of the month is half observed (an exporter outage); every other day whole."""
    return DAY_S // 2 if day == 2 else DAY_S


def one_day(day: date) -> pa.Table:
    """A 3g.40gb instance held all day at busy 1/2; a 2g.20gb held idle on odd days, free on even days; 2
    slices unpartitioned."""
    seconds = observed(day.day)
    held_2g = day.day % 2 == 1
    rows = [
        ("1", "3g.40gb", 3, 3 * seconds, Fraction(3 * seconds, 2), 0, 0),
        ("2", "2g.20gb", 2, 2 * seconds if held_2g else 0, 0, 0 if held_2g else 2 * seconds, 0),
        (None, "unpartitioned", None, 0, 0, 0, 2 * seconds),
    ]
    return pa.Table.from_pylist(
        [
            {
                "cluster": "c1",
                "day": day,
                "node": "n1",
                "uuid": "GPU-M",
                "layout": LAYOUT,
                "gpu_i_id": gi,
                "gpu_model": "A100-80GB",
                "mig_profile": profile,
                "compute_slices": slices,
                "observed_seconds": float(seconds),
                "held_slice_seconds": Decimal(held),
                "busy_slice_seconds": Decimal(busy.numerator) / Decimal(busy.denominator)
                if isinstance(busy, Fraction)
                else Decimal(busy),
                "free_slice_seconds": Decimal(free),
                "unpartitioned_slice_seconds": Decimal(unpartitioned),
            }
            for gi, profile, slices, held, busy, free, unpartitioned in rows
        ],
        schema=SCHEMA,
    )


@pytest.mark.parametrize("days", [7, 30])
def test_the_mig_layout_averages_are_right_for_a_week_and_a_month(tmp_path: Path, days: int) -> None:
    doc = {
        "clusters": [{"name": "c1", "source": {"kind": "parquet", "path": str(tmp_path)}}],
        "tenants": [{"name": "team-a", "namespaces": ["ns-a"]}],
        "warehouse": {"path": str(tmp_path / "warehouse")},
    }
    config = parse_config(yaml.safe_dump(doc))
    warehouse = Warehouse.at(tmp_path / "warehouse")
    metered = [date(2026, 11, 1) + timedelta(days=i) for i in range(days)]
    for day in metered:
        warehouse.write_day(MARTS, "mig_slice_usage", "c1", day, one_day(day))
    layout = Views(warehouse, config).mig_layout(Viewer("ops"), Filters(Period(2026, 11)))
    got = {row["mig_profile"]: row for row in layout.to_dicts()}

    # By hand: the GPU's observed seconds are every day's; the 2g.20gb is held on the odd days.
    total = sum(observed(d.day) for d in metered)
    held_2g = sum(observed(d.day) for d in metered if d.day % 2 == 1)
    expected = {
        "3g.40gb": {"busy": Fraction(3, 2), "held_idle": Fraction(3, 2), "free": 0, "unpartitioned": 0},
        "2g.20gb": {
            "busy": 0,
            "held_idle": Fraction(2 * held_2g, total),
            "free": Fraction(2 * (total - held_2g), total),
            "unpartitioned": 0,
        },
        "unpartitioned": {"busy": 0, "held_idle": 0, "free": 0, "unpartitioned": Fraction(2)},
    }
    if days == 7:  # days 1, 3, 5, 7 held (day 2 is half observed): 4 × 86,400 of 6.5 × 86,400
        assert expected["2g.20gb"]["held_idle"] == Fraction(16, 13)
    for profile, shares in expected.items():
        for share, value in shares.items():
            assert got[profile][f"{share}_slices"] == pytest.approx(float(value), abs=1e-9), (profile, share)
    every = sum(
        got[p][f"{s}_slices"] for p in expected for s in ("busy", "held_idle", "free", "unpartitioned")
    )
    assert every == pytest.approx(7.0)
    assert got["3g.40gb"]["held_slice_hours"] == pytest.approx(3 * total / 3600)
