"""Entry point: declares options, ini keys and markers, and builds the run's session.

No logic lives here; the session object (``session.py``) holds all state and hooks.
"""

from __future__ import annotations

import importlib.metadata
import os
import secrets
import socket
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucluster import slurm
from pytest_gpucluster.collection import CollectionHooks
from pytest_gpucluster.config import Profile, load
from pytest_gpucluster.config.options import (
    SOAK_OPTION,
    Outputs,
    merge_belongs,
    with_reservation,
    with_soak,
    writable_file,
)
from pytest_gpucluster.config.shipped import default_thresholds, suite_dir
from pytest_gpucluster.errors import ConfigError
from pytest_gpucluster.phases import CheckPhases
from pytest_gpucluster.results.codec import load_node_verdicts
from pytest_gpucluster.session import GpuClusterSession, Settings, install_sigterm_as_interrupt
from pytest_gpucluster.verdict.merge import retest_choice

pytest_plugins = [
    "pytest_gpucluster.fixtures",
    "pytest_gpucluster.results.recording",
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
    "soak": (
        "the burn-in of --gpucluster-soak=DURATION, after the one-shot checks; not applicable without a soak "
        "asked for (required where the profile's soak.required is true)"
    ),
    "quick": "the quick acceptance subset (about a minute on one node); a run of it alone is PARTIAL",
    "uses(*requests)": (
        "the jobs (pytest_gpucluster.plan.jobs.JobRequest) the check reads from, through the `measured` "
        "fixture; the plan may start a light one ahead of the first test"
    ),
}


