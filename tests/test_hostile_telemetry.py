"""Hostile telemetry, hand-computed: each bad input has one defined behaviour (clamp, dedupe, ignore the value,
drop the sample, or one clear error), and whatever is set aside is counted in data_quality with the
GPU-seconds at stake (int_dcgm_quarantine; docs/reliability.md).

As in tests/test_rules.py: Δ = 60 s, H100 at 3.60/GPU-hour (0.06 a sample), A100-80GB at 4.20; `team-a` owns
`ns-a`, `team-b` owns `ns-b`.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumeter.config import UNALLOCATED
from gpumeter.ingest.schema import (
    DCGM_ENERGY,
    DCGM_FB_USED,
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_POWER,
    DCGM_TEMP,
    DCGM_XID,
)
from gpumeter.models.day_checks import quarantined_samples
from gpumeter.models.project import AccountingError, load_models
from gpumeter.models.runner import _load_raw, _set_variables, check_assertions, meter_day
from tests.test_rules import (
    A100,
    H100,
    P1,
    P2,
    D,
    categories,
    charges,
    factory,
    holder,
    make_config,
    meter,
    one,
)

Out = dict[str, pa.Table]


def quality(out: Out, node: str | None = "n1") -> dict[str, Any]:
    return one(out, "mart_data_quality", node=node)


def reasons(out: Out) -> dict[str, int]:
    """reason -> raw rows set aside, over the whole day."""
    counted: dict[str, int] = {}
    for row in out["int_dcgm_quarantine"].to_pylist():
        counted[row["reason"]] = counted.get(row["reason"], 0) + 1
    return counted


def by_reason(out: Out, node: str | None = "n1") -> dict[str, dict[str, int]]:
    return json.loads(quality(out, node)["quarantine_by_reason"])


# --- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_a_non_finite_value_is_ignored_but_its_sample_still_counts(bad: float) -> None:
    """R1/R10: the sample was scraped, so it is held and billed; its utilization says nothing and counts as no
    evidence of work (busy 0)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=50, pod=P1)
    f.sample("GPU-1", 1, util=bad, pod=P1)
    out = meter(f)
    p1 = holder(out, "p1")
    assert (p1["device_seconds"], p1["busy_gpu_seconds"]) == (D(120), D(30))  # 60 × 0.5, the bad one 0
    assert charges(out)[("team-a", "reserved")] == D("0.12")
    assert reasons(out) == {"non_finite_value": 1}
    q = quality(out)
    assert (q["quarantined_samples"], q["quarantined_gpu_seconds"], q["dropped_gpu_seconds"]) == (
        1,
        D(60),
        D(0),
    )
    assert by_reason(out) == {"non_finite_value": {"samples": 1, "device_samples": 1}}


def test_negative_utilization_is_ignored_not_read_as_zero_work() -> None:
    """A negative ratio is a broken exporter: the value is set aside (counted), the held sample is idle (R11)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=-5, pod=P1)
    f.sample("GPU-1", 1, gr=-0.2, util=80, pod=P1)  # GR is preferred, but it is void: GPU_UTIL stands
    out = meter(f)
    assert holder(out, "p1")["busy_gpu_seconds"] == D(48)  # 60 × 0.8
    assert categories(out) == {"allocated_idle": D(60), "allocated_active": D(60)}
    assert reasons(out) == {"negative_value": 2}


def test_utilization_over_100_percent_is_clamped_and_counted() -> None:
    """R10: 150 % → 1 and GR_ENGINE_ACTIVE 1.7 → 1; both clamps are counted, nothing is dropped."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=150, pod=P1)
    f.sample("GPU-1", 1, gr=1.7, pod=P1)
    out = meter(f)
    assert holder(out, "p1")["busy_gpu_seconds"] == D(120)
    assert holder(out, "p1")["peak_busy"] == 1.0
    assert reasons(out) == {"over_range": 2}
    assert quality(out)["dropped_gpu_seconds"] == D(0)


