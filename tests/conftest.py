"""Under CI (CI=true, set by .ci/run) the real parts the tests drive must be there: a test module that skips
itself for a missing Prometheus or Chromium would make a green run that tested nothing of them."""

from __future__ import annotations

import os
import shutil

import pytest

# What .ci/run installs, and the Debian package that brings it.
CI_BINARIES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "victoria-metrics": "victoria-metrics",
    "chromium": "chromium",
}


def pytest_configure(config: pytest.Config) -> None:
    # No dashboard warm-up thread in the test process or the servers it starts: a test of the dashboard sees
    # the reads its own page views make (tests/test_dashboard_warmup.py starts the warm-up where it tests it).
    os.environ["GPUMETER_DASHBOARD_WARMUP_S"] = "0"
    if os.environ.get("CI") != "true":
        return
    missing = sorted({package for binary, package in CI_BINARIES.items() if shutil.which(binary) is None})
    if missing:
        raise pytest.UsageError(
            f"CI=true but the Debian package(s) {', '.join(missing)} are not installed: run the tests "
            "through .ci/run, which installs them"
        )
