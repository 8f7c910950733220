"""The kubeconfig path of the Prometheus source (R5): ResourceClaims and ResourceSlices listed with the
official `kubernetes` client from a real HTTP server on 127.0.0.1 that answers the `resource.k8s.io/v1`
list endpoints (token auth, paging), snapshotted per fetch; a 403 and a 500 give one clear SourceError. The
snapshot job (gpumeter/pipelines/k8s_snapshots.py) run in a Dagster instance against the same server keeps timed
snapshots that the source reads (R5)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

# The kubeconfig path needs the `kubernetes` package: pinned in requirements.lock, so its absence fails here.
import duckdb
import kubernetes  # noqa: F401
import pytest
from dagster import DagsterInstance, build_schedule_context

import gpumeter_sim as simulator
from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import SourceError
from gpumeter.ingest.k8s_objects import parse_resource_claims, parse_resource_slices
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.models.project import SQL_DIR

TOKEN = "k8s-test-token"
SPEC = simulator.FactorySpec(
    cluster="k8s", days=1, scrape_interval_s=3600, h100_nodes=2, a100_nodes=1, h200_nodes=0, gpus_per_node=4
)
DAY = SPEC.start


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    sim = simulator.simulate_day(SPEC, DAY)
    assert sim.resource_claims["items"] and sim.resource_slices["items"]
    return {"resourceclaims": sim.resource_claims, "resourceslices": sim.resource_slices}


Answer = Callable[[str, dict[str, str]], tuple[int, dict[str, Any]]]


class ApiServer:
    """A Kubernetes API server as far as listing resource.k8s.io/v1 objects goes: pages of one item
    (`limit`/`continue`), bearer-token auth, and an optional `answer` overriding any request."""

    def __init__(self, objects: dict[str, dict[str, Any]], answer: Answer | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return None

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parsed = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(parsed.query).items()}
                outer.requests.append(
                    {"path": parsed.path, "params": params, "auth": self.headers.get("Authorization")}
                )
                status, body = outer.route(parsed.path, params, self.headers.get("Authorization", ""), answer)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.objects = objects
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True

    def route(
        self, path: str, params: dict[str, str], auth: str, answer: Answer | None
    ) -> tuple[int, dict[str, Any]]:
        if answer is not None:
            return answer(path, params)
        if auth != f"Bearer {TOKEN}":
            return 401, _status(401, "Unauthorized")
        prefix = "/apis/resource.k8s.io/v1/"
        plural = path.removeprefix(prefix)
        if not path.startswith(prefix) or plural not in self.objects:
            return 404, _status(404, f"the server could not find the requested resource ({path})")
        items = self.objects[plural]["items"]
        start = int(params.get("continue") or 0)
        limit = min(int(params.get("limit", len(items))), 1)  # one item per page: paging is exercised
        page = items[start : start + limit]
        more = start + limit < len(items)
        metadata = {"resourceVersion": "42", **({"continue": str(start + limit)} if more else {})}
        return 200, {"apiVersion": "resource.k8s.io/v1", "kind": "List", "metadata": metadata, "items": page}

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": TOKEN}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        ),
        encoding="utf-8",
    )
    return path


def _source(kubeconfig: Path) -> PrometheusRawSource:
    # No metrics: only the Kubernetes objects are read (no Prometheus is needed for them).
    spec = PrometheusSource(url="http://127.0.0.1:9", kubeconfig=str(kubeconfig))
    return PrometheusRawSource(spec, "k8s", dcgm_metrics=(), kube_metrics=())


@pytest.fixture
def api(objects: dict[str, dict[str, Any]]) -> Iterator[ApiServer]:
    with ApiServer(objects) as server:
        yield server


def test_claims_and_slices_come_from_the_api_with_the_token(
    api: ApiServer, objects: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    src = _source(_kubeconfig(tmp_path / "kubeconfig", api.url))
    raw = src.fetch_day("k8s", DAY, 0)
    # The same tables as from the `kubectl get -o json` documents themselves (R5).
    assert raw.dra_allocations.equals(parse_resource_claims(objects["resourceclaims"], "k8s", "x"))
    assert raw.dra_devices.equals(parse_resource_slices(objects["resourceslices"], "k8s", "x"))
    assert raw.dra_allocations.num_rows == len(objects["resourceclaims"]["items"]) > 0
    # Paged: one request per item, then no more.
    claims_calls = [r for r in api.requests if r["path"].endswith("/resourceclaims")]
    assert len(claims_calls) == len(objects["resourceclaims"]["items"])
    assert all(r["auth"] == f"Bearer {TOKEN}" for r in api.requests)
    # The snapshot keeps the documents as read, for the pipeline to persist beside the raw day.
    snapshot = raw.k8s_snapshot
    assert snapshot is not None
    assert snapshot.documents["resourceclaims"]["items"] == objects["resourceclaims"]["items"]
    assert snapshot.documents["resourceslices"]["items"] == objects["resourceslices"]["items"]
    assert snapshot.fetched_at.utcoffset() == timedelta(0)


def test_a_file_wins_over_the_api_for_its_kind(
    api: ApiServer, objects: dict[str, Any], tmp_path: Path
) -> None:
    claims_file = tmp_path / "claims.json"
    claims_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}), encoding="utf-8")
    spec = PrometheusSource(
        url="http://127.0.0.1:9",
        kubeconfig=str(_kubeconfig(tmp_path / "kubeconfig", api.url)),
        claims_file=str(claims_file),
    )
    raw = PrometheusRawSource(spec, "k8s", dcgm_metrics=(), kube_metrics=()).fetch_day("k8s", DAY, 0)
    assert raw.dra_allocations.num_rows == 0 and raw.dra_devices.num_rows > 0
    assert {r["path"].rsplit("/", 1)[1] for r in api.requests} == {"resourceslices"}


@pytest.mark.parametrize(
    ("status", "words"),
    [(403, "RBAC"), (500, "check access")],
)
def test_a_refusing_or_failing_api_server_is_one_clear_error(
    objects: dict[str, Any], tmp_path: Path, status: int, words: str
) -> None:
    def refuse(path: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
        return status, _status(status, "resourceclaims.resource.k8s.io is forbidden: User cannot list")

    with ApiServer(objects, refuse) as server:
        src = _source(_kubeconfig(tmp_path / "kubeconfig", server.url))
        with pytest.raises(SourceError) as info:
            src.fetch_day("k8s", DAY, 0)
    message = str(info.value)
    assert str(tmp_path / "kubeconfig") in message and "resourceclaims" in message and words in message
    assert f"HTTP {status}" in message and "forbidden: User cannot list" in message
    assert "\n" not in message and "Traceback" not in message and "headers" not in message.lower()


def test_an_api_server_without_dra_says_so(objects: dict[str, Any], tmp_path: Path) -> None:
    with ApiServer({}) as server:  # every resource.k8s.io version answers 404
        with pytest.raises(SourceError, match="serves no resource.k8s.io resourceclaims.*DRA enabled"):
            _source(_kubeconfig(tmp_path / "kubeconfig", server.url)).fetch_day("k8s", DAY, 0)
        assert [r["path"] for r in server.requests] == [
            f"/apis/resource.k8s.io/{v}/resourceclaims" for v in ("v1", "v1beta2", "v1beta1")
        ]


def test_an_unreadable_kubeconfig_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [", encoding="utf-8")
    with pytest.raises(SourceError, match="cannot be loaded"):
        _source(bad).fetch_day("k8s", DAY, 0)


# --- DRA snapshots over time (R5): the snapshot job, against the same API server ---------------------


def _snapshot_config(tmp_path: Path, kubeconfig: Path, snapshots: Path) -> Path:
    doc = {
        "clusters": [
            {
                "name": "k8s",
                "source": {
                    "kind": "prometheus",
                    "url": "http://127.0.0.1:9",
                    "kubeconfig": str(kubeconfig),
                    "k8s_snapshots_dir": str(snapshots),
                },
            }
        ],
        "scrape_interval_seconds": 60,
        "rate_card": {"models": [{"model": "H100-80GB", "price_per_gpu_hour": 3.6}]},
        "warehouse": {"path": str(tmp_path / "warehouse")},
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_the_api_snapshot_is_timed_by_its_first_request(api: ApiServer, tmp_path: Path) -> None:
    from gpumeter.ingest.kube_api import KubeApi

    before = _now_ms()
    taken, doc = KubeApi(str(_kubeconfig(tmp_path / "kubeconfig", api.url))).snapshot("resourceclaims")
    after = _now_ms()
    assert before <= taken <= after and doc["kind"] == "List" and len(doc["items"]) > 1


def test_the_snapshot_job_keeps_timed_snapshots_idempotently_and_the_source_reads_them(
    api: ApiServer, objects: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The schedule's tick -> one run of snapshot_k8s_objects in a Dagster instance: both kinds listed from
    the API server and written as `<kind>-<time>.json` in the cluster's day folder. The same tick again
    writes nothing and asks the server nothing. A claim deleted before the next tick is in the first
    snapshot only: the Prometheus source reads both snapshots with their times, and staging ends the claim
    at the second (stg_dra_allocations run on the rows read)."""
    from gpumeter.ingest.k8s_objects import snapshot_files
    from gpumeter.pipelines.definitions import build_definitions
    from gpumeter.pipelines.k8s_snapshots import SNAPSHOT_JOB, SNAPSHOT_SCHEDULE

    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", api.url)
    defs = build_definitions(_snapshot_config(tmp_path, kubeconfig, snapshots))
    job = defs.resolve_job_def(SNAPSHOT_JOB)
    tick = datetime.now(UTC) - timedelta(seconds=1)  # its 5-minute slot is now
    with build_schedule_context(scheduled_execution_time=tick) as context:
        request = defs.resolve_schedule_def(SNAPSHOT_SCHEDULE)(context)
    assert request.run_key == f"k8s-snapshot-{tick.isoformat().replace('+00:00', 'Z')}"

    def kept() -> list[tuple[str, int | None]]:
        return [
            (f.kind, f.taken_ms)
            for d in sorted(snapshots.glob("cluster=k8s/day=*"))
            for f in snapshot_files(d)
        ]

    with DagsterInstance.ephemeral() as instance:
        before = _now_ms()
        assert job.execute_in_process(run_config=request.run_config, instance=instance).success
        first = kept()
        assert sorted(kind for kind, _ in first) == ["resourceclaims", "resourceslices"]
        assert all(before <= taken <= _now_ms() for _, taken in first)
        asked = len(api.requests)
        assert job.execute_in_process(run_config=request.run_config, instance=instance).success
        assert kept() == first and len(api.requests) == asked  # idempotent: nothing listed, nothing written

        gone = objects["resourceclaims"]["items"].pop(0)  # deleted with its pod
        try:
            next_tick = {
                "ops": {"take_k8s_snapshots": {"config": {"tick": _iso_ms(max(t for _, t in first) + 1)}}}
            }
            assert job.execute_in_process(run_config=next_tick, instance=instance).success
        finally:
            objects["resourceclaims"]["items"].insert(0, gone)
    claim_times = sorted(t for kind, t in kept() if kind == "resourceclaims")
    assert len(claim_times) == 2 and len(kept()) == 4
    written = sorted(snapshots.glob("cluster=k8s/day=*/resourceclaims-*.json"))
    assert json.loads(written[0].read_text())["items"] == objects["resourceclaims"]["items"]
    assert not list(snapshots.glob("cluster=k8s/day=*/.*"))  # no temp file left

    spec = PrometheusSource(
        url="http://127.0.0.1:9", kubeconfig=str(kubeconfig), k8s_snapshots_dir=str(snapshots)
    )
    src = PrometheusRawSource(spec, "k8s", dcgm_metrics=(), kube_metrics=())
    asked = len(api.requests)
    raw = src.fetch_window("k8s", claim_times[0] - 3_600_000, claim_times[1] + 3_600_000)
    assert len(api.requests) == asked  # with a snapshot folder, the source never lists the API itself
    claims = raw.dra_allocations.to_pylist()
    name = gone["metadata"]["name"]
    assert sorted(r["snapshot_ms"] for r in claims if r["claim_name"] == name) == [claim_times[0]]
    assert sorted(r["snapshot_ms"] for r in claims if r["claim_name"] is None) == claim_times  # markers
    assert raw.k8s_snapshot is not None
    assert sorted(map(str, raw.k8s_snapshot.timed_files)) == [
        str(p) for p in sorted(snapshots.glob("cluster=k8s/day=*/*.json"))
    ]

    con = duckdb.connect()
    con.execute("set variable cluster = 'k8s'")
    con.register("raw_dra_allocations", raw.dra_allocations)
    con.register("raw_dra_devices", raw.dra_devices)
    staging = Path(str(SQL_DIR)) / "staging"
    for model in ("stg_dra_object_spans", "stg_dra_allocations"):
        con.execute(f"create view {model} as {(staging / f'{model}.sql').read_text()}")
    spans = {
        (r[0], r[1])
        for r in con.execute("select claim_name, valid_until_ms from stg_dra_allocations").fetchall()
    }
    others = {i["metadata"]["name"] for i in objects["resourceclaims"]["items"]} - {name}
    assert spans == {(name, claim_times[1])} | {(other, None) for other in others}


