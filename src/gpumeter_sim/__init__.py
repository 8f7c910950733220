"""The simulated AI factory: deterministic synthetic telemetry of a shared GPU pool, as its exporters and
Kubernetes would show it. Test and demo data, not part of the product: `gpumeter demo`, the tests and the
bench use it; gpumeter itself never imports it outside the demo command.

`simulate_day(spec, day)` returns one UTC day of raw samples in the raw-samples schema
(gpumeter.ingest.schema): dcgm-exporter series, kube-state-metrics and OpenCost series, plus `kubectl get ...
-o json` style ResourceClaim / ResourceSlice lists for the DRA-managed GPUs. Every day is generated on its
own from numpy generators seeded from (seed, day, ...), so days can be produced in any order, alone or in a
run, with identical results.

The modules, each importing only those above it:

    catalog    what exists: GPU models, MIG profiles and layouts, lane pattern, job kinds, namespaces, queues
    spec       what to simulate: FactorySpec, demo_spec, fleet_spec, the changing pool and its times
    layout     nodes, GPUs, MIG instances, lanes and where the scenario's events happen (factory_layout)
    pods       who runs on each lane, and when (day_pods)
    activity   a day's utilization per lane slot and each GPU's power, temperature, XID and energy
    dra        the DRA ResourceSlices and ResourceClaims, as lists and timed snapshots
    signals    the exporters' series of a day (simulate_day, iter_day_parts)
    writers    the Parquet source and the OpenMetrics file (write_parquet, write_openmetrics)
    describe   the factory in words (describe, changing_pool)

openmetrics (the OpenMetrics writer) and promserver (a real Prometheus on 127.0.0.1) sit beside them.
"""

from gpumeter_sim.activity import clear_caches
from gpumeter_sim.catalog import MODELS
from gpumeter_sim.describe import changing_pool, describe
from gpumeter_sim.layout import factory_layout
from gpumeter_sim.signals import SimulatedDay, iter_day_parts, iter_days, simulate_day
from gpumeter_sim.spec import CHANGING_POOL, FactorySpec, demo_spec, fleet_spec
from gpumeter_sim.writers import ha_replicas, write_openmetrics, write_parquet

__all__ = [
    "CHANGING_POOL",
    "MODELS",
    "FactorySpec",
    "SimulatedDay",
    "changing_pool",
    "clear_caches",
    "demo_spec",
    "describe",
    "factory_layout",
    "fleet_spec",
    "ha_replicas",
    "iter_day_parts",
    "iter_days",
    "simulate_day",
    "write_openmetrics",
    "write_parquet",
]
