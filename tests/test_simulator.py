"""The synthetic AI factory: determinism, day membership, schema, every demo scenario, OpenMetrics output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metering import openmetrics, simulator
from metering.k8s_objects import load_k8s_json, parse_resource_claims, parse_resource_slices
from metering.schema import (
    DCGM_ENERGY,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_XID,
    RAW_DCGM_SCHEMA,
    RAW_KUBE_SCHEMA,
)

DEMO = simulator.demo_spec()
DAY0, DAY1, DAY2, DAY3 = DEMO.day_list[:4]  # ordinary, outage, XID, energy reset
SMALL = simulator.FactorySpec(
    cluster="small", days=3, scrape_interval_s=300, h100_nodes=1, a100_nodes=1, h200_nodes=1, mig_fraction=0.2
)


def ms(d: date, hour: float = 0.0) -> int:
    return int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp() * 1000 + hour * 3_600_000)


@pytest.fixture(scope="module")
def demo_days() -> dict[date, simulator.SimulatedDay]:
    return {d: simulator.simulate_day(DEMO, d) for d in (DAY0, DAY1, DAY2, DAY3)}


def sql(query: str, **tables: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return con.execute(query).fetchall()


# --- schema, membership, determinism -------------------------------------------------------------


def test_schema_sorting_and_half_open_day(demo_days):
    for day, sim in demo_days.items():
        assert sim.dcgm.schema.equals(RAW_DCGM_SCHEMA)
        assert sim.kube.schema.equals(RAW_KUBE_SCHEMA)
        for table in (sim.dcgm, sim.kube):
            ts = table.column("ts_ms").to_numpy()
            assert np.all(np.diff(ts) >= 0), "rows sorted by ts_ms"
            assert ts.min() == ms(day)  # midnight belongs to the day it starts ...
            assert (
                ts.max() == ms(day + timedelta(days=1)) - DEMO.scrape_interval_s * 1000
            )  # ... not the one it ends
            assert np.all((ts - ms(day)) % (DEMO.scrape_interval_s * 1000) == 0)
            assert table.column("cluster").null_count == 0
        for name in ("pod", "namespace", "container", "gpu_i_id", "vgpu"):  # absent labels are null, never ''
            assert pc.sum(pc.equal(sim.dcgm.column(name), "")).as_py() in (None, 0)
        # one sample per series and timestamp
        dup = sql(
            "select count(*) from (select ts_ms, metric, uuid, gpu_i_id, vgpu, pod from d group by all having count(*) > 1)",
            d=sim.dcgm,
        )
        assert dup == [(0,)]


def test_same_spec_same_tables(demo_days):
    again = simulator.simulate_day(DEMO, DAY0)
    assert again.dcgm.equals(demo_days[DAY0].dcgm)
    assert again.kube.equals(demo_days[DAY0].kube)
    assert again.resource_claims == demo_days[DAY0].resource_claims
    assert again.resource_slices == demo_days[DAY0].resource_slices


def test_a_day_alone_equals_the_day_within_a_run(tmp_path):
    simulator.clear_caches()
    simulator.write_parquet(SMALL, tmp_path, progress=None)
    seen: list[date] = []
    simulator.write_parquet(SMALL, tmp_path / "again", progress=seen.append)
    assert seen == SMALL.day_list
    for day in reversed(SMALL.day_list):  # any order, caches cold
        simulator.clear_caches()
        alone = simulator.simulate_day(SMALL, day)
        part = f"cluster={SMALL.cluster}/day={day.isoformat()}"
        dcgm = pq.read_table(tmp_path / "raw_dcgm_samples" / part / "data.parquet")
        kube = pq.read_table(tmp_path / "raw_kube_samples" / part / "data.parquet")
        assert dcgm.equals(alone.dcgm) and kube.equals(alone.kube)
        assert load_k8s_json(tmp_path / "k8s" / part / "resourceclaims.json") == alone.resource_claims
        assert load_k8s_json(tmp_path / "k8s" / part / "resourceslices.json") == alone.resource_slices


def test_seed_changes_the_factory():
    other = simulator.FactorySpec(**{**SMALL.__dict__, "seed": SMALL.seed + 1})
    a, b = simulator.simulate_day(SMALL, SMALL.start), simulator.simulate_day(other, other.start)
    assert not a.dcgm.equals(b.dcgm)


def test_spec_validation():
    with pytest.raises(ValueError, match="must divide 86400"):
        simulator.FactorySpec(scrape_interval_s=7)
    with pytest.raises(ValueError, match="before the spec's start"):
        simulator.simulate_day(SMALL, SMALL.start - timedelta(days=1))


# --- demo scenarios -------------------------------------------------------------------------------


def test_demo_layout():
    layout = simulator.factory_layout(DEMO)
    assert [n.name for n in layout.nodes] == [
        "gpu-h100-01",
        "gpu-h100-02",
        "gpu-a100-01",
        "gpu-h200-01",
        "gpu-h100-03",
        "gpu-h100-04",  # the KAI Scheduler node, last (kai_gpus=1)
    ]
    assert len(layout.gpus) == 37
    assert {simulator.MODELS[g.model].model_name for g in layout.gpus} == {
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H200",
    }
    text = simulator.describe(DEMO)
    assert "unpartitioned" in text and "time-sliced" in text and "DRA" in text and "cordoned" in text
    assert "KAI" in text
    without = simulator.factory_layout(simulator.FactorySpec(**{**DEMO.__dict__, "kai_gpus": 0}))
    assert without.nodes == layout.nodes[:-1] and without.gpus == layout.gpus[:-1]  # KAI changes nothing else
    assert without.lanes == layout.lanes[:-1]


def test_mig_instances_and_parent_series(demo_days):
    dcgm = demo_days[DAY0].dcgm
    profiles = sql(
        "select hostname, gpu, list(distinct gpu_i_profile order by gpu_i_profile) from d "
        "where gpu_i_id is not null group by all order by all",
        d=dcgm,
    )
    by_gpu = {(h, g): p for h, g, p in profiles}
    assert by_gpu[("gpu-a100-01", "0")] == ["1g.10gb", "2g.20gb", "3g.40gb"]  # 6/7, 1/7 unpartitioned
    assert by_gpu[("gpu-a100-01", "1")] == ["2g.20gb", "4g.40gb"]
    assert by_gpu[("gpu-a100-01", "2")] == ["3g.40gb", "4g.40gb"]  # DRA-managed
    assert by_gpu[("gpu-h100-01", "7")] == ["1g.10gb"]
    assert sql("select count(distinct gpu_i_id) from d where hostname='gpu-h100-01' and gpu='7'", d=dcgm) == [
        (7,)
    ]
    # MIG instances: GR_ENGINE_ACTIVE and FB_USED only, never GPU_UTIL
    inst_metrics = sql("select distinct metric from d where gpu_i_id is not null order by 1", d=dcgm)
    assert [m for (m,) in inst_metrics] == ["DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    # the parent's GPU-level series: no GPU_I_ID, no pod, power/energy/xid/temp only
    parent = sql(
        "select distinct metric, pod is null from d where uuid in (select uuid from d where gpu_i_id is not null) "
        "and gpu_i_id is null order by 1",
        d=dcgm,
    )
    assert parent == [
        ("DCGM_FI_DEV_GPU_TEMP", True),
        ("DCGM_FI_DEV_POWER_USAGE", True),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", True),
        ("DCGM_FI_DEV_XID_ERRORS", True),
    ]
    # a MIG instance held through the device plugin carries its pod; its request names the profile
    held = sql(
        "select distinct namespace from d where hostname='gpu-a100-01' and gpu='0' and gpu_i_profile='3g.40gb' "
        "and pod is not null",
        d=dcgm,
    )
    assert held == [("vc-eval",)]
    kube = demo_days[DAY0].kube
    assert (
        sql(
            "select count(*) from k where metric='kube_pod_container_resource_requests' "
            "and json_extract_string(labels, '$.resource')='nvidia_com_mig_3g_40gb'",
            k=kube,
        )[0][0]
        > 0
    )


def test_timesliced_gpu_has_vgpu_copies_carrying_the_whole_value(demo_days):
    dcgm = demo_days[DAY0].dcgm
    copies = sql(
        "select ts_ms, count(*), count(distinct pod), count(distinct value), list(distinct vgpu order by vgpu) "
        f"from d where metric='{DCGM_GPU_UTIL}' and vgpu is not null group by ts_ms order by 2 desc limit 1",
        d=dcgm,
    )
    _ts, n, pods, values, vgpus = copies[0]
    assert n == 3 and pods == 3 and values == 1 and vgpus == ["0", "1", "2"]
    uuids = sql("select count(distinct uuid) from d where vgpu is not null", d=dcgm)
    assert uuids == [(1,)]
    assert (
        sql(
            "select count(*) from k where metric='kube_pod_container_resource_requests' "
            "and json_extract_string(labels, '$.resource')='nvidia_com_gpu_shared'",
            k=demo_days[DAY0].kube,
        )[0][0]
        > 0
    )


def test_dra_devices_have_no_pod_labels_and_match_claims_and_slices(demo_days):
    sim = demo_days[DAY0]
    devices = parse_resource_slices(sim.resource_slices, DEMO.cluster, "slices.json")
    claims = parse_resource_claims(sim.resource_claims, DEMO.cluster, "claims.json")
    assert set(devices.column("device_type").to_pylist()) == {"gpu", "mig"}
    assert devices.num_rows == 4  # gpu-5, gpu-6 on gpu-h100-02 and two MIG devices of gpu-a100-01 gpu 2
    whole_uuids = [r["uuid"] for r in devices.to_pylist() if r["device_type"] == "gpu"]
    con = duckdb.connect()
    con.register("d", sim.dcgm)
    rows = con.execute(
        "select uuid, count(*) filter (where pod is not null), count(*) from d where list_contains(?, uuid) group by 1",
        [whole_uuids],
    ).fetchall()
    assert len(rows) == 2 and all(with_pod == 0 and total > 0 for _u, with_pod, total in rows)
    # the MIG DRA device: parentUUID + profile name a MIG instance of the dcgm series, without pods
    mig = [r for r in devices.to_pylist() if r["device_type"] == "mig"]
    for r in mig:
        found = con.execute(
            "select count(*), count(pod) from d where uuid = ? and gpu_i_profile = ?",
            [r["parent_uuid"], r["profile"]],
        ).fetchall()[0]
        assert found[0] > 0 and found[1] == 0
    # every claim result names a slice device; every reserved pod is Running some of the day
    keys = {(r["pool"], r["device"]) for r in devices.to_pylist()}
    assert claims.num_rows > 0
    assert {(r["pool"], r["device"]) for r in claims.to_pylist()} <= keys
    assert {r["device"] for r in claims.to_pylist()} >= {"gpu-5", "gpu-6", "gpu-2-mig-1-0-4"}
    con.register("k", sim.kube)
    con.register("c", claims)
    # (a claim whose pod ended before midnight is still in the snapshot while the pod lingers as Succeeded)
    phases = con.execute(
        "select c.reserved_pod, list(distinct json_extract_string(k.labels,'$.phase')) from c join k "
        "on k.metric='kube_pod_status_phase' and k.value=1 and json_extract_string(k.labels,'$.pod')=c.reserved_pod "
        "and json_extract_string(k.labels,'$.uid')=c.reserved_pod_uid group by 1"
    ).fetchall()
    assert len(phases) == len({r["reserved_pod"] for r in claims.to_pylist()})
    assert all("Running" in p or set(p) <= {"Succeeded", "Failed"} for _pod, p in phases)
    assert sum("Running" in p for _pod, p in phases) >= len(phases) - 3
    info = con.execute(
        "select count(distinct json_extract_string(labels,'$.resourceclaim_name')) from k "
        "where metric='kube_pod_resourceclaim_info'"
    ).fetchall()[0]
    assert info[0] == len({r["claim_name"] for r in claims.to_pylist()})
    # DRA pods request no nvidia_com_gpu
    dra_gpu_requests = con.execute(
        "select count(*) from k where metric='kube_pod_container_resource_requests' "
        "and json_extract_string(labels,'$.resource') like 'nvidia_com_%' "
        "and json_extract_string(labels,'$.pod') in (select reserved_pod from c)"
    ).fetchall()[0]
    assert dra_gpu_requests == (0,)


def test_tenancy_inputs(demo_days):
    sim = demo_days[DAY0]
    namespaces = {ns for (ns,) in sql("select distinct namespace from d where pod is not null", d=sim.dcgm)}
    assert {"training", "inference", "vc-eval", "shared-jobs", "sandbox"} <= namespaces
    assert namespaces & {"ft-llama", "ft-mistral"}
    labels = [
        json.loads(t)
        for (t,) in sql("select distinct labels from k where metric='kube_pod_labels'", k=sim.kube)
    ]
    vc = [lab for lab in labels if lab.get("label_vcluster_loft_sh_managed_by") == "eval-vc"]
    assert vc and all(lab["namespace"] == "vc-eval" for lab in vc)
    research = [lab for lab in labels if lab.get("label_team") == "research"]
    assert research and {lab["namespace"] for lab in research} == {"shared-jobs"}
    assert all("__name__" not in lab and "cluster" not in lab for lab in labels)
    # the unmapped namespace holds its GPU only part of the day
    held, total = sql(
        "select count(pod), count(*) from d where hostname='gpu-h100-01' and gpu='6' and metric='DCGM_FI_DEV_GPU_UTIL'",
        d=sim.dcgm,
    )[0]
    assert 0 < held < total
    assert sql(
        "select distinct namespace from d where hostname='gpu-h100-01' and gpu='6' and pod is not null",
        d=sim.dcgm,
    ) == [("sandbox",)]


def test_free_and_allocated_idle_gpus(demo_days):
    dcgm = demo_days[DAY0].dcgm
    free = sql(
        f"select count(pod), max(value) from d where hostname='gpu-a100-01' and gpu='7' and metric='{DCGM_GPU_UTIL}'",
        d=dcgm,
    )
    assert free == [(0, 0.0)]
    idle = sql(
        f"select count(pod), count(*), max(value), min(namespace) from d where hostname='gpu-h100-02' and gpu='7' "
        f"and metric='{DCGM_GPU_UTIL}'",
        d=dcgm,
    )[0]
    assert idle[0] == idle[1] and idle[2] <= 3.0 and idle[3] == "training"
    gr = sql(
        f"select max(value) from d where hostname='gpu-h100-02' and gpu='7' and metric='{DCGM_GR_ENGINE_ACTIVE}'",
        d=dcgm,
    )
    assert gr[0][0] <= 0.03


def test_outage_gap_of_two_hours(demo_days):
    sim = demo_days[DAY1]
    start, end = ms(DAY1, 13), ms(DAY1, 15)
    node_ts = sql(
        "select count(distinct ts_ms) filter (where ts_ms >= ? and ts_ms < ?), count(distinct ts_ms) from d "
        "where hostname='gpu-h200-01'".replace("?", "{}").format(start, end),
        d=sim.dcgm,
    )[0]
    assert node_ts[0] == 0 and node_ts[1] == 2880 - 240
    others = sql(
        f"select count(distinct ts_ms) from d where hostname='gpu-h100-01' and ts_ms >= {start} and ts_ms < {end}",
        d=sim.dcgm,
    )
    assert others == [(240,)]
    ksm = sql(
        f"select count(distinct ts_ms) from k where metric='kube_node_status_condition' "
        f"and json_extract_string(labels,'$.node')='gpu-h200-01' and ts_ms >= {start} and ts_ms < {end}",
        k=sim.kube,
    )
    assert ksm == [(240,)]
    assert sql(
        "select count(distinct ts_ms) from d where hostname='gpu-h200-01'", d=demo_days[DAY0].dcgm
    ) == [(2880,)]


def test_cordoned_node(demo_days):
    sim = demo_days[DAY0]
    unsched = sql(
        "select json_extract_string(labels,'$.node'), min(value), max(value), count(*) from k "
        "where metric='kube_node_spec_unschedulable' group by 1 order by 1",
        k=sim.kube,
    )
    by_node = {n: (lo, hi, c) for n, lo, hi, c in unsched}
    assert by_node["gpu-h100-03"] == (1.0, 1.0, 2880)
    assert all(hi == 0.0 for n, (_lo, hi, _c) in by_node.items() if n != "gpu-h100-03")
    gpus = sql(
        f"select count(distinct uuid), count(pod), max(value) from d where hostname='gpu-h100-03' and metric='{DCGM_GPU_UTIL}'",
        d=sim.dcgm,
    )
    assert gpus == [(4, 0, 0.0)]


def test_xid_error_for_four_hours(demo_days):
    xid = sql(
        f"select hostname, gpu, count(*) * 30 / 3600.0, min(ts_ms), max(ts_ms) from d "
        f"where metric='{DCGM_XID}' and value > 0 group by all",
        d=demo_days[DAY2].dcgm,
    )
    assert xid == [("gpu-h200-01", "4", 4.0, ms(DAY2, 9), ms(DAY2, 13) - 30_000)]
    assert sql(
        f"select max(value) from d where metric='{DCGM_XID}' and value > 0 and value != 79",
        d=demo_days[DAY2].dcgm,
    ) == [(None,)]
    for day in (DAY0, DAY1, DAY3):
        assert sql(f"select max(value) from d where metric='{DCGM_XID}'", d=demo_days[day].dcgm) == [(0.0,)]


def test_energy_counter_monotonic_continuous_with_one_reset(demo_days):
    ends: dict[str, float] = {}
    resets = []
    for day in (DAY0, DAY1, DAY2, DAY3):
        energy = demo_days[day].dcgm.filter(pc.equal(demo_days[day].dcgm.column("metric"), DCGM_ENERGY))
        rows = sql(
            "select uuid, list(value order by ts_ms), list(ts_ms order by ts_ms) from e group by uuid",
            e=energy,
        )
        for uuid, values, ts in rows:
            v = np.array(values)
            drops = np.flatnonzero(np.diff(v) < 0)
            if len(drops):
                resets.append((day, uuid, ts[drops[0] + 1]))
            if uuid in ends and ts[0] == ms(day):
                step = v[0] - ends[uuid]
                assert 0 < step <= 700 * 30 * 1000 * 1.01, (uuid, day, step)  # at most one interval at TDP
            ends[uuid] = v[-1]
            assert np.all(
                np.diff(v)[np.diff(v) >= 0] <= 700 * 30 * 1000 * 1.01 * (1 + 4 * 60 * 2)
            )  # outage gaps
    assert len(resets) == 1
    assert resets[0][0] == DAY3 and resets[0][2] == ms(DAY3, 6)


def test_pods_hold_gpus_only_while_running_and_exist_only_in_their_lifetime(demo_days):
    sim = demo_days[DAY0]
    con = duckdb.connect()
    con.register("d", sim.dcgm)
    con.register("k", sim.kube)
    not_running = con.execute(
        "with holders as (select distinct ts_ms, namespace, pod from d where pod is not null), "
        "running as (select ts_ms, json_extract_string(labels,'$.namespace') as namespace, "
        "json_extract_string(labels,'$.pod') as pod from k where metric='kube_pod_status_phase' "
        "and json_extract_string(labels,'$.phase')='Running' and value=1) "
        "select count(*) from holders h anti join running r using (ts_ms, namespace, pod)"
    ).fetchall()[0]
    assert not_running == (0,)
    # every pod: one phase is 1 at every sample of its life, and its samples are contiguous
    phases = con.execute(
        "select json_extract_string(labels,'$.uid') as uid, ts_ms, sum(value), count(*) from k "
        "where metric='kube_pod_status_phase' group by all having sum(value) != 1 or count(*) != 5"
    ).fetchall()
    assert phases == []
    gaps = con.execute(
        "select uid from (select json_extract_string(labels,'$.uid') as uid, ts_ms from k where metric='kube_pod_info') "
        "group by uid having (max(ts_ms) - min(ts_ms)) / 30000 + 1 != count(*)"
    ).fetchall()
    assert gaps == []
    # some pods start, some end within the day; long-running ones span it
    spans = con.execute(
        "select min(ts_ms), max(ts_ms) from k where metric='kube_pod_info' group by json_extract_string(labels,'$.uid')"
    ).fetchall()
    start, last = ms(DAY0), ms(DAY0 + timedelta(days=1)) - 30_000
    assert any(a > start for a, _ in spans) and any(b < last for _, b in spans)
    assert any(a == start and b == last for a, b in spans)


def test_node_capacity_mixed_mig_strategy_and_prices(demo_days):
    kube = demo_days[DAY0].kube
    cap = sql(
        "select json_extract_string(labels,'$.resource'), max(value) from k where metric='kube_node_status_capacity' "
        "and json_extract_string(labels,'$.node')='gpu-a100-01' group by 1 order by 1",
        k=kube,
    )
    cap = dict(cap)
    assert cap["nvidia_com_gpu"] == 5  # 8 GPUs - 3 MIG GPUs (one of them DRA-managed)
    assert cap["nvidia_com_mig_3g_40gb"] == 1 and cap["nvidia_com_mig_2g_20gb"] == 2
    assert cap["nvidia_com_mig_1g_10gb"] == 1 and cap["nvidia_com_mig_4g_40gb"] == 1
    assert cap["cpu"] == 96 and cap["memory"] > 0
    prices = dict(
        sql(
            "select json_extract_string(labels,'$.node'), max(value) from k where metric='node_gpu_hourly_cost' group by 1",
            k=kube,
        )
    )
    assert prices == {
        "gpu-h100-01": 4.10,
        "gpu-h100-02": 4.10,
        "gpu-h100-03": 4.10,
        "gpu-h100-04": 4.10,
        "gpu-a100-01": 2.50,
        "gpu-h200-01": 5.20,
    }
    node_labels = sql("select distinct labels from k where metric='kube_node_labels'", k=kube)
    assert any(json.loads(t)["label_nvidia_com_gpu_product"] == "NVIDIA-H200" for (t,) in node_labels)


# --- property test: small random factories --------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h100=st.integers(0, 2),
    a100=st.integers(0, 1),
    h200=st.integers(0, 1),
    gpus=st.integers(1, 8),
    mig=st.sampled_from([0.0, 0.2, 0.5]),
    dra=st.integers(0, 3),
    seed=st.integers(0, 10_000),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_small_random_factories_keep_the_invariants(h100, a100, h200, gpus, mig, dra, seed, flags):
    spec = simulator.FactorySpec(
        cluster="prop", days=1, scrape_interval_s=300, seed=seed, h100_nodes=h100, a100_nodes=a100, h200_nodes=h200,
        gpus_per_node=gpus, mig_fraction=mig, dra_gpus=dra, outage=flags[0], cordoned_node=flags[1], xid_gpu=flags[2],
    )  # fmt: skip
    sim = simulator.simulate_day(spec, spec.start)
    assert sim.dcgm.schema.equals(RAW_DCGM_SCHEMA) and sim.kube.schema.equals(RAW_KUBE_SCHEMA)
    for table in (sim.dcgm, sim.kube):
        ts = table.column("ts_ms").to_numpy()
        if len(ts):
            assert np.all(np.diff(ts) >= 0)
            assert ts.min() >= ms(spec.start) and ts.max() < ms(spec.start + timedelta(days=1))
    layout = simulator.factory_layout(spec)
    assert all(sum(m.compute for m in g.mig) <= 7 for g in layout.gpus)
    n_gpus = len(layout.gpus)
    if sim.dcgm.num_rows:
        assert sql("select count(distinct uuid) from d", d=sim.dcgm)[0][0] == n_gpus
        util = sim.dcgm.filter(pc.equal(sim.dcgm.column("metric"), DCGM_GPU_UTIL)).column("value").to_numpy()
        assert np.all((util >= 0) & (util <= 100))
        gr = (
            sim.dcgm.filter(pc.equal(sim.dcgm.column("metric"), DCGM_GR_ENGINE_ACTIVE))
            .column("value")
            .to_numpy()
        )
        assert np.all((gr >= 0) & (gr <= 1))
        con = duckdb.connect()
        con.register("d", sim.dcgm)
        con.register("k", sim.kube)
        assert con.execute(
            "select count(*) from (select distinct ts_ms, namespace, pod from d where pod is not null) h anti join "
            "(select ts_ms, json_extract_string(labels,'$.namespace') as namespace, json_extract_string(labels,'$.pod') "
            "as pod from k where metric='kube_pod_status_phase' and json_extract_string(labels,'$.phase')='Running' "
            "and value=1) r using (ts_ms, namespace, pod)"
        ).fetchall()[0] == (0,)
    claims = parse_resource_claims(sim.resource_claims, spec.cluster, "claims.json")
    devices = parse_resource_slices(sim.resource_slices, spec.cluster, "slices.json")
    assert {(r["pool"], r["device"]) for r in claims.to_pylist()} <= {
        (r["pool"], r["device"]) for r in devices.to_pylist()
    }
    assert devices.num_rows == sum((len(g.mig) if g.is_mig else 1) for g in layout.gpus if g.dra)


# --- OpenMetrics ----------------------------------------------------------------------------------

_LABELS = re.compile(r'^(?:[A-Za-z_][A-Za-z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"(?:,|$))*$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")
_TS = re.compile(r"^\d+\.\d{3}$")


def parse_openmetrics(path: Path) -> tuple[list[str], dict[str, int], dict[tuple, list[float]]]:
    """A small strict parser: returns family order, samples per family, timestamps per series."""
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and lines[-2] == "# EOF", "file ends with '# EOF\\n'"
    families: list[str] = []
    counts: dict[str, int] = {}
    series: dict[tuple, list[float]] = {}
    checked: dict[str, tuple] = {}
    current = None
    for line in lines[:-2]:
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind == "gauge"
            assert name not in families, f"family {name} is not contiguous"
            families.append(name)
            counts[name] = 0
            current = name
            continue
        assert not line.startswith("#"), line
        head, value, ts = line.rsplit(" ", 2)
        name, labels = head.split("{", 1)
        assert name == current, f"sample of {name} inside family {current}"
        assert labels.endswith("}"), line
        labels = labels[:-1]
        key = checked.get(labels)
        if key is None:  # validate each distinct label set once
            assert _NAME.match(name) and _LABELS.match(labels), f"malformed sample line: {line!r}"
            key = checked[labels] = tuple(_LABEL.findall(labels))
        assert _TS.match(ts), f"timestamp is not seconds.millis: {line!r}"
        float(value)
        counts[name] += 1
        series.setdefault((name, key), []).append(float(ts))
    return families, counts, series


@pytest.mark.parametrize("nodes_per_part", [16, 1], ids=["whole-day", "node-by-node"])
def test_openmetrics_round_trip(tmp_path, nodes_per_part):
    """Streamed node group by node group (as a fleet's day must be), the file holds every sample of
    simulate_day, each series in time order across parts and days."""
    spec = simulator.FactorySpec(**{**SMALL.__dict__, "days": 2})
    assert len(simulator.factory_layout(spec).nodes) > 1
    out = tmp_path / "factory.om"
    simulator.write_openmetrics(spec, out, nodes_per_part=nodes_per_part)
    families, counts, series = parse_openmetrics(out)
    expected: dict[str, int] = {}
    for day in spec.day_list:
        sim = simulator.simulate_day(spec, day)
        for table in (sim.dcgm, sim.kube):
            for row in table.group_by("metric").aggregate([("value", "count")]).to_pylist():
                expected[row["metric"]] = expected.get(row["metric"], 0) + row["value_count"]
    assert counts == expected
    assert families[0].startswith("DCGM_FI_")
    start_s = ms(spec.start) / 1000
    end_s = ms(spec.start + timedelta(days=2)) / 1000
    for key, ts in series.items():
        assert ts == sorted(ts) and len(set(ts)) == len(ts), key  # time order within each series
        assert start_s <= ts[0] and ts[-1] < end_s  # seconds, not milliseconds
    labels = dict(next(k for k in series if k[0] == "DCGM_FI_DEV_GPU_UTIL")[1])
    assert {"cluster", "Hostname", "UUID", "gpu", "modelName"} <= set(labels)
    mig = [dict(k[1]) for k in series if "GPU_I_ID" in dict(k[1])]
    assert mig and all("GPU_I_PROFILE" in lab for lab in mig)


def test_openmetrics_escapes_label_values(tmp_path):
    dcgm = pa.table(
        {
            "cluster": ["c"], "ts_ms": [1_793_491_200_123], "metric": [DCGM_GPU_UTIL], "value": [42.5],
            "hostname": ["n1"], "uuid": ["GPU-1"], "gpu": ["0"], "model_name": ['we"ird\\model\nname'],
            **{name: [None] for name in RAW_DCGM_SCHEMA.names[8:]},
        },
        schema=RAW_DCGM_SCHEMA,
    )  # fmt: skip
    kube = pa.table(
        {"cluster": ["c"], "ts_ms": [1_793_491_200_000], "metric": ["kube_pod_labels"], "value": [1.0],
         "labels": [json.dumps({"namespace": "a", "pod": "p", "label_x": 'q"\\'})], "target": [None]},
        schema=RAW_KUBE_SCHEMA,
    )  # fmt: skip
    out = tmp_path / "x.om"
    openmetrics.write_openmetrics([(dcgm, kube)], out)
    text = out.read_text()
    assert 'modelName="we\\"ird\\\\model\\nname"' in text
    assert 'label_x="q\\"\\\\"' in text
    assert " 42.5 1793491200.123\n" in text
    _families, counts, _series = parse_openmetrics(out)
    assert counts == {DCGM_GPU_UTIL: 1, "kube_pod_labels": 1}


def test_promtool_accepts_one_hour(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not on PATH (Debian package `prometheus` provides it)")
    sim = simulator.simulate_day(DEMO, DAY0)
    end = ms(DAY0, 1)
    first_hour = [tuple(t.filter(pc.less(t.column("ts_ms"), end)) for t in (sim.dcgm, sim.kube))]
    out = tmp_path / "hour.om"
    counts = openmetrics.write_openmetrics(first_hour, out)
    result = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(out), str(tmp_path / "blocks")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert str(sum(counts.values())) in result.stdout  # NUM SAMPLES of the block
    assert str(ms(DAY0)) in result.stdout  # MIN TIME in ms: timestamps were read as seconds


# --- KAI Scheduler and Kueue ----------------------------------------------------------------------


def test_kai_gpu_is_held_by_a_reservation_pod_for_its_gpu_group(demo_days):
    sim = demo_days[DAY1]
    held_by = sql(
        "select distinct namespace, pod from d where hostname='gpu-h100-04' and gpu='0' and metric='DCGM_FI_DEV_GPU_UTIL'",
        d=sim.dcgm,
    )
    assert len(held_by) == 1 and held_by[0][0] == "kai-resource-reservation"  # dcgm names the reservation pod
    reservation = held_by[0][1]
    groups = dict(
        sql(
            "select distinct labels->>'pod', labels->>'label_runai_gpu_group' from k "
            "where metric='kube_pod_labels' and labels->>'label_runai_gpu_group' is not null",
            k=sim.kube,
        )
    )
    assert len(set(groups.values())) == 1 and reservation in groups
    members = {pod for pod in groups if pod != reservation}
    fractions = dict(
        sql(
            "select distinct labels->>'pod', labels->>'annotation_gpu_fraction' from k where metric='kube_pod_annotations'",
            k=sim.kube,
        )
    )
    assert set(fractions) == members and set(fractions.values()) == {"0.5", "0.25"}
    gpu_requests = dict(
        sql(
            "select labels->>'pod', max(value) from k where metric='kube_pod_container_resource_requests' "
            "and labels->>'resource'='nvidia_com_gpu' group by 1",
            k=sim.kube,
        )
    )
    assert gpu_requests[reservation] == 1.0 and not members & set(
        gpu_requests
    )  # fractional: no nvidia.com/gpu


def test_kueue_usage_is_the_gpus_its_pods_hold_within_quota(demo_days):
    kube = demo_days[DAY0].kube
    quota = dict(
        sql(
            "select labels->>'cluster_queue', max(value) from k where metric='kueue_cluster_queue_nominal_quota' group by 1",
            k=kube,
        )
    )
    usage = sql(
        "select ts_ms, labels->>'cluster_queue', labels->>'cohort', labels->>'resource', value from k "
        "where metric='kueue_cluster_queue_resource_usage'",
        k=kube,
    )
    assert set(quota) == {"ml-training", "serving", "sandbox", "research", "evaluation"}
    assert {(cohort, resource) for _, _, cohort, resource, _ in usage} == {("ai-factory", "nvidia.com/gpu")}
    assert all(0 <= value <= quota[queue] for _, queue, _, _, value in usage)
    # Hand-derived from the layout: the 4-GPU inference lane is four 1-GPU replicas that never stop.
    assert quota["serving"] == 4 and {v for _, q, _, _, v in usage if q == "serving"} == {4.0}
    # A ClusterQueue's usage is the sum of its namespaces' LocalQueues at every sample.
    local = sql(
        "select ts_ms, labels->>'namespace', value from k where metric='kueue_local_queue_resource_usage'",
        k=kube,
    )
    training = {}
    for ts, namespace, value in local:
        if namespace in ("training", "ft-llama", "ft-mistral"):
            training[ts] = training.get(ts, 0.0) + value
    assert training == {ts: v for ts, q, _, _, v in usage if q == "ml-training"}
    # Usage equals the whole GPUs requested by Running pods of those namespaces at that sample.
    running = sql(
        "select p.ts_ms, sum(r.value) from k as p join k as r on r.ts_ms = p.ts_ms "
        "and r.labels->>'pod' = p.labels->>'pod' and r.metric='kube_pod_container_resource_requests' "
        "and r.labels->>'resource'='nvidia_com_gpu' "
        "where p.metric='kube_pod_status_phase' and p.labels->>'phase'='Running' and p.value=1 "
        "and p.labels->>'namespace' in ('training','ft-llama','ft-mistral') group by 1",
        k=kube,
    )
    assert {ts: v for ts, v in running if v} == {ts: v for ts, v in training.items() if v}


def test_kueue_series_are_written_once_when_the_day_is_written_in_parts():
    spec = simulator.FactorySpec(**{**SMALL.__dict__, "days": 1})
    whole = simulator.simulate_day(spec, spec.start).kube
    parts = pa.concat_tables(p.kube for p in simulator.iter_day_parts(spec, spec.start, nodes_per_part=2))
    query = "select metric, labels, ts_ms, value from k where metric like 'kueue%' order by all"
    assert sql(query, k=parts) == sql(query, k=whole) != []
