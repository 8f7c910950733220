"""The `gpumeter` command line. Metering commands run the Dagster job the schedule runs (gpumeter.pipelines.launch),
imported lazily so that the domain packages themselves carries no Dagster import."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Sequence
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from gpumeter.billing.invoices import InvoiceError, Period
from gpumeter.config import (
    CONFIG_ENV,
    DEMO_DIR,
    EXAMPLE_CONFIG,
    ConfigError,
    PrometheusSource,
    config_schema,
    config_warnings,
    load_config,
)
from gpumeter.storage import paths

# `demo --prometheus`: promtool takes about 11 s per simulated day of the demo factory (30 s scrape,
# ~495 MB of OpenMetrics a day; 11.4 s measured on 2 CPUs with day-long blocks, promserver.backfill).
DEMO_PROMETHEUS_DAYS = 1
BACKFILL_SECONDS_PER_DEMO_DAY = 15

# Piped output (CI logs, files) gets a width that fits the tables instead of rich's 80 columns.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)
err = Console(stderr=True, highlight=False)


class CliError(Exception):
    """An error to print as one line (plus what to do) and exit 2."""


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def _period(text: str) -> str:
    try:
        return str(Period.parse(text))
    except InvoiceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _days(start: date, end: date) -> list[date]:
    if end < start:
        raise CliError(f"--end {end} is before --start {start}")
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def _money(amount: object, currency: str) -> str:
    return f"{float(amount):,.2f} {currency}"


# --- commands --------------------------------------------------------------------------------


def cmd_config_check(args: argparse.Namespace) -> int:
    config = load_config(args.file)
    problems = config_warnings(config)
    for place, message in problems:
        console.print(f"[yellow]warning[/] {escape(f'{args.file}: {place}: {message}')}")
    console.print(
        f"[green]ok[/] {args.file}: {len(config.clusters)} cluster(s), {len(config.tenants)} tenant(s), "
        f"{len(config.rate_card.models)} priced GPU model(s), {len(problems)} warning(s)"
    )
    return 0


def cmd_config_schema(_: argparse.Namespace) -> int:
    sys.stdout.write(json.dumps(config_schema(), indent=2) + "\n")
    return 0


def cmd_config_example(args: argparse.Namespace) -> int:
    if args.path:
        sys.stdout.write(f"{EXAMPLE_CONFIG}\n")
    else:
        sys.stdout.write(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Run the Streamlit dashboard (its script ships in the package) on a config's warehouse."""
    import subprocess

    from gpumeter.dashboard import APP

    config_path = Path(args.config) if args.config else DEMO_DIR / "config.yaml"
    load_config(config_path)  # every problem now, not in the browser
    env = {**os.environ, CONFIG_ENV: str(config_path.resolve())}
    command = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", args.host]
    command += ["--server.port", str(args.port), "--browser.gatherUsageStats", "false"]
    console.print(f"gpumeter dashboard on http://{args.host}:{args.port} for {config_path} (Ctrl-C stops it)")
    return subprocess.call(command, env=env)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def _meter(config_path: Path, days: list[date], clusters: list[str] | None = None) -> list[str]:
    """Run the meter_day job per (cluster, day) partition; returns one line per failed check, naming the
    partitions it failed on."""
    from gpumeter.config import select_clusters
    from gpumeter.pipelines.launch import meter_days  # lazy: Dagster loads only for commands that run jobs

    names = select_clusters(load_config(config_path), clusters)
    failed: dict[str, list[str]] = {}
    with _progress() as progress:
        task = progress.add_task(
            f"metering {len(names)} cluster(s) x {len(days)} day(s)", total=len(days) * len(names)
        )

        def done(outcome: object) -> None:
            for check in getattr(outcome, "failed_checks", []):
                where = f"{outcome.cluster} {outcome.day}"  # type: ignore[attr-defined]
                failed.setdefault(check, []).append(where)
            progress.advance(task)

        meter_days(str(config_path), days, on_day=done, clusters=names)
    return [
        f"{check} on {len(on)} (cluster, day) partition(s): "
        + (", ".join(on) if len(on) <= 4 else f"{on[0]} .. {on[-1]}")
        for check, on in failed.items()
    ]


def _invoice(config_path: Path, period: str) -> object:
    from gpumeter.pipelines.launch import invoice_month

    return invoice_month(str(config_path), period)


