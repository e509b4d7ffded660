"""The NICs behind the network layer's figures, named from NCCL's own log (``workloads/nccl_log.py``):
which NIC and port each node's GPUs sent and received through, and whether GPUDirect RDMA was on.

* A node slow through its NICs alone gets one finding per NIC its GPUs used, the NIC's port as the
  finding's ``port`` and the sentence naming the GPUs behind it:
  ``node2: the NICs alone 41 GB/s busbw (fail < 150 GB/s): gpu0–3 via mlx5_0 port 1 (GDR on)``.
  The figure is the node's, not one NIC's: every NIC its GPUs used is named, none acquitted.
* A node whose NCCL found no RDMA device (``NET/IB : No device found.``) or went over sockets where
  the profile expects InfiniBand or RoCE is a setting of that node, with how to look, and not a
  speed fail: its figure is the sockets', which no line for the NICs is meant for.
* Across nodes, a slow figure names each node's NICs in its sentence (the figure cannot say which
  node was slow).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pytest_gpucluster.checks.nccl import Check
from pytest_gpucluster.config.profile import Profile
from pytest_gpucluster.verdict import Finding, Verdict
from pytest_gpucluster.workloads.nccl_log import GpuNics, NicUse

REMEDY = (
    "look inside a job on the node: `ibv_devinfo` lists the HCAs and their ports' state; /dev/infiniband "
    "exists; the mlx5_ib and ib_uverbs modules are loaded; NCCL_IB_HCA, where set, names the node's HCAs"
)
_NODES_IN_A_SENTENCE = 8


def by_node(gpus: Iterable[GpuNics]) -> dict[str, list[GpuNics]]:
    """Every node's GPUs, in the order the ranks came, each GPU once (its first record)."""
    out: dict[str, dict[int, GpuNics]] = {}
    for g in gpus:
        out.setdefault(g.node, {}).setdefault(g.gpu, g)
    return {node: sorted(found.values(), key=lambda g: g.gpu) for node, found in out.items()}


def gpu_list(gpus: Sequence[int]) -> str:
    """``gpu0–3``, ``gpu0, gpu2``, ``gpu0–1, gpu4–7``."""
    runs: list[list[int]] = []
    for g in sorted(set(gpus)):
        if runs and g == runs[-1][-1] + 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ", ".join(f"gpu{r[0]}" if len(r) == 1 else f"gpu{r[0]}–{r[-1]}" for r in runs)


def _nic_words(nic: NicUse) -> str:
    """``mlx5_0 port 1 (GDR on)``, ``mlx5_1 port 1 (RoCE, GDR off)``, ``eth0 (sockets)``."""
    if nic.net == "Socket":
        return f"{nic.name or nic.label} (sockets)"
    said = [nic.link_layer] if nic.link_layer and nic.link_layer != "IB" else []
    said.append(f"GDR {nic.gdr_state}")
    if nic.proxied:
        said.append("some sends through another GPU's NIC, PXN")
    name = f"{nic.name} port {nic.port}" if nic.name and nic.port is not None else nic.label
    return f"{name} ({', '.join(said)})"


def node_nics(gpus: Sequence[GpuNics]) -> list[tuple[NicUse, list[int]]]:
    """One node's NICs, each with the GPUs whose channels went through it, in NIC order."""
    found: dict[tuple[str, int], tuple[NicUse, list[int]]] = {}
    for g in gpus:
        for nic in g.nics:
            found.setdefault((nic.net, nic.index), (nic, []))[1].append(g.gpu)
    return [found[k] for k in sorted(found)]


def describe(gpus: Sequence[GpuNics]) -> str:
    """One node's GPUs and NICs in words: ``gpu0–3 via mlx5_0 port 1 (GDR on), gpu4–7 via ...``."""
    return ", ".join(f"{gpu_list(on)} via {_nic_words(nic)}" for nic, on in node_nics(gpus))


def _figure(verdict: Verdict, what: str) -> str:
    """``the NICs alone 41 GB/s busbw (fail < 150 GB/s)``."""
    m, t = verdict.measurement, verdict.threshold
    line = t.fail_below if verdict.status == "fail" else t.warn_below
    bound = f" ({verdict.status} < {line:g} {t.unit})" if line is not None else ""
    return f"{what} {m.value:.4g} {m.unit} busbw{bound}"


def slow_node(verdict: Verdict, gpus: Sequence[GpuNics], what: str) -> list[Finding]:
    """A verdict of one node past its line as one finding per NIC the node's GPUs used (its port
    a field of the finding); none where the log named no NIC (the verdict's own finding stands)."""
    m = verdict.measurement
    if verdict.status not in ("fail", "warn") or len(m.nodes) != 1:
        return []
    node = m.nodes[0]
    more: dict[str, Any] = {"metric": m.metric, "value": m.value, "unit": m.unit, "job_id": m.job_id or ""}
    return [
        Finding.on_node(
            node,
            f"{node}: {_figure(verdict, what)}: {gpu_list(on)} via {_nic_words(nic)}",
            port=nic.label,
            severity=verdict.status,
            **more,
        )
        for nic, on in node_nics([g for g in gpus if g.node == node])
    ]