# The option that names the cluster; every other option of the plugin carries this prefix, so that
# no ordinary conftest's option (``--dry-run``, ``--nodes``, ``--results``) collides with one of ours.
PREFIX = "--gpucluster-"
# ini keys: a repository of acceptance checks names its default profile (this one's pyproject says
# ``gpucluster_cluster = "local"``, so a bare ``pytest`` here runs the suite on this machine).
INI_CLUSTER = "gpucluster_cluster"
INI_THRESHOLDS = "gpucluster_thresholds"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``gpucluster`` option group and its ini keys. Registered in every pytest run; the plugin
    acts only where a run asks for it (``asked_for``)."""
    parser.addini(INI_CLUSTER, "the cluster profile this directory's runs test when --cluster is not given")
    parser.addini(
        INI_THRESHOLDS, "profiles and thresholds file, relative to the rootdir (default: thresholds.toml there)"
    )
    group = parser.getgroup("gpucluster", "GPU cluster acceptance (pytest-gpucluster)")
    group.addoption(
        "--cluster",
        default=None,
        metavar="NAME",
        help="test the cluster of this profile (thresholds.toml): turns the plugin on; `local` is this machine",
    )
    group.addoption(
        f"{PREFIX}thresholds",
        default=None,
        metavar="PATH",
        dest="gpucluster_thresholds",
        help="profiles and thresholds file (default: thresholds.toml at the rootdir, else the one the "
        "plugin ships); turns the plugin on, with --cluster=local unless one is named",
    )
    group.addoption(
        f"{PREFIX}results",
        default=None,
        metavar="PATH",
        dest="gpucluster_results",
        help="write machine-readable JSON results here, updated after every test",
    )
    group.addoption(
        f"{PREFIX}metrics",
        default=None,
        metavar="PATH",
        dest="gpucluster_metrics",
        help="write the verdicts and figures in the Prometheus text format here at the end (a .prom file "
        "for node_exporter's textfile collector)",
    )
    group.addoption(
        f"{PREFIX}baseline",
        default=None,
        metavar="PATH",
        dest="gpucluster_baseline",
        help="compare measurements with an earlier --gpucluster-results file",
    )
    group.addoption(
        f"{PREFIX}calibrate",
        default=None,
        metavar="PATH",
        dest="gpucluster_calibrate",
        help="write a thresholds.toml fragment derived from this run's measurements",
    )
    group.addoption(
        f"{PREFIX}nodes",
        default=None,
        metavar="HOSTLIST",
        dest="gpucluster_nodes",
        help="test only these nodes (a Slurm hostlist, e.g. gpu-[03,11]): a re-test of repaired nodes",
    )
    group.addoption(
        f"{PREFIX}reservation",
        default=None,
        metavar="NAME",
        dest="gpucluster_reservation",
        help="run the jobs in this Slurm reservation (a Slurm profile's `reservation` for one run): its "
        "nodes are the ones tested",
    )
    group.addoption(
        f"{PREFIX}soak",
        default=None,
        metavar="DURATION",
        dest="gpucluster_soak",
        help="soak every node for this long after the one-shot checks (30m, 8h, 1h30m; 0: none): each GPU "
        "judged cycle by cycle against itself and its node; overrides the profile's soak.duration",
    )
    group.addoption(
        f"{PREFIX}soak-fail-fast",
        action="store_true",
        default=False,
        dest="gpucluster_soak_fail_fast",
        help="end every node's soak at the first failing node (without it only that node's soak ends)",
    )
    group.addoption(
        f"{PREFIX}merge-results",
        default=None,
        metavar="PATH",
        dest="gpucluster_merge_results",
        help="merge this run's node verdicts with an earlier results file into one handover verdict; "
        f"without {PREFIX}nodes, re-test that run's nodes that were not accepted",
    )
    group.addoption(
        f"{PREFIX}dry-run",
        action="store_true",
        dest="gpucluster_dry_run",
        help="print the plan of jobs for the selected checks and stop: nothing is submitted",
    )
    group.addoption(
        f"{PREFIX}drain-failed",
        action="store_true",
        default=False,
        dest="gpucluster_drain_failed",
        help="after the run, drain each REJECTED node in Slurm with the check and its evidence as "
        "the reason (never a node left out before any job: drained or down in Slurm, or short of "
        "GPUs in its Gres); off by default",
    )
    group.addoption(
        f"{PREFIX}calibrate-from",
        action="append",
        default=[],
        metavar="PATH[,PATH...]",
        dest="gpucluster_calibrate_from",
        help=f"{PREFIX}calibrate: earlier results files of clean runs to calibrate from, with this run's "
        "measurements if it has any (repeat the option or separate with commas; 3 or more runs advised)",
    )
    group.addoption(
        f"{PREFIX}calibrate-fail",
        type=float,
        default=None,
        metavar="FRACTION",
        dest="gpucluster_calibrate_fail",
        help=f"{PREFIX}calibrate: the fail line is never above this fraction of the median measured "
        "(default 0.75 on GPUs, 0.25 on CPU stand-ins)",
    )
    group.addoption(
        f"{PREFIX}calibrate-warn",
        type=float,
        default=None,
        metavar="FRACTION",
        dest="gpucluster_calibrate_warn",
        help=f"{PREFIX}calibrate: the warn line is never above this fraction of the median measured "
        "(default 0.85 on GPUs, 0.5 on CPU stand-ins)",
    )


# Options that only mean something in a run that tests a cluster: given without one, a usage error.
RUN_OPTIONS = (
    "gpucluster_results",
    "gpucluster_baseline",
    "gpucluster_calibrate",
    "gpucluster_nodes",
    "gpucluster_reservation",
    "gpucluster_soak",
    "gpucluster_soak_fail_fast",
    "gpucluster_merge_results",
    "gpucluster_dry_run",
    "gpucluster_drain_failed",
    "gpucluster_calibrate_from",
    "gpucluster_calibrate_fail",
    "gpucluster_calibrate_warn",
)


def asked_for(config: pytest.Config) -> str | None:
    """The profile a run asks the plugin to test, or None where it asks for nothing: ``--cluster``,
    else the ini key ``gpucluster_cluster``, else ``local`` when only a thresholds file is named.
    Everywhere else the plugin stays out of the run (another project's tests in the same
    environment), as if it were not installed."""
    named = config.getoption("cluster", None)
    if named:
        return str(named)
    ini = str(config.getini(INI_CLUSTER) or "").strip()
    if ini:
        return ini
    if config.getoption("gpucluster_thresholds", None) or str(config.getini(INI_THRESHOLDS) or "").strip():
        return "local"
    return None


def unasked_options(config: pytest.Config) -> list[str]:
    """The plugin's options given in a run that tests no cluster, as the command line spells them."""
    given = []
    for dest in RUN_OPTIONS:
        value = config.getoption(dest, None)
        if value not in (None, False, []):
            given.append("--" + dest.replace("_", "-"))
    return given


