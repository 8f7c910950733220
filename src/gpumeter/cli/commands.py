"""The commands of a deployed gpumeter: check a config, meter days, roll up and export a month, close and
reopen it, open the dashboard. Metering and invoicing run the Dagster jobs the schedules run
(gpumeter.pipelines.launch, imported where used so that the other commands never load Dagster)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from gpumeter.billing.adjustments import corrected_periods
from gpumeter.billing.invoices import Period
from gpumeter.billing.month import check_month
from gpumeter.billing.periods import (
    close_period,
    is_closed,
    metered_days,
    published_exports,
    read_manifest,
    reopen_period,
)
from gpumeter.billing.refusals import CLOSED, INVOICED, check_not_empty, empty_month, is_empty
from gpumeter.billing.status import data_through
from gpumeter.cli import render
from gpumeter.cli.render import console
from gpumeter.config import (
    CONFIG_ENV,
    DEMO_DIR,
    EXAMPLE_CONFIG,
    Config,
    config_schema,
    config_warnings,
    load_config,
    select_clusters,
)
from gpumeter.storage.audit import who
from gpumeter.storage.replacement import Acceptance
from gpumeter.storage.warehouse import Warehouse
from gpumeter.views.summary import pool_summary

if TYPE_CHECKING:
    from gpumeter.pipelines.launch import RunOutcome


class CliError(Exception):
    """An error to print as one line (plus what to do) and exit 2."""


def days_between(start: date, end: date) -> list[date]:
    if end < start:
        raise CliError(f"--end {end} is before --start {start}")
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def _periods(days: list[date]) -> list[str]:
    return sorted({str(Period.of(d)) for d in days})


def meterable(days: list[date]) -> None:
    """Refuse, before Dagster starts, days that the meter_day job has no partition for: before the first day
    it meters, or after today (UTC), which has no samples yet."""
    from gpumeter.pipelines.partitions import daily_partitions

    first = date.fromisoformat(daily_partitions.get_first_partition_key())
    last = date.fromisoformat(daily_partitions.get_last_partition_key())
    outside = [d for d in days if not first <= d <= last]
    if outside:
        why = (
            "is after today (UTC): it has no samples yet"
            if outside[0] > last
            else f"is before {first}, the first day gpumeter meters"
        )
        raise CliError(
            f"{outside[0]} cannot be metered: it {why}; the days that can be metered are {first} to "
            f"{last} (today, UTC)"
        )


def invoiceable(period: str, action: str) -> None:
    """Refuse, before Dagster starts, a month that the invoice_month job has no partition for."""
    from gpumeter.pipelines.partitions import monthly_partitions

    first = Period.parse(monthly_partitions.get_first_partition_key()[:7])
    last = Period.parse(monthly_partitions.get_last_partition_key()[:7])
    month = Period.parse(period)
    if not first.start <= month.start <= last.start:
        why = (
            "is after the current month: none of its days has happened yet"
            if month.start > last.start
            else f"is before {first}, the first month gpumeter meters"
        )
        raise CliError(
            f"{period} cannot be {action}: it {why}; the months that can be are {first} to {last} "
            "(the current month, UTC)"
        )


def _empty_days(metered: list[RunOutcome]) -> list[str]:
    """The (cluster, day)s metered without a single GPU sample, as `cluster day`."""
    return [
        f"{o.cluster} {o.day}"
        for o in metered
        if o.materialized.get("raw_dcgm_samples", {}).get("rows", 1) == 0
    ]


# --- metering and the summary --------------------------------------------------------------------


def meter_and_invoice(
    config_path: Path,
    days: list[date],
    clusters: list[str] | None = None,
    acceptance: Acceptance | None = None,
) -> bool:
    """The meter_day job for each (cluster, day) partition (default: every cluster of the config), the
    invoice_month job for each month touched, then what they computed: charges, where capacity went, the
    conservation check of each day and each month's reconciliation. True when all of it holds."""
    from gpumeter.pipelines.launch import invoice_month, meter_days

    config = load_config(config_path)
    names = select_clusters(config, clusters)
    with render.progress() as bar:
        task = bar.add_task(
            f"metering {len(names)} cluster(s) x {len(days)} day(s)", total=len(days) * len(names)
        )
        metered = meter_days(
            str(config_path), days, on_day=lambda _: bar.advance(task), clusters=names, acceptance=acceptance
        )
    months = [invoice_month(str(config_path), period) for period in _periods(days)]
    render.failed_checks(metered)
    empty = _empty_days(metered)
    if empty:
        named = ", ".join(empty) if len(empty) <= 4 else f"{empty[0]} .. {empty[-1]} ({len(empty)} days)"
        them = "it" if len(empty) == 1 else "them"
        console.print(
            f"[yellow]no samples[/] for cluster {escape(named)}: the source holds no GPU sample for "
            f"{'this day' if len(empty) == 1 else 'these days'}, so nothing is billed for {them}; if GPUs ran "
            f"then, check the source and meter {them} again"
        )

    warehouse = Warehouse.of(config.warehouse)
    summary = pool_summary(warehouse, days[0], days[-1], config.minor_unit)
    render.pool_header(config.pool, summary)
    render.charges_table(summary, config.currency)
    render.capacity_table(summary)
    ok = render.conservation(metered, config.currency)
    for outcome in months:
        period = outcome.partition[:7]
        closed = (
            render.closed_line(read_manifest(warehouse, period), period)
            if is_closed(warehouse, period)
            else None
        )
        ok = render.month(outcome, config.currency, closed) and ok
        if closed is None:  # a draft: how far its figures go
            console.print(
                f"{period}: figures {data_through(Period.parse(period), metered_days(warehouse, period))}"
            )
        if closed is None and is_empty(warehouse, Period.parse(period)):
            console.print(f"{period}: {escape(empty_month(Period.parse(period), str(config_path)))}")
    return ok


