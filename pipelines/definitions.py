"""The Dagster code location: `dagster dev -m pipelines.definitions`.

The config file comes from $GPUMETER_CONFIG (default: examples/demo-config.yaml). The CLI builds the same
definitions for the config it is given and runs the same job the schedule runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import (
    AssetSelection,
    Definitions,
    define_asset_job,
)

from pipelines.assets import day_accounting, raw_samples
from pipelines.billing_assets import BILLING_ASSETS
from pipelines.resources import GpumeterConfigResource
from pipelines.schedules import build_schedules

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "examples" / "demo-config.yaml"

METER_DAY_JOB = "meter_day"
INVOICE_MONTH_JOB = "invoice_month"

meter_day_job = define_asset_job(
    METER_DAY_JOB,
    selection=AssetSelection.assets(raw_samples, day_accounting),
    description="Pull one day of raw samples for every cluster and meter it through every model.",
)
invoice_month_job = define_asset_job(
    INVOICE_MONTH_JOB,
    selection=AssetSelection.assets(*BILLING_ASSETS),
    description="Roll a month's days up to invoice lines (with adjustments for closed months) and write "
    "its exports: invoice-lines CSVs, FOCUS, HTML invoices. A closed month is left untouched (R16).",
)

SCHEDULES = build_schedules(meter_day_job, invoice_month_job)


def build_definitions(config_path: str | os.PathLike[str]) -> Definitions:
    return Definitions(
        assets=[raw_samples, day_accounting, *BILLING_ASSETS],
        jobs=[meter_day_job, invoice_month_job],
        schedules=SCHEDULES,
        resources={"gpumeter": GpumeterConfigResource(config_path=str(Path(config_path).resolve()))},
    )


defs = build_definitions(os.environ.get("GPUMETER_CONFIG", str(DEFAULT_CONFIG)))
