"""DRA snapshots over time (R5): claims vanish with their pods and slices are re-published during a day, so a
list read after the day misses them. Every five minutes the job `snapshot_k8s_objects` lists the
ResourceClaims and ResourceSlices of every cluster whose source names both a `kubeconfig` and a
`k8s_snapshots_dir`, through the Kubernetes API (gpumeter.ingest.kube_api.KubeApi, the official `kubernetes`
client), and keeps each list as a time-named file in that folder:
`<k8s_snapshots_dir>/cluster=<c>/day=<d>/resourceclaims-20261101T100500.123Z.json` (gpumeter.ingest.k8s_objects,
which the source reads for each day). The schedule `snapshot_k8s_objects_every_5_minutes` starts it; it is
defined, and running by default, only when some cluster is configured so.

- Named by time: the moment the list's first page was asked for (the API server answers the whole list,
  paged or not, at the resourceVersion it read then).
- Atomic: a temp file in the day folder, fsync, rename, fsync of the folder; a reader sees all or nothing.
- Idempotent: a tick owns the slot [tick, tick + 5 min) (its run key is the tick). A run writes a kind
  only where the slot has no snapshot of it yet, so running a tick again writes nothing new; a run that
  starts after its slot has ended writes nothing (the next tick's run looks at the cluster then).
- Checked: a list is parsed before it is written, so a file in the folder is always one the source reads.
"""

import time
from datetime import UTC, datetime
from pathlib import Path

from dagster import (
    Config,
    ConfigurableResource,
    DefaultScheduleStatus,
    Failure,
    JobDefinition,
    OpExecutionContext,
    RunConfig,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    job,
    op,
    schedule,
)

from gpumeter.config import Config as GpumeterConfig
from gpumeter.ingest.contract import SourceError
from gpumeter.ingest.k8s_objects import (
    K8sObjectError,
    find_snapshot,
    parse_resource_claims,
    parse_resource_slices,
    write_snapshot,
)
from gpumeter.ingest.kube_api import KubeApi
from gpumeter.pipelines.resources import GpumeterConfigResource
from gpumeter.storage import paths

SNAPSHOT_JOB = "snapshot_k8s_objects"
SNAPSHOT_SCHEDULE = "snapshot_k8s_objects_every_5_minutes"
SNAPSHOT_CRON = "*/5 * * * *"
SLOT_SECONDS = 300
SNAPSHOT_OP = "take_k8s_snapshots"


class K8sSnapshotResource(ConfigurableResource):
    """Keeps DRA snapshots of one cluster: lists its ResourceClaims and ResourceSlices with `kubeconfig` and
    writes them, named by time, under `snapshots_dir` (which must exist)."""

    kubeconfig: str
    snapshots_dir: str
    slot_seconds: int = SLOT_SECONDS

    def take(self, cluster: str, tick_ms: int, now_ms: int | None = None) -> list[Path]:
        """The snapshots of the slot [tick_ms, tick_ms + slot) not kept yet, taken now and written; [] when
        the slot has them all, or has ended."""
        root = Path(self.snapshots_dir)
        if not root.is_dir():
            raise SourceError(
                f"snapshot folder {root} (k8s_snapshots_dir of cluster {cluster}) does not exist: create it "
                "(the snapshot job writes only into a folder that is there), or correct k8s_snapshots_dir"
            )
        slot_end_ms = tick_ms + self.slot_seconds * 1000
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        if now_ms >= slot_end_ms:
            return []
        missing = [
            k for k in paths.SNAPSHOT_KINDS if find_snapshot(root, cluster, k, tick_ms, slot_end_ms) is None
        ]
        if not missing:
            return []
        api = KubeApi(self.kubeconfig)
        written = []
        for kind in missing:
            taken_ms, doc = api.snapshot(kind)
            parse = parse_resource_claims if kind == paths.RESOURCE_CLAIMS else parse_resource_slices
            try:
                parse(doc, cluster, f"{self.kubeconfig} ({kind})", taken_ms)
            except K8sObjectError as exc:
                raise SourceError(f"{exc} (not kept)") from exc
            try:
                written.append(write_snapshot(root, cluster, kind, doc, taken_ms))
            except OSError as exc:
                raise SourceError(
                    f"snapshot folder {root}: could not write the {kind} snapshot of cluster {cluster} "
                    f"({exc.strerror or exc}); free disk space or fix permissions"
                ) from None
        return written