def slow_across(verdict: Verdict, gpus: Sequence[GpuNics], what: str) -> list[Finding]:
    """A verdict of several nodes together past its line, its sentence naming each node's NICs
    (up to eight nodes, then how many more); none where the log named no NIC."""
    m = verdict.measurement
    nodes = by_node(gpus)
    if verdict.status not in ("fail", "warn") or not any(g.nics for gs in nodes.values() for g in gs):
        return []
    named = [f"{node} {describe(gs)}" for node, gs in nodes.items() if describe(gs)]
    rest = len(named) - _NODES_IN_A_SENTENCE
    said = "; ".join(named[:_NODES_IN_A_SENTENCE]) + (f"; and {rest} more nodes" if rest > 0 else "")
    more: dict[str, Any] = {"metric": m.metric, "value": m.value, "unit": m.unit, "job_id": m.job_id or ""}
    text = f"{'+'.join(m.nodes) if len(m.nodes) <= 4 else m.where}: {_figure(verdict, what)}: {said}"
    return [Finding.across(m.nodes, text, culprits=m.culprits, severity=verdict.status, **more)]


def no_rdma(gpus: Sequence[GpuNics], *, ib_hcas: int, link_layer: str, profile: str) -> list[Finding]:
    """Every node whose NCCL found no RDMA device or went over sockets although the profile
    expects ``ib_hcas`` HCAs: a setting of that node (found, expected, how to look)."""
    if ib_hcas < 1:
        return []
    out = []
    for node, gs in by_node(gpus).items():
        lost = [g for g in gs if g.rdma_found is False or g.network == "Socket"]
        if not lost:
            continue
        found = "no RDMA device (NCCL: NET/IB : No device found.)" if any(g.rdma_found is False for g in lost) else ""
        over = next((g.network for g in lost if g.network), None)
        if over:
            found = f"{found}; NCCL went over {'sockets' if over == 'Socket' else over}".lstrip("; ")
        expected = f"{link_layer} through {ib_hcas} HCAs ([profiles.{profile}] ib_hcas = {ib_hcas})"
        out.append(
            Finding.of_setting(
                node,
                "NCCL network",
                f"{node}: {gpu_list([g.gpu for g in lost])}: {found}, where the profile expects {expected}; {REMEDY}",
                found=found,
                expected=expected,
                remedy=REMEDY,
            )
        )
    return out


def named(
    verdict: Verdict | None,
    gpus: Sequence[GpuNics],
    what: str,
    *,
    ib_hcas: int,
    link_layer: str,
    profile: str,
) -> list[Finding]:
    """What the network layer's check names beside its verdict (``Judge.verdict``'s ``named``):
    the nodes without their RDMA devices, then the slow figure with the NICs behind it. A slow
    figure of nodes that all went without RDMA is theirs already and not named again; where the
    log named no NIC, the verdict's own finding stands. Empty: the verdict speaks alone."""
    settings = no_rdma(gpus, ib_hcas=ib_hcas, link_layer=link_layer, profile=profile)
    if verdict is None or verdict.status not in ("fail", "warn"):
        return settings
    explained = {f.nodes[0] for f in settings}
    if explained and set(verdict.measurement.nodes) <= explained:
        return settings
    slow = slow_node(verdict, gpus, what) if len(verdict.measurement.nodes) == 1 else slow_across(verdict, gpus, what)
    if not slow and settings:
        own = verdict.finding()
        slow = [own] if own is not None else []
    return settings + slow


def of_check(check: Check, profile: Profile, what: str) -> list[Finding]:
    """``named`` for a sweep judged by ``checks.nccl`` on ``profile``'s nodes: CPU stand-ins
    expect no RDMA device."""
    return named(
        check.verdict,
        check.sweep.nics,
        what,
        ib_hcas=profile.ib_hcas if profile.gpus_are_real else 0,
        link_layer=profile.ib_link_layer,
        profile=profile.name,
    )


def convicted(nodes: Sequence[str], gpus: Sequence[GpuNics], *, job_id: str = "") -> list[Finding]:
    """Each node the straggler check convicts (slow with every partner), one finding per NIC its
    GPUs went through, the port a field of the finding; none for a node whose log named no NIC."""
    out = []
    for node in nodes:
        for nic, on in node_nics([g for g in gpus if g.node == node]):
            out.append(
                Finding.on_node(
                    node,
                    f"{node}: slow with every partner in send/recv: {gpu_list(on)} via {_nic_words(nic)}",
                    port=nic.label,
                    job_id=job_id,
                )
            )
    return out
