"""The order of raw DCGM rows in the raw zone: by GPU, then time, then series and metric.

Every part the raw zone stores of a day's `raw_dcgm_samples` (gpumeter.ingest.pull) is in this order, whatever
its source wrote, so that a reader finds a GPU's samples, and the readings of one scrape of a series, as
neighbours. The Prometheus pull and the simulator write their rows so already; rows that come otherwise (a
Parquet raw zone written by another tool) are put in order once, when they are pulled.

The order is by the values, not by how a file encodes them: UUIDs and metric names compare as text, the series
key as an unsigned integer; a null sorts after every value; rows equal in all four keep the order they came in.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The raw columns of the order, most significant first (the one list of them).
DCGM_ROW_ORDER = ("uuid", "ts_ms", "series_key", "metric")


def _rank(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Each row's place among the column's distinct values in their order (text for strings, unsigned for the
    series key); a null after all of them. Ranks a dictionary once, not each row's value."""
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.unify_dictionaries().combine_chunks()
    values = encoded.dictionary
    rank_of_code = np.empty(len(values) + 1, np.int64)
    rank_of_code[pc.sort_indices(values).to_numpy()] = np.arange(len(values), dtype=np.int64)
    rank_of_code[len(values)] = len(values)  # null: last
    return rank_of_code[encoded.indices.fill_null(len(values)).to_numpy(zero_copy_only=False)]


def _keys(rows: pa.Table) -> list[np.ndarray]:
    """Each row's rank in every column of DCGM_ROW_ORDER, most significant first."""
    return [_rank(rows[name]) for name in DCGM_ROW_ORDER]


def _in_order(keys: list[np.ndarray]) -> bool:
    """Whether rows with these keys (most significant first) are in their lexicographic order."""
    settled = np.zeros(max(len(keys[0]) - 1, 0), dtype=bool)
    for key in keys:
        later, earlier = key[1:], key[:-1]
        if np.any((later < earlier) & ~settled):  # a step down before an earlier key has stepped up
            return False
        settled |= later > earlier
    return True


def in_gpu_order(rows: pa.Table) -> bool:
    """Whether `rows` (raw_dcgm_samples) are in DCGM_ROW_ORDER."""
    return rows.num_rows < 2 or _in_order(_keys(rows))


def gpu_ordered(rows: pa.Table) -> pa.Table:
    """`rows` (raw_dcgm_samples) in DCGM_ROW_ORDER: as they are where they already are (no copy)."""
    if rows.num_rows < 2:
        return rows
    keys = _keys(rows)
    if _in_order(keys):
        return rows
    return rows.take(pa.array(lexicographic_order(keys)))


def combined_key(keys: list[np.ndarray]) -> np.ndarray | None:
    """Non-negative integer keys, most significant first, as one int64 that orders rows as they do; None where
    their ranges do not fit one int64."""
    sizes = [int(key.max()) + 1 if len(key) else 1 for key in keys]
    if math.prod(sizes) >= 2**62:  # too many distinct values for one int64 key
        return None
    combined = np.zeros(len(keys[0]), np.int64)
    for key, size in zip(keys, sizes, strict=True):
        combined = combined * size + key
    return combined


def lexicographic_order(keys: list[np.ndarray]) -> np.ndarray:
    """The stable order of rows by non-negative integer keys, most significant first: one argsort of the keys
    combined into one int64 where their ranges fit, else a lexsort. Ties keep their order."""
    combined = combined_key(keys)
    if combined is None:
        return np.lexsort(keys[::-1])
    return np.argsort(combined, kind="stable")
