"""A pool that changes during the day is billed exactly (R1a, R3, R4, R5, R7, R9, R11, R13, R15).

Every case is metered three ways and must give the same hand-computed numbers:
- `rawday`: the builder's RawDay straight into `meter_day`;
- `parquet`: the day written as a `kind: parquet` source folder, read by ParquetRawSource;
- `prometheus`: the day written as OpenMetrics, backfilled with promtool into a real TSDB served by a real
  `prometheus` on 127.0.0.1, pulled by PrometheusRawSource (DRA objects from `claims_file` / `slices_file`,
  the `kubectl get -o json` lists of the same objects), then metered. One TSDB holds every case, each as its
  own cluster (`selector: cluster="<case>"`).

kube-state-metrics is scraped every minute 20 s BEFORE the dcgm-exporter grid (scrape k at index k − 20 s:
00:00:40, 00:01:40, …; the lookback from 23:55:40), as real scrapes of two targets are never aligned: a device
sample at index i reads the kube scrape k = i (R1a: the latest at or before it). A node heartbeat
(`kube_node_*` of every node) is in every scrape, as kube-state-metrics always exports its nodes.

Δ = 60 s, so a sample index is a minute (index 600 = 10:00). H100: 3.60 per GPU-hour = 0.06 a sample.
A100-80GB: 4.20 per GPU-hour = 0.07 a sample; a MIG instance weighs compute slices / 7 (R3): 1g 0.01, 2g
0.02, 3g 0.03 a sample. GPU-seconds are DECIMAL(38, 12) with each per-sample term rounded to 12 places
before it is summed (docs/accounting.md R1): 60 × 1/7 = 8.571428571429, 60 × 2/7 = 17.142857142857,
60 × 3/7 = 25.714285714286 per sample. Money is exact (integer units): the figures below are the
products of those per-sample prices. Tenants (test_rules): team-a owns ns-a, team-b owns ns-b.
"""

from __future__ import annotations

import json
import random
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_rules import (
    A100,
    DAY,
    H100,
    IDLE,
    UNALLOCATED,
    D,
    assert_conserved,
    categories,
    charges,
    make_config,
    observed_gpu_seconds,
    pool_cost,
    rows,
)

from gpumeter.config import Config, PrometheusSource
from gpumeter.ingest.contract import RawDay, concat_parts, lookback_ms
from gpumeter.ingest.k8s_objects import parse_resource_claims, parse_resource_slices
from gpumeter.ingest.parquet import ParquetRawSource
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.models.runner import meter_day
from gpumeter_sim import promserver
from gpumeter_sim.promserver import PrometheusServer, backfill
from tests.builders import FactoryBuilder

OFFSET_MS = -20_000  # kube-state-metrics scrapes 20 s before the DCGM grid
KSM = range(-4, 1441)  # kube scrapes 23:55:40 (the day before) .. 23:59:40
DAY_SAMPLES = range(0, 1440)  # 00:00 .. 23:59
KSM_TARGET = "kube-state-metrics/kube-state-metrics.kube-system:8080"  # openmetrics' default job/instance

G1, G2, G3 = D("8.571428571429"), D("17.142857142857"), D("25.714285714286")  # 60 × n/7, per sample

W1 = ("ns-a", "w1", "main")
M1 = ("ns-b", "m1", "main")
M2 = ("ns-a", "m2", "main")
S1 = ("ns-b", "s1", "main")
S2 = ("ns-a", "s2", "main")
B3 = ("ns-b", "b3", "main")


def minutes(first: int, last: int) -> range:
    """Sample indices first..last, both included."""
    return range(first, last + 1)


def heartbeat(f: FactoryBuilder, node: str, gpus: int, scrapes: range = KSM) -> FactoryBuilder:
    for k in scrapes:
        f.node_state(node, k, gpus=gpus, offset_ms=OFFSET_MS)
    return f


def by_pod(out: dict[str, pa.Table], pod: str, **where: Any) -> dict[str, Any]:
    found = rows(out, "mart_device_seconds", pod=pod, **where)
    assert len(found) == 1, (pod, where, found)
    return found[0]


def nonzero(amounts: dict[tuple[str, str], Decimal]) -> dict[tuple[str, str], Decimal]:
    return {k: v for k, v in amounts.items() if v != 0}


def assert_exact_books(out: dict[str, pa.Table], tenants: dict[str, Decimal], idle: Decimal) -> None:
    """R9/R13: tenant lines as given, __idle__ exactly `idle`, and pool cost = Σ tenants + __unallocated__
    + __idle__ exactly (Decimal); R11: the categories sum to observed capacity."""
    got = charges(out)
    assert {t: a for (t, kind), a in got.items() if kind == "reserved" and a} == tenants
    assert got.get((IDLE, "idle"), D(0)) == idle
    lines = sum(got.values(), D(0))
    unallocated = sum((a for (t, _), a in got.items() if t == UNALLOCATED), D(0))
    assert pool_cost(out) == sum(tenants.values(), D(0)) + unallocated + idle == lines
    assert sum(categories(out).values(), D(0)) == observed_gpu_seconds(out)


# --- the cases -----------------------------------------------------------------------------------


