"""Conformance: one small day of one GPU node, exposed as the exporters write it (tests/conformance_corpus.py),
stored as each scrape path stores it (tests/scrape_paths.py), backfilled into ONE real Prometheus (each
combination under its own `cluster` label), pulled with the product's Prometheus source and metered. Every
combination must meter the day exactly, to the cent, whatever path or exporter dialect brought the series.

The day, 2026-11-03, node `node-1`, Δ = 15 s (dcgm-exporter's scrape interval; kube-state-metrics every 30 s,
OpenCost every 60 s). dcgm-exporter (pod `nvidia-dcgm-exporter-x7k2p`, 10.0.0.5, namespace `gpu-operator`) is
scraped 01:00-05:00 only (960 scrapes; the rest of the day is unobserved):

- GPU-A (whole H100): held by `train-0` (namespace `training`, tenant ml-training) 01:00-04:00, busy 0.80;
  free 04:00-05:00.
- GPU-B (whole H100): free all the time.
- GPU-C (H100, MIG, flex mode: no series of the GPU itself): instance 1 `3g.40gb` held by `infer-0`
  (namespace `serving`, tenant inference) all the time, busy 0.03 (under idle_threshold 0.05); instance 2
  `3g.40gb` free and reporting no frame buffer; 1/7 of the GPU unpartitioned.

The truth below is worked out by hand (in Fractions), never by running the product.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from conformance_corpus import (
    DCGM_3X_OLD_NAMESPACE,
    DCGM_4X,
    DCGM_4X_OLDER,
    DCGM_SCRAPE_S,
    KSM_POD,
    KSM_SCRAPE_S,
    OPENCOST_SCRAPE_S,
    DcgmDialect,
    DraClaim,
    Exposed,
    Gpu,
    GpuReading,
    KsmPod,
    PodRef,
    dcgm_mig_instance,
    dcgm_whole_gpu,
    ksm_node,
    ksm_path,
    ksm_pod,
    opencost_node,
    opencost_path,
)
from prometheus_fixtures import PROMETHEUS, PromQLServer, needs_prometheus, sample, serve_openmetrics
from scrape_paths import ScrapePath, dcgm_exporter_paths

import gpumeter.models.runner as runner
from gpumeter.config import IDLE, UNALLOCATED, Config, parse_config
from gpumeter.ingest.contract import day_bounds_ms, lookback_ms
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.ingest.prometheus.promql import escape_label_value
from gpumeter.models.project import AccountingError

pytestmark = needs_prometheus

DAY = date(2026, 11, 3)
D0 = day_bounds_ms(DAY)[0]  # the day's first millisecond
MINUTE, HOUR = 60_000, 3_600_000
NODE = "node-1"
EXPORTER_POD, EXPORTER_IP, EXPORTER_NAMESPACE = "nvidia-dcgm-exporter-x7k2p", "10.0.0.5", "gpu-operator"

# --- the scrapes -----------------------------------------------------------------------------------------
# dcgm-exporter: scrape k (0 <= k < 960) at 01:00:03.217 + k·15 s. GPU-A is held at k < 720 (before 04:00).
DCGM_START, DCGM_OFFSET = D0 + HOUR, 3_217
DCGM_SCRAPES = 4 * 3_600 // DCGM_SCRAPE_S  # 960
HELD_SCRAPES = 3 * 3_600 // DCGM_SCRAPE_S  # 720
# kube-state-metrics every 30 s and OpenCost every 60 s, from 00:50 to 05:10 (their state covers the GPUs').
KUBE_START, KUBE_END = D0 + 50 * MINUTE, D0 + 5 * HOUR + 10 * MINUTE
KSM_OFFSET, OPENCOST_OFFSET = 11_500, 42_000
TRAIN_DELETED = D0 + 4 * HOUR  # train-0 is gone from kube-state-metrics' scrapes from 04:00 on

GPU_A = Gpu("0", "GPU-5f8c2a1e-3b7d-4c9e-8a2f-1d6e9b0c4a71", "00000000:18:00.0")
GPU_B = Gpu("1", "GPU-7a3e9d2c-1f4b-4e8a-9c6d-2b5f8e1a3c92", "00000000:2A:00.0")
GPU_C = Gpu("2", "GPU-c14b6e8f-9a2d-4f3c-b7e1-5d8a2c9f6e03", "00000000:3A:00.0")
TRAIN = PodRef("training", "train-0", "pytorch")
TRAIN_1 = PodRef("training", "train-1", "pytorch")  # the vgpu variant: GPU-A time-sliced between two pods
INFER = PodRef("serving", "infer-0", "triton")
MIG_PROFILE = "3g.40gb"

# Tenants: pod label rules and namespaces agree (so the day is the same with or without kube-state-metrics'
# label allow-list). `platform` owns the exporter's and kube-state-metrics' namespaces: a GPU billed to the
# exporter pod would show up as platform's money.
TENANTS = [
    {
        "name": "ml-training",
        "namespaces": ["training"],
        "pod_labels": [{"key": "team", "value": "ml-training"}],
    },
    {"name": "inference", "namespaces": ["serving"], "pod_labels": [{"key": "team", "value": "inference"}]},
    {"name": "platform", "namespaces": ["gpu-operator", "monitoring"]},
]
H100_MODEL = "NVIDIA H100 80GB HBM3"
RATE_CARD_PRICE = Fraction("3.60")
OPENCOST_PRICE = Fraction("2.88")


@dataclass(frozen=True)
class Combo:
    """One way the day reaches Prometheus: a scrape path, a dcgm-exporter dialect, whether `up` is stored."""

    path: ScrapePath
    dialect: DcgmDialect
    with_up: bool = True
    hostname: str = NODE  # the exporter's node label: its pod's own name when NODE_NAME is not set
    allowlist: bool = True  # kube-state-metrics' --metric-labels-allowlist=pods=[team]
    shared: bool = False  # --kubernetes-virtual-gpus: GPU-A's series copied per pod (vgpu "0", "1")
    dra: bool = False  # --kubernetes-enable-dra: dra_* labels on GPU-A's held series
    tag: str = ""

    @property
    def cluster(self) -> str:
        parts = [self.path.name, self.dialect.name, "up" if self.with_up else "noup"]
        return ".".join([*parts, self.tag] if self.tag else parts)

    @property
    def blind(self) -> bool:
        """No `up`, and the exporter's pod labels win over a Kubernetes target's own (honorLabels true) under
        the same names: a held GPU's pod cannot be told from the exporter's pod. The product must then meter
        every GPU as held by nobody (and never by the exporter)."""
        clash = self.dialect.pod_label in self.path.target_labels
        return not self.with_up and self.path.honor_labels and clash


PATHS = {p.name: p for p in dcgm_exporter_paths(NODE, EXPORTER_POD, EXPORTER_IP)}
COMBOS: list[Combo] = [
    Combo(path, dialect, with_up, allowlist=dialect is DCGM_4X)
    for dialect in (DCGM_4X, DCGM_3X_OLD_NAMESPACE)
    for path in PATHS.values()
    for with_up in (True, False)
] + [
    Combo(PATHS["servicemonitor"], DCGM_4X_OLDER),
    Combo(PATHS["servicemonitor"], DCGM_4X, hostname=EXPORTER_POD, tag="no-node-name"),
    Combo(PATHS["podmonitor-honor"], DCGM_4X, hostname=EXPORTER_POD, tag="no-node-name"),
    Combo(PATHS["servicemonitor"], DCGM_4X, shared=True, tag="vgpu"),
    Combo(PATHS["servicemonitor-honor"], DCGM_4X, shared=True, tag="vgpu"),
    Combo(PATHS["servicemonitor-honor"], DCGM_4X, dra=True, tag="dra"),
    Combo(PATHS["servicemonitor"], DCGM_4X, dra=True, tag="dra"),
]
BY_CLUSTER = {c.cluster: c for c in COMBOS}
assert len(BY_CLUSTER) == len(COMBOS)


# --- the exposition, scrape by scrape ---------------------------------------------------------------------


def _energy(gpu: Gpu, k: int) -> float:
    # A counter in mJ since boot: 300 W for 15 s is 4,500,000 mJ a scrape (GPU-C 200 W).
    watts = 200 if gpu is GPU_C else 300
    return 1_000_000_000.0 * (int(gpu.index) + 1) + k * watts * DCGM_SCRAPE_S * 1000


def dcgm_scrape(combo: Combo, k: int) -> list[Exposed]:
    d, host = combo.dialect, combo.hostname
    held = k < HELD_SCRAPES
    a = GpuReading(busy=0.8 if held else 0.0, fb_used_mib=61_440 if held else 0, energy_mj=_energy(GPU_A, k),
                   power_w=300.0)  # fmt: skip
    out: list[Exposed] = []
    if held and combo.shared:
        out += dcgm_whole_gpu(d, GPU_A, host, a, TRAIN, vgpu="0")
        out += dcgm_whole_gpu(d, GPU_A, host, a, TRAIN_1, vgpu="1")
    elif held and combo.dra:
        claim = DraClaim("train-0-gpu-claim-x2k9d", TRAIN.namespace, "gpu-0", NODE)
        out += dcgm_whole_gpu(d, GPU_A, host, a, TRAIN, dra=claim)
    else:
        out += dcgm_whole_gpu(d, GPU_A, host, a, TRAIN if held else None)
    b = GpuReading(busy=0.0, fb_used_mib=0, energy_mj=_energy(GPU_B, k), power_w=70.0)
    out += dcgm_whole_gpu(d, GPU_B, host, b)
    c = GpuReading(busy=0.0, fb_used_mib=0, energy_mj=_energy(GPU_C, k), power_w=200.0)
    inst1 = GpuReading(busy=0.03, fb_used_mib=20_480, energy_mj=0, power_w=0)
    inst2 = GpuReading(busy=0.0, fb_used_mib=0, energy_mj=0, power_w=0)
    out += dcgm_mig_instance(d, GPU_C, host, "1", MIG_PROFILE, inst1, c, INFER)
    out += dcgm_mig_instance(d, GPU_C, host, "2", MIG_PROFILE, inst2, c, None, reports_fb=False)
    return out


def ksm_pods(combo: Combo, ts: int) -> list[KsmPod]:
    common = {"node": NODE, "host_ip": "10.0.0.5"}
    pods = [
        KsmPod("gpu-operator", EXPORTER_POD, "0b1f7c2e-exporter", container="nvidia-dcgm-exporter",
               created_by_kind="DaemonSet", created_by_name="nvidia-dcgm-exporter", pod_ip=EXPORTER_IP,
               labels=(("app", "nvidia-dcgm-exporter"),),
               requests=(("cpu", 0.1), ("memory", 134_217_728)), **common),
        KsmPod("serving", "infer-0", "4c2d9e1a-infer", container="triton", created_by_kind="StatefulSet",
               created_by_name="infer", pod_ip="10.244.1.21", labels=(("team", "inference"),),
               requests=(("nvidia_com_mig_3g_40gb", 1), ("cpu", 4), ("memory", 34_359_738_368)), **common),
    ]  # fmt: skip
    if ts < TRAIN_DELETED:
        gpu_request = () if combo.dra else (("nvidia_com_gpu", 1),)  # a DRA claim is no resource request
        for ref in (TRAIN, TRAIN_1) if combo.shared else (TRAIN,):
            pods.append(
                KsmPod(ref.namespace, ref.pod, f"9e7a3b5c-{ref.pod}", container="pytorch", created_by_kind="Job",
                       created_by_name=ref.pod.rsplit("-", 1)[0], pod_ip=f"10.244.1.{30 + len(pods)}",
                       labels=(("team", "ml-training"),),
                       requests=(*gpu_request, ("cpu", 8), ("memory", 68_719_476_736)), **common)
            )  # fmt: skip
    return pods


def ksm_scrape(combo: Combo, ts: int) -> list[Exposed]:
    # Mixed MIG strategy: nvidia_com_gpu counts the 2 whole GPUs, GFD's gpu.count label all 3.
    out = ksm_node(NODE, whole_gpus=2, mig_capacity={"nvidia_com_mig_3g_40gb": 2}, gpu_count_label=3)
    for pod in ksm_pods(combo, ts):
        out += ksm_pod(pod, labels_allowlisted=combo.allowlist)
    return out


# One combination's stored series: (metric, sorted labels) -> [(ts_ms, value)] in time order.
Stored = dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]]


class Writer:
    """The combination's series as the server read holds them: `path.scraped` of the exposed labels (or
    `path.up()`), with the combination's cluster label; each label set worked out once (they repeat at every
    scrape)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.series: Stored = defaultdict(list)
        self._keys: dict[
            tuple[str, tuple[tuple[str, str], ...]], tuple[str, tuple[tuple[str, str], ...]]
        ] = {}

    def _key(self, path: ScrapePath, exposed: tuple[tuple[str, str], ...], up: bool) -> tuple[str, Any]:
        cache = (path.name, exposed)
        if cache not in self._keys:
            labels = path.up() if up else path.scraped(dict(exposed))
            name = labels.pop("__name__")
            made = sample(name, {**labels, "cluster": self.cluster}, 0, 0)
            self._keys[cache] = (made.metric, made.labels)
        return self._keys[cache]

    def add(self, path: ScrapePath, exposed: Exposed, ts: int) -> None:
        self.series[self._key(path, tuple(exposed.labels.items()), False)].append((ts, float(exposed.value)))

    def up(self, path: ScrapePath, ts: int) -> None:
        self.series[self._key(path, (), True)].append((ts, 1.0))


