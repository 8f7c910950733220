"""Fuzz and property tests over the parsers and the accounting under hostile inputs (hypothesis).

- The config parser and the DRA object parsers: any input gives a value or their one error type
  (ConfigError, K8sObjectError), never another exception.
- meter_day on raw tables with hostile values, duplicates, rows without UUID, foreign clusters, timestamps far
  outside the day and one UUID on two nodes: no exception, R11 (categories sum to capacity), R13
  (conservation), R15 (a second run is identical), R1 (row order does not matter), and nothing is silently
  dropped: every raw row that reaches no sample is a quarantine row, and every sample of the day a valid row
  shows is observed.

Examples per test: $GPUMETER_PROPERTY_EXAMPLES (default 8), as tests/test_properties.py.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import defaultdict
from datetime import date
from decimal import Decimal
from typing import Any

import pyarrow as pa
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpumeter.config import ConfigError, parse_config
from gpumeter.ingest.contract import RawDay, day_bounds_ms
from gpumeter.ingest.k8s_objects import K8sObjectError, parse_resource_claims, parse_resource_slices
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_METRICS,
    DCGM_POWER,
    RAW_DCGM_SCHEMA,
)
from gpumeter.models.runner import meter_day
from tests.builders import FactoryBuilder
from tests.test_rules import A100, H100, make_config

EXAMPLES = int(os.environ.get("GPUMETER_PROPERTY_EXAMPLES", "8"))
FUZZ = settings(
    max_examples=EXAMPLES * 25,  # the parsers are fast: more cases for the same time
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DAY = date(2026, 11, 1)
DAY_START, DAY_END = day_bounds_ms(DAY)
SCRAPE_MS = 60_000

# --- parsers ------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)
CONFIG_KEYS = [
    "clusters",
    "tenants",
    "rate_card",
    "models",
    "name",
    "source",
    "kind",
    "path",
    "url",
    "namespaces",
    "price_per_gpu_hour",
    "aliases",
    "model",
    "mig_profiles",
    "pod_labels",
    "key",
    "value",
    "idle_policy",
    "scrape_interval_seconds",
    "currency",
    "warehouse",
    "bearer_token_env",
    "cost_center",
]
config_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(CONFIG_KEYS), st.text(max_size=8)), children, max_size=6),
    ),
    max_leaves=30,
)
VALID_CONFIG = {
    "clusters": [{"name": "c1", "source": {"kind": "parquet", "path": "/nonexistent"}}],
    "rate_card": {"models": [{"model": "H100-80GB", "aliases": [H100], "price_per_gpu_hour": 3.6}]},
    "tenants": [{"name": "team-a", "namespaces": ["ns-a"]}],
}


def _mutate(doc: Any, path: list[int | str], replacement: Any) -> Any:
    """`doc` with the subtree at `path` (indices into its containers, wrapped) replaced."""
    if not path or not isinstance(doc, dict | list) or not doc:
        return replacement
    keys = list(doc) if isinstance(doc, dict) else list(range(len(doc)))
    key = keys[hash(path[0]) % len(keys)]
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[key] = _mutate(doc[key], path[1:], replacement)  # type: ignore[index]
    return copy


@FUZZ
@given(
    text=st.one_of(st.text(max_size=400), config_values.map(lambda v: yaml.safe_dump(v, allow_unicode=True)))
)
def test_any_config_text_parses_or_is_one_config_error(text: str) -> None:
    try:
        parse_config(text, source="fuzz.yaml")
    except ConfigError as exc:
        assert "fuzz.yaml" in str(exc)  # every problem names the file


@FUZZ
@given(path=st.lists(st.integers(0, 9), max_size=5), replacement=config_values)
def test_a_valid_config_with_any_part_replaced_parses_or_is_one_config_error(
    path: list[int], replacement: Any
) -> None:
    text = yaml.safe_dump(_mutate(VALID_CONFIG, list(path), replacement), allow_unicode=True)
    try:
        parse_config(text, source="fuzz.yaml")
    except ConfigError as exc:
        assert exc.problems and all(place is not None for place, _ in exc.problems)


CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimList",
    "items": [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}],
            },
        }
    ],
}
SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSliceList",
    "items": [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-1"}}}
                ],
            },
        }
    ],
}


@FUZZ
@given(
    which=st.sampled_from(["claims", "slices"]),
    path=st.lists(st.integers(0, 9), max_size=8),
    replacement=json_values,
)
def test_dra_objects_with_any_part_replaced_parse_or_are_one_k8s_error(
    which: str, path: list[int], replacement: Any
) -> None:
    base, parse = (CLAIM, parse_resource_claims) if which == "claims" else (SLICE, parse_resource_slices)
    doc = _mutate(base, list(path), replacement)
    try:
        table = parse(doc, "c1", "fuzz.json")  # type: ignore[arg-type]
    except K8sObjectError as exc:
        assert "fuzz.json" in str(exc)
    else:
        assert isinstance(table, pa.Table)


@FUZZ
@given(doc=json_values)
def test_any_json_as_dra_objects_parses_or_is_one_k8s_error(doc: Any) -> None:
    for parse in (parse_resource_claims, parse_resource_slices):
        try:
            parse(doc, "c1", "fuzz.json")
        except K8sObjectError as exc:
            assert "fuzz.json" in str(exc)


# --- the accounting under hostile raw samples ---------------------------------------------------

hostile_values = st.one_of(
    st.floats(0, 100),
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, -1e-9, 0.0, 100.0, 101.0, 1e300, -1e300, 2.0]),
    st.none(),
)
GPUS = [("n1", "GPU-1", H100), ("n1", "GPU-2", H100), ("n2", "GPU-M", A100)]
MIG = [("1", "3g.40gb"), ("2", "2g.20gb"), ("3", "1g.10gb")]
PODS = [None, ("ns-a", "p1", "main"), ("ns-b", "p2", "main"), ("ns-x", "p3", None)]


@st.composite
def hostile_days(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Raw DCGM rows of a small pool (two H100s, one MIG A100), each sample with a hostile value now and
    then, plus exact and disagreeing copies, corrupt magnitudes, rows without UUID, of another cluster, far
    outside the day, on another node, or with half the MIG labels."""
    f = FactoryBuilder("c1", DAY, scrape_s=60)
    rows: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 25))):
        node, uuid, model = draw(st.sampled_from(GPUS))
        index = draw(st.integers(-2, 12))  # the lookback and a bit past midnight's first samples
        row: dict[str, Any] = dict.fromkeys(RAW_DCGM_SCHEMA.names)
        row.update(cluster="c1", ts_ms=f.ts(index), hostname=node, uuid=uuid, model_name=model, gpu="0")
        row.update(metric=draw(st.sampled_from(DCGM_METRICS)), value=draw(hostile_values))
        if uuid == "GPU-M" and draw(st.booleans()):
            row["gpu_i_id"], row["gpu_i_profile"] = draw(st.sampled_from(MIG))
        pod = draw(st.sampled_from(PODS))
        if pod:
            row["namespace"], row["pod"], row["container"] = pod
        damage = draw(
            st.sampled_from(
                ["none"] * 6
                + ["copy", "conflict", "huge", "no_uuid", "other_cluster", "far", "other_node", "half_mig"]
            )
        )
        if damage == "copy":
            rows.append(dict(row))
        elif damage == "conflict":
            rows.append({**row, "value": draw(hostile_values)})
        elif damage == "huge":
            row["metric"] = draw(st.sampled_from([DCGM_FB_USED, DCGM_ENERGY, DCGM_POWER]))
            row["value"] = 1e300
        elif damage == "no_uuid":
            row["uuid"] = None
        elif damage == "other_cluster":
            row["cluster"] = "elsewhere"
        elif damage == "far":
            row["ts_ms"] = draw(st.sampled_from([None, 0, -(2**40), 2**62, DAY_END + 86_400_000]))
        elif damage == "other_node":
            row["hostname"] = "n9"
        elif damage == "half_mig":
            row["gpu_i_id"], row["gpu_i_profile"] = "7", None
        rows.append(row)
    return rows


