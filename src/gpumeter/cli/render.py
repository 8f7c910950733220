"""What the command line prints: tables a person can read, built from what the pipeline and the views return.
Nothing here computes a figure of its own."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpumeter.billing.alerts import percent_text
from gpumeter.config import IDLE
from gpumeter.storage import paths
from gpumeter.views import words
from gpumeter.views.summary import PoolSummary

if TYPE_CHECKING:  # Dagster loads only for the commands that run jobs
    from gpumeter.billing.alerts import BudgetAlert
    from gpumeter.pipelines.launch import RunOutcome

# Piped output (CI logs, files) gets a width that fits the tables instead of rich's 80 columns, and its
# sentences whole on one line each, for grep.
_PIPED = not sys.stdout.isatty()
console = Console(highlight=False, width=130 if _PIPED else None, soft_wrap=_PIPED)
err = Console(stderr=True, highlight=False)

# The names the metering job's asset checks and the invoice asset report under (gpumeter.pipelines).
CONSERVATION_CHECK = "conservation_r13"
INVOICE_LINES_ASSET = "invoice_lines"


def money(amount: object, currency: str) -> str:
    return f"{Decimal(str(amount)):,.2f} {currency}"


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def pool_header(pool: str, summary: PoolSummary) -> None:
    console.print(
        f"\n[bold]{escape(pool)}[/]: {summary.days} day(s) {summary.first_day} .. {summary.last_day}, "
        f"{summary.observed_gpu_hours:,.1f} observed GPU-hours, "
        f"{summary.unobserved_gpu_hours:,.1f} unobserved (reported, not billed)"
    )


def charges_table(summary: PoolSummary, currency: str) -> None:
    table = Table(title="Charges", title_justify="left")
    # Names stay whole: a bucket's words are a line finance looks for.
    for column, justify in (
        ("tenant", "left"),
        ("cost center", "left"),
        ("GPU-hours", "right"),
        ("efficiency", "right"),
        ("amount", "right"),
        ("share", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for charge in summary.charges:
        share = float(charge.amount / summary.pool_cost) if summary.pool_cost else 0.0
        efficiency = "" if charge.efficiency is None or charge.tenant == IDLE else f"{charge.efficiency:.0%}"
        table.add_row(
            escape(words.HOLDER_WORDS.get(charge.tenant, charge.tenant)),
            escape(charge.cost_center or ""),
            f"{charge.gpu_hours:,.1f}",
            efficiency,
            money(charge.amount, currency),
            f"{share:.1%}",
        )
    table.add_section()
    table.add_row(
        "pool cost", "", f"{summary.observed_gpu_hours:,.1f}", "", money(summary.pool_cost, currency), "100%"
    )
    console.print(table)


def capacity_table(summary: PoolSummary) -> None:
    table = Table(title="Where capacity went", title_justify="left")
    table.add_column("category", no_wrap=True)
    table.add_column("GPU-hours", justify="right")
    table.add_column("% of capacity", justify="right")
    table.add_column("stranded", justify="center")
    total = sum(summary.capacity_hours.values()) or 1.0
    for category, hours in summary.capacity_hours.items():
        stranded = "" if category == "allocated_active" else "yes"
        table.add_row(words.CATEGORY_WORDS[category], f"{hours:,.1f}", f"{hours / total:.1%}", stranded)
    table.add_section()
    table.add_row("stranded", f"{summary.stranded_hours:,.1f}", f"{summary.stranded_hours / total:.1%}", "")
    console.print(table)


def today_runs(done: Sequence[dict[str, Any]]) -> None:
    """What each provisional run did (gpumeter.pipelines.today): metered, or skipped and why."""
    for run in done:
        status = "[green]metered[/]" if run["metered"] else "[yellow]skipped[/]"
        console.print(f"{status} {escape(run['message'])}")


def month_to_date(frame: pl.DataFrame, period: str, label: str, currency: str) -> None:
    """Each tenant's month to date (Views.tenant_charges with so_far): the complete days, today's
    provisional part (`label`: through 14:00 UTC, provisional) and their sum."""
    if frame.is_empty():
        console.print(f"Nothing metered in {period} yet.")
        return
    table = Table(title=f"Month to date, {period}", title_justify="left")
    today = f"today, {label}" if label else "today (nothing metered so far)"
    for column, justify in (
        ("tenant", "left"),
        ("cost center", "left"),
        ("complete days", "right"),
        (today, "right"),
        ("month to date", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in frame.iter_rows(named=True):
        table.add_row(
            escape(words.HOLDER_WORDS.get(row["tenant"], row["tenant"])),
            escape(row["cost_center"] or ""),
            money(row["complete_days_amount"], currency),
            money(row["provisional_amount"], currency),
            money(row["amount"], currency),
        )
    console.print(table)
    if label:
        console.print(
            f"Today's part is provisional ({escape(label)}): it changes until the day is metered in full "
            "after midnight, and no invoice includes it."
        )


def conservation(days: Sequence[RunOutcome], currency: str) -> bool:
    """The conservation check of every metered (cluster, day), summed: what tenants, __unallocated__ and
    __idle__ were charged against the pool cost. True when every day's check passed."""
    charged = pool = Decimal(0)
    passed = True
    for outcome in days:
        check = outcome.checks.get(CONSERVATION_CHECK)
        if check is None:
            continue
        passed = passed and check.passed
        for figures in check.metadata.get("clusters", {}).values():
            charged += Decimal(figures["charged"])
            pool += Decimal(figures["pool_cost"])
    verdict = "[green]exact[/]" if passed and charged == pool else f"[red]off by {charged - pool}[/]"
    console.print(
        f"Conservation: charged {money(charged, currency)} = pool cost {money(pool, currency)}: {verdict}"
    )
    return passed and charged == pool