def combo_series(combo: Combo) -> Stored:
    cluster, dcgm = combo.cluster, combo.path
    ksm, opencost = ksm_path(dcgm), opencost_path(dcgm)
    out = Writer(cluster)
    for k in range(DCGM_SCRAPES):
        ts = DCGM_START + k * DCGM_SCRAPE_S * 1000 + DCGM_OFFSET
        for e in dcgm_scrape(combo, k):
            out.add(dcgm, e, ts)
        if combo.with_up:
            out.up(dcgm, ts)
    for ts in range(KUBE_START + KSM_OFFSET, KUBE_END, KSM_SCRAPE_S * 1000):
        for e in ksm_scrape(combo, ts):
            out.add(ksm, e, ts)
        if combo.with_up:
            out.up(ksm, ts)
    price = opencost_node(NODE, float(OPENCOST_PRICE), "p5.48xlarge", "us-east-1",
                          "aws:///us-east-1a/i-0a1b2c3d4e5f60718")  # fmt: skip
    for ts in range(KUBE_START + OPENCOST_OFFSET, KUBE_END, OPENCOST_SCRAPE_S * 1000):
        for e in price:
            out.add(opencost, e, ts)
        if combo.with_up:
            out.up(opencost, ts)
    if combo.with_up and dcgm.federated and dcgm.federation_target:
        # The federating server's own target: its `up` carries the federate job's labels only.
        fed = ScrapePath("federate", dcgm.federation_target, honor_labels=False)
        for ts in range(KUBE_START + 5_000, KUBE_END, DCGM_SCRAPE_S * 1000):
            out.up(fed, ts)
    return out.series


