"""The kubeconfig path of the Prometheus source (R5): ResourceClaims and ResourceSlices listed with the
official `kubernetes` client from a real HTTP server on 127.0.0.1 that answers the `resource.k8s.io/v1`
list endpoints (token auth, paging), snapshotted per fetch; a 403 and a 500 give one clear SourceError."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

# The kubeconfig path needs the `kubernetes` package: pinned in requirements.lock, so its absence fails here.
import kubernetes  # noqa: F401
import pytest

from metering import simulator
from metering.config import PrometheusSource
from metering.k8s_objects import parse_resource_claims, parse_resource_slices
from metering.prometheus import PrometheusRawSource
from metering.sources import SourceError

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
    snapshot = src.last_k8s_snapshot
    assert snapshot["resourceclaims"]["items"] == objects["resourceclaims"]["items"]
    assert snapshot["resourceslices"]["items"] == objects["resourceslices"]["items"]
    assert snapshot["fetched_at"].endswith("Z")


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
