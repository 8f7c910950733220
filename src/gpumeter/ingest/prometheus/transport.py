"""The HTTP transport of the Prometheus source: instant queries through prometheus-api-client's session (its
headers, TLS and timeout), with the auth headers named by environment variables, retries with exponential
backoff on connection errors, timeouts, HTTP 5xx/429 and unreadable answers (never on another 4xx), a
deadline on the whole answer, and every failure as one `SourceError` naming the URL, the query and what to
do. Secrets this transport sent are never quoted back into a message.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from gpumeter.config import PrometheusSource
from gpumeter.ingest.contract import SourceError, one_line
from gpumeter.ingest.prometheus.answers import (
    LabelSets,
    NotJson,
    PartialAnswer,
    UnexpectedAnswer,
    decode_answer,
)

log = logging.getLogger(__name__)

_BACKOFF_CAP_S = 30.0
_READ_CHUNK = 64 * 1024


class Retryable(Exception):
    """One attempt failed in a way that another attempt may fix."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


class PullAborted(Exception):
    """Another query of the pull has failed: this one stops (before its next attempt), so that a failing
    server is not asked the rest of the pull's queries. Internal: the pull raises the first failure."""


class TooLarge(Exception):
    """The server refused the window as too large (HTTP 422): split it."""


class _Client(PrometheusConnect):
    """prometheus-api-client's connection (session, headers, TLS, timeout) with the raw response of an
    instant query: `custom_query` hides the HTTP status, `status`/`warnings` and the result type, which
    the retry policy and the validation need."""

    def instant_query(
        self, query: str, eval_time: str, extra: dict[str, str], encoding: str
    ) -> requests.Response:
        return self._session.request(
            method="GET",
            url=f"{self.url}/api/v1/query",
            params={"query": query, "time": eval_time, **extra},
            verify=self._session.verify,
            # Asked for explicitly (requests' default asks gzip and deflate); the body is decompressed as
            # it is read (_read_within), which counts the bytes on the wire.
            headers={**(self.headers or {}), "Accept-Encoding": encoding},
            auth=self.auth,
            cert=self._session.cert,
            timeout=self._timeout,
            stream=True,  # the body is read by _read_within, against the attempt's deadline
        )


