"""What to simulate: `FactorySpec` (the demo factory by default), `demo_spec()` with its pool that changes
during a day and the times of those changes, `fleet_spec()` for a fleet of any size; and the simulated
clock (`DAY_S`, `epoch`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

DAY_S = 86400


def epoch(d: date) -> int:
    """Epoch seconds of the UTC midnight starting `d`."""
    return int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp())


@dataclass(frozen=True)
class FactorySpec:
    """What to simulate. The defaults are the demo factory (`demo_spec()`) without its changing pool."""

    cluster: str = "demo"
    start: date = date(2026, 11, 1)
    days: int = 7
    scrape_interval_s: int = 30
    seed: int = 7
    h100_nodes: int = 2
    a100_nodes: int = 1
    h200_nodes: int = 1
    gpus_per_node: int = 8
    mig_fraction: float = 0.125  # share of the schedulable GPUs that are MIG-partitioned (4 of 32)
    timesliced_gpus: int = 1  # at most; placed where LANE_PATTERN has a time-sliced lane
    kai_gpus: int = 1  # GPUs of an extra H100 node, each shared by KAI fractional pods via a reservation pod
    dra_gpus: int = 3  # at most; a 4g+3g MIG GPU first, then whole-GPU DRA lanes
    outage: bool = True  # one node's dcgm-exporter down 13:00-15:00Z on the second day
    cordoned_node: bool = True  # an extra H100 node (gpus_per_node // 2 GPUs) cordoned throughout
    xid_gpu: bool = True  # XID 79 on one GPU 09:00-13:00Z on the third day
    energy_reset: bool = True  # one GPU's energy counter resets (driver reload) 06:00Z on the fourth day
    # A pool that changes during the day (`demo_spec()` turns these on; off by default, so that a spec built
    # field by field, and `fleet_spec`, has a steady pool). All on the second day (`events_day`), at the
    # times of the changing pool's day below.
    # 12:00Z: a whole GPU goes MIG (10-minute reset gap), a 7 x 1g GPU -> 2 x 3g.
    mig_repartition: bool = False
    # OpenMetrics only: every series from replicas "a" and "b" (2 s later), rolling restarts.
    ha_replicas: bool = False
    pod_churn: bool = False  # vllm-0 deleted 09:00Z and recreated (new uid); a 20-minute DRA job 10:00Z
    relabel: bool = False  # jupyter-alice-0 relabelled team=c -> team=research at 12:00Z
    ksm_offset_s: int = 0  # kube-state-metrics / OpenCost stamped this many seconds before dcgm-exporter
    # kube-state-metrics named as a scrape target (job `kube-state-metrics`) and rolled out with a surge at
    # ROLLOUT_S on the events day: the new instance (10.0.0.2) scraped alongside the old one (10.0.0.1).
    ksm_rollout: bool = False
    dra_snapshots_s: int = 0  # 0: one plain claims/slices list per day (unknown time); else timed snapshots
    # A cluster autoscaler: a schedulable node joins at AUTOSCALE_S[0] on the events day (absent before) and
    # another is removed at AUTOSCALE_S[1] (absent after); its series and its pods go with it.
    autoscale: bool = False

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.scrape_interval_s < 1 or DAY_S % self.scrape_interval_s:
            problems.append(f"scrape_interval_s={self.scrape_interval_s} must divide 86400")
        if self.days < 1:
            problems.append(f"days={self.days} must be >= 1")
        for name in ("h100_nodes", "a100_nodes", "h200_nodes", "timesliced_gpus", "dra_gpus", "kai_gpus"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if self.gpus_per_node < 1:
            problems.append("gpus_per_node must be >= 1")
        if not 0.0 <= self.mig_fraction <= 1.0:
            problems.append("mig_fraction must be within [0, 1]")
        if not self.cluster:
            problems.append("cluster must not be empty")
        if not 0 <= self.ksm_offset_s < self.scrape_interval_s:
            problems.append(f"ksm_offset_s={self.ksm_offset_s} must be >= 0 and below scrape_interval_s")
        if self.dra_snapshots_s < 0 or (self.dra_snapshots_s and DAY_S % self.dra_snapshots_s):
            problems.append(f"dra_snapshots_s={self.dra_snapshots_s} must be 0 or divide 86400")
        if problems:
            raise ValueError("invalid FactorySpec: " + "; ".join(problems))

    @property
    def day_list(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range(self.days)]

    @property
    def changing_day(self) -> date:
        """The day the changing pool's events happen (the flags above): the second day, or the only one."""
        return self.start + timedelta(days=min(1, self.days - 1))