def write_series(stored: Stored, path: Path) -> Path:
    """OpenMetrics text of `stored`, in the form prometheus_fixtures.write_openmetrics writes (one block per
    family, each series in time order, timestamps in seconds with millisecond decimals, `# EOF`), but each
    series' labels rendered once rather than once per sample: the corpus is about a million samples."""
    by_family: dict[str, list[tuple[tuple[tuple[str, str], ...], list[tuple[int, float]]]]] = defaultdict(
        list
    )
    for (metric, labels), points in stored.items():
        by_family[metric].append((labels, points))
    with path.open("w", encoding="utf-8") as f:
        for metric in sorted(by_family):
            f.write(f"# TYPE {metric} gauge\n")
            for labels, points in sorted(by_family[metric]):
                body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels)
                head = f"{metric}{{{body}}} "
                f.writelines(f"{head}{v!r} {ts // 1000}.{ts % 1000:03d}\n" for ts, v in sorted(points))
        f.write("# EOF\n")
    return path


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromQLServer]:
    folder = tmp_path_factory.mktemp("prom-conformance")
    stored: Stored = {}
    for combo in COMBOS:
        stored |= combo_series(combo)  # one cluster label per combination: no series is shared
    with serve_openmetrics(PROMETHEUS, write_series(stored, folder / "samples.om"), folder) as server:
        yield server


