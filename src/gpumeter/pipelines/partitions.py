"""Every partitions definition of the project, in one place.

A (cluster, day) is the unit of work (R2): each is metered from its own raw files into its own folders, so
Dagster runs many at once (a backfill, the nightly schedule's one run per cluster). The cluster dimension
is the config's cluster names, so the daily definitions are built per config (`cluster_day_partitions`);
invoices cover calendar months in UTC, over every cluster. The day and month partitions reach into the
current day and month (end_offset=1) so that they can be previewed before they close.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import date

from dagster import (
    BetaWarning,
    DailyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    MultiToSingleDimensionPartitionMapping,
    StaticPartitionsDefinition,
)

PARTITIONS_START = "2024-01-01"
CLUSTER = "cluster"
DAY = "day"

daily_partitions = DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)
monthly_partitions = MonthlyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)


def cluster_day_partitions(clusters: Sequence[str]) -> MultiPartitionsDefinition:
    """(cluster, day) partitions over the config's cluster names; keys read `<cluster>|<YYYY-MM-DD>`."""
    return MultiPartitionsDefinition(
        {CLUSTER: StaticPartitionsDefinition(list(clusters)), DAY: daily_partitions}
    )


def cluster_day_key(cluster: str, day: date) -> MultiPartitionKey:
    return MultiPartitionKey({CLUSTER: cluster, DAY: day.isoformat()})


def split_cluster_day(key: MultiPartitionKey) -> tuple[str, date]:
    dims = key.keys_by_dimension
    return dims[CLUSTER], date.fromisoformat(dims[DAY])


# A month's invoice depends on every cluster's days of that month: the day dimension maps to the month by
# time window, the cluster dimension is all of them. It is the mapping Dagster infers for this pair, written
# out so that the lineage is explicit; its beta warning is silenced (Dagster silences it when inferring).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", BetaWarning)
    MONTH_OF_CLUSTER_DAYS = MultiToSingleDimensionPartitionMapping(partition_dimension_name=DAY)
