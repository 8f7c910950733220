"""Kueue quotas (stg_kueue_queue_samples, mart_queue_quota_usage; docs/tariffs.md) on a hand-made day, and on
the simulator's Kueue series.

Δ = 60 s (tests/test_rules.py conventions). Each Kueue gauge sample stands for Δ seconds, as every raw sample
does (R1), and belongs to the day holding its timestamp (R2).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import yaml

import gpumeter_sim as simulator
from gpumeter.config import ConfigError, parse_config
from gpumeter.ingest.contract import day_bounds_ms
from gpumeter.models.day_checks import kueue_sampled_once_per_interval
from gpumeter.models.runner import meter_day
from tests.test_properties import BASE_CONFIG, raw_day
from tests.test_rules import H100, P1, P2, factory, make_config, meter, one, rows

D = Decimal
TENANTS: list[dict[str, Any]] = [
    {"name": "team-a", "namespaces": ["ns-a"], "kueue_cluster_queues": ["cq-a", "cq-a2"]},
    {"name": "team-b", "namespaces": ["ns-b"]},
]


def quota_day() -> Any:
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", range(10), util=50, pod=P1)  # team-a: 10 × 60 = 600 GPU-seconds
    f.samples("GPU-2", range(5), util=50, pod=P2)  # team-b: 300 GPU-seconds, no queue mapped
    # cq-a: quota 4 GPUs all day long (10 samples), usage 2 then 6 (2 borrowed), borrowing limit 2.
    f.kueue_cluster_queue(
        "cq-a", -1, nominal_quota=100, usage=100, cohort="research"
    )  # lookback: not the day
    for i in range(10):
        usage = 2 if i < 5 else 6
        f.kueue_cluster_queue(
            "cq-a", i, nominal_quota=4, usage=usage, borrowing_limit=2, flavor="h100", cohort="research"
        )
    f.kueue_cluster_queue(
        "cq-a", 0, nominal_quota=4, usage=2, borrowing_limit=2, flavor="h100", cohort="research"
    )
    f.kueue_cluster_queue("cq-a", f.samples_per_day, nominal_quota=100, flavor="h100")  # next midnight (R2)
    f.kueue_cluster_queue("cq-a", 0, nominal_quota=32, resource="cpu", flavor="h100", cohort="research")
    f.kueue_cluster_queue("cq-a2", 0, nominal_quota=1, usage=1)
    for i in range(3):
        f.kueue_cluster_queue("cq-x", i, nominal_quota=1, flavor="a100")  # nobody's queue, no usage series
    f.kueue_local_queue("ns-a", "lq-a", 0, usage=2, flavor="h100")
    return f


def test_quota_usage_and_borrowing_of_a_hand_made_day() -> None:
    out = meter(quota_day(), make_config(tenants=TENANTS))
    gpu = one(out, "mart_queue_quota_usage", cluster_queue="cq-a", resource="nvidia.com/gpu")
    assert (gpu["flavor"], gpu["cohort"], gpu["tenant"], gpu["samples"]) == ("h100", "research", "team-a", 10)
    assert gpu["nominal_quota_seconds"] == D(2400)  # 4 GPUs × 10 samples × 60 s
    assert gpu["used_seconds"] == D(2400)  # 2 × 5 × 60 + 6 × 5 × 60
    assert gpu["borrowed_seconds"] == D(600)  # (6 − 4) × 5 × 60
    assert gpu["borrowing_limit_seconds"] == D(1200)  # 2 × 10 × 60
    assert gpu["peak_used"] == 6
    assert gpu["tenant_metered_gpu_seconds"] == D(600)  # what gpumeter metered for team-a that day

    cpu = one(out, "mart_queue_quota_usage", cluster_queue="cq-a", resource="cpu")
    assert cpu["nominal_quota_seconds"] == D(1920)  # 32 × 60
    assert cpu["used_seconds"] is None and cpu["borrowing_limit_seconds"] is None  # no such series

    second = one(out, "mart_queue_quota_usage", cluster_queue="cq-a2")
    assert (second["tenant"], second["tenant_metered_gpu_seconds"]) == ("team-a", D(600))  # per tenant

    nobody = one(out, "mart_queue_quota_usage", cluster_queue="cq-x")
    assert nobody["nominal_quota_seconds"] == D(180)  # 1 × 3 × 60
    assert nobody["used_seconds"] is None and nobody["borrowed_seconds"] == D(0)
    assert nobody["tenant"] is None and nobody["tenant_metered_gpu_seconds"] is None
    assert out["mart_queue_quota_usage"].num_rows == 4


def test_a_queue_scraped_by_two_jobs_reads_twice_and_its_check_warns() -> None:
    """Each Kueue sample stands for Δ (docs/tariffs.md), so a queue Kueue's two scrape jobs both report all day
    has twice the day's scrape intervals in samples and twice its quota-seconds: the check warns and names
    it. A queue sampled once every Δ passes."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=P1)
    for k in range(f.samples_per_day):
        f.kueue_cluster_queue("cq-once", k, nominal_quota=4, target="kueue/10.0.1.1:8080")
        for target, offset_ms in (("kueue/10.0.1.1:8080", 0), ("kueue-2/10.0.1.2:8080", 20_000)):
            f.kueue_cluster_queue("cq-twice", k, nominal_quota=4, offset_ms=offset_ms, target=target)
    config = make_config(tenants=TENANTS)
    out = meter(f, config)

    once = one(out, "mart_queue_quota_usage", cluster_queue="cq-once")
    assert (once["samples"], once["nominal_quota_seconds"]) == (1440, D(4 * 86_400))
    twice = one(out, "mart_queue_quota_usage", cluster_queue="cq-twice")
    assert (twice["samples"], twice["nominal_quota_seconds"]) == (2880, D(2 * 4 * 86_400))
    check = kueue_sampled_once_per_interval({"c1": out}, config)
    assert not check.passed and check.severity == "WARN"
    assert check.figures["samples_by_queue"] == {"c1/cq-twice/default-flavor/nvidia.com/gpu": 2880}


