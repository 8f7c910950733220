"""One GPU scraped by two targets at once (dcgm-exporter in two scrape jobs: the GPU operator's ServiceMonitor
and a pod-annotation job, say), against a REAL Prometheus on 127.0.0.1 (backfilled with promtool) and a
real VictoriaMetrics. Prometheus
keeps them as two series per metric that differ only in `job`/`instance`, stamped a fraction of Δ apart; read
as they come, the GPU would have two samples per scrape and be billed twice. The pull counts each scrape once,
as for HA replicas: the first target's scrape, another's only where it fills a gap. The same holds for a GPU
read both with and without a replica label (a querier deduplicating some stores only), and for two jobs each
scraped by an HA pair. A GPU whose exporter moved to a new target (a restarted pod's new IP) keeps both
targets' scrapes, which do not overlap. A stream scraped less often than Δ (a second job, or an HA replica) is
named in a warning: Δ is then not the scrape interval.

Every fixture is built scrape by scrape: scrape k of a target is at D0 + k·Δ + its offset, unless the target is
down then. The truth of each test is computed from that construction, never by running the source.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from prometheus_fixtures import BACKENDS, PromQLServer, Sample, needs_prometheus, sample, served

from gpumeter.ingest.contract import concat_parts, day_bounds_ms
from gpumeter.models.runner import meter_day
from tests.test_prometheus_ha import DELTA, FB, UTIL, source
from tests.test_rules import H100, make_config

pytestmark = needs_prometheus

DAY = date(2026, 11, 1)
D0, D1 = day_bounds_ms(DAY)
HOUR = 3_600_000
SCRAPES_PER_DAY = 86_400_000 // DELTA  # 2,880
FIRST_K, LAST_K = -10, SCRAPES_PER_DAY + 10  # scrapes from 23:55 the day before to 00:05 the day after
NOON_K = 12 * HOUR // DELTA


def at(hh: int, mm: int = 0, ss: int = 0) -> int:
    return D0 + hh * HOUR + mm * 60_000 + ss * 1000


@dataclass(frozen=True)
class Target:
    job: str
    instance: str
    offset_ms: int
    ks: range = range(FIRST_K, LAST_K + 1)  # the scrapes it exists for
    down: tuple[int, int] | None = None  # [from, to) of its own timestamps
    replica: str | None = None  # its HA Prometheus replica, if it is scraped by an HA pair
    every: int = 1  # scraped at every `every`-th scrape of the grid only (every 2 Δ: 2)

    def ts(self, k: int) -> int:
        return D0 + k * DELTA + self.offset_ms

    def recorded(self, k: int) -> bool:
        return (
            k in self.ks
            and k % self.every == 0
            and not (self.down and self.down[0] <= self.ts(k) < self.down[1])
        )


# Cluster "twojobs", node n1: one exporter (GPU-1, GPU-2) scraped by two jobs, 10 s apart; each job is down
# for an hour. In name order (instance, then job) "gpu-operator" is the first target.
OPERATOR = Target("gpu-operator", "10.0.0.5:9400", 0, down=(at(10), at(11)))
PODS = Target("kubernetes-pods", "10.0.0.5:9400", 10_000, down=(at(15), at(16)))
# Cluster "moved", node n2: its exporter (GPU-3, GPU-4) restarted at noon with a new IP, stamped 7 s later.
OLD = Target("gpu-operator", "10.0.0.7:9400", 0, ks=range(FIRST_K, NOON_K))
NEW = Target("gpu-operator", "10.0.0.8:9400", 7_000, ks=range(NOON_K, LAST_K + 1))
# Cluster "twojobsha", node n3: the two jobs of n1, each scraped by an HA pair of Prometheus replicas (a and b,
# 2 s apart), four streams in name order; each is down for a while.
HA = (
    Target("gpu-operator", "10.0.0.6:9400", 0, down=(at(10), at(11)), replica="a"),
    Target("gpu-operator", "10.0.0.6:9400", 2_000, down=(at(10, 30), at(12)), replica="b"),
    Target("kubernetes-pods", "10.0.0.6:9400", 10_000, down=(at(15), at(16)), replica="a"),
    Target("kubernetes-pods", "10.0.0.6:9400", 12_000, down=(at(11, 45), at(11, 50)), replica="b"),
)
# Cluster "partial", node n4: one target read through a querier that deduplicates one store and not the
# other: the GPU's series arrive without a replica label (stamped like replica a, missing 13:00-14:00) and
# also with it (a at +0 s, down 10:00-11:00; b at +2 s). A series without the label comes first in name order.
PARTIAL = (
    Target("gpu-operator", "10.0.0.9:9400", 0, down=(at(13), at(14))),
    Target("gpu-operator", "10.0.0.9:9400", 0, down=(at(10), at(11)), replica="a"),
    Target("gpu-operator", "10.0.0.9:9400", 2_000, replica="b"),
)
# Cluster "slowjob", node n5: the GPU operator's job scrapes every 2 Δ (60 s), the pod job every Δ, 10 s later.
# Cluster "slowha", node n6: an HA pair, replica a scraping every 2 Δ, b every Δ, 2 s later. Either way each
# scrape is still kept once (the slow stream's at even k, the other's at odd k), and the slow stream is named.
SLOW_JOB = (
    Target("gpu-operator", "10.0.0.10:9400", 0, every=2),
    Target("kubernetes-pods", "10.0.0.10:9400", 10_000),
)
SLOW_HA = (
    Target("gpu-operator", "10.0.0.11:9400", 0, replica="a", every=2),
    Target("gpu-operator", "10.0.0.11:9400", 2_000, replica="b"),
)
CLUSTERS: dict[str, tuple[str, tuple[str, ...], tuple[Target, ...]]] = {
    "twojobs": ("n1", ("GPU-1", "GPU-2"), (OPERATOR, PODS)),
    "moved": ("n2", ("GPU-3", "GPU-4"), (OLD, NEW)),
    "twojobsha": ("n3", ("GPU-5", "GPU-6"), HA),
    "partial": ("n4", ("GPU-7", "GPU-8"), PARTIAL),
    "slowjob": ("n5", ("GPU-9", "GPU-10"), SLOW_JOB),
    "slowha": ("n6", ("GPU-11", "GPU-12"), SLOW_HA),
}
# GPU-1 is held by a pod of team-a (namespace ns-a in tests.test_rules' tenants).
HOLDER = {"GPU-1": {"namespace": "ns-a", "pod": "p1", "container": "main"}}


def _value(k: int, target: int) -> float:
    return k + 0.25 * target  # tells which target's sample was kept


def _samples() -> list[Sample]:
    out = []
    for cluster, (node, gpus, targets) in CLUSTERS.items():
        for i, target in enumerate(targets):
            for gpu in gpus:
                labels = {
                    "cluster": cluster,
                    "job": target.job,
                    "instance": target.instance,
                    "Hostname": node,
                    "UUID": gpu,
                    "gpu": gpu[-1],
                    "modelName": H100,
                    **HOLDER.get(gpu, {}),
                    **({"prometheus_replica": target.replica} if target.replica else {}),
                }
                for metric in (UTIL, FB):
                    out += [
                        sample(metric, labels, _value(k, i), target.ts(k))
                        for k in range(FIRST_K, LAST_K + 1)
                        if target.recorded(k)
                    ]
    return out


def expected(cluster: str) -> list[tuple[int, float]]:
    """The truth for each series of a GPU of `cluster`: every scrape k some target recorded, once, from the
    first target in name order that recorded it, at its timestamp; those of the day."""
    targets = CLUSTERS[cluster][2]
    out = []
    for k in range(FIRST_K, LAST_K + 1):
        first = next((i for i, t in enumerate(targets) if t.recorded(k)), None)
        if first is not None and D0 <= targets[first].ts(k) < D1:
            out.append((targets[first].ts(k), _value(k, first)))
    return out


@pytest.fixture(scope="module", params=BACKENDS)
def prom(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromQLServer]:
    with served(request.param, _samples(), tmp_path_factory.mktemp("prom-two-targets")) as server:
        yield server


def by_series(dcgm: Any) -> dict[tuple[str, str], list[tuple[int, float]]]:
    out: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for row in dcgm.to_pylist():
        out.setdefault((row["metric"], row["uuid"]), []).append((row["ts_ms"], row["value"]))
    return {key: sorted(values) for key, values in out.items()}


def pulled(
    prom: PromQLServer, cluster: str, caplog: pytest.LogCaptureFixture
) -> tuple[dict[tuple[str, str], list[tuple[int, float]]], list[str]]:
    """The cluster's day pulled, by series, and what the pull said of GPUs reported more than once."""
    with caplog.at_level(logging.WARNING, logger="gpumeter.ingest.prometheus.windows"):
        raw = source(prom.url, cluster).fetch_day(cluster, DAY, 0)
    said = [r.getMessage() for r in caplog.records if "reported more than once" in r.getMessage()]
    return by_series(raw.dcgm), said


