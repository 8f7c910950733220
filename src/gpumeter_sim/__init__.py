"""The simulated AI factory: deterministic synthetic telemetry of a shared GPU pool, as its exporters and
Kubernetes would show it. Test and demo data, not part of the product: `gpumeter demo`, the tests and the
bench use it; gpumeter itself never imports it outside the demo command."""
