"""A finding: one thing a check found, as data. Its scope says what it is about (a GPU, a port or
link, a node, several nodes together, or something outside the nodes: the run's configuration,
its Python environment, the queue, a Slurm daemon, the shared filesystem as the login node sees
it, the suite itself), ``nodes`` every node it names and ``culprits`` the nodes at fault where
that is known; a node's configuration setting (``node_setting``) also carries the value found,
the value expected and how to change it. Verdicts are decided from these fields; ``text``, the
one sentence a person reads (the culprit first), is made from them by the check and is never
read back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Scope = Literal[
    "gpu",  # one GPU of one node
    "port",  # one InfiniBand port or NVLink link of one node
    "node",  # one node
    "node_setting",  # one configuration setting of one node: ``setting``, ``found``, ``expected``, ``remedy``
    "nodes",  # several nodes together (a pair, every node): ``culprits`` name the bad ones when known
    "switch",  # a switch of the network (a leaf): ``culprits`` name it, ``nodes`` the nodes beneath it
    "link",  # the links between switches (a leaf's uplinks, the path between two leaves): ``culprits``
    # name the switches at its ends, ``nodes`` the nodes it slows
    "config",  # the run's configuration: a profile key or a variable it sets (``setting``)
    "environment",  # the run's Python environment (torch and the nodes' driver)
    "queue",  # other work in the queue holding nodes
    "controller",  # a Slurm daemon (slurmctld, slurmdbd)
    "shared_fs",  # the shared filesystem as the login node sees it
    "harness",  # the suite itself: a check declared wrong
]
Severity = Literal["fail", "warn", "not_judged"]

NODE_SCOPES: frozenset[str] = frozenset({"gpu", "port", "node", "node_setting"})
# Scopes outside the nodes: such a finding convicts no node, whatever it names.
OUTSIDE_SCOPES: frozenset[str] = frozenset({"config", "environment", "queue", "controller", "shared_fs", "harness"})
# Scopes of the network between the nodes: its culprits are switches, and it convicts no node.
NETWORK_SCOPES: frozenset[str] = frozenset({"switch", "link"})


@dataclass(frozen=True)
class Finding:
    """One finding of one check (see the module's docstring)."""

    text: str
    scope: Scope
    nodes: tuple[str, ...] = ()
    culprits: tuple[str, ...] = ()
    severity: Severity = "fail"
    gpu: int | None = None
    port: str = ""  # "mlx5_0/1", "link 5" (with ``gpu``)
    setting: str = ""  # scope config: the key or variable at fault, e.g. "env.NCCL_SOCKET_IFNAME";
    # scope node_setting: the node's setting, e.g. "RLIMIT_MEMLOCK", "swap", "gpu persistence mode"
    found: str = ""  # scope node_setting: the value the node has, e.g. "64 KiB"
    expected: str = ""  # scope node_setting: the value expected and where it comes from
    remedy: str = ""  # scope node_setting: how to change it
    metric: str = ""
    value: float | None = None
    unit: str = ""
    threshold: Mapping[str, Any] | None = field(default=None, compare=False)
    job_id: str = ""
    cycle: int | None = None  # a soak's finding: the cycle it began in (workloads.soak)

    @classmethod
    def on_node(
        cls, node: str, text: str, *, gpu: int | None = None, port: str = "", severity: Severity = "fail", **more: Any
    ) -> Finding:
        """A finding about ``node`` itself, one of its GPUs (``gpu``) or one of its ports or links
        (``port``): the node is its culprit."""
        scope: Scope = "port" if port else "gpu" if gpu is not None else "node"
        return cls(text, scope, (node,), (node,), severity, gpu, port, **more)

    @classmethod
    def of_setting(
        cls,
        node: str,
        setting: str,
        text: str,
        *,
        found: str,
        expected: str,
        remedy: str,
        gpu: int | None = None,
        severity: Severity = "fail",
        **more: Any,
    ) -> Finding:
        """A configuration setting of ``node`` (of its GPU ``gpu`` where given) that differs from
        what is expected: the node is its culprit. ``more``: a measured setting's figure
        (``metric``, ``value``, ``unit``, ``job_id``)."""
        return cls(
            text,
            "node_setting",
            (node,),
            (node,),
            severity,
            gpu,
            setting=setting,
            found=found,
            expected=expected,
            remedy=remedy,
            **more,
        )

    @classmethod
    def across(
        cls, nodes: Iterable[str], text: str, *, culprits: Iterable[str] = (), severity: Severity = "fail", **more: Any
    ) -> Finding:
        """A finding about several nodes together (a pair's busbw, a difference between nodes):
        ``culprits`` are the nodes found at fault (by isolation, by a majority), none where the
        check cannot tell."""
        named = tuple(dict.fromkeys(nodes))
        return cls(text, "nodes", named, tuple(n for n in dict.fromkeys(culprits) if n in named), severity, **more)

    @classmethod
    def outside(
        cls, scope: Scope, text: str, *, nodes: Iterable[str] = (), setting: str = "", severity: Severity = "fail"
    ) -> Finding:
        """A finding about something outside the nodes (``OUTSIDE_SCOPES``): it may name nodes
        (where it was seen) but convicts none."""
        if scope not in OUTSIDE_SCOPES:
            raise ValueError(f"{scope!r} is a scope of the nodes; use on_node or across")
        return cls(text, scope, tuple(dict.fromkeys(nodes)), (), severity, setting=setting)

    @classmethod
    def in_network(
        cls,
        scope: Scope,
        switches: Iterable[str],
        nodes: Iterable[str],
        text: str,
        *,
        severity: Severity = "fail",
        **more: Any,
    ) -> Finding:
        """A finding about a switch or the links between switches (``NETWORK_SCOPES``): the
        switches are its culprits, the nodes it slows are named, and none of them is convicted."""
        if scope not in NETWORK_SCOPES:
            raise ValueError(f"{scope!r} is not a scope of the network; use on_node, across or outside")
        return cls(text, scope, tuple(dict.fromkeys(nodes)), tuple(dict.fromkeys(switches)), severity, **more)

    @property
    def convicts(self) -> tuple[str, ...]:
        """The nodes this finding rejects: its culprits, for a failure of the nodes' own."""
        if self.severity != "fail" or self.scope in OUTSIDE_SCOPES or self.scope in NETWORK_SCOPES:
            return ()
        return self.culprits

    @property
    def place(self) -> str:
        """Where it is, for a table: ``node1:gpu2``, ``node1 mlx5_0/1``, ``node1+node2``."""
        if self.scope in NODE_SCOPES and self.nodes:
            where = self.nodes[0] + (f":gpu{self.gpu}" if self.gpu is not None else "")
            detail = self.setting if self.scope == "node_setting" else self.port
            return f"{where} {detail}" if detail else where
        if self.scope in NETWORK_SCOPES:
            return "–".join(self.culprits)
        return "+".join(self.nodes) if self.nodes else self.scope