# --- metering ---------------------------------------------------------------------------------------------


def config_for(url: str, cluster: str, *, price_source: str = "rate_card", scrape_s: int = 15) -> Config:
    if price_source == "opencost":
        rate_card: dict[str, Any] = {
            "price_source": "opencost",
            "models": [{"model": "H100-80GB", "aliases": [H100_MODEL]}],
        }
    else:
        rate_card = {"models": [{"model": "H100-80GB", "aliases": [H100_MODEL], "price_per_gpu_hour": 3.6}]}
    # One window per query (chunk_seconds: a day): the same samples as hour windows (docs/config.md), and 22
    # queries a day instead of 526, which is most of a small day's pull.
    source = {"kind": "prometheus", "url": url, "selector": f'cluster="{cluster}"', "chunk_seconds": 86_400}
    # As tests/test_rules.py's make_config builds one (idle_threshold and the rest at their defaults).
    doc = {
        "clusters": [{"name": cluster, "source": source}],
        "scrape_interval_seconds": scrape_s,
        "rate_card": rate_card,
        "tenants": TENANTS,
    }
    return parse_config(yaml.safe_dump(doc))


def pull_and_meter(prom: PromQLServer, cluster: str, config: Config) -> dict[str, pa.Table]:
    spec = config.cluster(cluster).source
    raw_source = PrometheusRawSource(
        spec,  # type: ignore[arg-type]
        cluster,
        scrape_interval_seconds=config.scrape_interval_of(cluster),
        backoff_seconds=0.01,
    )
    raw = raw_source.fetch_day(cluster, DAY, lookback_ms(config, cluster))
    return runner.meter_day(raw, config, cluster, DAY, select=MARTS)


