"""The order of raw DCGM rows in the raw zone: by GPU, then time, then series and metric.

Every part the raw zone stores of a day's `raw_dcgm_samples` (gpumeter.ingest.pull) is in this order, whatever
its source wrote, so that a reader finds a GPU's samples, and the readings of one scrape of a series, as
neighbours. The Prometheus pull and the simulator write their rows so already; rows that come otherwise (a
Parquet raw zone written by another tool) are put in order once, when they are pulled.

The order is by the values, not by how a file encodes them: UUIDs and metric names compare as text, the series
key as an unsigned integer; a null sorts after every value; rows equal in all four keep the order they came in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The raw columns of the order, most significant first (the one list of them).
DCGM_ROW_ORDER = ("uuid", "ts_ms", "series_key", "metric")


def _rank(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Each row's place among the column's distinct values in their order (text for strings); a null after
    all of them. Ranks a dictionary once, not each row's value."""
    encoded = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.unify_dictionaries().combine_chunks()
    values = encoded.dictionary
    rank_of_code = np.empty(len(values) + 1, np.int64)
    rank_of_code[pc.sort_indices(values).to_numpy()] = np.arange(len(values), dtype=np.int64)
    rank_of_code[len(values)] = len(values)  # null: last
    return rank_of_code[encoded.indices.fill_null(len(values)).to_numpy(zero_copy_only=False)]


def _plain(column: pa.ChunkedArray, null_last: int) -> np.ndarray:
    """An integer column's values, a null as `null_last` (which sorts after every value)."""
    return column.fill_null(null_last).to_numpy()


def in_gpu_order(rows: pa.Table) -> bool:
    """Whether `rows` (raw_dcgm_samples) are in DCGM_ROW_ORDER."""
    if rows.num_rows < 2:
        return True
    keys = (
        _rank(rows["uuid"]),
        _plain(rows["ts_ms"], np.iinfo(np.int64).max),
        _plain(rows["series_key"], np.iinfo(np.uint64).max),
        _rank(rows["metric"]),
    )
    # Lexicographic: no step down in a key before an earlier key has stepped up.
    settled = np.zeros(rows.num_rows - 1, dtype=bool)
    for key in keys:
        later, earlier = key[1:], key[:-1]
        if np.any((later < earlier) & ~settled):
            return False
        settled |= later > earlier
    return True


def gpu_ordered(rows: pa.Table) -> pa.Table:
    """`rows` (raw_dcgm_samples) in DCGM_ROW_ORDER: as they are where they already are (no copy)."""
    if in_gpu_order(rows):
        return rows
    uuid, series, metric = _rank(rows["uuid"]), _rank(rows["series_key"]), _rank(rows["metric"])
    ts = _plain(rows["ts_ms"], np.iinfo(np.int64).max)
    # Two stable integer sorts rather than one by four keys: by (series, metric), then by (GPU, time).
    minor = np.argsort(series * (int(metric.max()) + 1) + metric, kind="stable")
    low, high = int(ts.min()), int(ts.max())
    if (int(uuid.max()) + 1) * (high - low + 1) < 2**62:
        major = np.argsort(uuid[minor] * (high - low + 1) + (ts[minor] - low), kind="stable")
    else:  # a time range too wide for one int64 key (a hostile timestamp)
        major = np.lexsort((ts[minor], uuid[minor]))
    return rows.take(pa.array(minor[major]))