def mig_repartitioned() -> FactoryBuilder:
    """Case 1. Two A100-80GB, each alone on its node (n1: GPU-A, n2: GPU-B), every pod labelled on the DCGM
    series.
    GPU-A: whole 00:00..11:59 (720 samples), held by w1 (ns-a) 02:00..09:59 (480 samples, util 50 %), free
    otherwise (util 0); no series at all 12:00..12:09 (the GPU reset that MIG mode needs: 10 samples);
    then 12:10..23:59 (710 samples) 3g.40gb (GPU_I_ID 1, m1 of ns-b, busy 0.5) + 2g.20gb (id 3, m2 of ns-a
    12:10..17:59 = 350 samples busy 0.5, then free) + 2g.20gb (id 4, free), plus the GPU-level energy
    series (no GPU_I_ID), which is not a device in MIG mode.
    GPU-B: MIG all day, GPU-level energy series 00:00..23:59. 00:00..07:59 (480): 7 × 1g.10gb (ids 7..13):
    id 7 s1 (ns-b), id 8 s2 (ns-a) 00:00..03:59 (240), the rest free. 08:00: instances destroyed, only the
    GPU-level series (still MIG mode: 7/7 mig_unpartitioned). 08:01..23:59 (959): 2 × 3g.40gb, id 1 b3
    (ns-b), id 2 free; 1/7 of the GPU unpartitioned."""
    f = FactoryBuilder("mig", DAY, scrape_s=60)
    f.gpu("n1", "GPU-A", A100).gpu("n2", "GPU-B", A100)
    heartbeat(f, "n1", 1)
    heartbeat(f, "n2", 1)
    # GPU-A: whole until noon.
    f.samples("GPU-A", minutes(0, 119), util=0)
    f.samples("GPU-A", minutes(120, 599), util=50, pod=W1)
    f.samples("GPU-A", minutes(600, 719), util=0)
    # 12:00..12:09: reset, no series. Then MIG.
    afternoon = minutes(730, 1439)
    for i in afternoon:
        f.sample("GPU-A", i, energy=6_000_000.0 * i)
    f.samples("GPU-A", afternoon, gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=M1)
    f.samples("GPU-A", minutes(730, 1079), gr=0.5, gpu_i_id="3", profile="2g.20gb", pod=M2)
    f.samples("GPU-A", minutes(1080, 1439), gr=0.0, gpu_i_id="3", profile="2g.20gb")
    f.samples("GPU-A", afternoon, gr=0.0, gpu_i_id="4", profile="2g.20gb")
    # GPU-B: 7 × 1g.10gb, then 2 × 3g.40gb.
    for i in DAY_SAMPLES:
        f.sample("GPU-B", i, energy=6_000_000.0 * i)
    morning = minutes(0, 479)
    f.samples("GPU-B", morning, gr=0.5, gpu_i_id="7", profile="1g.10gb", pod=S1)
    f.samples("GPU-B", minutes(0, 239), gr=0.5, gpu_i_id="8", profile="1g.10gb", pod=S2)
    f.samples("GPU-B", minutes(240, 479), gr=0.0, gpu_i_id="8", profile="1g.10gb")
    for gi in ("9", "10", "11", "12", "13"):
        f.samples("GPU-B", morning, gr=0.0, gpu_i_id=gi, profile="1g.10gb")
    later = minutes(481, 1439)
    f.samples("GPU-B", later, gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=B3)
    f.samples("GPU-B", later, gr=0.0, gpu_i_id="2", profile="3g.40gb")
    return f


def mig_switched_off() -> FactoryBuilder:
    """Case 1b. A100 GPU-C on n1: MIG 00:00..11:59 (720 samples: 3g.40gb id 1 held by x1 of ns-b, busy 0.5,
    plus the GPU-level energy series); MIG switched off at noon, the GPU reset missing one scrape (12:00);
    whole again 12:01..23:59 (719 samples), held by x2 of ns-a (pod labels and DCGM_FI_DEV_GPU_UTIL on the
    GPU's own series, which no MIG GPU has)."""
    f = FactoryBuilder("migoff", DAY, scrape_s=60).gpu("n1", "GPU-C", A100)
    heartbeat(f, "n1", 1)
    for i in minutes(0, 719):
        f.sample("GPU-C", i, energy=6_000_000.0 * i)
    f.samples("GPU-C", minutes(0, 719), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=("ns-b", "x1", "main"))
    f.samples("GPU-C", minutes(721, 1439), util=50, pod=("ns-a", "x2", "main"))
    return f


