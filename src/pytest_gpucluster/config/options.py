"""Command-line values checked before any job: the files a run will write (``--gpucluster-results``,
``--html``, ``--gpucluster-calibrate``, ``--gpucluster-metrics``) and the earlier results it merges
with (``--gpucluster-merge-results``); and ``Outputs``, what the run does at its end, resolved once
from those options.

A run that could not write its results file at the end would have measured for nothing; a merge
with the file of another cluster would hand over nodes nobody tested. Each function raises
ConfigError naming the option, the value and what to do; the plugin turns it into a usage error
(exit 4) in ``pytest_configure``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpucluster.config import Profile
from pytest_gpucluster.config.load import SLURM_NAME
from pytest_gpucluster.config.soak import parse_duration, say_duration
from pytest_gpucluster.errors import ConfigError


def writable_file(option: str, value: str, *, base: Path | None = None) -> Path:
    """``value`` (relative to ``base``, else the working directory; ``~`` and ``$VARS`` expanded,
    as pytest-html does) as an absolute path this run can write at its end: not a folder, and its
    folder writable, or the nearest existing folder above it writable so that it can be created.
    Proved by creating and removing a file there, as the writers do (``results.codec.write``)."""
    path = Path(os.path.expandvars(value)).expanduser()
    path = (base or Path.cwd()) / path if not path.is_absolute() else path
    if path.is_dir():
        raise ConfigError(f"{option}={value}: {path} is a folder; name a file in it.")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"{option}={value}: {folder} is not a folder; name a file in a writable folder.")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{option}={value}: {path} exists and is not writable; name another file.")
    try:
        fd, probe = tempfile.mkstemp(prefix=".pytest-gpucluster-probe-", dir=folder)
    except OSError as exc:
        where = "its folder" if folder == path.parent else f"{folder}, where its folder {path.parent} would be made"
        raise ConfigError(
            f"{option}={value}: cannot write in {where}: {exc.strerror or exc}. "
            "Name a file in a writable folder; nothing has been run."
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return path


def with_reservation(profile: Profile, name: str, option: str) -> Profile:
    """``profile`` with its jobs in reservation ``name`` (``--gpucluster-reservation``): a Slurm
    profile and a Slurm name, or ConfigError naming the option."""
    if profile.executor != "slurm":
        raise ConfigError(
            f"{option}={name}: profile {profile.name!r} uses the {profile.executor} executor; a reservation "
            "holds nodes of a Slurm cluster."
        )
    if not SLURM_NAME.match(name):
        raise ConfigError(f"{option}={name}: not a Slurm name (letters, digits, '_', '.', '-' only).")
    return dataclasses.replace(profile, reservation=name)


SOAK_OPTION = "--gpucluster-soak"


def with_soak(profile: Profile, duration: str | None, fail_fast: bool, *, file: str, shipped: Path | None) -> Profile:
    """``profile`` with this run's soak: ``--gpucluster-soak`` over its ``soak.duration``, and
    ``--gpucluster-soak-fail-fast``. ConfigError naming the option for a value that is no
    duration, and naming the file's missing tables for a soak asked for under a thresholds.toml
    without the soak's rules."""
    soak = profile.soak
    if duration is not None:
        try:
            parse_duration(duration)
        except ValueError as exc:
            raise ConfigError(f"{SOAK_OPTION}={duration}: {exc}.") from None
        soak = dataclasses.replace(soak, duration=duration)
    if fail_fast:
        soak = dataclasses.replace(soak, fail_fast=True)
    profile = dataclasses.replace(profile, soak=soak)
    missing = profile.soak_rules.missing()
    if soak.duration_s > 0 and missing:
        how = f"{SOAK_OPTION}={duration}" if duration is not None else f"profiles.{profile.name}.soak.duration"
        where = f"the file this installation ships ({shipped})" if shipped else "the thresholds.toml the plugin ships"
        raise ConfigError(
            f"{file}: a soak of {say_duration(soak.duration_s)} was asked for ({how}), but the file has no "
            f"{', '.join(missing)}: the rules it judges every GPU by. Copy the [soak.rules.*] tables from {where}; "
            "nothing has been run."
        )
    return profile


