"""The pull's recorded requests replayed as the pull sends them (bench/fleet.py's `bare_http` step), and as
Prometheus remote reads (`/api/v1/read`) of the same samples. Remote read is not a source of gpumeter: it was
measured (bench/results/20261204T193259+0000.*) and the PromQL path kept, so the harness no longer runs it;
the remote-read half stays only for tests/test_remote_read.py and docs/prometheus.md.

The pull asks for raw samples with instant queries of range selectors (`metric{labels}[Nms]` at time T); each
such request is the remote-read query of the same matchers over [T - N, T] (Prometheus 2's range selectors
include both ends). A request that computes something (the XID query: `max_over_time(...) != 0 or ...`) has
no remote-read form and is fetched as the pull fetches it.

The messages are prometheus/prompb's (remote.proto, types.proto), declared here field for field and built by
protobuf's own descriptor pool; snappy is cramjam's.
"""

from __future__ import annotations

import gzip
import json
import re
import struct
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

SAMPLES = 0  # ReadRequest.ResponseType: one snappy-compressed ReadResponse of raw samples
STREAMED_XOR_CHUNKS = 1  # frames of ChunkedReadResponse, samples in the TSDB's own XOR chunks

_SELECTOR = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\[(?P<range>\d+)ms\]$")
_EQUALS = re.compile(r'\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*(?:,|$)')


@cache
def prompb() -> dict[str, Any]:
    """The prompb message classes the remote-read API speaks, by name."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FieldDescriptorProto
    types = {"int64": fdp.TYPE_INT64, "double": fdp.TYPE_DOUBLE, "string": fdp.TYPE_STRING,
             "bytes": fdp.TYPE_BYTES, "enum": fdp.TYPE_ENUM, "message": fdp.TYPE_MESSAGE}  # fmt: skip
    messages: dict[str, list[tuple[str, int, str, bool, str]]] = {
        # name: [(field, number, type, repeated, message or enum type)]
        "Sample": [("value", 1, "double", False, ""), ("timestamp", 2, "int64", False, "")],
        "Label": [("name", 1, "string", False, ""), ("value", 2, "string", False, "")],
        "TimeSeries": [("labels", 1, "message", True, "Label"), ("samples", 2, "message", True, "Sample")],
        "LabelMatcher": [
            ("type", 1, "enum", False, "LabelMatcher.Type"),
            ("name", 2, "string", False, ""),
            ("value", 3, "string", False, ""),
        ],
        "Query": [
            ("start_timestamp_ms", 1, "int64", False, ""),
            ("end_timestamp_ms", 2, "int64", False, ""),
            ("matchers", 3, "message", True, "LabelMatcher"),
        ],
        "ReadRequest": [
            ("queries", 1, "message", True, "Query"),
            ("accepted_response_types", 2, "enum", True, "ReadRequest.ResponseType"),
        ],
        "QueryResult": [("timeseries", 1, "message", True, "TimeSeries")],
        "ReadResponse": [("results", 1, "message", True, "QueryResult")],
        "Chunk": [
            ("min_time_ms", 1, "int64", False, ""),
            ("max_time_ms", 2, "int64", False, ""),
            ("type", 3, "enum", False, "Chunk.Encoding"),
            ("data", 4, "bytes", False, ""),
        ],
        "ChunkedSeries": [("labels", 1, "message", True, "Label"), ("chunks", 2, "message", True, "Chunk")],
        "ChunkedReadResponse": [
            ("chunked_series", 1, "message", True, "ChunkedSeries"),
            ("query_index", 2, "int64", False, ""),
        ],
    }
    enums = {
        "LabelMatcher": ("Type", ["EQ", "NEQ", "RE", "NRE"]),
        "ReadRequest": ("ResponseType", ["SAMPLES", "STREAMED_XOR_CHUNKS"]),
        "Chunk": ("Encoding", ["UNKNOWN", "XOR", "HISTOGRAM", "FLOAT_HISTOGRAM"]),
    }
    file = descriptor_pb2.FileDescriptorProto(name="gpumeter_bench_prompb.proto", package="prometheus",
                                              syntax="proto3")  # fmt: skip
    for name, fields in messages.items():
        message = file.message_type.add(name=name)
        if name in enums:
            enum_name, values = enums[name]
            enum = message.enum_type.add(name=enum_name)
            for number, value in enumerate(values):
                enum.value.add(name=value, number=number)
        for field, number, kind, repeated, type_name in fields:
            label = fdp.LABEL_REPEATED if repeated else fdp.LABEL_OPTIONAL
            added = message.field.add(name=field, number=number, type=types[kind], label=label)
            if type_name:
                added.type_name = f".prometheus.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"prometheus.{name}"))
        for name in messages
    }


# A range selector as a remote-read query: metric name, equality matchers, start and end ms (both included).
Selector = tuple[str, tuple[tuple[str, str], ...], int, int]


@dataclass(frozen=True)
class RecordedRequest:
    """One of the pull's recorded HTTP requests, and its remote-read query where it has one."""

    method: str
    path: str
    body: str
    selector: Selector | None


