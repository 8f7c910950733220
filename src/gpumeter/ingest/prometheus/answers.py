"""The server's answers as samples: the JSON checked for the shape of a PromQL API answer, and each series'
samples as arrays (only those of the half-open window). raw_tables.py makes the series of a pull into the raw
tables.
"""

from __future__ import annotations

import io
import operator
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv


class UnexpectedAnswer(Exception):
    """The server answered, but not in the shape of a PromQL API's answer."""

    hint = "check that `url` is a Prometheus-compatible API root"

    def __init__(self, problem: str) -> None:
        super().__init__(f"unexpected response ({problem})")
        self.reason = str(self)


class PartialAnswer(Exception):
    """The server answered, but says its answer may be incomplete: `warnings` (a Prometheus remote-read
    endpoint, a Thanos store or a Mimir querier that failed; "All of the data that was successfully collected
    will be returned", the API says) or VictoriaMetrics' `isPartial` (a vmstorage node that did not answer).
    Billing from it would undercount (R1); `infos` are notes on the query and are not this."""

    hint = (
        "a store, ingester or remote-read endpoint behind the server did not answer: check it (the server's "
        "log names it), then run the day again; nothing was stored from this answer"
    )

    def __init__(self, said: str) -> None:
        super().__init__(f"the server says its answer may be incomplete ({said})")
        self.reason = str(self)


class Sample(msgspec.Struct, array_like=True, gc=False, forbid_unknown_fields=True):
    """One `[seconds, "value"]` pair of a matrix answer. A struct the garbage collector does not track
    (a tuple would be): a pull decodes one per sample while holding much else."""

    seconds: float
    value: str


class MatrixSeries(msgspec.Struct, gc=False):
    """One series of a `matrix` answer as it came: its labels and its `[seconds, "value"]` samples as JSON
    text. The labels are decoded once per label set (LabelSets), the samples of all series at once
    (matrix_samples)."""

    metric: msgspec.Raw
    values: msgspec.Raw


@dataclass(frozen=True, eq=False)
class LabelSet:
    """A series' labels as decoded. One object per label set and source (label_set), compared and hashed as
    that object: a pull gathers a series' samples by it."""

    labels: dict[str, str]


# A source's label sets by the JSON text they came as: the same series comes back in every window and part
# of a pull, and its labels are decoded once.
LabelSets = dict[bytes, LabelSet]
_LABELS = msgspec.json.Decoder(dict[str, str])


def label_set(raw: bytes, known: LabelSets) -> LabelSet:
    """The labels of a matrix series given as JSON text, decoded once per text (`known`, filled here);
    UnexpectedAnswer where they are not an object of strings with a `__name__`."""
    found = known.get(raw)
    if found is None:
        try:
            labels = _LABELS.decode(raw)
        except msgspec.DecodeError as exc:
            raise UnexpectedAnswer(_shape_problem(exc, "a series' labels are")) from None
        if "__name__" not in labels:
            raise UnexpectedAnswer("a series without __name__")
        found = known[raw] = LabelSet(labels)
    return found


class VectorSeries(msgspec.Struct, gc=False):
    """One series of a `vector` answer: only its labels are read (an aggregate's flag)."""

    metric: dict[str, str]


class _Data(msgspec.Struct, gc=False):
    resultType: str | None = None  # noqa: N815 - the API's name
    result: msgspec.Raw = msgspec.Raw()  # decoded once resultType is known, by the type it names


class _Answer(msgspec.Struct, gc=False):
    status: object = None
    error: object = ""
    data: _Data | None = None
    warnings: object = None
    isPartial: object = None  # noqa: N815 - VictoriaMetrics' name


def _incomplete(answer: _Answer) -> str | None:
    """What a successful answer says of its own completeness, in words; None when it says nothing."""
    said = []
    if answer.isPartial is True:
        said.append("isPartial: true")
    if answer.warnings:
        warnings = answer.warnings if isinstance(answer.warnings, list) else [answer.warnings]
        said.append("warnings: " + "; ".join(str(w) for w in warnings))
    return ", ".join(said) or None