def _raw(rows: list[dict[str, Any]]) -> RawDay:
    f = FactoryBuilder("c1", DAY, scrape_s=60)
    raw = f.build()
    return RawDay(pa.Table.from_pylist(rows, schema=RAW_DCGM_SCHEMA), raw.kube)


# The readings that make a GPU observed (R4, docs/rules.md), written again from the doc.
OBSERVING = {DCGM_GPU_UTIL, DCGM_GR_ENGINE_ACTIVE, DCGM_FB_USED, DCGM_ENERGY}


def _dropped_by_oracle(row: dict[str, Any]) -> bool:
    """The drop rules of docs/reliability.md, written again from the doc (not from the SQL)."""
    ts = row["ts_ms"]
    return (
        row["cluster"] != "c1"
        or ts is None
        or not (DAY_START - 2 * SCRAPE_MS <= ts < DAY_END)
        or row["uuid"] is None
        or (row["gpu_i_id"] is None) != (row["gpu_i_profile"] is None)
    )


def _total(table: pa.Table, column: str, **where: str) -> Decimal:
    return sum(
        (Decimal(r[column]) for r in table.to_pylist() if all(r[k] == v for k, v in where.items())),
        Decimal(0),
    )


@PROPERTY
@given(rows=hostile_days(), seed=st.integers(0, 2**16))
def test_hostile_samples_keep_every_invariant(rows: list[dict[str, Any]], seed: int) -> None:
    config = make_config(kube_lookback_seconds=60)  # lookback = max(60 s, 2Δ) = 2 samples
    out = meter_day(_raw(rows), config, "c1", DAY)

    # R13: charges + __unallocated__ + __idle__ = pool cost, exactly.
    assert _total(out["mart_tenant_daily_cost"], "amount") == _total(out["mart_pool_daily_cost"], "pool_cost")

    # R11: per node, the categories sum to its observed GPU-seconds exactly.
    by_node: dict[str | None, Decimal] = defaultdict(Decimal)
    for r in out["mart_stranded_capacity"].to_pylist():
        by_node[r["node"]] += r["gpu_seconds"]
    observed_by_node: dict[str | None, Decimal] = defaultdict(Decimal)
    for r in out["mart_pool_daily_cost"].to_pylist():  # a row per node and GPU model
        observed_by_node[r["node"]] += r["observed_gpu_seconds"]
    assert dict(by_node) == {node: s for node, s in observed_by_node.items() if s}

    # Nothing silently dropped: the dropped rows are the oracle's, each a quarantine row, and every GPU
    # sample of the day that a kept row of a reading the accounting uses shows is observed (once, R1; R4:
    # an XID or power row alone observes nothing, docs/rules.md).
    quarantine = out["int_dcgm_quarantine"].to_pylist()
    for reason in sorted({q["reason"] for q in quarantine}):  # --hypothesis-show-statistics: how often each
        event(f"quarantine reason {reason}")
    assert sum(q["action"] == "dropped" for q in quarantine) == sum(map(_dropped_by_oracle, rows))
    seen = {
        (r["uuid"], r["ts_ms"])
        for r in rows
        if not _dropped_by_oracle(r) and DAY_START <= r["ts_ms"] < DAY_END and r["metric"] in OBSERVING
    }
    uuids = {s["gpu_key"]: s["uuid"] for s in out["stg_dcgm_series"].to_pylist()}
    observed = {(uuids[g["gpu_key"]], g["ts_ms"]) for g in out["int_gpu_samples"].to_pylist()}
    assert observed == seen
    assert _total(out["mart_pool_daily_cost"], "observed_gpu_seconds") == 60 * len(seen)
    reported = sum(
        q["quarantined_samples"] + q["duplicate_samples"] for q in out["mart_data_quality"].to_pylist()
    )
    assert reported == len(quarantine)
    for q in out["mart_data_quality"].to_pylist():
        assert sum(v["samples"] for v in json.loads(q["quarantine_by_reason"]).values()) == (
            q["quarantined_samples"] + q["duplicate_samples"]
        )

    # R15 and R1: the same rows again, and in another order, give identical marts.
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    for again in (meter_day(_raw(rows), config, "c1", DAY), meter_day(_raw(shuffled), config, "c1", DAY)):
        for name, table in out.items():
            if name.startswith("mart_"):
                assert table.equals(again[name]), name
