"""The package as a site installs it: a wheel built by ``python -m build``, installed into a fresh
virtualenv with its dependencies (torch's CPU build satisfies its bounds), then used where a login
node's operator would use it. Another project's runs in that environment behave as without the
plugin; an empty directory runs the shipped suite on ``--cluster=local`` with the shipped
thresholds and an ACCEPTED verdict that JUnit XML carries; ``init`` writes a site's own
thresholds.toml, which the next run reads."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OTHER_CONFTEST = """
import pytest

def pytest_addoption(parser):
    parser.addoption("--dry-run", action="store_true")
    parser.addoption("--nodes", default="")
    parser.addoption("--results", default="")
    parser.addoption("--baseline", default="")

@pytest.fixture
def node():
    return "their-node"
"""
OTHER_TESTS = """
def test_their_node(node, request):
    assert node == "their-node"
    assert request.config.getoption("--nodes") == "a,b"
"""


def _env() -> dict[str, str]:
    """This environment less what would let the fresh one see the repository's sources, and with
    bytecode written on import: the install skips compiling all of torch (most of its time), so
    the first import of each module compiles it once for every later process."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel this checkout builds, and its dependencies: made once
    for the whole test run, whichever xdist worker comes first (the others wait for it). The run's
    own temporary folder holds it (an xdist worker's is one level down), never one an earlier run
    left behind."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "installed-wheel"
    shared.mkdir(exist_ok=True)
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = shared / "venv"
        if not (env / "ready").exists():
            _install(shared, env)
            (env / "ready").touch()
    return env


def _install(root: Path, env: Path) -> None:
    dist = root / "dist"
    # sdist, then the wheel from it, as a release is built: nothing is written into the checkout.
    built = _run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], root, 900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = list(dist.glob("pytest_gpucluster-*.whl"))
    assert len(wheels) == 1, wheels
    made = _run([sys.executable, "-m", "venv", str(env)], root, 300)
    assert made.returncode == 0, made.stderr
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    for what in (["torch==2.13.0"], [str(wheels[0])]):
        done = _run([*pip, *what], root, 1200)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_wheel_carries_the_suite_and_the_default_thresholds(venv):
    found = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from pytest_gpucluster.config import shipped; "
            "print(shipped.suite_dir()); print(shipped.default_thresholds())",
        ],
        venv,
        60,
    )
    suite, thresholds = found.stdout.split()
    assert "site-packages" in suite and Path(suite, "test_nccl.py").is_file(), found.stdout + found.stderr
    assert Path(thresholds).read_bytes() == (REPO / "thresholds.toml").read_bytes()
    shipped = sorted(p.name for p in Path(suite).glob("*.py"))
    assert shipped == sorted(p.name for p in (REPO / "tests" / "acceptance").glob("*.py"))


def test_another_projects_pytest_in_the_same_environment_is_untouched(venv, tmp_path):
    (tmp_path / "conftest.py").write_text(OTHER_CONFTEST)
    (tmp_path / "test_theirs.py").write_text(OTHER_TESTS)
    pytest_ = str(venv / "bin" / "pytest")
    for args in ([], ["--markers"], ["--fixtures"], ["--co"]):
        done = _run(
            [pytest_, "-p", "no:cacheprovider", "--nodes=a,b", "--dry-run", "--results=x", *args], tmp_path, 120
        )
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
    done = _run([pytest_, "-p", "no:cacheprovider", "--nodes=a,b"], tmp_path, 120)
    assert "1 passed" in done.stdout and "gpucluster:" not in done.stdout


def test_an_empty_directory_runs_the_shipped_suite_accepted_with_the_verdict_in_junit(venv, tmp_path):
    done = _run(
        [
            str(venv / "bin" / "pytest"),
            "-p",
            "no:cacheprovider",
            "--cluster=local",
            "--gpucluster-results=r.json",
            "--junitxml=j.xml",
        ],
        tmp_path,
        900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["acceptance"]["verdict"] == "ACCEPTED", doc["acceptance"]["headline"]
    assert doc["thresholds_origin"] == "shipped with pytest-gpucluster 0.1.0"
    areas = {t["area"] for t in doc["tests"]}
    assert {"nccl", "sharedfs", "placement", "training", "fabric", "xid"} <= areas  # the whole suite
    assert "thresholds " in done.stdout and "(shipped with pytest-gpucluster 0.1.0)" in done.stdout
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties").iter("property")}
    assert props["gpucluster.verdict"] == "ACCEPTED" and props["gpucluster.profile"] == "local"


def test_init_writes_a_sites_own_thresholds_that_the_next_run_reads(venv, tmp_path):
    python = str(venv / "bin" / "python")
    wrote = _run([python, "-m", "pytest_gpucluster", "init"], tmp_path, 60)
    assert wrote.returncode == 0 and (tmp_path / "thresholds.toml").is_file(), wrote.stderr
    again = _run([python, "-m", "pytest_gpucluster", "init"], tmp_path, 60)
    assert again.returncode == 1 and "exists; nothing written" in again.stderr
    dry = _run(
        [str(venv / "bin" / "pytest"), "-p", "no:cacheprovider", "--cluster=local", "--gpucluster-dry-run"],
        tmp_path,
        300,
    )
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert f"thresholds {tmp_path / 'thresholds.toml'} (the rootdir ({tmp_path}))" in dry.stdout
