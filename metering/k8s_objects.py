"""Kubernetes DRA objects -> raw tables: ResourceClaims (who holds which device) and ResourceSlices
(what each device is). Input is `kubectl get resourceclaims -A -o json` / `kubectl get resourceslices -o json`
output (a `List`), a typed list (`ResourceClaimList`) or a single object.

Shapes (TELEMETRY.md): resource.k8s.io/v1 and v1beta2 put device fields at `spec.devices[].attributes`;
v1beta1 (and v1alpha3) nest them under `spec.devices[].basic`. Claims' `status.allocation.devices.results[]`
and `status.reservedFor[]` are the same in every version. Attribute values are wrapped, e.g.
`{"string": "GPU-..."}`, and attribute names may be qualified with the driver's domain
(`gpu.nvidia.com/uuid`); both spellings are read.

A malformed document raises `K8sObjectError` with one message naming the file, the JSON path of the bad
field and what to do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from metering.schema import RAW_DRA_ALLOCATIONS_SCHEMA, RAW_DRA_DEVICES_SCHEMA


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


def parse_resource_claims(doc: dict[str, Any], cluster: str, source: str) -> pa.Table:
    """RAW_DRA_ALLOCATIONS_SCHEMA: one row per (allocation result x reservedFor pod). An allocated claim that
    no pod reserves yields its results with a null pod; an unallocated claim yields nothing."""
    r = _Reader(source, _CLAIMS_HINT)
    rows: dict[str, list[str | None]] = {f.name: [] for f in RAW_DRA_ALLOCATIONS_SCHEMA}
    for path, claim in r.items(doc, "ResourceClaim"):
        meta_path = _join(path, "metadata")
        meta = r.field(claim, "metadata", path, dict)
        name = r.field(meta, "name", meta_path, str)
        namespace = r.field(meta, "namespace", meta_path, str)
        uid = r.field(meta, "uid", meta_path, str, required=False)
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
    return pa.table(rows, schema=RAW_DRA_ALLOCATIONS_SCHEMA)


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


def parse_resource_slices(doc: dict[str, Any], cluster: str, source: str) -> pa.Table:
    """RAW_DRA_DEVICES_SCHEMA: one row per device of every ResourceSlice."""
    r = _Reader(source, _SLICES_HINT)
    rows: dict[str, list[str | None]] = {f.name: [] for f in RAW_DRA_DEVICES_SCHEMA}
    for path, item in r.items(doc, "ResourceSlice"):
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
    return pa.table(rows, schema=RAW_DRA_DEVICES_SCHEMA)