class NotJson(Exception):
    """The body is not JSON at all (a cut or foreign body), as opposed to JSON of an unexpected shape."""


_ANSWER = msgspec.json.Decoder(_Answer)
_RESULTS: dict[str, msgspec.json.Decoder[Any]] = {
    "matrix": msgspec.json.Decoder(list[MatrixSeries]),
    "vector": msgspec.json.Decoder(list[VectorSeries]),
}


def decode_answer(body: bytes, result_type: str = "matrix", known: LabelSets | None = None) -> list[Any]:
    """`data.result` of an instant query's answer, decoded straight into typed series (no generic JSON
    objects), once the answer is seen to be one of `result_type`: `matrix` (raw samples of range selectors,
    every series named: list[tuple[LabelSet, bytes]], each series' label set and its samples' JSON text;
    labels decoded once per text in `known`) or `vector` (an aggregate, labels only: list[VectorSeries]).
    NotJson where the body is not JSON, UnexpectedAnswer where it is JSON of another shape, PartialAnswer
    where the server says the answer may be incomplete."""
    try:
        answer = _ANSWER.decode(body)
    except msgspec.ValidationError as exc:
        raise UnexpectedAnswer(_shape_problem(exc, "the answer is")) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise NotJson(str(exc)) from None
    if answer.status != "success":
        raise UnexpectedAnswer(f"status {answer.status!r}: {answer.error or ''}")
    incomplete = _incomplete(answer)
    if incomplete is not None:
        raise PartialAnswer(incomplete)
    data = answer.data
    if data is None or not memoryview(data.result)[:1] == b"[":
        raise UnexpectedAnswer("no data.result list")
    if data.resultType != result_type:
        raise UnexpectedAnswer(f"resultType {data.resultType!r}, expected {result_type!r}")
    try:
        result = _RESULTS[result_type].decode(data.result)
    except msgspec.DecodeError as exc:  # the raw slice is valid JSON already: a shape problem
        raise UnexpectedAnswer(_shape_problem(exc, "a series is")) from None
    if result_type == "matrix":
        known = {} if known is None else known
        return [(label_set(bytes(item.metric), known), bytes(item.values)) for item in result]
    return result


def _shape_problem(exc: Exception, what: str) -> str:
    return f"{what} not in the API's shape: {exc}"


def parse_timestamp_ms(ts: Any) -> int:
    """Prometheus' float seconds (e.g. 1700000000.123) -> int ms. round(), never int(): 0.123 * 1000 is
    122.99999999999999 in binary floating point."""
    return round(float(ts) * 1000)