def test_a_queue_scraped_every_other_interval_reads_half_and_its_check_warns() -> None:
    """Each Kueue sample stands for Δ (docs/tariffs.md), so a queue scraped every 2 Δ (Kueue's own scrape
    interval set to 120 s, Δ 60 s) has half the day's samples and reads half its quota-seconds: its samples
    lie 120 s apart, and the check names it. The queue scraped every Δ passes, 60 s apart."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=P1)
    for k in range(f.samples_per_day):
        f.kueue_cluster_queue("cq-once", k, nominal_quota=4, target="kueue/10.0.1.1:8080")
        if k % 2 == 0:
            f.kueue_cluster_queue("cq-slow", k, nominal_quota=4, target="kueue-slow/10.0.1.2:8080")
    config = make_config(tenants=TENANTS)
    out = meter(f, config)

    once = one(out, "mart_queue_quota_usage", cluster_queue="cq-once")
    assert (once["samples"], once["sample_interval_s"]) == (1440, 60.0)
    slow = one(out, "mart_queue_quota_usage", cluster_queue="cq-slow")
    assert (slow["samples"], slow["sample_interval_s"]) == (720, 120.0)
    assert slow["nominal_quota_seconds"] == D(4 * 43_200)  # 720 samples × 60 s × 4 GPUs
    check = kueue_sampled_once_per_interval({"c1": out}, config)
    assert not check.passed and check.severity == "WARN"
    assert check.figures["seconds_between_samples_by_queue"] == {
        "c1/cq-slow/default-flavor/nvidia.com/gpu": 120.0
    }
    assert check.figures["samples_by_queue"] == {}


def test_the_kueue_check_passes_on_the_hand_made_day() -> None:
    config = make_config(tenants=TENANTS)
    assert kueue_sampled_once_per_interval({"c1": meter(quota_day(), config)}, config).passed


def test_local_queue_usage_is_staged_with_its_namespace() -> None:
    out = meter(quota_day(), make_config(tenants=TENANTS))
    local = one(out, "stg_kueue_queue_samples", quantity="local_queue_usage")
    assert (local["namespace"], local["local_queue"], local["flavor"], local["value"]) == (
        "ns-a",
        "lq-a",
        "h100",
        2,
    )
    # cq-a's quota: 10 GPU samples of the day (the copy at index 0 is one sample, R1; the lookback and the
    # next midnight are other days, R2) + 1 CPU sample.
    assert len(rows(out, "stg_kueue_queue_samples", cluster_queue="cq-a", quantity="nominal_quota")) == 11


def test_a_day_without_kueue_series_has_an_empty_quota_mart() -> None:
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(3), util=50, pod=P1)
    out = meter(f, make_config(tenants=TENANTS))
    table = out["mart_queue_quota_usage"]
    assert table.num_rows == 0
    assert {"cluster_queue", "nominal_quota_seconds", "tenant_metered_gpu_seconds"} <= set(table.column_names)


def test_a_queue_listed_by_two_tenants_is_one_clear_error() -> None:
    text = (
        "clusters: [{name: c1, source: {kind: parquet, path: x}}]\n"
        "tenants:\n"
        "  - {name: a, kueue_cluster_queues: [cq]}\n"
        "  - {name: b, kueue_cluster_queues: [cq]}\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="t.yaml")
    assert [msg for _, msg in caught.value.problems] == [
        "Kueue ClusterQueue 'cq' is listed by tenants 'a' and 'b'; a queue's quota belongs to one tenant"
    ]


def test_the_simulators_kueue_series_through_the_quota_mart() -> None:
    """The simulator's Kueue gauges (one ClusterQueue per tenant, named after it; `sandbox` is nobody's):
    each mart figure recomputed independently from the raw samples (value × Δ per in-day sample, R1/R2) and
    from mart_device_seconds."""

    spec = replace(simulator.demo_spec(), cluster="prop", days=2, scrape_interval_s=300)
    doc = yaml.safe_load(yaml.safe_dump(BASE_CONFIG.model_dump(mode="json")))
    doc["scrape_interval_seconds"] = 300
    for tenant in doc["tenants"]:
        tenant["kueue_cluster_queues"] = [tenant["name"]]
    config = parse_config(yaml.safe_dump(doc))
    day = spec.start + timedelta(days=1)
    raw = raw_day(spec, day)
    out = meter_day(raw, config, spec.cluster, day)

    start_ms, end_ms = day_bounds_ms(day)
    expected: dict[tuple[str, str], Decimal] = {}
    for row in raw.kube.to_pylist():
        if row["metric"].startswith("kueue_cluster_queue") and start_ms <= row["ts_ms"] < end_ms:
            key = (json.loads(row["labels"])["cluster_queue"], row["metric"])
            expected[key] = expected.get(key, D(0)) + D(str(row["value"])) * 300
    metered: dict[str, Decimal] = {}
    for row in out["mart_device_seconds"].to_pylist():
        metered[row["tenant"]] = metered.get(row["tenant"], D(0)) + row["gpu_seconds"]

    found = out["mart_queue_quota_usage"].to_pylist()
    assert any(r["tenant"] for r in found) and any(r["tenant"] is None for r in found)  # both kinds seen
    assert sorted(r["cluster_queue"] for r in found) == sorted({queue for queue, _ in expected})
    tenants = {t.name for t in config.tenants}
    for row in found:
        queue = row["cluster_queue"]
        assert row["nominal_quota_seconds"] == expected[(queue, "kueue_cluster_queue_nominal_quota")]
        assert row["used_seconds"] == expected[(queue, "kueue_cluster_queue_resource_usage")]
        assert row["borrowing_limit_seconds"] == expected[(queue, "kueue_cluster_queue_borrowing_limit")]
        assert row["used_seconds"] <= row["nominal_quota_seconds"] and row["borrowed_seconds"] == 0
        assert (row["cohort"], row["flavor"], row["resource"]) == (
            "ai-factory",
            "default-flavor",
            "nvidia.com/gpu",
        )
        if queue in tenants:
            assert row["tenant"] == queue
            assert row["tenant_metered_gpu_seconds"] == metered.get(queue, D(0))
        else:
            assert row["tenant"] is None and row["tenant_metered_gpu_seconds"] is None
