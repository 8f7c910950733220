"""Property tests over random simulated factories: R1, R1a (kube exporters scraped by two jobs, restarted under
a new address, sharded by object), R11, R13, R15."""

import json
import os
import zlib
from dataclasses import replace
from datetime import date, timedelta
from decimal import Decimal

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpumeter_sim as simulator
from gpumeter.config import EXAMPLE_CONFIG, parse_config
from gpumeter.ingest.contract import RawDay, lookback_ms
from gpumeter.ingest.k8s_objects import parse_resource_claims, parse_resource_slices
from gpumeter.models.runner import meter_day

DAY = date(2026, 11, 1)
BASE_CONFIG = parse_config(
    EXAMPLE_CONFIG.read_text()
    .replace("path: source", "path: /nonexistent")
    .replace("name: demo", "name: prop")
)
PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("GPUMETER_PROPERTY_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def factories(draw: st.DrawFn) -> simulator.FactorySpec:
    base = simulator.demo_spec()
    return replace(
        base,
        cluster="prop",
        start=DAY,
        days=2,
        scrape_interval_s=300,
        seed=draw(st.integers(0, 10_000)),
        h100_nodes=draw(st.integers(0, 2)),
        a100_nodes=draw(st.integers(0, 1)),
        h200_nodes=draw(st.integers(1, 2)),
        outage=draw(st.booleans()),
        cordoned_node=draw(st.booleans()),
        xid_gpu=draw(st.booleans()),
        autoscale=draw(st.booleans()),
    )


def config_for(spec: simulator.FactorySpec, idle_policy: str = "platform"):
    return BASE_CONFIG.model_copy(
        update={"scrape_interval_seconds": spec.scrape_interval_s, "idle_policy": idle_policy}
    )


def raw_day(spec: simulator.FactorySpec, day: date) -> RawDay:
    """The day with its lookback, as a source hands it over."""
    today = simulator.simulate_day(spec, day)
    parts_dcgm, parts_kube = [today.dcgm], [today.kube]
    if day > spec.start:
        before = simulator.simulate_day(spec, day - timedelta(days=1))
        cutoff = (day - date(1970, 1, 1)).days * 86_400_000 - lookback_ms(config_for(spec), spec.cluster)
        parts_dcgm.insert(0, before.dcgm.filter(pa.compute.greater_equal(before.dcgm["ts_ms"], cutoff)))
        parts_kube.insert(0, before.kube.filter(pa.compute.greater_equal(before.kube["ts_ms"], cutoff)))
    return RawDay(
        pa.concat_tables(parts_dcgm),
        pa.concat_tables(parts_kube),
        parse_resource_claims(today.resource_claims, spec.cluster, "claims.json"),
        parse_resource_slices(today.resource_slices, spec.cluster, "slices.json"),
    )


def total(table: pa.Table, column: str) -> Decimal:
    return sum((Decimal(v) for v in table.column(column).to_pylist() if v is not None), Decimal(0))


@PROPERTY_SETTINGS
@given(spec=factories(), idle_policy=st.sampled_from(["platform", "proportional"]))
def test_conservation_per_day_and_month_r13(spec: simulator.FactorySpec, idle_policy: str) -> None:
    config = config_for(spec, idle_policy)
    month_charged = month_pool = Decimal(0)
    for day in (spec.start, spec.start + timedelta(days=1)):
        marts = meter_day(raw_day(spec, day), config, spec.cluster, day)
        charged = total(marts["mart_tenant_daily_cost"], "amount")
        pool = total(marts["mart_pool_daily_cost"], "pool_cost")
        assert charged == pool  # exactly, before rounding
        if idle_policy == "proportional":
            tenants = marts["mart_tenant_daily_cost"].column("tenant").to_pylist()
            held_models = set(marts["mart_device_seconds"].column("gpu_model").to_pylist())
            idle_models = {
                m
                for t, m in zip(
                    tenants, marts["mart_tenant_daily_cost"].column("gpu_model").to_pylist(), strict=True
                )
                if t == "__idle__"
            }
            assert not idle_models & held_models  # idle of a held model is spread (R9)
        month_charged += charged
        month_pool += pool
    assert month_charged == month_pool


@PROPERTY_SETTINGS
@given(spec=factories())
def test_categories_sum_to_capacity_r11(spec: simulator.FactorySpec) -> None:
    marts = meter_day(raw_day(spec, spec.start), config_for(spec), spec.cluster, spec.start)
    by_node: dict[str, Decimal] = {}
    for row in marts["mart_stranded_capacity"].to_pylist():
        by_node[row["node"]] = by_node.get(row["node"], Decimal(0)) + Decimal(row["gpu_seconds"])
    observed = {r["node"]: Decimal(r["observed_gpu_seconds"]) for r in marts["mart_data_quality"].to_pylist()}
    assert by_node == {n: v for n, v in observed.items() if v}
    categories = set(marts["mart_stranded_capacity"].column("category").to_pylist())
    assert categories <= {
        "allocated_active",
        "allocated_idle",
        "free",
        "mig_unpartitioned",
        "unschedulable",
        "unhealthy",
    }


@PROPERTY_SETTINGS
@given(spec=factories(), seed=st.integers(0, 2**31), chunks=st.integers(1, 7))
def test_order_and_chunking_do_not_change_results_r1(
    spec: simulator.FactorySpec, seed: int, chunks: int
) -> None:
    config = config_for(spec)
    raw = raw_day(spec, spec.start)
    expected = meter_day(raw, config, spec.cluster, spec.start)

    def reshuffle(table: pa.Table) -> pa.Table:
        import numpy as np

        order = np.random.default_rng(seed).permutation(table.num_rows)
        shuffled = table.take(pa.array(order))
        size = max(1, -(-table.num_rows // chunks))
        return pa.concat_tables([shuffled.slice(i, size) for i in range(0, table.num_rows, size)] or [table])

    reordered = RawDay(reshuffle(raw.dcgm), reshuffle(raw.kube), raw.dra_allocations, raw.dra_devices)
    actual = meter_day(reordered, config, spec.cluster, spec.start)
    for name in (
        "mart_device_seconds",
        "mart_tenant_daily_cost",
        "mart_stranded_capacity",
        "mart_mig_slice_usage",
    ):
        keys = [
            c
            for c in expected[name].column_names
            if not pa.types.is_floating(expected[name].schema.field(c).type)
        ]
        left = expected[name].sort_by([(k, "ascending") for k in keys])
        right = actual[name].sort_by([(k, "ascending") for k in keys])
        assert left.equals(right), name


@PROPERTY_SETTINGS
@given(spec=factories())
def test_a_day_metered_twice_is_identical_r15(spec: simulator.FactorySpec) -> None:
    config = config_for(spec)
    day = spec.start + timedelta(days=1)
    first = meter_day(raw_day(spec, day), config, spec.cluster, day)
    second = meter_day(raw_day(spec, day), config, spec.cluster, day)
    for name, table in first.items():
        if name.startswith("mart_"):  # marts are stored in a stable order; the rest by content
            assert table.equals(second[name]), name
        else:
            assert table.sort_by([(c, "ascending") for c in table.column_names]).equals(
                second[name].sort_by([(c, "ascending") for c in table.column_names])
            ), name


def sorted_rows(table: pa.Table) -> list[tuple[object, ...]]:
    """A table's rows in an order that does not depend on how they were stored (None sorts like any value)."""
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def exporter(metric: str) -> str:
    """The exporter a kube metric comes from, by its name: kube (kube-state-metrics), kueue, node (OpenCost)."""
    return metric.split("_", 1)[0]


def retargeted(kube: pa.Table, targets: list[str]) -> pa.Table:
    """The kube table with its `target` column (`<job>/<instance>`) replaced, row by row."""
    return kube.set_column(kube.schema.get_field_index("target"), "target", pa.array(targets, pa.string()))


def scraped_twice(kube: pa.Table, offset_ms: int) -> pa.Table:
    """The kube table as Prometheus would hold it with every exporter (kube-state-metrics, OpenCost, Kueue)
    also scraped by a second job, `offset_ms` later: each row again, under the target `<exporter>-2/...`."""
    later = kube.set_column(
        kube.schema.get_field_index("ts_ms"), "ts_ms", pa.compute.add(kube["ts_ms"], offset_ms)
    )
    targets = [f"{exporter(m)}-2/10.0.9.9:8080" for m in kube.column("metric").to_pylist()]
    return pa.concat_tables([kube, retargeted(later, targets)])


@PROPERTY_SETTINGS
@given(spec=factories(), offset_s=st.sampled_from([0, 0, -150, -20, 7, 150]) | st.integers(-150, 150))
def test_kube_exporters_scraped_by_two_jobs_bill_no_gpu_sample_twice_r1a(
    spec: simulator.FactorySpec, offset_s: int
) -> None:
    """R1a with every kube exporter also scraped by a second job (the same samples, offset by up to Δ/2): each
    GPU sample is still observed and priced once (the pool's GPU-seconds and cost per node do not move),
    R13 and R11 hold, and a node's expected GPU-seconds grow by at most the offset at each end of its day. At
    the same timestamps nothing at all changes."""
    spec = replace(spec, ksm_rollout=False)  # the test names the kube exporters' targets itself
    config = config_for(spec)
    raw = raw_day(spec, spec.start)
    once = meter_day(raw, config, spec.cluster, spec.start)
    twice_raw = RawDay(
        raw.dcgm, scraped_twice(raw.kube, offset_s * 1000), raw.dra_allocations, raw.dra_devices
    )
    twice = meter_day(twice_raw, config, spec.cluster, spec.start)

    assert sorted_rows(twice["mart_pool_daily_cost"]) == sorted_rows(once["mart_pool_daily_cost"])
    assert total(twice["mart_tenant_daily_cost"], "amount") == total(
        once["mart_pool_daily_cost"], "pool_cost"
    )
    capacity: dict[str, Decimal] = {}
    for row in twice["mart_stranded_capacity"].to_pylist():
        capacity[row["node"]] = capacity.get(row["node"], Decimal(0)) + Decimal(row["gpu_seconds"])
    observed = {r["node"]: Decimal(r["observed_gpu_seconds"]) for r in once["mart_data_quality"].to_pylist()}
    assert capacity == {n: v for n, v in observed.items() if v}
    expected_once = {r["node"]: r for r in once["mart_data_quality"].to_pylist()}
    for row in twice["mart_data_quality"].to_pylist():
        before = expected_once[row["node"]]
        grown = row["expected_gpu_seconds"] - before["expected_gpu_seconds"]
        assert 0 <= grown <= 2 * abs(offset_s) * (row["expected_gpus"] or 0), row["node"]
    if offset_s == 0:
        for name in sorted(n for n in once if n.startswith("mart_")):
            assert sorted_rows(twice[name]) == sorted_rows(once[name]), name


def with_targets(kube: pa.Table, instance_from_ms: int | None) -> pa.Table:
    """The kube table with each exporter's target named `<exporter>/<instance>`: instance 10.0.0.1 until
    `instance_from_ms`, 10.0.0.2 from it (the exporter restarted under a new address, same job, same schedule)."""
    metrics = kube.column("metric").to_pylist()
    times = kube.column("ts_ms").to_pylist()
    targets = [
        f"{exporter(m)}/10.0.0.{1 if instance_from_ms is None or t < instance_from_ms else 2}:8080"
        for m, t in zip(metrics, times, strict=True)
    ]
    return retargeted(kube, targets)


def sharded(kube: pa.Table) -> pa.Table:
    """The kube table as kube-state-metrics sharded by object writes it (`--total-shards 2`): each pod's and
    each node's series from one of two instances of the job, by a hash of the object; OpenCost and Kueue
    from their own targets."""
    targets = []
    for metric, text in zip(
        kube.column("metric").to_pylist(), kube.column("labels").to_pylist(), strict=True
    ):
        labels = json.loads(text)
        if exporter(metric) != "kube":
            targets.append(f"{exporter(metric)}/10.0.1.1:8080")
            continue
        obj = f"{labels.get('namespace')}/{labels['pod']}" if "pod" in labels else labels.get("node", text)
        targets.append(f"kube/10.0.0.{1 + zlib.crc32(obj.encode()) % 2}:8080")
    return retargeted(kube, targets)


@PROPERTY_SETTINGS
@given(spec=factories())
def test_kube_state_metrics_sharded_by_object_changes_no_mart_r1a(spec: simulator.FactorySpec) -> None:
    """R1a: kube-state-metrics sharded by object (a pod's series from one instance, its node's perhaps from the
    other, scraped at the same times) changes no mart: each series is read on its own target's scrapes, and
    a pod's requests count on its node whichever instance shows them."""
    spec = replace(spec, ksm_rollout=False)  # the test names the kube exporters' targets itself
    config = config_for(spec)
    raw = raw_day(spec, spec.start)

    def marts(kube: pa.Table) -> dict[str, pa.Table]:
        day = RawDay(raw.dcgm, kube, raw.dra_allocations, raw.dra_devices)
        return meter_day(day, config, spec.cluster, spec.start)

    whole, shards = marts(with_targets(raw.kube, None)), marts(sharded(raw.kube))
    for name in sorted(n for n in whole if n.startswith("mart_")):
        assert sorted_rows(shards[name]) == sorted_rows(whole[name]), name


@PROPERTY_SETTINGS
@given(spec=factories(), restart_s=st.integers(0, 86_399))
def test_a_kube_exporter_restarted_under_a_new_address_changes_no_mart_r1a(
    spec: simulator.FactorySpec, restart_s: int
) -> None:
    """R1a: every kube exporter restarted at a random second of the day under a new address (a new instance
    of its job, scraped on the same schedule) changes no mart: the new instance's first scrape ends what the
    old one's last showed, as the old one's next scrape would have. Its last samples used to hold for the
    whole lookback, billing a pod that ended just after the restart for longer; kube_lookback_seconds is
    4 Δ here so that such a difference would show."""
    spec = replace(spec, ksm_rollout=False)  # the test names the kube exporters' targets itself
    config = config_for(spec).model_copy(update={"kube_lookback_seconds": 4 * spec.scrape_interval_s})
    raw = raw_day(spec, spec.start)
    restart_ms = (spec.start - date(1970, 1, 1)).days * 86_400_000 + restart_s * 1000

    def marts(instance_from_ms: int | None) -> dict[str, pa.Table]:
        kube = with_targets(raw.kube, instance_from_ms)
        day = RawDay(raw.dcgm, kube, raw.dra_allocations, raw.dra_devices)
        return meter_day(day, config, spec.cluster, spec.start)

    steady, restarted = marts(None), marts(restart_ms)
    for name in sorted(n for n in steady if n.startswith("mart_")):
        assert sorted_rows(restarted[name]) == sorted_rows(steady[name]), name


def rolled_out(kube: pa.Table, new_from_ms: int, old_until_ms: int) -> pa.Table:
    """The kube table with each exporter rolled out as a Deployment with a surge does it: the old instance
    (10.0.0.1) scraped until `old_until_ms`, the new one (10.0.0.2) from `new_from_ms` on, both between."""
    times = kube["ts_ms"]
    old = kube.filter(pa.compute.less(times, old_until_ms))
    new = kube.filter(pa.compute.greater_equal(times, new_from_ms))
    return pa.concat_tables(
        [
            retargeted(old, [f"{exporter(m)}/10.0.0.1:8080" for m in old["metric"].to_pylist()]),
            retargeted(new, [f"{exporter(m)}/10.0.0.2:8080" for m in new["metric"].to_pylist()]),
        ]
    )


@PROPERTY_SETTINGS
@given(spec=factories(), restart_s=st.integers(0, 86_399), surge_scrapes=st.integers(1, 3))
def test_a_kube_exporter_rolled_out_with_a_surge_changes_no_mart_r1a(
    spec: simulator.FactorySpec, restart_s: int, surge_scrapes: int
) -> None:
    """R1a: every kube exporter rolled out at a random second of the day with a surge (the new instance
    scraped alongside the old one for 1 to 3 scrapes, on the same schedule, then the old one stopped)
    changes no mart: after the old instance's last scrape, the new one's next ends what the old one showed.
    Its last samples used to hold for the whole lookback (4 Δ here), the new instance not being new after
    them."""
    spec = replace(spec, ksm_rollout=False)  # the test names the kube exporters' targets itself
    config = config_for(spec).model_copy(update={"kube_lookback_seconds": 4 * spec.scrape_interval_s})
    raw = raw_day(spec, spec.start)
    restart_ms = (spec.start - date(1970, 1, 1)).days * 86_400_000 + restart_s * 1000

    def marts(kube: pa.Table) -> dict[str, pa.Table]:
        day = RawDay(raw.dcgm, kube, raw.dra_allocations, raw.dra_devices)
        return meter_day(day, config, spec.cluster, spec.start)

    overlap_ms = surge_scrapes * spec.scrape_interval_s * 1000
    steady = marts(with_targets(raw.kube, None))
    surged = marts(rolled_out(raw.kube, restart_ms, restart_ms + overlap_ms))
    for name in sorted(n for n in steady if n.startswith("mart_")):
        assert sorted_rows(surged[name]) == sorted_rows(steady[name]), name


@PROPERTY_SETTINGS
@given(
    spec=factories(),
    idle_policy=st.sampled_from(["platform", "proportional"]),
    tariff=st.sampled_from(["reserved", "used", "hybrid"]),
    reserved_millionths=st.integers(0, 1_000_000),
    energy_price=st.none() | st.sampled_from([0.0, 0.13, 0.2875]) | st.floats(0.01, 5.0),
)
def test_conservation_under_every_tariff_idle_policy_and_energy_price_r13(
    spec: simulator.FactorySpec,
    idle_policy: str,
    tariff: str,
    reserved_millionths: int,
    energy_price: float | None,
) -> None:
    """R13 for every tariff × idle policy × energy price (docs/tariffs.md): Σ lines = pool cost exactly; the
    pool's GPU-time cost does not depend on the tariff; proportional leaves no __idle__ on a model whose
    holders were charged; energy lines exist only with an energy price."""
    from gpumeter.config import Hybrid

    base = config_for(spec, idle_policy)
    hybrid = Hybrid(reserved_fraction=reserved_millionths / 1_000_000) if tariff == "hybrid" else None
    config = base.model_copy(
        update={
            "tariff": tariff,
            "hybrid": hybrid,
            "rate_card": base.rate_card.model_copy(update={"energy_price_per_kwh": energy_price}),
        }
    )
    day = spec.start + timedelta(days=1)
    marts = meter_day(raw_day(spec, day), config, spec.cluster, day)
    lines = marts["mart_tenant_daily_cost"]
    assert total(lines, "amount") == total(marts["mart_pool_daily_cost"], "pool_cost")
    reference = meter_day(raw_day(spec, day), base, spec.cluster, day)
    assert total(marts["mart_pool_daily_cost"], "capacity_cost") == total(
        reference["mart_pool_daily_cost"], "pool_cost"
    )
    charge_types = set(lines.column("charge_type").to_pylist())
    assert ("energy" in charge_types) <= (energy_price is not None)
    if idle_policy == "proportional":
        charged_models = {
            r["gpu_model"]
            for r in lines.to_pylist()
            if r["charge_type"] in ("reserved", "usage") and r["amount"] > 0
        }
        idle_models = {r["gpu_model"] for r in lines.to_pylist() if r["tenant"] == "__idle__"}
        assert not idle_models & charged_models  # R9: their idle is spread