def prom_time(ms: int) -> str:
    """Epoch ms as the exact decimal seconds the HTTP API takes (no float rounding)."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    return f"{sign}{ms // 1000}.{ms % 1000:03d}"


def iso_ms(ms: int) -> str:
    """Epoch ms as ISO 8601 UTC, for messages."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class PrometheusTransport:
    """Instant queries to one PromQL API (`spec.url`), retried per `spec.retries` with backoff from
    `backoff_seconds`. One HTTP client per thread of a pull (`pull()`), closed when the pull ends.

    `queries`, `bytes_received` (bodies as decoded) and `wire_bytes` (bodies as they travelled, compressed
    where `spec.encoding` is gzip) count what was moved since `reset_counts` (attempts included)."""

    def __init__(
        self,
        spec: PrometheusSource,
        *,
        backoff_seconds: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec = spec
        self.url = spec.url.rstrip("/")
        self.backoff_seconds = backoff_seconds
        self._sleep = sleep
        self._local = threading.local()
        # Label sets decoded so far, by their JSON text (answers.label_set): kept for the source's life.
        self.label_sets: LabelSets = {}
        self._clients: list[_Client] = []
        self._stop = threading.Event()
        self._aborted = threading.Event()
        self._headers: dict[str, str] = {}
        self.queries = 0
        self.bytes_received = 0
        self.wire_bytes = 0
        self._count_lock = threading.Lock()

    def reset_counts(self) -> None:
        self.queries = 0
        self.bytes_received = 0
        self.wire_bytes = 0

    # --- a pull ------------------------------------------------------------------------------

    def load_headers(self) -> None:
        """Reads the auth headers from their environment variables (read again at each pull, so that a
        rotated token is used)."""
        self._headers = self._auth_headers()

    def begin_fetch(self) -> None:
        """A new fetch (a day, a window): what `abort` said of the last one no longer holds."""
        self._aborted = threading.Event()

    def abort(self) -> None:
        """Stops this fetch: the running pull's queries stop before their next attempt, later pulls at once."""
        self._aborted.set()
        self._stop.set()

    @contextmanager
    def pull(self) -> Iterator[threading.Event]:
        """One pull's queries: fresh per-thread clients, and an event that, once set, stops every retry
        (one query has failed, the pull is over). On leaving, the event is set and the clients closed."""
        self._local = threading.local()
        self._stop = stop = threading.Event()
        if self._aborted.is_set():
            stop.set()
        try:
            yield stop
        finally:
            stop.set()
            for client in self._clients:
                client.close()
            self._clients = []

    def client(self) -> _Client:
        """This thread's HTTP client."""
        client = getattr(self._local, "client", None)
        if client is None:
            client = _Client(
                url=self.url,
                headers=dict(self._headers),
                disable_ssl=not self.spec.verify_tls,
                retry=Retry(0, read=False),  # requests' own default: no retries here, our loop below
                timeout=self.spec.timeout_seconds,
            )
            self._local.client = client
            with self._count_lock:
                self._clients.append(client)
        return client

    # --- queries -----------------------------------------------------------------------------

    def query(self, query: str, eval_ms: int, result_type: str = "matrix") -> list[Any]:
        """`data.result` of the instant query `query` at `eval_ms` as typed series (answers.decode_answer),
        retried; TooLarge where the server refuses it as too large, else a SourceError once the attempts
        are spent."""
        eval_time = prom_time(eval_ms)
        extra = self.spec.query_parameters()
        attempts = self.spec.retries + 1
        last: Retryable | None = None
        made = 0
        stop = self._stop
        for attempt in range(attempts):
            if stop.is_set():
                raise PullAborted  # another query failed: the pull is over
            if attempt:
                self._sleep(min(_BACKOFF_CAP_S, self.backoff_seconds * 2 ** (attempt - 1)))
                if stop.is_set():
                    raise PullAborted
            with self._count_lock:
                self.queries += 1
            made += 1
            try:
                return self._attempt(query, eval_time, extra, result_type)
            except Retryable as exc:
                last = exc
                log.debug(
                    "Prometheus %s: attempt %d/%d of %r failed: %s",
                    self.url,
                    attempt + 1,
                    attempts,
                    query,
                    exc,
                )
        assert last is not None
        raise SourceError(
            f"Prometheus {self.url}: query {query!r} at {iso_ms(eval_ms)} failed after {made} attempt(s): "
            f"{last.reason}; {last.hint}"
        )

    def refused_as_too_large(self, query: str, w0: int, w1: int, exc: TooLarge) -> SourceError:
        """The error for a window the server refuses even at the smallest size the source splits to."""
        return SourceError(
            f"Prometheus {self.url}: query {query!r} at {iso_ms(w1)} is refused as too large even for a "
            f"{(w1 - w0) / 1000:g} s window ({exc}); raise the server's limits (query.max-samples, "
            "Mimir/Thanos series or chunk limits), narrow `selector`, or lower min_chunk_seconds"
        )

    def unexpected_answer(self, query: str, eval_ms: int, exc: UnexpectedAnswer) -> SourceError:
        """The error for an answer whose samples cannot be read (seen after the answer was accepted)."""
        return SourceError(
            f"Prometheus {self.url}: query {query!r} at {iso_ms(eval_ms)}: {exc.reason}; {exc.hint}"
        )

    def _timeout_error(self, exc: Exception) -> Retryable:
        return Retryable(
            f"timeout after {self.spec.timeout_seconds:g} s ({type(exc).__name__})",
            "raise timeout_seconds, lower chunk_seconds, or check the server's load",
        )

    def _attempt(self, query: str, eval_time: str, extra: dict[str, str], result_type: str) -> list[Any]:
        # requests' timeout bounds each socket read; a server trickling its body would never hit it. The
        # deadline bounds the whole attempt (to within one read of _READ_CHUNK bytes).
        deadline = time.monotonic() + self.spec.timeout_seconds
        try:
            response = self.client().instant_query(query, eval_time, extra, self.spec.encoding)
            body, wire = _read_within(response, deadline)
        except requests.Timeout as exc:
            raise self._timeout_error(exc) from None
        except requests.exceptions.SSLError as exc:  # before ConnectionError, its base: retrying cannot help
            raise SourceError(
                f"Prometheus {self.url}: TLS failed for query {query!r} ({one_line(exc)}); check the server's "
                "certificate and the CA bundle (REQUESTS_CA_BUNDLE), or set verify_tls: false"
            ) from None
        except (
            requests.ConnectionError,
            requests.exceptions.ChunkedEncodingError,
            requests.exceptions.ContentDecodingError,
        ) as exc:
            reason = exc.args[0].reason if exc.args and hasattr(exc.args[0], "reason") else None
            # urllib3's NewConnectionError (refused, unresolvable) subclasses its ConnectTimeoutError.
            timed_out = isinstance(reason, urllib3.exceptions.ReadTimeoutError) or (
                isinstance(reason, urllib3.exceptions.ConnectTimeoutError)
                and not isinstance(reason, urllib3.exceptions.NewConnectionError)
            )
            if timed_out:
                raise self._timeout_error(exc) from None
            raise Retryable(
                f"connection failed ({one_line(exc)})",
                "check `url`, that the server is up and reachable from here, and proxies/firewalls",
            ) from None
        except requests.RequestException as exc:
            raise SourceError(
                f"Prometheus {self.url}: query {query!r} could not be sent ({one_line(exc)}); check `url`"
            ) from None
        status = response.status_code
        with self._count_lock:
            self.wire_bytes += wire
            self.bytes_received += len(body)
        if status >= 500 or status == 429:
            raise Retryable(
                f"HTTP {status} {self._error_text(body)}",
                "the server failed or is overloaded: check its logs, lower max_concurrent_queries or chunk_seconds",
            )
        if status == 422:
            raise TooLarge(f"HTTP 422 {self._error_text(body)}")
        if status in (401, 403):
            raise SourceError(
                f"Prometheus {self.url}: query {query!r} was refused with HTTP {status} {self._error_text(body)}; "
                "check the token in bearer_token_env / the headers in headers_env (e.g. X-Scope-OrgID for Mimir)"
            )
        if status != 200:
            raise SourceError(
                f"Prometheus {self.url}: query {query!r} was refused with HTTP {status} {self._error_text(body)}; "
                "check `url` (the API root, e.g. http://host:9090 or https://mimir/prometheus) and `selector` "
                '(matchers such as cluster="prod-a")'
            )
        try:
            return decode_answer(body, result_type, self.label_sets)
        except NotJson as exc:
            raise Retryable(
                f"the response is not valid JSON ({exc}; {len(body)} bytes)",
                "a proxy may have cut the response: lower chunk_seconds, or check proxies in front of the server",
            ) from None
        except (UnexpectedAnswer, PartialAnswer) as exc:
            raise Retryable(exc.reason, exc.hint) from None

    # --- auth and secrets --------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.spec.headers_env:
            raw = os.environ.get(self.spec.headers_env)
            if raw is None:
                raise SourceError(
                    f"Prometheus {self.url}: environment variable {self.spec.headers_env} (headers_env) is not set; "
                    'export it as a JSON object, e.g. {"X-Scope-OrgID": "tenant-1"}, or remove headers_env'
                )
            try:
                extra = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise SourceError(
                    f"Prometheus {self.url}: {self.spec.headers_env} (headers_env) is not JSON ({exc.msg}); "
                    'it must be a JSON object of header names to values, e.g. {"X-Scope-OrgID": "tenant-1"}'
                ) from None
            if not isinstance(extra, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
            ):
                raise SourceError(
                    f"Prometheus {self.url}: {self.spec.headers_env} (headers_env) must be a JSON object of "
                    'string header names to string values, e.g. {"X-Scope-OrgID": "tenant-1"}'
                )
            headers.update(extra)
        if self.spec.bearer_token_env:
            token = os.environ.get(self.spec.bearer_token_env, "").strip()
            if not token:
                raise SourceError(
                    f"Prometheus {self.url}: environment variable {self.spec.bearer_token_env} (bearer_token_env) "
                    "is not set or empty; export the token there or remove bearer_token_env"
                )
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _error_text(self, body: bytes) -> str:
        """The server's error, quoted into errors and logs with every secret this source sent replaced: a
        proxy that echoes the request would otherwise put the token or the headers_env values there."""
        text = _error_text(body)
        for secret in self._secrets():
            text = text.replace(secret, "***")
        return text

    def _secrets(self) -> list[str]:
        values = []
        for value in self._headers.values():
            values.append(value)
            if value.startswith("Bearer "):
                values.append(value.removeprefix("Bearer "))
        # Longest first, so that a token inside a longer header value is not left half-replaced.
        return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def _read_within(response: requests.Response, deadline: float) -> tuple[bytes, int]:
    """The whole body, decompressed where the server compressed it, and the bytes it took on the wire; or
    requests.Timeout once the deadline has passed between two reads. The body is read as it travelled
    (urllib3 does not count a chunked body's bytes) and decompressed here, chunk by chunk."""
    parts = []
    wire = 0
    decoder = _decoder(response.headers.get("Content-Encoding", ""))
    try:
        try:
            for chunk in response.raw.stream(_READ_CHUNK, decode_content=False):
                wire += len(chunk)
                parts.append(decoder.decompress(chunk) if decoder else chunk)
                if time.monotonic() > deadline:
                    raise requests.Timeout("the response body took longer than timeout_seconds")
            if decoder:
                parts.append(decoder.flush())
                if not decoder.eof:
                    raise requests.exceptions.ContentDecodingError("the compressed body ends early")
        # As requests' iter_content maps urllib3's errors, so that they are retried alike.
        except urllib3.exceptions.ProtocolError as exc:
            raise requests.exceptions.ChunkedEncodingError(exc) from None
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise requests.ConnectionError(exc) from None
        except urllib3.exceptions.SSLError as exc:
            raise requests.exceptions.SSLError(exc) from None
        except zlib.error as exc:
            raise requests.exceptions.ContentDecodingError(exc) from None
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
        # A read that outlived the deadline and then broke off: the attempt had timed out first.
        if time.monotonic() > deadline:
            raise requests.Timeout("the response body took longer than timeout_seconds") from None
        raise
    finally:
        response.close()
    return b"".join(parts), wire


def _decoder(content_encoding: str) -> Any:
    """A zlib decompressor for the body's Content-Encoding (the server may not compress: asking is a wish),
    None for an uncompressed body."""
    coding = content_encoding.strip().lower()
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj()
    return None


def _error_text(body: bytes) -> str:
    """The error a server put in its body: the API's `errorType: error`, else the body's first characters."""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and doc.get("error"):
            return f"({doc.get('errorType', 'error')}: {one_line(doc['error'])})"
    except (ValueError, UnicodeDecodeError):
        pass
    text = " ".join(body[:200].decode("utf-8", errors="replace").split())
    return f"({text})" if text else ""


__all__ = ["PrometheusTransport", "PullAborted", "Retryable", "TooLarge", "iso_ms", "prom_time"]