def dra_job(cluster: str, ksm_until: int | None) -> FactoryBuilder:
    """Case 3. H100 GPU-D on n1 sampled 09:00..10:59 (120 samples), its series without pod labels. DRA:
    slice device gpu-0 = GPU-D, claim job-1-gpu (ns-a) on it reserved for job-1, of unknown time (valid all
    day: only the pod's phase bounds it). job-1 Pending at the scrapes of 09:57:40 and 09:58:40, Running at
    those of 09:59:40..10:18:40 (20 scrapes), then deleted: its series vanish. `ksm_until`: the last scrape
    of kube-state-metrics (None: scraped all day, the node heartbeat goes on)."""
    f = FactoryBuilder(cluster, DAY, scrape_s=60).gpu("n1", "GPU-D", H100)
    f.samples("GPU-D", minutes(540, 659), util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-D")
    f.claim("ns-a", "job-1-gpu", pool="n1", device="gpu-0", reserved_pod="job-1")
    heartbeat(f, "n1", 1, KSM if ksm_until is None else range(KSM.start, ksm_until + 1))
    for k in (598, 599):
        f.pod_phase("ns-a", "job-1", k, "Pending", offset_ms=OFFSET_MS)
    for k in minutes(600, 619):
        f.pod_phase("ns-a", "job-1", k, "Running", offset_ms=OFFSET_MS)
    return f


OLD_UID, NEW_UID = "uid-vllm-0-a", "uid-vllm-0-b"


def statefulset(cluster: str, claims: tuple[str, ...] = ("old", "new")) -> FactoryBuilder:
    """Case 4. H100 GPU-S on n1 sampled 08:00..10:59 (180 samples), no pod labels; slice device gpu-0. The
    StatefulSet pod ns-a/vllm-0: uid OLD Running at the scrapes 07:49:40..08:59:40, deleted at 09:00; back
    under the same name with uid NEW, Pending at the scrapes 09:00:40..09:04:40 (5), Running from 09:05:40.
    Claims (of unknown time, valid all day) on gpu-0: `old` = vllm-0-gpu-a reserved for (vllm-0, OLD),
    `new` = vllm-0-gpu-b reserved for (vllm-0, NEW)."""
    f = FactoryBuilder(cluster, DAY, scrape_s=60).gpu("n1", "GPU-S", H100)
    f.samples("GPU-S", minutes(480, 659), util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-S")
    heartbeat(f, "n1", 1)
    for k in minutes(470, 540):
        f.pod_phase("ns-a", "vllm-0", k, "Running", uid=OLD_UID, offset_ms=OFFSET_MS)
    for k in minutes(541, 1440):
        phase = "Pending" if k <= 545 else "Running"
        f.pod_phase("ns-a", "vllm-0", k, phase, uid=NEW_UID, offset_ms=OFFSET_MS)
    for which, name, uid in (("old", "vllm-0-gpu-a", OLD_UID), ("new", "vllm-0-gpu-b", NEW_UID)):
        if which in claims:
            f.claim("ns-a", name, pool="n1", device="gpu-0", reserved_pod="vllm-0")
            # FactoryBuilder.claim reserves for `uid-<pod>`; the recreated pod has its own uid.
            for row in f._claims:
                if row.get("claim_name") == name:
                    row["reserved_pod_uid"] = uid
    return f


LABEL_TENANTS = [
    {"name": "team-a", "pod_labels": [{"key": "team", "value": "a"}]},
    {"name": "team-c", "pod_labels": [{"key": "team", "value": "c"}]},
]


def relabelled() -> FactoryBuilder:
    """Case 5. H100 GPU-L on n1 held all day (1440 samples) by shared/p5 (pod labels on the DCGM series, a
    namespace no tenant owns). kube_pod_labels of p5: team=c at the scrapes up to 11:59:40, team=a from
    the scrape of 12:00:40 (relabelled at noon)."""
    f = FactoryBuilder("relabel", DAY, scrape_s=60).gpu("n1", "GPU-L", H100)
    f.samples("GPU-L", DAY_SAMPLES, util=50, pod=("shared", "p5", "main"))
    heartbeat(f, "n1", 1)
    for k in KSM:
        f.pod_phase("shared", "p5", k, "Running", offset_ms=OFFSET_MS)
        f.pod_labels("shared", "p5", {"team": "c" if k <= 720 else "a"}, k, offset_ms=OFFSET_MS)
    return f


def steady(cluster: str = "steady", offset_ms: int = OFFSET_MS) -> FactoryBuilder:
    """A day where nothing changes: H100 GPU-1 held all day by p1 (ns-a, pod labels on the series), H100
    GPU-2 (no pod labels) by the DRA pod train (ns-b) through claim train-gpu, Running at every scrape."""
    f = FactoryBuilder(cluster, DAY, scrape_s=60)
    f.gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", DAY_SAMPLES, util=50, pod=("ns-a", "p1", "main"))
    f.samples("GPU-2", DAY_SAMPLES, util=50)
    f.slice_device("n1", "gpu-1", uuid="GPU-2")
    f.claim("ns-b", "train-gpu", pool="n1", device="gpu-1", reserved_pod="train")
    for k in KSM:
        f.node_state("n1", k, gpus=2, offset_ms=offset_ms)
        f.pod_phase("ns-b", "train", k, "Running", offset_ms=offset_ms)
        f.pod_labels("ns-b", "train", {"app": "train"}, k, offset_ms=offset_ms)
    return f


@dataclass(frozen=True)
class Case:
    build: Callable[[], FactoryBuilder]
    config: Callable[[], Config] = make_config


CASES: dict[str, Case] = {
    "mig": Case(mig_repartitioned),
    "migoff": Case(mig_switched_off),
    "deleted": Case(lambda: dra_job("deleted", None)),
    "ksmdown": Case(lambda: dra_job("ksmdown", 619)),
    "sts": Case(lambda: statefulset("sts")),
    "sts-old": Case(lambda: statefulset("sts-old", ("old",))),
    "sts-new": Case(lambda: statefulset("sts-new", ("new",))),
    "relabel": Case(relabelled, lambda: make_config(tenants=LABEL_TENANTS)),
    "steady": Case(steady),
}
PATHS = ("rawday", "parquet", "prometheus")


# --- metering each case each way -----------------------------------------------------------------


def _meter(raw: RawDay, name: str) -> dict[str, pa.Table]:
    out = meter_day(raw, CASES[name].config(), name, DAY)
    assert_conserved(out)
    return out


@pytest.fixture(scope="module")
def through_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, pa.Table]]]:
    """Every case backfilled into one TSDB, served once, pulled and metered case by case."""
    if not promserver.binaries_available():
        pytest.skip(f"`prometheus` and `promtool` are not on PATH: {promserver.INSTALL_HINT}")
    root = tmp_path_factory.mktemp("changing-pool-prometheus")
    tsdb = root / "tsdb"
    specs: dict[str, dict[str, str]] = {}
    for name, case in CASES.items():
        f = case.build()
        backfill(f.write_openmetrics(root / f"{name}.om"), tsdb)
        docs = f.k8s_documents()
        assert set(docs) <= {None}, "these cases' DRA objects are of unknown time"
        if None in docs:
            claims, slices = docs[None]
            (root / f"{name}-claims.json").write_text(json_dump(claims), encoding="utf-8")
            (root / f"{name}-slices.json").write_text(json_dump(slices), encoding="utf-8")
            specs[name] = {
                "claims_file": str(root / f"{name}-claims.json"),
                "slices_file": str(root / f"{name}-slices.json"),
            }
    out: dict[str, dict[str, pa.Table]] = {}
    with PrometheusServer(tsdb) as server:
        for name, case in CASES.items():
            spec = PrometheusSource(
                kind="prometheus", url=server.url, selector=f'cluster="{name}"', **specs.get(name, {})
            )
            source = PrometheusRawSource(spec, name, scrape_interval_seconds=60)
            lookback = lookback_ms(case.config(), name)
            raw = concat_parts(source.fetch_day_parts(name, DAY, lookback))
            # Really pulled: every DCGM row of the day, kube rows with the scrape target Prometheus names.
            assert raw.dcgm.num_rows == case.build().build().dcgm.num_rows, name
            assert set(raw.kube.column("target").to_pylist()) == {KSM_TARGET}, name
            out[name] = _meter(raw, name)
    found = subprocess.run(["pgrep", "-f", str(tsdb)], capture_output=True, text=True, check=False)
    assert found.stdout.split() == [], "no prometheus is left running"
    yield out


