"""The raw-samples schema: what every source (simulator Parquet, Prometheus pull) hands to the accounting.

One row per raw sample of one series. Label variants (`Hostname`/`hostname`, `UUID`/`uuid`,
`pod_name`/`pod`, ...) are normalized by the source into the columns below; a label that a series does
not carry is null, never the empty string (Prometheus drops empty labels, so '' and absent are one thing).

Timestamps are integer epoch milliseconds (Prometheus' own resolution), so that R1/R2 membership tests
are exact integer comparisons.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping

import pyarrow as pa

# dcgm-exporter series, one row per (series, sample). High volume: typed columns, no label map.
RAW_DCGM_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("ts_ms", pa.int64()),
        ("metric", pa.string()),  # DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE, ...
        ("value", pa.float64()),
        ("hostname", pa.string()),  # `Hostname` or `hostname`: the node name
        ("uuid", pa.string()),  # `UUID` or `uuid`: the physical GPU (a MIG instance carries its parent's)
        ("gpu", pa.string()),  # GPU index on the node
        ("model_name", pa.string()),  # `modelName`
        ("gpu_i_id", pa.string()),  # MIG GPU instance id; null for a whole GPU or GPU-level series
        ("gpu_i_profile", pa.string()),  # MIG profile, e.g. 3g.40gb
        ("namespace", pa.string()),  # `namespace` or `pod_namespace`
        ("pod", pa.string()),  # `pod` or `pod_name`
        ("container", pa.string()),  # `container` or `container_name`
        ("vgpu", pa.string()),  # --kubernetes-virtual-gpus copy index
        ("dra_claim_name", pa.string()),
        ("dra_claim_namespace", pa.string()),
        ("dra_driver_name", pa.string()),
        ("dra_pool_name", pa.string()),
        ("dra_device_name", pa.string()),
        # The series' key (dcgm_series_key of its DCGM_SERIES_LABELS), written by the sources that know their
        # series (the pull, the simulator) so that metering groups one integer per row instead of hashing
        # nine labels; a day whose files lack it (or hold a null) is keyed when metered.
        ("series_key", pa.uint64()),
        # The series carried pod labels that could not be told from its scrape target's own (a Kubernetes-
        # discovered target whose `up` the server does not hold): its holder columns are null, and the GPU-seconds
        # are reported (docs/rules.md R5). Null where the source cannot say (Parquet).
        ("holder_unverified", pa.bool_()),
    ]
)

# The labels that make a DCGM series what the accounting reads (R1, R3, R5): one key per distinct set.
DCGM_SERIES_LABELS = (
    "cluster", "hostname", "uuid", "gpu_i_id", "namespace", "pod", "container", "model_name", "gpu_i_profile",
)  # fmt: skip


def dcgm_series_key(series: Mapping[str, str | None]) -> int:
    """The stored key of a DCGM series, from its raw columns (at least DCGM_SERIES_LABELS): the first 8 bytes
    of a BLAKE2b digest of those labels' values in that order, each length-prefixed (a null is not the empty
    string), as an unsigned 64-bit integer. A fixed function, so that files written by any version or source
    key one label set alike."""
    digest = hashlib.blake2b(digest_size=8)
    for label in DCGM_SERIES_LABELS:
        value = series[label]
        if value is None:
            digest.update(b"\xff\xff\xff\xff")
        else:
            encoded = value.encode("utf-8")
            digest.update(struct.pack("<I", len(encoded)))
            digest.update(encoded)
    return int.from_bytes(digest.digest(), "little")


# kube-state-metrics and OpenCost series. Low volume, many label shapes: labels as a JSON object
# (without __name__ and without the cluster label, which has its own column).
RAW_KUBE_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("ts_ms", pa.int64()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("labels", pa.string()),  # JSON object, e.g. {"namespace": "a", "pod": "p", "phase": "Running"}
        # The scrape target the sample came from, `<job>/<instance>` (Prometheus' target labels): a series has
        # ended at the first later scrape of its target that does not show it (R1a). Null where the source
        # does not know it: the target is then the exporter the metric comes from, named by the metric's
        # namespace (its name up to the first `_`: kube, kueue, node for OpenCost's node_gpu_hourly_cost).
        ("target", pa.string()),
    ]
)

# kube samples as the pull stores them (gpumeter.ingest.kube_spans): one row per run of a target's consecutive
# scrapes that show a series (cluster, metric, labels, target) with one value, `copies` rows each, from its first
# sample `ts_ms` to its last `last_ms`; and one row per scrape of each target (`metric` null, `target` the
# scrape target, `ts_ms` = `last_ms` its time): a few hundred times fewer rows than one per sample. Days
# stored as rows (RAW_KUBE_SCHEMA) are read too: the runner makes their spans.
RAW_KUBE_SPANS_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("ts_ms", pa.int64()),
        ("last_ms", pa.int64()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("labels", pa.string()),
        ("target", pa.string()),
        ("copies", pa.int32()),
    ]
)

# Columns a stored raw file may lack (written before the column existed): read as null.
OPTIONAL_RAW_COLUMNS: dict[str, frozenset[str]] = {
    "raw_dcgm_samples": frozenset({"series_key", "holder_unverified"}),
    "raw_kube_samples": frozenset({"target"}),
    # DRA rows written before snapshots kept their time: read as of a snapshot of unknown time (R5).
    "raw_dra_allocations": frozenset({"snapshot_ms", "created_ms"}),
    "raw_dra_devices": frozenset({"snapshot_ms", "created_ms"}),
}

# DRA objects flattened from `kubectl get resourceclaims,resourceslices -A -o json` snapshots, one row per
# object as one snapshot shows it (gpumeter/ingest/k8s_objects.py). Each row keeps the time of its snapshot, so that
# staging can tell when an object was valid (R5: claims vanish with their pods, slices are re-published):
# - `snapshot_ms`: when the snapshot was taken (epoch ms); null for a snapshot of unknown time (a day folder's
#   plain resourceclaims.json, `claims_file`, the Prometheus source's read of the API), whose objects are
#   valid for the whole window.
# - `created_ms`: the object's `metadata.creationTimestamp` (a slice's only while its metadata.generation is
#   1: a slice updated since may have changed its devices); null where absent.
# A snapshot of known time also yields one marker row: `cluster` and `snapshot_ms` set, every other column
# null (no claim_name / no device), so that an empty snapshot still says "nothing was there then".
RAW_DRA_ALLOCATIONS_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("claim_namespace", pa.string()),
        ("claim_name", pa.string()),
        ("claim_uid", pa.string()),
        ("request", pa.string()),
        ("driver", pa.string()),
        ("pool", pa.string()),
        ("device", pa.string()),
        ("share_id", pa.string()),
        ("reserved_pod", pa.string()),
        ("reserved_pod_uid", pa.string()),
        ("snapshot_ms", pa.int64()),
        ("created_ms", pa.int64()),
    ]
)

RAW_DRA_DEVICES_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("driver", pa.string()),
        ("pool", pa.string()),
        ("node", pa.string()),
        ("device", pa.string()),
        ("device_type", pa.string()),  # gpu | mig
        ("uuid", pa.string()),  # the device's own uuid (MIG-... for a MIG device)
        ("parent_uuid", pa.string()),  # MIG: the physical GPU
        ("profile", pa.string()),  # MIG profile
        ("product_name", pa.string()),
        ("snapshot_ms", pa.int64()),
        ("created_ms", pa.int64()),
    ]
)

RAW_TABLES: dict[str, pa.Schema] = {
    "raw_dcgm_samples": RAW_DCGM_SCHEMA,
    "raw_kube_samples": RAW_KUBE_SCHEMA,
    "raw_dra_allocations": RAW_DRA_ALLOCATIONS_SCHEMA,
    "raw_dra_devices": RAW_DRA_DEVICES_SCHEMA,
}

# DCGM fields the accounting reads (docs/telemetry.md).
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"
DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
DCGM_XID = "DCGM_FI_DEV_XID_ERRORS"
DCGM_TEMP = "DCGM_FI_DEV_GPU_TEMP"

# The fields the accounting reads, and so the ones the Prometheus source pulls (R10, R11). TEMP, FB_FREE
# and POWER are not read by any model: not pulled (docs/prometheus.md, "What is pushed down"). R4 reading
# (docs/rules.md): a GPU is observed at a scrape that carries one of these fields but XID
# (stg_dcgm_judged.observes); an XID reading tells the health of a GPU observed then.
DCGM_METRICS = (
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_FB_USED,
    DCGM_ENERGY,
    DCGM_XID,
)

# kube-state-metrics and OpenCost series the accounting reads.
KUBE_METRICS = (
    "kube_pod_info",
    "kube_pod_labels",
    "kube_pod_status_phase",
    "kube_pod_container_resource_requests",
    "kube_pod_resourceclaim_info",
    "kube_node_status_capacity",
    "kube_node_status_allocatable",
    "kube_node_labels",
    "kube_node_spec_unschedulable",
    "kube_node_status_condition",
    "kube_pod_annotations",  # KAI Scheduler `gpu-fraction` when allow-listed (R6)
    "node_gpu_hourly_cost",
    # Kueue quotas and usage (the quota report; not read by the accounting).
    "kueue_cluster_queue_nominal_quota",
    "kueue_cluster_queue_borrowing_limit",
    "kueue_cluster_queue_resource_usage",
    "kueue_local_queue_resource_usage",
)

# The pod labels (namespace, pod, container) each kube family carries of its own; any other such label on its
# series is the scrape target's, attached by a Kubernetes-discovered target (the exporter's own pod).
_POD = ("namespace", "pod")
KUBE_OBJECT_LABELS: dict[str, tuple[str, ...]] = {
    "kube_pod_info": _POD,
    "kube_pod_labels": _POD,
    "kube_pod_status_phase": _POD,
    "kube_pod_annotations": _POD,
    "kube_pod_resourceclaim_info": _POD,
    "kube_pod_container_resource_requests": (*_POD, "container"),
    "kueue_local_queue_resource_usage": ("namespace",),
}
