"""DRA objects that change during a day (R5, issue "a pool that changes during the day is billed exactly",
case 6): each claim result and slice device is used for the time it was valid, from the snapshots kept.

Validity (docs/accounting.md R5): from the first snapshot showing an object (its creationTimestamp when
earlier, never at or before the snapshot just before) until the first later snapshot that does not show it;
open-ended when the last snapshot shows it; a snapshot of unknown time (the plain resourceclaims.json of
old days) is valid all day. The pod phase check still bounds a claim.

Δ = 60 s, so a sample index is a minute (index 600 = 10:00). An H100 costs 3.60 per GPU-hour: 0.06 a
sample. An A100-80GB costs 4.20: a 3g.40gb instance weighs 3/7, so 60/3600 × 4.20 × 3/7 = 0.03 a sample,
and 60 × 3/7 GPU-seconds. Every expected value below is counted by hand from the scenario.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from test_rules import A100, DAY, H100, IDLE, D, charges, factory, holder, make_config, meter, rows

from gpumeter.ingest.contract import RawDay, RawFiles, SourceError
from gpumeter.ingest.k8s_objects import write_snapshot
from gpumeter.ingest.parquet import ParquetRawSource
from gpumeter.ingest.prometheus import PrometheusRawSource
from gpumeter.ingest.pull import pull_raw_day
from gpumeter.models.runner import meter_day
from gpumeter.storage.paths import RAW, snapshot_name
from gpumeter.storage.warehouse import Warehouse
from tests.builders import FactoryBuilder


def minutes(first: int, last: int) -> range:
    """Sample indices first..last, both included."""
    return range(first, last + 1)


# --- claims that vanish with their pods --------------------------------------------------------


def twenty_minute_job(timed: bool) -> FactoryBuilder:
    """GPU-1 (no pod labels) sampled 09:50..10:39. Job pod `job-1` is Pending at 09:58, Running 09:59..10:21
    (kube-state-metrics still says Running for a scrape after the pod went), Succeeded from 10:22. Its claim
    was created at 09:58 and is in the claims snapshots of 10:00 and 10:10; the snapshots of 09:50, 10:20
    and 10:30 do not show it (`timed`); or it is in one snapshot of unknown time (an old day's file)."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", minutes(590, 639), util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-1", **({"seen": [590, 600, 610, 620, 630]} if timed else {}))
    when = {"seen": [600, 610], "unseen": [590, 620, 630], "created": 598} if timed else {}
    f.claim("ns-a", "job-1-gpu", pool="n1", device="gpu-0", reserved_pod="job-1", **when)
    for i in minutes(598, 639):
        f.pod_phase("ns-a", "job-1", i, "Pending" if i == 598 else "Running" if i <= 621 else "Succeeded")
    return f


def test_a_claim_is_valid_from_its_creation_until_the_first_snapshot_without_it() -> None:
    """Claim valid [09:58, 10:20): created 09:58 (after the 09:50 snapshot that did not show it), gone at
    10:20. Pod Running 09:59..10:21. Held: 09:59..10:19 = 21 samples = 1260 s, 21 × 0.06 = 1.26. The GPU's
    other 29 samples (09:50..09:58, 10:20..10:39) are idle: 1.74 of a pool cost of 50 × 0.06 = 3.00."""
    out = meter(twenty_minute_job(timed=True))
    job = holder(out, "job-1")
    assert (job["holder_source"], job["sample_count"], job["device_seconds"]) == ("dra", 21, D(1260))
    assert job["reserved_cost"] == D("1.26")
    assert charges(out) == {("team-a", "reserved"): D("1.26"), (IDLE, "idle"): D("1.74")}


def test_a_claim_of_unknown_time_is_valid_all_day_and_bounded_by_its_pod() -> None:
    """Old single-file days keep their meaning: the claim is valid all day, the pod phase bounds it:
    Running 09:59..10:21 = 23 samples, 23 × 0.06 = 1.38; idle 27 × 0.06 = 1.62."""
    out = meter(twenty_minute_job(timed=False))
    job = holder(out, "job-1")
    assert (job["sample_count"], job["device_seconds"], job["reserved_cost"]) == (23, D(1380), D("1.38"))
    assert charges(out) == {("team-a", "reserved"): D("1.38"), (IDLE, "idle"): D("1.62")}


def test_without_its_creation_time_a_claim_starts_at_its_first_snapshot() -> None:
    """Same job, creationTimestamp unknown: valid [10:00, 10:20) = 20 samples, 1.20."""
    f = factory().gpu("n1", "GPU-1", H100)
    f.samples("GPU-1", minutes(590, 639), util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-1")
    f.claim("ns-a", "c", pool="n1", device="gpu-0", reserved_pod="job-1", seen=[600, 610], unseen=[590, 620])
    for i in minutes(590, 639):
        f.pod_phase("ns-a", "job-1", i, "Running" if 599 <= i <= 621 else "Succeeded")
    out = meter(f)
    assert (holder(out, "job-1")["sample_count"], holder(out, "job-1")["reserved_cost"]) == (20, D("1.20"))


def test_a_claim_between_two_snapshots_is_never_seen_and_one_seen_twice_has_two_spans() -> None:
    """A claim that lived 10:31..10:38, between the snapshots of 10:30 and 10:40, is in none: its Running
    pod holds nothing (docs: snapshot more often than the shortest job). A claim seen at 10:00, not at
    10:10, again at 10:20 (its reservedFor pod left and came back), not at 10:30, is valid [10:00, 10:10)
    and [10:20, 10:30): its pod, Running 10:00..10:29, holds 10 + 10 samples = 20 × 0.06 = 1.20."""
    f = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
    f.samples("GPU-1", minutes(600, 639), util=50)
    f.samples("GPU-2", minutes(600, 629), util=50)
    f.slice_device("n1", "gpu-0", uuid="GPU-1").slice_device("n1", "gpu-1", uuid="GPU-2")
    f.claim(
        "ns-a", "short", pool="n1", device="gpu-0", reserved_pod="short", seen=[], unseen=[600, 610, 620, 630]
    )
    f.claim("ns-b", "back", pool="n1", device="gpu-1", reserved_pod="back", seen=[600, 620], unseen=[610])
    for i in minutes(600, 639):
        f.pod_phase("ns-a", "short", i, "Running" if 631 <= i <= 638 else "Pending")
        f.pod_phase("ns-b", "back", i, "Running" if i <= 629 else "Succeeded")
    out = meter(f)
    assert rows(out, "mart_device_seconds", pod="short") == []
    back = holder(out, "back")
    assert (back["sample_count"], back["reserved_cost"]) == (20, D("1.20"))
    assert charges(out)[("team-b", "reserved")] == D("1.20")


# --- a slice re-published after a MIG re-partition ------------------------------------------


def repartitioned_gpu() -> FactoryBuilder:
    """A100 GPU-M, DRA-managed, no pod labels. 11:00..11:59: two 3g.40gb instances, GPU_I_ID 1 and 2, slice
    devices `gpu-0-mig-a`, `gpu-0-mig-b`; the GPU is emptied and re-partitioned at noon: 12:00..12:59 two
    3g.40gb instances, GPU_I_ID 2 and 5, which the driver re-publishes (slice updated in place, so no
    creation time) as `gpu-0-mig-c`, `gpu-0-mig-d`. Slices and claims are snapshotted every 10 minutes at
    :05 (10:55 .. 12:55): the old names until 11:55, the new ones from 12:05.
    Morning claims m1 (a, pod pm1) and m2 (b, pm2), pods Running 11:00..11:59; afternoon claims n1 (c, pn1)
    and n2 (d, pn2), created 12:01, pods Running 12:02..12:59."""
    f = factory().gpu("n2", "GPU-M", A100)
    morning, afternoon = minutes(660, 719), minutes(720, 779)
    for gi, span in (("1", morning), ("2", morning), ("2", afternoon), ("5", afternoon)):
        f.samples("GPU-M", span, gr=0.5, gpu_i_id=gi, profile="3g.40gb")
    snapshots = list(range(655, 780, 10))  # 10:55, 11:05, ..., 12:55
    old = [t for t in snapshots if t < 720]
    new = [t for t in snapshots if t > 720]
    for name in ("gpu-0-mig-a", "gpu-0-mig-b"):
        f.slice_device("n2", name, parent_uuid="GPU-M", profile="3g.40gb", seen=old, unseen=new)
    for name in ("gpu-0-mig-c", "gpu-0-mig-d"):
        f.slice_device("n2", name, parent_uuid="GPU-M", profile="3g.40gb", seen=new, unseen=old)
    for claim, device, pod in (("m1", "a", "pm1"), ("m2", "b", "pm2")):
        f.claim(
            "ns-a", claim, pool="n2", device=f"gpu-0-mig-{device}", reserved_pod=pod, seen=old, unseen=new
        )
    for claim, device, pod in (("n1", "c", "pn1"), ("n2", "d", "pn2")):
        f.claim(
            "ns-b", claim, pool="n2", device=f"gpu-0-mig-{device}", reserved_pod=pod, seen=new, unseen=old,
            created=721,
        )  # fmt: skip
    for i in minutes(650, 779):
        for pod in ("pm1", "pm2"):
            f.pod_phase(
                "ns-a", pod, i, "Running" if 660 <= i <= 719 else "Succeeded" if i > 719 else "Pending"
            )
        for pod in ("pn1", "pn2"):
            if i >= 721:
                f.pod_phase("ns-b", pod, i, "Running" if i >= 722 else "Pending")
    return f


def test_a_re_published_slice_maps_morning_claims_to_old_names_and_afternoon_claims_to_new_ones() -> None:
    """Old names valid [10:55, 12:05), new ones [12:05, ...): they are paired with instances per version.
    Until 12:05: a ↔ GPU_I_ID 1, b ↔ 2 (instance 5, seen from 12:00, has no old name left); from 12:05:
    c ↔ 2, d ↔ 5. pm1 holds instance 1 and pm2 instance 2 for their 60 Running minutes: 60 × 0.03 = 1.80
    each. pn1 holds instance 2 and pn2 instance 5 from 12:05 to 12:59, 55 samples, 1.65 each: at
    12:02..12:04 their devices' new names were in no snapshot yet (the 10-minute snapshot gap), and the
    old name b that instance 2 still had then is m2's, whose pod is gone. Nobody is billed twice: one
    holder at most per device sample."""
    out = meter(repartitioned_gpu())
    expected = {
        "pm1": ("GPU-M/1", 60),
        "pm2": ("GPU-M/2", 60),
        "pn1": ("GPU-M/2", 55),
        "pn2": ("GPU-M/5", 55),
    }
    for pod, (device, samples) in expected.items():
        found = holder(out, pod)
        assert (found["device_id"], found["sample_count"], found["holder_source"]) == (device, samples, "dra")
        assert found["gpu_seconds"] == samples * D("25.714285714286")  # 60 × 3/7 per sample, 12 places
        assert found["reserved_cost"] == samples * D("0.03")
    holders = out["int_device_holders"].to_pylist()
    assert max(Counter((h["device_id"], h["ts_ms"]) for h in holders).values()) == 1
    assert {h["holder_count"] for h in holders} == {1}
    assert charges(out)[("team-a", "reserved")] == D("3.60")
    assert charges(out)[("team-b", "reserved")] == D("3.30")
    # Pool: GPU-M observed 11:00..12:59, 120 samples × 0.07.
    assert sum((r["pool_cost"] for r in out["mart_pool_daily_cost"].to_pylist()), D(0)) == D("8.40")


def test_ranking_across_versions_would_have_misbilled_the_afternoon() -> None:
    """The same day with every snapshot of unknown time (merged without time, as before): a, b, c, d are
    ranked together against instances 1, 2, 5, so c ↔ 5 and d has no instance: pn1 is billed for
    instance 5 (its 58 Running samples 12:02..12:59) and pn2 for nothing. The timed reading above differs
    from this one exactly there."""
    built = repartitioned_gpu().build()
    untimed = RawDay(built.dcgm, built.kube, _untimed(built.dra_allocations), _untimed(built.dra_devices))
    out = meter_day(untimed, make_config(), "c1", DAY)
    assert (holder(out, "pn1")["device_id"], holder(out, "pn1")["sample_count"]) == ("GPU-M/5", 58)
    assert rows(out, "mart_device_seconds", pod="pn2") == []


def _untimed(table: pa.Table) -> pa.Table:
    """The objects of a table as if from one snapshot of unknown time: marker rows dropped, no time."""
    key = "claim_name" if "claim_name" in table.column_names else "device"
    kept = table.filter(pc.is_valid(table.column(key)))
    at = kept.schema.get_field_index("snapshot_ms")
    return kept.set_column(at, "snapshot_ms", pa.nulls(kept.num_rows, pa.int64()))


# --- the Parquet source: snapshot files in the day folders ------------------------------------


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def _claims(*pods: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"{p}-gpu", "namespace": "ns-a", "uid": f"uid-{p}-gpu"},
                "status": {
                    "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}},
                    "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"}],
                },
            }
            for p in pods
        ],
    }  # fmt: skip