MARTS = (
    "mart_tenant_daily_cost",
    "mart_pool_daily_cost",
    "mart_device_seconds",
    "mart_stranded_capacity",
    "mart_data_quality",
)
_METERED: dict[tuple[str, str, str], dict[str, pa.Table]] = {}


def metered(prom: PromQLServer, cluster: str, price_source: str = "rate_card") -> dict[str, pa.Table]:
    key = (prom.url, cluster, price_source)
    if key not in _METERED:
        _METERED[key] = pull_and_meter(
            prom, cluster, config_for(prom.url, cluster, price_source=price_source)
        )
    return _METERED[key]


# --- the truth, by hand ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    charges: dict[str, Fraction]  # tenant (and __idle__, __unallocated__) -> money
    pool_cost: Fraction
    categories: dict[str, Fraction]  # R11 category -> GPU-seconds
    holders: dict[tuple[str, str], Fraction]  # (namespace, pod) -> GPU-seconds held


def truth(combo: Combo, price: Fraction) -> Truth:
    delta = Fraction(DCGM_SCRAPE_S)
    mig = Fraction(3, 7)  # a 3g.40gb instance: 3 of 7 compute slices (R3, mig_weight compute)
    per_sample = delta / 3600 * price  # one whole-GPU sample: 15/3600 × 3.60 = 0.015 (OpenCost 2.88: 0.012)
    # R4/R9: the three GPUs are observed at all 960 scrapes (GPU-C through its instances): 2,880 GPU samples.
    # Pool cost 2,880 × 0.015 = 43.20 (OpenCost: 2,880 × 0.012 = 34.56). Observed 2,880 × 15 = 43,200 GPU-s.
    pool = 3 * DCGM_SCRAPES * per_sample
    observed = 3 * DCGM_SCRAPES * delta
    # GPU-C: 1/7 of it is in no instance, all day long: 960 × 15 / 7 = 2,057.142857… GPU-s, never held.
    unpartitioned = DCGM_SCRAPES * delta * Fraction(1, 7)
    if combo.blind:
        # Nobody holds anything: pool cost is all __idle__, every device-second free but GPU-C's
        # unpartitioned seventh. 43,200 − 2,057.142857… = 41,142.857142… GPU-s free.
        return Truth(
            charges={IDLE: pool},
            pool_cost=pool,
            categories={"free": observed - unpartitioned, "mig_unpartitioned": unpartitioned},
            holders={},
        )
    # ml-training: GPU-A for 720 samples: 720 × 0.015 = 10.80 (OpenCost 8.64). With vgpu copies train-0 and
    # train-1 get ½ each (R6): 5.40 + 5.40, the same 10.80 for the tenant.
    training = HELD_SCRAPES * per_sample
    # inference: instance 1 (3/7) for 960 samples: 960 × 0.015 × 3/7 = 43.20/7 = 6.171428571… → 6.17
    # (OpenCost: 960 × 0.012 × 3/7 = 34.56/7 = 4.937142857… → 4.94).
    inference = DCGM_SCRAPES * per_sample * mig
    # __idle__: 43.20 − 10.80 − 6.171428… = 26.228571… → 26.23 (OpenCost: 34.56 − 8.64 − 4.937142… =
    # 20.982857… → 20.98). __unallocated__: nobody outside the tenants holds a GPU: 0.
    idle = pool - training - inference
    # R11: GPU-A held and busy 0.80 ≥ 0.05 for 720 × 15 = 10,800 GPU-s: allocated_active. infer-0 busy
    # 0.03 < 0.05: 960 × 15 × 3/7 = 6,171.428571… allocated_idle. Free: GPU-A 240 × 15 = 3,600, GPU-B
    # 960 × 15 = 14,400, instance 2 6,171.428571…: 24,171.428571… free. mig_unpartitioned
    # 2,057.142857…. Sum 43,200.
    active = HELD_SCRAPES * delta
    held_idle = DCGM_SCRAPES * delta * mig
    free = (DCGM_SCRAPES - HELD_SCRAPES) * delta + DCGM_SCRAPES * delta + DCGM_SCRAPES * delta * mig
    assert active + held_idle + free + unpartitioned == observed == 43_200
    holders = {(INFER.namespace, INFER.pod): held_idle}
    if combo.shared:
        holders |= {(TRAIN.namespace, TRAIN.pod): active / 2, (TRAIN_1.namespace, TRAIN_1.pod): active / 2}
    else:
        holders[(TRAIN.namespace, TRAIN.pod)] = active
    return Truth(
        charges={"ml-training": training, "inference": inference, IDLE: idle},
        pool_cost=pool,
        categories={
            "allocated_active": active,
            "allocated_idle": held_idle,
            "free": free,
            "mig_unpartitioned": unpartitioned,
        },
        holders=holders,
    )


