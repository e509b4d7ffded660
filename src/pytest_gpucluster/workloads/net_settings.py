"""Whether the network settings a job runs with name anything this node has.

``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME`` and ``NCCL_IB_HCA`` (a profile's ``env``, or the
login node's environment) select the interfaces and HCAs the collectives use. One that matches
nothing on a node makes every rank there fail at bootstrap ("no socket interface found") or fall
back to a slower transport, on every node alike when the setting is wrong for the cluster: a fault
of the run's configuration, not of the nodes. A task checks them against what its node has before
any process group exists and raises ``SettingMatchesNothing`` with the variable, its value and
what the node offers; the login side names the setting once (``launch/job.py``).

The matching follows NCCL's own rules (its documentation of the variables): a comma-separated
list of prefixes; ``^`` before the list excludes instead; ``=`` before it asks for exact names;
``NCCL_IB_HCA`` entries may end in ``:port``. Gloo's list names interfaces exactly.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

IB_SYSFS = "/sys/class/infiniband"


@dataclass(frozen=True)
class SettingMismatch:
    """``variable=value`` matches nothing ``node`` offers (``offered``: its interfaces or HCAs)."""

    node: str
    variable: str
    value: str
    offered: tuple[str, ...]

    def what(self) -> str:
        """``NCCL_SOCKET_IFNAME=ib9``: the setting, the same on every node it is wrong for."""
        return f"{self.variable}={self.value}"

    def sentence(self) -> str:
        kind = "HCA" if self.variable == "NCCL_IB_HCA" else "network interface"
        return f"{self.what()} matches no {kind} of {self.node} (it has {', '.join(self.offered) or 'none'})"


class SettingMatchesNothing(RuntimeError):
    """Raised on the node where a network setting matches nothing; ``record`` says which."""

    def __init__(self, record: SettingMismatch) -> None:
        self.record = record
        super().__init__(record.sentence())

    def __reduce__(self) -> tuple[type[SettingMatchesNothing], tuple[SettingMismatch]]:
        return (type(self), (self.record,))


def selects(value: str, names: Sequence[str], *, exact: bool = False) -> list[str]:
    """The ``names`` a NCCL-style selection ``value`` keeps: prefixes (exact names with a leading
    ``=`` or ``exact``), an exclusion with a leading ``^``; ``:port`` suffixes are set aside."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text.lstrip("^")
    if text.startswith("="):
        exact, text = True, text[1:]
    wanted = [w.split(":", 1)[0].strip() for w in text.split(",") if w.strip()]

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if hit(n) != exclude]


def mismatches(
    env: Mapping[str, str], interfaces: Sequence[str], hcas: Sequence[str], node: str, backend: str
) -> list[SettingMismatch]:
    """The network settings in ``env`` that the ``backend`` (``nccl``, ``gloo``) reads and that
    select nothing of the node's ``interfaces`` and ``hcas``. ``NCCL_IB_HCA`` is checked only on a
    node with HCAs (without any, NCCL uses no IB)."""
    out = []
    variable = "NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME"
    value = env.get(variable, "").strip()
    if value and not selects(value, interfaces, exact=variable == "GLOO_SOCKET_IFNAME"):
        out.append(SettingMismatch(node, variable, value, tuple(interfaces)))
    value = env.get("NCCL_IB_HCA", "").strip() if backend == "nccl" else ""
    if value and hcas and not selects(value, hcas):
        out.append(SettingMismatch(node, "NCCL_IB_HCA", value, tuple(hcas)))
    return out


def node_interfaces() -> list[str]:
    """The network interfaces of this node, by name."""
    return sorted(name for _, name in socket.if_nameindex())


def node_hcas(root: str = IB_SYSFS) -> list[str]:
    """The InfiniBand HCAs of this node (``mlx5_0``, ...), by name."""
    path = Path(root)
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def check_settings(backend: str) -> None:
    """Raise ``SettingMatchesNothing`` for the first network setting of this task's environment
    that ``backend`` reads and that matches nothing on its node; return quietly otherwise."""
    found = mismatches(os.environ, node_interfaces(), node_hcas(), socket.gethostname(), backend)
    if found:
        raise SettingMatchesNothing(found[0])
