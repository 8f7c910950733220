"""Daily assets from raw samples through staging and intermediate models to marts (the monthly invoice
assets are in billing_assets.py), partitioned by (cluster, day). Each asset body is a thin shell: the work
is gpumeter.models.runner. The assets are built per config (`build_day_assets`) because the cluster dimension
of their partitions is the config's cluster names."""

from collections.abc import Iterator
from datetime import date

from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    MultiPartitionsDefinition,
    TableColumn,
    TableConstraints,
    TableSchema,
    multi_asset,
)

from gpumeter.ingest.contract import lookback_ms
from gpumeter.ingest.pull import pull_raw_day
from gpumeter.models.partition import meter_partition_day
from gpumeter.models.project import Model, lineage_deps, load_models
from gpumeter.pipelines import checks
from gpumeter.pipelines.checks import CHECK_SPECS
from gpumeter.pipelines.partitions import split_cluster_day
from gpumeter.pipelines.resources import GpumeterConfigResource
from gpumeter.storage.replacement import Acceptance

RAW_GROUP = "raw"
RAW_SPECS = [
    AssetSpec("raw_dcgm_samples", group_name=RAW_GROUP, description="dcgm-exporter samples of the day."),
    AssetSpec(
        "raw_kube_samples", group_name=RAW_GROUP, description="kube-state-metrics and OpenCost samples."
    ),
    AssetSpec("raw_dra_allocations", group_name=RAW_GROUP, description="ResourceClaim allocations (DRA)."),
    AssetSpec("raw_dra_devices", group_name=RAW_GROUP, description="ResourceSlice devices (DRA)."),
]


def column_schema(model: Model) -> TableSchema:
    """The model's declared columns (its schema.yml) as Dagster's column schema, its grain as a constraint."""
    grain = f"one row per ({', '.join(model.grain)})" if model.grain else "one row"
    return TableSchema(
        columns=[TableColumn(c.name, c.data_type, description=c.description) for c in model.columns],
        constraints=TableConstraints(other=[grain]),
    )


# Description and columns from the models' schema.yml files (gpumeter.models.project).
MODEL_SPECS = [
    AssetSpec(
        model.name,
        group_name=model.layer,
        description=model.description,
        deps=[AssetKey(dep) for dep in lineage_deps(model)],
        kinds={"duckdb", "python" if model.sql is None else "sql"},
        metadata={"dagster/column_schema": column_schema(model)},
    )
    for model in load_models()
    if not model.ephemeral
]


def _cluster_day(context: AssetExecutionContext) -> tuple[str, date]:
    return split_cluster_day(context.multi_partition_key)


def build_day_assets(partitions_def: MultiPartitionsDefinition) -> list[AssetsDefinition]:
    """The daily assets over (cluster, day) partitions (gpumeter.pipelines.partitions.cluster_day_partitions)."""

    @multi_asset(specs=RAW_SPECS, partitions_def=partitions_def, name="raw_samples")
    def raw_samples(
        context: AssetExecutionContext, gpumeter: GpumeterConfigResource
    ) -> Iterator[MaterializeResult]:
        """Pull one cluster's day from its source and store it (with the lookback) in the raw zone. A stored
        day is replaced with less only with the run tag gpumeter/replace_with_less (the reason)."""
        config = gpumeter.config
        cluster, day = _cluster_day(context)
        counts = pull_raw_day(
            config,
            gpumeter.warehouse,
            day,
            source_for=gpumeter.source,
            log=context.log.info,
            clusters=[cluster],
            acceptance=Acceptance.from_tags(context.run.tags),
        )
        for spec in RAW_SPECS:
            name = spec.key.path[-1]
            yield MaterializeResult(
                asset_key=spec.key,
                metadata={
                    "rows": MetadataValue.int(counts.get(name, 0)),
                    "lookback_ms": lookback_ms(config, cluster),
                },
            )

    @multi_asset(
        specs=MODEL_SPECS,
        check_specs=CHECK_SPECS,
        partitions_def=partitions_def,
        name="day_accounting",
        can_subset=False,
    )
    def day_accounting(
        context: AssetExecutionContext, gpumeter: GpumeterConfigResource
    ) -> Iterator[MaterializeResult | AssetCheckResult]:
        """Run every SQL model of the (cluster, day) in one DuckDB session; each model replaces the
        partition's file (R15)."""
        cluster, day = _cluster_day(context)
        counts, results = meter_partition_day(
            gpumeter.config,
            gpumeter.warehouse,
            day,
            log=context.log.info,
            clusters=[cluster],
            acceptance=Acceptance.from_tags(context.run.tags),
        )
        for model in load_models():
            if model.ephemeral:
                continue
            yield MaterializeResult(
                asset_key=model.name, metadata={"rows": MetadataValue.int(counts.get(model.name, 0))}
            )
        yield from checks.evaluate(results, gpumeter.config)

    return [raw_samples, day_accounting]
