"""The array operations the sample pass's steps share: runs of equal keys in rows already in their order, and
what is taken per run (the least, the most, the last valid row before), with SQL's null semantics."""

from __future__ import annotations

import numpy as np

from gpumeter.models.sample_pass.inputs import LEAST_NONE, NONE


def sql_round(values: np.ndarray) -> np.ndarray:
    """DuckDB's round() of a double to an integer: half away from zero (NumPy's np.round halves to even)."""
    whole = np.trunc(values)
    return whole + np.where(np.abs(values - whole) >= 0.5, np.sign(values), 0.0)


def starts(*keys: np.ndarray) -> np.ndarray:
    """Where a run of rows equal in every key starts (the rows sorted by them)."""
    if keys[0].size == 0:
        return np.zeros(0, np.int64)
    new = np.zeros(keys[0].size, dtype=bool)
    new[0] = True
    for key in keys:
        new[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(new)


def run_of_row(run_starts: np.ndarray, rows: int) -> np.ndarray:
    """For each of `rows` rows, the run (its index in `run_starts`) it lies in."""
    return np.repeat(np.arange(run_starts.size), np.diff(np.r_[run_starts, rows]))


def least(values: np.ndarray, run_starts: np.ndarray) -> np.ndarray:
    """min per run, a null (NONE) skipped: NONE where every value is null."""
    found = np.minimum.reduceat(np.where(values == NONE, LEAST_NONE, values), run_starts)
    return np.where(found == LEAST_NONE, NONE, found).astype(np.int32)


def most(values: np.ndarray, run_starts: np.ndarray) -> np.ndarray:
    """max per run; NONE (-1) is below every key, so it is skipped unless every value is null."""
    return np.maximum.reduceat(values, run_starts).astype(np.int32)


def previous_valid(valid: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """For each row, the index of the last valid row before it in its group (-1: none)."""
    at = np.maximum.accumulate(np.where(valid, np.arange(valid.size), -1))
    before = np.r_[-1, at[:-1]]
    return np.where(before >= group_start, before, -1)


def mixed(*keys: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of non-negative integer keys (the keys folded in turn, then splitmix64's
    finalizer), so that an xor of hashes keys a set of rows in any order."""
    folded = np.zeros(keys[0].size, np.uint64)
    for key in keys:
        folded = folded * np.uint64(0x9E3779B97F4A7C15) + key.astype(np.uint64)
    folded ^= folded >> np.uint64(30)
    folded *= np.uint64(0xBF58476D1CE4E5B9)
    folded ^= folded >> np.uint64(27)
    folded *= np.uint64(0x94D049BB133111EB)
    folded ^= folded >> np.uint64(31)
    return folded
