"""Dagster: thin shells over the domain packages (partitions, resources, assets, checks, schedules)."""