def test_the_parquet_source_reads_timed_snapshots_of_the_day_and_the_day_before(tmp_path: Path) -> None:
    """k8s/cluster=c1/day=<d>/resourceclaims-<time>.json: the day before's last snapshot (23:55, showing
    job-0) and the day's (00:05 job-0; 10:00, 10:10 job-1; 10:20 none): each row keeps its time, each
    snapshot adds one marker row; the plain resourceclaims.json of the day is of unknown time."""
    root = tmp_path / "source"
    k8s = root / "k8s"
    write_snapshot(k8s, "c1", "resourceclaims", _claims("job-0"), _ms("2026-10-31T23:55:00+00:00"))
    write_snapshot(k8s, "c1", "resourceclaims", _claims("job-0"), _ms("2026-11-01T00:05:00+00:00"))
    for moment, pods in (("10:00", ["job-1"]), ("10:10", ["job-1"]), ("10:20", [])):
        write_snapshot(k8s, "c1", "resourceclaims", _claims(*pods), _ms(f"2026-11-01T{moment}:00+00:00"))
    (k8s / "cluster=c1" / "day=2026-11-01" / "resourceclaims.json").write_text(json.dumps(_claims("old")))
    folder = k8s / "cluster=c1" / "day=2026-11-01"
    assert sorted(p.name for p in folder.iterdir())[0] == "resourceclaims-20261101T000500.000Z.json"
    raw = ParquetRawSource(root).fetch_day("c1", DAY, 0)
    got = sorted(
        ((r["reserved_pod"], r["snapshot_ms"]) for r in raw.dra_allocations.to_pylist()),
        key=lambda x: (x[1] or 0, x[0] or ""),
    )
    stamp = {
        t: _ms(f"2026-{t}:00+00:00")
        for t in ("10-31T23:55", "11-01T00:05", "11-01T10:00", "11-01T10:10", "11-01T10:20")
    }
    assert got == [
        ("old", None),
        (None, stamp["10-31T23:55"]), ("job-0", stamp["10-31T23:55"]),
        (None, stamp["11-01T00:05"]), ("job-0", stamp["11-01T00:05"]),
        (None, stamp["11-01T10:00"]), ("job-1", stamp["11-01T10:00"]),
        (None, stamp["11-01T10:10"]), ("job-1", stamp["11-01T10:10"]),
        (None, stamp["11-01T10:20"]),
    ]  # fmt: skip


