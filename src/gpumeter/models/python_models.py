"""The intermediate models written in Python: two stop the run with one clear message (a device with no price,
an unparseable MIG profile) or apply the config's tenant rules (R7); the others are the sample pass's tables
(gpumeter.models.sample_pass), which the pass writes in one reading of the day's DCGM rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date

import duckdb
import pyarrow as pa

from gpumeter.config import Config
from gpumeter.models import sample_pass
from gpumeter.models.device_classes import CatalogError, resolve_device_class
from gpumeter.models.money import price_units, weight_units
from gpumeter.models.project import AccountingError
from gpumeter.models.tenancy import TenantResolver


def _metered_day(con: duckdb.DuckDBPyConnection) -> date:
    """The day being metered (a variable the runner sets before any model)."""
    return date.fromisoformat(con.sql("select getvariable('day')").fetchall()[0][0])


def _device_classes(con: duckdb.DuckDBPyConnection, config: Config) -> pa.Table:
    day = _metered_day(con)  # R8: the prices in effect on the metered day
    seen = con.sql(
        "select model_name, mig_profile, min(node) as node from stg_dcgm_series "
        "where seen_in_day group by all order by all"
    ).fetchall()
    pairs = {(model, profile): node for model, profile, node in seen}
    # Every GPU model needs its whole-GPU class too: pool cost is priced per GPU (R9).
    for model, _profile, node in seen:
        pairs.setdefault((model, None), node)
    rows: dict[str, list[object]] = {
        k: []
        for k in (
            "model_name",
            "mig_profile",
            "gpu_model",
            "compute_slices",
            "weight",
            "gpu_price_per_hour",
            "device_price_per_hour",
            "weight_units",
            "gpu_price_units",
            "device_price_units",
        )
    }
    for (model, profile), node in sorted(pairs.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        if model is None:
            raise AccountingError(
                f"DCGM series on node {node!r} carry no modelName label, so they cannot be priced; check that "
                "dcgm-exporter on the node exports the modelName label"
            )
        try:
            cls = resolve_device_class(config, model, profile, node, day)
        except CatalogError as exc:
            raise AccountingError(str(exc)) from None
        rows["model_name"].append(model)
        rows["mig_profile"].append(profile)
        rows["gpu_model"].append(cls.gpu_model)
        rows["compute_slices"].append(cls.compute_slices if profile else 7)
        rows["weight"].append(cls.weight)
        rows["gpu_price_per_hour"].append(cls.gpu_price_per_hour)
        rows["device_price_per_hour"].append(cls.device_price_per_hour)
        rows["weight_units"].append(weight_units(cls.weight))
        rows["gpu_price_units"].append(price_units(cls.gpu_price_per_hour))
        # Only a MIG profile's own price stands as the device's price; else it is weight × the GPU's.
        rows["device_price_units"].append(price_units(cls.price_override))
    schema = pa.schema(
        [
            ("model_name", pa.string()),
            ("mig_profile", pa.string()),
            ("gpu_model", pa.string()),
            ("compute_slices", pa.int32()),
            ("weight", pa.float64()),
            ("gpu_price_per_hour", pa.float64()),
            ("device_price_per_hour", pa.float64()),
            ("weight_units", pa.int64()),
            ("gpu_price_units", pa.int64()),
            ("device_price_units", pa.int64()),
        ]
    )
    return pa.table(rows, schema=schema)


def _holder_tenants(con: duckdb.DuckDBPyConnection, config: Config) -> pa.Table:
    """One row per holder and period of its labels (null bounds: open-ended); a pod with no label series has
    one row for all time."""
    holders = con.sql(
        "select h.namespace, h.pod, l.labels_json, l.from_ms, l.until_ms "
        "from (select distinct namespace, pod from int_holders) as h "
        "left join int_pod_label_periods as l on l.namespace = h.namespace and l.pod = h.pod order by all"
    ).fetchall()
    rows: dict[str, list[object]] = {
        "namespace": [],
        "pod": [],
        "from_ms": [],
        "until_ms": [],
        "tenant": [],
        "cost_center": [],
        "tenant_rule": [],
    }
    tenants = TenantResolver(config, _metered_day(con))  # R7: the rules in effect on the metered day
    for namespace, pod, labels_json, from_ms, until_ms in holders:
        labels = {k: str(v) for k, v in json.loads(labels_json).items()} if labels_json else {}
        match = tenants.resolve(namespace, labels)
        for column, value in zip(
            rows,
            (namespace, pod, from_ms, until_ms, match.tenant, match.cost_center, match.rule),
            strict=True,
        ):
            rows[column].append(value)
    schema = pa.schema(
        [
            ("namespace", pa.string()),
            ("pod", pa.string()),
            ("from_ms", pa.int64()),
            ("until_ms", pa.int64()),
            ("tenant", pa.string()),
            ("cost_center", pa.string()),
            ("tenant_rule", pa.string()),
        ]
    )
    return pa.table(rows, schema=schema)


def _gpu_samples(con: duckdb.DuckDBPyConnection, _config: Config) -> str:
    """The sample pass runs here, the first of its tables to be read; the others wait in the session."""
    sample_pass.run(con)
    return sample_pass.GPU_SAMPLES


def _written_by_the_pass(table: str) -> Callable[[duckdb.DuckDBPyConnection, Config], str]:
    def model(_con: duckdb.DuckDBPyConnection, _config: Config) -> str:
        return table

    return model


# The models the sample pass writes, by the table it writes each into: the two sample tables first, then
# what the other models read from the series' samples.
SAMPLE_PASS_MODELS = {
    "int_gpu_samples": sample_pass.GPU_SAMPLES,
    "int_mig_instance_samples": sample_pass.MIG_INSTANCE_SAMPLES,
    "int_dcgm_copied_samples": sample_pass.COPIED_SAMPLES,
    "int_gpu_samples_on_several_nodes": sample_pass.UUIDS_ON_SEVERAL_NODES,
    "int_shared_sample_series_holders": sample_pass.SHARED_SAMPLE_HOLDERS,
    "int_vgpu_copy_disagreements": sample_pass.VGPU_COPY_CONFLICTS,
    "int_gpu_sample_gaps": sample_pass.SAMPLE_GAPS,
}
PYTHON_MODEL_FUNCTIONS: dict[str, Callable[[duckdb.DuckDBPyConnection, Config], pa.Table | str]] = {
    "int_device_classes": _device_classes,
    "int_holder_tenants": _holder_tenants,
    "int_gpu_samples": _gpu_samples,
    **{
        name: _written_by_the_pass(table)
        for name, table in SAMPLE_PASS_MODELS.items()
        if name != "int_gpu_samples"
    },
}
