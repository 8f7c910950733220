"""A PromQL matrix answer read as the pull reads it: every series' samples parsed at once (Arrow's CSV reader, one
number a line) where the answer is in the compact layout every PromQL server writes, sample by sample where it is
not, with the same numbers either way; labels decoded once per label set. Truth is written out by hand."""

from __future__ import annotations

import math

import pytest

from gpumeter.ingest.prometheus.answers import (
    LabelSets,
    PartialAnswer,
    UnexpectedAnswer,
    decode_answer,
    matrix_samples,
)

UTIL = "DCGM_FI_DEV_GPU_UTIL"
COMPACT = (
    b'{"status":"success","data":{"resultType":"matrix","result":['
    b'{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","UUID":"GPU-1"},'
    b'"values":[[1700000000.0005,"NaN"],[1700000030,"+Inf"],[1700000060.123,"-0"],[1700000090,"1e400"]]},'
    b'{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","UUID":"GPU-2"},"values":[]},'
    b'{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","UUID":"GPU-3"},"values":[[1700000120,"0.1"]]}]}}'
)
# 1700000000.0005 s is 1700000000000.5 ms: rounded half to even, as round() does.
TS = {
    "GPU-1": [1_700_000_000_000, 1_700_000_030_000, 1_700_000_060_123, 1_700_000_090_000],
    "GPU-3": [1_700_000_120_000],
}


def _read(body: bytes, w0: int = 0, w1: int = 2**62) -> tuple[int, dict[str, tuple[list[int], list[float]]]]:
    received, series = matrix_samples(decode_answer(body, "matrix", {}), w0, w1)
    return received, {s.labels["UUID"]: (ts.tolist(), values.tolist()) for s, ts, values in series}


def _same(got: list[float], want: list[float]) -> bool:
    return all(
        (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
        for a, b in zip(got, want, strict=True)
    )


@pytest.mark.parametrize(
    "body",
    [
        COMPACT,
        # another layout (spaces, as json.dumps writes): read sample by sample, the same numbers
        COMPACT.replace(b"],[", b"], [").replace(b',"', b', "'),
    ],
)
def test_samples_are_parsed_as_float_parses_them(body: bytes) -> None:
    received, series = _read(body)
    assert received == 5
    assert set(series) == {"GPU-1", "GPU-3"}  # a series with no sample is left out
    assert series["GPU-1"][0] == TS["GPU-1"] and series["GPU-3"][0] == TS["GPU-3"]
    assert _same(series["GPU-1"][1], [math.nan, math.inf, -0.0, math.inf])
    assert series["GPU-3"][1] == [0.1]


def test_only_the_half_open_window_is_kept() -> None:
    received, series = _read(COMPACT, 1_700_000_030_000, 1_700_000_090_000)
    assert received == 5  # received counts every sample sent
    assert series["GPU-1"][0] == [1_700_000_030_000, 1_700_000_060_123]
    assert "GPU-3" not in series


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (COMPACT.replace(b'"+Inf"', b"7"), 'a sample is not [seconds, "value"]'),  # a bare number value
        (COMPACT.replace(b'"0.1"', b'"0.1","2"'), 'a sample is not [seconds, "value"]'),  # three fields
        (COMPACT.replace(b'"0.1"', b'"zero"'), 'a sample is not [seconds, "value"]'),
        # an empty value is an empty line for the CSV reader, which skips it: the count tells, not a null
        (COMPACT.replace(b'"0.1"', b'""'), 'a sample is not [seconds, "value"]'),
        (COMPACT.replace(b'"__name__":"DCGM_FI_DEV_GPU_UTIL","UUID":"GPU-3"', b'"UUID":"GPU-3"'), "__name__"),
        (COMPACT.replace(b'"UUID":"GPU-3"', b'"UUID":3'), "labels"),
    ],
)
def test_an_answer_of_another_shape_is_named(body: bytes, problem: str) -> None:
    with pytest.raises(UnexpectedAnswer, match="unexpected response") as caught:
        _read(body)
    assert problem in str(caught.value)


def test_labels_are_decoded_once_per_label_set() -> None:
    known: LabelSets = {}
    first = decode_answer(COMPACT, "matrix", known)
    again = decode_answer(COMPACT, "matrix", known)
    assert len(known) == 3
    assert all(a[0] is b[0] for a, b in zip(first, again, strict=True))
    assert first[0][0].labels == {"__name__": UTIL, "UUID": "GPU-1"}


@pytest.mark.parametrize(
    ("said", "named"),
    [
        (b'"warnings":["remote_read: connection refused"]', "warnings: remote_read: connection refused"),
        (b'"warnings":["store a down","store b down"]', "warnings: store a down; store b down"),
        (b'"warnings":"one string"', "warnings: one string"),  # not the API's list: still a warning
        (b'"isPartial":true', "isPartial: true"),
    ],
)
def test_an_answer_that_says_it_may_be_incomplete_is_refused_with_what_it_says(
    said: bytes, named: str
) -> None:
    body = COMPACT[:-1] + b"," + said + b"}"
    with pytest.raises(PartialAnswer, match="may be incomplete") as caught:
        decode_answer(body, "matrix", {})
    assert named in str(caught.value)


@pytest.mark.parametrize(
    "said", [b'"warnings":[]', b'"warnings":null', b'"isPartial":false', b'"infos":["PromQL info: a note"]']
)
def test_an_answer_that_says_nothing_missing_is_read(said: bytes) -> None:
    received, series = _read(COMPACT[:-1] + b"," + said + b"}")
    assert received == 5 and set(series) == {"GPU-1", "GPU-3"}
