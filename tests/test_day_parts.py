"""A day written in parts (storage/day_parts.py) takes parts whose string columns come dictionary-encoded (the Prometheus
pull's DCGM rows) beside plain ones, and stores plain strings: the file reads back in the table's schema with
every row, as written by hand here."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpumeter.storage.day_parts import DayInParts

SCHEMA = pa.schema(
    [("ts_ms", pa.int64()), ("uuid", pa.string()), ("pod", pa.string()), ("value", pa.float64())]
)
DICTIONARY = pa.dictionary(pa.int32(), pa.string())


def test_dictionary_encoded_parts_are_stored_as_the_schemas_strings(tmp_path: Path) -> None:
    target = tmp_path / "raw" / "data.parquet"
    target.parent.mkdir()
    staged = DayInParts({"t": target}, {"t": SCHEMA}, tmp_path / "scratch")
    # part 1: uuid dictionary-encoded with a null, pod plain; part 2: all plain
    first = pa.table(
        {
            "ts_ms": pa.array([1, 2, 3], pa.int64()),
            "uuid": pa.DictionaryArray.from_arrays(
                pa.array([1, None, 0], pa.int32()), pa.array(["GPU-b", "GPU-a"])
            ),
            "pod": pa.array(["p", "q", None]),
            "value": pa.array([0.5, 1.0, 2.0]),
        }
    )
    second = pa.table({"ts_ms": [4], "uuid": ["GPU-c"], "pod": ["r"], "value": [3.0]}, schema=SCHEMA)
    staged.write("t", first)
    staged.write("t", second)
    assert staged.commit() == {"t": 4}
    stored = pq.ParquetFile(target)
    assert stored.schema_arrow == SCHEMA
    assert stored.read().to_pylist() == [
        {"ts_ms": 1, "uuid": "GPU-a", "pod": "p", "value": 0.5},
        {"ts_ms": 2, "uuid": None, "pod": "q", "value": 1.0},
        {"ts_ms": 3, "uuid": "GPU-b", "pod": None, "value": 2.0},
        {"ts_ms": 4, "uuid": "GPU-c", "pod": "r", "value": 3.0},
    ]
    # time statistics kept (readers skip row groups by time), none for strings
    group = stored.metadata.row_group(0)
    assert group.column(0).statistics.min == 1 and group.column(0).statistics.max == 3
    assert group.column(1).statistics is None


def test_plain_parts_keep_the_schema_in_the_file(tmp_path: Path) -> None:
    target = tmp_path / "data.parquet"
    staged = DayInParts({"t": target}, {"t": SCHEMA}, tmp_path / "scratch")
    staged.write(
        "t", pa.table({"ts_ms": [7], "uuid": ["GPU-a"], "pod": [None], "value": [1.5]}, schema=SCHEMA)
    )
    staged.commit()
    assert pq.read_table(target).to_pylist() == [{"ts_ms": 7, "uuid": "GPU-a", "pod": None, "value": 1.5}]
    assert b"ARROW:schema" in (pq.read_metadata(target).metadata or {})
