"""ResourceClaim / ResourceSlice parsing: v1 and v1beta1 shapes, snapshots with their time (R5), and one clear
message for malformed input."""

from __future__ import annotations

import copy
import json
from datetime import date
from pathlib import Path

import pytest

import gpumeter_sim as simulator
from gpumeter.ingest.k8s_objects import (
    K8sObjectError,
    load_k8s_json,
    parse_resource_claims,
    parse_resource_slices,
    read_kept_snapshots,
    snapshot_days,
    snapshot_files,
)
from gpumeter.ingest.schema import RAW_DRA_ALLOCATIONS_SCHEMA, RAW_DRA_DEVICES_SCHEMA
from gpumeter.storage.paths import snapshot_name


def claim(name: str = "c1", pods: list[tuple[str, str]] | None = None, **result_overrides) -> dict:
    result = {
        "request": "gpu",
        "driver": "gpu.nvidia.com",
        "pool": "node-a",
        "device": "gpu-0",
        **result_overrides,
    }
    result = {k: v for k, v in result.items() if v is not None}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [
                {"resource": "pods", "name": p, "uid": u} for p, u in (pods or [("pod-1", "u1")])
            ],
        },
    }


def listing(*items: dict) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def slice_v1(devices: list[dict], api: str = "resource.k8s.io/v1") -> dict:
    return {
        "apiVersion": api,
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-gpu.nvidia.com-x"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a"},
            "devices": devices,
        },
    }


GPU_ATTRS = {
    "type": {"string": "gpu"},
    "uuid": {"string": "GPU-1"},
    "productName": {"string": "NVIDIA H100 80GB HBM3"},
}
MIG_ATTRS = {
    "type": {"string": "mig"},
    "uuid": {"string": "MIG-2"},
    "parentUUID": {"string": "GPU-1"},
    "profile": {"string": "3g.40gb"},
    "productName": {"string": "NVIDIA H100 80GB HBM3"},
    "index": {"int": 0},
}


# --- happy paths --------------------------------------------------------------------------------


def test_claims_one_row_per_result_and_reserved_pod():
    doc = listing(claim("a", pods=[("p1", "u1"), ("p2", "u2")]), claim("b", shareID="s-1"))
    table = parse_resource_claims(doc, "demo", "claims.json")
    assert table.schema.equals(RAW_DRA_ALLOCATIONS_SCHEMA)
    rows = table.to_pylist()
    assert [(r["claim_name"], r["reserved_pod"], r["reserved_pod_uid"]) for r in rows] == [
        ("a", "p1", "u1"),
        ("a", "p2", "u2"),
        ("b", "pod-1", "u1"),
    ]
    assert rows[0] | {} == {
        "cluster": "demo",
        "claim_namespace": "ns",
        "claim_name": "a",
        "claim_uid": "uid-a",
        "request": "gpu",
        "driver": "gpu.nvidia.com",
        "pool": "node-a",
        "device": "gpu-0",
        "share_id": None,
        "reserved_pod": "p1",
        "reserved_pod_uid": "u1",
        "snapshot_ms": None,  # a document of unknown time, and no creationTimestamp in it
        "created_ms": None,
    }
    assert rows[2]["share_id"] == "s-1"


