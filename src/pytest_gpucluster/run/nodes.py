"""The nodes a run tests: the profile's node list or its partition's first usable nodes (of its
reservation, with its constraint's features, where it names them: ``run.scope``), those Slurm will
not run jobs on (left out with its reason) and those lost under a job of the run."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Mapping, Sequence

from pytest_gpucluster import slurm
from pytest_gpucluster.config import Profile
from pytest_gpucluster.errors import ClusterFault, ConfigError, NodesHeld, SlurmQueryError
from pytest_gpucluster.launch.faults import cluster_fault, foreign_work, held_sentence, other_work
from pytest_gpucluster.launch.lost import LostNodes
from pytest_gpucluster.plan.selection import Shape
from pytest_gpucluster.run.scope import Scope
from pytest_gpucluster.run.shared_area import user_name
from pytest_gpucluster.slurm.reservation import reservation, reservation_names
from pytest_gpucluster.verdict.ranges import hostlist

# A dry run whose nodes are listed (the profile's nodelist, --gpucluster-nodes) plans from the list;
# their states only leave out those Slurm will not run jobs on, so it asks once, within this bound,
# and says so when Slurm did not answer instead of waiting out the run's timeout and retry window.
DRY_RUN_STATES_S = 5.0

ASKED = {"sinfo": "`sinfo --json`", "scontrol": "`scontrol --json show nodes`"}  # by ``Slurm.node_source``


class NodeSet:
    """The tested nodes, resolved once on first use. ``named``: the nodes ``--gpucluster-nodes`` names;
    ``lost``: the run's record of the nodes it lost under its jobs, which its launcher extends;
    ``client``: the run's client of Slurm; ``states_bound_s``: for a run that submits nothing,
    the bound on the one question of the listed nodes' states (None: asked as any question)."""

    def __init__(
        self,
        profile: Profile,
        *,
        named: Sequence[str] = (),
        check_named: bool = False,
        lost: LostNodes | None = None,
        reservation_from: str = "",
        client: slurm.Slurm | None = None,
        states_bound_s: float | None = None,
    ) -> None:
        self.profile = profile
        self.states_bound_s = states_bound_s
        self.client = slurm.Slurm() if client is None else client  # the run's client of Slurm
        self.named = tuple(named)
        self.lost_record = LostNodes() if lost is None else lost
        # The profile's reservation and constraint; the reservation as Slurm holds it, once read.
        self.scope = Scope(profile, reservation_from=reservation_from or f"profiles.{profile.name}.reservation")
        self._nodes: tuple[str, ...] | None = None
        self.excluded: dict[str, str] = {}
        self.info: dict[str, slurm.NodeInfo] = {}  # Slurm's word on the partition's nodes at the start
        self._partition: list[slurm.NodeInfo] | None = None  # the partition's nodes, once asked
        self.error: str | None = None
        self.states_unread = ""  # why Slurm's word on the nodes could not be read; empty once read
        self.fault: ClusterFault | None = None  # the node list could not be read: a fault outside the nodes
        self.held: dict[str, str] = {}  # node → the other work that held it past queue_timeout_s
        self.held_sentence = ""  # that, said once: the fault's sentence
        if self.named and profile.executor == "slurm" and check_named:
            self._check_named()
        if self.scope.narrowed and profile.executor == "slurm" and check_named:
            self._check_scope()

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes this run tests: the profile's nodelist, or the first usable nodes of its
        partition (drained and down ones are excluded and remembered with Slurm's reason)."""
        if self._nodes is None:
            self._nodes = self._resolve()
        return self._nodes

    @property
    def reserved(self) -> frozenset[str]:
        """The nodes of the profile's reservation, once read: there MAINTENANCE is no fault."""
        return self.scope.reserved

    @property
    def candidates(self) -> tuple[str, ...]:
        """The nodes of the partition the run may test where the profile narrows them (its
        reservation's, with its constraint's features); empty: the whole partition."""
        if not self.scope.narrowed:
            return ()
        self.nodes  # noqa: B018  (the partition and the reservation are read with the node list)
        return tuple(n.name for n in self._partition or () if self.scope.fits(n))

    @property
    def resolved(self) -> bool:
        return self._nodes is not None

    @property
    def lost(self) -> dict[str, str]:
        """Nodes that failed under a job of this run (name → Slurm's state and reason)."""
        return self.lost_record.nodes

    @property
    def live(self) -> tuple[str, ...]:
        """The tested nodes less those lost during the run and those other work holds: what later
        jobs run on."""
        lost = self.lost
        return tuple(n for n in self.nodes if n not in lost and n not in self.held)

    def hold(self, held: Mapping[str, str], sentence: str) -> None:
        """Learn that other work holds ``held`` (node → its holder) past queue_timeout_s: no later
        job waits on them again (``live``), and their checks are not judged (``held_fault``)."""
        new = {n: why for n, why in held.items() if n in self.nodes and n not in self.held}
        if new:
            self.held.update(new)
            self.held_sentence = self.held_sentence or sentence

    def held_fault(self, nodes: Sequence[str]) -> NodesHeld | None:
        """The fault to end a check of ``nodes`` with when other work holds some of them."""
        held = {n: self.held[n] for n in nodes if n in self.held}
        return NodesHeld(self.held_sentence, held) if held else None

    def wait_for_other_work(
        self, limit_s: float, run_prefix: str, say: Callable[[str], None], poll_s: float = 5.0
    ) -> dict[str, str]:
        """Before the run's first job: foreign work on the tested nodes (a job of no run of this
        suite, ``faults.foreign_work``) is waited for, up to ``limit_s``; a node it still holds
        then is held for the run (``hold``), so that no job of the run queues behind it and each
        check of it is not judged once, naming the holder, while the other nodes are tested.
        Slurm only; the holders seen."""
        if self.profile.executor != "slurm" or not self.nodes:
            return {}
        deadline = time.monotonic() + limit_s
        said = False
        while True:
            try:
                others = foreign_work(other_work(slurm.holders(self.client, self.live), run_prefix))
            except SlurmQueryError:
                return {}  # Slurm cannot say now: the jobs' own waits are bounded as ever
            if not others:
                return {}
            held = {n: h.describe() for h in others for n in h.nodes if n in self.live}
            if time.monotonic() >= deadline:
                self.hold(held, held_sentence(others, sorted(held), limit_s))
                return held
            if not said:
                jobs = "; ".join(h.describe() for h in others)
                say(
                    f"other work holds {', '.join(sorted(held))} ({jobs}); waiting up to {limit_s:.0f} s before the run"
                )
                said = True
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    def shape(self, gpus_per_node: int) -> Shape:
        """The profile's shape and what this run found of it (``selection.Shape``)."""
        p = self.profile
        usable = p.nodes if p.executor == "local" else len(self.nodes)
        unusable = "; ".join(f"{n}: {why}" for n, why in self.excluded.items())
        if self.error:
            unusable = "; ".join(x for x in (unusable, self.error) if x)
        # A re-test of some nodes (--gpucluster-nodes) is a cluster of those nodes: checks across more are n/a.
        expected = len(self.named) if self.named else p.nodes
        return Shape(
            profile=p.name,
            executor=p.executor,
            nodes=expected,
            usable_nodes=usable,
            gpus_per_node=gpus_per_node,
            gpus_declared=p.gpus_per_node is not None,
            gpus_are_real=p.gpus_are_real,
            ib_hcas=p.ib_hcas,
            accounting=p.accounting,
            require_slow=p.require_slow,
            unusable=unusable,
            soak_s=p.soak.duration_s,
            soak_required=p.soak.required,
        )

    def plan_lines(self) -> list[str]:
        """What a dry run says of the nodes it plans over: how many, whether Slurm's word on them
        was read and which it leaves out; where it could not be read, which nodes' states are
        unknown and what the plan assumes of them. Nothing for the local executor."""
        p = self.profile
        if p.executor != "slurm":
            return []
        tested = self.nodes
        listed = "--gpucluster-nodes" if self.named else "the profile's nodelist"
        if self.states_unread:
            if not tested:
                return [
                    f"nodes: none; the profile lists none and Slurm's nodes of partition {p.partition!r} could not "
                    f"be read: {self.states_unread}",
                    "  the plan has no node to run on; a run asks again, within its timeout and retry window",
                ]
            return [
                f"nodes: {len(tested)} from {listed}, their states unknown ({hostlist(tested)}): Slurm's word on them "
                f"could not be read: {self.states_unread}",
                "  the plan takes each as usable; a run leaves out any Slurm holds drained, down or outside "
                f"partition {p.partition!r}, or short of GPUs, so its jobs and rounds may span fewer nodes than these",
            ]
        source = ASKED.get(self.client.node_source or "", "Slurm")
        where = listed if (self.named or p.nodelist) else f"partition {p.partition!r}"
        out = [f"nodes: {len(tested)} from {where} ({hostlist(tested) or 'none'}), their states read from {source}"]
        by_why: dict[str, list[str]] = {}
        for name, why in self.excluded.items():
            by_why.setdefault(why, []).append(name)
        out += [f"  left out: {hostlist(names)}: {why}" for why, names in by_why.items()]
        return out

    def short_of_gpus(self, gpus: int) -> str:
        """The tested nodes Slurm says have fewer than ``gpus`` GPUs, as one clause ("node1,
        node2 advertise 4 (Gres=gpu:4)"); empty when none or when Slurm was not asked."""
        short = [n for n in self.live if n in self.info and self.info[n].gpus < gpus]
        if not short:
            return ""
        shapes = sorted({f"{self.info[n].gpus} (Gres={self.info[n].gres or 'none'})" for n in short})
        return f"{', '.join(short)} advertise{'s' if len(short) == 1 else ''} {' or '.join(shapes)}"

    def _check_named(self) -> None:
        """``--gpucluster-nodes`` names nodes of the profile's partition: asked of Slurm once, before any job
        (the answer is kept for the node list); ConfigError naming those it does not hold. Where
        Slurm cannot answer now, the run's node list says so later."""
        p = self.profile
        try:
            self._partition = self._partition_nodes()
        except SlurmQueryError as exc:
            self.states_unread = str(exc)
            return
        held = {n.name for n in self._partition}
        strangers = [n for n in self.named if n not in held]
        if strangers:
            where = f"partition {p.partition!r}" if p.partition else "the cluster"
            raise ConfigError(
                f"--gpucluster-nodes: {hostlist(strangers)} {'is' if len(strangers) == 1 else 'are'} not in {where} of "
                f"profile {p.name!r} (its nodes: {hostlist(sorted(held)) or 'none'}); name nodes of that partition."
            )

    def _resolve(self) -> tuple[str, ...]:
        p = self.profile
        if p.executor == "local":
            return (socket.gethostname(),)
        try:
            self._read_scope()
        except SlurmQueryError as exc:
            self.error = str(exc)
            self.states_unread = str(exc)
            self.fault = cluster_fault(exc)
            # The nodes asked for (those --gpucluster-nodes names, else the profile's); the jobs
            # will say what is wrong with them.
            return tuple(self.named or p.nodelist)
        assert self._partition is not None
        self.states_unread = ""  # read now, where the check of the named nodes could not
        self.info = {n.name: n for n in self._partition}
        known = [n for n in self._partition if self.scope.fits(n)]
        short = self._short_of_gpus(known)
        named = self.named or p.nodelist
        if named:
            # The operator named these nodes; one Slurm will not run jobs on is still left out (a
            # job pinned to it would only queue until queue_timeout_s), and said why.
            by_name = {n.name: n for n in known}
            for name in named:
                n = by_name.get(name)
                if n is None and self.named:
                    self.excluded[name] = f"not in partition {p.partition!r} (--gpucluster-nodes)"
                elif n is not None and not self.scope.usable(n):
                    self.excluded[name] = n.said
            return tuple(self._with_gpus([name for name in named if name not in self.excluded], short, len(named)))
        for n in known:
            if not self.scope.usable(n):
                self.excluded[n.name] = n.said
        if not known:
            self.error = f"{self.scope.where()} has no nodes (sinfo -p {p.partition})"
        return tuple(self._with_gpus([n.name for n in known if self.scope.usable(n)], short, p.nodes)[: p.nodes])

    def _read_scope(self) -> None:
        """The partition's nodes and the profile's reservation, asked of Slurm once."""
        name = self.profile.reservation
        if name and self.scope.reservation is None:
            held = reservation(self.client, name)
            if held is not None:
                self.scope = dataclasses.replace(self.scope, reservation=held)
        if self._partition is None:
            self._partition = self._partition_nodes()

    def _partition_nodes(self) -> list[slurm.NodeInfo]:
        """The partition's nodes as Slurm holds them; asked once within ``states_bound_s`` where
        that is set and the nodes are listed, else with the run's timeout and retry window."""
        bound = self.states_bound_s
        if bound is None or not (self.named or self.profile.nodelist):
            return slurm.partition_nodes(self.client, self.profile.partition)
        if self.states_unread:
            raise SlurmQueryError(self.states_unread)  # asked once already: not a second wait
        return slurm.partition_nodes(self.client, self.profile.partition, timeout_s=bound, retry=False)

    def _check_scope(self) -> None:
        """Before any job: the profile's reservation exists, is active and admits this user, and
        it and the constraint leave the run the nodes it tests (``Scope.refusal``). ConfigError
        naming the reservation or the constraint otherwise; where Slurm cannot answer now, the
        run's node list says so later."""
        name = self.profile.reservation
        try:
            self._read_scope()
            if name and self.scope.reservation is None:
                known = ", ".join(reservation_names(self.client)) or "none"
                raise ConfigError(
                    f"{self.scope.reservation_from}={name}: Slurm holds no reservation {name!r} (reservations: "
                    f"{known}); name one that `scontrol show reservation` lists."
                )
        except SlurmQueryError:
            return
        assert self._partition is not None
        refusal = self.scope.refusal(self._partition, self.named or self.profile.nodelist, user_name())
        if refusal:
            raise ConfigError(refusal)

    def _short_of_gpus(self, known: Sequence[slurm.NodeInfo]) -> dict[str, str]:
        """Nodes whose Gres offers fewer GPUs than the profile states (when it states a count),
        each with what Slurm offers: Slurm refuses at submission a job over every node that
        asks one of them for more, so one such node would fail every healthy node's job."""
        want = self.profile.gpus_per_node
        if not want:
            return {}
        return {
            n.name: f"offering {n.gpus} GPU(s) (Gres={n.gres or 'none'}), fewer than the {want} the profile expects"
            for n in known
            if n.gpus < want
        }

    def _with_gpus(self, candidates: Sequence[str], short: Mapping[str, str], wanted: int) -> list[str]:
        """The ``candidates`` the run may test: only those with the GPUs, when at least one has
        them. The short ones are left out with what Slurm offers (rejected as not tested) when
        the run needs them to reach ``wanted`` nodes; beyond that they are spare nodes of the
        partition, left alone (a CPU node of a mixed partition is no fault; the Slurm health
        check still reads every node's Gres). When no candidate has the GPUs, none is left out:
        their jobs are refused and the run is rejected naming every node's Gres, while checks
        that ask for no GPU (InfiniBand, the kernel log) still read them."""
        fit = [name for name in candidates if name not in short]
        if not fit:
            return list(candidates)
        if len(fit) < wanted:
            self.excluded.update((name, short[name]) for name in candidates if name in short)
        return fit
