"""The span models against the rule they replace (R4, R8, R11).

`int_node_unschedulable_spans` and `int_node_gpu_price_spans` turn per-node samples into disjoint spans, so that
a device sample finds its node's state with a range join instead of an ASOF join (bench/README.md). The rule
they must keep: a device sample at time t takes the node's latest sample at or before t, if that sample is at
most kube_lookback_seconds old; else no state (schedulable; no price). Node states also end at the first
later scrape of kube-state-metrics that does not show the node (R1a staleness); a price holds until the next
price (an OpenCost restart does not make a GPU free). Checked here
against that rule written out in Python, over random sample sequences: gaps longer than the lookback,
flapping states, price changes and repeats, several nodes.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumeter.models.project import MACROS, SQL_DIR

SQL = Path(str(SQL_DIR)) / "intermediate"
LOOKBACK_MS = 300_000
SETTINGS = settings(
    max_examples=int(os.environ.get("GPUMETER_PROPERTY_EXAMPLES", "8")) * 5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
NODES = ("n1", "n2")


def _latest(samples: list[tuple[str, int, object]], node: str, ts_ms: int) -> object | None:
    """The rule: the node's latest sample at or before ts_ms, at most the lookback old."""
    before = [(t, v) for n, t, v in samples if n == node and t <= ts_ms]
    if not before:
        return None
    t, value = max(before, key=lambda tv: tv[0])
    return value if ts_ms - t <= LOOKBACK_MS else None


def _current(samples: list[tuple[str, int, object]], node: str, ts_ms: int) -> object | None:
    """The staleness rule (R1a): the node's latest sample at or before ts_ms, unless a later scrape of the
    exporter (any node's sample time: one target) at or before ts_ms does not show the node, and at most the
    lookback old."""
    scrapes = {t for _, t, _ in samples if t <= ts_ms}
    if not scrapes:
        return None
    latest = max(scrapes)
    shown = [v for n, t, v in samples if n == node and t == latest]
    return shown[0] if shown and ts_ms - latest <= LOOKBACK_MS else None


def _until(samples: list[tuple[str, int, object]], ts_ms: int) -> int:
    """Until when a sample at ts_ms holds (exclusive): the exporter's next scrape, at most the lookback."""
    later = [t for _, t, _ in samples if t > ts_ms]
    return min([*later, ts_ms + LOOKBACK_MS + 1])


def _session() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("set variable lookback_ms = ?", [LOOKBACK_MS])
    con.execute("set variable min_free_cpu_cores = 1.0")
    con.execute("set variable min_free_memory_bytes = 1.0")
    con.execute(MACROS.read_text(encoding="utf-8"))  # the expressions the models share, as a run has them
    return con


def _lookup(con: duckdb.DuckDBPyConnection, model: str, value: str, probes: list[tuple[str, int]]) -> dict:
    con.execute(f"create table {model} as {(SQL / f'{model}.sql').read_text(encoding='utf-8')}")
    con.execute("create table probes (node varchar, ts_ms bigint)")
    con.executemany("insert into probes values (?, ?)", probes)
    found = con.sql(
        f"select p.node, p.ts_ms, s.{value} from probes as p left join {model} as s "
        "on s.node = p.node and p.ts_ms >= s.from_ms and p.ts_ms < s.until_ms"
    ).fetchall()
    assert len(found) == len(probes), "spans of one node overlap: a probe met two"
    return {(node, ts): v for node, ts, v in found}


# Sample times on a 30 s grid with gaps: offsets in scrape steps, some beyond the lookback (10 steps).
times = st.lists(st.integers(0, 40), min_size=1, max_size=25, unique=True).map(
    lambda xs: sorted(x * 30_000 for x in xs)
)
probe_times = st.lists(st.integers(0, 45 * 30_000), min_size=1, max_size=30)


@SETTINGS
@given(st.data())
def test_unschedulable_spans_equal_the_latest_fresh_node_state_r11(data: st.DataObject) -> None:
    samples: list[tuple[str, int, object]] = []
    rows = []
    for node in NODES:
        for ts in data.draw(times):
            cordoned = data.draw(st.booleans())
            free_cpu = data.draw(st.sampled_from([0.0, 4.0, None]))
            rows.append((node, ts, cordoned, False, free_cpu, 1e12))
            # A state's unknown input (null) counts as schedulable unless another input says otherwise.
            samples.append((node, ts, cordoned or (free_cpu is not None and free_cpu < 1.0)))
    # Both nodes come from one kube-state-metrics: its scrape times are every node's sample times.
    rows = [(*row, _until(samples, row[1])) for row in rows]
    con = _session()
    con.execute(
        "create table stg_kube_node_states (node varchar, ts_ms bigint, cordoned boolean, not_ready boolean, "
        "free_cpu_cores double, free_memory_bytes double, until_ms bigint)"
    )
    con.executemany("insert into stg_kube_node_states values (?, ?, ?, ?, ?, ?, ?)", rows)
    probes = [(node, ts) for node in NODES for ts in data.draw(probe_times)]
    found = _lookup(con, "int_node_unschedulable_spans", "node", probes)
    for node, ts in probes:
        assert (found[(node, ts)] is not None) == bool(_current(samples, node, ts)), (node, ts)


@SETTINGS
@given(st.data())
def test_price_spans_equal_the_latest_fresh_opencost_price_r8(data: st.DataObject) -> None:
    samples: list[tuple[str, int, object]] = []
    for node in NODES:
        # A millisecond late now and then: gaps of exactly the lookback, and of one millisecond more.
        for ts in data.draw(times):
            samples.append(
                (node, ts + data.draw(st.sampled_from([0, 1])), data.draw(st.sampled_from([3.6, 7.2, 0.0])))
            )
    con = _session()
    con.execute("create table stg_opencost_prices (node varchar, ts_ms bigint, gpu_price_per_hour double)")
    con.executemany("insert into stg_opencost_prices values (?, ?, ?)", samples)
    # Random times, and the last millisecond each sample's price can hold and the one after it.
    probes = [(node, ts) for node in NODES for ts in data.draw(probe_times)]
    probes += [(node, ts + LOOKBACK_MS + late) for node, ts, _ in samples for late in (0, 1)]
    found = _lookup(con, "int_node_gpu_price_spans", "gpu_price_per_hour", probes)
    for node, ts in probes:
        assert found[(node, ts)] == _latest(samples, node, ts), (node, ts)
