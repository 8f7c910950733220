"""The server's answers a source check is made of: one cluster's PromQL API asked about a window through the
Prometheus source's own transport (auth headers, TLS, retries), each question asked once, and the findings
made of the answers, with the GPU time a problem costs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpumeter.config import Cluster, Config, PrometheusSource
from gpumeter.ingest.prometheus.answers import UnexpectedAnswer, matrix_samples
from gpumeter.ingest.prometheus.transport import PrometheusTransport, iso_ms
from gpumeter.ingest.schema import DCGM_METRICS
from gpumeter.ingest.source_check.findings import Finding, SourceReport, Verdict

# The label `count_values` writes each series' sample count into (no exporter writes a label of this name).
_COUNT_LABEL = "gpumeter_check_samples"

# Each `up` series of the window: its labels and its sample times (ms).
UpSeries = list[tuple[dict[str, str], np.ndarray]]


@dataclass(frozen=True)
class DcgmSeries:
    """A DCGM series of the window: its metric, its labels (without the name) and its sample count."""

    metric: str
    labels: dict[str, str]
    samples: int


class SourceWindow:
    """One cluster's source over [end_ms - window_ms, end_ms): the server's answers, asked once each, and the
    report of the findings made of them."""

    def __init__(
        self,
        config: Config,
        cluster: Cluster,
        spec: PrometheusSource,
        transport: PrometheusTransport,
        end_ms: int,
        window_ms: int,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.spec = spec
        self.transport = transport
        self.end_ms = end_ms
        self.window_ms = window_ms
        self.start_ms = end_ms - window_ms
        self.delta_s = config.scrape_interval_of(cluster.name)
        self.cluster_label = cluster.cluster_label
        self.report = SourceReport(cluster.name, transport.url, self.start_ms, end_ms, self.delta_s)

    # --- asking ----------------------------------------------------------------------------------

    def _matchers(self, *extra: str) -> str:
        parts = [p for p in (self.spec.selector, *extra) if p]
        return "{" + ",".join(parts) + "}" if parts else ""

    def _range(self, metric: str, *extra: str) -> str:
        # Evaluated at end - 1 ms, `[W]` covers the half-open window on any server (promql.up_query).
        return f"{metric}{self._matchers(*extra)}[{self.window_ms}ms]"

    def _vector(self, query: str) -> list[dict[str, str]]:
        return [item.metric for item in self.transport.query(query, self.end_ms - 1, "vector")]

    def groups(self, metric: str, by: Iterable[str], *extra: str) -> list[dict[str, str]]:
        """The label sets (of `by`) the series of `metric` in the window show."""
        return self._vector(f"count by ({', '.join(by)}) (count_over_time({self._range(metric, *extra)}))")

    def dcgm_series(self) -> list[DcgmSeries]:
        """Every DCGM series of the window with its sample count (written into a label by count_values)."""
        out = []
        for metric in DCGM_METRICS:
            counted = f'count_values without () ("{_COUNT_LABEL}", count_over_time({self._range(metric)}))'
            for labels in self._vector(counted):
                samples = int(float(labels.pop(_COUNT_LABEL, "0")))
                out.append(DcgmSeries(metric, labels, samples))
        return out

    def up(self) -> UpSeries:
        """Each `up` series of the window with its sample times (ms)."""
        query = self._range("up")
        try:
            _, found = matrix_samples(
                self.transport.query(query, self.end_ms - 1, "matrix"), self.start_ms, self.end_ms
            )
        except UnexpectedAnswer as exc:
            raise self.transport.unexpected_answer(query, self.end_ms - 1, exc) from None
        return [(dict(labels.labels), ts) for labels, ts, _ in found]

    # --- the report ------------------------------------------------------------------------------

    def add(
        self, exporter: str, check: str, found: str, verdict: Verdict, action: str, cost: str = ""
    ) -> None:
        self.report.findings.append(Finding(exporter, check, found, verdict, action, cost))

    def window_text(self) -> str:
        return f"the {self.window_ms / 60_000:g} minutes to {iso_ms(self.end_ms)}"

    # --- GPU time, for what a problem costs -------------------------------------------------------

    def hours(self, samples: int) -> str:
        return f"{samples * self.delta_s / 3600:,.1f}"

    @staticmethod
    def _per_label_set(series: Iterable[DcgmSeries]) -> dict[tuple[tuple[str, str], ...], int]:
        """Samples per label set (a scrape's fields are one sample of the GPU): the most of any field."""
        out: dict[tuple[tuple[str, str], ...], int] = {}
        for s in series:
            key = tuple(sorted(s.labels.items()))
            out[key] = max(out.get(key, 0), s.samples)
        return out

    def gpu_samples(self, series: Iterable[DcgmSeries]) -> int:
        """About the samples billing credits Δ each for: per GPU, its own series' samples, or where it has
        none (MIG without the GPU's own series) its busiest instance's."""
        whole: dict[str, int] = defaultdict(int)
        instances: dict[tuple[str, str], int] = defaultdict(int)
        for key, samples in self._per_label_set(series).items():
            labels = dict(key)
            uuid = labels.get("UUID") or labels.get("uuid") or ""
            if labels.get("GPU_I_ID"):
                instances[(uuid, labels["GPU_I_ID"])] += samples
            else:
                whole[uuid] += samples
        busiest: dict[str, int] = defaultdict(int)
        for (uuid, _), samples in instances.items():
            busiest[uuid] = max(busiest[uuid], samples)
        return sum(whole.get(uuid) or busiest.get(uuid, 0) for uuid in set(whole) | set(busiest))