def test_values_that_would_overflow_the_decimal_sums_are_ignored() -> None:
    """1e300 MiB of frame buffer or mJ of energy is corrupt, and would overflow DECIMAL(38,12) (R1): ignored."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", -1, energy=1_000_000, pod=P1)
    f.sample("GPU-1", 0, util=50, fb=1e300, energy=1e300, pod=P1)
    f.sample("GPU-1", 1, util=50, fb=2000, energy=1_060_000, pod=P1)
    out = meter(f)
    p1 = holder(out, "p1")
    assert p1["fb_used_mib_seconds"] == D(120_000)  # 60 × 2000; the corrupt reading is not a reading
    assert p1["energy_joules"] == D(60)  # 1 060 000 − 1 000 000 mJ: the counter's step over the void value
    assert reasons(out) == {"implausible_value": 2}


def test_a_metric_the_accounting_does_not_read_is_never_judged_and_observes_nothing() -> None:
    """R4, our reading: a GPU is observed at a scrape with a reading the accounting uses. A NaN temperature is
    never judged (nothing quarantined) and, like a power reading, does not make the GPU observed: the
    Prometheus source does not even pull those fields, so both sources must agree. A NaN utilization does
    make it observed (a sample without a value, reported)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.dcgm_row(f.ts(0), DCGM_TEMP, math.nan, hostname="n1", uuid="GPU-1", model_name=H100)
    f.dcgm_row(f.ts(0), DCGM_POWER, 300.0, hostname="n1", uuid="GPU-1", model_name=H100)
    f.dcgm_row(f.ts(1), DCGM_GPU_UTIL, math.nan, hostname="n1", uuid="GPU-1", model_name=H100)
    out = meter(f)
    assert quality(out)["observed_gpu_seconds"] == 60  # index 1 only
    assert reasons(out) == {"non_finite_value": 1}


def test_an_xid_reading_alone_observes_nothing_but_tells_the_health_of_a_gpu_observed_then() -> None:
    """R4/R11, our reading: an XID reading is a property of a scrape that carries the GPU's readings. Alone at
    a time when no series of the GPU is observed it makes no GPU-second (XID 0 is not even pulled from
    Prometheus, so counting it would make the sources disagree). Where the GPU is observed then through
    another series, the XID makes that sample unhealthy.
    GPU-1: index 0 XID 79 alone (nothing), index 1 util 50 (allocated_active, 60 s).
    GPU-2: index 0 util 50 on one series and XID 79 alone on a second (another pod's labels): unhealthy 60 s;
    that pod is no holder, P1 holds it alone."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.dcgm_row(f.ts(0), DCGM_XID, 79.0, hostname="n1", uuid="GPU-1", model_name=H100)
    f.sample("GPU-1", 1, util=50, pod=P1)
    f.sample("GPU-2", 0, util=50, pod=P1)
    f.sample("GPU-2", 0, xid=79, pod=P2)
    out = meter(f)
    assert quality(out)["observed_gpu_seconds"] == 120
    assert categories(out, "n1") == {"allocated_active": D(60), "unhealthy": D(60)}
    assert holder(out, "p1", device_id="GPU-2")["reserved_cost"] == D("0.06")  # one sample, alone
    assert [r for r in out["mart_device_seconds"].to_pylist() if r["pod"] == "p2"] == []


def test_energy_counter_resets_nan_and_negative_readings() -> None:
    """R10: the step over valid readings only; a step down is a reset (the new value accrued since):
    −1: 1 000 000, 0: NaN, 1: 1 060 000 (+60 J), 2: −5 (void), 3: 5 000 (reset, +5 J)."""
    f = factory().gpu("n1", "GPU-1", H100)
    for i, millijoules in {-1: 1_000_000, 0: math.nan, 1: 1_060_000, 2: -5, 3: 5_000}.items():
        f.sample("GPU-1", i, util=50, energy=millijoules, pod=P1)
    out = meter(f)
    assert holder(out, "p1")["energy_joules"] == D(65)
    assert reasons(out) == {"non_finite_value": 1, "negative_value": 1}


# --- duplicates and conflicts ----------------------------------------------------------------


def test_equal_copies_are_deduplicated_and_disagreeing_copies_keep_the_largest() -> None:
    """R1: two rows of one metric at one timestamp are one reading. Equal: one copy is counted as a duplicate
    (not a warning). Different (20 % and 80 %): the largest is kept, order-free, and the other is reported."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", [0, 0], util=50, pod=P1)
    f.sample("GPU-1", 1, util=20, pod=P1)
    f.sample("GPU-1", 1, util=80, pod=P1)
    out = meter(f)
    p1 = holder(out, "p1")
    assert (p1["device_seconds"], p1["busy_gpu_seconds"]) == (D(120), D(78))  # 60 × (0.5 + 0.8)
    assert reasons(out) == {"duplicate_sample": 1, "conflicting_values": 1}
    q = quality(out)
    assert (q["quarantined_samples"], q["duplicate_samples"], q["quarantined_gpu_seconds"]) == (1, 1, D(60))
    assert quarantined_samples({"c1": out}).passed is False


