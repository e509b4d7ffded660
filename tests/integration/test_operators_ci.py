"""The suite as a site's operators run it on the test cluster: unprivileged Unix users, one after
another and at once on one shared filesystem (a few checks); inside ``flags=maint``
reservations, first a few areas with the operator's shell's SBATCH_* defaults exported and
``--gpucluster-drain-failed`` it may not carry out, then at once, each in a reservation of its
own, the whole handover with its soak by one operator (the self-test's whole handover) and a few
areas by the other; and a constraint no node satisfies. The users (gcop1, gcop2), the
reservations and the shared folders made here are removed afterwards, also on failure."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from faults_support import REPO, SHARED, SLURM_CONF, slurm_cmd
from handover_support import HANDOVER, assert_whole_handover

from gpucluster_testcluster.operators import (
    Operator,
    ensure_operator,
    python_for,
    remove_operator,
    run_as,
    unreachable,
)
from gpucluster_testcluster.proc import ClusterError

pytestmark = pytest.mark.integration

FEW = ("tests/acceptance/test_placement.py", "tests/acceptance/test_sharedfs.py")
NAMES = ("gcop1", "gcop2")


@dataclass
class OperatorRun:
    """A pytest process an operator ran, and its results."""

    returncode: int
    output: str
    results: dict[str, Any]

    @property
    def acceptance(self) -> dict[str, Any]:
        return dict(self.results.get("acceptance") or {})

    def jobs(self) -> list[dict[str, Any]]:
        return [j for t in self.results.get("tests", []) for j in t.get("jobs", [])]


@dataclass(frozen=True)
class Operators:
    """gcop1 and gcop2, and the interpreter they run the suite with."""

    users: dict[str, Operator]
    python: Path

    def __getitem__(self, name: str) -> Operator:
        return self.users[name]


@pytest.fixture(scope="module")
def operators(slurm_cluster) -> Iterator[Operators]:
    """gcop1 and gcop2, made for this module, and an interpreter with this environment's packages
    they may run (this one, or a virtualenv beside it where this one sits under a private folder
    such as /root); skipped, naming the folder, where neither can be had."""
    made = {name: ensure_operator(name) for name in NAMES}
    venv = Path(tempfile.mkdtemp(prefix="gpucluster-operator-python-"))
    venv.chmod(0o755)
    try:
        for needed in (REPO, venv):
            if why := unreachable(made["gcop1"], needed):
                pytest.skip(f"{why}: the operators cannot reach {needed}")
        try:
            python = python_for(made["gcop1"], venv)
        except ClusterError as exc:
            pytest.skip(f"{exc}: the operators cannot run this test's Python")
        yield Operators(made, python)
    finally:
        for name in NAMES:
            slurm_cmd("scancel", "-u", name, check=False)
            remove_operator(name)
        shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture
def drop(tmp_path) -> Iterator[Path]:
    """A folder every operator may write their results into (tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="gpucluster-operators-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fresh_shared() -> Iterator[Path]:
    """A shared filesystem no run has used: a folder of the test cluster's shared dir, mode 1777 as
    the shared dir itself, so that the first operator's run makes the top folder."""
    path = Path(SHARED) / f"operators-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def thresholds(drop: Path, name: str, **keys: object) -> Path:
    """The repository's thresholds.toml plus a profile extending ``ci`` with ``keys``."""
    path = drop / f"thresholds-{name}.toml"
    lines = [f"\n[profiles.{name}]", 'extends = "ci"', *(f"{k} = {json.dumps(v)}" for k, v in keys.items())]
    path.write_text((REPO / "thresholds.toml").read_text() + "\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def run_suite(ops: Operators, name: str, drop: Path, *args: str, env: dict[str, str] | None = None) -> OperatorRun:
    """pytest as the operator ``name``, from the repository, the way an operator starts it (bounded)."""
    op = ops[name]
    results = drop / f"results-{op.name}-{uuid.uuid4().hex[:6]}.json"
    argv = [str(ops.python), "-m", "pytest", "-p", "no:cacheprovider", "-rA", f"--gpucluster-results={results}", *args]
    base = {**os.environ, "SLURM_CONF": SLURM_CONF, **(env or {})}
    proc = run_as(op, argv, env=base, cwd=REPO, timeout=420)
    document = json.loads(results.read_text()) if results.exists() else {}
    return OperatorRun(proc.returncode, proc.stdout + proc.stderr, document)


def assert_every_selected_check_passed(run: OperatorRun) -> None:
    acc = run.acceptance
    assert run.returncode == 0 and acc["verdict"] == "PARTIAL", run.output[-4000:]
    bad = ("fail", "xpass", "not_judged", "fault", "interrupted")
    assert {k: acc["counts"][k] for k in bad} == dict.fromkeys(bad, 0), acc


def test_operators_one_after_the_other_then_at_once_never_shut_each_other_out(operators, drop, fresh_shared):
    prof = thresholds(drop, "ci_ops", shared_fs=str(fresh_shared))
    args = (*FEW, "--cluster=ci_ops", f"--gpucluster-thresholds={prof}")
    first = run_suite(operators, "gcop1", drop, *args)
    second = run_suite(operators, "gcop2", drop, *args)
    for run in (first, second):
        assert_every_selected_check_passed(run)
    top = fresh_shared / ".pytest-gpucluster"
    assert top.stat().st_uid == operators["gcop1"].uid and top.stat().st_mode & 0o7777 == 0o1777
    for name, run in (("gcop1", first), ("gcop2", second)):
        assert run.results["environment"]["shared_area"] == str(top / name)
        assert (top / name).stat().st_uid == operators[name].uid
        assert all(j["folder"].startswith(f"{top / name}/jobs/") for j in run.jobs()), run.jobs()
        assert not list((top / name).glob("sharedfs-*")), "the shared-filesystem scratch stayed"
    # At once, on a shared filesystem neither has used: both make the top folder.
    shutil.rmtree(top)
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda name: run_suite(operators, name, drop, *args), NAMES))
    for run in together:
        assert_every_selected_check_passed(run)
    assert top.stat().st_mode & 0o7777 == 0o1777
    print(f"gcop1 then gcop2, then both at once: {[r.acceptance['headline'] for r in (first, second, *together)]}")


