"""Tenant resolution (R7): holder -> tenant, most specific rule kind first, file order within a kind."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from gpumeter.config import UNALLOCATED, Config

VCLUSTER_LABEL = "label_vcluster_loft_sh_managed_by"  # vcluster.loft.sh/managed-by, sanitized by ksm


@dataclass(frozen=True)
class TenantMatch:
    tenant: str
    cost_center: str | None
    rule: str  # pod_label | vcluster | namespace | none: shown on the data-quality page


def resolve_tenant(config: Config, namespace: str, pod_labels: Mapping[str, str]) -> TenantMatch:
    """`pod_labels` are kube_pod_labels' label_<key> labels of the holder pod."""
    for tenant in config.tenants:  # (1) pod label rules
        for rule in tenant.pod_labels:
            value = pod_labels.get(rule.metric_label)
            if value is not None and fnmatch.fnmatchcase(value, rule.value):
                return TenantMatch(tenant.name, tenant.cost_center, "pod_label")
    vcluster = pod_labels.get(VCLUSTER_LABEL)
    if vcluster:
        for tenant in config.tenants:  # (2) vCluster
            if vcluster in tenant.vclusters:
                return TenantMatch(tenant.name, tenant.cost_center, "vcluster")
    for tenant in config.tenants:  # (3) namespace names and globs
        if any(fnmatch.fnmatchcase(namespace, pattern) for pattern in tenant.namespaces):
            return TenantMatch(tenant.name, tenant.cost_center, "namespace")
    return TenantMatch(UNALLOCATED, None, "none")
