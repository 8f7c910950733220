"""A kind of source is its settings model (config/sources.py) and its opener (ingest/sources.py): a toy kind
that hands over one hand-written RawDay, opened through `open_source` (what the Dagster resource's `source`
calls), is pulled into the raw zone and metered as the assets do, and bills what the same day metered directly
bills (docs/architecture.md, "Where to add… A source")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
from test_rules import DAY, H100, P1, D, charges, factory, make_config

from gpumeter.config import IDLE, Config
from gpumeter.ingest import sources
from gpumeter.ingest.contract import RawDay, RawSource
from gpumeter.ingest.pull import pull_raw_day
from gpumeter.ingest.sources import open_source, source_kind, source_kinds
from gpumeter.models.partition import meter_partition_day
from gpumeter.storage.warehouse import Warehouse


@dataclass(frozen=True)
class ToySource:
    """The toy kind's settings, as a config model would hold them: `kind` picks its opener."""

    kind: str = "toy"

    def describe(self) -> str:
        return "the toy source"


class ToyRawSource:
    """Hands over the one day it was given."""

    def __init__(self, day: RawDay) -> None:
        self.day = day

    def fetch_day(self, cluster: str, day: date, lookback_ms: int) -> RawDay:
        return self.day


FACTORY = factory().gpu("n1", "GPU-1", H100).gpu("n1", "GPU-2", H100, index="1")
FACTORY.samples("GPU-1", range(5), util=50, pod=P1)
FACTORY.samples("GPU-2", range(3), util=0)


def _open_toy(spec: ToySource, config: Config, cluster: str) -> RawSource:
    return ToyRawSource(FACTORY.build())


def test_a_kind_registered_in_one_place_is_opened_pulled_and_metered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "_OPENERS", dict(sources._OPENERS))  # the toy kind is this test's only
    source_kind("toy")(_open_toy)
    assert source_kinds() == ("parquet", "prometheus", "toy")
    parquet = make_config()
    # The config's `Source` union lists the shipped kinds only (a real kind is added to it, config/sources.py):
    # the toy's settings are set on an already validated config.
    toy = ToySource()
    config = parquet.model_copy(update={"clusters": [parquet.clusters[0].model_copy(update={"source": toy})]})
    assert isinstance(open_source(config, "c1"), ToyRawSource)

    warehouse = Warehouse.at(tmp_path / "warehouse")
    pulled = pull_raw_day(config, warehouse, DAY, source_for=lambda name: open_source(config, name))
    assert pulled["raw_dcgm_samples"] == FACTORY.build().dcgm.num_rows
    _, metered = meter_partition_day(config, warehouse, DAY)
    # As tests/test_rules.py's test_r1_r9 bills the same day, metered directly.
    assert charges(metered["c1"]) == {("team-a", "reserved"): D("0.30"), (IDLE, "idle"): D("0.18")}