def test_copies_of_one_reading_under_two_model_names_are_still_copies() -> None:
    """R1: a sample is (node, GPU, MIG instance, pod labels, time); two rows of one metric there are one reading
    even when a label outside that grain differs. A modelName that flips makes two series (stg_dcgm_series),
    and the copies across them are still found: the largest kept, the other reported, one device sample."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=20, pod=P1)
    namespace, pod, container = P1
    f.dcgm_row(
        f.ts(0),
        DCGM_GPU_UTIL,
        80.0,
        hostname="n1",
        uuid="GPU-1",
        gpu="0",
        model_name=A100,
        namespace=namespace,
        pod=pod,
        container=container,
    )
    out = meter(f)
    p1 = holder(out, "p1")
    assert (p1["device_seconds"], p1["busy_gpu_seconds"]) == (D(60), D(48))  # 60 × 0.8, counted once
    assert reasons(out) == {"conflicting_values": 1}


JUDGED_METRICS = [
    DCGM_GPU_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_FB_USED,
    DCGM_ENERGY,
    DCGM_XID,
    DCGM_POWER,  # not read: never judged by its value
    DCGM_TEMP,  # not read either
]
# The metrics whose values the accounting reads (docs/reliability.md), written again from the doc.
READ = {DCGM_GPU_UTIL, DCGM_GR_ENGINE_ACTIVE, DCGM_FB_USED, DCGM_ENERGY, DCGM_XID}
DROPPING = {"other_cluster", "timestamp_outside_day", "missing_uuid", "mig_labels_incomplete"}
IGNORING = {"non_finite_value", "negative_value", "implausible_value"}


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.one_of(st.sampled_from(JUDGED_METRICS), st.none()),  # none: a row with no metric name
            st.one_of(
                st.none(),
                st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from([0.0, 0.5, 1.0, 1.5, 99.0, 100.0, 150.0, -1.0, 1e6 + 1, 1e9 + 1, 2e18]),
            ),
            st.booleans(),  # the row has its UUID
        ),
        min_size=1,
        max_size=30,
    )
)
def test_the_value_taken_agrees_with_the_reason_given(
    rows: list[tuple[str | None, float | None, bool]],
) -> None:
    """stg_dcgm_judged writes a row's reason (what int_dcgm_quarantine reports), whether it has one (what the
    quarantine filters by) and the value it is taken at (what stg_dcgm_samples reads) as separate expressions,
    so that none is evaluated again for another on every raw row. They must agree on every row: kept as it
    came, clamped (R10), ignored, or dropped. A row of no metric the accounting reads (POWER, TEMP, or no
    metric name at all) is never judged by its value, and its value is never read."""
    f = factory()
    for index, (metric, value, has_uuid) in enumerate(rows):
        f.dcgm_row(
            f.ts(index % 3), metric, value, hostname="n1", uuid="GPU-1" if has_uuid else None, model_name=H100
        )
    con = duckdb.connect()
    try:
        _load_raw(con, f.build())
        _set_variables(con, make_config(), f.cluster, f.day)
        judged = next(m for m in load_models() if m.name == "stg_dcgm_judged")
        assert judged.ephemeral
        con.execute(f"create temp view stg_dcgm_judged as {judged.sql}")
        judgements = con.sql(
            "select metric, value, value_read, dropped, quarantined, reason, clean_value from stg_dcgm_judged"
        ).fetchall()
    finally:
        con.close()
    assert len(judgements) == len(rows)
    for metric, value, value_read, dropped, quarantined, reason, clean_value in judgements:
        assert value_read is (metric in READ)
        assert dropped == (reason in DROPPING)
        # The quarantine's filter: every row with a reason, no other.
        assert quarantined == (reason is not None)
        if dropped:
            continue
        if reason is None:
            assert clean_value == value or (value != value and clean_value != clean_value)  # NaN: a TEMP row
        elif reason == "over_range":
            assert clean_value == (100.0 if metric == DCGM_GPU_UTIL else 1.0)
        else:
            assert reason in IGNORING and clean_value is None
        if not value_read:
            assert reason is None


def test_two_label_sets_under_one_series_key_stop_the_day() -> None:
    """Series are keyed by a 64-bit hash of their labels: were two label sets to share one (never seen), their
    samples would merge (R1). The day stops with one error instead, naming that key and no other: the series
    table holds one row per key, and a key whose rows carry two label sets says so (labels_agree)."""
    con = duckdb.connect()
    try:
        con.execute(
            "create table stg_dcgm_series as select * from (values "
            "(7::ubigint, 'c1', 'n1', 'GPU-1', null, 'H100', null, null, null, null, true), "
            "(42::ubigint, 'c1', 'n2', 'GPU-2', null, 'H100', null, null, null, null, false)) "
            "as t(series_key, cluster, node, uuid, gpu_i_id, model_name, mig_profile, namespace, pod, container, "
            "labels_agree)"
        )
        series = next(m for m in load_models() if m.name == "stg_dcgm_series")
        with pytest.raises(AccountingError, match="share the key 42") as stopped:
            check_assertions(con, series)
        assert "key 7" not in str(stopped.value)
    finally:
        con.close()


def test_a_clean_day_passes_the_quarantine_check() -> None:
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", [0, 0, 1], util=50, pod=P1)  # a deduplicated copy is R1, not a warning
    result = quarantined_samples({"c1": meter(f)})
    assert result.passed
    assert result.figures["deduplicated_copies"] == 1


# --- identity: UUID, node, MIG labels, cluster -----------------------------------------------


def test_rows_without_a_uuid_are_dropped_and_their_gpu_seconds_shown() -> None:
    """R1: no UUID, no GPU to count: the row is dropped, its sample is counted as dropped GPU-seconds on its
    node, and the bill is the one of the valid GPU."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=P1)
    for i in range(3):
        f.dcgm_row(
            f.ts(i), DCGM_GPU_UTIL, 90.0, hostname="n1", gpu="1", model_name=H100, namespace="ns-b", pod="p2"
        )
    out = meter(f)
    assert charges(out)[("team-a", "reserved")] == D("0.12")
    assert ("team-b", "reserved") not in charges(out)
    assert reasons(out) == {"missing_uuid": 3}
    q = quality(out)
    assert (q["quarantined_samples"], q["dropped_gpu_seconds"], q["observed_gpu_seconds"]) == (3, D(180), 120)
    result = quarantined_samples({"c1": out})
    assert not result.passed and str(result.figures["dropped_gpu_seconds"]) == "180.000000000000"