def month(outcome: RunOutcome, currency: str, closed_status: str | None) -> bool:
    """One month's invoice run: its lines and whether they reconcile with the pool cost after rounding. A
    closed month was left untouched; `closed_status` says what it was closed as."""
    period = outcome.partition[:7]
    if closed_status is not None:
        console.print(f"Invoices {closed_status}")
        return True
    recorded = outcome.materialized.get(INVOICE_LINES_ASSET, {})
    adjustments = recorded.get("adjustment_lines", 0)
    reconciles = bool(recorded.get("reconciles", False))
    console.print(
        f"Invoices {period}: {recorded.get('lines', 0)} lines"
        + (f" ({adjustments} adjustments of closed periods)" if adjustments else "")
        + f", {money(recorded.get('invoiced_rounded', 0), currency)} rounded against pool cost "
        + f"{money(recorded.get('pool_cost', 0), currency)}: "
        + ("[green]reconciled[/]" if reconciles else "[red]do not reconcile[/]")
    )
    return reconciles


def failed_checks(days: Iterable[RunOutcome]) -> None:
    """One line per check that failed, naming the partitions it failed on."""
    failed: dict[str, list[str]] = {}
    for outcome in days:
        for check in outcome.failed_checks:
            failed.setdefault(check, []).append(f"{outcome.cluster} {outcome.day}")
    for check, on in failed.items():
        where = ", ".join(on) if len(on) <= 4 else f"{on[0]} .. {on[-1]}"
        console.print(
            f"[yellow]check[/] {escape(f'{check} on {len(on)} (cluster, day) partition(s): {where}')}"
        )


def exports(files: Iterable[Path], title: str) -> None:
    """One row per file: its name, what it is (invoice lines, FOCUS, the HTML or PDF invoice) and a CSV's
    rows. The folder is said once, after the table: a full path on every row pushed the kind out of it."""
    files = list(files)
    table = Table(title=title, title_justify="left")
    table.add_column("file", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("rows", justify="right")
    for path in files:
        rows = str(sum(1 for _ in path.open(encoding="utf-8")) - 1) if path.suffix == ".csv" else ""
        table.add_row(escape(path.name), paths.export_kind(path.name), rows)
    console.print(table)
    for folder in dict.fromkeys(str(path.parent) for path in files):
        console.print(f"in {escape(folder)}")


def budget_alerts(alerts: Sequence[BudgetAlert], sent_to: str | None) -> None:
    """The budget alerts crossed now (gpumeter.billing.alerts): one row per tenant, month and basis with every
    threshold it crossed, since the figures are the same for each. `sent_to`: the environment variable naming
    the webhook the budget_alerts sensor sends them to; None when the config has none."""
    if not alerts:
        console.print(
            "Budget alerts: no budget alert crossed (spend or forecast past a threshold of a budget)"
        )
        return
    table = Table(title="Budget alerts", title_justify="left")
    for column, justify in (
        ("tenant", "left"),
        ("cost center", "left"),
        ("month", "left"),
        ("basis", "left"),
        ("thresholds crossed", "right"),
        ("amount", "right"),
        ("budget", "right"),
        ("of budget", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    crossed: dict[tuple[str, str, str], list[BudgetAlert]] = {}
    for alert in alerts:
        crossed.setdefault((alert.tenant, alert.period, alert.basis), []).append(alert)
    for same in crossed.values():
        alert = same[0]
        share = alert.percent_of_budget
        table.add_row(
            escape(alert.tenant),
            escape(alert.cost_center or ""),
            alert.period,
            alert.basis,
            ", ".join(f"{percent_text(a.threshold)} %" for a in sorted(same, key=lambda a: a.threshold)),
            alert.money(alert.amount),
            alert.money(alert.budget),
            f"{share} %" if share is not None else "over",
        )
    console.print(table)
    count = f"{len(alerts)} alert{'s' if len(alerts) != 1 else ''}, one per threshold crossed"
    if sent_to is None:
        console.print(
            f"The config has no webhook (`alerts`, docs/config.md): with one, the budget_alerts sensor sends "
            f"these {count}, each once."
        )
    else:
        console.print(
            f"The budget_alerts sensor sends these {count}, each once, to the webhook in ${escape(sent_to)}."
        )


def closed_line(manifest: dict | None, period: str, config_path: str = "F") -> str:
    """A period's status as one line: draft, or closed with when, by whom, its total and content hash.
    `config_path` is named in the command that closes a draft."""
    if not manifest:
        command = f"gpumeter close --config {config_path} --period {period}"
        return f"{period}: [yellow]draft[/] (close it with `{escape(command)}`)"
    return (
        f"{period}: [green]closed[/] {manifest['closed_at']} by {escape(str(manifest['closed_by']))}, "
        f"{manifest['line_count']} lines, total {manifest['total']} {manifest['currency']}, "
        f"sha256 {manifest['content_hash']}"
    )


def closed_invoices(manifest: dict, period: str) -> None:
    table = Table(title=f"Closed {period}", title_justify="left")
    table.add_column("invoice", no_wrap=True)
    for invoice in manifest["invoice_ids"]:
        table.add_row(invoice)
    console.print(table)
    console.print(closed_line(manifest, period))