# --- reading the marts --------------------------------------------------------------------------------------


def cents(value: Fraction | Decimal) -> Decimal:
    if isinstance(value, Fraction):
        value = Decimal(value.numerator) / Decimal(value.denominator)
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)


def exact(row: dict[str, Any], units: str, fallback: str) -> Fraction:
    """A money figure exactly: its integer units ÷ units per currency where the mart has them."""
    if row.get(units) is not None and row.get("units_per_currency"):
        return Fraction(int(row[units]), int(row["units_per_currency"]))
    return Fraction(str(row[fallback]))


def got_charges(out: dict[str, pa.Table]) -> dict[str, Fraction]:
    found: dict[str, Fraction] = defaultdict(Fraction)
    for r in out["mart_tenant_daily_cost"].to_pylist():
        found[r["tenant"]] += exact(r, "amount_units", "amount")
    return {t: v for t, v in found.items() if v != 0}


def got_pool(out: dict[str, pa.Table]) -> Fraction:
    return sum(
        (exact(r, "pool_units", "pool_cost") for r in out["mart_pool_daily_cost"].to_pylist()), Fraction(0)
    )


def got_categories(out: dict[str, pa.Table]) -> dict[str, Fraction]:
    found: dict[str, Fraction] = defaultdict(Fraction)
    for r in out["mart_stranded_capacity"].to_pylist():
        found[r["category"]] += Fraction(str(r["gpu_seconds"]))
    return {c: v for c, v in found.items() if v != 0}


def got_holders(out: dict[str, pa.Table]) -> dict[tuple[str, str], Fraction]:
    found: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for r in out["mart_device_seconds"].to_pylist():
        if r["pod"] is not None or r["namespace"] is not None:
            found[(r["namespace"], r["pod"])] += Fraction(str(r["gpu_seconds"]))
    return dict(found)


def close(a: Fraction, b: Fraction) -> bool:
    """GPU-seconds (not money) to within a microsecond: they are stored as DECIMAL(38, 12), and GPU-C's
    sevenths are rounded per sample (mig_unpartitioned, 960 × 2.142857142857 = 2,057.142857142720 for
    2,057.142857142857…)."""
    return abs(a - b) < Fraction(1, 10**6)


def names_the_exporter(out: dict[str, pa.Table]) -> list[dict[str, Any]]:
    """Every row of every mart naming the exporter pod or its namespace (or kube-state-metrics' pod) as a
    holder, or billing tenant `platform`."""
    bad = []
    for name, table in out.items():
        if not name.startswith("mart_"):
            continue
        for r in table.to_pylist():
            values = {str(v) for k, v in r.items() if k in ("pod", "namespace", "tenant", "exported_pod")}
            if values & {EXPORTER_POD, EXPORTER_NAMESPACE, KSM_POD, "monitoring", "platform"}:
                bad.append({"mart": name, **r})
    return bad


def describe(cluster: str, what: str, got: Any, want: Any) -> str:
    return f"{cluster}: {what}: got {got}, want {want}"