def soak_fits(limit_min: int, max_time_s: float | None, partition: str, asked: str) -> None:
    """A soak's jobs (``limit_min`` each) fit the partition's MaxTime (None: unlimited);
    ConfigError naming where the duration came from and the partition's limit otherwise."""
    if max_time_s is None or limit_min * 60 <= max_time_s:
        return
    raise ConfigError(
        f"{asked}: each node's soak job needs {limit_min} min (the duration, two cycles and 5 min to start and "
        f"end), but partition {partition!r} allows {say_duration(max_time_s)} (MaxTime); soak for less, or "
        "name a partition that allows it. Nothing has been run."
    )


def merge_belongs(
    earlier: Mapping[str, Any], option: str, *, profile: str, executor: str, nodes: Sequence[str]
) -> None:
    """An earlier results file (``--gpucluster-merge-results``) must be of this run's cluster: the same
    profile and executor, and every node this run tests must be one it tested or excluded.
    ConfigError naming what differs otherwise."""
    cluster = earlier.get("cluster") or {}
    theirs = earlier.get("profile") or cluster.get("profile")
    their_nodes = _nodes_of(earlier)
    seen = ", ".join(their_nodes) or "none"
    if theirs != profile:
        raise ConfigError(
            f"{option}: a run of profile {theirs!r} (executor {cluster.get('executor', '?')}, nodes: {seen}); "
            f"this run is of profile {profile!r}. Merge with the results of a run of {profile!r}."
        )
    if cluster.get("executor") not in (None, executor):
        raise ConfigError(
            f"{option}: that run used the {cluster.get('executor')} executor; this one the {executor} executor."
        )
    strangers = [n for n in nodes if n not in their_nodes]
    if strangers:
        raise ConfigError(
            f"{option}: {', '.join(strangers)} {'was' if len(strangers) == 1 else 'were'} not in that run "
            f"(its nodes: {seen}); a re-test merges with the run that tested its nodes. Test new nodes "
            "in a run of their own."
        )


def _nodes_of(doc: Mapping[str, Any]) -> list[str]:
    """Every node an earlier run tested, judged or left out, in its order."""
    verdicts = ((doc.get("acceptance") or {}).get("nodes") or {}).get("verdicts") or {}
    excluded = (doc.get("environment") or {}).get("excluded_nodes") or {}
    return list(dict.fromkeys([*map(str, doc.get("nodes") or []), *verdicts, *excluded]))


@dataclass(frozen=True)
class Outputs:
    """What a run writes and does once its checks are done, read from the command line once
    (``plugin.settings_from``): the files it compares with, calibrates from and merges with, the
    file it calibrates into, and whether it drains the nodes it rejects. Values keep the operator's
    spelling where a message quotes them (``--gpucluster-baseline=old.json: ...``)."""

    baseline: str | None = None  # --gpucluster-baseline, as given
    calibrate: str | None = None  # --gpucluster-calibrate, as given
    calibrate_from: tuple[str, ...] = ()  # --gpucluster-calibrate-from, each path as given
    calibrate_fail: float | None = None
    calibrate_warn: float | None = None
    merge_results: str | None = None  # --gpucluster-merge-results, as given
    merge_doc: Mapping[str, Any] | None = None  # the earlier results it names, read once (controller)
    drain_failed: bool = False
    html: str | None = None  # pytest-html's --html
    metrics: str | None = None  # --gpucluster-metrics, as given

    @property
    def baseline_path(self) -> Path | None:
        """``--gpucluster-baseline`` as an absolute path."""
        return Path(self.baseline).resolve() if self.baseline else None

    @property
    def calibrate_path(self) -> Path | None:
        """``--gpucluster-calibrate`` as an absolute path."""
        return Path(self.calibrate).resolve() if self.calibrate else None

    @property
    def metrics_path(self) -> Path | None:
        """``--gpucluster-metrics`` as an absolute path."""
        return Path(self.metrics).resolve() if self.metrics else None

    @property
    def merge_path(self) -> Path | None:
        """``--gpucluster-merge-results`` as an absolute path."""
        return Path(self.merge_results).resolve() if self.merge_results else None