def json_dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1)


class Metered:
    """Marts of a case by the rawday and parquet paths, each metered once per module."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.done: dict[tuple[str, str], dict[str, pa.Table]] = {}

    def __call__(self, name: str, path: str) -> dict[str, pa.Table]:
        if (name, path) not in self.done:
            f = CASES[name].build()
            if path == "rawday":
                self.done[name, path] = _meter(f.build(), name)
            else:
                root = f.write_parquet_source(self.tmp / name)
                lookback = lookback_ms(CASES[name].config(), name)
                self.done[name, path] = _meter(ParquetRawSource(root).fetch_day(name, DAY, lookback), name)
        return self.done[name, path]


@pytest.fixture(scope="module")
def metered_cache(tmp_path_factory: pytest.TempPathFactory) -> Metered:
    return Metered(tmp_path_factory.mktemp("changing-pool-parquet"))


def _by_path(
    request: pytest.FixtureRequest, cache: Metered, path: str
) -> Callable[[str], dict[str, pa.Table]]:
    if path == "prometheus":
        pulled: dict[str, dict[str, pa.Table]] = request.getfixturevalue("through_prometheus")
        return lambda name: pulled[name]
    return lambda name: cache(name, path)


@pytest.fixture(params=PATHS)
def metered(request: pytest.FixtureRequest, metered_cache: Metered) -> Callable[[str], dict[str, pa.Table]]:
    """The marts of a case (by name) metered by one path."""
    return _by_path(request, metered_cache, request.param)


# --- the Prometheus and Parquet paths are the same day -------------------------------------------


def test_k8s_documents_read_back_as_the_builder_s_rows() -> None:
    """The kubectl-style lists the Prometheus path reads are the builder's DRA rows, field for field."""
    for name in ("deleted", "sts", "steady"):
        f = CASES[name].build()
        raw = f.build()
        claims, slices = f.k8s_documents()[None]

        def key(r: dict[str, Any]) -> str:
            return repr(sorted(r.items()))

        got = parse_resource_claims(claims, name, "test").to_pylist()
        assert sorted(got, key=key) == sorted(raw.dra_allocations.to_pylist(), key=key)
        got = parse_resource_slices(slices, name, "test").to_pylist()
        assert sorted(got, key=key) == sorted(raw.dra_devices.to_pylist(), key=key)


@pytest.mark.parametrize("name", list(CASES))
def test_every_path_gives_the_same_marts(
    name: str, metered_cache: Metered, request: pytest.FixtureRequest
) -> None:
    """The same day read three ways is metered to the same marts, row for row."""
    reference = metered_cache(name, "rawday")
    for path in ("parquet", "prometheus"):
        other = _by_path(request, metered_cache, path)(name)
        for mart in sorted(m for m in reference if m.startswith("mart_")):
            assert reference[mart].equals(other[mart]), (name, path, mart)


