"""Tenants and the rules that claim GPU time for them (R7): namespaces, vClusters, pod labels, and rules in
effect on some days only; the names tenants may not take (a bucket's, or one reading like another's)."""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from gpumeter.config.base import (
    _FILE_NAME,
    IDLE,
    MAX_BUDGET,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    RESERVED_BUCKETS,
    _file_name_part,
    _invoice_text,
    _Model,
    tenant_slug,
)

# A tenant whose name reads like a bucket's would be taken for it on an invoice (`idle` for __idle__).
_BUCKET_SLUGS = {tenant_slug(bucket): bucket for bucket in RESERVED_BUCKETS}


def _namespace_pattern(pattern: str) -> str:
    if not re.fullmatch(r"[a-z0-9*?\[\]!-]+", pattern):
        raise ValueError(
            f"{pattern!r} is not a namespace name or glob (lowercase letters, digits, '-', '*', '?')"
        )
    return pattern


class PodLabelRule(_Model):
    key: str = Field(description="Pod label key as in Kubernetes (team) or sanitized (label_team).")
    value: str = Field(description="Exact value, or a shell glob.")

    @property
    def metric_label(self) -> str:
        """kube-state-metrics' sanitized name of the key (R7): invalid characters become `_`, then camelCase
        becomes snake_case and everything is lowercased, as ksm does (`app.kubernetes.io/team` ->
        `label_app_kubernetes_io_team`, `teamName` -> `label_team_name`). A key already starting with
        `label_` is taken as sanitized."""
        if self.key.startswith("label_"):
            return self.key
        sanitized = re.sub(r"[^a-zA-Z0-9_]", "_", self.key)
        return "label_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", sanitized).lower()


NamespacePatterns = list[Annotated[str, AfterValidator(_namespace_pattern)]]


class DatedRules(_Model):
    """More rules of a tenant, in effect on the UTC days [effective_from, effective_until) only (R7): a namespace,
    vCluster or pod label handed from one team to another on a date (docs/config.md, "Tenant rules with dates")."""

    effective_from: date | None = Field(None, description="The first UTC day these rules apply to.")
    effective_until: date | None = Field(None, description="The first UTC day they no longer apply to.")
    namespaces: NamespacePatterns = Field(default_factory=list, description="Namespace names or shell globs.")
    vclusters: list[str] = Field(default_factory=list, description="vCluster names (host pod label).")
    pod_labels: list[PodLabelRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _a_period_and_a_rule(self) -> DatedRules:
        if self.effective_from is None and self.effective_until is None:
            raise ValueError(
                "give effective_from, effective_until or both (rules for every day go in the tenant's own "
                "namespaces, vclusters and pod_labels)"
            )
        if (
            self.effective_from is not None
            and self.effective_until is not None
            and self.effective_until <= self.effective_from
        ):
            raise ValueError(
                f"effective_until {self.effective_until} is not after effective_from {self.effective_from}: the "
                "rules would apply to no day"
            )
        if not (self.namespaces or self.vclusters or self.pod_labels):
            raise ValueError("names no namespace, vCluster or pod label rule")
        return self

    def in_effect(self, day: date) -> bool:
        return (self.effective_from is None or self.effective_from <= day) and (
            self.effective_until is None or day < self.effective_until
        )


class Tenant(_Model):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=_FILE_NAME.pattern)
    cost_center: str | None = Field(None, max_length=MAX_TEXT_CHARS)
    namespaces: NamespacePatterns = Field(default_factory=list, description="Namespace names or shell globs.")
    vclusters: list[str] = Field(default_factory=list, description="vCluster names (host pod label).")
    pod_labels: list[PodLabelRule] = Field(default_factory=list)
    dated_rules: list[DatedRules] = Field(
        default_factory=list,
        description="More rules, each in effect from or until a UTC day (a namespace handed over on a date).",
    )
    monthly_budget: float | None = Field(None, ge=0, le=MAX_BUDGET)
    kueue_cluster_queues: list[str] = Field(
        default_factory=list,
        description="Kueue ClusterQueues whose quota is this tenant's (mart_queue_quota_usage).",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _not_reserved(cls, value: object) -> object:
        # Before the name pattern, so that `__idle__` is told it is reserved, not that it is misspelt.
        if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
            return _file_name_part(value, "tenant name")
        if value in RESERVED_BUCKETS:
            raise ValueError(
                f"tenant name {value!r} is reserved for the bucket of that name (idle capacity or GPU time no "
                "tenant claims, invoiced to nobody)"
            )
        if isinstance(value, str) and tenant_slug(value) in _BUCKET_SLUGS:
            bucket = _BUCKET_SLUGS[tenant_slug(value)]
            what = "idle pool capacity" if bucket == IDLE else "GPU time no tenant claims"
            raise ValueError(
                f"tenant name {value!r} reads as the reserved bucket {bucket} ({what}, invoiced to nobody) "
                "on invoices; choose another name"
            )
        return _file_name_part(value, "tenant name")

    @field_validator("cost_center", mode="before")
    @classmethod
    def _cost_center_text(cls, value: object) -> object:
        return _invoice_text(value, "cost_center")


def _slug_clash(name: str, other: str, where: str = "") -> str:
    return (
        f"tenant {name!r} reads as {tenant_slug(name)} on invoices, like tenant {other!r}{where}: names that "
        "differ only in case or punctuation would be taken for one another (and their invoice files are "
        "one file on a case-insensitive disk); rename one"
    )
