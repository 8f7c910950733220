"""Dagster definitions: thin shells over metering/."""