def test_vgpu_copies_that_disagree_across_two_nodes_are_reported_once_at_the_first_node() -> None:
    """R1/R6: one time-sliced GPU's vgpu copies, reported by two nodes (n2's rows written first), say 2 % and
    80 %: one conflicting device sample, named at the first node by name, as the GPU is billed there."""
    f = factory()
    f.gpu("n2", "GPU-1", H100).sample("GPU-1", 0, util=2, pod=P1, vgpu="0")
    f.gpu("n1", "GPU-1", H100).sample("GPU-1", 0, util=80, pod=P2, vgpu="1")
    out = meter(f)
    assert [(r["node"], r["device_id"]) for r in out["int_vgpu_copy_conflicts"].to_pylist()] == [
        ("n1", "GPU-1")
    ]
    assert quality(out, "n1")["conflicting_copy_samples"] == 1


def test_a_row_without_a_hostname_is_reported_under_a_null_node() -> None:
    """A GPU with a UUID but no Hostname is still observed and billed (R4); its node is null, not lost."""
    f = factory()
    f.dcgm_row(f.ts(0), DCGM_GPU_UTIL, 50.0, uuid="GPU-9", model_name=H100, namespace="ns-a", pod="p1")
    out = meter(f)
    assert holder(out, "p1")["device_seconds"] == D(60)
    assert quality(out, None)["observed_gpu_seconds"] == 60