def snapshot_resources(config: GpumeterConfig) -> dict[str, K8sSnapshotResource]:
    """Cluster name -> its snapshot resource, for the clusters whose source has a kubeconfig and a
    k8s_snapshots_dir (config order)."""
    found = {}
    for cluster in config.clusters:
        kept = cluster.source.snapshots_from()
        if kept is not None:
            found[cluster.name] = K8sSnapshotResource(kubeconfig=kept[0], snapshots_dir=kept[1])
    return found


class SnapshotTick(Config):
    """The tick a run snapshots for (ISO 8601 UTC, `2026-11-01T10:05:00Z`); none: now, to the slot."""

    tick: str | None = None


def _tick_ms(tick: str | None) -> int:
    if tick is None:
        now_ms = time.time_ns() // 1_000_000
        return now_ms - now_ms % (SLOT_SECONDS * 1000)
    moment = datetime.fromisoformat(tick)
    if moment.tzinfo is None:
        raise Failure(description=f"tick {tick!r} has no time zone; write it like 2026-11-01T10:05:00Z")
    return int(moment.timestamp() * 1000)


@op(
    name=SNAPSHOT_OP,
    description="List every configured cluster's ResourceClaims and ResourceSlices and keep them.",
)
def take_k8s_snapshots(
    context: OpExecutionContext, config: SnapshotTick, gpumeter: GpumeterConfigResource
) -> int:
    tick_ms = _tick_ms(config.tick)
    failures, count = [], 0
    for cluster, snapshots in snapshot_resources(gpumeter.config).items():
        try:
            written = snapshots.take(cluster, tick_ms)
        except SourceError as exc:  # one cluster's failure does not stop the others' snapshots
            failures.append(str(exc))
            continue
        count += len(written)
        for path in written:
            context.log.info(f"{cluster}: kept {path}")
        if not written:
            context.log.info(
                f"{cluster}: the slot of this tick has its snapshots (or has ended): nothing to do"
            )
    if failures:
        raise Failure(description="; ".join(failures))
    return count


@job(
    name=SNAPSHOT_JOB,
    description="Keep a snapshot of each DRA cluster's ResourceClaims and ResourceSlices, named by time, in its "
    "source's k8s_snapshots_dir (claims vanish with their pods and slices are re-published during a day).",
)
def snapshot_k8s_objects() -> None:
    take_k8s_snapshots()


@schedule(
    job=snapshot_k8s_objects,
    cron_schedule=SNAPSHOT_CRON,
    execution_timezone="UTC",
    name=SNAPSHOT_SCHEDULE,
    default_status=DefaultScheduleStatus.RUNNING,
)
def snapshot_k8s_objects_every_5_minutes(context: ScheduleEvaluationContext) -> RunRequest:
    tick = context.scheduled_execution_time.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return RunRequest(
        run_key=f"k8s-snapshot-{tick}", run_config=RunConfig(ops={SNAPSHOT_OP: SnapshotTick(tick=tick)})
    )


def k8s_snapshot_definitions(config: GpumeterConfig) -> tuple[list[JobDefinition], list[ScheduleDefinition]]:
    """The snapshot job and its schedule, when some cluster keeps snapshots from its kubeconfig."""
    if not snapshot_resources(config):
        return [], []
    return [snapshot_k8s_objects], [snapshot_k8s_objects_every_5_minutes]
