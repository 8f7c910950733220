"""bench/remote_read.py against a real Prometheus: a recorded pull request becomes the remote-read query of the
same samples, and both response types give back exactly the samples written, counted by hand."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

from bench import remote_read
from tests.prometheus_fixtures import needs_prometheus, sample, serve_samples

T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z


def _request(query: str, at_ms: int) -> str:
    path = "/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": f"{at_ms / 1000:.3f}"})
    return json.dumps({"method": "GET", "path": path, "body": ""})


def test_recorded_requests_become_selectors_over_the_closed_range() -> None:
    lines = [
        _request('kube_pod_status_phase{phase="Running",namespace="a\\"b"}[3600001ms]', T0 + 3_600_000),
        _request("DCGM_FI_DEV_GPU_UTIL[300001ms]", T0),
        _request("max_over_time(DCGM_FI_DEV_XID_ERRORS[300000ms]) != 0", T0),
    ]
    phase, util, xid = remote_read.recorded_requests(iter(lines))
    # Prometheus 2's range selector [N] at T holds the samples of [T - N, T].
    assert phase.selector == (
        "kube_pod_status_phase",
        (("phase", "Running"), ("namespace", 'a"b')),
        T0 - 1,
        T0 + 3_600_000,
    )
    assert util.selector == ("DCGM_FI_DEV_GPU_UTIL", (), T0 - 300_001, T0)
    assert xid.selector is None  # computed by PromQL: fetched as the pull fetches it


@needs_prometheus
def test_remote_read_returns_the_samples_the_json_api_returns(tmp_path: Path) -> None:
    # Two GPUs scraped every 30 s for 10 minutes; GPU b stops after 4 scrapes; one phase series.
    samples = [sample("DCGM_FI_DEV_GPU_UTIL", {"UUID": "GPU-a"}, i % 7, T0 + i * 30_000) for i in range(20)]
    samples += [sample("DCGM_FI_DEV_GPU_UTIL", {"UUID": "GPU-b"}, 50.5, T0 + i * 30_000) for i in range(4)]
    samples += [
        sample("kube_pod_status_phase", {"phase": "Running", "pod": "p"}, 1, T0 + i * 30_000)
        for i in range(20)
    ]
    samples += [
        sample("kube_pod_status_phase", {"phase": "Pending", "pod": "p"}, 0, T0 + i * 30_000)
        for i in range(20)
    ]
    at = T0 + 300_000  # the window [T0, T0 + 300 s]: scrapes 0..10 of a, 0..3 of b
    lines = [
        _request("DCGM_FI_DEV_GPU_UTIL[300000ms]", at),
        _request('kube_pod_status_phase{phase="Running"}[300000ms]', at),
    ]
    util, phase = remote_read.recorded_requests(iter(lines))
    with serve_samples(samples, tmp_path) as server:
        _, body = remote_read.fetch_remote(server.url, util, remote_read.SAMPLES)
        response = remote_read.prompb()["ReadResponse"]()
        response.ParseFromString(body)
        got = {
            dict((label.name, label.value) for label in series.labels)["UUID"]: [
                (s.timestamp, s.value) for s in series.samples
            ]
            for series in response.results[0].timeseries
        }
        assert got == {
            "GPU-a": [(T0 + i * 30_000, float(i % 7)) for i in range(11)],
            "GPU-b": [(T0 + i * 30_000, 50.5) for i in range(4)],
        }
        columns = sorted((ts.tolist(), values.tolist()) for ts, values in remote_read.response_columns(body))
        assert sum(len(ts) for ts, _ in columns) == 15
        assert columns == sorted(
            ([ts for ts, _ in samples_of], [v for _, v in samples_of]) for samples_of in got.values()
        )
        _, chunks = remote_read.fetch_remote(server.url, util, remote_read.STREAMED_XOR_CHUNKS)
        assert remote_read.samples_in_chunks(chunks) == 15
        _, json_body = remote_read.fetch_json(server.url, util)
        assert remote_read.samples_in_json(json_body) == 15
        # The label matcher is sent: the Pending series is not read.
        _, body = remote_read.fetch_remote(server.url, phase, remote_read.SAMPLES)
        assert sum(len(ts) for ts, _ in remote_read.response_columns(body)) == 11
