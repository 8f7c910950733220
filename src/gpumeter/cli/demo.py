"""`gpumeter demo` and `gpumeter simulate`: the embedded simulated AI factory (gpumeter_sim), metered by the same
Dagster jobs a deployment runs, from Parquet or through a real local Prometheus."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import yaml
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gpumeter.billing.alerts import due_alerts
from gpumeter.cli import render
from gpumeter.cli.commands import CliError, copy_invoices, meter_and_invoice
from gpumeter.cli.render import console
from gpumeter.config import EXAMPLE_CONFIG, Alerts, Config, PrometheusSource, load_config, parse_config
from gpumeter.storage import paths
from gpumeter.storage.warehouse import Warehouse

# `demo --prometheus`: promtool's backfill is the long step (about this many seconds per simulated day of the
# demo factory here), hence one day unless asked.
DEMO_PROMETHEUS_DAYS = 1
BACKFILL_SECONDS_PER_DEMO_DAY = 15


def cmd_simulate(args: argparse.Namespace) -> int:
    import gpumeter_sim as simulator

    spec = simulator.demo_spec()
    overrides = {
        k: v for k, v in (("start", args.start), ("days", args.days), ("seed", args.seed)) if v is not None
    }
    spec = simulator.FactorySpec(**{**spec.__dict__, **overrides})
    out = Path(args.out)
    with render.progress() as progress:
        task = progress.add_task("simulating days", total=spec.days)
        simulator.write_parquet(spec, out, progress=lambda _day: progress.advance(task))
    console.print(f"raw samples (Parquet) in {out}")
    if args.openmetrics:
        simulator.write_openmetrics(spec, Path(args.openmetrics))
        console.print(f"OpenMetrics for promtool backfill in {args.openmetrics}")
    return 0


def _print_factory(spec: object) -> None:
    """What the simulated factory contains: its GPUs and, one line each, how its pool changes."""
    import gpumeter_sim as simulator

    assert isinstance(spec, simulator.FactorySpec)
    layout = simulator.factory_layout(spec)
    models = sorted({simulator.MODELS[g.model].model_name for g in layout.gpus})
    present = [
        ("MIG", any(g.instances for g in layout.gpus)),
        ("time-slicing", any(g.timesliced for g in layout.gpus)),
        ("DRA", any(g.dra for g in layout.gpus)),
        ("KAI Scheduler sharing", any(n.kai for n in layout.nodes)),
        ("a cordoned node", any(n.cordoned for n in layout.nodes)),
        ("an exporter outage", layout.outage is not None),
        ("an XID error", layout.xid is not None),
        ("an energy counter reset", layout.reset is not None),
    ]
    console.print(
        f"  {len(layout.gpus)} GPUs on {len(layout.nodes)} nodes ({', '.join(models)}): "
        + ", ".join(["whole GPUs", *(name for name, found in present if found)])
    )
    for line in simulator.changing_pool(spec, openmetrics=False):
        console.print(f"  {escape(line)}")


def demo_config(out: Path) -> Config:
    """The example config for a demo in `out`: its source and warehouse are `out`/source and `out`/warehouse."""
    return parse_config(
        EXAMPLE_CONFIG.read_text(encoding="utf-8"), str(EXAMPLE_CONFIG), base_dir=out.resolve()
    )


def write_config(path: Path, config: Config, header: str) -> Path:
    """A config written from its pydantic model (what was set, nothing defaulted), checked to read back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(config.model_dump(mode="json", exclude_unset=True), sort_keys=False)
    path.write_text(
        f"{header}\n# Every field: docs/config.md; the example with comments: `gpumeter config example`.\n{body}"
    )
    load_config(path)
    return path


def write_demo_config(out: Path) -> Path:
    """`out`/config.yaml: the example config for the demo's source and warehouse in `out`."""
    return write_config(
        out / "config.yaml", demo_config(out), "# The demo's config, written by `gpumeter demo`."
    )