def test_parquet_source_and_builder_meter_the_same_twenty_minute_job(tmp_path: Path) -> None:
    """The 20-minute job kept as snapshot files and read by the Parquet source bills what the builder's rows
    bill: 21 samples, 1.26 (the claim created 09:58, in the 10:00 and 10:10 snapshots, gone at 10:20)."""
    f = twenty_minute_job(timed=True)
    built = f.build()
    root = tmp_path / "source"
    k8s = root / "k8s"
    slices = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "n1-gpu"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": "n1",
                    "pool": {"name": "n1"},
                    "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-1"}}}],
                },
            }
        ],
    }  # fmt: skip
    claims = _claims("job-1")
    claims["items"][0]["metadata"]["creationTimestamp"] = "2026-11-01T09:58:00Z"
    claims["items"][0]["metadata"]["name"] = "job-1-gpu"
    claims["items"][0]["metadata"]["uid"] = "uid-job-1-gpu"
    for index in (590, 600, 610, 620, 630):
        write_snapshot(k8s, "c1", "resourceslices", slices, f.ts(index))
        write_snapshot(k8s, "c1", "resourceclaims", claims if index in (600, 610) else _claims(), f.ts(index))
    raw = ParquetRawSource(root)._k8s_objects("c1", DAY)
    out = meter_day(RawDay(built.dcgm, built.kube, *raw), make_config(), "c1", DAY)
    job = holder(out, "job-1")
    assert (job["sample_count"], job["reserved_cost"]) == (21, D("1.26"))