def samples(values: list[Sample], w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """The samples with w0 <= ts < w1 (the half-open window, R1/R2), as int64 ms and float64. Timestamps
    as parse_timestamp_ms (rint rounds half to even, as round() does); values parsed as float() parses
    them ("NaN", "+Inf", "-0" included)."""
    n = len(values)
    seconds = np.fromiter(map(_SECONDS, values), np.float64, n)
    ts = np.rint(seconds * 1000).astype(np.int64)
    try:
        vals = np.array(list(map(_VALUE, values)), np.float64) if n else np.empty(0, np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise UnexpectedAnswer(f'a sample is not [seconds, "value"]: {exc}') from None
    keep = (ts >= w0) & (ts < w1)
    if keep.all():
        return ts, vals
    return ts[keep], vals[keep]


_SECONDS = operator.attrgetter("seconds")
_VALUE = operator.attrgetter("value")
_SAMPLES = msgspec.json.Decoder(list[Sample])
# What is left of `[[1700000000.123,"0.5"],...]` once these bytes are gone: numbers and commas.
_SAMPLE_PUNCTUATION = b'[]" \t\r\n'


def matrix_samples(
    result: list[tuple[LabelSet, bytes]], w0: int, w1: int
) -> tuple[int, list[tuple[LabelSet, np.ndarray, np.ndarray]]]:
    """(samples received, each series' label set and samples with w0 <= ts < w1) of a decoded matrix answer,
    series without a sample in the window left out. As `samples` reads them, but every series' numbers are
    parsed in one pass of Arrow's CSV reader (no Python object per sample; the interpreter is free
    meanwhile): the samples' punctuation is dropped, so the text must be `[[number,"number"],...]` to the
    byte, as Prometheus, Thanos, Mimir and VictoriaMetrics write it. An answer that is not is read sample by
    sample (`samples`), which accepts any JSON layout and names what is wrong."""
    if not result:
        return 0, []
    raws = [raw for _, raw in result]
    counts = np.fromiter((raw.count(b"[") - 1 for raw in raws), np.int64, len(raws))
    total = int(counts.sum())
    numbers = _numbers(raws, counts, total)
    if numbers is None:
        out = []
        for labels, raw in result:
            try:
                values = _SAMPLES.decode(raw)
            except msgspec.DecodeError as exc:
                raise UnexpectedAnswer(f'a sample is not [seconds, "value"]: {exc}') from None
            out.append((labels, *samples(values, w0, w1)))
        return total, [got for got in out if len(got[1])]
    ts = np.rint(numbers[0::2] * 1000).astype(np.int64)
    values = numbers[1::2]
    keep = (ts >= w0) & (ts < w1)
    if not keep.all():  # counts per series of the samples kept
        counts = np.bincount(np.repeat(np.arange(len(counts)), counts)[keep], minlength=len(counts))
        ts, values = ts[keep], values[keep]
    ends = np.cumsum(counts)
    out = [
        (labels, ts[start:end], values[start:end])
        for (labels, _), start, end in zip(result, (ends - counts).tolist(), ends.tolist(), strict=True)
        if end > start
    ]
    return total, out


def _numbers(raws: list[bytes], counts: np.ndarray, total: int) -> np.ndarray | None:
    """The answer's samples' numbers, seconds and value alternating, as float() parses them ("NaN", "+Inf"
    and "-0" included); None where the text is not `[[number,"number"],...]` to the byte."""
    # Each sample `[n,"n"]`: a bracket and two quotes in its series, one quote after a comma.
    if any(
        (raw[:2] != b"[[" and raw != b"[]") or raw.count(b'"') != 2 * n
        for raw, n in zip(raws, counts.tolist(), strict=True)
    ):
        return None
    if not total:
        return np.empty(0, np.float64)
    text = b",".join(raw for raw in raws if raw != b"[]")
    if text.count(b',"') != total:
        return None
    # One number per line, read by Arrow's CSV reader: the numbers are parsed straight from the text (no list
    # of strings made first), by the parser of Arrow's string-to-float cast.
    text = text.translate(_COMMA_TO_NEWLINE, _SAMPLE_PUNCTUATION)
    try:
        numbers = pa_csv.read_csv(
            io.BytesIO(text), read_options=_NUMBER_LINES, parse_options=_NUMBER_TEXT, convert_options=_NUMBERS
        ).column(0)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if len(numbers) != 2 * total:  # an empty field (`[,""]`) makes an empty line, which the reader skips
        return None
    return numbers.to_numpy()


_COMMA_TO_NEWLINE = bytes.maketrans(b",", b"\n")
_NUMBER_LINES = pa_csv.ReadOptions(column_names=["n"], use_threads=False, block_size=1 << 26)
_NUMBER_TEXT = pa_csv.ParseOptions(quote_char=False, escape_char=False, newlines_in_values=False)
# "NaN" is a number here, not a null (Arrow's default null spellings include it): nothing is null.
_NUMBERS = pa_csv.ConvertOptions(
    column_types={"n": pa.float64()},
    null_values=[],
    strings_can_be_null=False,
    quoted_strings_can_be_null=False,
)


__all__ = [
    "LabelSet",
    "LabelSets",
    "MatrixSeries",
    "NotJson",
    "PartialAnswer",
    "Sample",
    "UnexpectedAnswer",
    "VectorSeries",
    "decode_answer",
    "label_set",
    "matrix_samples",
    "parse_timestamp_ms",
    "samples",
]
