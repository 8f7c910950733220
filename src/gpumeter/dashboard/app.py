"""gpumeter dashboard: `gpumeter dashboard` (`streamlit run` of this file; `make dashboard` runs it on the demo's data).

Who is reading decides what is shown: with OIDC configured (`[auth]` in .streamlit/secrets.toml) the login's
email or groups map to a role through the config's `dashboard.roles`; without it the app runs in local mode
(a banner says so) as finance, or as GPUMETER_DASHBOARD_VIEWER says. docs/dashboard.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from gpumeter.billing.invoices import Period
from gpumeter.config import CONFIG_ENV, DEMO_DIR, Config, ConfigError, load_config
from gpumeter.dashboard import navigation, warmup
from gpumeter.dashboard.common import Context, remember
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.filters import Filters
from gpumeter.views.identity import Viewer, ViewerError, local_viewer, viewer_for_identity
from gpumeter.views.scoped import Views


def _config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEMO_DIR / "config.yaml")


def _config(path: Path) -> Config:
    if not path.exists():
        st.error(
            f"No gpumeter config at {path}. Run `make demo` to meter the simulated factory, or set "
            f"{CONFIG_ENV}=path/to/config.yaml."
        )
        st.stop()
    try:
        return load_config(path)
    except ConfigError as exc:
        st.error(f"The config cannot be used:\n\n```\n{exc}\n```")
        st.stop()
    raise AssertionError("unreachable")


def _auth_configured() -> bool:
    try:
        return "auth" in st.secrets
    except FileNotFoundError:
        return False


def _viewer(config: Config) -> Viewer:
    if _auth_configured():
        if not st.user.get("is_logged_in", False):
            st.title("gpumeter")
            st.write("Sign in to see GPU metering and chargeback.")
            st.button("Sign in", on_click=st.login, type="primary")
            st.stop()
        claims = st.user.to_dict()
        email = claims.get(config.dashboard.email_claim)
        viewer = viewer_for_identity(
            config, str(email) if email else None, claims.get(config.dashboard.group_claim), str(email or "")
        )
        if viewer is None:
            st.error(
                f"{email or 'This account'} has no gpumeter dashboard role. Ask the platform team to add your "
                "email or group under `dashboard.roles` in the gpumeter config."
            )
            st.button("Sign out", on_click=st.logout)
            st.stop()
        assert viewer is not None
        return viewer
    try:
        viewer = local_viewer(config)
    except ViewerError as exc:
        st.error(str(exc))
        st.stop()
        raise AssertionError("unreachable") from exc
    st.warning(
        f"**Local mode** — no login is configured, so anyone who can open this page sees it as "
        f"**{viewer.label}**. Configure OIDC before sharing it (docs/dashboard.md).",
        icon=":material/lock_open:",
    )
    return viewer


def _filters(views: Views, viewer: Viewer) -> Filters | None:
    options = views.options(viewer)
    periods = warmup.periods(views, options)  # what the warm-up reads first is what a view opens on
    with st.sidebar:
        st.caption(f"Viewing as **{viewer.label}** ({viewer.identity})")
        if _auth_configured() and st.user.get("is_logged_in", False):
            st.button("Sign out", on_click=st.logout)
        if not periods:
            st.info("Nothing metered yet: run the pipeline (`gpumeter run`, or `make demo`).")
            return None
        period = st.selectbox("Period", periods, key="period")
        clusters = st.multiselect("Cluster", options.clusters, key="clusters", placeholder="All clusters")
        tenants: list[str] = []
        if viewer.sees_all_tenants:
            tenants = st.multiselect("Tenant", options.tenants, key="tenants", placeholder="All tenants")
        models = st.multiselect("GPU model", options.gpu_models, key="models", placeholder="All models")
    return Filters(Period.parse(period), tuple(clusters), tuple(tenants), tuple(models))


def main() -> None:
    st.set_page_config(page_title="gpumeter", page_icon=":material/memory:", layout="wide")
    path = _config_path()
    config = _config(path)
    # Every page's reads made in the background, so that no viewer waits for a first read (warmup.py).
    warmup.start(path, _auth_configured())
    viewer = _viewer(config)
    # One page view: cached reads (views/cache.py), each table listed once for the run.
    views = Views(Warehouse.of(config.warehouse), config, snapshot=True)
    filters = _filters(views, viewer)
    if filters is None:
        st.stop()
    # The pages get the config as the viewer may read it: a tenant's holds no other tenant (views/scoped.py).
    remember(Context(views.config_for(viewer), views, viewer, filters))
    st.navigation(navigation.sections(viewer)).run()  # the pages of the viewer's role (navigation.py)


main()