# --- 1. MIG re-partitioned mid-day ---------------------------------------------------------------


def test_mig_whole_gpu_holder_of_the_morning_is_billed_its_8_hours_at_weight_1(metered: Any) -> None:
    """w1 held GPU-A whole 02:00..09:59: 480 samples × 60 s = 28,800 device-seconds = 28,800 GPU-seconds at
    weight 1, 480 × 0.07 = 33.60; the afternoon's MIG layout does not reweigh the morning."""
    out = metered("mig")
    w1 = by_pod(out, "w1")
    assert (w1["uuid"], w1["gpu_i_id"], w1["mig_profile"], w1["weight"]) == ("GPU-A", None, None, 1.0)
    assert (w1["sample_count"], w1["device_seconds"], w1["gpu_seconds"]) == (480, D(28800), D(28800))
    assert w1["reserved_cost"] == D("33.60")
    assert w1["busy_gpu_seconds"] == D(14400)  # 480 × 0.5 × 60
    assert w1["tenant"] == "team-a"


def test_mig_instance_samples_weigh_their_compute_slices(metered: Any) -> None:
    """Each instance sample weighs its slices / 7 (R3), at the layout it is in:
    m1 3g.40gb on GPU-A: 710 samples, 42,600 device-s, 710 × 25.714285714286 GPU-s, 710 × 0.03 = 21.30;
    m2 2g.20gb on GPU-A: 350 samples, 21,000 device-s, 350 × 17.142857142857, 350 × 0.02 = 7.00;
    s1 1g.10gb on GPU-B: 480 samples, 28,800 device-s, 480 × 8.571428571429, 480 × 0.01 = 4.80;
    s2 1g.10gb on GPU-B: 240 samples, 14,400 device-s, 240 × 8.571428571429, 2.40;
    b3 3g.40gb on GPU-B (after the re-partition): 959 samples, 57,540 device-s, 959 × 25.714285714286,
    959 × 0.03 = 28.77."""
    out = metered("mig")
    expected = {
        "m1": ("GPU-A", "1", "3g.40gb", 3 / 7, 710, D(42600), 710 * G3, D("21.30"), "team-b"),
        "m2": ("GPU-A", "3", "2g.20gb", 2 / 7, 350, D(21000), 350 * G2, D("7.00"), "team-a"),
        "s1": ("GPU-B", "7", "1g.10gb", 1 / 7, 480, D(28800), 480 * G1, D("4.80"), "team-b"),
        "s2": ("GPU-B", "8", "1g.10gb", 1 / 7, 240, D(14400), 240 * G1, D("2.40"), "team-a"),
        "b3": ("GPU-B", "1", "3g.40gb", 3 / 7, 959, D(57540), 959 * G3, D("28.77"), "team-b"),
    }
    for pod, want in expected.items():
        r = by_pod(out, pod)
        got = tuple(
            r[k]
            for k in (
                "uuid",
                "gpu_i_id",
                "mig_profile",
                "weight",
                "sample_count",
                "device_seconds",
                "gpu_seconds",
                "reserved_cost",
                "tenant",
            )
        )
        assert got == want, pod
    assert {r["pod"] for r in out["mart_device_seconds"].to_pylist()} == {"w1", "m1", "m2", "s1", "s2", "b3"}


def test_mig_reset_gap_is_unobserved_no_capacity_no_cost(metered: Any) -> None:
    """GPU-A has no series 12:00..12:09: those 10 samples are no capacity and cost nothing (R4). Observed:
    GPU-A 720 + 710 = 1,430 samples = 85,800 GPU-s, pool 1,430 × 0.07 = 100.10; GPU-B all 1,440 samples
    (08:00 too, by its GPU-level series alone) = 86,400 GPU-s, 1,440 × 0.07 = 100.80."""
    out = metered("mig")
    pool = {r["node"]: r for r in out["mart_pool_daily_cost"].to_pylist()}
    assert set(pool) == {"n1", "n2"}
    n1, n2 = pool["n1"], pool["n2"]
    assert (n1["gpu_model"], n1["gpu_samples"], n1["observed_gpu_seconds"]) == ("A100-80GB", 1430, D(85800))
    assert n1["pool_cost"] == D("100.10")
    assert (n2["gpu_samples"], n2["observed_gpu_seconds"], n2["pool_cost"]) == (1440, D(86400), D("100.80"))
    assert sum(categories(out, "n1").values(), D(0)) == D(85800)


def test_mig_reset_gap_is_reported_as_unobserved_gpu_seconds(metered: Any) -> None:
    """R4: kube-state-metrics reports 1 GPU on n1 all day (86,400 GPU-s); 85,800 observed; the 10-minute
    reset is 600 unobserved GPU-seconds, reported and not billed. n2: nothing unobserved."""
    out = metered("mig")
    dq = {r["node"]: r for r in out["mart_data_quality"].to_pylist()}
    assert (dq["n1"]["expected_gpu_seconds"], dq["n1"]["unobserved_gpu_seconds"]) == (86400, 600)
    assert (dq["n2"]["expected_gpu_seconds"], dq["n2"]["unobserved_gpu_seconds"]) == (86400, 0)


