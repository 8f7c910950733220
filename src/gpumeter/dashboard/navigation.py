"""The dashboard's pages, declared once: each entry of `PAGES` is a page of a navigation section, with the roles
that see it. The app builds `st.navigation` from it (`sections`), the warm-up makes the reads of every page of a
viewer's navigation (`pages`, each screen's `warm`), and the tests visit the pages it lists.

A page is a screen file in screens/ (its page function, its reads, and `show` when st.navigation runs it) and
its entry here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import streamlit as st

from gpumeter.dashboard.screens import (
    budgets,
    capacity,
    charges,
    data_quality,
    idle,
    invoices,
    mig,
    rightsizing,
    usage,
)
from gpumeter.views.identity import Role, Viewer

POOL: tuple[Role, ...] = ("finance", "ops")  # the roles that see every tenant
TENANT: tuple[Role, ...] = ("tenant",)
TENANT_SECTION = "Tenant {tenant}"  # a tenant viewer's one section, named for its tenant


@dataclass(frozen=True)
class Page:
    section: str
    title: str  # in the navigation; the page's own title is its screen's
    screen: ModuleType  # a module of screens/
    roles: tuple[Role, ...]
    icon: str

    @property
    def name(self) -> str:
        """The screen file's name without `.py`: `data_quality`."""
        return self.screen.__name__.rpartition(".")[2]

    @property
    def script(self) -> Path:
        return Path(str(self.screen.__file__))

    @property
    def url_path(self) -> str:
        return self.name.replace("_", "-")


PAGES = (
    Page("Finance", "Charges", charges, POOL, ":material/payments:"),
    Page("Finance", "Budgets", budgets, POOL, ":material/savings:"),
    Page("Finance", "Invoices", invoices, POOL, ":material/receipt_long:"),
    Page("Platform ops", "Capacity", capacity, POOL, ":material/grid_view:"),
    Page("Platform ops", "MIG layout", mig, POOL, ":material/view_module:"),
    Page("Platform ops", "Allocated idle", idle, POOL, ":material/hourglass_empty:"),
    Page("Platform ops", "Right-sizing", rightsizing, POOL, ":material/compress:"),
    Page("Platform ops", "Data quality", data_quality, POOL, ":material/fact_check:"),
    Page("Tenants", "Usage", usage, POOL, ":material/monitoring:"),
    # A tenant's pages speak to the tenant.
    Page(TENANT_SECTION, "Usage", usage, TENANT, ":material/monitoring:"),
    Page(TENANT_SECTION, "What you owe", charges, TENANT, ":material/payments:"),
    Page(TENANT_SECTION, "Your budget", budgets, TENANT, ":material/savings:"),
    Page(TENANT_SECTION, "Invoices", invoices, TENANT, ":material/receipt_long:"),
    Page(TENANT_SECTION, "Allocated idle", idle, TENANT, ":material/hourglass_empty:"),
    Page(TENANT_SECTION, "Right-sizing", rightsizing, TENANT, ":material/compress:"),
)


def pages(role: Role) -> list[Page]:
    """The pages of a role's navigation, in order (the first is the one a viewer opens on)."""
    return [page for page in PAGES if role in page.roles]


def sections(viewer: Viewer) -> dict[str, list[st.Page]]:
    """The viewer's navigation, as st.navigation takes it: the pages of its role by section."""
    shown: dict[str, list[st.Page]] = {}
    for page in pages(viewer.role):
        shown.setdefault(page.section.format(tenant=viewer.tenant), []).append(
            st.Page(page.script, title=page.title, icon=page.icon, url_path=page.url_path)
        )
    return shown