def print_summary(config_path: Path, first: date, last: date) -> bool:
    from gpumeter.billing.invoices import reconcile
    from gpumeter.billing.month import read_mart
    from gpumeter.billing.periods import invoice_lines_path
    from gpumeter.storage.warehouse import Warehouse
    from gpumeter.views.summary import pool_summary

    config = load_config(config_path)
    warehouse = Warehouse.of(config.warehouse)
    summary = pool_summary(warehouse, first, last)
    cur = config.currency
    console.print(
        f"\n[bold]{config.pool}[/]: {summary.days} day(s) {first} .. {last}, "
        f"{summary.observed_gpu_hours:,.1f} observed GPU-hours, "
        f"{summary.unobserved_gpu_hours:,.1f} unobserved (not billed, R4)"
    )
    charges = Table(title="Charges (R9)", title_justify="left")
    # Bucket names must stay whole: __unallocated__ is a line finance looks for.
    for column, justify in (
        ("tenant", "left"),
        ("cost center", "left"),
        ("GPU-hours", "right"),
        ("efficiency", "right"),
        ("amount", "right"),
        ("share", "right"),
    ):
        charges.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for charge in summary.charges:
        share = float(charge.amount / summary.pool_cost) if summary.pool_cost else 0.0
        eff = (
            f"{charge.efficiency:.0%}"
            if charge.efficiency is not None and charge.tenant != "__idle__"
            else ""
        )
        charges.add_row(
            charge.tenant,
            charge.cost_center or "",
            f"{charge.gpu_hours:,.1f}",
            eff,
            _money(charge.amount, cur),
            f"{share:.1%}",
        )
    charges.add_section()
    charges.add_row(
        "pool cost", "", f"{summary.observed_gpu_hours:,.1f}", "", _money(summary.pool_cost, cur), "100%"
    )
    console.print(charges)

    capacity = Table(title="Where capacity went (R11)", title_justify="left")
    capacity.add_column("category")
    capacity.add_column("GPU-hours", justify="right")
    capacity.add_column("% of capacity", justify="right")
    capacity.add_column("stranded", justify="center")
    total = sum(summary.capacity_hours.values()) or 1.0
    for category, hours in summary.capacity_hours.items():
        capacity.add_row(
            category, f"{hours:,.1f}", f"{hours / total:.1%}", "" if category == "allocated_active" else "yes"
        )
    capacity.add_section()
    capacity.add_row(
        "stranded", f"{summary.stranded_hours:,.1f}", f"{summary.stranded_hours / total:.1%}", ""
    )
    console.print(capacity)

    ok = summary.charged == summary.pool_cost
    console.print(
        f"R13 conservation: charged {_money(summary.charged, cur)} = pool cost {_money(summary.pool_cost, cur)}: "
        + ("[green]exact[/]" if ok else f"[red]off by {summary.charged - summary.pool_cost}[/]")
    )
    for period in sorted({str(Period.of(first + timedelta(days=i))) for i in range((last - first).days + 1)}):
        path = invoice_lines_path(warehouse, period)
        if not path.exists():
            continue

        from gpumeter.billing.periods import is_closed

        if is_closed(warehouse, period):  # R16: late data for it is billed in the next open period
            console.print(f"Invoices {_status_line(warehouse, period)}")
            continue
        from gpumeter.billing.periods import read_lines

        lines = read_lines(path)
        pool = read_mart(warehouse, "pool_daily_cost", Period.parse(period).days())
        if pool is None:
            continue
        # Adjustment lines carry the change in pool cost of the closed periods they correct (R16).
        adjusted = [r["amount_unrounded"] for r in lines.to_pylist() if r["corrects_period"]]
        rec = reconcile(lines, pool, Period.parse(period), config.minor_unit, sum(adjusted, Decimal(0)))
        ok = ok and rec.ok
        console.print(
            f"Invoices {period}: {rec.line_count} lines"
            + (f" ({len(adjusted)} adjustments of closed periods)" if adjusted else "")
            + f", {_money(rec.lines_rounded, cur)} rounded against pool cost {_money(rec.pool_cost, cur)}: "
            + ("[green]reconciled[/]" if rec.ok else "[red]do not reconcile[/]")
        )
    return ok