def copy_exports(config_path: Path, periods: list[str], out: Path) -> list[Path]:
    """The months' export files, copied from the warehouse (local or an object store) to `out`."""
    warehouse = Warehouse.of(load_config(config_path).warehouse)
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for period in periods:
        for path in sorted(published_exports(warehouse, period).glob("*"), key=str):
            if path.name.startswith(".") or not path.is_file():
                continue
            (out / path.name).write_bytes(path.read_bytes())
            copied.append(out / path.name)
    return copied


def copy_invoices(config_path: Path, days: list[date], out: Path) -> Path:
    """The invoices of the days' months, copied to `out/invoices`."""
    copy_exports(config_path, _periods(days), out / "invoices")
    return out / "invoices"


# --- commands ------------------------------------------------------------------------------------


def _missing_sources(file: str, config: Config) -> list[tuple[str, str]]:
    """The source folders that do not exist (ParquetSource.missing_path), each with its place (and line) in
    the file."""
    from gpumeter.config.yaml_text import yaml_with_lines

    lines = yaml_with_lines(Path(file).read_text(encoding="utf-8"))[1]
    missing = []
    for i, cluster in enumerate(config.clusters):
        found = cluster.source.missing_path()
        if found is not None:
            field, message = found
            place = f"clusters[{i}].source.{field}"
            line = lines.get(place)
            missing.append((f"{place} (line {line})" if line else place, message))
    return missing


def cmd_config_check(args: argparse.Namespace) -> int:
    config = load_config(args.file)
    problems = config_warnings(config)
    # The shipped example is a template: its source folder is the one `gpumeter demo` writes beside its copy.
    example = Path(args.file).resolve() == Path(str(EXAMPLE_CONFIG)).resolve()
    missing = [] if example else _missing_sources(args.file, config)
    for place, message in problems:
        console.print(f"[yellow]warning[/] {escape(f'{args.file}: {place}: {message}')}")
    # A folder missing here may exist where the config is deployed: said plainly, not refused (exit 0).
    for place, message in missing:
        console.print(f"[red]missing[/] {escape(f'{args.file}: {place}: {message}')}")
    stops = f", {len(missing)} source folder(s) missing: a run stops on each" if missing else ""
    console.print(
        f"[green]ok[/] {args.file}: {len(config.clusters)} cluster(s), {len(config.tenants)} tenant(s), "
        f"{len(config.rate_card.models)} priced GPU model(s), {len(problems)} warning(s){escape(stops)}"
    )
    return 0


