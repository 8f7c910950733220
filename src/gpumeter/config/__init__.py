"""Configuration: one YAML file, validated by pydantic; docs/config.md explains every field. base.py holds what
every section shares (bucket names, bounds, validators, ConfigError); sources.py, prices.py, tenants.py and
settings.py the sections; model.py Config itself; yaml_text.py the YAML text read with the line of each place;
loading.py a file to a Config, its warnings and its JSON Schema. This face hands on the names importers use."""

# ruff: noqa: F401
from gpumeter.config.base import IDLE, REFUSES, RESERVED_BUCKETS, UNALLOCATED, ConfigError, tenant_slug
from gpumeter.config.loading import (
    CONFIG_ENV,
    DEMO_DIR,
    EXAMPLE_CONFIG,
    config_schema,
    config_warnings,
    default_config_path,
    load_config,
    parse_config,
)
from gpumeter.config.model import Config, select_clusters
from gpumeter.config.prices import EnergyPriceChange, GpuModelPrice, Hybrid, MigFamily, PriceChange, RateCard
from gpumeter.config.settings import (
    OBJECT_STORE_DRIVERS,
    Alerts,
    Checks,
    Dashboard,
    DashboardRole,
    Stranded,
    Warehouse,
)
from gpumeter.config.sources import Cluster, ParquetSource, PrometheusSource
from gpumeter.config.tenants import DatedRules, PodLabelRule, Tenant
from gpumeter.config.yaml_text import MAX_CONFIG_CHARS