def demo_spec() -> FactorySpec:
    """The demo factory: the defaults plus a pool that changes during its second day (a MIG re-partition, an
    HA Prometheus pair with rolling restarts, a deleted and recreated pod, a short DRA job, a relabel, a
    re-published ResourceSlice), kube-state-metrics scraped 20 s before dcgm-exporter and rolled out with a
    surge, and DRA objects kept as timed snapshots every 5 minutes."""
    return FactorySpec(**CHANGING_POOL)


# The dynamics of a pool that changes during the day, as the demo has them (FactorySpec fields).
CHANGING_POOL: dict[str, Any] = {
    "mig_repartition": True,
    "ha_replicas": True,
    "pod_churn": True,
    "relabel": True,
    "ksm_offset_s": 20,
    "ksm_rollout": True,
    "dra_snapshots_s": 300,
}

# The changing pool's day (seconds after its midnight, UTC).
REPARTITION_S = (12 * 3600, 12 * 3600 + 600)  # MIG manager: no instances (a whole GPU: no series at all)
DRAIN_S = 11 * 3600 + 50 * 60  # the re-partitioned MIG GPU's pods are deleted
NEW_LAYOUT_PODS_S = (12 * 3600 + 12 * 60, 12 * 3600 + 15 * 60)  # its new long-running pods: created, Running
WHOLE_HOLD_S = (2 * 3600, 10 * 3600)  # the pod holding the GPU that goes MIG, Running
CHURN_S = (9 * 3600, 9 * 3600 + 300)  # vllm-0 deleted and recreated; the new one Running
SHORT_JOB_S = (10 * 3600, 10 * 3600 + 20, 10 * 3600 + 1200)  # created, Running, deleted (its claim with it)
RELABEL_S = 12 * 3600
AUTOSCALE_S = (6 * 3600, 18 * 3600)  # autoscale: a node joins, another is removed
# ksm_rollout: the new kube-state-metrics instance scraped from the first time on, the old one until the second
# (exclusive); the short DRA job's pod is deleted 10 s after the old one's last scrape.
ROLLOUT_S = (10 * 3600 + 18 * 60, 10 * 3600 + 19 * 60 + 50)
KSM_JOB = "kube-state-metrics"
KSM_INSTANCES = ("10.0.0.1:8080", "10.0.0.2:8080")
# ha_replicas: replica "b" stamps 2 s after "a"; rolling restarts (seconds after each day's midnight).
REPLICA_B_OFFSET_MS = 2000
REPLICA_GAPS_S = {
    "a": (10 * 3600 + 5 * 60, 10 * 3600 + 20 * 60),
    "b": (10 * 3600 + 35 * 60, 10 * 3600 + 50 * 60),
}


def fleet_spec(gpus: int, cluster: str = "fleet", days: int = 1, **overrides: Any) -> FactorySpec:
    """A fleet of `gpus` GPUs on 8-GPU nodes (half H100, a quarter each A100 and H200): 20 % MIG, one
    time-sliced GPU per 64 and one DRA GPU per 32, no scenario events (bench/, docs/deploy.md)."""
    nodes = max(1, gpus // 8)
    h100 = max(1, nodes // 2)
    a100 = (nodes - h100) // 2
    h200 = nodes - h100 - a100
    values: dict[str, Any] = {
        "cluster": cluster,
        "days": days,
        "h100_nodes": h100,
        "a100_nodes": a100,
        "h200_nodes": h200,
        "mig_fraction": 0.2,
        "timesliced_gpus": max(1, gpus // 64),
        "dra_gpus": max(1, gpus // 32),
        "outage": False,
        "cordoned_node": False,
        "xid_gpu": False,
        "energy_reset": False,
        "mig_repartition": False,
        "ha_replicas": False,
        "pod_churn": False,
        "relabel": False,
        "ksm_offset_s": 0,
        "ksm_rollout": False,
        "dra_snapshots_s": 0,
    }
    return FactorySpec(**(values | overrides))
