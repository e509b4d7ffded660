"""Entry point: declares options, ini keys and markers, and builds the run's session.

No logic lives here; the session object (``session.py``) holds all state and hooks.
"""

from __future__ import annotations

import secrets
import socket
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.config import Profile, load
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.options import Outputs, merge_belongs, writable_file
from pytest_gpucluster.results import load_node_verdicts
from pytest_gpucluster.session import GpuClusterSession, Settings, install_sigterm_as_interrupt

pytest_plugins = [
    "pytest_gpucluster.fixtures",
    "pytest_gpucluster.recording",
    "pytest_gpucluster.report.pytest_html_hooks",
]

MARKERS = {
    "multinode": (
        "the acceptance of a multi-node cluster: the plugin puts it on every acceptance check, so "
        "`-m multinode` runs the whole handover (node-local checks on every node, across-node checks on all)"
    ),
    "across_nodes": "needs at least 2 nodes; not applicable on a profile of one node",
    "gpu(count=1, gres_only=False)": (
        "needs `count` GPUs per node (devices unless gres_only=True); not applicable on a profile with fewer"
    ),
    "slurm": "asks Slurm itself; not applicable with the local executor",
    "infiniband": "needs InfiniBand; not applicable where the profile expects none (ib_hcas = 0)",
    "accounting": "needs Slurm accounting; not applicable where the profile says accounting = false",
    "slow": "minutes of load (burn checks); optional unless the profile sets require_slow = true",
    "quick": "the quick acceptance subset (about a minute on one node); a run of it alone is PARTIAL",
    "uses(*requests)": (
        "the jobs (pytest_gpucluster.plan.jobs.JobRequest) the check reads from, through the `measured` "
        "fixture; the plan may start a light one ahead of the first test"
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``gpucluster`` option group."""
    group = parser.getgroup("gpucluster", "GPU cluster acceptance")
    group.addoption(
        "--cluster",
        default="local",
        metavar="NAME",
        help="cluster profile from thresholds.toml (default: local, this machine)",
    )
    group.addoption(
        "--thresholds",
        default=None,
        metavar="PATH",
        help="profiles and thresholds file (default: thresholds.toml at the rootdir)",
    )
    group.addoption(
        "--results",
        default=None,
        metavar="PATH",
        help="write machine-readable JSON results here, updated after every test",
    )
    group.addoption(
        "--baseline", default=None, metavar="PATH", help="compare measurements with an earlier --results file"
    )
    group.addoption(
        "--calibrate",
        default=None,
        metavar="PATH",
        help="write a thresholds.toml fragment derived from this run's measurements",
    )
    group.addoption(
        "--nodes",
        default=None,
        metavar="HOSTLIST",
        dest="gpucluster_nodes",
        help="test only these nodes (a Slurm hostlist, e.g. gpu-[03,11]): a re-test of repaired nodes",
    )
    group.addoption(
        "--merge-results",
        default=None,
        metavar="PATH",
        help="merge this run's node verdicts with an earlier --results file into one handover verdict; "
        "without --nodes, re-test that run's nodes that were not accepted",
    )
    group.addoption(
        "--dry-run",
        action="store_true",
        dest="gpucluster_dry_run",
        help="print the plan of jobs for the selected checks and stop: nothing is submitted",
    )
    group.addoption(
        "--drain-failed",
        action="store_true",
        default=False,
        help="after the run, drain each REJECTED node in Slurm with the check and its evidence as "
        "the reason (never a node left out before any job: drained or down in Slurm, or short of "
        "GPUs in its Gres); off by default",
    )
    group.addoption(
        "--calibrate-from",
        action="append",
        default=[],
        metavar="PATH[,PATH...]",
        help="--calibrate: earlier --results files of clean runs to calibrate from, with this run's "
        "measurements if it has any (repeat the option or separate with commas; 3 or more runs advised)",
    )
    group.addoption(
        "--calibrate-fail",
        type=float,
        default=None,
        metavar="FRACTION",
        help="--calibrate: the fail line is never above this fraction of the median measured "
        "(default 0.75 on GPUs, 0.25 on CPU stand-ins)",
    )
    group.addoption(
        "--calibrate-warn",
        type=float,
        default=None,
        metavar="FRACTION",
        help="--calibrate: the warn line is never above this fraction of the median measured "
        "(default 0.85 on GPUs, 0.5 on CPU stand-ins)",
    )


def _thresholds_path(config: pytest.Config) -> Path:
    option = config.getoption("thresholds")
    if option:
        return Path(option).expanduser().resolve()
    return Path(config.rootpath) / "thresholds.toml"


def settings_from(config: pytest.Config) -> Settings:
    """Resolve options into Settings; ConfigError names the option or file key at fault."""
    path = _thresholds_path(config)
    if not path.is_file():
        how = "--thresholds" if config.getoption("thresholds") else f"the rootdir ({config.rootpath})"
        raise ConfigError(f"{path}: no such file (from {how}). Pass --thresholds=PATH or create thresholds.toml.")
    cfg = load(path)
    profile = cfg.profile(config.getoption("cluster"))
    no_set = cfg.no_set_for(profile)
    if no_set and not config.getoption("calibrate"):
        raise ConfigError(no_set)  # a calibrating run measures without a set and writes one
    results = config.getoption("results")
    nodes = config.getoption("gpucluster_nodes", None)
    merge = config.getoption("merge_results", None)
    if nodes is None and merge and profile.executor == "slurm":
        nodes = ",".join(retest_nodes(Path(merge), f"--merge-results={merge}"))
    if nodes is not None:
        if profile.executor != "slurm":
            raise ConfigError(
                f"--nodes={nodes}: profile {profile.name!r} uses the {profile.executor} executor; "
                "--nodes picks nodes of a Slurm partition."
            )
        try:
            picked = slurm.parse_hostlist(nodes)
        except ValueError as exc:
            raise ConfigError(f"--nodes={nodes}: {exc}") from None
    workerinput = getattr(config, "workerinput", None)
    earlier = None
    if workerinput is None:
        earlier = check_outputs_and_merge(config, profile, picked if nodes is not None else None)
    run_id = workerinput.get("gpucluster_run_id") if workerinput else None
    return Settings(
        config=cfg,
        profile=profile,
        results_path=Path(results).resolve() if results else None,
        run_id=run_id or secrets.token_hex(4),
        nodes=picked if nodes is not None else (),
        is_controller=workerinput is None,
        is_xdist_worker=workerinput is not None,
        outputs=Outputs(
            baseline=config.getoption("baseline"),
            calibrate=config.getoption("calibrate"),
            calibrate_from=tuple(
                p.strip() for o in config.getoption("calibrate_from") for p in o.split(",") if p.strip()
            ),
            calibrate_fail=config.getoption("calibrate_fail"),
            calibrate_warn=config.getoption("calibrate_warn"),
            merge_results=merge,
            merge_doc=earlier,
            drain_failed=bool(config.getoption("drain_failed")),
            html=config.getoption("htmlpath", None),
        ),
    )


def _paths(options: list[str]) -> tuple[str, ...]:
    """The paths of an option given several times, each a comma-separated list."""
    return tuple(p.strip() for option in options for p in option.split(",") if p.strip())


# Options naming a file the run writes at its end, by dest (pytest-html's --html is "htmlpath").
OUTPUT_OPTIONS = (("--results", "results"), ("--html", "htmlpath"), ("--calibrate", "calibrate"))


def check_outputs_and_merge(
    config: pytest.Config, profile: Profile, nodes: tuple[str, ...] | None
) -> dict[str, Any] | None:
    """Before any job: every file the run writes at its end can be written, and the earlier results
    it merges with are of this cluster (``options``): those results, or None without
    ``--merge-results``. ConfigError naming the option otherwise."""
    for option, dest in OUTPUT_OPTIONS:
        value = config.getoption(dest, None)
        if value:
            writable_file(option, str(value))
    merge = config.getoption("merge_results", None)
    if merge:
        option = f"--merge-results={merge}"
        earlier = load_node_verdicts(Path(merge), option)
        here = nodes if nodes is not None else (socket.gethostname(),) if profile.executor == "local" else ()
        merge_belongs(earlier, option, profile=profile.name, executor=profile.executor, nodes=here)
        return earlier
    return None


def retest_nodes(path: Path, option: str) -> tuple[str, ...]:
    """The nodes an earlier results file did not accept (REJECTED, INCOMPLETE, PARTIAL): what a
    re-test with ``--merge-results`` and no ``--nodes`` runs on. ConfigError, naming ``option``,
    for a file that cannot be read, holds no node verdicts, or accepted every node."""
    nodes = load_node_verdicts(path, option)["acceptance"]["nodes"]
    verdicts = nodes["verdicts"]
    left = tuple(n for n, v in verdicts.items() if v.get("verdict") != "ACCEPTED")
    if not left:
        raise ConfigError(
            f"{option}: every node of that run was accepted ({nodes.get('summary', '')}); nothing to "
            "re-test. Name nodes with --nodes=HOSTLIST to test them again."
        )
    return left


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register markers, read thresholds.toml and build the session (usage error on bad input)."""
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.option.help or config.option.version:
        return
    if config.getoption("gpucluster_dry_run"):
        config.option.collectonly = True  # collect and plan; no test runs, so no job is submitted
    try:
        settings = settings_from(config)
        session = GpuClusterSession(settings)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "gpucluster-session")
    install_sigterm_as_interrupt()


SESSION_KEY = pytest.StashKey[GpuClusterSession]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """xdist controller → workers: one run id, so every job of the run can be found and cancelled."""
    config = getattr(node, "config", None)
    if config is not None and SESSION_KEY in config.stash:
        node.workerinput["gpucluster_run_id"] = config.stash[SESSION_KEY].settings.run_id  # type: ignore[attr-defined]