@pytest.fixture
def maint_reservations(slurm_cluster, operators) -> Iterator[tuple[str, str]]:
    """Two ``flags=maint`` reservations for both operators: one over node1 and node2 (the ci
    profile's nodes), one over node3 and node4."""
    names = tuple(f"gcop-maint-{uuid.uuid4().hex[:6]}" for _ in range(2))
    try:
        for name, nodes in zip(names, ("node[1-2]", "node[3-4]"), strict=True):
            slurm_cmd(
                "scontrol", "create", "reservation", f"ReservationName={name}", "Users=gcop1,gcop2",
                f"Nodes={nodes}", "StartTime=now", "Duration=30", "Flags=MAINT",
            )  # fmt: skip
        yield names[0], names[1]
    finally:
        for user in NAMES:
            slurm_cmd("scancel", "-u", user, check=False)
        for name in names:
            slurm_cmd("scontrol", "delete", f"ReservationName={name}", check=False)


def test_inside_maint_reservations_an_operators_handover_is_accepted_beside_another_operators_run(
    operators, drop, maint_reservations
):
    first_rack, second_rack = maint_reservations
    prof = thresholds(drop, "ci_maint", reservation=first_rack)
    in_first = (*HANDOVER, "--cluster=ci_maint", f"--gpucluster-thresholds={prof}")
    # gcop1 with its shell's sbatch defaults exported, and a drain it may not carry out: a light
    # job and a measuring one are enough to show how jobs are written (PARTIAL: a few areas);
    # the whole handover is ACCEPTED in the runs at once below.
    env = {"SBATCH_TIMELIMIT": "1", "SBATCH_JOB_NAME": "x"}
    some = (*FEW, "tests/acceptance/test_nccl.py", "-m", "multinode and not slow")
    setup = ("--cluster=ci_maint", f"--gpucluster-thresholds={prof}", "--gpucluster-drain-failed")
    run = run_suite(operators, "gcop1", drop, *some, *setup, env=env)
    acc, env = run.acceptance, run.results.get("environment", {})
    print(f"gcop1 in {first_rack}: {acc.get('headline')}")
    assert run.returncode == 0 and acc["verdict"] == "PARTIAL", run.output[-6000:]
    assert acc["counts"].get("fail", 0) == 0 and acc["counts"].get("error", 0) == 0, acc
    # The reservation's nodes are the tested ones; MAINTENANCE there is no fault.
    assert run.results["nodes"] == ["node1", "node2"] and "excluded_nodes" not in env, env
    assert env["reservation"] == first_rack and env["measuring_jobs_exclusive"] is True
    # The caller's defaults were recorded, named, and changed no job.
    assert env["caller_slurm_env"] == {"SBATCH_JOB_NAME": "x", "SBATCH_TIMELIMIT": "1"}
    assert "[gpucluster] warning: the caller's SBATCH_JOB_NAME='x', SBATCH_TIMELIMIT='1' would have changed" in (
        run.output
    )
    job = run.jobs()[0]
    said = slurm_cmd("sacct", "-n", "-P", "-X", "-j", job["job_id"], "-o", "JobName,Timelimit,Reservation")
    name, limit, reservation = said.strip().splitlines()[0].split("|")
    assert name.startswith("gpucluster-") and limit == "00:05:00" and reservation == first_rack, said
    # Measuring jobs take whole nodes, light ones share them; every job is in the reservation.
    scripts = {j["name"]: next(Path(j["folder"]).glob("*_submission.sh")).read_text() for j in run.jobs()}
    intra = next(text for job_name, text in scripts.items() if "nccl-intra" in job_name)
    light = next(text for job_name, text in scripts.items() if job_name.endswith("-sharedfs"))
    assert "#SBATCH --exclusive" in intra and "#SBATCH --exclusive" not in light
    assert all(f"#SBATCH --reservation={first_rack}" in text for text in scripts.values())
    # gcop1 may not drain: said before any job, and the verdict is the same.
    assert env["drain_right"]["allowed"] is False
    warning = "[gpucluster] warning: --gpucluster-drain-failed: gcop1 may not drain nodes: Slurm lets only root"
    assert warning in run.output
    assert run.output.index(warning) < run.output.index("PASSED")
    # Then, at once, gcop2 on the same nodes and shared filesystem (the whole handover with its
    # soak, ACCEPTED: the self-test's one whole handover, judged by test_handover_ci.py's rule) and
    # gcop1 in the other reservation (a few areas on the same shared filesystem, every one passed):
    # a second whole handover would only double the CPU work on the CI machine's cores.
    other = thresholds(drop, "ci_maint2", reservation=second_rack)
    in_second = (*FEW, "--cluster=ci_maint2", f"--gpucluster-thresholds={other}")
    with ThreadPoolExecutor(2) as pool:
        after = pool.submit(run_suite, operators, "gcop2", drop, *in_first)
        beside = pool.submit(run_suite, operators, "gcop1", drop, *in_second)
    for who, got, nodes, verdict in (
        ("gcop2", after.result(), ["node1", "node2"], "ACCEPTED"),
        ("gcop1", beside.result(), ["node3", "node4"], "PARTIAL"),
    ):
        print(f"then {who} on {nodes}: {got.acceptance.get('headline')}")
        assert got.returncode == 0 and got.acceptance["verdict"] == verdict, got.output[-6000:]
        if verdict == "PARTIAL":
            assert_every_selected_check_passed(got)
        else:
            assert_whole_handover(got.returncode, got.output, got.results, "ci_maint")
        assert got.results["nodes"] == nodes, got.results["nodes"]
        assert got.results["environment"]["shared_area"] == f"{SHARED}/.pytest-gpucluster/{who}"


def test_a_constraint_no_node_satisfies_stops_before_any_job(slurm_cluster, drop, run_acceptance):
    prof = thresholds(drop, "ci_a100", constraint="a100&ib")
    run = run_acceptance(*FEW, "--cluster=ci_a100", f"--gpucluster-thresholds={prof}")
    assert run.returncode == 4, run.output[-3000:]
    assert (
        "profiles.ci_a100.constraint=a100&ib: partition 'debug' with features 'a100&ib' holds no node; "
        "profile 'ci_a100' tests 2." in run.output
    )
    assert run.results == {"tests": []} and "[gpucluster] job" not in run.output  # refused before any job