def test_mig_switched_off_at_noon_bills_the_whole_gpu_of_the_afternoon(metered: Any) -> None:
    """R3 (mode per sample): x1's 3g.40gb 00:00..11:59 = 720 × 0.03 = 21.60 (720 × 25.714285714286 GPU-s);
    x2 holds the whole GPU 12:01..23:59 at weight 1: 719 samples = 43,140 s, 719 × 0.07 = 50.33. Pool
    1,439 × 0.07 = 100.73; __idle__ = the MIG morning's uncovered 4/7: 720 × 0.04 = 28.80."""
    out = metered("migoff")
    x1 = by_pod(out, "x1")
    assert (x1["sample_count"], x1["gpu_seconds"], x1["reserved_cost"]) == (720, 720 * G3, D("21.60"))
    x2 = by_pod(out, "x2")
    assert (x2["mig_profile"], x2["weight"], x2["sample_count"]) == (None, 1.0, 719)
    assert (x2["device_seconds"], x2["gpu_seconds"], x2["reserved_cost"]) == (D(43140), D(43140), D("50.33"))
    assert_exact_books(out, {"team-a": D("50.33"), "team-b": D("21.60")}, D("28.80"))
    assert categories(out) == {
        "allocated_active": 720 * G3 + 719 * D(60),
        "mig_unpartitioned": 720 * (60 - G3),
    }


def test_mig_tenant_lines_and_idle_are_exact(metered: Any) -> None:
    """team-a: w1 33.60 + m2 7.00 + s2 2.40 = 43.00; team-b: m1 21.30 + s1 4.80 + b3 28.77 = 54.87;
    pool 100.10 + 100.80 = 200.90; __idle__ = 200.90 − 97.87 = 103.03 (GPU-A 38.20 + GPU-B 64.83)."""
    out = metered("mig")
    assert_exact_books(out, {"team-a": D("43.00"), "team-b": D("54.87")}, D("103.03"))
    by_profile: dict[tuple[str, str | None], Decimal] = defaultdict(Decimal)
    for r in out["mart_tenant_daily_cost"].to_pylist():
        by_profile[(r["tenant"], r["mig_profile"])] += r["amount"]
    assert by_profile[("team-a", None)] == D("33.60")  # the whole GPU of the morning
    assert by_profile[("team-a", "2g.20gb")] == D("7.00")
    assert by_profile[("team-a", "1g.10gb")] == D("2.40")
    assert by_profile[("team-b", "3g.40gb")] == D("21.30") + D("28.77")
    assert by_profile[("team-b", "1g.10gb")] == D("4.80")


def test_mig_stranded_capacity_by_category(metered: Any) -> None:
    """R11 per node, summing to its observed capacity.
    n1 (GPU-A): allocated_active = 28,800 (w1) + 710 × 25.714285714286 (m1) + 350 × 17.142857142857 (m2);
    free = 240 × 60 (whole, free) + (360 + 710) × 17.142857142857 (the free 2g samples);
    no mig_unpartitioned: 3 + 2 + 2 slices cover it.
    n2 (GPU-B): mig_unpartitioned from whole slices (docs/accounting.md R11): 7 × 1g cover it (0), 60 (08:00, no
    instance), 959 × 60 × 1/7 = 959 × 8.571428571429, within 10⁻⁸ of the exact 60 + 959 × 60/7. What the
    instances' rounded terms leave of Δ beside it goes to the first instance: 60 − 7 × 8.571428571429 =
    −3 × 10⁻¹² a sample to id 10 (free; ids sort as text) in the morning, 60 − 8.571428571429 − 2 ×
    25.714285714286 = −10⁻¹² a sample to b3's id 1 (active) after 08:00:
    allocated_active = (480 + 240) × 8.571428571429 + 959 × (25.714285714286 − 10⁻¹²);
    free = (5 × 480 + 240) × 8.571428571429 − 480 × 3 × 10⁻¹² + 959 × 25.714285714286."""
    out = metered("mig")
    n1 = categories(out, "n1")  # no mig_unpartitioned row at all, not even a 0
    assert n1 == {
        "allocated_active": D(28800) + 710 * G3 + 350 * G2,
        "free": 240 * D(60) + (360 + 710) * G2,
    }
    assert sum(n1.values(), D(0)) == D(85800)
    n2 = categories(out, "n2")
    residue = D("1E-12")
    assert n2["allocated_active"] == (480 + 240) * G1 + 959 * (G3 - residue)
    assert n2["free"] == (5 * 480 + 240) * G1 - 480 * 3 * residue + 959 * G3
    assert n2["mig_unpartitioned"] == 60 + 959 * G1
    exact = Fraction(60) + 959 * Fraction(60, 7)
    assert abs(Fraction(n2["mig_unpartitioned"]) - exact) < Fraction(1, 10**8)
    assert set(n2) == {"allocated_active", "free", "mig_unpartitioned"}
    assert sum(n2.values(), D(0)) == D(86400)


