"""A Slurm reservation, as ``scontrol -o show reservation NAME`` prints it (Slurm 22.05 has no
JSON form of it): the nodes it holds, whether it is active, its flags and who it admits. A
handover is usually run inside one (``scontrol create reservation ... flags=maint``), whose nodes
Slurm shows as ``MAINTENANCE+RESERVED``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm.commands import Slurm
from pytest_gpucluster.slurm.hostlist import parse_hostlist

_FIELD = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")
_NONE = ("", "(null)")


@dataclass(frozen=True)
class Reservation:
    """One reservation: its name, nodes, state (``ACTIVE`` or ``INACTIVE``), flags, and the users
    and accounts it admits (empty: not restricted by that)."""

    name: str
    nodes: tuple[str, ...]
    state: str
    start: str
    flags: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()

    def refuses(self, user: str) -> bool:
        """Whether the reservation's user list leaves ``user`` out: named with '-', or not named
        where only named users (and no account) are admitted."""
        if f"-{user}" in self.users:
            return True
        listed = [u for u in self.users if not u.startswith("-")]
        return bool(listed) and not self.accounts and user not in listed


def _items(value: str) -> tuple[str, ...]:
    return () if value in _NONE else tuple(v for v in value.split(",") if v)


def parse_reservation(text: str) -> Reservation | None:
    """The first reservation of ``scontrol -o show reservation`` output (one ``Key=Value`` line
    each), or None when it holds none."""
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "ReservationName" not in fields:
            continue
        nodes = fields.get("Nodes", "")
        return Reservation(
            name=fields["ReservationName"],
            nodes=parse_hostlist(nodes) if nodes not in _NONE else (),
            state=fields.get("State", "").upper(),
            start=fields.get("StartTime", ""),
            flags=tuple(f.upper() for f in _items(fields.get("Flags", ""))),
            users=_items(fields.get("Users", "")),
            accounts=_items(fields.get("Accounts", "")),
        )
    return None


def reservation(client: Slurm, name: str) -> Reservation | None:
    """Reservation ``name`` as the controller holds it; None when it holds none of that name.
    SlurmQueryError when the controller cannot say."""
    try:
        out = client.run(["scontrol", "-o", "show", "reservation", name])
    except SlurmQueryError as exc:
        if "not found" in str(exc).lower():
            return None
        raise
    return parse_reservation(out)


def reservation_names(client: Slurm) -> list[str]:
    """The names of every reservation the controller holds (for a message naming the choices)."""
    out = client.run(["scontrol", "-o", "show", "reservation"])
    return [m.group(1) for m in re.finditer(r"ReservationName=(\S+)", out)]
