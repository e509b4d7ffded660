"""Which checks the acceptance of a profile requires, and what a run's selection left out.

Known before any job is submitted, from the collected checks' markers and the profile's shape:

* **not applicable**: the cluster the profile describes gives the check nothing to measure (one
  node: nothing across nodes; no GPU devices; no InfiniBand expected; the local executor: no
  Slurm). Reported with its reason, never as a pass, never missing.
* **required**: every other check, except the ``slow`` burn checks unless the profile sets
  ``require_slow = true`` (those are *optional*: judged when selected, never missing). The soak
  is required where one was asked for, or where the profile requires one (then a run without a
  duration leaves it not judged); else it is not applicable.
* **not selected**: required checks that ``-k``, ``-m``, ``--deselect`` or a command line naming
  files or single tests left out. A run with any is PARTIAL, never ACCEPTED.

A check whose needs the profile meets on paper but the cluster cannot meet now (a 2-node profile
with one usable node) is required, and skipped with the reason: the run is INCOMPLETE.

Pure: no pytest, no Slurm. ``session.py`` turns pytest items into ``Needs`` and a ``Shape``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# Markers that state a check's needs (declared in plugin.py).
NEED_MARKERS = ("across_nodes", "gpu", "slurm", "infiniband", "accounting", "slow", "soak")


@dataclass(frozen=True)
class Needs:
    """What one collected check needs, read from its markers."""

    nodeid: str
    across_nodes: bool = False
    gpus: int = 0  # GPUs per node (``gpu(N)``)
    gres_only: bool = False  # the GPUs may be Slurm GRES without devices
    slurm: bool = False
    infiniband: bool = False
    accounting: bool = False
    slow: bool = False
    soak: bool = False  # the soak: it runs only where a soak was asked for
    declared: str = ""  # why the check's own test file declares it not applicable to this shape


@dataclass(frozen=True)
class Shape:
    """What the profile says the cluster is, and what this run found of it."""

    profile: str
    executor: str
    nodes: int  # the profile's node count
    usable_nodes: int  # nodes this run can test (Slurm: usable nodes of the partition)
    gpus_per_node: int
    gpus_declared: bool  # the profile states gpus_per_node (otherwise NVML counted this machine's)
    gpus_are_real: bool
    ib_hcas: int
    accounting: bool
    require_slow: bool = False
    unusable: str = ""  # why fewer nodes are usable than expected (Slurm's states and reasons)
    soak_s: float = 0.0  # the soak asked for (--gpucluster-soak or the profile's soak.duration); 0: none
    soak_required: bool = False  # the profile's acceptance needs a soak (soak.required)


def not_applicable(needs: Needs, shape: Shape) -> str | None:
    """Why the check cannot apply to a cluster of this shape, or None."""
    p = shape.profile
    if needs.slurm and shape.executor != "slurm":
        return f"profile {p!r} uses the {shape.executor} executor; this check asks Slurm"
    if needs.across_nodes and shape.nodes < 2:
        noun = "node" if shape.nodes == 1 else "nodes"
        return f"profile {p!r} has {shape.nodes} {noun}; this check needs 2"
    if needs.gpus and shape.gpus_per_node < needs.gpus:
        where = "" if shape.gpus_declared else " (NVML found that many on this machine)"
        return f"profile {p!r} has {shape.gpus_per_node} GPU(s) per node{where}; this check needs {needs.gpus}"
    if needs.gpus and not shape.gpus_are_real and not needs.gres_only:
        return f"profile {p!r} has GRES-only GPUs (gpus_are_real = false); this check needs GPU devices"
    if needs.infiniband and shape.ib_hcas < 1:
        return f"profile {p!r} expects no InfiniBand (ib_hcas = 0)"
    if needs.accounting and not shape.accounting:
        return f"profile {p!r} runs without Slurm accounting (accounting = false)"
    if needs.soak and shape.soak_s <= 0 and not shape.soak_required:
        return f"no soak was asked for (--gpucluster-soak=DURATION, or duration in [profiles.{p}.soak])"
    return needs.declared or None


def cannot_run(needs: Needs, shape: Shape) -> str | None:
    """Why a check that applies cannot run on what this run found, or None."""
    if needs.soak and shape.soak_s <= 0:
        return (
            f"profile {shape.profile!r} requires a soak (soak.required) and none was asked for; "
            "add --gpucluster-soak=DURATION"
        )
    if needs.across_nodes and shape.executor == "slurm" and shape.usable_nodes < 2:
        extra = f" ({shape.unusable})" if shape.unusable else ""
        return (
            f"profile {shape.profile!r} expects {shape.nodes} nodes, {shape.usable_nodes} usable{extra}; "
            "this check needs 2"
        )
    return None


def alone(needs: Needs, shape: Shape, node: str | None) -> str | None:
    """Why a check of one usable node against the others has nothing to judge it by: no other
    node is usable, each left out for its own state (Slurm's), or None. Not applicable to that
    node, as for a node whose peers were lost during the run: its peers' faults are theirs."""
    if node is None or not needs.across_nodes or shape.executor != "slurm" or shape.nodes < 2:
        return None
    if shape.usable_nodes != 1:
        return None
    return f"{node} has no other node to be judged with ({shape.unusable or 'no other node is usable'})"


@dataclass
class Selection:
    """The required set of a run and what its selection left out (stored in the results)."""

    command: list[str] = field(default_factory=list)
    keyword: str = ""
    markexpr: str = ""
    deselect: list[str] = field(default_factory=list)
    named: list[str] = field(default_factory=list)  # files or single tests the command line named
    required: list[str] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)
    not_selected: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        """Whether the selection is narrower than the required set."""
        return bool(self.not_selected or self.named)

    def merge(self, other: Selection) -> None:
        """Fold another process's view in (xdist workers each collect the whole suite)."""
        for name in ("required", "optional", "not_selected", "named", "deselect"):
            mine: list[str] = getattr(self, name)
            mine += [x for x in getattr(other, name) if x not in mine]
        self.not_applicable.update(other.not_applicable)
        self.command = self.command or other.command
        self.keyword = self.keyword or other.keyword
        self.markexpr = self.markexpr or other.markexpr


def plan_selection(
    collected: Sequence[Needs],
    selected: Iterable[str],
    shape: Shape,
    *,
    named: Sequence[str] = (),
    command: Sequence[str] = (),
    keyword: str = "",
    markexpr: str = "",
    deselect: Sequence[str] = (),
) -> Selection:
    """The required set over every collected check (before ``-k``/``-m``/``--deselect``), and
    the required checks missing from ``selected`` (the node ids that will run)."""
    chosen = set(selected)
    sel = Selection(
        command=list(command), keyword=keyword, markexpr=markexpr, deselect=list(deselect), named=list(named)
    )
    for needs in collected:
        why = not_applicable(needs, shape)
        if why is not None:
            sel.not_applicable[needs.nodeid] = why
        elif needs.slow and not shape.require_slow:
            sel.optional.append(needs.nodeid)
        else:
            sel.required.append(needs.nodeid)
            if needs.nodeid not in chosen:
                sel.not_selected.append(needs.nodeid)
    return sel
