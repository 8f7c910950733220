"""Injection: SQL only with bound parameters or validated identifiers, and no spreadsheet formula reaches an
invoice CSV cell (docs/reliability.md lists every SQL string built in gpumeter/ and why it is safe)."""

from __future__ import annotations

import csv
import io
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from gpumeter.billing.invoices import Period, build_invoice_lines, invoice_csv
from gpumeter.config import ConfigError
from gpumeter.models.project import AccountingError, load_models
from gpumeter.models.runner import _identifier, meter_day
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse
from tests.test_rules import H100, make_config

DAY = date(2026, 11, 1)
HOSTILE_SQL = [
    "x; drop table raw_dcgm_samples; --",
    'x" as select 1; --',
    "x' or '1'='1",
    "Stg_Upper",
    "1starts_with_digit",
    "",
    "name with space",
    "näme",
]
FORMULAS = [
    '=HYPERLINK("http://evil.example","pay")',
    "+1+1",
    "-2+3",
    "@SUM(A1:A9)",
]
# A tab or carriage return before a formula never reaches an invoice: config check refuses a control character
# in a text printed there.
CONTROL_FORMULAS = ["\t=1", "\r=1"]


@pytest.mark.parametrize("name", HOSTILE_SQL)
def test_a_model_name_that_is_not_a_plain_identifier_is_refused(name: str) -> None:
    with pytest.raises(AccountingError, match="not a plain identifier"):
        _identifier(name)


def test_every_shipped_model_name_is_a_plain_identifier() -> None:
    assert all(_identifier(m.name) == m.name for m in load_models())


def test_views_are_made_only_for_table_names_and_paths_are_escaped(tmp_path: Path) -> None:
    """The warehouse root has a quote in its path (escaped into the view's string literal); a folder whose
    name is not a table name is not turned into a view (its name would be an identifier)."""
    root = tmp_path / 'it\'s a "warehouse"'
    warehouse = Warehouse.at(root)
    warehouse.write_day(MARTS, "pool_daily_cost", "c1", DAY, pa.table({"pool_cost": [1.5]}))
    evil = 'evil"; drop view pool_daily_cost; --'
    warehouse.write_day(MARTS, evil, "c1", DAY, pa.table({"x": [1]}))
    con = warehouse.connect()
    assert con.execute("select sum(pool_cost) from pool_daily_cost").fetchone() == (1.5,)
    views = {
        name for (name,) in con.execute("select view_name from duckdb_views() where not internal").fetchall()
    }
    assert views == {"pool_daily_cost"}
    con.close()


@pytest.mark.parametrize("value", ["'); drop table raw_dcgm_samples; --", '" or 1=1 --', "$1", "?"])
def test_label_values_shaped_like_sql_are_data(value: str) -> None:
    """A namespace/pod label is a value in every query: it comes back unchanged, the raw table is intact."""
    from tests.test_rules import factory

    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(3), util=50, pod=(value, value, None))
    out = meter_day(f.build(), make_config(), "c1", DAY)
    row = out["mart_device_seconds"].to_pylist()[0]
    assert (row["namespace"], row["pod"], row["sample_count"]) == (value, value, 3)


@pytest.mark.parametrize("formula", CONTROL_FORMULAS)
def test_a_formula_behind_a_control_character_is_refused_by_the_config(formula: str) -> None:
    with pytest.raises(ConfigError, match="control character"):
        make_config(tenants=[{"name": "team-a", "namespaces": ["ns-a"], "cost_center": formula}])


@pytest.mark.parametrize("formula", FORMULAS)
def test_formulas_in_cost_center_and_gpu_model_are_neutralized_in_the_invoice_csv(formula: str) -> None:
    """A cost center and a rate-card model name come from config as free text and reach the invoice CSV
    (output contract): a cell starting like a formula is prefixed with ' so a spreadsheet shows it as text."""
    from tests.test_rules import factory

    config = make_config(
        tenants=[{"name": "team-a", "namespaces": ["ns-a"], "cost_center": formula}],
        rate_card={"models": [{"model": formula, "aliases": [H100], "price_per_gpu_hour": 3.6}]},
    )
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=("ns-a", "p1", "main"))
    out = meter_day(f.build(), config, "c1", DAY)
    lines = build_invoice_lines(out["mart_tenant_daily_cost"], config, Period.parse("2026-11"))
    text = invoice_csv(lines, config.minor_unit)
    rows = list(csv.DictReader(io.StringIO(text)))
    team = [r for r in rows if r["tenant"] == "team-a"]
    assert team, text
    for row in rows:
        assert row["gpu_model"] == "'" + formula
    assert all(r["cost_center"] == "'" + formula for r in team)
    for row in rows:  # no cell of any line starts like a formula
        for column, cell in row.items():
            if column != "amount":
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (column, cell)