def test_snapshot_names_are_utc_times_to_the_millisecond() -> None:
    assert snapshot_name("resourceslices", _ms("2026-11-01T10:05:00.123+00:00")) == (
        "resourceslices-20261101T100500.123Z.json"
    )


def test_a_bad_snapshot_file_is_one_error_naming_it_and_the_json_path(tmp_path: Path) -> None:
    folder = tmp_path / "k8s" / "cluster=c1" / "day=2026-11-01"
    write_snapshot(tmp_path / "k8s", "c1", "resourceclaims", _claims("a"), _ms("2026-11-01T10:00:00+00:00"))
    bad = _claims("a", "b")
    del bad["items"][1]["status"]["allocation"]["devices"]["results"][0]["pool"]
    path = folder / "resourceclaims-20261101T101000Z.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(SourceError) as info:
        ParquetRawSource(tmp_path).fetch_day("c1", DAY, 0)
    assert str(info.value) == (
        f'{path}: items[1].status.allocation.devices.results[0]: missing "pool"; '
        "re-export it with `kubectl get resourceclaims -A -o json`"
    )
    path.write_text(json.dumps(_claims("a")))
    (folder / "resourceslices-noon.json").write_text("{}")
    with pytest.raises(
        SourceError, match=r"resourceslices-noon\.json: not a snapshot name.*20261101T100000Z"
    ):
        ParquetRawSource(tmp_path).fetch_day("c1", DAY, 0)


