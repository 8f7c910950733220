"""The Dagster code location: `dagster dev -m gpumeter.pipelines.definitions`.

The config file comes from $GPUMETER_CONFIG (default: the demo's, else the example shipped in the package). The CLI builds the same
definitions for the config it is given and runs the same job the schedule runs. The daily assets, their job
and the nightly schedule are built here per config: their partitions are (cluster, day) over the config's
cluster names (gpumeter.pipelines.partitions).
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import (
    AssetSelection,
    Definitions,
    define_asset_job,
)

from gpumeter.config import default_config_path, load_config
from gpumeter.pipelines.alert_delivery import budget_alert_definitions
from gpumeter.pipelines.assets import build_day_assets
from gpumeter.pipelines.billing_assets import billing_assets
from gpumeter.pipelines.k8s_snapshots import k8s_snapshot_definitions
from gpumeter.pipelines.partitions import cluster_day_partitions
from gpumeter.pipelines.resources import GpumeterConfigResource
from gpumeter.pipelines.schedules import build_schedules
from gpumeter.pipelines.today import build_today_schedule, meter_today

METER_DAY_JOB = "meter_day"
INVOICE_MONTH_JOB = "invoice_month"


def build_definitions(config_path: str | os.PathLike[str]) -> Definitions:
    path = str(Path(config_path).resolve())
    config = load_config(path)
    clusters = [cluster.name for cluster in config.clusters]
    # DRA snapshots every few minutes, for the clusters that keep them from their kubeconfig (R5).
    snapshot_jobs, snapshot_schedules = k8s_snapshot_definitions(config)
    # Budget alerts to a webhook, when the config has an `alerts` section.
    alert_jobs, alert_sensors = budget_alert_definitions(config)
    day_assets = build_day_assets(cluster_day_partitions(clusters))
    month_assets = billing_assets()  # one per kind of export the registry lists
    invoice_month_job = define_asset_job(
        INVOICE_MONTH_JOB,
        selection=AssetSelection.assets(*month_assets),
        description="Roll a month's days up to invoice lines (with adjustments for closed months) and write "
        "its exports (gpumeter.billing.exports). A closed month is left untouched.",
    )
    meter_day_job = define_asset_job(
        METER_DAY_JOB,
        selection=AssetSelection.assets(*day_assets),
        description="Pull one (cluster, day) of raw samples and meter it through every model.",
    )
    return Definitions(
        assets=[*day_assets, *month_assets],
        jobs=[meter_day_job, invoice_month_job, meter_today, *snapshot_jobs, *alert_jobs],
        schedules=[
            *build_schedules(meter_day_job, invoice_month_job, clusters),
            # Today so far, every hour: provisional figures the nightly run replaces (pipelines/today.py).
            build_today_schedule(clusters),
            *snapshot_schedules,
        ],
        sensors=alert_sensors,
        resources={"gpumeter": GpumeterConfigResource(config_path=path)},
    )


defs = build_definitions(default_config_path())
