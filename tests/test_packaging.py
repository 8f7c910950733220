"""The product as a user installs it: the wheel and the sdist carry every SQL model, schema file, template and
the example config, and the installed package finds them with importlib.resources (no path into a checkout).
The full install in a clean virtualenv with a one-day demo outside the checkout is .ci/package-check, run by CI
after the tests."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"

# What a run reads besides Python: every file the package needs at run time.
PACKAGE_DATA = ("*.sql", "*.yml", "*.j2", "*.yaml")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        cwd=out,
    )
    return out


def _data_files() -> set[str]:
    """Every run-time data file under src/, relative to src/ (what the wheel must carry)."""
    return {
        str(path.relative_to(SRC))
        for pattern in PACKAGE_DATA
        for path in SRC.rglob(pattern)
        if "egg-info" not in str(path)
    }


def test_the_wheel_carries_every_model_template_and_example(dist: Path) -> None:
    (wheel,) = dist.glob("gpumeter-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _data_files()
    assert any(name.endswith(".sql") for name in expected), "no SQL found under src/: the layout moved?"
    assert expected <= names, sorted(expected - names)
    assert "gpumeter/examples/demo-config.yaml" in names
    assert "gpumeter/billing/templates/invoice.html.j2" in names
    # The simulator ships for `gpumeter demo`, as its own package beside the product's.
    assert any(name.startswith("gpumeter_sim/") for name in names)
    entry_points = (
        zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    )
    assert "gpumeter = gpumeter.cli.main:main" in entry_points


def test_the_sdist_carries_the_sources_and_their_data(dist: Path) -> None:
    (sdist,) = dist.glob("gpumeter-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {f"src/{name}" for name in _data_files()} <= names
    assert {"pyproject.toml", "README.md"} <= names


def test_the_installed_package_finds_its_data_with_importlib_resources() -> None:
    """Read through the package's own resource API, from a folder that is not the checkout."""
    code = (
        "from gpumeter.models.project import SQL_DIR, load_models\n"
        "from gpumeter.config import EXAMPLE_CONFIG, load_config\n"
        "models = load_models()\n"
        "assert len(models) > 20, len(models)\n"
        "config = load_config(str(EXAMPLE_CONFIG))\n"
        "print(len(models), config.pool)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "demo-ai-factory"


def test_the_dockerfile_installs_the_wheel_as_ci_does() -> None:
    """No Docker engine runs here: the image's steps are checked against what they name. It builds the wheel
    with the locked `build`, installs it with requirements.lock as constraints (what .ci/package-check proves in
    a clean virtualenv), and serves the Dagster code location that exists."""
    import importlib.util
    import re
    import tomllib

    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    locked = dict(
        line.split("==", 1) for line in (REPO / "requirements.lock").read_text().splitlines() if "==" in line
    )
    (build_pin,) = re.findall(r"pip install --no-cache-dir build==([\w.]+)", dockerfile)
    assert build_pin == locked["build"]
    assert "-c /tmp/requirements.lock" in dockerfile and '"gpumeter[k8s]"' in dockerfile
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "k8s" in extras
    (module,) = set(re.findall(r'"-m", "([\w.]+)"', dockerfile))
    assert importlib.util.find_spec(module) is not None
    assert "gpumeter dashboard" in dockerfile and "EXPOSE 3030 8501" in dockerfile