def thresholds_file(config: pytest.Config) -> tuple[Path, str]:
    """The profiles and thresholds file of this run and where it came from, in the words the
    header and the results use: ``--gpucluster-thresholds``, the ini key, the rootdir's
    thresholds.toml, else the file the plugin ships. ConfigError for a named file that is not there."""
    option = config.getoption("gpucluster_thresholds", None)
    ini = str(config.getini(INI_THRESHOLDS) or "").strip()
    if option or ini:
        how = f"{PREFIX}thresholds" if option else f"ini key {INI_THRESHOLDS} in {config.inipath}"
        base = Path.cwd() if option else Path(config.rootpath)
        path = (base / Path(os.path.expandvars(option or ini)).expanduser()).resolve()
        if not path.is_file():
            raise ConfigError(
                f"{path}: no such file (from {how}). Name an existing file, or write the shipped one out "
                "with `python -m pytest_gpucluster init` and edit it."
            )
        return path, how
    here = Path(config.rootpath) / "thresholds.toml"
    if here.is_file():
        return here, f"the rootdir ({config.rootpath})"
    shipped = default_thresholds()
    if shipped is None:
        raise ConfigError(
            f"{here}: no such file, and this installation of pytest-gpucluster ships none. Pass "
            f"{PREFIX}thresholds=PATH or create thresholds.toml at the rootdir."
        )
    return shipped, f"shipped with pytest-gpucluster {version()}"


def version() -> str:
    """This installation's version of pytest-gpucluster."""
    try:
        return importlib.metadata.version("pytest-gpucluster")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def settings_from(config: pytest.Config, cluster: str) -> Settings:
    """Resolve options into Settings for a run of profile ``cluster``; ConfigError names the
    option or file key at fault."""
    path, origin = thresholds_file(config)
    cfg = load(path)
    profile = cfg.profile(cluster)
    reservation = config.getoption("gpucluster_reservation", None)
    if reservation is not None:
        profile = with_reservation(profile, reservation, f"{PREFIX}reservation")
    profile = with_soak(
        profile,
        config.getoption("gpucluster_soak", None),
        bool(config.getoption("gpucluster_soak_fail_fast", False)),
        file=str(path),
        shipped=default_thresholds(),
    )
    no_set = cfg.no_set_for(profile)
    if no_set and not config.getoption("gpucluster_calibrate"):
        raise ConfigError(no_set)  # a calibrating run measures without a set and writes one
    results = config.getoption("gpucluster_results")
    nodes = config.getoption("gpucluster_nodes", None)
    merge = config.getoption("gpucluster_merge_results", None)
    if nodes is None and merge and profile.executor == "slurm":
        nodes = ",".join(retest_nodes(Path(merge), f"{PREFIX}merge-results={merge}"))
    if nodes is not None:
        if profile.executor != "slurm":
            raise ConfigError(
                f"{PREFIX}nodes={nodes}: profile {profile.name!r} uses the {profile.executor} executor; "
                f"{PREFIX}nodes picks nodes of a Slurm partition."
            )
        try:
            picked = slurm.parse_hostlist(nodes)
        except ValueError as exc:
            raise ConfigError(f"{PREFIX}nodes={nodes}: {exc}") from None
    workerinput = getattr(config, "workerinput", None)
    earlier = None
    if workerinput is None:
        earlier = check_outputs_and_merge(config, profile, picked if nodes is not None else None)
    run_id = workerinput.get("gpucluster_run_id") if workerinput else None
    return Settings(
        config=cfg,
        profile=profile,
        thresholds_origin=origin,
        reservation_from=f"{PREFIX}reservation" if reservation is not None else "",
        soak_from=f"{SOAK_OPTION}={config.getoption('gpucluster_soak')}"
        if config.getoption("gpucluster_soak", None) is not None
        else f"profiles.{profile.name}.soak.duration={profile.soak.duration}",
        results_path=Path(results).resolve() if results else None,
        run_id=run_id or secrets.token_hex(4),
        nodes=picked if nodes is not None else (),
        is_controller=workerinput is None,
        is_xdist_worker=workerinput is not None,
        submits=not (config.option.collectonly or config.getoption("gpucluster_dry_run", False)),
        outputs=Outputs(
            baseline=config.getoption("gpucluster_baseline"),
            calibrate=config.getoption("gpucluster_calibrate"),
            calibrate_from=_paths(config.getoption("gpucluster_calibrate_from")),
            calibrate_fail=config.getoption("gpucluster_calibrate_fail"),
            calibrate_warn=config.getoption("gpucluster_calibrate_warn"),
            merge_results=merge,
            merge_doc=earlier,
            drain_failed=bool(config.getoption("gpucluster_drain_failed")),
            html=config.getoption("htmlpath", None),
            metrics=config.getoption("gpucluster_metrics", None),
        ),
    )