def test_a_gpu_scraped_by_two_jobs_counts_each_scrape_once(
    prom: PromQLServer, caplog: pytest.LogCaptureFixture
) -> None:
    got, said = pulled(prom, "twojobs", caplog)
    # By hand: both jobs scrape every 30 s, 10 s apart, and each misses the 120 scrapes of its hour down.
    # Read as they come that is 2,760 + 2,760 samples a day per series. Once per scrape: 2,880, the operator
    # job's except the 120 of 10:00-11:00, when only the pod job has them (at hh:mm:10 and :40).
    for gpu in ("GPU-1", "GPU-2"):
        for metric in (UTIL, FB):
            ts = [t for t, _ in got[(metric, gpu)]]
            assert len(ts) == SCRAPES_PER_DAY == 2_880
            from_pods = [t for t in ts if (t - D0) % DELTA == 10_000]
            assert from_pods == list(range(at(10, 0, 10), at(11), DELTA)) and len(from_pods) == 120
            assert got[(metric, gpu)] == expected("twojobs")
    # Said once, naming a GPU and both targets.
    assert len(said) == 1
    assert "2 GPU(s)" in said[0] and "GPU-1 on n1" in said[0]
    assert (
        "gpu-operator/10.0.0.5:9400 (no replica label), kubernetes-pods/10.0.0.5:9400 (no replica label)"
        in said[0]
    )


