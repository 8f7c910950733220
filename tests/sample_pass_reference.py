"""The per-sample SQL the sample pass replaced (tests/reference_sql/), as a model list for `meter_day(models=...)`,
and a comparison of two runs' tables: what tests/test_sample_pass.py holds the pass to."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import yaml

from gpumeter.config import Config
from gpumeter.ingest.contract import RawDay, RawFiles
from gpumeter.ingest.schema import RAW_TABLES
from gpumeter.models.project import Column, Model, _ordered, _referenced, load_models
from gpumeter.models.runner import meter_day

REFERENCE = Path(__file__).parent / "reference_sql"
# The pass's tables that the reference SQL has no counterpart of: it reads the series samples instead.
PASS_ONLY = (
    "int_dcgm_copied_samples",
    "int_gpu_samples_on_several_nodes",
    "int_shared_sample_series_holders",
    "int_vgpu_copy_disagreements",
)
LAYERS_COMPARED = ("intermediate", "marts")


def reference_models() -> tuple[Model, ...]:
    """The product's models with the pass's models replaced by the reference SQL (stg_dcgm_samples back)."""
    product = {m.name: m for m in load_models()}
    names = set(product) | set(RAW_TABLES) | {"stg_dcgm_samples"}
    models = {name: m for name, m in product.items() if name not in PASS_ONLY}
    declared = yaml.safe_load((REFERENCE / "schema.yml").read_text(encoding="utf-8"))["models"]
    for path in sorted(REFERENCE.glob("*.sql")):
        sql = path.read_text(encoding="utf-8")
        deps = tuple(sorted(_referenced(sql, names) - {path.stem}))
        if path.stem in product:
            models[path.stem] = replace(product[path.stem], sql=sql, deps=deps)
        else:
            (entry,) = [d for d in declared if d["name"] == path.stem]
            models[path.stem] = Model(
                name=path.stem,
                layer="staging",
                deps=deps,
                sql=sql,
                description=entry["description"],
                grain=tuple(entry["grain"]),
                columns=tuple(Column(c["name"], c["data_type"], c["description"]) for c in entry["columns"]),
            )
    return _ordered(models)


def differences(raw: RawDay | RawFiles, config: Config, cluster: str, day: date) -> dict[str, str]:
    """{table: what differs} between the day metered by the pass and by the reference SQL, every intermediate
    table and mart both have, row for row (a multiset: no order)."""
    ours = meter_day(raw, config, cluster, day, keep_layers=LAYERS_COMPARED)
    theirs = meter_day(raw, config, cluster, day, keep_layers=LAYERS_COMPARED, models=reference_models())
    return compare(ours, theirs)


def compare(ours: dict[str, pa.Table], theirs: dict[str, pa.Table]) -> dict[str, str]:
    found: dict[str, str] = {}
    con = duckdb.connect()
    for name in sorted(set(ours) | set(theirs)):
        if name in PASS_ONLY:
            continue
        if name not in ours or name not in theirs:
            found[name] = "in one run only"
            continue
        a, b = ours[name], theirs[name]
        if a.schema != b.schema:
            found[name] = f"columns differ: {a.schema} against {b.schema}"
            continue
        con.register("a", a)
        con.register("b", b)
        extra = con.sql("select count(*) from (select * from a except all select * from b)").fetchall()[0]
        missing = con.sql("select count(*) from (select * from b except all select * from a)").fetchall()[0]
        if (extra, missing) != ((0,), (0,)):
            example = con.sql(
                "(select 'pass' as run, * from (select * from a except all select * from b) limit 3) "
                "union all (select 'reference', * from (select * from b except all select * from a) limit 3)"
            ).fetchall()
            found[name] = (
                f"{extra[0]} rows only in the pass's, {missing[0]} only in the reference's: {example}"
            )
        con.unregister("a")
        con.unregister("b")
    return found
