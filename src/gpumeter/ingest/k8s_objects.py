"""Kubernetes DRA objects -> raw tables: ResourceClaims (who holds which device) and ResourceSlices
(what each device is). Input is `kubectl get resourceclaims -A -o json` / `kubectl get resourceslices -o json`
output (a `List`), a typed list (`ResourceClaimList`) or a single object.

Shapes (docs/telemetry.md): resource.k8s.io/v1 and v1beta2 put device fields at `spec.devices[].attributes`;
v1beta1 (and v1alpha3) nest them under `spec.devices[].basic`. Claims' `status.allocation.devices.results[]`
and `status.reservedFor[]` are the same in every version. Attribute values are wrapped, e.g.
`{"string": "GPU-..."}`, and attribute names may be qualified with the driver's domain
(`gpu.nvidia.com/uuid`); both spellings are read.

A malformed document raises `K8sObjectError` with one message naming the file, the JSON path of the bad
field and what to do.

Snapshots over time (R5: claims vanish with their pods, slices are re-published). A snapshot is one such
document plus the time it was taken. They are kept in day folders, `<root>/cluster=<c>/day=<YYYY-MM-DD>/`:

- `resourceclaims-<time>.json`, `resourceslices-<time>.json`: a snapshot taken at `<time>`, UTC, written
  `20261101T100000.000Z` (ISO 8601 basic; `2026-11-01T10:00:00Z` is read too), in the folder of its day;
- `resourceclaims.json`, `resourceslices.json`: a snapshot of unknown time (a claims or slices file, or the API
  listed at pull time, as the pull keeps it), whose objects are valid for the whole window that reads it.

Every row parsed from a snapshot carries `snapshot_ms` (null: unknown time) and the object's
`creationTimestamp` as `created_ms`; a snapshot of known time adds one marker row (schema.py), so that staging
sees every look, the empty ones too. `write_snapshot` writes one atomically (temp file, fsync, rename).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpumeter.ingest.schema import RAW_DRA_ALLOCATIONS_SCHEMA, RAW_DRA_DEVICES_SCHEMA
from gpumeter.storage import paths


class K8sObjectError(ValueError):
    """A Kubernetes object document that cannot be read: names the file and the JSON path."""


_CLAIMS_HINT = "re-export it with `kubectl get resourceclaims -A -o json`"
_SLICES_HINT = "re-export it with `kubectl get resourceslices -o json`"


def load_k8s_json(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise K8sObjectError(
            f"{path}: file not found; write the kubectl JSON export there or remove the day"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise K8sObjectError(f"{path}: cannot be read ({exc}); check the file and its permissions") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise K8sObjectError(
            f"{path}: not JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); "
            "write the output of `kubectl get <resource> -o json` (not YAML, not a table)"
        ) from None
    if not isinstance(doc, dict):
        raise K8sObjectError(
            f"{path}: the top level is a JSON {_type_name(doc)}, expected an object (a List or a single object); "
            "write the output of `kubectl get <resource> -o json`"
        )
    return doc


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
    }.get(type(value), type(value).__name__)


class _Reader:
    """Field access that knows the JSON path it is at, for error messages."""

    def __init__(self, source: str, hint: str) -> None:
        self.source = source
        self.hint = hint

    def fail(self, path: str, problem: str) -> K8sObjectError:
        where = f"{path}: " if path else ""
        return K8sObjectError(f"{self.source}: {where}{problem}; {self.hint}")

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_type_name(value)}")
        return value

    def field(self, parent: dict[str, Any], key: str, path: str, kind: type, required: bool = True) -> Any:
        if key not in parent or parent[key] is None:
            if required:
                raise self.fail(path, f'missing "{key}"')
            return None
        value = parent[key]
        if kind is str and not isinstance(value, str):
            raise self.fail(f"{path}.{key}" if path else key, f"expected a string, got {_type_name(value)}")
        if kind is list and not isinstance(value, list):
            raise self.fail(f"{path}.{key}" if path else key, f"expected an array, got {_type_name(value)}")
        if kind is dict and not isinstance(value, dict):
            raise self.fail(f"{path}.{key}" if path else key, f"expected an object, got {_type_name(value)}")
        if kind is str and required and value == "":
            raise self.fail(f"{path}.{key}" if path else key, "is empty")
        return value

    def items(self, doc: Any, kind: str) -> list[tuple[str, dict[str, Any]]]:
        doc = self.obj(doc, "")
        doc_kind = doc.get("kind")
        if doc_kind in ("List", f"{kind}List") or (doc_kind is None and "items" in doc):
            items = self.field(doc, "items", "", list)
            out = []
            for i, item in enumerate(items):
                path = f"items[{i}]"
                item = self.obj(item, path)
                item_kind = item.get("kind")
                if item_kind is not None and item_kind != kind:
                    raise self.fail(f"{path}.kind", f'is "{item_kind}", expected "{kind}"')
                self._api_version(item, path)
                out.append((path, item))
            return out
        if doc_kind == kind:
            self._api_version(doc, "")
            return [("", doc)]
        raise self.fail("kind", f'is {json.dumps(doc_kind)}, expected "List", "{kind}List" or "{kind}"')

    def _api_version(self, item: dict[str, Any], path: str) -> None:
        api = item.get("apiVersion")
        if api is not None and (not isinstance(api, str) or not api.startswith("resource.k8s.io/")):
            raise self.fail(
                _join(path, "apiVersion"),
                f"is {json.dumps(api)}, expected resource.k8s.io/v1 (or v1beta1/v1beta2)",
            )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def parse_resource_claims(
    doc: dict[str, Any], cluster: str, source: str, snapshot_ms: int | None = None
) -> pa.Table:
    """RAW_DRA_ALLOCATIONS_SCHEMA: one row per (allocation result x reservedFor pod). An allocated claim that
    no pod reserves yields its results with a null pod; an unallocated claim yields nothing. `snapshot_ms`:
    when the document was listed (None: unknown); a known time adds the snapshot's marker row."""
    r = _Reader(source, _CLAIMS_HINT)
    rows: dict[str, list[str | int | None]] = {f.name: [] for f in RAW_DRA_ALLOCATIONS_SCHEMA}
    for path, claim in r.items(doc, "ResourceClaim"):
        meta_path = _join(path, "metadata")
        meta = r.field(claim, "metadata", path, dict)
        name = r.field(meta, "name", meta_path, str)
        namespace = r.field(meta, "namespace", meta_path, str)
        uid = r.field(meta, "uid", meta_path, str, required=False)
        created_ms = _creation_ms(r, meta, meta_path)
        status = r.field(claim, "status", path, dict, required=False)
        if not status:
            continue
        status_path = _join(path, "status")
        allocation = r.field(status, "allocation", status_path, dict, required=False)
        if not allocation:
            continue
        alloc_path = f"{status_path}.allocation"
        devices = r.field(allocation, "devices", alloc_path, dict, required=False)
        if not devices:
            continue
        results = r.field(devices, "results", f"{alloc_path}.devices", list, required=False) or []
        pods: list[tuple[str | None, str | None]] = []
        reserved = r.field(status, "reservedFor", status_path, list, required=False) or []
        for j, ref in enumerate(reserved):
            ref_path = f"{status_path}.reservedFor[{j}]"
            ref = r.obj(ref, ref_path)
            resource = r.field(ref, "resource", ref_path, str)
            if resource != "pods" or ref.get("apiGroup") not in (None, ""):
                continue  # another kind of consumer
            pods.append(
                (r.field(ref, "name", ref_path, str), r.field(ref, "uid", ref_path, str, required=False))
            )
        for k, result in enumerate(results):
            res_path = f"{alloc_path}.devices.results[{k}]"
            result = r.obj(result, res_path)
            values = {key: r.field(result, key, res_path, str) for key in ("driver", "pool", "device")}
            request = r.field(result, "request", res_path, str, required=False)
            share_id = r.field(result, "shareID", res_path, str, required=False)
            for pod, pod_uid in pods or [(None, None)]:
                rows["cluster"].append(cluster)
                rows["claim_namespace"].append(namespace)
                rows["claim_name"].append(name)
                rows["claim_uid"].append(uid)
                rows["request"].append(request)
                rows["driver"].append(values["driver"])
                rows["pool"].append(values["pool"])
                rows["device"].append(values["device"])
                rows["share_id"].append(share_id)
                rows["reserved_pod"].append(pod)
                rows["reserved_pod_uid"].append(pod_uid)
                rows["snapshot_ms"].append(snapshot_ms)
                rows["created_ms"].append(created_ms)
    _add_marker(rows, cluster, snapshot_ms)
    return pa.table(rows, schema=RAW_DRA_ALLOCATIONS_SCHEMA)