def cmd_demo(args: argparse.Namespace) -> int:
    import gpumeter_sim as simulator

    out = Path(args.out)
    if getattr(args, "prometheus", False):
        days = args.days or DEMO_PROMETHEUS_DAYS
        return demo_prometheus(out, simulator.FactorySpec(**{**simulator.demo_spec().__dict__, "days": days}))
    spec = simulator.demo_spec()
    if args.days:
        spec = simulator.FactorySpec(**{**spec.__dict__, "days": args.days})
    _use_demo_dagster_home(out)
    console.print(
        f"[bold]gpumeter demo[/]: a simulated AI factory, {spec.days} days from {spec.start}, in {out}"
    )
    _print_factory(spec)
    with render.progress() as progress:
        task = progress.add_task("simulating days", total=spec.days)
        simulator.write_parquet(spec, out / "source", progress=lambda _day: progress.advance(task))
    config_path = write_demo_config(out)
    days = [spec.start + timedelta(days=i) for i in range(spec.days)]
    ok = meter_and_invoice(config_path, days)
    _print_budget_alerts(config_path)
    invoices = copy_invoices(config_path, days, out)
    console.print(
        f"\nWritten: invoices in {invoices}/, marts in {out / 'warehouse'}/marts/, config {config_path}\n"
        f"Next: `gpumeter dashboard --config {config_path}` opens the dashboard; "
        f"`DAGSTER_HOME={os.environ.get('DAGSTER_HOME', out / 'dagster')} GPUMETER_CONFIG={config_path} dagster dev -m "
        "gpumeter.pipelines.definitions` shows the lineage and these runs; "
        f"`gpumeter run --config {config_path} --start {days[0]} --end {days[-1]}` re-runs the days."
    )
    return 0 if ok else 1


def write_prometheus_demo_config(
    out: Path,
    url: str,
    *,
    claims_file: Path,
    slices_file: Path,
    scrape_interval_s: int | None = None,
) -> Path:
    """The demo config (same tenants, rate card, warehouse under `out`) with its cluster's source a
    `kind: prometheus` source reading `url`, and the DRA objects from files (they are Kubernetes objects, not
    metrics). `scrape_interval_s` replaces Δ when the simulated factory was scraped at another interval than
    the example's."""
    example = demo_config(out)
    cluster = example.clusters[0]
    source = PrometheusSource(
        kind="prometheus",
        url=url,
        selector=f"cluster={json.dumps(cluster.name)}",
        claims_file=str(Path(claims_file).resolve()),
        slices_file=str(Path(slices_file).resolve()),
    )
    update: dict[str, object] = {"clusters": [cluster.model_copy(update={"source": source})]}
    if scrape_interval_s is not None:
        update["scrape_interval_seconds"] = int(scrape_interval_s)
    return write_config(
        out / "config.yaml",
        example.model_copy(update=update),
        "# The demo's config with a `kind: prometheus` source, written by `gpumeter demo --prometheus`.",
    )


def write_demo_k8s_objects(
    folder: Path, claims_docs: Sequence[dict[str, object]], slices_doc: dict[str, object]
) -> tuple[Path, Path]:
    """One `kubectl get resourceclaims -A -o json` style list holding the claims of every simulated day (each
    claim once, by uid), and the ResourceSlices: what a `kind: prometheus` source reads from files."""
    seen: set[str] = set()
    items: list[object] = []
    for doc in claims_docs:
        for item in doc.get("items", []) or []:  # type: ignore[union-attr]
            meta = item.get("metadata", {}) if isinstance(item, dict) else {}
            key = json.dumps([meta.get("uid"), meta.get("namespace"), meta.get("name")])
            if key not in seen:
                seen.add(key)
                items.append(item)
    envelope = dict(claims_docs[0]) if claims_docs else {"apiVersion": "v1", "kind": "List"}
    envelope["items"] = items
    folder.mkdir(parents=True, exist_ok=True)
    claims_path = folder / paths.snapshot_name(paths.RESOURCE_CLAIMS)
    slices_path = folder / paths.snapshot_name(paths.RESOURCE_SLICES)
    claims_path.write_text(json.dumps(envelope, indent=1) + "\n", encoding="utf-8")
    slices_path.write_text(json.dumps(slices_doc, indent=1) + "\n", encoding="utf-8")
    return claims_path, slices_path


def _print_budget_alerts(config_path: Path) -> None:
    """The budget alerts the budget_alerts sensor would send for the demo's month (the config's `alerts`, else
    the default thresholds), from the same evaluation."""
    config = load_config(config_path)
    settings = config.alerts or Alerts()
    alerts = due_alerts(Warehouse.of(config.warehouse), config, settings)
    render.budget_alerts(alerts, config.alerts.webhook_url_env if config.alerts else None)


