"""Who reads: a `Viewer` (finance, ops, or one tenant), found from a sign-in (the config's `dashboard.roles`) or,
without one, from GPUMETER_DASHBOARD_VIEWER; and `config_for(viewer)`, the config as that viewer may read it (a
tenant viewer's holds its own tenant only: no other tenant's name, cost center, budget, namespaces or Kueue
queues, and no role mappings)."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Literal

from gpumeter.config import Config

Role = Literal["finance", "ops", "tenant"]
ROLES: tuple[Role, ...] = ("finance", "ops", "tenant")
VIEWER_ENV = "GPUMETER_DASHBOARD_VIEWER"


class AccessDenied(PermissionError):
    """The viewer's role may not read this view."""


class ViewerError(ValueError):
    """A viewer setting that names no role or no configured tenant."""


@dataclass(frozen=True)
class Viewer:
    """Who is reading: finance and ops see every tenant; a tenant viewer sees its own tenant's rows only."""

    role: Role
    tenant: str | None = None
    identity: str = "local"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ViewerError(f"unknown dashboard role {self.role!r}: use finance, ops or tenant")
        if self.role == "tenant" and not self.tenant:
            raise ViewerError("a tenant viewer needs its tenant")

    @property
    def sees_all_tenants(self) -> bool:
        return self.role != "tenant"

    @property
    def label(self) -> str:
        return f"tenant {self.tenant}" if self.role == "tenant" else self.role


def viewer_for_identity(
    config: Config, email: str | None, groups: object, identity: str = ""
) -> Viewer | None:
    """The first `dashboard.roles` rule (file order) that the identity's email or groups match; None if no
    rule does (such a user sees nothing)."""
    group_set = {str(g) for g in groups} if isinstance(groups, list | tuple | set) else set()
    if isinstance(groups, str):
        group_set = {groups}
    mail = (email or "").strip().lower()
    for rule in config.dashboard.roles:
        by_mail = bool(mail) and any(fnmatch.fnmatchcase(mail, pattern.lower()) for pattern in rule.emails)
        if by_mail or group_set.intersection(rule.groups):
            return Viewer(rule.role, rule.tenant, identity or mail or "oidc user")
    return None


def local_viewer(config: Config, setting: str | None = None) -> Viewer:
    """Local mode (no login configured): finance, unless GPUMETER_DASHBOARD_VIEWER says `ops` or
    `tenant:<name>`."""
    text = (os.environ.get(VIEWER_ENV, "") if setting is None else setting).strip()
    if not text or text == "finance":
        return Viewer("finance", identity="local mode")
    if text == "ops":
        return Viewer("ops", identity="local mode")
    if text.startswith("tenant:"):
        tenant = text.removeprefix("tenant:").strip()
        if tenant not in {t.name for t in config.tenants}:
            # The message is shown on the page, to whoever opens it: it names no configured tenant.
            raise ViewerError(
                f"{VIEWER_ENV}={text!r}: no tenant {tenant!r} in the config; use the name of one of the "
                "config's `tenants`"
            )
        return Viewer("tenant", tenant, identity="local mode")
    raise ViewerError(f"{VIEWER_ENV}={text!r}: use finance, ops or tenant:<name>")


def config_for(config: Config, viewer: Viewer) -> Config:
    """The config as `viewer` may read it. Finance and ops: all of it. A tenant viewer: its own tenant only
    (name, cost center, budget, namespaces, Kueue queues), and no role mappings (who else may sign in, and
    as what, is not a tenant's to read). Prices, currency and pool name are the same for everyone."""
    if viewer.sees_all_tenants:
        return config
    own = [t for t in config.tenants if t.name == viewer.tenant]
    return config.model_copy(
        update={"tenants": own, "dashboard": config.dashboard.model_copy(update={"roles": []})}
    )
