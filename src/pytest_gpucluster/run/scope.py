"""Which nodes of the partition a run may test, where the profile narrows them: those of its
Slurm reservation (a handover is run inside one, ``flags=maint``, whose nodes Slurm shows as
``MAINTENANCE+RESERVED``) and those with its constraint's features. Pure: ``NodeSet`` reads Slurm
and asks this what fits, and whether the profile leaves the run the nodes it tests at all, which
is a usage error naming the reservation or the constraint, before any job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gpucluster.config import Profile, features
from pytest_gpucluster.slurm import NodeInfo
from pytest_gpucluster.slurm.reservation import Reservation
from pytest_gpucluster.verdict.ranges import hostlist


@dataclass(frozen=True)
class Scope:
    """The profile's reservation (as Slurm holds it; None without one or before it was read)
    and constraint. ``reservation_from``: the setting that named the reservation, for messages."""

    profile: Profile
    reservation: Reservation | None = None
    reservation_from: str = ""

    @property
    def narrowed(self) -> bool:
        """The profile names a reservation or a constraint."""
        return bool(self.profile.reservation or self.profile.constraint)

    @property
    def reserved(self) -> frozenset[str]:
        """The reservation's nodes: there a MAINTENANCE node takes the run's jobs."""
        return frozenset(self.reservation.nodes) if self.reservation is not None else frozenset()

    def fits(self, node: NodeInfo) -> bool:
        """``node`` is in the reservation and has the constraint's features."""
        p = self.profile
        if p.reservation and node.name not in self.reserved:
            return False
        return not p.constraint or features.satisfies(p.constraint, node.features)

    def usable(self, node: NodeInfo) -> bool:
        """Slurm takes a job of this run on ``node`` (``NodeInfo.usable_in`` the reservation)."""
        return node.usable_in(reservation=node.name in self.reserved)

    def where(self) -> str:
        """The nodes the run picks from, in words: ``partition 'gpu' in reservation 'handover'
        with features 'h100&ib'``."""
        p = self.profile
        words = f"partition {p.partition!r}" if p.partition else "the cluster"
        if p.reservation:
            words += f" in reservation {p.reservation!r}"
        if p.constraint:
            words += f" with features {p.constraint!r}"
        return words

    def refusal(self, known: Sequence[NodeInfo], named: Sequence[str], user: str) -> str | None:
        """Why the profile leaves this run nothing to test, as the one sentence of a usage error;
        None when it does not. ``known``: the partition's nodes; ``named``: the nodes named for the
        run (``nodelist``, ``--gpucluster-nodes``), else it tests the profile's count of them."""
        p, res = self.profile, self.reservation
        if res is not None:
            if res.state != "ACTIVE":
                return (
                    f"{self.reservation_from}: reservation {res.name!r} is {res.state or 'not active'} "
                    f"(it starts {res.start}); run once it is ACTIVE."
                )
            if res.refuses(user):
                return (
                    f"{self.reservation_from}: reservation {res.name!r} admits users {','.join(res.users)}, not "
                    f"{user}; add the user (scontrol update reservation={res.name} users+={user}) or run as one."
                )
        fit = [n.name for n in known if self.fits(n)]
        held = hostlist(fit) or "no node"
        if named:
            by_name = {n.name: n for n in known}
            outside = [by_name[name] for name in named if name in by_name and name not in fit]
            if outside:
                why = "; ".join(self._misfit(n) for n in outside)
                return f"{self._blame()}: {why}, named for this run; {self.where()} holds {held}."
            return None
        if len(fit) < p.nodes:
            got = f"only {held}" if fit else "no node"
            return f"{self._blame()}: {self.where()} holds {got}; profile {p.name!r} tests {p.nodes}. {self._fix()}"
        return None

    def _misfit(self, node: NodeInfo) -> str:
        p = self.profile
        if p.reservation and node.name not in self.reserved:
            return f"{node.name} is not in reservation {p.reservation!r}"
        return f"{node.name} has features {','.join(node.features) or 'none'}"

    def _blame(self) -> str:
        """The settings at fault: the reservation, the constraint, or both."""
        p = self.profile
        said = [f"{self.reservation_from}={p.reservation}"] if p.reservation else []
        if p.constraint:
            said.append(f"profiles.{p.name}.constraint={p.constraint}")
        return " and ".join(said)

    def _fix(self) -> str:
        if self.profile.constraint and not self.profile.reservation:
            return "Name features the nodes have (sinfo -N -o '%N %f'), or test fewer nodes."
        return "Name a reservation over the nodes to hand over (scontrol show reservation), or test fewer nodes."