def test_mig_slice_usage_shows_each_layout_for_its_own_hours(metered: Any) -> None:
    """mig_slice_usage per (GPU, layout, instance), compute slice-seconds (slices × 60 per sample):
    GPU-A only its afternoon layout 2g.20gb+2g.20gb+3g.40gb (the whole morning is no layout): 710 samples
    = 42,600 s each; 3g id 1 held 3 × 60 × 710 = 127,800; 2g id 3 held 2 × 60 × 350 = 42,000, free
    2 × 60 × 360 = 43,200; 2g id 4 free 85,200; unpartitioned 0.
    GPU-B: 7 × 1g.10gb for 480 samples = 28,800 s (id 7 held 28,800; id 8 held 14,400 + free 14,400;
    ids 9..13 free 28,800), unpartitioned 0; the 08:00 sample with no instance: layout '', 60 s, 7 × 60 =
    420 unpartitioned; 3g.40gb+3g.40gb for 959 samples = 57,540 s (id 1 held 172,620, id 2 free 172,620),
    unpartitioned 1 × 60 × 959 = 57,540."""
    out = metered("mig")
    got = {
        (r["uuid"], r["layout"], r["gpu_i_id"] or r["mig_profile"]): (
            r["mig_profile"],
            r["observed_seconds"],
            r["held_slice_seconds"],
            r["free_slice_seconds"],
            r["unpartitioned_slice_seconds"],
        )
        for r in out["mart_mig_slice_usage"].to_pylist()
    }
    a_layout, seven, two_3g = "2g.20gb+2g.20gb+3g.40gb", "+".join(["1g.10gb"] * 7), "3g.40gb+3g.40gb"
    expected = {
        ("GPU-A", a_layout, "1"): ("3g.40gb", 42600, D(127800), D(0), D(0)),
        ("GPU-A", a_layout, "3"): ("2g.20gb", 42600, D(42000), D(43200), D(0)),
        ("GPU-A", a_layout, "4"): ("2g.20gb", 42600, D(0), D(85200), D(0)),
        ("GPU-A", a_layout, "unpartitioned"): ("unpartitioned", 42600, D(0), D(0), D(0)),
        ("GPU-B", seven, "7"): ("1g.10gb", 28800, D(28800), D(0), D(0)),
        ("GPU-B", seven, "8"): ("1g.10gb", 28800, D(14400), D(14400), D(0)),
        **{
            ("GPU-B", seven, gi): ("1g.10gb", 28800, D(0), D(28800), D(0))
            for gi in ("9", "10", "11", "12", "13")
        },
        ("GPU-B", seven, "unpartitioned"): ("unpartitioned", 28800, D(0), D(0), D(0)),
        ("GPU-B", "", "unpartitioned"): ("unpartitioned", 60, D(0), D(0), D(420)),
        ("GPU-B", two_3g, "1"): ("3g.40gb", 57540, D(172620), D(0), D(0)),
        ("GPU-B", two_3g, "2"): ("3g.40gb", 57540, D(0), D(172620), D(0)),
        ("GPU-B", two_3g, "unpartitioned"): ("unpartitioned", 57540, D(0), D(0), D(57540)),
    }
    assert got == expected


# --- 3. A pod deleted ----------------------------------------------------------------------------


def test_a_deleted_dra_pod_is_billed_only_while_the_latest_scrape_shows_it_running(metered: Any) -> None:
    """job-1 is Running at the scrapes 09:59:40..10:18:40; the scrape of 10:19:40 does not show it (deleted,
    not Succeeded): it holds the device samples 10:00..10:19 = 20 samples = 1,200 s, 20 × 0.06 = 1.20, not
    the 5 more minutes kube_lookback_seconds would give (1.50). Pool 120 × 0.06 = 7.20, __idle__ 6.00."""
    out = metered("deleted")
    job = by_pod(out, "job-1")
    assert (job["holder_source"], job["sample_count"], job["device_seconds"]) == ("dra", 20, D(1200))
    assert (job["gpu_seconds"], job["reserved_cost"], job["tenant"]) == (D(1200), D("1.20"), "team-a")
    assert_exact_books(out, {"team-a": D("1.20")}, D("6.00"))
    assert categories(out) == {"allocated_active": D(1200), "free": D(100 * 60)}


def test_when_kube_state_metrics_is_down_the_lookback_bounds_a_running_pod(metered: Any) -> None:
    """kube-state-metrics is not scraped after 10:18:40 at all (target down): nothing says job-1 ended, so
    its last Running sample holds for kube_lookback_seconds (300 s), up to 10:23:40: device samples
    10:00..10:23 = 24 samples = 1,440 s, 1.44; __idle__ 7.20 − 1.44 = 5.76."""
    out = metered("ksmdown")
    job = by_pod(out, "job-1")
    assert (job["sample_count"], job["device_seconds"], job["reserved_cost"]) == (24, D(1440), D("1.44"))
    assert_exact_books(out, {"team-a": D("1.44")}, D("5.76"))


# --- 4. A StatefulSet pod recreated under the same name ------------------------------------------


