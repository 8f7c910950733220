"""The per-sample SQL the sample pass replaced (tests/reference_sql/, and the places of two models that read the
series' samples, PUT_BACK), as a model list for `meter_day(models=...)`, and a comparison of two runs' tables:
what tests/test_sample_pass.py holds the pass to."""

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
from gpumeter.models.python_models import SAMPLE_PASS_MODELS
from gpumeter.models.runner import meter_day

REFERENCE = Path(__file__).parent / "reference_sql"
# The pass's tables that the reference SQL has no counterpart of (it reads the series samples instead); the
# others it restates as SQL of their own.
PASS_ONLY = tuple(m for m in tuple(SAMPLE_PASS_MODELS)[2:] if not (REFERENCE / f"{m}.sql").exists())
LAYERS_COMPARED = ("intermediate", "marts")
# The reference's GPU samples before their MIG layouts, which it takes from its instance samples (which read
# these): the product's int_gpu_samples without that column.
GPU_SAMPLES_BEFORE_LAYOUTS = "reference_gpu_samples"
# A MIG layout's key is a hash of its instances: the pass's and the reference's are two hashes of the same sets,
# so tables are compared without it (the marts, which sum by layout, hold the sets equal).
LAYOUT_KEY = "mig_layout_key"
# Models the pass changed only where they read the series' samples: their product SQL with those places put
# back as they were (each product fragment must be found once, so that a change to it stops the test).
PUT_BACK: dict[str, list[tuple[str, str]]] = {
    "int_keyed_device_holders": [
        (
            "with series_holders as (\n",
            """with shared_samples as materialized (
    select ts_ms, device_key from int_keyed_device_samples where labelled and holder_key is null
),
series_holders as (
""",
        ),
        (
            "    select ts_ms, device_key, holder_key from int_shared_sample_series_holders\n",
            """    select distinct s.ts_ms, d.device_key, d.holder_key
    from stg_dcgm_samples as s
    join (
        select series_key, device_key, holder_key
        from stg_dcgm_series
        where holder_key is not null and device_key in (select device_key from shared_samples)
    ) as d on d.series_key = s.series_key
    semi join shared_samples as m on m.device_key = d.device_key and m.ts_ms = s.ts_ms
    where s.in_day and s.observed
""",
        ),
    ],
    "int_dcgm_quarantine": [
        (
            "    select ts_ms, series_key from int_dcgm_copied_samples\n",
            "    select ts_ms, series_key from stg_dcgm_samples where has_copies\n",
        ),
        (
            """    select g.cluster, g.uuid, s.ts_ms, n.node as billed_node
    from int_gpu_samples_on_several_nodes as s
    join (select distinct gpu_key, cluster, uuid from stg_dcgm_series) as g using (gpu_key)
    join stg_dcgm_nodes as n on n.node_key = s.billed_node_key
""",
            """    select d.cluster, d.uuid, s.ts_ms, min(d.node) as billed_node
    from stg_dcgm_samples as s
    join stg_dcgm_series as d using (series_key)
    where s.observed and d.uuid in (
        select uuid from stg_dcgm_series
        group by uuid
        having min(coalesce(node, chr(0))) <> max(coalesce(node, chr(0)))
    )
    group by all
    having min(coalesce(d.node, chr(0))) <> max(coalesce(d.node, chr(0)))
""",
        ),
    ],
}


def _put_back(name: str, sql: str) -> str:
    for ours, theirs in PUT_BACK[name]:
        assert sql.count(ours) == 1, f"{name}: the pass's fragment is not in its SQL once: {ours!r}"
        sql = sql.replace(ours, theirs)
    return sql


def reference_models() -> tuple[Model, ...]:
    """The product's models with the pass's models replaced by the reference SQL (stg_dcgm_samples back)."""
    product = {m.name: m for m in load_models()}
    names = set(product) | set(RAW_TABLES) | {"stg_dcgm_samples", GPU_SAMPLES_BEFORE_LAYOUTS}
    models = {name: m for name, m in product.items() if name not in PASS_ONLY}
    declared = yaml.safe_load((REFERENCE / "schema.yml").read_text(encoding="utf-8"))["models"]
    sources = {path.stem: path.read_text(encoding="utf-8") for path in sorted(REFERENCE.glob("*.sql"))}
    sources |= {name: _put_back(name, product[name].sql or "") for name in PUT_BACK}
    for stem, sql in sources.items():
        deps = tuple(sorted(_referenced(sql, names) - {stem}))
        if stem in product:
            models[stem] = replace(product[stem], sql=sql, deps=deps)
        elif stem == GPU_SAMPLES_BEFORE_LAYOUTS:
            gpu_samples = product["int_gpu_samples"]
            columns = tuple(c for c in gpu_samples.columns if c.name != LAYOUT_KEY)
            models[stem] = replace(
                gpu_samples, name=stem, layer="staging", sql=sql, deps=deps, columns=columns, assertions=()
            )
        else:
            (entry,) = [d for d in declared if d["name"] == stem]
            models[stem] = Model(
                name=stem,
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
        if LAYOUT_KEY in a.column_names and LAYOUT_KEY in b.column_names:
            a, b = a.drop_columns([LAYOUT_KEY]), b.drop_columns([LAYOUT_KEY])
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