def check_day(cluster: str, out: dict[str, pa.Table], want: Truth) -> list[str]:
    """Every difference between the marts and the truth, as readable lines (empty: the day is exact)."""
    problems = []
    charges = got_charges(out)
    for tenant in sorted(set(charges) | set(want.charges)):
        g, w = charges.get(tenant, Fraction(0)), want.charges.get(tenant, Fraction(0))
        if cents(g) != cents(w):
            problems.append(describe(cluster, f"charge of {tenant}", f"{cents(g)} ({float(g)})", cents(w)))
        elif g != w:
            problems.append(describe(cluster, f"exact charge of {tenant}", g, w))
    pool = got_pool(out)
    if cents(pool) != cents(want.pool_cost) or pool != want.pool_cost:
        problems.append(describe(cluster, "pool cost", f"{cents(pool)} ({pool})", cents(want.pool_cost)))
    if sum(charges.values(), Fraction(0)) != pool:
        problems.append(describe(cluster, "conservation (R13)", sum(charges.values(), Fraction(0)), pool))
    if UNALLOCATED in charges:
        problems.append(describe(cluster, "__unallocated__", charges[UNALLOCATED], 0))
    cats = got_categories(out)
    for cat in sorted(set(cats) | set(want.categories)):
        g, w = cats.get(cat, Fraction(0)), want.categories.get(cat, Fraction(0))
        if not close(g, w):
            problems.append(describe(cluster, f"{cat} GPU-seconds", float(g), float(w)))
    holders = got_holders(out)
    if set(holders) != set(want.holders) or not all(close(holders[h], want.holders[h]) for h in holders):
        problems.append(
            describe(
                cluster,
                "holders' GPU-seconds",
                {h: float(v) for h, v in sorted(holders.items(), key=str)},
                {h: float(v) for h, v in sorted(want.holders.items(), key=str)},
            )
        )
    bad = names_the_exporter(out)
    if bad:
        shown = (
            "mart",
            "uuid",
            "gpu_i_id",
            "namespace",
            "pod",
            "tenant",
            "category",
            "gpu_seconds",
            "amount",
        )
        first = {k: str(bad[0][k]) for k in shown if bad[0].get(k) is not None}
        problems.append(f"{cluster}: {len(bad)} mart row(s) name the exporter or bill platform, e.g. {first}")
    return problems


def unverified_truth(combo: Combo) -> Fraction:
    """data_quality.holder_unverified_gpu_seconds by hand (docs/prometheus.md, "holder_unverified": a series
    whose pod labels nothing tells from its Kubernetes target's own), counted per GPU sample that shows such a
    series, a GPU counted whole (as the blind case's 43,200 = 2,880 GPU samples × 15)."""
    delta = Fraction(DCGM_SCRAPE_S)
    if combo.with_up or "pod" not in combo.path.target_labels:
        return Fraction(0)  # `up` tells the target's own pod; a static target attaches none
    if combo.blind:
        return 3 * DCGM_SCRAPES * delta  # every series of the target: 43,200
    # honorLabels false: the held series' exported_pod/pod pair tells the target's own pod; --use-old-namespace:
    # the held series' pod_name beside the target's plain pod tells it (targets.py, learn_renamed). infer-0 holds
    # GPU-C's instance from the pull's first hour, so every free series is told: nothing unverified.
    return Fraction(0)


def check_unverified(cluster: str, out: dict[str, pa.Table]) -> list[str]:
    """Nothing dropped silently: GPU-seconds whose holder could not be told are reported, and only those."""
    unverified = sum(
        (
            Fraction(str(r["holder_unverified_gpu_seconds"] or 0))
            for r in out["mart_data_quality"].to_pylist()
        ),
        Fraction(0),
    )
    want = unverified_truth(BY_CLUSTER[cluster])
    if not close(unverified, want):
        return [
            describe(cluster, "data_quality.holder_unverified_gpu_seconds", float(unverified), float(want))
        ]
    return []


# --- the tests -------------------------------------------------------------------------------------------


def test_the_corpus_covers_every_path_and_dialect() -> None:
    assert {c.path.name for c in COMBOS} == set(PATHS) and len(PATHS) == 8
    for dialect in (DCGM_4X, DCGM_3X_OLD_NAMESPACE):
        for path in PATHS:
            assert {
                c.with_up for c in COMBOS if c.path.name == path and c.dialect is dialect and not c.tag
            } == {
                True,
                False,
            }
    # Blind (no `up`, exporter's pod labels kept under the target's names): the honorLabels-true Kubernetes
    # paths of the 4.x dialect only; the 3.x dialect's pod_name never clashes, the renaming tells the rest.
    assert sorted(c.cluster for c in COMBOS if c.blind) == [
        "podmonitor-honor.4x.noup",
        "servicemonitor-honor.4x.noup",
    ]


