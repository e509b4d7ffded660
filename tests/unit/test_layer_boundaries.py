"""The package's layers import one way: what runs on the nodes (``workloads/``, ``launch/node.py``)
imports nothing of the login side; ``checks/`` and ``verdict/`` (login-side, pure) import neither
pytest, the session, the launcher nor Slurm; and ``report/``, which only renders, imports nothing
of Slurm or the launcher. Read from the source with ``ast``, so an import inside a function counts
as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gpucluster.launch.node import TaskOutput, run_on_node
from pytest_gpucluster.workloads.context import local_context

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "pytest_gpucluster"

# What code running in a Slurm job must not import: pytest and the login side of the plugin.
LOGIN_SIDE = (
    "pytest",
    "_pytest",
    "pytest_gpucluster.session",
    "pytest_gpucluster.fixtures",
    "pytest_gpucluster.plugin",
    "pytest_gpucluster.report",
    "pytest_gpucluster.launch.submitit_backend",
    "pytest_gpucluster.launch.job",
    "pytest_gpucluster.launch.slurm_backend",
    "pytest_gpucluster.launch.local_backend",
    "pytest_gpucluster.launch.watcher",
    "pytest_gpucluster.launch.wait_rules",
    "pytest_gpucluster.launch.task_files",
    "pytest_gpucluster.launch.together",
    "pytest_gpucluster.slurm",
    "pytest_gpucluster.config",
    "pytest_gpucluster.profile",
    "pytest_gpucluster.checks",
    "pytest_gpucluster.run",
    "pytest_gpucluster.results.document",
    "pytest_gpucluster.results.baseline",
    "pytest_gpucluster.results.calibrate",
)
NOT_IN_CHECKS = ("pytest", "_pytest", "pytest_gpucluster.session", "pytest_gpucluster.launch", "pytest_gpucluster.run")
# Verdicts are decided from plain data: no pytest, no session, no launcher, no Slurm, no report.
NOT_IN_VERDICT = (
    *NOT_IN_CHECKS,
    "pytest_gpucluster.slurm",
    "pytest_gpucluster.slurm.retry",
    "pytest_gpucluster.report",
    "submitit",
)
# The report renders the results and the verdicts; what acts on the cluster lives elsewhere.
NOT_IN_REPORT = ("pytest_gpucluster.slurm", "pytest_gpucluster.slurm.retry", "pytest_gpucluster.launch", "submitit")

# Functions under workloads/ that run on the login node and read the profile's settings: the
# compute and training plans. They import the configuration inside the function, so a job that
# unpickles the module never loads it; they move out with the planner.
LOGIN_SIDE_PLANNERS = {("compute.py", "plan_compute"), ("training.py", "plan_training")}


def _imports(path: Path) -> Iterator[tuple[str, int, str]]:
    """(imported module, line, enclosing top-level function or "") for every import in ``path``;
    ``from pytest_gpucluster import checks`` yields ``pytest_gpucluster.checks``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for top in tree.body:
        owner = top.name if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) else ""
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, node.lineno, owner
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield node.module, node.lineno, owner
                for alias in node.names:
                    yield f"{node.module}.{alias.name}", node.lineno, owner


def _hits(path: Path, banned: tuple[str, ...]) -> list[str]:
    return sorted(
        {
            f"{path.relative_to(PACKAGE.parent)}:{line}: imports {module}"
            for module, line, _ in _imports(path)
            if any(module == b or module.startswith(b + ".") for b in banned)
        }
    )


def _node_side_modules() -> list[Path]:
    return [*sorted((PACKAGE / "workloads").glob("*.py")), PACKAGE / "launch" / "node.py"]


@pytest.mark.parametrize("path", _node_side_modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_node_side_code_imports_nothing_of_the_login_side(path):
    hits = _hits(path, LOGIN_SIDE)
    allowed = {
        f"{path.relative_to(PACKAGE.parent)}:{line}: imports {module}"
        for module, line, owner in _imports(path)
        if (path.name, owner) in LOGIN_SIDE_PLANNERS
    }
    assert [h for h in hits if h not in allowed] == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "checks").glob("*.py")), ids=lambda p: p.name)
def test_checks_import_neither_pytest_nor_the_session_nor_the_launcher(path):
    assert _hits(path, NOT_IN_CHECKS) == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "verdict").glob("*.py")), ids=lambda p: p.name)
def test_verdicts_import_neither_pytest_nor_the_session_nor_the_launcher_nor_slurm(path):
    assert _hits(path, NOT_IN_VERDICT) == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "report").glob("*.py")), ids=lambda p: p.name)
def test_the_report_imports_nothing_of_slurm_or_the_launcher(path):
    assert _hits(path, NOT_IN_REPORT) == []


def test_the_login_side_planners_let_through_still_exist():
    # An entry left behind after its function moved would let a new import slip through.
    for name, function in sorted(LOGIN_SIDE_PLANNERS):
        tree = ast.parse((PACKAGE / "workloads" / name).read_text(encoding="utf-8"))
        assert function in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, (name, function)


def test_the_scan_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from pytest_gpucluster import session\n    import pytest\n")
    found = {(m, owner) for m, _, owner in _imports(module)}
    assert {("pytest_gpucluster.session", "f"), ("pytest", "f"), ("os", "")} <= found


def test_the_jobs_entry_pickles_by_reference():
    # submitit pickles the entry and its result by module and name: both must be importable there.
    assert pickle.loads(pickle.dumps(run_on_node)) is run_on_node
    out = TaskOutput(local_context(), {"x": 1}, 1.0, 2.0, 0.5)
    assert pickle.loads(pickle.dumps(out)) == out
    assert b"pytest_gpucluster.launch.node" in pickle.dumps(out)


def test_a_task_that_unpickles_the_entry_loads_nothing_of_the_login_side():
    code = (
        "import sys, pytest_gpucluster.launch.node, pytest_gpucluster.workloads.node_gpus; "
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    assert [m for m in loaded if any(m == b or m.startswith(b + ".") for b in LOGIN_SIDE)] == []