@pytest.mark.parametrize(
    ("name", "samples", "cost", "idle"),
    [
        # old uid Running at the scrapes up to 08:59:40: device samples 08:00..09:00 = 61.
        ("sts-old", 61, D("3.66"), D("7.14")),
        # new uid Running from the scrape of 09:05:40: device samples 09:06..10:59 = 114.
        ("sts-new", 114, D("6.84"), D("3.96")),
        # both: 175; the 5 Pending samples 09:01..09:05 are idle (0.30).
        ("sts", 175, D("10.50"), D("0.30")),
    ],
)
def test_a_recreated_statefulset_pod_s_claims_bill_only_their_own_uid(
    metered: Any, name: str, samples: int, cost: Decimal, idle: Decimal
) -> None:
    """vllm-0 with uid OLD until 09:00, uid NEW (Pending 5 min, then Running) after, on one GPU (180
    samples, pool 10.80). A claim reserved for (vllm-0, OLD) bills only OLD's Running time (08:00..09:00,
    61 × 0.06 = 3.66), one for NEW only NEW's (09:06..10:59, 114 × 0.06 = 6.84), whatever the other pod
    of that name does meanwhile; with both claims 175 samples = 10.50."""
    out = metered(name)
    pod = by_pod(out, "vllm-0")
    assert (pod["holder_source"], pod["sample_count"], pod["device_seconds"]) == (
        "dra",
        samples,
        D(samples * 60),
    )
    assert pod["reserved_cost"] == cost
    assert_exact_books(out, {"team-a": cost}, idle)


def _shuffled(raw: RawDay, seed: int) -> RawDay:
    rng = random.Random(seed)

    def shuffle(table: pa.Table) -> pa.Table:
        order = list(range(table.num_rows))
        rng.shuffle(order)
        return table.take(pa.array(order, pa.int64()))

    return RawDay(
        shuffle(raw.dcgm), shuffle(raw.kube), shuffle(raw.dra_allocations), shuffle(raw.dra_devices)
    )


@pytest.mark.parametrize("name", ["sts", "mig", "relabel"])
def test_metering_the_same_day_twice_and_shuffled_gives_identical_marts(name: str) -> None:
    """R15: the same input metered again, and with every raw table's rows shuffled, gives the same marts."""
    raw = CASES[name].build().build()
    first = _meter(raw, name)
    again = _meter(raw, name)
    shuffled = _meter(_shuffled(raw, 20261101), name)
    marts = sorted(m for m in first if m.startswith("mart_"))
    assert marts
    for mart in marts:
        assert first[mart].equals(again[mart]), mart
        assert first[mart].equals(shuffled[mart]), mart


# --- 5. A pod relabelled -------------------------------------------------------------------------


def test_a_relabelled_pod_is_split_at_the_first_scrape_showing_the_new_labels(metered: Any) -> None:
    """p5 is team=c until the scrape of 11:59:40 and team=a from that of 12:00:40: team-c pays the device
    samples 00:00..12:00 (721 × 0.06 = 43.26, 43,260 s), team-a those of 12:01..23:59 (719 × 0.06 = 43.14,
    43,140 s). Pool 1,440 × 0.06 = 86.40; nothing idle."""
    out = metered("relabel")
    c, a = by_pod(out, "p5", tenant="team-c"), by_pod(out, "p5", tenant="team-a")
    assert (c["sample_count"], c["device_seconds"], c["reserved_cost"]) == (721, D(43260), D("43.26"))
    assert (a["sample_count"], a["device_seconds"], a["reserved_cost"]) == (719, D(43140), D("43.14"))
    assert len(rows(out, "mart_device_seconds", pod="p5")) == 2
    assert_exact_books(out, {"team-c": D("43.26"), "team-a": D("43.14")}, D(0))


# --- nothing changes -----------------------------------------------------------------------------


def test_a_day_where_nothing_changes_is_billed_as_the_old_rules_bill_it(metered: Any) -> None:
    """Under the old rule (a kube sample holds until the next one, at most kube_lookback_seconds) every
    sample of this day is held: p1 and train 1,440 samples each = 86,400 s, 1,440 × 0.06 = 86.40 each;
    pool 172.80, __idle__ 0; all capacity allocated_active. The new rule (R1a) bills the same."""
    out = metered("steady")
    for pod, source, tenant in (("p1", "labels", "team-a"), ("train", "dra", "team-b")):
        r = by_pod(out, pod)
        assert (r["holder_source"], r["tenant"], r["sample_count"]) == (source, tenant, 1440)
        assert (r["device_seconds"], r["gpu_seconds"], r["reserved_cost"]) == (D(86400), D(86400), D("86.40"))
    assert_exact_books(out, {"team-a": D("86.40"), "team-b": D("86.40")}, D(0))
    assert categories(out) == {"allocated_active": D(172800)}


def test_on_a_steady_day_the_kube_scrape_offset_changes_nothing_billed() -> None:
    """The same steady day with kube-state-metrics on the DCGM grid (offset 0) and 20 s before it: every
    mart is identical, data_quality's expected capacity too (the lookback's last scrape covers the first
    seconds of the day)."""
    on_grid = meter_day(steady("steady", 0).build(), make_config(), "steady", DAY)
    before = meter_day(steady("steady", OFFSET_MS).build(), make_config(), "steady", DAY)
    for mart in sorted(m for m in on_grid if m.startswith("mart_")):
        assert on_grid[mart].equals(before[mart]), mart