def _add_marker(rows: dict[str, list[Any]], cluster: str, snapshot_ms: int | None) -> None:
    """The marker row of a snapshot of known time: only `cluster` and `snapshot_ms` (schema.py)."""
    if snapshot_ms is None:
        return
    for name, column in rows.items():
        column.append({"cluster": cluster, "snapshot_ms": snapshot_ms}.get(name))


def _timestamp_ms(r: _Reader, value: Any, path: str) -> int:
    """An RFC 3339 time (`2026-11-01T10:00:00Z`, Kubernetes' metav1.Time) as epoch milliseconds."""
    if not isinstance(value, str):
        raise r.fail(path, f"expected an RFC 3339 time string, got {_type_name(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise r.fail(
            path, f'is "{value}", expected an RFC 3339 time with its zone like "2026-11-01T10:00:00Z"'
        )
    return _epoch_ms(moment)


def _epoch_ms(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _creation_ms(r: _Reader, meta: dict[str, Any], meta_path: str) -> int | None:
    value = meta.get("creationTimestamp")
    return None if value is None else _timestamp_ms(r, value, f"{meta_path}.creationTimestamp")


_ATTRIBUTE_KINDS = ("string", "int", "bool", "version")


def _attribute(r: _Reader, attributes: dict[str, Any], name: str, driver: str, path: str) -> str | None:
    for key in (name, f"{driver}/{name}"):
        if key not in attributes or attributes[key] is None:
            continue
        wrapped = attributes[key]
        attr_path = f'{path}["{key}"]'
        if not isinstance(wrapped, dict):
            raise r.fail(
                attr_path, f'expected a wrapped value like {{"string": "..."}}, got {_type_name(wrapped)}'
            )
        for kind in _ATTRIBUTE_KINDS:
            if kind in wrapped and wrapped[kind] is not None:
                value = wrapped[kind]
                if isinstance(value, bool):
                    return "true" if value else "false"
                return str(value)
        raise r.fail(attr_path, f"has none of {', '.join(_ATTRIBUTE_KINDS)}")
    return None


def parse_resource_slices(
    doc: dict[str, Any], cluster: str, source: str, snapshot_ms: int | None = None
) -> pa.Table:
    """RAW_DRA_DEVICES_SCHEMA: one row per device of every ResourceSlice. `snapshot_ms` as for claims. A
    slice's creationTimestamp is its devices' `created_ms` only while its `metadata.generation` is absent or 1:
    a slice updated in place (the driver re-publishing its pool) may have other devices than when created."""
    r = _Reader(source, _SLICES_HINT)
    rows: dict[str, list[str | int | None]] = {f.name: [] for f in RAW_DRA_DEVICES_SCHEMA}
    for path, item in r.items(doc, "ResourceSlice"):
        meta_path = _join(path, "metadata")
        meta = r.field(item, "metadata", path, dict, required=False) or {}
        created_ms = _creation_ms(r, meta, meta_path)
        generation = meta.get("generation")
        if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
            raise r.fail(f"{meta_path}.generation", f"expected an integer, got {_type_name(generation)}")
        if generation is not None and generation > 1:
            created_ms = None
        spec_path = _join(path, "spec")
        spec = r.field(item, "spec", path, dict)
        driver = r.field(spec, "driver", spec_path, str)
        node = r.field(spec, "nodeName", spec_path, str, required=False)
        pool = r.field(r.field(spec, "pool", spec_path, dict), "name", f"{spec_path}.pool", str)
        devices = r.field(spec, "devices", spec_path, list, required=False) or []
        for k, device in enumerate(devices):
            dev_path = f"{spec_path}.devices[{k}]"
            device = r.obj(device, dev_path)
            name = r.field(device, "name", dev_path, str)
            body, body_path = device, dev_path
            if "basic" in device and device["basic"] is not None:  # v1beta1 / v1alpha3
                body, body_path = r.field(device, "basic", dev_path, dict), f"{dev_path}.basic"
            attributes = r.field(body, "attributes", body_path, dict, required=False) or {}
            attr_path = f"{body_path}.attributes"
            uuid = _attribute(r, attributes, "uuid", driver, attr_path)
            parent = _attribute(r, attributes, "parentUUID", driver, attr_path)
            device_type = _attribute(r, attributes, "type", driver, attr_path)
            rows["cluster"].append(cluster)
            rows["driver"].append(driver)
            rows["pool"].append(pool)
            rows["node"].append(node)
            rows["device"].append(name)
            rows["device_type"].append(device_type)
            rows["uuid"].append(uuid)
            rows["parent_uuid"].append(parent)
            rows["profile"].append(_attribute(r, attributes, "profile", driver, attr_path))
            rows["product_name"].append(_attribute(r, attributes, "productName", driver, attr_path))
            rows["snapshot_ms"].append(snapshot_ms)
            rows["created_ms"].append(created_ms)
    _add_marker(rows, cluster, snapshot_ms)
    return pa.table(rows, schema=RAW_DRA_DEVICES_SCHEMA)


# --- snapshots over time ------------------------------------------------------------------------

_BASIC_TIME = re.compile(r"^(\d{8})T(\d{6})(?:\.(\d{1,6}))?Z$")


@dataclass(frozen=True)
class SnapshotFile:
    """One kept snapshot: its file, its kind (`resourceclaims` | `resourceslices`) and when it was taken
    (epoch ms; None for the plain `<kind>.json`, a snapshot of unknown time)."""

    path: Path
    kind: str
    taken_ms: int | None


@dataclass(frozen=True)
class Snapshots:
    """The DRA raw tables of a set of snapshots, and the files they came from (oldest first)."""

    allocations: pa.Table
    devices: pa.Table
    files: tuple[SnapshotFile, ...]


def snapshot_day_folder(root: Path, cluster: str, day: date) -> Path:
    return paths.partition_dir(Path(root), cluster, day)


def _snapshot_time_ms(text: str) -> int | None:
    """`20261101T100000Z`, `20261101T100000.123Z` or `2026-11-01T10:00:00(.123)Z` as epoch ms."""
    found = _BASIC_TIME.match(text)
    try:
        if found:
            day, clock, fraction = found.groups()
            moment = datetime.strptime(day + clock, "%Y%m%d%H%M%S").replace(tzinfo=UTC)
            return _epoch_ms(moment) + int(((fraction or "") + "000000")[:6]) // 1000
        if text.endswith("Z") and "T" in text:
            moment = datetime.fromisoformat(text)
            return _epoch_ms(moment) if moment.tzinfo is not None else None
    except ValueError:
        return None
    return None


def snapshot_files(folder: Path) -> list[SnapshotFile]:
    """The snapshots of one day folder, oldest first (a plain file, of unknown time, first). Files that are
    not named like a snapshot are left alone (temp files of a write in progress start with a dot); one named
    `<kind>-<something>.json` whose time cannot be read is an error naming it."""
    folder = Path(folder)
    found: list[SnapshotFile] = []
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        named = paths.SNAPSHOT_NAME.match(path.name)
        if named is None or not path.is_file():
            continue
        kind, stamp = named.group(1), named.group("time")
        if stamp is None:
            found.append(SnapshotFile(path, kind, None))
            continue
        taken = _snapshot_time_ms(stamp)
        if taken is None:
            raise K8sObjectError(
                f"{path}: not a snapshot name: the time {stamp!r} is not a UTC time like 20261101T100000Z; "
                f"name it {kind}-<YYYYMMDDTHHMMSS[.mmm]Z>.json (the time it was taken) or {kind}.json "
                "(a snapshot of unknown time)"
            )
        found.append(SnapshotFile(path, kind, taken))
    found.sort(key=lambda f: (f.taken_ms is not None, f.taken_ms or 0, f.kind, f.path.name))
    return found


def read_snapshots(root: Path, cluster: str, days: Iterable[date]) -> Snapshots:
    """Every snapshot of the cluster's day folders under `root` for `days`, parsed into the DRA raw tables
    (each row with its snapshot's time). A bad file is one K8sObjectError naming it and the JSON path."""
    files = [f for day in days for f in snapshot_files(snapshot_day_folder(root, cluster, day))]
    claims, slices = [], []
    for f in files:
        doc = load_k8s_json(f.path)
        if f.kind == paths.RESOURCE_CLAIMS:
            claims.append(parse_resource_claims(doc, cluster, str(f.path), f.taken_ms))
        else:
            slices.append(parse_resource_slices(doc, cluster, str(f.path), f.taken_ms))
    return Snapshots(
        pa.concat_tables(claims) if claims else RAW_DRA_ALLOCATIONS_SCHEMA.empty_table(),
        pa.concat_tables(slices) if slices else RAW_DRA_DEVICES_SCHEMA.empty_table(),
        tuple(files),
    )


def find_snapshot(root: Path, cluster: str, kind: str, from_ms: int, until_ms: int) -> SnapshotFile | None:
    """A kept snapshot of `kind` taken in [from_ms, until_ms), if any (the snapshot job's idempotence)."""
    first = datetime.fromtimestamp(from_ms / 1000, UTC).date()
    last = datetime.fromtimestamp((until_ms - 1) / 1000, UTC).date()
    for ordinal in range(first.toordinal(), last.toordinal() + 1):
        for f in snapshot_files(snapshot_day_folder(root, cluster, date.fromordinal(ordinal))):
            if f.kind == kind and f.taken_ms is not None and from_ms <= f.taken_ms < until_ms:
                return f
    return None


def write_snapshot(root: Path, cluster: str, kind: str, doc: dict[str, Any], taken_ms: int) -> Path:
    """Keep one snapshot: `<root>/cluster=<c>/day=<d>/<kind>-<time>.json`, written atomically (a temp file
    in the folder, fsync, rename, fsync of the folder), so a reader sees the whole file or none. Writing the
    same snapshot again gives the same bytes under the same name."""
    taken_day = datetime.fromtimestamp(taken_ms // 1000, UTC).date()
    folder = snapshot_day_folder(root, cluster, taken_day)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / paths.snapshot_name(kind, taken_ms)
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def snapshot_days(start_ms: int, end_ms: int) -> list[date]:
    """The day folders that tell which objects were valid in [start_ms, end_ms): every UTC day the window
    touches, and the day before it (its last snapshots say what held at the window's start)."""
    first = datetime.fromtimestamp(start_ms // 1000, UTC).date()
    last = datetime.fromtimestamp(max(start_ms, end_ms - 1) // 1000, UTC).date()
    return [date.fromordinal(o) for o in range(first.toordinal() - 1, last.toordinal() + 1)]


def read_kept_snapshots(root: Path, cluster: str, start_ms: int, end_ms: int) -> Snapshots:
    """The snapshots kept under `root` (the snapshot job's folder) that matter to the window; a folder that
    does not exist is an error naming it and what to do."""
    root = Path(root)
    if not root.is_dir():
        raise K8sObjectError(
            f"snapshot folder {root} does not exist (k8s_snapshots_dir): create it and let the "
            "snapshot_k8s_objects job fill it (it lists the API of the source's kubeconfig every few "
            "minutes), or correct k8s_snapshots_dir, or remove it to read claims_file/slices_file/kubeconfig "
            "instead"
        )
    return read_snapshots(root, cluster, snapshot_days(start_ms, end_ms))
