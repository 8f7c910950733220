"""The PromQL the Prometheus source sends: raw samples of one window, and the screen that says which series
of a metric have a value != 0 in it (docs/prometheus.md, "Exact" and "What is pushed down").

Every metric is read as RAW samples: an instant query of a range selector, `M{selector}[W+1ms]` evaluated at
the end of a window [start, end), which returns the stored samples of the window (no step, no lookback, no
interpolation). Prometheus 2.x range selectors are closed, [t-W, t]; 3.x and VictoriaMetrics are left-open,
(t-W, t]. One millisecond more, and keeping client-side exactly the samples with start <= ts < end
(answers.samples), makes every window half-open whatever the server (R1, R2).
"""

from __future__ import annotations

from collections.abc import Mapping

# Series of a metric that the accounting never needs (with `pushdown`): kube-state-metrics writes one 0/1
# kube_pod_status_phase series per phase at every scrape, and stg_kube_pod_phases only asks "is the
# Running one 1", so the Running series alone gives the same pod samples and the same answer.
PUSHDOWN_MATCHERS: dict[str, str] = {"kube_pod_status_phase": 'phase="Running"'}


def escape_label_value(value: str) -> str:
    """A label value as it goes between the double quotes of a matcher (and of the OpenMetrics text)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def raw_samples_query(
    metric: str,
    window_ms: int,
    *,
    selector: str = "",
    pushdown: bool = True,
    series: Mapping[str, str] | None = None,
) -> str:
    """Raw samples of `metric` in (end - window - 1ms, end] or [.., end], evaluated at a window's end.
    `selector` is the source's label matchers (validated by config.PrometheusSource: only matchers, never
    other PromQL); with `series`, only the series carrying those labels (values escaped: they come from the
    server)."""
    parts = [selector] if selector else []
    if pushdown and metric in PUSHDOWN_MATCHERS:
        parts.append(PUSHDOWN_MATCHERS[metric])
    parts += [f'{k}="{escape_label_value(v)}"' for k, v in sorted((series or {}).items())]
    matchers = "{" + ",".join(parts) + "}" if parts else ""
    return f"{metric}{matchers}[{window_ms + 1}ms]"


def nonzero_screen_query(metric: str, window_ms: int, *, selector: str = "", pushdown: bool = True) -> str:
    """The series of `metric` with some value != 0 in the window (NaN counts as != 0: fetched, then ignored by
    the accounting like any non-finite value, R10). Evaluated at end - 1ms, its range `[window_ms]` covers
    [start, end) on a left-open server and [start - 1ms, end) on a closed one: never less than the window,
    and a sample on the window's end is left to the next window."""
    selection = raw_samples_query(metric, window_ms - 1, selector=selector, pushdown=pushdown)
    return f"max_over_time({selection}) != 0 or min_over_time({selection}) != 0"


def up_query(window_ms: int, *, selector: str = "") -> str:
    """One vector element per scrape target with a sample in the window, labelled with exactly the target's
    labels (`up`, which the server records for every target it scrapes): evaluated at end - 1ms, like the
    screen."""
    matchers = "{" + selector + "}" if selector else ""
    return f"count_over_time(up{matchers}[{window_ms}ms])"


__all__ = ["PUSHDOWN_MATCHERS", "escape_label_value", "nonzero_screen_query", "raw_samples_query", "up_query"]
