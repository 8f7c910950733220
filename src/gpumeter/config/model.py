"""The config itself: Config, made of the sections of sources.py, prices.py, tenants.py and settings.py, with
the checks that span sections; select_clusters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gpumeter.config.base import (
    ISO_4217_PUBLISHED,
    MAX_TEXT_CHARS,
    RESERVED_BUCKETS,
    ConfigError,
    _invoice_text,
    _Model,
    iso_minor_unit,
    tenant_slug,
)
from gpumeter.config.prices import Hybrid, RateCard
from gpumeter.config.settings import Alerts, Checks, Dashboard, Stranded, Warehouse
from gpumeter.config.sources import Cluster
from gpumeter.config.tenants import Tenant, _slug_clash


class Config(_Model):
    pool: str = Field("gpu-pool", max_length=MAX_TEXT_CHARS, description="Name of the pool on invoices.")
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$")
    currency_minor_unit: int | None = Field(None, ge=0, le=4, validate_default=True)
    payment_terms_days: int = Field(
        30, ge=0, le=365, description="Days from an invoice's issue (its period's close) to its due date."
    )
    scrape_interval_seconds: int = Field(
        30, gt=0, le=3600, description="Δ: the time one raw sample stands for, in seconds (docs/rules.md)."
    )
    kube_lookback_seconds: int = Field(
        300,
        gt=0,
        le=86_400,
        description="How long a kube-state-metrics sample describes DCGM samples when its exporter is no longer "
        "scraped (else until the exporter's next scrape), and how long an OpenCost price holds.",
    )
    clusters: list[Cluster] = Field(min_length=1)
    rate_card: RateCard = Field(default_factory=RateCard)
    tenants: list[Tenant] = Field(default_factory=list)
    share: Literal["equal", "requested"] = Field(
        "equal",
        description="How a shared device is split among its holders: equally, or by their declared fractions "
        "(HAMi gpucores, KAI gpu-fraction).",
    )
    idle_policy: Literal["platform", "proportional"] = "platform"
    focus_version: Literal["1.2", "1.3"] = Field(
        "1.2", description="The FOCUS version of the FOCUS export: 1.2, or 1.3 with split cost allocation."
    )
    tariff: Literal["reserved", "used", "hybrid"] = Field(
        "reserved", description="Pay held GPU-time, busy GPU-time, or a mix (docs/tariffs.md)."
    )
    hybrid: Hybrid | None = Field(None, description="The mix of tariff: hybrid.")
    idle_threshold: float = Field(0.05, ge=0, le=1)
    warehouse: Warehouse = Field(default_factory=Warehouse)
    stranded: Stranded = Field(default_factory=Stranded)
    checks: Checks = Field(default_factory=Checks)
    dashboard: Dashboard = Field(default_factory=Dashboard)
    alerts: Alerts | None = Field(
        None, description="Budget alerts to a webhook (docs/tariffs.md); unset, none are sent."
    )

    @field_validator("pool", mode="before")
    @classmethod
    def _pool_text(cls, value: object) -> object:
        return _invoice_text(value, "pool")

    @field_validator("focus_version", mode="before")
    @classmethod
    def _focus_version_text(cls, value: object) -> object:
        return str(value) if isinstance(value, float) else value  # YAML reads an unquoted 1.3 as a number

    @field_validator("currency")
    @classmethod
    def _iso_4217_code(cls, value: str) -> str:
        try:
            iso_minor_unit(value)
        except KeyError:
            raise ValueError(
                f"{value!r} is not an ISO 4217 currency code (list of {ISO_4217_PUBLISHED}); "
                "write the three-letter code, e.g. USD, EUR, JPY"
            ) from None
        return value

    @field_validator("currency_minor_unit")
    @classmethod
    def _minor_unit_known(cls, value: int | None, info: ValidationInfo) -> int | None:
        # Money is rounded once per invoice line to this many decimals (R12): it must be known.
        currency = info.data.get("currency")  # absent when the currency itself is invalid
        if value is None and currency is not None and iso_minor_unit(currency) is None:
            raise ValueError(
                f"currency {currency} has no ISO 4217 minor unit; set currency_minor_unit "
                "to the decimals amounts are rounded to (0..4)"
            )
        return value

    @model_validator(mode="after")
    def _dashboard_tenants_exist(self) -> Config:
        known = {t.name for t in self.tenants}
        for role in self.dashboard.roles:
            if role.tenant is not None and role.tenant not in known:
                raise ValueError(f"dashboard role for tenant {role.tenant!r}: no tenant of that name")
        return self

    @model_validator(mode="after")
    def _price_changes_with_the_rate_card(self) -> Config:
        if self.rate_card.price_source == "opencost":
            for m, model in enumerate(self.rate_card.models):
                if model.price_changes:
                    raise ValueError(
                        f"rate_card.models[{m}] ({model.model}) has price_changes, but price_source is "
                        "opencost, which prices each sample from OpenCost: remove them or set price_source: "
                        "rate_card"
                    )
        return self

    @model_validator(mode="after")
    def _hybrid_with_its_tariff(self) -> Config:
        if self.tariff == "hybrid" and self.hybrid is None:
            raise ValueError("tariff: hybrid needs `hybrid: {reserved_fraction: F}` (0..1; docs/tariffs.md)")
        if self.tariff != "hybrid" and self.hybrid is not None:
            raise ValueError(
                f"`hybrid` is set but tariff is {self.tariff!r}: set tariff: hybrid or remove `hybrid`"
            )
        return self

    @model_validator(mode="after")
    def _kueue_queues_once(self) -> Config:
        owners: dict[str, str] = {}
        for tenant in self.tenants:
            for queue in tenant.kueue_cluster_queues:
                if queue in owners and owners[queue] != tenant.name:
                    raise ValueError(
                        f"Kueue ClusterQueue {queue!r} is listed by tenants {owners[queue]!r} and {tenant.name!r}; "
                        "a queue's quota belongs to one tenant"
                    )
                owners[queue] = tenant.name
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        seen: set[str] = set()
        slugs: dict[str, str] = {}
        for tenant in self.tenants:
            if tenant.name in RESERVED_BUCKETS:
                raise ValueError(f"tenant name {tenant.name!r} is reserved")
            if tenant.name in seen:
                raise ValueError(f"tenant {tenant.name!r} is defined twice")
            seen.add(tenant.name)
            other = slugs.setdefault(tenant_slug(tenant.name), tenant.name)
            if other != tenant.name:
                raise ValueError(_slug_clash(tenant.name, other))
        clusters = [c.name for c in self.clusters]
        if len(set(clusters)) != len(clusters):
            raise ValueError("cluster names must be unique")
        return self

    @property
    def minor_unit(self) -> int:
        """Decimals money is rounded to (R12): the override, else the currency's ISO 4217 minor unit."""
        if self.currency_minor_unit is not None:
            return self.currency_minor_unit
        unit = iso_minor_unit(self.currency)
        assert unit is not None  # a currency without one needs the override (validated)
        return unit

    def cluster(self, name: str) -> Cluster:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(name)

    def scrape_interval_of(self, cluster: str) -> int:
        """Δ of a cluster's samples (R1): its own `scrape_interval_seconds`, else the pool's. A cluster the
        config no longer names (its stored days are still read) has the pool's."""
        own = next((c.scrape_interval_seconds for c in self.clusters if c.name == cluster), None)
        return own if own is not None else self.scrape_interval_seconds


def select_clusters(config: Config, clusters: Iterable[str] | None) -> list[str]:
    """The named clusters of the config (default: all of them), in config order; an unknown name is an error."""
    known = [c.name for c in config.clusters]
    if clusters is None:
        return known
    wanted = list(dict.fromkeys(clusters))
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise ConfigError(
            "clusters", [("", f"{', '.join(unknown)} not in the config (its clusters: {', '.join(known)})")]
        )
    return [c for c in known if c in wanted]
