"""The synthetic AI factory: determinism, day membership, schema, every demo scenario, OpenMetrics output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
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

import gpumeter_sim as simulator
from gpumeter.ingest.k8s_objects import (
    load_k8s_json,
    parse_resource_claims,
    parse_resource_slices,
    read_snapshots,
    snapshot_day_folder,
    snapshot_files,
)
from gpumeter.ingest.row_order import gpu_ordered
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_XID,
    RAW_DCGM_SCHEMA,
    RAW_KUBE_SCHEMA,
)
from gpumeter.storage.paths import snapshot_name
from gpumeter_sim import openmetrics

DEMO = simulator.demo_spec()
DAY0, DAY1, DAY2, DAY3 = DEMO.day_list[:4]  # ordinary, outage and the changing pool, XID, energy reset
SMALL = simulator.FactorySpec(
    cluster="small", days=3, scrape_interval_s=300, h100_nodes=1, a100_nodes=1, h200_nodes=1, mig_fraction=0.2
)
# SMALL with the demo's changing pool (its whole GPU that goes MIG is a sandbox GPU: it has no free one).
SMALL_DYN = replace(SMALL, cluster="small-dyn", days=2, **simulator.CHANGING_POOL)
# kube-state-metrics / OpenCost scrapes: ksm_offset_s before the dcgm-exporter grid, i.e. this far after it.
KSM_PHASE_MS = (DEMO.scrape_interval_s - DEMO.ksm_offset_s) * 1000


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
    """dcgm-exporter on the grid from midnight; kube-state-metrics and OpenCost scraped ksm_offset_s (20 s)
    before each grid point, so a day's kube scrapes run from 00:00:10 to 23:59:40 (the one at 23:59:40 of the
    day before belongs to that day, R2). (Changed with ksm_offset_s: kube rows were on the grid.)"""
    step_ms = DEMO.scrape_interval_s * 1000
    for day, sim in demo_days.items():
        assert sim.dcgm.schema.equals(RAW_DCGM_SCHEMA)
        assert sim.kube.schema.equals(RAW_KUBE_SCHEMA)
        for table, phase in ((sim.dcgm, 0), (sim.kube, KSM_PHASE_MS)):
            ts = table.column("ts_ms").to_numpy()
            assert np.all(np.diff(ts) >= 0), "rows sorted by ts_ms"
            assert ts.min() == ms(day) + phase  # midnight belongs to the day it starts ...
            assert ts.max() == ms(day + timedelta(days=1)) - step_ms + phase  # ... not the one it ends
            assert np.all((ts - ms(day) - phase) % step_ms == 0)
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
    for day in (DAY0, DAY1):  # an ordinary day and the changing pool's
        simulator.clear_caches()
        again = simulator.simulate_day(DEMO, day)
        assert again.dcgm.equals(demo_days[day].dcgm)
        assert again.kube.equals(demo_days[day].kube)
        assert again.resource_claims == demo_days[day].resource_claims
        assert again.resource_slices == demo_days[day].resource_slices
        assert again.claim_snapshots == demo_days[day].claim_snapshots
        assert again.slice_snapshots == demo_days[day].slice_snapshots


@pytest.mark.parametrize("spec", [SMALL, SMALL_DYN], ids=["plain", "changing-pool"])
def test_a_day_alone_equals_the_day_within_a_run(tmp_path, spec):
    simulator.clear_caches()
    simulator.write_parquet(spec, tmp_path, progress=None)
    seen: list[date] = []
    simulator.write_parquet(spec, tmp_path / "again", progress=seen.append)
    assert seen == spec.day_list
    for day in reversed(spec.day_list):  # any order, caches cold
        simulator.clear_caches()
        alone = simulator.simulate_day(spec, day)
        part = f"cluster={spec.cluster}/day={day.isoformat()}"
        dcgm = pq.read_table(tmp_path / "raw_dcgm_samples" / part / "data.parquet")
        kube = pq.read_table(tmp_path / "raw_kube_samples" / part / "data.parquet")
        # The file holds the DCGM rows in the raw zone's order (tests/test_row_order.py), the day in time order.
        assert dcgm.equals(gpu_ordered(alone.dcgm)) and kube.equals(alone.kube)
        k8s = tmp_path / "k8s" / part
        if not spec.dra_snapshots_s:
            assert load_k8s_json(k8s / "resourceclaims.json") == alone.resource_claims
            assert load_k8s_json(k8s / "resourceslices.json") == alone.resource_slices
            continue
        for kind, snapshots in (
            ("resourceclaims", alone.claim_snapshots),
            ("resourceslices", alone.slice_snapshots),
        ):
            assert len(snapshots) == 86400 // spec.dra_snapshots_s
            for taken_ms, doc in snapshots:
                assert load_k8s_json(k8s / snapshot_name(kind, taken_ms)) == doc


def test_an_autoscaled_node_joins_and_another_leaves_on_the_events_day():
    """FactorySpec.autoscale: gpu-a100-01 joins at 06:00Z on the second day (absent the first), gpu-h100-01 is
    removed at 18:00Z (absent the third); their dcgm-exporter series, node series and pods' series go with
    them. Truth from the construction: dcgm-exporter every 300 s from midnight, kube-state-metrics 20 s
    before it (hh:04:40, hh:09:40 ...)."""
    spec = replace(
        simulator.demo_spec(), days=3, h100_nodes=2, gpus_per_node=4, scrape_interval_s=300, autoscale=True
    )
    assert "gpu-a100-01 joins 06:00Z, gpu-h100-01 is removed 18:00Z" in simulator.describe(spec)
    first, events, last = (simulator.simulate_day(spec, day) for day in spec.day_list)

    def hhmmss(table: pa.Table, node: str, kube: bool = False) -> tuple[str, str] | None:
        if kube:  # the node's series and its pods' (kube_pod_info names the node)
            mine = [r["ts_ms"] for r in table.to_pylist() if json.loads(r["labels"]).get("node") == node]
        else:
            mine = table.filter(pc.equal(table["hostname"], node))["ts_ms"].to_pylist()
        if not mine:
            return None
        start, end = (
            datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S") for ms in (min(mine), max(mine))
        )
        return start, end

    assert hhmmss(first.dcgm, "gpu-a100-01") is None and hhmmss(first.kube, "gpu-a100-01", kube=True) is None
    assert hhmmss(events.dcgm, "gpu-a100-01") == ("06:00:00", "23:55:00")
    assert hhmmss(events.kube, "gpu-a100-01", kube=True) == ("06:04:40", "23:59:40")
    assert hhmmss(events.dcgm, "gpu-h100-01") == ("00:00:00", "17:55:00")
    assert hhmmss(events.kube, "gpu-h100-01", kube=True) == ("00:04:40", "17:59:40")
    assert hhmmss(last.dcgm, "gpu-h100-01") is None and hhmmss(last.kube, "gpu-h100-01", kube=True) is None
    assert hhmmss(last.dcgm, "gpu-a100-01") == ("00:00:00", "23:55:00")
    # Without the flag, both nodes are there all three days.
    steady = replace(spec, autoscale=False)
    for day in steady.day_list:
        assert hhmmss(simulator.simulate_day(steady, day).dcgm, "gpu-h100-01") == ("00:00:00", "23:55:00")


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


def day_devices(sim: simulator.SimulatedDay) -> pa.Table:
    """The slice devices published at some time of the day (its timed snapshots), each once."""
    tables = [parse_resource_slices(doc, DEMO.cluster, "slices.json", t) for t, doc in sim.slice_snapshots]
    con = duckdb.connect()
    con.register("s", pa.concat_tables(tables))
    query = "select distinct * exclude (snapshot_ms, created_ms) from s where device is not null order by all"
    return con.sql(query).to_arrow_table()


def test_dra_devices_have_no_pod_labels_and_match_claims_and_slices(demo_days):
    """(Changed with mig_repartition: the 7 x 1g GPU gpu-h100-01 gpu 7 is DRA-managed too, so the plain
    slices list holds every device ever published, its old and new MIG devices; the day's devices are read
    from its timed snapshots.)"""
    sim = demo_days[DAY0]
    devices = day_devices(sim)
    union = parse_resource_slices(sim.resource_slices, DEMO.cluster, "slices.json")
    claims = parse_resource_claims(sim.resource_claims, DEMO.cluster, "claims.json")
    assert set(devices.column("device_type").to_pylist()) == {"gpu", "mig"}
    # gpu-5, gpu-6 on gpu-h100-02, two MIG devices of gpu-a100-01 gpu 2, seven of gpu-h100-01 gpu 7
    assert devices.num_rows == 11
    assert union.num_rows == 13  # and the two 3g.40gb devices gpu-h100-01 gpu 7 gets on DAY1
    assert set(devices.column("device").to_pylist()) < set(union.column("device").to_pylist())
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
    assert {r["device"] for r in claims.to_pylist()} >= {"gpu-5", "gpu-6", "gpu-2-mig-5-0-4"}
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


# The pods dcgm-exporter names at a sample that the latest kube-state-metrics scrape at or before it does
# not show Running (R1a: scrapes of different targets are not aligned).
NOT_RUNNING = (
    "with holders as (select distinct ts_ms, namespace, pod from d where pod is not null), "
    "scrapes as (select distinct ts_ms from k where metric like 'kube_%'), "
    "seen as (select h.*, s.ts_ms as scrape_ms from holders h asof join scrapes s on h.ts_ms >= s.ts_ms), "
    "running as (select ts_ms, json_extract_string(labels,'$.namespace') as namespace, "
    "json_extract_string(labels,'$.pod') as pod from k where metric='kube_pod_status_phase' "
    "and json_extract_string(labels,'$.phase')='Running' and value=1) "
    "select count(*), count(distinct seen.ts_ms) from seen anti join running r "
    "on r.ts_ms = seen.scrape_ms and r.namespace = seen.namespace and r.pod = seen.pod"
)


@pytest.mark.parametrize("day", [DAY0, DAY1])
def test_pods_hold_gpus_only_while_running_and_exist_only_in_their_lifetime(demo_days, day):
    """(Changed with ksm_offset_s: a dcgm-exporter sample is checked against the latest kube scrape at or
    before it, 20 s earlier, instead of one at the same timestamp; on DAY1 vllm-0 is two pods.)"""
    sim = demo_days[day]
    con = duckdb.connect()
    con.register("d", sim.dcgm)
    con.register("k", sim.kube)
    assert con.execute(NOT_RUNNING).fetchall()[0][0] == 0
    # every pod: one phase is 1 at every sample of its life (per kube-state-metrics instance: both show it
    # during DAY1's rollout), and its samples are contiguous
    phases = con.execute(
        "select json_extract_string(labels,'$.uid') as uid, ts_ms, target, sum(value), count(*) from k "
        "where metric='kube_pod_status_phase' group by all having sum(value) != 1 or count(*) != 5"
    ).fetchall()
    assert phases == []
    gaps = con.execute(
        "select uid from (select json_extract_string(labels,'$.uid') as uid, ts_ms from k where metric='kube_pod_info') "
        "group by uid having (max(ts_ms) - min(ts_ms)) / 30000 + 1 != count(distinct ts_ms)"
    ).fetchall()
    assert gaps == []
    # some pods start, some end within the day; long-running ones span it
    spans = con.execute(
        "select min(ts_ms), max(ts_ms) from k where metric='kube_pod_info' group by json_extract_string(labels,'$.uid')"
    ).fetchall()
    start, last = ms(day) + KSM_PHASE_MS, ms(day + timedelta(days=1)) - 30_000 + KSM_PHASE_MS
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
    dynamics=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    ksm_offset=st.sampled_from([0, 20, 280]),
    snapshots=st.sampled_from([0, 300, 3600]),
)
def test_small_random_factories_keep_the_invariants(
    h100, a100, h200, gpus, mig, dra, seed, flags, dynamics, ksm_offset, snapshots
):
    """(Changed with the changing pool: its flags are drawn too; a pod dcgm-exporter names is checked
    against the latest kube scrape at or before the sample; slices list every device ever published.)"""
    spec = simulator.FactorySpec(
        cluster="prop", days=1, scrape_interval_s=300, seed=seed, h100_nodes=h100, a100_nodes=a100, h200_nodes=h200,
        gpus_per_node=gpus, mig_fraction=mig, dra_gpus=dra, outage=flags[0], cordoned_node=flags[1], xid_gpu=flags[2],
        mig_repartition=dynamics[0], ha_replicas=dynamics[1], pod_churn=dynamics[2], relabel=dynamics[3],
        ksm_offset_s=ksm_offset, dra_snapshots_s=snapshots,
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
    assert all(sum(m.compute for m in g.mig_after or ()) <= 7 for g in layout.gpus)
    assert all(len({m.gi_id for m in g.instances}) == len(g.instances) for g in layout.gpus)
    # one profile's DRA devices on a GPU sort by name as their instances by GPU_I_ID (how the accounting
    # pairs them, docs/accounting.md R5): the ground truth is what it reads
    for g in (g for g in layout.gpus if g.dra):
        for instances in (g.mig, g.mig_after or ()):
            for profile in {m.profile for m in instances}:
                same = [m for m in instances if m.profile == profile]
                assert sorted(same, key=lambda m: m.dra_device) == sorted(same, key=lambda m: m.gi_id)
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
        assert con.execute(NOT_RUNNING).fetchall()[0][0] == 0
    claims = parse_resource_claims(sim.resource_claims, spec.cluster, "claims.json")
    devices = parse_resource_slices(sim.resource_slices, spec.cluster, "slices.json")
    assert {(r["pool"], r["device"]) for r in claims.to_pylist()} <= {
        (r["pool"], r["device"]) for r in devices.to_pylist()
    }
    assert devices.num_rows == sum((len(g.instances) or 1) for g in layout.gpus if g.dra)
    # Timed snapshots: a claim names only devices of the slices published at its snapshot's time, and the
    # snapshots together hold every claim of the day that lived across one.
    assert len(sim.claim_snapshots) == len(sim.slice_snapshots) == (86400 // snapshots if snapshots else 0)
    seen: set[str] = set()
    for (t, claim_doc), (t2, slice_doc) in zip(sim.claim_snapshots, sim.slice_snapshots, strict=True):
        assert t == t2
        named = parse_resource_claims(claim_doc, spec.cluster, "c", t).to_pylist()
        published = {
            (r["pool"], r["device"])
            for r in parse_resource_slices(slice_doc, spec.cluster, "s", t).to_pylist()
        }
        assert {(r["pool"], r["device"]) for r in named if r["device"]} <= published
        seen |= {r["claim_uid"] for r in named if r["claim_uid"]}
    if snapshots == 300:  # no claim lives less than 5 minutes: only one created after the last is unseen
        last = sim.claim_snapshots[-1][0]
        created = {
            item["metadata"]["uid"]: datetime.fromisoformat(item["metadata"]["creationTimestamp"]).timestamp()
            for item in sim.resource_claims["items"]
        }
        assert seen <= set(created) and all(created[uid] * 1000 > last for uid in set(created) - seen)


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
    assert {k: v for k, v in counts.items() if k != "up"} == expected
    assert counts["up"] > 0 and families[-1] == "up"  # each target's `up`, after the exporters' families
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
    assert counts == {DCGM_GPU_UTIL: 1, "kube_pod_labels": 1, "up": 2}  # one dcgm-exporter, one kube target


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


TARGET_LABELS = ("job", "instance", "namespace", "pod", "container", "service", "endpoint")
K8S_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]"


def parse_samples(path: Path, family: str) -> list[tuple[dict[str, str], str, float]]:
    """(labels, value text, timestamp in seconds) of every sample of one family."""
    out = []
    prefix = family + "{"
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith(prefix):
            head, value, ts = line.rsplit(" ", 2)
            out.append((dict(_LABEL.findall(head[len(prefix) : -1])), value, float(ts)))
    return out


@pytest.fixture(scope="module")
def small_om(tmp_path_factory) -> Path:
    """SMALL (3 days: the outage on the second, the XID on the third) written node by node."""
    out = tmp_path_factory.mktemp("small-om") / "factory.om"
    simulator.write_openmetrics(SMALL, out, nodes_per_part=1)
    return out


def test_openmetrics_dcgm_series_as_the_gpu_operator_servicemonitor_stores_them(small_om):
    """Every DCGM series: dcgm-exporter 4.x's labels, under its node's exporter pod as the GPU Operator's
    ServiceMonitor scrapes it (honorLabels false: the holder's labels renamed `exported_*`, a free GPU's series
    with only the exporter's pod). The same labels as tests/scrape_paths.py's ServiceMonitor path makes of
    them."""
    from tests.scrape_paths import dcgm_exporter_paths

    _families, _counts, series = parse_openmetrics(small_om)
    dcgm = [dict(labels) for name, labels in series if name.startswith("DCGM_FI_")]
    targets: dict[str, dict[str, str]] = {}
    for labels in dcgm:
        target = {k: labels[k] for k in TARGET_LABELS}
        assert targets.setdefault(labels["Hostname"], target) == target  # one target per node
        gpu = labels["gpu"]
        assert labels["device"] == f"nvidia{gpu}" and re.fullmatch(
            r"00000000:[0-9A-F]{2}:00\.0", labels["pci_bus_id"]
        )
        assert labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15" and labels["cluster"] == "small"
        assert "exported_pod" in labels or labels["pod"] == target["pod"]
        assert (
            ("exported_pod" in labels) == ("exported_namespace" in labels) == ("exported_container" in labels)
        )
        # what Prometheus makes of the exporter's own labels through that ServiceMonitor
        exposed = {k: v for k, v in labels.items() if k not in (*TARGET_LABELS, "cluster")}
        exposed |= {
            k.removeprefix("exported_"): exposed.pop(k) for k in list(exposed) if k.startswith("exported_")
        }
        node_ip = target["instance"].removesuffix(":9400")
        path = {p.name: p for p in dcgm_exporter_paths(labels["Hostname"], target["pod"], node_ip)}[
            "servicemonitor"
        ]
        scraped = path.scraped({"__name__": "x", **exposed})
        assert scraped | {"cluster": "small"} == {"__name__": "x", **labels}
    assert len(targets) == len(simulator.factory_layout(SMALL).nodes)
    for node, target in targets.items():
        assert target["job"] == target["container"] == target["service"] == "nvidia-dcgm-exporter"
        assert target["namespace"] == "gpu-operator" and target["endpoint"] == "gpu-metrics"
        assert re.fullmatch(rf"nvidia-dcgm-exporter-{K8S_SUFFIX}{{5}}", target["pod"]), node
        assert re.fullmatch(r"10\.\d+\.\d+\.\d+:9400", target["instance"]), node
    assert (
        len({t["pod"] for t in targets.values()})
        == len({t["instance"] for t in targets.values()})
        == len(targets)
    )
    # the holders are the raw rows' pods, and only theirs
    raw = {
        (r["uuid"], r["gpu_i_id"], r["namespace"], r["pod"], r["container"])
        for day in SMALL.day_list
        for r in simulator.simulate_day(SMALL, day)
        .dcgm.select(["uuid", "gpu_i_id", "namespace", "pod", "container"])
        .to_pylist()
    }
    written = {
        (
            lab["UUID"],
            lab.get("GPU_I_ID"),
            lab.get("exported_namespace"),
            lab.get("exported_pod"),
            lab.get("exported_container"),
        )
        for lab in dcgm
    }
    assert written == raw and any(h[3] is None for h in raw) and any(h[3] is not None for h in raw)
    # XID: err_code is the value as text, err_msg its text
    xid = parse_samples(small_om, DCGM_XID)
    assert all(labels["err_code"] == value for labels, value, _ in xid)
    msgs = {(labels["err_code"], labels["err_msg"]) for labels, _, _ in xid}
    assert msgs == {("0", "No Error"), ("79", "GPU has fallen off the bus")}


def test_openmetrics_up_of_every_target(small_om):
    """`up` per target with exactly the target's labels: 1 at each scrape it answered, 0 at the scrapes of the
    exporter outage; kube-state-metrics and OpenCost (one target each, over every node's part) at every kube
    scrape."""
    up = parse_samples(small_om, "up")
    by_target: dict[tuple, dict[float, str]] = {}
    for labels, value, ts in up:
        assert by_target.setdefault(tuple(sorted(labels.items())), {}).setdefault(ts, value) == value
    _families, _counts, series = parse_openmetrics(small_om)
    scrapes: dict[tuple, set[float]] = {}  # (job, instance) -> the times of its series' samples
    node_series: dict[tuple, dict[str, str]] = {}  # (job, instance) -> a node's series' labels
    for (name, labels), ts in series.items():
        if name == "up":
            continue
        lab = dict(labels)
        scrapes.setdefault((lab["job"], lab["instance"]), set()).update(ts)
        if name.startswith(("DCGM_FI_", "kube_node_", "node_")):
            node_series.setdefault((lab["job"], lab["instance"]), lab)
    # every target's `up`, labelled with exactly the target's labels (those a node's series gained)
    assert sorted((dict(t)["job"], dict(t)["instance"]) for t in by_target) == sorted(scrapes)
    for target in by_target:
        labels = dict(target)
        gained = node_series[labels["job"], labels["instance"]]
        assert labels == {k: gained[k] for k in (*TARGET_LABELS, "cluster")}
    by_target = {(dict(t)["job"], dict(t)["instance"]): samples for t, samples in by_target.items()}
    layout = simulator.factory_layout(SMALL)
    outage = [ms(layout.outage.day, 13) / 1000 + i * SMALL.scrape_interval_s for i in range(24)]
    step = SMALL.scrape_interval_s
    for (job, instance), samples in by_target.items():
        assert {t for t, v in samples.items() if v == "1"} == scrapes[job, instance]
        down = sorted(t for t, v in samples.items() if v == "0")
        if job == "nvidia-dcgm-exporter" and down:
            assert down == outage  # the node's exporter, 13:00-15:00Z of the second day
        else:
            assert not down
            if job != "nvidia-dcgm-exporter":  # a kube target: every kube scrape of the 3 days
                assert len(samples) == 3 * 86400 // step
    assert sum(1 for s in by_target.values() if "0" in s.values()) == 1
    jobs = sorted(job for job, _ in by_target)
    assert jobs == ["kube-state-metrics", *["nvidia-dcgm-exporter"] * len(layout.nodes), "opencost"]


def test_openmetrics_kube_series_under_honored_labels(small_om):
    """kube-state-metrics and OpenCost scraped with honorLabels true: a pod's series keeps its own namespace
    and pod, a node's series gains its target's; every series carries the target's service and endpoint."""
    ksm = {"namespace": "monitoring", "container": "kube-state-metrics", "job": "kube-state-metrics"}
    node = parse_samples(small_om, "kube_node_labels")[0][0]
    assert {k: node[k] for k in ksm} == ksm and node["service"] == "kube-prometheus-stack-kube-state-metrics"
    assert re.fullmatch(
        rf"kube-prometheus-stack-kube-state-metrics-{K8S_SUFFIX}{{10}}-{K8S_SUFFIX}{{5}}", node["pod"]
    )
    assert node["instance"] == "kube-state-metrics.kube-system:8080" and node["endpoint"] == "http"
    pods = {(lab["namespace"], lab["pod"]) for lab, _, _ in parse_samples(small_om, "kube_pod_info")}
    raw = simulator.simulate_day(SMALL, SMALL.start).kube
    info = raw.filter(pc.equal(raw.column("metric"), "kube_pod_info")).column("labels").to_pylist()
    assert {(json.loads(t)["namespace"], json.loads(t)["pod"]) for t in info} <= pods
    requests = parse_samples(small_om, "kube_pod_container_resource_requests")
    assert all(lab["container"] != "kube-state-metrics" and lab["service"] for lab, _, _ in requests)
    cost = parse_samples(small_om, "node_gpu_hourly_cost")[0][0]
    assert (cost["job"], cost["namespace"], cost["instance"], cost["service"]) == (
        "opencost", "opencost", "opencost.opencost:9003", "opencost"
    )  # fmt: skip


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


# --- the changing pool (demo_spec: the second day) -------------------------------------------------


def gpu_rows(sim: simulator.SimulatedDay, host: str, gpu: str) -> list[tuple]:
    return sql(
        "select ts_ms, metric, gpu_i_id, gpu_i_profile, namespace, pod from d where hostname = ? and gpu = ? "
        "order by ts_ms".replace("?", "'{}'").format(host, gpu),
        d=sim.dcgm,
    )


def test_a_whole_gpu_goes_mig_at_noon_after_a_ten_minute_reset(demo_days):
    """gpu-a100-01 gpu 7: whole and free every day before; on DAY1 held 02:00-10:00 by a pod (dcgm-exporter
    pod labels), no series at all 12:00-12:10 (the MIG manager resets it), then 3g.40gb + 2 x 2g.20gb."""
    rows = gpu_rows(demo_days[DAY1], "gpu-a100-01", "7")
    whole = [r for r in rows if r[2] is None and r[1] == DCGM_GPU_UTIL]
    assert max(r[0] for r in whole) == ms(DAY1, 12) - 30_000  # whole until noon
    held = [r for r in whole if r[5] is not None]
    # Running 02:00-10:00; the kube scrape 20 s before each sample is what says so (R1a)
    assert (min(r[0] for r in held), max(r[0] for r in held)) == (ms(DAY1, 2) + 30_000, ms(DAY1, 10))
    assert {r[4] for r in held} == {"perf-lab"} and len({r[5] for r in held}) == 1
    assert not [r for r in rows if ms(DAY1, 12) <= r[0] < ms(DAY1, 12 + 10 / 60)]  # the reset: nothing
    assert len({r[0] for r in rows}) == 2880 - 20
    mig = [r for r in rows if r[2] is not None]
    assert min(r[0] for r in mig) == ms(DAY1, 12 + 10 / 60)
    assert {(r[2], r[3]) for r in mig} == {("2", "3g.40gb"), ("3", "2g.20gb"), ("4", "2g.20gb")}
    assert {r[1] for r in rows if r[0] >= ms(DAY1, 12)} >= {DCGM_ENERGY, DCGM_GR_ENGINE_ACTIVE}
    assert DCGM_GPU_UTIL not in {r[1] for r in rows if r[0] >= ms(DAY1, 12)}  # no whole-GPU series after
    assert sql(
        "select count(*) from d where hostname='gpu-a100-01' and gpu='7' and gpu_i_id is not null",
        d=demo_days[DAY0].dcgm,
    ) == [(0,)]
    later = gpu_rows(demo_days[DAY2], "gpu-a100-01", "7")  # MIG all day after, some instances held
    assert len({r[0] for r in later}) == 2880 and all(
        r[2] is not None for r in later if r[1] == DCGM_GR_ENGINE_ACTIVE
    )
    assert {r[2] for r in later if r[5] is not None} and DCGM_GPU_UTIL not in {r[1] for r in later}
    # the device plugin reports the new MIG capacity from 12:10 (kube scrape at 12:10:10)
    cap = sql(
        "select labels->>'resource', ts_ms >= ?, max(value) from k where metric='kube_node_status_capacity' "
        "and labels->>'node'='gpu-a100-01' and labels->>'resource' like 'nvidia_com_%' group by all".replace(
            "?", str(ms(DAY1, 12 + 10 / 60))
        ),
        k=demo_days[DAY1].kube,
    )
    cap = {(res, after): v for res, after, v in cap}
    assert cap[("nvidia_com_gpu", False)] == 5 and cap[("nvidia_com_gpu", True)] == 4
    assert (cap[("nvidia_com_mig_3g_40gb", False)], cap[("nvidia_com_mig_3g_40gb", True)]) == (1, 2)
    assert (cap[("nvidia_com_mig_2g_20gb", False)], cap[("nvidia_com_mig_2g_20gb", True)]) == (2, 4)


def test_a_mig_gpu_is_repartitioned_and_its_slice_republished(demo_days):
    """gpu-h100-01 gpu 7 (DRA): 7 x 1g.10gb (GPU_I_ID 7-13) until noon, no instance 12:00-12:10 while its
    GPU-level series go on, then 2 x 3g.40gb (GPU_I_ID 1, 2); its ResourceSlice is re-published (generation
    2 without MIG devices, 3 with the new names) and claims name the devices valid at their time."""
    sim = demo_days[DAY1]
    rows = gpu_rows(sim, "gpu-h100-01", "7")
    ids = {}
    for ts, _metric, gi, profile, _ns, pod in rows:
        if gi is not None:
            assert pod is None  # DRA-managed: no pod labels
            ids.setdefault("before" if ts < ms(DAY1, 12) else "after", set()).add((gi, profile))
            assert not ms(DAY1, 12) <= ts < ms(DAY1, 12 + 10 / 60)
    assert ids["before"] == {(str(i), "1g.10gb") for i in range(7, 14)}
    assert ids["after"] == {("1", "3g.40gb"), ("2", "3g.40gb")}
    power = [r for r in rows if r[1] == "DCGM_FI_DEV_POWER_USAGE"]
    assert len(power) == 2880 and all(r[2] is None for r in power)  # the GPU-level series stays
    published = {}
    for t, doc in sim.slice_snapshots:
        (item,) = [i for i in doc["items"] if i["spec"]["nodeName"] == "gpu-h100-01"]
        names = sorted(d["name"] for d in item["spec"]["devices"])
        published[t] = (item["metadata"]["generation"], names)
    at = {t: published[t] for t in published if t % 86_400_000 in (11 * 3_600_000 + 55 * 60_000 + 250,)}
    assert list(at.values()) == [(1, [f"gpu-7-mig-19-{start}-1" for start in range(7)])]
    assert published[ms(DAY1, 12) + 250] == published[ms(DAY1, 12 + 5 / 60) + 250] == (2, [])
    assert published[ms(DAY1, 12 + 10 / 60) + 250] == (3, ["gpu-7-mig-9-0-4", "gpu-7-mig-9-4-4"])
    assert published[sim.slice_snapshots[-1][0]][0] == 3
    # claims name the devices published at their time, on every day
    for day in (DAY0, DAY1, DAY2):
        day_sim = demo_days[day]
        for (t, claims), (_t, slices) in zip(day_sim.claim_snapshots, day_sim.slice_snapshots, strict=True):
            names = {
                (r["pool"], r["device"]) for r in parse_resource_slices(slices, "demo", "s", t).to_pylist()
            }
            named = {
                (r["pool"], r["device"]) for r in parse_resource_claims(claims, "demo", "c", t).to_pylist()
            }
            assert named - {(None, None)} <= names, (day, t)
    new_names = [
        t
        for t, doc in sim.claim_snapshots
        for item in doc["items"]
        for r in item["status"]["allocation"]["devices"]["results"]
        if r["device"] in ("gpu-7-mig-9-0-4", "gpu-7-mig-9-4-4")
    ]
    assert min(new_names) == ms(DAY1, 12.25) + 250  # the new reranker pods: created 12:12, first seen 12:15


def test_vllm_0_is_deleted_at_nine_and_recreated_with_a_new_uid(demo_days):
    sim = demo_days[DAY1]
    phases = sql(
        "select labels->>'uid', labels->>'phase', min(ts_ms), max(ts_ms) from k where metric='kube_pod_status_phase' "
        "and labels->>'pod'='vllm-0' and value=1 group by all order by 3",
        k=sim.kube,
    )
    (old, _, first, gone), (new, pending, back, _), (new2, running, up, last) = phases
    assert old != new == new2 and (pending, running) == ("Pending", "Running")
    assert (
        first == ms(DAY1) + KSM_PHASE_MS and gone == ms(DAY1, 9) - 20_000
    )  # last scrape showing it: 08:59:40
    assert back == ms(DAY1, 9) + KSM_PHASE_MS and up == ms(DAY1, 9 + 5 / 60) + KSM_PHASE_MS
    assert last == ms(DAY2) - 20_000
    owner = sql(
        "select distinct labels->>'created_by_kind', labels->>'created_by_name', labels->>'namespace' from k "
        "where metric='kube_pod_info' and labels->>'pod'='vllm-0'",
        k=sim.kube,
    )
    assert owner == [("StatefulSet", "vllm", "inference")]
    # dcgm-exporter names vllm-0 on the same GPU before and after, not while it is gone or Pending
    held = sql(
        "select distinct uuid, ts_ms from d where pod='vllm-0' and metric='DCGM_FI_DEV_GPU_UTIL' order by ts_ms",
        d=sim.dcgm,
    )
    assert len({u for u, _ in held}) == 1
    ts = [t for _, t in held]
    gap = [(a, b) for a, b in zip(ts, ts[1:], strict=False) if b - a > 30_000]
    assert gap == [(ms(DAY1, 9), ms(DAY1, 9 + 5 / 60) + 30_000)]
    uids = {
        day: {
            u
            for (u,) in sql(
                "select distinct labels->>'uid' from k where labels->>'pod'='vllm-0'", k=demo_days[day].kube
            )
        }
        for day in (DAY0, DAY2)
    }
    assert uids == {DAY0: {old}, DAY2: {new}}


def test_a_twenty_minute_dra_job_is_seen_only_in_the_snapshots_of_its_life(demo_days):
    sim = demo_days[DAY1]
    (pod,) = {
        json.loads(labels)["pod"]
        for (labels,) in sql(
            "select distinct labels from k where labels->>'pod' like 'smoke-test-%'", k=sim.kube
        )
    }
    phases = sql(
        f"select labels->>'phase', min(ts_ms), max(ts_ms) from k where metric='kube_pod_status_phase' "
        f"and labels->>'pod'='{pod}' and value=1 group by all order by 2",
        k=sim.kube,
    )
    # Running 10:00:20-10:20, deleted as it ends: its series vanish, no Succeeded sample lingers
    assert phases == [
        ("Pending", ms(DAY1, 10) + KSM_PHASE_MS, ms(DAY1, 10) + KSM_PHASE_MS),
        ("Running", ms(DAY1, 10) + KSM_PHASE_MS + 30_000, ms(DAY1, 10 + 20 / 60) - 20_000),
    ]
    assert sql(f"select max(ts_ms) from k where labels->>'pod'='{pod}'", k=sim.kube) == [
        (ms(DAY1, 10 + 20 / 60) - 20_000,)
    ]
    shown = [
        t
        for t, doc in sim.claim_snapshots
        if any(r["name"] == pod for item in doc["items"] for r in item["status"]["reservedFor"])
    ]
    assert shown == [ms(DAY1, 10 + k * 5 / 60) + 250 for k in range(4)]  # 10:00, 10:05, 10:10, 10:15
    (claim,) = [i for i in sim.resource_claims["items"] if i["status"]["reservedFor"][0]["name"] == pod]
    assert claim["metadata"]["creationTimestamp"] == f"{DAY1}T10:00:00Z"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == ("gpu-h100-01", "gpu-7-mig-19-4-1")
    assert sql(f"select count(*) from d where pod='{pod}'", d=sim.dcgm) == [(0,)]  # DRA: no pod labels


def test_a_pod_is_relabelled_at_noon(demo_days):
    def teams(day: date) -> list[tuple]:
        return sql(
            "select labels->>'label_team', labels->>'uid', min(ts_ms), max(ts_ms) from k where metric='kube_pod_labels' "
            "and labels->>'pod'='jupyter-alice-0' group by all order by 3",
            k=demo_days[day].kube,
        )

    (before, after) = teams(DAY1)
    assert before[0] == "c" and after[0] == "research" and before[1] == after[1]  # one pod, new labels
    assert before[3] == ms(DAY1, 12) - 20_000 and after[2] == ms(DAY1, 12) + KSM_PHASE_MS
    assert [t[0] for t in teams(DAY0)] == ["c"] and [t[0] for t in teams(DAY2)] == ["research"]


def test_kube_state_metrics_is_scraped_twenty_seconds_before_dcgm_exporter(demo_days):
    for sim in demo_days.values():
        kube = sim.kube.column("ts_ms").to_numpy()
        assert np.all(kube % 30_000 == 10_000) and np.all(sim.dcgm.column("ts_ms").to_numpy() % 30_000 == 0)
    for metric in ("kube_pod_status_phase", "node_gpu_hourly_cost", "kueue_cluster_queue_resource_usage"):
        assert sql(
            f"select distinct ts_ms % 30000 from k where metric = '{metric}'", k=demo_days[DAY0].kube
        ) == [(10_000,)]
    with pytest.raises(ValueError, match="ksm_offset_s=30 must be >= 0 and below scrape_interval_s"):
        replace(DEMO, ksm_offset_s=30)


def test_kube_state_metrics_is_rolled_out_with_a_surge_on_the_events_day(demo_days):
    """kube-state-metrics under its scrape targets: the old instance before DAY1, the new one after; on DAY1
    the new one scraped from 10:18:10, the old one until 10:19:40, both in between, each showing every
    object. OpenCost and Kueue name no target. The short DRA job's pod, deleted at 10:20, is last shown by
    both at 10:19:40."""
    old, new = (f"kube-state-metrics/10.0.0.{i}:8080" for i in (1, 2))
    spans = "select target, min(ts_ms), max(ts_ms), count(*) from k where metric like 'kube_%' group by 1 order by 1"
    # One group only: no kube_ row of DAY0 is the new instance's, or without a target.
    assert [r[:3] for r in sql(spans, k=demo_days[DAY0].kube)] == [
        (old, ms(DAY0) + KSM_PHASE_MS, ms(DAY1) - 20_000)
    ]
    (first, last) = sql(spans, k=demo_days[DAY1].kube)
    assert first[:3] == (old, ms(DAY1) + KSM_PHASE_MS, ms(DAY1, 10 + 19 / 60) + 40_000)
    assert last[:3] == (new, ms(DAY1, 10 + 18 / 60) + 10_000, ms(DAY2) - 20_000)
    assert [r[0] for r in sql(spans, k=demo_days[DAY2].kube)] == [new]
    # During the surge both instances show the same rows at the same scrapes.
    surge = (
        "select target, count(*), count(distinct ts_ms) from k where metric like 'kube_%' "
        f"and ts_ms between {ms(DAY1, 10 + 18 / 60) + 10_000} and {ms(DAY1, 10 + 19 / 60) + 40_000} group by 1 order by 1"
    )
    (a, b) = sql(surge, k=demo_days[DAY1].kube)
    assert a[1:] == b[1:] and a[2] == 4
    assert sql("select distinct target from k where metric not like 'kube_%'", k=demo_days[DAY1].kube) == [
        (None,)
    ]
    job = sql(
        "select target, max(ts_ms) from k where labels->>'pod' like 'smoke-test-%' group by 1 order by 1",
        k=demo_days[DAY1].kube,
    )
    assert job == [(old, ms(DAY1, 10 + 19 / 60) + 40_000), (new, ms(DAY1, 10 + 19 / 60) + 40_000)]


def test_timed_snapshot_files_replace_the_plain_lists(tmp_path):
    spec = SMALL_DYN
    simulator.write_parquet(replace(spec, dra_snapshots_s=0), tmp_path)  # an earlier layout of the folder ...
    simulator.write_parquet(spec, tmp_path)  # ... is replaced whole
    for day in spec.day_list:
        folder = snapshot_day_folder(tmp_path / "k8s", spec.cluster, day)
        files = snapshot_files(folder)
        assert len(files) == 2 * 288 and all(f.taken_ms is not None for f in files)  # no plain list left
        assert {f.kind for f in files} == {"resourceclaims", "resourceslices"}
        assert min(f.path.name for f in files) == f"resourceclaims-{day:%Y%m%d}T000000.250Z.json"
    found = read_snapshots(tmp_path / "k8s", spec.cluster, spec.day_list)
    assert found.allocations.num_rows > 0 and found.devices.column("snapshot_ms").null_count == 0
    # the re-published slice: the 7 x 1g GPU's new 3g.40gb devices only in snapshots from 12:10 of DAY 2
    new = found.devices.filter(pc.equal(found.devices.column("profile"), "3g.40gb"))
    layout = simulator.factory_layout(spec)
    changed = [layout.gpus[i] for i in layout.repartition_gpus if layout.gpus[i].dra]
    assert changed and new.num_rows
    mine = new.filter(pc.equal(new.column("parent_uuid"), changed[0].uuid))
    assert pc.min(mine.column("snapshot_ms")).as_py() == ms(spec.day_list[1], 12 + 10 / 60) + 250


def parse_replicas(path: Path) -> dict[tuple, dict[str, list[float]]]:
    """series without the replica label -> replica -> timestamps (seconds)."""
    _families, _counts, series = parse_openmetrics(path)
    out: dict[tuple, dict[str, list[float]]] = {}
    for (name, labels), ts in series.items():
        replica = dict(labels)["prometheus_replica"]
        key = (name, tuple(kv for kv in labels if kv[0] != "prometheus_replica"))
        out.setdefault(key, {})[replica] = ts
    return out


def test_openmetrics_ha_pair_with_rolling_restarts(tmp_path):
    """Every series twice, replica b 2 s after a; a down 10:05-10:20, b down 10:35-10:50 every day; the
    union of their scrapes (R1, what the Prometheus source keeps) is the single stream exactly. The Parquet
    output has no replicas. (kube-state-metrics is not rolled out here: a series only its old instance shows,
    during a's restart, is b's alone.)"""
    spec = replace(SMALL_DYN, days=1, ksm_rollout=False)
    simulator.write_openmetrics(spec, tmp_path / "single.om", nodes_per_part=2)  # node by node
    simulator.write_openmetrics(replace(spec, ha_replicas=False), tmp_path / "plain.om")
    _f, _c, plain = parse_openmetrics(tmp_path / "plain.om")
    pairs = parse_replicas(tmp_path / "single.om")
    assert set(pairs) == set(plain) and all(set(r) == {"a", "b"} for r in pairs.values())
    step = spec.scrape_interval_s
    for key, single in plain.items():
        a, b = pairs[key]["a"], pairs[key]["b"]
        assert set(a) <= set(single) and {t - 2 for t in b} <= set(single)  # b stamps 2 s later

        def down(t: float, lo: float, hi: float) -> bool:
            return lo <= (t % 86400) / 3600 < hi

        assert [t for t in single if t not in set(a)] == [
            t for t in single if down(t, 10 + 5 / 60, 10 + 20 / 60)
        ]
        missing_b = [t for t in single if t + 2 not in set(b)]
        assert missing_b == [t for t in single if down(t + 2, 10 + 35 / 60, 10 + 50 / 60)]
        # the union: every scrape of a, and b's where a has none within half a scrape interval
        a_ts = np.array(a)
        pos = np.searchsorted(a_ts, b)
        near = [
            min((abs(t - a_ts[j]) for j in (i - 1, i) if 0 <= j < len(a_ts)), default=step)
            for t, i in zip(b, pos, strict=True)
        ]
        union = sorted(a + [t for t, d in zip(b, near, strict=True) if d >= step / 2])
        assert [round(t - 2, 3) if t not in set(a) else t for t in union] == single, key
    assert simulator.ha_replicas(replace(spec, ha_replicas=False)) == ()


def test_fleet_spec_and_plain_specs_keep_the_factory_unchanged():
    fleet = simulator.fleet_spec(64)
    assert not (fleet.mig_repartition or fleet.ha_replicas or fleet.pod_churn or fleet.relabel)
    assert fleet.ksm_offset_s == 0 and fleet.dra_snapshots_s == 0
    layout = simulator.factory_layout(SMALL)
    assert layout.events_day is None and all(g.mig_after is None for g in layout.gpus)
    assert all(lane.since is None and lane.until is None for lane in layout.lanes)
    # the changing pool adds lanes for the new MIG instances before the KAI lanes; the others keep their ids
    # (the re-partitioned 7 x 1g GPU's lanes become DRA lanes and end at the re-partition)
    dyn = simulator.factory_layout(replace(SMALL, mig_repartition=True))
    kai = [lane for lane in layout.lanes if lane.kind == "kai"]
    n = len(layout.lanes) - len(kai)

    def shape(lanes: tuple) -> list[tuple]:
        return [(lane.lid, lane.kind, lane.node, lane.devices, lane.group) for lane in lanes]

    assert shape(dyn.lanes[:n]) == shape(layout.lanes[:n])
    assert [lane.kind for lane in dyn.lanes[n:]] == ["inference_small"] * 2 + ["ft", "vceval", "free"] + [
        "kai"
    ] * len(kai)
    assert "MIG re-partition" in simulator.describe(DEMO) and simulator.changing_pool(SMALL) == []