def _paths(options: list[str]) -> tuple[str, ...]:
    """The paths of an option given several times, each a comma-separated list."""
    return tuple(p.strip() for option in options for p in option.split(",") if p.strip())


# Options naming a file the run writes at its end, by dest (pytest-html's --html is "htmlpath").
OUTPUT_OPTIONS = (
    (f"{PREFIX}results", "gpucluster_results"),
    ("--html", "htmlpath"),
    (f"{PREFIX}calibrate", "gpucluster_calibrate"),
    (f"{PREFIX}metrics", "gpucluster_metrics"),
)


def check_outputs_and_merge(
    config: pytest.Config, profile: Profile, nodes: tuple[str, ...] | None
) -> dict[str, Any] | None:
    """Before any job: every file the run writes at its end can be written, and the earlier results
    it merges with are of this cluster (``options``): those results, or None without
    ``--gpucluster-merge-results``. ConfigError naming the option otherwise."""
    for option, dest in OUTPUT_OPTIONS:
        value = config.getoption(dest, None)
        if value:
            writable_file(option, str(value))
    merge = config.getoption("gpucluster_merge_results", None)
    if merge:
        option = f"{PREFIX}merge-results={merge}"
        earlier = load_node_verdicts(Path(merge), option)
        here = nodes if nodes is not None else (socket.gethostname(),) if profile.executor == "local" else ()
        merge_belongs(earlier, option, profile=profile.name, executor=profile.executor, nodes=here)
        return earlier
    return None


def retest_nodes(path: Path, option: str) -> tuple[str, ...]:
    """What a re-test with ``--gpucluster-merge-results`` and no ``--gpucluster-nodes`` runs on: the
    nodes an earlier results file did not accept (REJECTED, INCOMPLETE, PARTIAL) and accepted
    partners for the checks across nodes (``verdict.merge.retest_choice``). ConfigError, naming
    ``option``, for a file that cannot be read, holds no node verdicts, or accepted every node."""
    nodes = load_node_verdicts(path, option)["acceptance"]["nodes"]
    verdicts = nodes["verdicts"]
    left, partners = retest_choice({str(n): str(v.get("verdict")) for n, v in verdicts.items()})
    if not left:
        raise ConfigError(
            f"{option}: every node of that run was accepted ({nodes.get('summary', '')}); nothing to "
            f"re-test. Name nodes with {PREFIX}nodes=HOSTLIST to test them again."
        )
    return (*left, *partners)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the markers; where the run asks for a cluster (``asked_for``), read thresholds.toml
    and build the session (a usage error on bad input). A run that asks for none is left alone."""
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.option.help or config.option.version:
        return
    cluster = asked_for(config)
    if cluster is None:
        given = unasked_options(config)
        if given:
            raise pytest.UsageError(
                f"{', '.join(given)}: this run tests no cluster; add --cluster=NAME (a profile of thresholds.toml)."
            )
        return
    if config.getoption("gpucluster_dry_run"):
        config.option.collectonly = True  # collect and plan; no test runs, so no job is submitted
    try:
        settings = settings_from(config, cluster)
        session = GpuClusterSession(settings)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "gpucluster-session")
    config.pluginmanager.register(CollectionHooks(session), "gpucluster-collection")
    config.pluginmanager.register(CheckPhases(session), "gpucluster-phases")
    run_installed_suite(config)
    install_sigterm_as_interrupt()


def run_installed_suite(config: pytest.Config) -> None:
    """A run that names no tests (``pytest --cluster=NAME`` in a directory on a login node) runs the
    acceptance suite this installation ships, beside whatever checks of the site's own the
    directory holds (docs/extending.md). A run naming paths, or a repository whose ``testpaths``
    name its suite (this one), runs what it names."""
    if config.args_source != pytest.Config.ArgsSource.INVOCATION_DIR:
        return
    suite = suite_dir()
    if suite is None or any(suite.is_relative_to(Path(a).resolve()) for a in config.args):
        return
    config.args[:] = [str(suite), *config.args]


SESSION_KEY = pytest.StashKey[GpuClusterSession]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """xdist controller → workers: one run id, so every job of the run can be found and cancelled."""
    config = getattr(node, "config", None)
    if config is not None and SESSION_KEY in config.stash:
        node.workerinput["gpucluster_run_id"] = config.stash[SESSION_KEY].settings.run_id  # type: ignore[attr-defined]