def test_unallocated_claims_are_skipped_and_unreserved_ones_kept_without_pod():
    pending = claim("pending")
    del pending["status"]
    unreserved = claim("free")
    unreserved["status"]["reservedFor"] = []
    other_consumer = claim("other")
    other_consumer["status"]["reservedFor"] = [
        {"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "x"}
    ]
    rows = parse_resource_claims(listing(pending, unreserved, other_consumer), "c", "claims.json").to_pylist()
    assert [(r["claim_name"], r["reserved_pod"]) for r in rows] == [("free", None), ("other", None)]


def test_single_object_and_typed_list_and_v1beta1_claims():
    one = claim("solo")
    one["apiVersion"] = "resource.k8s.io/v1beta1"
    assert parse_resource_claims(one, "c", "x.json").num_rows == 1
    typed = {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaimList", "items": [claim("t")]}
    assert parse_resource_claims(typed, "c", "x.json").column("claim_name").to_pylist() == ["t"]
    assert parse_resource_claims(listing(), "c", "x.json").num_rows == 0


def test_slices_v1_and_v1beta1_basic_nesting_and_qualified_names():
    v1 = slice_v1(
        [{"name": "gpu-0", "attributes": GPU_ATTRS}, {"name": "gpu-0-mig-1", "attributes": MIG_ATTRS}]
    )
    beta = slice_v1(
        [
            {
                "name": "gpu-1",
                "basic": {
                    "attributes": {"gpu.nvidia.com/uuid": {"string": "GPU-9"}, "type": {"string": "gpu"}}
                },
            }
        ],
        api="resource.k8s.io/v1beta1",
    )
    table = parse_resource_slices(listing(v1, beta), "demo", "slices.json")
    assert table.schema.equals(RAW_DRA_DEVICES_SCHEMA)
    rows = table.to_pylist()
    assert [(r["device"], r["device_type"], r["uuid"], r["parent_uuid"], r["profile"]) for r in rows] == [
        ("gpu-0", "gpu", "GPU-1", None, None),
        ("gpu-0-mig-1", "mig", "MIG-2", "GPU-1", "3g.40gb"),
        ("gpu-1", "gpu", "GPU-9", None, None),
    ]
    assert {(r["driver"], r["pool"], r["node"]) for r in rows} == {("gpu.nvidia.com", "node-a", "node-a")}
    assert rows[0]["product_name"] == "NVIDIA H100 80GB HBM3"


def test_a_timed_snapshot_keeps_its_time_the_creation_time_and_a_marker_row():
    """R5: rows of a snapshot taken at 10:00 carry snapshot_ms; a claim's creationTimestamp is created_ms;
    one marker row (cluster and snapshot_ms only) stands for the look itself, also when it found nothing."""
    at = 1_793_527_200_000  # 2026-11-01T10:00:00Z
    one = claim("a")
    one["metadata"]["creationTimestamp"] = "2026-11-01T09:58:30Z"
    rows = parse_resource_claims(listing(one), "demo", "claims.json", snapshot_ms=at).to_pylist()
    assert [(r["claim_name"], r["snapshot_ms"], r["created_ms"]) for r in rows] == [
        ("a", at, at - 90_000),
        (None, at, None),
    ]
    assert rows[1] == dict.fromkeys(RAW_DRA_ALLOCATIONS_SCHEMA.names) | {"cluster": "demo", "snapshot_ms": at}
    empty = parse_resource_claims(listing(), "demo", "claims.json", snapshot_ms=at).to_pylist()
    assert [(r["cluster"], r["claim_name"], r["snapshot_ms"]) for r in empty] == [("demo", None, at)]
    devices = parse_resource_slices(listing(), "demo", "slices.json", snapshot_ms=at).to_pylist()
    assert [(r["device"], r["snapshot_ms"]) for r in devices] == [(None, at)]


def test_a_slice_counts_from_its_creation_only_while_it_is_as_created():
    """A slice's creationTimestamp dates its devices only at metadata.generation 1 (or none given): a slice
    updated in place (the driver re-publishing its pool) may have changed its devices since."""
    created = "2026-11-01T00:00:00Z"
    fresh = slice_v1([{"name": "gpu-0", "attributes": GPU_ATTRS}])
    fresh["metadata"] |= {"creationTimestamp": created, "generation": 1}
    updated = copy.deepcopy(fresh)
    updated["metadata"]["generation"] = 3
    unnumbered = copy.deepcopy(fresh)
    del unnumbered["metadata"]["generation"]
    table = parse_resource_slices(listing(fresh, updated, unnumbered), "demo", "slices.json")
    midnight = 1_793_491_200_000
    assert table.column("created_ms").to_pylist() == [midnight, None, midnight]
    bad = copy.deepcopy(fresh)
    bad["metadata"]["generation"] = "1"
    with pytest.raises(
        K8sObjectError, match=r"items\[0\]\.metadata\.generation: expected an integer, got string"
    ):
        parse_resource_slices(listing(bad), "demo", "slices.json")


@pytest.mark.parametrize(
    ("stamp", "problem"),
    [("2026-11-01T10:00:00", "is \"2026-11-01T10:00:00\", expected an RFC 3339 time with its zone"),
     (1793527200, "expected an RFC 3339 time string, got number")],
)  # fmt: skip
def test_a_bad_creation_timestamp_names_its_path(stamp, problem):
    doc = claim("a")
    doc["metadata"]["creationTimestamp"] = stamp
    with pytest.raises(K8sObjectError) as err:
        parse_resource_claims(listing(doc), "demo", "claims.json")
    assert str(err.value).startswith(f"claims.json: items[0].metadata.creationTimestamp: {problem}")


def test_snapshot_files_of_a_day_folder_oldest_first(tmp_path):
    """Time-named files (basic or extended ISO 8601, to the millisecond) with their time; the plain file of
    unknown time first; temp files of a write in progress and other files are left alone."""
    for name in (
        "resourceslices-20261101T100000Z.json",
        "resourceclaims-2026-11-01T09:55:00.5Z.json",
        "resourceclaims-20261101T100000.123Z.json",
        "resourceclaims.json",
        ".resourceclaims-20261101T100500.000Z.json.4242.tmp",
        "notes.txt",
    ):
        (tmp_path / name).write_text("{}")
    found = [(f.path.name, f.kind, f.taken_ms) for f in snapshot_files(tmp_path)]
    ten = 1_793_527_200_000
    assert found == [
        ("resourceclaims.json", "resourceclaims", None),
        ("resourceclaims-2026-11-01T09:55:00.5Z.json", "resourceclaims", ten - 300_000 + 500),
        ("resourceslices-20261101T100000Z.json", "resourceslices", ten),
        ("resourceclaims-20261101T100000.123Z.json", "resourceclaims", ten + 123),
    ]
    assert snapshot_name("resourceclaims", ten + 123) == "resourceclaims-20261101T100000.123Z.json"
    (tmp_path / "resourceclaims-yesterday.json").write_text("{}")
    with pytest.raises(K8sObjectError, match=r"resourceclaims-yesterday\.json: not a snapshot name"):
        snapshot_files(tmp_path)


def test_read_snapshots_names_a_missing_folder_and_the_day_folders_it_reads(tmp_path):
    with pytest.raises(K8sObjectError) as err:
        read_kept_snapshots(tmp_path / "nope", "demo", 0, 1)
    assert str(err.value).startswith(f"snapshot folder {tmp_path / 'nope'} does not exist")
    assert "create it" in str(err.value) and "snapshot_k8s_objects" in str(err.value)
    day = 1_793_491_200_000  # 2026-11-01T00:00:00Z
    assert snapshot_days(day - 600_000, day + 86_400_000) == [
        date(2026, 10, 30),
        date(2026, 10, 31),
        date(2026, 11, 1),
    ]
    assert snapshot_days(day, day + 86_400_000) == [date(2026, 10, 31), date(2026, 11, 1)]


def test_simulator_snapshots_parse(tmp_path):
    spec = simulator.FactorySpec(days=1, scrape_interval_s=300)
    simulator.write_parquet(spec, tmp_path)
    folder = tmp_path / "k8s" / "cluster=demo" / f"day={spec.start.isoformat()}"
    claims = parse_resource_claims(
        load_k8s_json(folder / "resourceclaims.json"), "demo", "resourceclaims.json"
    )
    slices = parse_resource_slices(
        load_k8s_json(folder / "resourceslices.json"), "demo", "resourceslices.json"
    )
    assert claims.num_rows > 0 and slices.num_rows == 4
    assert claims.column("reserved_pod").null_count == 0


# --- malformed input: one clear message naming the file and the JSON path -----------------------


def test_not_json(tmp_path):
    path = tmp_path / "claims.json"
    path.write_text("apiVersion: v1\nkind: List\n")
    with pytest.raises(K8sObjectError) as err:
        load_k8s_json(path)
    assert str(err.value).startswith(f"{path}: not JSON (line 1 column 1: Expecting value); ")
    assert "kubectl get <resource> -o json" in str(err.value)


def test_missing_file_and_top_level_array(tmp_path):
    with pytest.raises(K8sObjectError, match="file not found"):
        load_k8s_json(tmp_path / "nope.json")
    path = tmp_path / "array.json"
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(
        K8sObjectError, match=r"array\.json: the top level is a JSON array, expected an object"
    ):
        load_k8s_json(path)


def test_missing_pool_names_the_exact_path():
    items = [claim(f"c{i}") for i in range(3)] + [claim("bad", pool=None)]
    with pytest.raises(K8sObjectError) as err:
        parse_resource_claims(listing(*items), "demo", "claims.json")
    assert str(err.value) == (
        'claims.json: items[3].status.allocation.devices.results[0]: missing "pool"; '
        "re-export it with `kubectl get resourceclaims -A -o json`"
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(kind="PodList"), 'claims.json: kind: is "PodList", expected "List", "ResourceClaimList" or "ResourceClaim"'),
        (lambda d: d["items"][0].update(kind="ResourceSlice"), 'claims.json: items[0].kind: is "ResourceSlice", expected "ResourceClaim"'),
        (lambda d: d["items"][0].update(apiVersion="v1"), 'claims.json: items[0].apiVersion: is "v1", expected resource.k8s.io/v1'),
        (lambda d: d["items"][0]["metadata"].pop("name"), 'claims.json: items[0].metadata: missing "name"'),
        (lambda d: d["items"][0]["status"]["allocation"]["devices"]["results"][0].update(device=7),
         "claims.json: items[0].status.allocation.devices.results[0].device: expected a string, got number"),
        (lambda d: d["items"][0]["status"]["allocation"]["devices"].update(results={}),
         "claims.json: items[0].status.allocation.devices.results: expected an array, got object"),
        (lambda d: d["items"][0]["status"]["reservedFor"][0].pop("name"),
         'claims.json: items[0].status.reservedFor[0]: missing "name"'),
        (lambda d: d.update(items=[3]), "claims.json: items[0]: expected an object, got number"),
    ],
)  # fmt: skip
def test_malformed_claims(mutate, message):
    doc = copy.deepcopy(listing(claim("a")))
    mutate(doc)
    with pytest.raises(K8sObjectError) as err:
        parse_resource_claims(doc, "demo", "claims.json")
    assert str(err.value).startswith(message)
    assert str(err.value).endswith("re-export it with `kubectl get resourceclaims -A -o json`")
    assert str(err.value).count("claims.json") == 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["items"][0]["spec"].pop("pool"), 'slices.json: items[0].spec: missing "pool"'),
        (lambda d: d["items"][0]["spec"]["pool"].pop("name"), 'slices.json: items[0].spec.pool: missing "name"'),
        (lambda d: d["items"][0]["spec"].pop("driver"), 'slices.json: items[0].spec: missing "driver"'),
        (lambda d: d["items"][0]["spec"]["devices"][0].pop("name"), 'slices.json: items[0].spec.devices[0]: missing "name"'),
        (lambda d: d["items"][0]["spec"]["devices"][0]["attributes"].update(uuid="GPU-1"),
         'slices.json: items[0].spec.devices[0].attributes["uuid"]: expected a wrapped value like {"string": "..."}, got string'),
        (lambda d: d["items"][0]["spec"]["devices"][0]["attributes"].update(uuid={"float": 1.0}),
         'slices.json: items[0].spec.devices[0].attributes["uuid"]: has none of string, int, bool, version'),
    ],
)  # fmt: skip
def test_malformed_slices(mutate, message):
    doc = copy.deepcopy(listing(slice_v1([{"name": "gpu-0", "attributes": dict(GPU_ATTRS)}])))
    mutate(doc)
    with pytest.raises(K8sObjectError) as err:
        parse_resource_slices(doc, "demo", "slices.json")
    assert str(err.value).startswith(message)
    assert str(err.value).endswith("re-export it with `kubectl get resourceslices -o json`")


def test_error_is_a_value_error(tmp_path: Path):
    assert issubclass(K8sObjectError, ValueError)
