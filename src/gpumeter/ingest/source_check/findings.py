"""What a source check reports: a Finding per check (the exporter, what was looked at, what was found, a
verdict, what to do and what it costs) and a cluster's SourceReport of them, as printed and as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from gpumeter.ingest.prometheus.transport import iso_ms

# The exporters a finding is about, in the order the report shows them (the order the samples flow).
DCGM, KSM, OPENCOST, SERVER = "dcgm-exporter", "kube-state-metrics", "OpenCost", "Prometheus"
EXPORTER_ORDER = {DCGM: 0, KSM: 1, OPENCOST: 2, SERVER: 3}


class Verdict(StrEnum):
    OK = "ok"
    WARN = "warn"  # worth fixing, bills right today
    MISBILLS = "misbills"  # some GPU time goes to the wrong tenant, to nobody, or is counted twice


@dataclass(frozen=True)
class Finding:
    """One row of the report. `cost` says what the problem does to the bills (empty when nothing)."""

    exporter: str
    check: str
    found: str
    verdict: Verdict
    action: str
    cost: str = ""

    def as_json(self) -> dict[str, str]:
        return {**asdict(self), "verdict": self.verdict.value}


@dataclass
class SourceReport:
    """A cluster's source as seen over [start_ms, end_ms)."""

    cluster: str
    url: str
    start_ms: int
    end_ms: int
    scrape_interval_seconds: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def misbills(self) -> bool:
        return any(f.verdict is Verdict.MISBILLS for f in self.findings)

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "url": self.url,
            "window": {"start": iso_ms(self.start_ms), "end": iso_ms(self.end_ms)},
            "scrape_interval_seconds": self.scrape_interval_seconds,
            "misbills": self.misbills,
            "findings": [f.as_json() for f in self.findings],
        }


def report_json(reports: Sequence[SourceReport]) -> dict[str, Any]:
    return {"misbills": any(r.misbills for r in reports), "clusters": [r.as_json() for r in reports]}


def few(items: Sequence[str], limit: int = 3) -> str:
    """The first `limit` items, and how many more."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def seconds(value: float) -> str:
    return f"{value:.3g} s"