def test_a_bad_creation_timestamp_names_its_path(tmp_path: Path) -> None:
    doc = _claims("a")
    doc["items"][0]["metadata"]["creationTimestamp"] = "yesterday"
    write_snapshot(tmp_path / "k8s", "c1", "resourceclaims", doc, _ms("2026-11-01T10:00:00+00:00"))
    with pytest.raises(
        SourceError, match=r'items\[0\]\.metadata\.creationTimestamp: is "yesterday", expected an RFC 3339'
    ):
        ParquetRawSource(tmp_path).fetch_day("c1", DAY, 0)


def test_written_snapshots_are_whole_and_leave_no_temp_files(tmp_path: Path) -> None:
    at = _ms("2026-11-01T10:00:00+00:00")
    first = write_snapshot(tmp_path, "c1", "resourceclaims", _claims("a"), at)
    again = write_snapshot(tmp_path, "c1", "resourceclaims", _claims("a"), at)
    assert first == again and json.loads(first.read_text()) == _claims("a")
    assert [p.name for p in first.parent.iterdir()] == [first.name]
    assert first.parent == tmp_path / "cluster=c1" / "day=2026-11-01"


def test_raw_dra_files_stored_before_snapshots_had_a_time_are_read_as_of_unknown_time(tmp_path: Path) -> None:
    """A warehouse raw day written before the snapshot_ms / created_ms columns existed is read with them
    null: its claims are valid all day, bounded by the pod (the 23 samples of the old reading, 1.38)."""
    built = twenty_minute_job(timed=False).build()
    files: dict[str, list[Path]] = {}
    for name, table in built.tables().items():
        if name.startswith("raw_dra_"):
            table = table.drop_columns(["snapshot_ms", "created_ms"])
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path)
        files[name] = [path]
    out = meter_day(RawFiles(files), make_config(), "c1", DAY)
    job = holder(out, "job-1")
    assert (job["sample_count"], job["reserved_cost"]) == (23, D("1.38"))


def test_a_pull_keeps_the_day_s_timed_snapshots_beside_its_raw_rows(tmp_path: Path) -> None:
    """runner.pull_raw_day with a Prometheus source reading k8s_snapshots_dir: the raw DRA rows keep their
    snapshot times, and the day's snapshot files (not the day before's) are copied, by name, into the
    warehouse's raw k8s folder of the day."""
    snapshots = tmp_path / "snapshots"
    late = write_snapshot(
        snapshots, "c1", "resourceclaims", _claims("job-0"), _ms("2026-10-31T23:55:00+00:00")
    )
    ten = write_snapshot(
        snapshots, "c1", "resourceclaims", _claims("job-1"), _ms("2026-11-01T10:00:00+00:00")
    )
    config = make_config(
        clusters=[{"name": "c1", "source": {"kind": "prometheus", "url": "http://127.0.0.1:9", "k8s_snapshots_dir": str(snapshots)}}],
        warehouse={"path": str(tmp_path / "warehouse")},
    )  # fmt: skip
    spec = config.cluster("c1").source
    source = PrometheusRawSource(spec, "c1", dcgm_metrics=(), kube_metrics=())
    warehouse = Warehouse.of(config.warehouse)
    counts = pull_raw_day(config, warehouse, DAY, source_for=lambda _: source)
    assert counts["raw_dra_allocations"] == 4  # two claims and two markers
    kept = warehouse.day_dir(RAW, "k8s", "c1", DAY)
    assert [p.name for p in kept.iterdir()] == [ten.name] and ten.name != late.name
    assert kept.joinpath(ten.name).read_text() == ten.read_text()
    files = warehouse.day_files(RAW, "raw_dra_allocations", "c1", DAY)
    stored = pa.concat_tables([pq.ParquetFile(f).read() for f in files]).to_pylist()
    assert sorted((r["reserved_pod"] or "", r["snapshot_ms"]) for r in stored) == [
        ("", _ms("2026-10-31T23:55:00+00:00")),
        ("", _ms("2026-11-01T10:00:00+00:00")),
        ("job-0", _ms("2026-10-31T23:55:00+00:00")),
        ("job-1", _ms("2026-11-01T10:00:00+00:00")),
    ]