def meter_and_invoice(config_path: Path, days: list[date], clusters: list[str] | None = None) -> bool:
    """The meter_day job for each (cluster, day) partition (default: every cluster of the config), the
    invoice_month job for each month touched, then the summary."""
    warned = _meter(config_path, days, clusters)
    for period in sorted({str(Period.of(d)) for d in days}):
        _invoice(config_path, period)
    for line in warned:
        console.print(f"[yellow]check[/] {escape(line)}")
    return print_summary(config_path, days[0], days[-1])


def copy_invoices(config_path: Path, days: list[date], out: Path) -> Path:
    """The months' invoice CSVs, copied from the warehouse exports to `out/invoices`."""
    from gpumeter.billing.periods import exports_dir
    from gpumeter.storage.warehouse import Warehouse

    warehouse = Warehouse.of(load_config(config_path).warehouse)
    invoices = out / "invoices"
    invoices.mkdir(parents=True, exist_ok=True)
    for period in sorted({str(Period.of(d)) for d in days}):
        for path in sorted(exports_dir(warehouse, period).glob("*"), key=str):
            if path.suffix in (".csv", ".html") and not path.name.startswith("."):
                (invoices / path.name).write_bytes(path.read_bytes())  # the warehouse may be an object store
    return invoices


def cmd_run(args: argparse.Namespace) -> int:
    config_path = Path(args.config)
    load_config(config_path)  # fail fast, with every problem, before Dagster starts
    return 0 if meter_and_invoice(config_path, _days(args.start, args.end), args.cluster) else 1