def test_two_jobs_each_scraped_by_an_ha_pair_count_each_scrape_once(prom: PromQLServer) -> None:
    got = by_series(source(prom.url, "twojobsha").fetch_day("twojobsha", DAY, 0).dcgm)
    # By hand: four streams of one GPU (two jobs × two replicas, at +0, +2, +10 and +12 s). Each scrape once,
    # from the first stream that has it: the operator job's replica a, but 10:00-10:30 its replica b
    # (+2 s, 60 scrapes), 10:30-11:00 the pod job's replica a (+10 s, 60), 11:00-12:00 operator a again.
    for gpu in ("GPU-5", "GPU-6"):
        ts = [t for t, _ in got[(UTIL, gpu)]]
        assert len(ts) == 2_880
        assert Counter((t - D0) % DELTA for t in ts) == {0: 2_760, 2_000: 60, 10_000: 60}
        assert got[(UTIL, gpu)] == got[(FB, gpu)] == expected("twojobsha")


def test_a_gpu_reported_with_and_without_a_replica_label_counts_each_scrape_once(
    prom: PromQLServer, caplog: pytest.LogCaptureFixture
) -> None:
    got, said = pulled(prom, "partial", caplog)
    # By hand: the series without a replica label has every scrape but the 120 of 13:00-14:00; those are
    # replica a's (at :00 and :30, a is down 10:00-11:00 only). Replica b (+2 s) fills nothing. 2,880, where
    # read as they come it would be 2,760 + 2,760 + 2,880.
    for gpu in ("GPU-7", "GPU-8"):
        ts = [t for t, _ in got[(UTIL, gpu)]]
        assert len(ts) == 2_880 and Counter((t - D0) % DELTA for t in ts) == {0: 2_880}
        assert got[(UTIL, gpu)] == got[(FB, gpu)] == expected("partial")
        assert [v for t, v in got[(UTIL, gpu)] if at(13) <= t < at(14)] == [
            _value(k, 1) for k in range(at(13) // DELTA - D0 // DELTA, at(14) // DELTA - D0 // DELTA)
        ]
    assert len(said) == 1 and "GPU-7 on n4" in said[0]
    assert (
        "gpu-operator/10.0.0.9:9400 (no replica label), gpu-operator/10.0.0.9:9400 (replica a), "
        "gpu-operator/10.0.0.9:9400 (replica b)" in said[0]
    )


def test_an_exporter_that_moved_to_a_new_target_keeps_both_targets_scrapes(
    prom: PromQLServer, caplog: pytest.LogCaptureFixture
) -> None:
    got, said = pulled(prom, "moved", caplog)
    # By hand: 1,440 scrapes before noon from the old IP (at :00 and :30), 1,440 from noon from the new one
    # (at :07 and :37): 2,880, none dropped, nothing said.
    for gpu in ("GPU-3", "GPU-4"):
        ts = [t for t, _ in got[(UTIL, gpu)]]
        assert len(ts) == 2_880
        assert Counter((t - D0) % DELTA for t in ts) == {0: 1_440, 7_000: 1_440}
        assert got[(UTIL, gpu)] == got[(FB, gpu)] == expected("moved")
    assert not said


@pytest.mark.parametrize(
    ("cluster", "stream"),
    [
        ("slowjob", "gpu-operator/10.0.0.10:9400 (no replica label)"),
        ("slowha", "gpu-operator/10.0.0.11:9400 (replica a)"),
        ("twojobs", None),
        ("moved", None),
    ],
)
def test_a_stream_scraped_less_often_than_the_scrape_interval_is_named(
    prom: PromQLServer, caplog: pytest.LogCaptureFixture, cluster: str, stream: str | None
) -> None:
    """Each sample stands for Δ = 30 s, so a stream scraped every 60 s means scrape_interval_seconds is not
    the scrape interval; two streams' samples of one scrape could then lie more than Δ/2 apart and count twice.
    Said once per pull and target, for a second job scraping one GPU as for an HA replica."""
    with caplog.at_level(logging.WARNING, logger="gpumeter.ingest.prometheus.windows"):
        got = by_series(source(prom.url, cluster).fetch_day(cluster, DAY, 0).dcgm)
    said = [r.getMessage() for r in caplog.records if "is scraped every" in r.getMessage()]
    if stream is None:
        assert said == []
        return
    assert len(said) == 1
    assert f"target {stream} is scraped every 60 s, but scrape_interval_seconds is 30:" in said[0]
    # By hand: still each of the day's 2,880 scrapes once: the slow stream's 1,440 at even k (hh:mm:00), the
    # other stream's 1,440 at odd k (hh:mm:40, or hh:mm:32 for replica b).
    offset = CLUSTERS[cluster][2][1].offset_ms
    for gpu in CLUSTERS[cluster][1]:
        assert Counter((t - D0) % DELTA for t, _ in got[(UTIL, gpu)]) == {0: 1_440, offset: 1_440}
        assert got[(UTIL, gpu)] == got[(FB, gpu)] == expected(cluster)


@pytest.mark.parametrize("bucket_seconds", [3_600, 1_800])
def test_the_day_in_parts_holds_exactly_the_rows_of_the_whole_day(
    prom: PromQLServer, bucket_seconds: int
) -> None:
    for cluster in CLUSTERS:
        lookback_ms = 300_000
        spec = {"dedupe_bucket_seconds": bucket_seconds}
        whole = source(prom.url, cluster, **spec).fetch_day(cluster, DAY, lookback_ms)
        together = concat_parts(source(prom.url, cluster, **spec).fetch_day_parts(cluster, DAY, lookback_ms))
        assert sorted(together.dcgm.to_pylist(), key=str) == sorted(whole.dcgm.to_pylist(), key=str)
        # The lookback's 10 scrapes (5 minutes) before the day are pulled too: 2,890 per series.
        targets = CLUSTERS[cluster][2]
        assert [t for t, _ in by_series(whole.dcgm)[(UTIL, CLUSTERS[cluster][1][0])]] == sorted(
            next(t.ts(k) for t in targets if t.recorded(k)) for k in range(FIRST_K, SCRAPES_PER_DAY)
        )


def test_a_gpu_scraped_by_two_jobs_is_billed_for_one_day(prom: PromQLServer) -> None:
    """The money: metered, each GPU of the pool is observed 86,400 s of the day, not 172,800."""
    for cluster in CLUSTERS:
        raw = source(prom.url, cluster).fetch_day(cluster, DAY, 0)
        config = make_config(
            clusters=[{"name": cluster, "source": {"kind": "parquet", "path": "/nonexistent"}}],
            scrape_interval_seconds=DELTA // 1000,
        )
        out = meter_day(raw, config, cluster, DAY)
        pool = out["mart_pool_daily_cost"].to_pylist()
        # By hand: two H100s at 3.60 per GPU-hour for 24 hours: 172,800 GPU-seconds, 172.80.
        assert sum(Decimal(r["gpu_samples"]) for r in pool) == 2 * SCRAPES_PER_DAY
        assert sum(Decimal(str(r["observed_gpu_seconds"])) for r in pool) == 172_800
        assert sum(Decimal(str(r["pool_cost"])) for r in pool) == Decimal("172.80")
        if cluster == "twojobs":
            held = [r for r in out["mart_device_seconds"].to_pylist() if r["uuid"] == "GPU-1" and r["pod"]]
            assert [(r["tenant"], r["pod"], Decimal(str(r["device_seconds"]))) for r in held] == [
                ("team-a", "p1", Decimal(86_400))
            ]