def recorded_requests(lines: Iterator[str]) -> list[RecordedRequest]:
    """The pull's requests as bench/fleet.py recorded them (one JSON object per line)."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        item = json.loads(line)
        params = urllib.parse.parse_qs(urllib.parse.urlsplit(item["path"]).query or item["body"])
        query, at = params["query"][0], params["time"][0]
        match = _SELECTOR.match(query.strip())
        selector = None
        if match:
            # PromQL escapes in a double-quoted label value are JSON's (\", \\).
            labels = tuple(
                (m["name"], json.loads(f'"{m["value"]}"')) for m in _EQUALS.finditer(match["labels"] or "")
            )
            end_ms = round(float(at) * 1000)
            selector = (match["name"], labels, end_ms - int(match["range"]), end_ms)
        out.append(RecordedRequest(item["method"], item["path"], item["body"], selector))
    return out


def read_request(selector: Selector, response_type: int) -> bytes:
    """The snappy-compressed ReadRequest of one selector."""
    import cramjam

    pb = prompb()
    name, labels, start_ms, end_ms = selector
    query = pb["Query"](start_timestamp_ms=start_ms, end_timestamp_ms=end_ms)
    for label, value in (("__name__", name), *labels):
        query.matchers.add(type=0, name=label, value=value)  # LabelMatcher.Type EQ
    request = pb["ReadRequest"](queries=[query], accepted_response_types=[response_type])
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def fetch_remote(url: str, request: RecordedRequest, response_type: int) -> tuple[int, bytes]:
    """One remote read: (bytes over the wire, the response body as the client must read it: the decompressed
    ReadResponse, or the chunk frames as they came)."""
    import cramjam

    if request.selector is None:
        raise ValueError(f"{request.path} computes something: it has no remote-read form")
    http = urllib.request.Request(
        url + "/api/v1/read", data=read_request(request.selector, response_type), method="POST"
    )
    http.add_header("Content-Type", "application/x-protobuf")
    http.add_header("Content-Encoding", "snappy")
    http.add_header("X-Prometheus-Remote-Read-Version", "0.1.0")
    with urllib.request.urlopen(http, timeout=600) as response:
        wire = response.read()
    if response_type == SAMPLES:
        return len(wire), bytes(cramjam.snappy.decompress_raw(wire))
    return len(wire), wire


def fetch_json(url: str, request: RecordedRequest, encoding: str = "gzip") -> tuple[int, bytes]:
    """A request as the pull sends it: (bytes over the wire, the JSON body)."""
    data = request.body.encode() if request.method == "POST" else None
    http = urllib.request.Request(url + request.path, data=data, method=request.method)
    http.add_header("Accept-Encoding", encoding)
    if data is not None:
        http.add_header("Content-Type", "application/x-www-form-urlencoded")
    with urllib.request.urlopen(http, timeout=600) as response:
        wire = response.read()
        gzipped = response.headers.get("Content-Encoding", "") == "gzip"
    return len(wire), gzip.decompress(wire) if gzipped else wire


def response_columns(body: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
    """A decompressed ReadResponse as each series' (timestamps ms, values): what a client must make of it
    before it holds samples the way the PromQL pull does (protobuf gives one Python object per sample)."""
    response = prompb()["ReadResponse"]()
    response.ParseFromString(body)
    out = []
    for result in response.results:
        for series in result.timeseries:
            samples = series.samples
            out.append(
                (
                    np.fromiter((s.timestamp for s in samples), np.int64, len(samples)),
                    np.fromiter((s.value for s in samples), np.float64, len(samples)),
                )
            )
    return out


def chunk_frames(body: bytes) -> Iterator[bytes]:
    """The ChunkedReadResponse messages of a STREAMED_XOR_CHUNKS body: each frame is a uvarint length, a
    big-endian CRC-32C of the message and the message."""
    at = 0
    while at < len(body):
        size = shift = 0
        while True:
            byte = body[at]
            at += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        at += 4  # the frame's CRC-32C: not checked, the bench counts what came
        yield body[at : at + size]
        at += size


def samples_in_chunks(body: bytes) -> int:
    """The samples a STREAMED_XOR_CHUNKS body holds: each XOR chunk starts with its sample count (big-endian
    uint16), so the chunks need not be decoded to be counted."""
    message = prompb()["ChunkedReadResponse"]()
    count = 0
    for frame in chunk_frames(body):
        message.ParseFromString(frame)
        for series in message.chunked_series:
            for chunk in series.chunks:
                count += struct.unpack_from(">H", chunk.data, 0)[0]
    return count


def samples_in_json(body: bytes) -> int:
    """The samples of a PromQL answer: a matrix's values, a vector's one value per series."""
    data = json.loads(body)["data"]
    if data["resultType"] == "matrix":
        return sum(len(series.get("values", ())) for series in data["result"])
    return len(data["result"])
