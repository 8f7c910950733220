"""Tenant resolution (R7): holder -> tenant, most specific rule kind first, file order within a kind, with the
rules in effect on the metered day."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

from gpumeter.config import UNALLOCATED, Config, PodLabelRule, Tenant
from gpumeter.ingest.contract import utc_today

VCLUSTER_LABEL = "label_vcluster_loft_sh_managed_by"  # vcluster.loft.sh/managed-by, sanitized by ksm


@dataclass(frozen=True)
class TenantMatch:
    tenant: str
    cost_center: str | None
    rule: str  # pod_label | vcluster | namespace | none: shown on the data-quality page


@dataclass(frozen=True)
class RulesOnDay:
    """A tenant's rules on one UTC day: its own, and those of its dated rules in effect then."""

    namespaces: tuple[str, ...]
    vclusters: tuple[str, ...]
    pod_labels: tuple[PodLabelRule, ...]


def rules_on(tenant: Tenant, day: date) -> RulesOnDay:
    dated = [rules for rules in tenant.dated_rules if rules.in_effect(day)]
    return RulesOnDay(
        namespaces=(*tenant.namespaces, *(n for rules in dated for n in rules.namespaces)),
        vclusters=(*tenant.vclusters, *(v for rules in dated for v in rules.vclusters)),
        pod_labels=(*tenant.pod_labels, *(r for rules in dated for r in rules.pod_labels)),
    )


class TenantResolver:
    """The config's tenant rules in effect on one UTC day, worked out once for every holder of the day."""

    def __init__(self, config: Config, day: date) -> None:
        self._tenants = [(tenant, rules_on(tenant, day)) for tenant in config.tenants]

    def resolve(self, namespace: str, pod_labels: Mapping[str, str]) -> TenantMatch:
        """`pod_labels` are kube_pod_labels' label_<key> labels of the holder pod."""
        for tenant, rules in self._tenants:  # (1) pod label rules
            for rule in rules.pod_labels:
                value = pod_labels.get(rule.metric_label)
                if value is not None and fnmatch.fnmatchcase(value, rule.value):
                    return TenantMatch(tenant.name, tenant.cost_center, "pod_label")
        vcluster = pod_labels.get(VCLUSTER_LABEL)
        if vcluster:
            for tenant, rules in self._tenants:  # (2) vCluster
                if vcluster in rules.vclusters:
                    return TenantMatch(tenant.name, tenant.cost_center, "vcluster")
        for tenant, rules in self._tenants:  # (3) namespace names and globs
            if any(fnmatch.fnmatchcase(namespace, pattern) for pattern in rules.namespaces):
                return TenantMatch(tenant.name, tenant.cost_center, "namespace")
        return TenantMatch(UNALLOCATED, None, "none")


def resolve_tenant(
    config: Config, namespace: str, pod_labels: Mapping[str, str], day: date | None = None
) -> TenantMatch:
    """One holder's tenant with the rules in effect on `day`, the metered UTC day (default: today)."""
    return TenantResolver(config, day or utc_today()).resolve(namespace, pod_labels)