def cmd_config_schema(_: argparse.Namespace) -> int:
    sys.stdout.write(json.dumps(config_schema(), indent=2) + "\n")
    return 0


def cmd_config_example(args: argparse.Namespace) -> int:
    sys.stdout.write(f"{EXAMPLE_CONFIG}\n" if args.path else EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    config_path = Path(args.config)
    load_config(config_path)  # fail fast, with every problem, before Dagster starts
    if args.by and not args.replace_with_less:
        raise CliError("--by names who accepts --replace-with-less; give that too, or leave --by out")
    acceptance = Acceptance(args.replace_with_less, who(args.by)) if args.replace_with_less else None
    days = days_between(args.start, args.end)
    meterable(days)
    return 0 if meter_and_invoice(config_path, days, args.cluster, acceptance) else 1


def _now() -> datetime:
    return datetime.now(UTC)


def cmd_today(args: argparse.Namespace) -> int:
    """Meter each cluster's day so far (the meter_today job the hourly schedule runs), then print the month
    to date per tenant: complete days and today's provisional part."""
    from gpumeter.models.provisional import last_full_hour
    from gpumeter.pipelines.launch import meter_today
    from gpumeter.views.cache import ReadCache
    from gpumeter.views.charges import provisional_label
    from gpumeter.views.filters import Filters
    from gpumeter.views.identity import Viewer
    from gpumeter.views.scoped import Views

    config_path = Path(args.config)
    config = load_config(config_path)
    names = select_clusters(config, args.cluster)
    through = last_full_hour(_now())
    if through.hour == 0:
        console.print(
            f"{through:%Y-%m-%d} has no full hour yet: its figures so far can be metered from 01:00 UTC on."
        )
    else:
        render.today_runs(meter_today(str(config_path), through, names))
    views = Views(Warehouse.of(config.warehouse), config, cache=ReadCache(0))
    try:
        viewer = Viewer("finance", identity="gpumeter today")
        filters = Filters(Period.of(through.date()), clusters=tuple(args.cluster or ()))
        so_far = views.provisional_days(viewer, filters)
        render.month_to_date(
            views.tenant_charges(viewer, filters, so_far=True),
            str(filters.period),
            provisional_label(so_far),
            config.currency,
        )
    finally:
        views.close()
    return 0


def cmd_invoices(args: argparse.Namespace) -> int:
    from gpumeter.pipelines.launch import invoice_month

    config_path = Path(args.config)
    config = load_config(config_path)
    invoiceable(args.period, INVOICED)
    warehouse = Warehouse.of(config.warehouse)
    # Refused (exit 2, one line) before anything runs: a half-written day, or a month that does not reconcile.
    check_month(config, warehouse, args.period, action=INVOICED, config_path=args.config)
    invoice_month(str(config_path), args.period)  # a closed period is left as closed (R16)
    files = copy_exports(config_path, [args.period], Path(args.out))
    render.exports(files, f"Invoice files {args.period}")
    manifest = read_manifest(warehouse, args.period)
    period = Period.parse(args.period)
    if manifest is None and is_empty(warehouse, period):
        # Nothing to close: say what is missing instead of suggesting it.
        console.print(f"{args.period}: [yellow]nothing billed[/]: {escape(empty_month(period, args.config))}")
    else:
        console.print(render.closed_line(manifest, args.period, args.config))
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    from gpumeter.pipelines.launch import invoice_month

    config_path = Path(args.config)
    config = load_config(config_path)
    invoiceable(args.period, CLOSED)
    warehouse = Warehouse.of(config.warehouse)
    period = Period.parse(args.period)
    if not is_closed(warehouse, args.period):
        # Refused (exit 2, one line) before anything runs or is written: nothing half written or that does
        # not reconcile is ever closed, nor a month none of whose days was metered (without --allow-empty;
        # close_period checks that again with the month's lines, which may carry adjustments).
        if not args.allow_empty and not corrected_periods(warehouse, period):
            check_not_empty(warehouse, period, args.config)
        check_month(config, warehouse, args.period, action=CLOSED, config_path=args.config)
        invoice_month(str(config_path), args.period)  # close what the stored days say now
    manifest = close_period(
        config,
        warehouse,
        period,
        by=args.by,
        reason=args.reason,
        refuse_empty=not args.allow_empty,
        config_path=args.config,
    )
    render.closed_invoices(manifest, args.period)
    console.print(
        "Its invoices never change now; data arriving later for it is billed in the next open month as "
        "`adjustment` lines."
    )
    return 0


def cmd_reopen(args: argparse.Namespace) -> int:
    config = load_config(Path(args.config))
    event = reopen_period(
        Warehouse.of(config.warehouse),
        Period.parse(args.period),
        reason=args.reason,
        by=args.by,
        config_path=args.config,
    )
    command = f"gpumeter invoices --config {args.config} --period {args.period} --out invoices-{args.period}"
    console.print(
        f"{args.period}: [yellow]reopened[/] {event['at']} by {escape(event['by'])}: {escape(event['reason'])}\n"
        f"Run `{escape(command)}` to roll it up again, then close it."
    )
    return 0


def cmd_source_check(args: argparse.Namespace) -> int:
    """Check each Prometheus source of the config over a recent window (gpumeter.ingest.source_check):
    exit 1 when a finding would misbill, 0 otherwise."""
    from rich.table import Table

    from gpumeter.ingest.source_check import check_sources
    from gpumeter.ingest.source_check.findings import report_json

    config = load_config(Path(args.config))
    names = select_clusters(config, args.cluster) if args.cluster else None
    end = args.at or _now()
    end_ms = round(end.timestamp() * 1000)
    reports = check_sources(config, names, end_ms, args.window_minutes * 60_000)
    if args.format == "json":
        sys.stdout.write(json.dumps(report_json(reports), indent=2) + "\n")
        return 1 if any(r.misbills for r in reports) else 0
    colour = {"ok": "green", "warn": "yellow", "misbills": "red"}
    for report in reports:
        window = report.as_json()["window"]
        table = Table(
            title=f"{report.cluster}: {report.url}, {window['start']} .. {window['end']}, "
            f"Δ {report.scrape_interval_seconds} s",
            title_justify="left",
            show_lines=True,
            expand=True,
        )
        # What was found and what to do are prose: they get the width; a flag or a path folds, never ends in "…".
        table.add_column("exporter", no_wrap=True)
        table.add_column("check", ratio=1, overflow="fold")
        table.add_column("found", ratio=3, overflow="fold")
        table.add_column("verdict", no_wrap=True)
        table.add_column("what to do", ratio=2, overflow="fold")
        for f in report.findings:
            # What it costs goes under what was found: finance reads that line, ops the last column.
            found = f"{escape(f.found)}\n[bold]Billing:[/] {escape(f.cost)}" if f.cost else escape(f.found)
            verdict = f"[{colour[f.verdict.value]}]{f.verdict.value}[/]"
            table.add_row(escape(f.exporter), escape(f.check), found, verdict, escape(f.action))
        console.print(table)
    bad = [(r.cluster, f) for r in reports for f in r.findings if f.verdict.value == "misbills"]
    if bad:
        console.print(
            f"[red]{len(bad)} finding(s) would misbill[/]: "
            + "; ".join(escape(f"{cluster}: {f.exporter} {f.check}") for cluster, f in bad)
        )
        return 1
    console.print("[green]nothing found would misbill[/]")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Run the Streamlit dashboard (its script ships in the package) on a config's warehouse."""
    from gpumeter.dashboard import APP

    config_path = Path(args.config) if args.config else DEMO_DIR / "config.yaml"
    load_config(config_path)  # every problem now, not in the browser
    env = {**os.environ, CONFIG_ENV: str(config_path.resolve())}
    command = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", args.host]
    command += ["--server.port", str(args.port), "--server.headless", "true"]
    # Streamlit collects garbage after every script run by default: with many viewers at month end that
    # collection, not the page, is most of a cached page view (bench/README.md, the dashboard's viewers).
    command += ["--runner.postScriptGC", "false", "--browser.gatherUsageStats", "false"]
    console.print(f"gpumeter dashboard on http://{args.host}:{args.port} for {config_path} (Ctrl-C stops it)")
    return subprocess.call(command, env=env)
