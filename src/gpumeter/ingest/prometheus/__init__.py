"""The Prometheus source: raw samples of a (cluster, day) pulled from any PromQL API (Prometheus, Thanos,
Mimir, VictoriaMetrics) into the raw-samples schema (gpumeter/ingest/schema.py). docs/prometheus.md explains
the configuration and the reasoning; the short version:

- Exact (R1, R2): every metric is read as raw samples of half-open windows, whatever the server's range
  semantics (promql.py), so consecutive windows partition the day and each sample is counted once.
- Windows of `chunk_seconds`, split where the server says one is too large; HA replicas' series merged as
  the union of their scrapes, one sample per scrape (windows.py).
- Robust: retries with backoff on what another attempt may fix, then one `SourceError` naming the URL, the
  query and what to do; secrets never in a message (transport.py).
- The answers checked and read as samples (answers.py), the series mapped to the raw DCGM and kube tables
  (raw_tables.py); PrometheusRawSource composes it all, with the DRA objects (source.py).
"""

from gpumeter.ingest.prometheus.answers import parse_timestamp_ms
from gpumeter.ingest.prometheus.promql import PUSHDOWN_MATCHERS, escape_label_value
from gpumeter.ingest.prometheus.raw_tables import DCGM_LABEL_COLUMNS
from gpumeter.ingest.prometheus.source import PrometheusRawSource

__all__ = [
    "DCGM_LABEL_COLUMNS",
    "PUSHDOWN_MATCHERS",
    "PrometheusRawSource",
    "escape_label_value",
    "parse_timestamp_ms",
]