def _use_demo_dagster_home(out: Path) -> None:
    if "DAGSTER_HOME" not in os.environ:  # record the demo's runs where `dagster dev` shows them
        home = (out / "dagster").resolve()
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "dagster.yaml").exists():
            (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
        os.environ["DAGSTER_HOME"] = str(home)


def _backfill_estimate_s(spec: object) -> float:
    """promtool's time, scaled from the demo factory's ~15 s per day by samples (GPUs x scrapes)."""
    import gpumeter_sim as simulator

    demo = simulator.demo_spec()
    gpus = len(simulator.factory_layout(spec).gpus)  # type: ignore[arg-type]
    demo_gpus = len(simulator.factory_layout(demo).gpus)
    scale = (gpus / demo_gpus) * (demo.scrape_interval_s / spec.scrape_interval_s)  # type: ignore[attr-defined]
    return BACKFILL_SECONDS_PER_DEMO_DAY * spec.days * scale  # type: ignore[attr-defined]


def demo_prometheus(out: Path, spec: object) -> int:
    """`gpumeter demo --prometheus`: the demo, with the raw samples read back from a real Prometheus.

    Simulate `spec`, write it as OpenMetrics, backfill it with promtool into `out/prometheus-tsdb`, serve
    that on 127.0.0.1 (gpumeter_sim.promserver), write `out/config.yaml` with a `kind: prometheus` source at the
    server's URL, run the same Dagster jobs as `gpumeter demo` and print the same summary. The server is
    stopped when this returns, whether it succeeds or fails."""
    import gpumeter_sim as simulator
    from gpumeter_sim import openmetrics
    from gpumeter_sim.promserver import (
        PrometheusNotInstalled,
        PrometheusServer,
        PrometheusServerError,
        backfill,
        find_binary,
    )

    assert isinstance(spec, simulator.FactorySpec)
    try:  # before any work: say what to install
        find_binary("promtool")
        find_binary("prometheus")
    except PrometheusNotInstalled as exc:
        raise CliError(str(exc)) from None
    _use_demo_dagster_home(out)
    console.print(
        f"[bold]gpumeter demo --prometheus[/]: a simulated AI factory, {spec.days} day(s) from {spec.start}, "
        f"in {out}, metered through a local Prometheus"
    )
    _print_factory(spec)
    om_path = out / "openmetrics" / "factory.om"
    claims_docs: list[dict[str, object]] = []
    slices_doc: dict[str, object] = {}
    with render.progress() as progress:
        task = progress.add_task("writing OpenMetrics", total=spec.days)

        def days_tables() -> object:
            nonlocal slices_doc
            for sim in simulator.iter_days(
                spec
            ):  # what simulator.write_openmetrics writes, with the DRA objects
                claims_docs.append(sim.resource_claims)
                slices_doc = sim.resource_slices
                yield sim.dcgm, sim.kube
                progress.advance(task)

        openmetrics.write_openmetrics(  # type: ignore[arg-type]
            days_tables(), om_path, replicas=simulator.ha_replicas(spec)
        )
    claims_file, slices_file = write_demo_k8s_objects(out / paths.K8S, claims_docs, slices_doc)

    tsdb = out / "prometheus-tsdb"
    if tsdb.exists():  # a re-run starts from an empty TSDB, not from a second copy of the blocks
        shutil.rmtree(tsdb)
    size_mb = om_path.stat().st_size / 1e6
    console.print(
        f"promtool backfill of {om_path} ({size_mb:,.0f} MB) into {tsdb}: one long step that takes a while, "
        f"expect ~{_backfill_estimate_s(spec):,.0f} s (about 15 s per demo day, more on a slow machine)..."
    )
    started = time.monotonic()
    try:
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
        ) as bar:
            bar.add_task("promtool backfill", total=None)
            backfill(om_path, tsdb, timeout=max(600.0, 5 * _backfill_estimate_s(spec)))
    except PrometheusServerError as exc:
        raise CliError(str(exc)) from None
    console.print(f"promtool backfill done in {time.monotonic() - started:,.0f} s")

    days = list(spec.day_list)
    try:
        with PrometheusServer(tsdb) as prom:
            console.print(f"Prometheus serving {tsdb} on {prom.url} (stopped when the demo ends)")
            config_path = write_prometheus_demo_config(
                out,
                prom.url,
                claims_file=claims_file,
                slices_file=slices_file,
                scrape_interval_s=spec.scrape_interval_s,
            )
            ok = meter_and_invoice(config_path, days)
            _print_budget_alerts(config_path)
            url = prom.url
    except PrometheusServerError as exc:
        raise CliError(str(exc)) from None
    invoices = copy_invoices(config_path, days, out)
    console.print(
        f"\nWritten: invoices in {invoices}/, marts in {out / 'warehouse'}/marts/, TSDB in {tsdb}/, "
        f"config {config_path}\n"
        f"Prometheus on {url} is stopped; the config's source points at it, so re-run with "
        f"`gpumeter demo --prometheus --out {out}` (or `make demo-prometheus`)."
    )
    return 0 if ok else 1
