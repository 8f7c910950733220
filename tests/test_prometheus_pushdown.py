"""What the Prometheus source pushes into PromQL, and the PromQL it refuses to build.

- XID push-down (R11, R1): `DCGM_FI_DEV_XID_ERRORS` is screened per window with `max_over_time` /
  `min_over_time`; raw samples are fetched only for the series with a value != 0 in that window, and the
  result is exactly those series' raw samples of the window, whatever the chunking.
- PromQL injection (issue 7): `selector` must be label matchers; label values taken from the server are
  escaped, so a value such as `a"} or vector(1) #` selects its own series and nothing else.
- The pull knobs are config fields (chunk_seconds, min_chunk_seconds, dedupe_bucket_seconds, pushdown).

Against a real Prometheus on 127.0.0.1, backfilled with promtool, and a real VictoriaMetrics
(tests/prometheus_fixtures.py: `served`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from dagster import asset, materialize
from prometheus_fixtures import BACKENDS, PromQLServer, Sample, needs_prometheus, sample, served
from pydantic import ValidationError

from gpumeter.config import ConfigError, PrometheusSource, parse_config
from gpumeter.ingest.contract import day_bounds_ms
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.ingest.schema import DCGM_GPU_UTIL, DCGM_XID

pytestmark = needs_prometheus

DAY = date(2026, 11, 1)
D0, D1 = day_bounds_ms(DAY)
STEP = 30_000
HOUR = 3_600_000
EVIL = 'a"} or vector(1) #'


def _labels(uuid: str, **extra: str) -> dict[str, str]:
    labels = {
        "cluster": "x",
        "Hostname": "n1",
        "UUID": uuid,
        "gpu": "0",
        "modelName": "NVIDIA H100 80GB HBM3",
    }
    return {**labels, "job": "dcgm-exporter", "instance": "n1:9400", **extra}


def _day_series(metric: str, labels: dict[str, str], value_at: Any) -> list[Sample]:
    return [sample(metric, labels, value_at(ts), ts) for ts in range(D0, D1, STEP)]


# GPU-1: XID 0 all day. GPU-2 (a hostile label value): XID 79 from 10:00 to 10:30, 0 otherwise; its
# samples in [10:00, 11:00) are the only raw XID samples a pull with 1 h windows needs. GPU-3: a series
# whose labels are a superset of GPU-2's plus `pod`, always 0 (matchers alone would also select it).
GPU2 = _labels("GPU-2", note=EVIL)
GPU3 = _labels("GPU-2", note=EVIL, pod="p1")
XID_ON = (D0 + 10 * HOUR, D0 + 10 * HOUR + 30 * 60_000)


def _xid2(ts: int) -> float:
    return 79.0 if XID_ON[0] <= ts < XID_ON[1] else 0.0


PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _phase_of(ts: int) -> str:
    """Pod p1: Pending until 06:00, Running until 18:00, then Succeeded."""
    return "Pending" if ts < D0 + 6 * HOUR else "Running" if ts < D0 + 18 * HOUR else "Succeeded"


PHASE_SERIES = [
    sample(
        "kube_pod_status_phase",
        {"cluster": "x", "namespace": "ns", "pod": "p1", "uid": "u1", "phase": phase, "job": "ksm"},
        1.0 if _phase_of(ts) == phase else 0.0,
        ts,
    )
    for phase in PHASES
    for ts in range(D0, D1, STEP)
]
SAMPLES = [
    *PHASE_SERIES,
    *_day_series(DCGM_XID, _labels("GPU-1"), lambda ts: 0.0),
    *_day_series(DCGM_XID, GPU2, _xid2),
    *_day_series(DCGM_XID, GPU3, lambda ts: 0.0),
    *_day_series(DCGM_GPU_UTIL, _labels("GPU-1"), lambda ts: 50.0),
    *_day_series(DCGM_GPU_UTIL, GPU2, lambda ts: 10.0),
]


@pytest.fixture(scope="module", params=BACKENDS)
def prom(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromQLServer]:
    folder = tmp_path_factory.mktemp("pushdown")
    with served(request.param, SAMPLES, folder) as server:
        yield server


def _source(url: str, **fields: Any) -> PrometheusRawSource:
    spec = PrometheusSource(url=url, selector='cluster="x"', **fields)
    return PrometheusRawSource(spec, "x", dcgm_metrics=(DCGM_GPU_UTIL, DCGM_XID), kube_metrics=())


def _xid_rows(table: pa.Table) -> list[tuple[str, int, float]]:
    rows = table.filter(pa.compute.equal(table.column("metric"), DCGM_XID)).to_pylist()
    return sorted((r["uuid"] + ("/" + r["pod"] if r["pod"] else ""), r["ts_ms"], r["value"]) for r in rows)


# --- XID push-down (R11, R1) ---------------------------------------------------------------------


def test_xid_raw_samples_are_fetched_only_where_some_value_is_not_zero(prom: PromQLServer) -> None:
    src = _source(prom.url)
    raw = src.fetch_day("x", DAY, 0)
    # Hand-computed: GPU-2's samples of the 10:00 window, [10:00, 11:00) every 30 s = 120 rows, 60 of
    # them (10:00-10:30) with XID 79. GPU-1 and the `pod` copy of GPU-2 are never fetched.
    want = [("GPU-2", ts, _xid2(ts)) for ts in range(D0 + 10 * HOUR, D0 + 11 * HOUR, STEP)]
    assert _xid_rows(raw.dcgm) == want
    assert sum(1 for _, _, v in want if v == 79.0) == 60
    # GPU_UTIL is still pulled raw, whole: 2 series x 2880 samples.
    util = raw.dcgm.filter(pa.compute.equal(raw.dcgm.column("metric"), DCGM_GPU_UTIL))
    assert util.num_rows == 2 * 2880


def test_pushdown_keeps_every_non_zero_xid_sample_whatever_the_chunking(prom: PromQLServer) -> None:
    everything = _source(prom.url, pushdown=False).fetch_day("x", DAY, 0)
    nonzero = [row for row in _xid_rows(everything.dcgm) if row[2] != 0]
    assert len(_xid_rows(everything.dcgm)) == 3 * 2880
    # 1234 s windows: the XID period straddles window edges; 20 min windows: edges on samples.
    for chunk in (3600, 1234, 1200, 86_400):
        pushed = _source(prom.url, chunk_seconds=chunk, min_chunk_seconds=60).fetch_day("x", DAY, 0)
        rows = _xid_rows(pushed.dcgm)
        assert [row for row in rows if row[2] != 0] == nonzero, chunk
        assert set(rows) <= set(_xid_rows(everything.dcgm)), chunk  # nothing invented, nothing twice
        assert len(rows) == len(set(rows)), chunk


def test_pushdown_moves_fewer_samples_than_the_raw_pull(prom: PromQLServer) -> None:
    raw_src, pushed_src = _source(prom.url, pushdown=False), _source(prom.url)
    raw_src.fetch_day("x", DAY, 0)
    pushed_src.fetch_day("x", DAY, 0)
    # Raw: 5 series x 2880, plus each window's closed end [w0, w1] receiving the next window's first
    # sample (23 of the 24 hourly windows; dropped client-side). Pushed: the 2 UTIL series the same way,
    # one screen answer (GPU-2, 10:00 window), and the 121 raw samples of [10:00, 11:00] of GPU-2 and of
    # its `pod` superset (matchers also select series with more labels; that one is dropped client-side).
    assert raw_src.samples_received == 5 * (2880 + 23)
    assert pushed_src.samples_received == 2 * (2880 + 23) + 1 + 2 * 121
    assert pushed_src.bytes_received < raw_src.bytes_received


def _pod_samples(src: PrometheusRawSource) -> dict[tuple[str, int], bool]:
    """(pod, ts) -> Running, as stg_kube_pod_phases reads it: per pod sample, any Running series at 1."""
    raw = src.fetch_day("x", DAY, 0)
    out: dict[tuple[str, int], bool] = {}
    for row in raw.kube.to_pylist():
        labels = json.loads(row["labels"])
        key = (labels["pod"], row["ts_ms"])
        out[key] = out.get(key, False) or (labels["phase"] == "Running" and row["value"] == 1)
    return out


def test_only_the_running_phase_series_is_pulled_and_says_the_same(prom: PromQLServer) -> None:
    def source(pushdown: bool) -> PrometheusRawSource:
        spec = PrometheusSource(url=prom.url, selector='cluster="x"', pushdown=pushdown)
        return PrometheusRawSource(spec, "x", dcgm_metrics=(), kube_metrics=("kube_pod_status_phase",))

    full, pushed = source(False), source(True)
    assert 'phase="Running"' in pushed.query_for("kube_pod_status_phase", 1000)
    assert _pod_samples(pushed) == _pod_samples(full)  # the same pod samples, the same Running answer
    running = [ts for (_, ts), is_running in _pod_samples(pushed).items() if is_running]
    assert running == list(range(D0 + 6 * HOUR, D0 + 18 * HOUR, STEP))  # hand-made: 06:00-18:00
    assert pushed.samples_received * 5 == full.samples_received  # one series of five


# --- PromQL injection (issue 7) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "selector",
    [
        EVIL,
        'cluster="a"} or vector(1) #',
        'cluster="x") or up{',
        "cluster=x",
        'cluster="x" or',
        '__name__="up"',
        'cluster="x"\n,env="a"b"',
    ],
)
def test_a_selector_that_is_not_label_matchers_is_one_config_error_naming_the_field(selector: str) -> None:
    source = {"kind": "prometheus", "url": "http://127.0.0.1:9", "selector": selector}
    with pytest.raises(ConfigError) as info:
        parse_config(yaml.safe_dump({"clusters": [{"name": "c1", "source": source}]}), "cfg.yaml")
    assert len(info.value.problems) == 1
    place, message = info.value.problems[0]
    assert place.startswith("clusters[0].source.selector")
    assert "label matchers" in message or "may not match __name__" in message


@pytest.mark.parametrize(
    ("given", "rendered"),
    [
        ('cluster="prod-a"', 'cluster="prod-a"'),
        ('{ cluster = "prod-a" , env!="dev", }', 'cluster="prod-a",env!="dev"'),
        ('{cluster=~"new|old"}', 'cluster=~"new|old"'),
        ('zone!~"eu-.*",note="a\\"} or vector(1) #"', 'zone!~"eu-.*",note="a\\"} or vector(1) #"'),
    ],
)
def test_label_matchers_are_accepted_and_rendered_canonically(given: str, rendered: str) -> None:
    spec = PrometheusSource(url="http://x", selector=given)
    assert spec.selector == rendered
    assert PrometheusRawSource(spec, "c").query_for(DCGM_XID, 1000) == f"{DCGM_XID}{{{rendered}}}[1001ms]"


def test_a_hostile_label_value_selects_only_its_own_series(prom: PromQLServer) -> None:
    # The selector may carry such a value, escaped; the server must read it as a plain value.
    escaped = EVIL.replace('"', '\\"')
    spec = PrometheusSource(url=prom.url, selector=f'cluster="x",note="{escaped}"')
    raw = PrometheusRawSource(spec, "x", dcgm_metrics=(DCGM_GPU_UTIL,), kube_metrics=()).fetch_day(
        "x", DAY, 0
    )
    assert set(raw.dcgm.column("uuid").to_pylist()) == {"GPU-2"} and raw.dcgm.num_rows == 2880
    # A series' own labels (from the server) are escaped too when the push-down names that series.
    src = _source(prom.url)
    query = src.query_for(DCGM_XID, 1000, {"note": EVIL})
    assert query == f'{DCGM_XID}{{cluster="x",note="{escaped}"}}[1001ms]'


# --- pull knobs as config fields -----------------------------------------------------------------


def test_pull_knobs_are_validated_config_fields() -> None:
    spec = PrometheusSource(
        url="http://x", chunk_seconds=600, min_chunk_seconds=30, dedupe_bucket_seconds=900
    )
    src = PrometheusRawSource(spec, "c")
    assert (src.chunk_ms, src.min_chunk_ms, src.bucket_ms) == (600_000, 30_000, 900_000)
    for bad, words in (
        ({"chunk_seconds": 60, "min_chunk_seconds": 120}, "must not exceed chunk_seconds"),
        ({"dedupe_bucket_seconds": 7000}, "must divide a day"),
        ({"chunk_seconds": 0}, "chunk_seconds"),
    ):
        text = (
            "clusters:\n  - name: c1\n    source:\n      kind: prometheus\n      url: http://x\n"
            + "".join(f"      {k}: {v}\n" for k, v in bad.items())
        )
        with pytest.raises(ConfigError, match=words):
            parse_config(text, "cfg.yaml")


def test_the_resource_passes_the_knobs_to_the_source(tmp_path: Path) -> None:
    from gpumeter.pipelines.resources import PrometheusResource

    source = PrometheusResource(url="http://x", chunk_seconds=900, pushdown=False).raw_source("c")
    assert isinstance(source, PrometheusRawSource)
    assert source.chunk_ms == 900_000 and source.spec.pushdown is False


def test_the_resource_fields_are_the_config_fields() -> None:
    """One list of Prometheus settings: every field of the config's prometheus block is a field of the
    Dagster resource, of the same type and default, and the resource has no other; Dagster's run config
    takes them, and the resource validates like the config (the selector re-rendered, the checks applied)."""
    from gpumeter.pipelines.resources import PrometheusResource

    config_fields = {name: f for name, f in PrometheusSource.model_fields.items() if name != "kind"}
    resource_fields = PrometheusResource.model_fields
    assert set(resource_fields) == set(config_fields)
    for name, field in config_fields.items():
        assert resource_fields[name].annotation == field.annotation, name
        assert resource_fields[name].get_default(call_default_factory=True) == field.get_default(
            call_default_factory=True
        ), name
    assert set(PrometheusResource.to_config_schema().as_field().config_type.fields) == set(config_fields)

    seen: list[PrometheusSource] = []

    # `context` unannotated: Dagster checks the annotation, which this module's `from __future__ import
    # annotations` leaves a string.
    @asset(required_resource_keys={"prometheus"})
    def probe(context) -> None:
        seen.append(context.resources.prometheus.spec)

    run_config = {
        "resources": {"prometheus": {"config": {"url": "http://x", "selector": ' cluster = "a" ,'}}}
    }
    result = materialize(
        [probe], resources={"prometheus": PrometheusResource.configure_at_launch()}, run_config=run_config
    )
    assert result.success
    assert seen == [PrometheusSource(url="http://x", selector='cluster="a"')]
    for bad, words in (
        ({"chunk_seconds": 60, "min_chunk_seconds": 120}, "must not exceed chunk_seconds"),
        ({"dedupe_bucket_seconds": 7000}, "must divide a day"),
        ({"selector": "up or vector(1)"}, "not a list of label matchers"),
        ({"timeout_seconds": 0}, "greater than 0"),
        ({"no_such_setting": 1}, "no_such_setting"),
    ):
        with pytest.raises(ValidationError, match=words):
            PrometheusResource(url="http://x", **bad)
