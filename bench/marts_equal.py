"""Whether two bench workspaces metered one day to the same marts: every stored mart of the day read from each
warehouse and compared row for row (rows sorted by every column, so that the order rows were written in does
not count; a float must be equal to the bit). What "marts identical before and after a change" means in
bench/README.md: meter the day in two workspaces (before and after the change, or over the same rows stored two
ways) with `bench.fleet step meter`, then

    .venv/bin/python -m bench.marts_equal --work /var/tmp/gb/fleet-10000 --against /var/tmp/gb2/fleet-10000 \
        --day 2026-11-01 --result marts.json

It prints one line per mart and exits 1 where any differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gpumeter.config import load_config
from gpumeter.models.partition import ZONES
from gpumeter.models.project import load_models
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse


def _mart(work: Path, table: str, day: date) -> pa.Table | None:
    """The mart's rows of the day in the workspace's warehouse (its config's first cluster); None if not
    stored."""
    config = load_config(work / "config.yaml")
    files = Warehouse.of(config.warehouse).day_files(MARTS, table, config.clusters[0].name, day)
    return pa.concat_tables(pq.read_table(f) for f in files) if files else None


def _sorted(rows: pa.Table) -> pa.Table:
    return rows.sort_by([(name, "ascending") for name in rows.column_names]).combine_chunks()


def compare(work: Path, against: Path, day: date) -> dict[str, Any]:
    """Each mart of the day: its rows in either workspace and whether they are the same rows."""
    marts: dict[str, dict[str, Any]] = {}
    for model in load_models():
        if ZONES[model.layer] != MARTS:
            continue
        a, b = _mart(work, model.table, day), _mart(against, model.table, day)
        same = a is not None and b is not None and a.schema == b.schema and _sorted(a).equals(_sorted(b))
        marts[model.table] = {
            "rows": a.num_rows if a is not None else None,
            "rows_against": b.num_rows if b is not None else None,
            "identical": same,
        }
    return {
        "step": "marts_equal",
        "work": str(work),
        "against": str(against),
        "day": day.isoformat(),
        "marts": marts,
        "identical": all(m["identical"] for m in marts.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.marts_equal", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, type=Path, help="a metered bench workspace")
    parser.add_argument("--against", required=True, type=Path, help="the workspace to compare it with")
    parser.add_argument("--day", required=True, type=date.fromisoformat, help="the metered day, YYYY-MM-DD")
    parser.add_argument("--result", type=Path, help="also write the comparison here as JSON")
    args = parser.parse_args(argv)
    result = compare(args.work, args.against, args.day)
    for table, mart in result["marts"].items():
        said = "identical" if mart["identical"] else "DIFFERENT (or missing)"
        print(f"{table:<24} {mart['rows'] or 0:>10,} rows  {mart['rows_against'] or 0:>10,} rows  {said}")
    print("every mart identical" if result["identical"] else "the marts differ")
    if args.result:
        args.result.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