def test_the_stored_series_look_as_each_path_stores_them() -> None:
    """A sanity check of the corpus itself, on one held series: where the exporter's pod label went."""
    held = next(
        e for e in dcgm_scrape(Combo(PATHS["static"], DCGM_4X), 0) if e.labels.get("pod") == "train-0"
    )
    sm = PATHS["servicemonitor"].scraped(held.labels)
    assert (sm["pod"], sm["exported_pod"], sm["namespace"], sm["exported_namespace"]) == (
        EXPORTER_POD,
        "train-0",
        EXPORTER_NAMESPACE,
        "training",
    )
    honor = PATHS["servicemonitor-honor"].scraped(held.labels)
    assert (
        honor["pod"] == "train-0"
        and "exported_pod" not in honor
        and honor["service"] == "nvidia-dcgm-exporter"
    )
    renamed = PATHS["federated-renamed"].scraped(held.labels)
    assert renamed["exported_job"] == "nvidia-dcgm-exporter" and renamed["job"] == "federate"
    old_held = next(
        e for e in dcgm_scrape(Combo(PATHS["static"], DCGM_3X_OLD_NAMESPACE), 0) if "pod_name" in e.labels
    )
    old = PATHS["servicemonitor"].scraped(old_held.labels)
    assert (old["pod"], old["pod_name"], old["uuid"]) == (EXPORTER_POD, "train-0", GPU_A.uuid)
    # MIG flex mode: no series of GPU-C itself, and no GPU_UTIL on its instances.
    gpu_c = [e for e in dcgm_scrape(Combo(PATHS["static"], DCGM_4X), 0) if e.labels["UUID"] == GPU_C.uuid]
    assert gpu_c and all("GPU_I_ID" in e.labels for e in gpu_c)
    assert not [e for e in gpu_c if e.name == "DCGM_FI_DEV_GPU_UTIL"]


@pytest.mark.parametrize("cluster", [c.cluster for c in COMBOS])
def test_every_path_meters_the_day_exactly(prom: PromQLServer, cluster: str) -> None:
    combo = BY_CLUSTER[cluster]
    problems = check_day(cluster, metered(prom, cluster), truth(combo, RATE_CARD_PRICE))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("cluster", [c.cluster for c in COMBOS])
def test_data_quality_reports_exactly_the_holders_it_cannot_tell(prom: PromQLServer, cluster: str) -> None:
    problems = check_unverified(cluster, metered(prom, cluster))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "cluster",
    [
        "servicemonitor.4x.up",
        "federated-renamed.4x.up",
        "servicemonitor.4x.up.no-node-name",
        "podmonitor-honor.4x.up.no-node-name",
    ],
)
def test_opencost_prices_the_day_exactly(prom: PromQLServer, cluster: str) -> None:
    """price_source: opencost, node-1 at 2.88 per GPU-hour. Without NODE_NAME the exporter names its own pod as
    the node; kube_pod_info places that pod on node-1, whose price must apply."""
    combo = BY_CLUSTER[cluster]
    problems = check_day(cluster, metered(prom, cluster, "opencost"), truth(combo, OPENCOST_PRICE))
    assert not problems, "\n".join(problems)


def test_without_node_name_the_day_is_the_same_as_with_it(prom: PromQLServer) -> None:
    with_name = metered(prom, "servicemonitor.4x.up")
    without = metered(prom, "servicemonitor.4x.up.no-node-name")
    assert got_charges(without) == got_charges(with_name)
    assert got_categories(without) == got_categories(with_name)
    assert {r["node"] for r in without["mart_pool_daily_cost"].to_pylist()} == {NODE}
    assert {r["node"] for r in without["mart_stranded_capacity"].to_pylist()} == {NODE}


def test_a_scrape_interval_that_is_not_the_configs_stops_the_day(prom: PromQLServer) -> None:
    """dcgm-exporter is scraped every 15 s but the config says 30: each sample would be billed twice its
    time. Metering must stop, naming both intervals."""
    cluster = "servicemonitor.4x.up"
    config = config_for(prom.url, cluster, scrape_s=30)
    with pytest.raises(AccountingError) as caught:
        pull_and_meter(prom, cluster, config)
    message = str(caught.value)
    assert re.search(r"(?<![\d.])15(?:\.0+)?(?![\d.])", message), message
    assert re.search(r"(?<![\d.])30(?:\.0+)?(?![\d.])", message), message