def test_one_uuid_on_two_nodes_is_one_gpu_billed_at_the_first_node() -> None:
    """R1/R4: a UUID is one GPU: observed once per timestamp, at the first node by name; the other node's rows
    are reported as merged, never billed twice. Both pods held it: R6 splits it."""
    f = factory()  # the builder keys GPUs by UUID: re-declaring it moves the next samples to n2
    f.gpu("n1", "GPU-1", H100).samples("GPU-1", range(2), util=50, pod=P1)
    f.gpu("n2", "GPU-1", H100).samples("GPU-1", range(2), util=50, pod=P2)
    out = meter(f)
    pool = out["mart_pool_daily_cost"].to_pylist()
    assert [(r["node"], r["observed_gpu_seconds"], r["pool_cost"]) for r in pool] == [
        ("n1", D(120), D("0.12"))
    ]
    assert holder(out, "p1")["device_seconds"] == holder(out, "p2")["device_seconds"] == D(60)
    assert reasons(out) == {"uuid_on_several_nodes": 2}
    assert (quality(out, "n2")["quarantined_samples"], quality(out, "n2")["quarantined_gpu_seconds"]) == (
        2,
        D(120),
    )
    assert quality(out, "n1")["quarantined_samples"] == 0


def test_one_mig_uuid_on_two_nodes_keeps_r11_per_node() -> None:
    """Found by tests/test_fuzz.py: the GPU-level series on n2, a 3g.40gb instance of the same UUID on n9. The
    GPU is n2's (first by name), so all of its 60 s belong to n2: instance 25.714285714286 + remainder."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.sample("GPU-M", 0, util=0)
    f.dcgm_row(
        f.ts(0),
        DCGM_GR_ENGINE_ACTIVE,
        0.5,
        hostname="n9",
        uuid="GPU-M",
        model_name=A100,
        gpu_i_id="1",
        gpu_i_profile="3g.40gb",
    )
    out = meter_day(f.build(), make_config(), "c1", f.day)
    assert set(categories(out)) <= {"free", "mig_unpartitioned"}
    assert sum(categories(out, "n2").values()) == D(60)
    assert categories(out, "n9") == {}


def test_a_mig_instance_without_its_profile_is_dropped_and_its_time_stays_capacity() -> None:
    """R3/R4: an instance that cannot be weighed is dropped and counted; the GPU is still observed through its
    other instance, and the dropped instance's share is mig_unpartitioned (R11 sums to capacity)."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.samples("GPU-M", range(2), gr=0.5, gpu_i_id="1", profile="3g.40gb", pod=P1)
    for i in range(2):
        f.dcgm_row(
            f.ts(i),
            DCGM_GR_ENGINE_ACTIVE,
            0.5,
            hostname="n2",
            uuid="GPU-M",
            model_name=A100,
            gpu_i_id="2",
            pod="p2",
            namespace="ns-b",
        )
    out = meter(f)
    instance = D("25.714285714286")  # 60 × 3/7, rounded to 12 places per sample (R1)
    assert categories(out, "n2") == {
        "allocated_active": 2 * instance,
        "mig_unpartitioned": 2 * (D(60) - instance),
    }
    assert reasons(out) == {"mig_labels_incomplete": 2}
    assert quality(out, "n2")["dropped_gpu_seconds"] == D(120)  # weight unknown: at most one GPU a sample


def test_an_unparseable_mig_profile_is_one_clear_error() -> None:
    """R3: a profile that does not parse stops the run with one message naming it (no traceback of SQL)."""
    f = factory().gpu("n2", "GPU-M", A100)
    f.sample("GPU-M", 0, gr=0.5, gpu_i_id="1", profile="weird\n'profile", pod=P1)
    with pytest.raises(AccountingError, match="weird") as info:
        meter_day(f.build(), make_config(), "c1", f.day)
    assert "Traceback" not in str(info.value)


def test_rows_of_another_cluster_are_counted_not_metered() -> None:
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=50, pod=P1)
    f.dcgm_row(
        f.ts(0), DCGM_GPU_UTIL, 50.0, cluster="elsewhere", hostname="n1", uuid="GPU-X", model_name=H100
    )
    out = meter(f)
    assert reasons(out) == {"other_cluster": 1}
    assert quality(out)["observed_gpu_seconds"] == 60


