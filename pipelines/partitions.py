"""Every partitions definition of the project, in one place.

Days are the unit of work (R2); invoices cover calendar months in UTC. The monthly partitions reach
into the current month (end_offset=1) so that a month in progress can be previewed before it closes.
"""

from dagster import DailyPartitionsDefinition, MonthlyPartitionsDefinition

PARTITIONS_START = "2024-01-01"

daily_partitions = DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)
monthly_partitions = MonthlyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)