def _copy_exports(source: Path, out: Path, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table = Table(title=title, title_justify="left")
    table.add_column("file", no_wrap=True)
    table.add_column("kind")
    table.add_column("rows", justify="right")
    for path in sorted(source.glob("*"), key=str):
        if path.name.startswith(".") or not path.is_file():
            continue
        (out / path.name).write_bytes(path.read_bytes())  # the warehouse may be an object store
        rows = str(sum(1 for _ in path.open(encoding="utf-8")) - 1) if path.suffix == ".csv" else ""
        table.add_row(str(out / path.name), paths.export_kind(path.name), rows)
    console.print(table)


def _status_line(warehouse: object, period: str) -> str:
    from gpumeter.billing.periods import read_manifest

    manifest = read_manifest(warehouse, period)  # type: ignore[arg-type]
    if not manifest:
        return f"{period}: [yellow]draft[/] (close it with `gpumeter close --period {period}`)"
    return (
        f"{period}: [green]closed[/] {manifest['closed_at']} by {escape(str(manifest['closed_by']))}, "
        f"{manifest['line_count']} lines, total {manifest['total']} {manifest['currency']}, "
        f"sha256 {manifest['content_hash']}"
    )


def cmd_invoices(args: argparse.Namespace) -> int:
    from gpumeter.billing.periods import exports_dir
    from gpumeter.storage.warehouse import Warehouse

    config_path = Path(args.config)
    config = load_config(config_path)
    warehouse = Warehouse.of(config.warehouse)
    _invoice(config_path, args.period)  # a closed period is left as closed (R16)
    _copy_exports(exports_dir(warehouse, args.period), Path(args.out), f"Invoice files {args.period}")
    console.print(_status_line(warehouse, args.period))
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    from gpumeter.billing.periods import close_period, is_closed
    from gpumeter.storage.warehouse import Warehouse

    config_path = Path(args.config)
    config = load_config(config_path)
    warehouse = Warehouse.of(config.warehouse)
    if not is_closed(warehouse, args.period):
        _invoice(config_path, args.period)  # close what the stored days say now
    manifest = close_period(config, warehouse, Period.parse(args.period), by=args.by, reason=args.reason)
    table = Table(title=f"Closed {args.period}", title_justify="left")
    table.add_column("invoice", no_wrap=True)
    for invoice in manifest["invoice_ids"]:
        table.add_row(invoice)
    console.print(table)
    console.print(_status_line(warehouse, args.period))
    console.print(
        "Its invoices never change now; data arriving later for it is billed in the next open period as "
        "`adjustment` lines (R16)."
    )
    return 0


def cmd_reopen(args: argparse.Namespace) -> int:
    from gpumeter.billing.periods import reopen_period
    from gpumeter.storage.warehouse import Warehouse

    config = load_config(Path(args.config))
    event = reopen_period(
        Warehouse.of(config.warehouse), Period.parse(args.period), reason=args.reason, by=args.by
    )
    console.print(
        f"{args.period}: [yellow]reopened[/] {event['at']} by {escape(event['by'])}: {escape(event['reason'])}\n"
        f"Run `gpumeter invoices --period {args.period}` to roll it up again, then close it."
    )
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from gpumeter_sim import factory as simulator

    spec = simulator.demo_spec()
    overrides = {
        k: v for k, v in (("start", args.start), ("days", args.days), ("seed", args.seed)) if v is not None
    }
    spec = simulator.FactorySpec(**{**spec.__dict__, **overrides})
    out = Path(args.out)
    with _progress() as progress:
        task = progress.add_task("simulating days", total=spec.days)
        simulator.write_parquet(spec, out, progress=lambda _day: progress.advance(task))
    console.print(f"raw samples (Parquet) in {out}")
    if args.openmetrics:
        simulator.write_openmetrics(spec, Path(args.openmetrics))
        console.print(f"OpenMetrics for promtool backfill in {args.openmetrics}")
    return 0


def _print_factory(spec: object) -> None:
    """What the simulated factory contains: its GPUs and, one line each, how its pool changes."""
    from gpumeter_sim import factory as simulator

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


def write_demo_config(out: Path) -> Path:
    """The example config, written beside the demo's source/ and warehouse/ (its relative paths point there)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(EXAMPLE_CONFIG.read_text(encoding="utf-8"), encoding="utf-8")
    return path


def cmd_demo(args: argparse.Namespace) -> int:
    from gpumeter_sim import factory as simulator

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
    with _progress() as progress:
        task = progress.add_task("simulating days", total=spec.days)
        simulator.write_parquet(spec, out / "source", progress=lambda _day: progress.advance(task))
    config_path = write_demo_config(out)
    days = [spec.start + timedelta(days=i) for i in range(spec.days)]
    ok = meter_and_invoice(config_path, days)
    invoices = copy_invoices(config_path, days, out)
    console.print(
        f"\nWritten: invoices in {invoices}/, marts in {out / 'warehouse'}/marts/, config {config_path}\n"
        f"Next: `make dagster-ui` shows the lineage and these runs; "
        f"`gpumeter run --config {config_path} --start {days[0]} --end {days[-1]}` re-runs the days."
    )
    return 0 if ok else 1


# --- demo --prometheus -----------------------------------------------------------------------


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
    path = write_demo_config(out)
    example = load_config(path)
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
    config = example.model_copy(update=update)
    header = "# The demo config with a `kind: prometheus` source: written by `gpumeter demo --prometheus`.\n"
    path.write_text(
        header + yaml.safe_dump(config.model_dump(mode="json", exclude_unset=True), sort_keys=False),
        encoding="utf-8",
    )
    load_config(path)  # what was written reads back
    return path


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


def _use_demo_dagster_home(out: Path) -> None:
    if "DAGSTER_HOME" not in os.environ:  # record the demo's runs where `make dagster-ui` shows them
        home = (out / "dagster").resolve()
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "dagster.yaml").exists():
            (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
        os.environ["DAGSTER_HOME"] = str(home)


def _backfill_estimate_s(spec: object) -> float:
    """promtool's time, scaled from the demo factory's ~15 s per day by samples (GPUs x scrapes)."""
    from gpumeter_sim import factory as simulator

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
    from gpumeter_sim import factory as simulator
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
    with _progress() as progress:
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


# --- parser ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpumeter",
        description="GPU metering, chargeback and utilization analytics for shared Kubernetes GPU pools.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="simulate a small AI factory, meter it with the Dagster job, invoice it; its pool changes during "
        "the second day (a MIG re-partition, a deleted and recreated pod, a short DRA job, a relabel, a "
        "re-published DRA slice)",
    )
    demo.add_argument("--out", default=str(DEMO_DIR), help="working directory (default: %(default)s)")
    demo.add_argument(
        "--days",
        type=int,
        help=f"days to simulate (default: 7; with --prometheus: {DEMO_PROMETHEUS_DAYS}, because promtool takes "
        "about 15 s or more to backfill each simulated day)",
    )
    demo.add_argument(
        "--prometheus",
        action="store_true",
        help="meter through a real, local Prometheus: write OpenMetrics, backfill it with promtool into "
        "OUT/prometheus-tsdb, serve it on 127.0.0.1 and read it with a `kind: prometheus` source "
        "(needs the Debian package prometheus)",
    )
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser(
        "run",
        help="meter days, one run per (cluster, day) (the Dagster job the schedule runs), and invoice their months",
    )
    run.add_argument("--config", required=True, help="gpumeter YAML config")
    run.add_argument("--start", required=True, type=_date, help="first day, YYYY-MM-DD (UTC)")
    run.add_argument("--end", required=True, type=_date, help="last day, inclusive, YYYY-MM-DD (UTC)")
    run.add_argument(
        "--cluster",
        action="append",
        metavar="NAME",
        help="meter this cluster of the config only; repeat for several (default: every cluster). Each "
        "(cluster, day) is its own run of the job",
    )
    run.set_defaults(func=cmd_run)

    inv = sub.add_parser(
        "invoices",
        help="roll a month up (the invoice_month Dagster job) and write its exports: invoice-lines CSVs (all "
        "tenants and per tenant), the FOCUS 1.2 CSV and one HTML invoice per tenant; a closed month's files "
        "are copied as closed",
    )
    inv.add_argument("--config", required=True, help="gpumeter YAML config")
    inv.add_argument("--period", required=True, type=_period, help="YYYY-MM")
    inv.add_argument("--out", required=True, help="directory the export files are copied to")
    inv.set_defaults(func=cmd_invoices)

    close = sub.add_parser(
        "close",
        help="close a month (R16): roll it up once more, then freeze its invoices with a content hash; "
        "late data for it is billed in the next open month as adjustment lines",
    )
    close.add_argument("--config", required=True, help="gpumeter YAML config")
    close.add_argument("--period", required=True, type=_period, help="YYYY-MM")
    close.add_argument("--by", help="who closes it (default: the login name); recorded in the audit log")
    close.add_argument("--reason", help="why, recorded in the manifest and the audit log")
    close.set_defaults(func=cmd_close)

    reopen = sub.add_parser(
        "reopen", help="reopen a closed month (needs --reason); recorded in the audit log"
    )
    reopen.add_argument("--config", required=True, help="gpumeter YAML config")
    reopen.add_argument("--period", required=True, type=_period, help="YYYY-MM")
    reopen.add_argument("--reason", required=True, help="why it is reopened (required)")
    reopen.add_argument("--by", help="who reopens it (default: the login name)")
    reopen.set_defaults(func=cmd_reopen)

    sim = sub.add_parser(
        "simulate", help="write the simulated AI factory's raw samples (Parquet, OpenMetrics)"
    )
    sim.add_argument("--out", required=True, help="directory for raw Parquet (a `parquet` source)")
    sim.add_argument("--start", type=_date, help="first day (default 2026-11-01)")
    sim.add_argument("--days", type=int, help="number of days (default 7)")
    sim.add_argument("--seed", type=int, help="random seed (default 7)")
    sim.add_argument("--openmetrics", help="also write OpenMetrics text here, for promtool backfill")
    sim.set_defaults(func=cmd_simulate)

    cfg = sub.add_parser("config", help="check a config file or print its JSON Schema")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = cfg_sub.add_parser("check", help="validate FILE; every problem is reported with its place")
    check.add_argument("file")
    check.set_defaults(func=cmd_config_check)
    schema = cfg_sub.add_parser("schema", help="print the config's JSON Schema")
    schema.set_defaults(func=cmd_config_schema)
    example = cfg_sub.add_parser(
        "example", help="print the example config shipped with gpumeter (the demo's), to start your own from"
    )
    example.add_argument("--path", action="store_true", help="print where the example file is instead")
    example.set_defaults(func=cmd_config_example)

    dash = sub.add_parser(
        "dashboard", help="run the finance and ops dashboard (Streamlit) on a config's warehouse"
    )
    dash.add_argument(
        "--config",
        help=f"gpumeter YAML config (default: {DEMO_DIR / 'config.yaml'}, written by `gpumeter demo`)",
    )
    dash.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    dash.add_argument("--port", type=int, default=8501, help="port (default: %(default)s)")
    dash.set_defaults(func=cmd_dashboard)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from gpumeter.ingest.contract import SourceError
    from gpumeter.models.project import AccountingError
    from gpumeter.pipelines.launch import RunFailed
    from gpumeter.storage.files import WarehouseError

    handled: tuple[type[BaseException], ...] = (
        CliError,
        ConfigError,
        AccountingError,
        SourceError,
        WarehouseError,
        InvoiceError,
        RunFailed,
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return int(args.func(args))
    except handled as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", soft_wrap=True)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