# --- time --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ts_ms",
    [0, -86_400_000 * 365, 4_102_444_800_000, 2**62, None],
    ids=["epoch", "before-epoch", "year-2100", "far-future", "null"],
)
def test_a_timestamp_outside_the_day_is_counted_not_billed(ts_ms: int | None) -> None:
    """R2: a sample belongs to the day of its timestamp; one outside the day and its lookback is set aside and
    counted (the source passes such rows of the day's file through: tests/test_faults.py)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=50, pod=P1)
    f.dcgm_row(
        ts_ms, DCGM_GPU_UTIL, 50.0, hostname="n1", uuid="GPU-1", model_name=H100, namespace="ns-a", pod="p1"
    )
    out = meter(f)
    assert holder(out, "p1")["device_seconds"] == D(60)
    assert reasons(out) == {"timestamp_outside_day": 1}
    assert quality(out)["dropped_gpu_seconds"] == D(60)


def test_a_series_that_flips_holder_every_scrape_bills_each_sample_to_its_holder() -> None:
    """R5: the labels name the holder at that sample, so a series flipping between two pods bills each its own
    samples; nothing is quarantined (time-slicing without vgpu copies looks like this, docs/telemetry.md)."""
    f = factory().gpu("n1", "GPU-1", H100)
    for i in range(6):
        f.sample("GPU-1", i, util=50, pod=P1 if i % 2 == 0 else P2)
    out = meter(f)
    assert holder(out, "p1")["device_seconds"] == holder(out, "p2")["device_seconds"] == D(180)
    billed = {key: amount for key, amount in charges(out).items() if amount}  # __idle__ is 0
    assert billed == {("team-a", "reserved"): D("0.18"), ("team-b", "reserved"): D("0.18")}
    assert reasons(out) == {}


# --- labels ------------------------------------------------------------------------------------

STRANGE = [
    'ns"quoted',
    "ns'; drop table raw_dcgm_samples; --",
    "multi\nline",
    "ünïcødé-名前-🚀",
    '=HYPERLINK("http://x")',
    "\\backslash\\",
    "x" * 10_000,
]


@pytest.mark.parametrize("value", STRANGE, ids=range(len(STRANGE)))
def test_label_values_are_data_whatever_they_contain(value: str) -> None:
    """Quotes, newlines, unicode and SQL in labels reach the marts exactly, as an unmapped holder (R7)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=(value, value, value))
    out = meter(f)
    row = one(out, "mart_device_seconds", pod=value)
    assert (row["namespace"], row["container"], row["tenant"]) == (value, value, UNALLOCATED)
    assert row["device_seconds"] == D(120)
    assert out["int_gpu_samples"].num_rows == 2  # the raw table is intact


def test_a_huge_label_set_on_a_pod_is_read() -> None:
    """2,000 kube_pod_labels labels and a 64 KiB value: the tenant label rule still matches (R7)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", range(2), util=50, pod=("ns-x", "p9", "main"))
    labels = {f"key-{i}": f"value-{i}" for i in range(2000)}
    labels.update({"team": "b", "blob": "y" * 65_536})
    f.pod_labels("ns-x", "p9", labels)
    config = make_config(tenants=[{"name": "team-b", "pod_labels": [{"key": "team", "value": "b"}]}])
    out = meter(f, config)
    assert holder(out, "p9")["tenant"] == "team-b"


def test_quarantine_reasons_sum_to_the_rows_set_aside() -> None:
    """Every row in int_dcgm_quarantine is counted in data_quality exactly once (per reason)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.sample("GPU-1", 0, util=math.nan, fb=-1, pod=P1)
    f.sample("GPU-1", 1, util=500, energy=math.inf, pod=P1)
    f.samples("GPU-1", [2, 2], util=10, pod=P1)
    f.dcgm_row(f.ts(3), DCGM_FB_USED, 1.0, hostname="n1")
    f.dcgm_row(None, DCGM_ENERGY, 1.0, hostname="n1", uuid="GPU-1")
    out = meter(f)
    counted = by_reason(out)
    assert (
        {k: v["samples"] for k, v in counted.items()}
        == reasons(out)
        == {
            "non_finite_value": 2,
            "negative_value": 1,
            "over_range": 1,
            "duplicate_sample": 1,
            "missing_uuid": 1,
            "timestamp_outside_day": 1,
        }
    )
    q = quality(out)
    assert q["quarantined_samples"] == 6 and q["duplicate_samples"] == 1
    assert sum(Decimal(v["samples"]) for v in counted.values()) == out["int_dcgm_quarantine"].num_rows