def test_the_snapshot_job_needs_its_folder_and_says_so(api: ApiServer, tmp_path: Path) -> None:
    from gpumeter.pipelines.definitions import build_definitions
    from gpumeter.pipelines.k8s_snapshots import SNAPSHOT_JOB

    missing = tmp_path / "snapshots"
    defs = build_definitions(
        _snapshot_config(tmp_path, _kubeconfig(tmp_path / "kubeconfig", api.url), missing)
    )
    with DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def(SNAPSHOT_JOB).execute_in_process(
            instance=instance, raise_on_error=False
        )
    assert not result.success
    failure = result.failure_data_for_node("take_k8s_snapshots")
    assert failure is not None and f"snapshot folder {missing}" in str(failure.error.message)
    assert "does not exist: create it" in str(failure.error.message) and not missing.exists()
    assert api.requests == []


def test_a_missing_snapshot_folder_stops_the_source_naming_it(tmp_path: Path) -> None:
    spec = PrometheusSource(url="http://127.0.0.1:9", k8s_snapshots_dir=str(tmp_path / "nope"))
    src = PrometheusRawSource(spec, "k8s", dcgm_metrics=(), kube_metrics=())
    with pytest.raises(
        SourceError, match=r"snapshot folder .*nope does not exist \(k8s_snapshots_dir\): create it"
    ):
        src.fetch_day("k8s", DAY, 0)


def test_without_snapshot_settings_no_snapshot_job_is_defined(tmp_path: Path) -> None:
    from gpumeter.pipelines.definitions import build_definitions
    from gpumeter.pipelines.k8s_snapshots import SNAPSHOT_JOB

    config = _snapshot_config(tmp_path, tmp_path / "kubeconfig", tmp_path)
    config.write_text(config.read_text().replace(f', "k8s_snapshots_dir": "{tmp_path}"', ""))
    defs = build_definitions(config)
    assert SNAPSHOT_JOB not in {j.name for j in defs.resolve_all_job_defs()}
