"""The node's GPU and PCIe configuration, judged on the login node: persistence and ECC modes,
the settings that cap a GPU's speed (power limit, applications clocks, compute mode), the
GPUDirect RDMA path, the NVSwitch fabric registration and PCIe ACS on the bridges above the
GPUs and NICs (``checks.gpu_placement`` places each GPU by NUMA node and nearest NIC;
``checks.node_config`` has the rest and the ``Judged`` they return)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from pytest_gpucluster.checks.node_config import MAJORITY, Judged, rdma_in_use, setting
from pytest_gpucluster.config.node_config import COMPUTE_MODES, NodeConfig
from pytest_gpucluster.verdict import Finding, Severity
from pytest_gpucluster.workloads import gpu_modes, pci_acs
from pytest_gpucluster.workloads.node_settings import PCI_READING, NodeSettings

# Power limits within this of each other are the same limit (NVML counts milliwatts; boards and
# sites round theirs to whole watts).
POWER_SLACK_W = 1.0
SLOWER = "under a full load the GPU holds its clocks down to stay within it, so every GEMM and collective runs slower"

# dma-buf peer memory: the NVIDIA open kernel module on Linux 5.12 or later (NCCL 2.19+ uses it).
DMABUF_KERNEL = (5, 12)


def _no_gpus(s: NodeSettings, gpus_are_real: bool) -> str:
    if not gpus_are_real:
        return f"{s.node}: the profile's GPUs exist only as Slurm GRES (gpus_are_real = false): no NVML to read"
    if s.gpus.error:
        return ""
    return "" if s.gpus.gpus else f"{s.node}: NVML lists no GPU"


def _on(value: bool | None) -> str:
    return {True: "on", False: "off", None: "unsupported"}[value]


def expected_ecc(all_nodes: Mapping[str, NodeSettings], cfg: NodeConfig) -> tuple[bool, str]:
    """The ECC mode every GPU should have: the profile's, else the majority's (on at a tie)."""
    if cfg.ecc is not None:
        return cfg.ecc, "node_config.ecc"
    modes = Counter(g.ecc_current for s in all_nodes.values() for g in s.gpus.gpus if g.ecc_current is not None)
    return (modes[True] >= modes[False], f"{MAJORITY}' GPUs") if modes else (True, "ECC on by default")


def gpu_modes_of(all_nodes: Mapping[str, NodeSettings], node: str, cfg: NodeConfig, *, gpus_are_real: bool) -> Judged:
    """Persistence mode on every GPU (a warning), ECC mode alike on every GPU (a failure), no ECC
    change left pending (a warning)."""
    s = all_nodes[node]
    why = _no_gpus(s, gpus_are_real)
    if why:
        return Judged(not_applicable=why)
    if s.gpus.error:
        return Judged((Finding.on_node(node, f"{node}: GPU modes unreadable: {s.gpus.error}"),))
    ecc, ecc_source = expected_ecc(all_nodes, cfg)
    out: list[Finding] = []
    for g in s.gpus.gpus:
        where = f"{node}:gpu{g.index}"
        if cfg.persistence_mode and g.persistence is False:
            text = (
                f"{where}: persistence mode off, expected on (node_config.persistence_mode): without it the driver "
                "tears the GPU's state down whenever no process holds it, and every job start pays its set-up"
            )
            remedy = "run nvidia-persistenced (systemctl enable --now nvidia-persistenced), or nvidia-smi -pm 1"
            out.append(
                setting(
                    node,
                    "persistence mode",
                    text,
                    found="off",
                    expected="on",
                    remedy=remedy,
                    gpu=g.index,
                    severity="warn",
                )
            )
        if g.ecc_current is not None and g.ecc_current != ecc:
            text = (
                f"{where}: ECC {_on(g.ecc_current)}, expected {_on(ecc)} ({ecc_source}): a GPU without ECC hides "
                "memory errors, and the mode changes the memory a job can use"
            )
            remedy = f"nvidia-smi -i {g.index} -e {int(ecc)}, then reset the GPU (nvidia-smi -r) or reboot"
            out.append(
                setting(node, "ECC mode", text, found=_on(g.ecc_current), expected=_on(ecc), remedy=remedy, gpu=g.index)
            )
        elif g.ecc_pending is not None and g.ecc_current is not None and g.ecc_pending != g.ecc_current:
            text = f"{where}: ECC {_on(g.ecc_current)} with {_on(g.ecc_pending)} pending until the next GPU reset"
            out.append(
                setting(
                    node,
                    "ECC mode",
                    text,
                    found=f"{_on(g.ecc_current)} ({_on(g.ecc_pending)} pending)",
                    expected=_on(g.ecc_current),
                    remedy="reset the GPU (nvidia-smi -r) or reboot, or set the mode back",
                    gpu=g.index,
                    severity="warn",
                )
            )
    if all(g.persistence is None and g.ecc_current is None for g in s.gpus.gpus):
        return Judged(not_applicable=f"{node}: NVML supports neither persistence nor ECC mode on these GPUs")
    return Judged(tuple(out))


def _power(node: str, g: gpu_modes.GpuMode, cfg: NodeConfig) -> Finding | None:
    """The power limit in force below the one expected (the profile's, else the board's default)."""
    limit = g.power_enforced_w if g.power_enforced_w is not None else g.power_limit_w
    expected: float | None = g.power_default_w
    source = "the board's default"
    if cfg.power_limit_w is not None:
        expected, source = cfg.power_limit_w, "node_config.power_limit_w"
    if limit is None or expected is None or limit >= expected - POWER_SLACK_W:
        return None
    where = f"{node}:gpu{g.index}"
    driver = g.power_limit_w
    if driver is not None and limit < driver - POWER_SLACK_W:
        text = (
            f"{where}: power limit in force {limit:g} W, expected {expected:g} W ({source}); the driver's own limit "
            f"is {driver:g} W, so a cap outside it (the BMC's or the rack's power management) holds the GPU lower: "
            f"{SLOWER}"
        )
        remedy = (
            "lift the cap in the BMC's or the rack's power management, or set node_config.power_limit_w where the "
            "cap is intended"
        )
    else:
        text = f"{where}: power limit {limit:g} W, expected {expected:g} W ({source}): {SLOWER}"
        remedy = (
            f"nvidia-smi -i {g.index} -pl {expected:g}, kept in the node's boot configuration, or set "
            "node_config.power_limit_w where the cap is intended"
        )
    found, wanted = f"{limit:g} W", f"{expected:g} W"
    return setting(node, "power limit", text, found=found, expected=wanted, remedy=remedy, gpu=g.index)


def _app_clocks(node: str, g: gpu_modes.GpuMode) -> list[Finding]:
    """An applications clock set below its default."""
    out = []
    for domain, now, default in (
        ("graphics", g.app_clock_mhz, g.app_clock_default_mhz),
        ("memory", g.app_memory_clock_mhz, g.app_memory_clock_default_mhz),
    ):
        if now is None or default is None or now >= default:
            continue
        text = (
            f"{node}:gpu{g.index}: applications clock ({domain}) {now} MHz, its default {default} MHz: the GPU never "
            f"runs its {domain} clock faster than that, however much work it has"
        )
        remedy = f"nvidia-smi -i {g.index} -rac (the applications clocks back to their defaults)"
        found, expected = f"{now} MHz", f"{default} MHz"
        name = f"applications clock ({domain})"
        out.append(setting(node, name, text, found=found, expected=expected, remedy=remedy, gpu=g.index))
    return out


def _compute_mode(node: str, g: gpu_modes.GpuMode, cfg: NodeConfig) -> Finding | None:
    """A compute mode other than the profile's: prohibited fails (nothing can compute), an
    exclusive or default mode the profile did not ask for warns."""
    if g.compute_mode is None:
        return None
    known = 0 <= g.compute_mode < len(COMPUTE_MODES)
    found = COMPUTE_MODES[g.compute_mode] if known else f"mode {g.compute_mode}"
    if found == cfg.compute_mode:
        return None
    why = {
        "prohibited": "no process can make a CUDA context on it, so no job computes there",
        "exclusive_process": "one process at a time may hold a CUDA context on it: a second one (a monitoring "
        "agent's, a profiler's, a data-loader worker's) fails with 'CUDA-capable device(s) is/are busy or unavailable'",
        "exclusive_thread": "one thread of one process at a time may use it (a mode NVIDIA has deprecated)",
        "default": "several processes may share it",
    }.get(found, "NVML names no such mode")
    text = f"{node}:gpu{g.index}: compute mode {found}, expected {cfg.compute_mode} (node_config.compute_mode): {why}"
    # nvidia-smi -c takes each mode's name in capitals (-c EXCLUSIVE_PROCESS).
    remedy = f"nvidia-smi -i {g.index} -c {cfg.compute_mode.upper()}, or set node_config.compute_mode"
    severity: Severity = "fail" if found == "prohibited" else "warn"
    return setting(
        node,
        "compute mode",
        text,
        found=found,
        expected=cfg.compute_mode,
        remedy=remedy,
        gpu=g.index,
        severity=severity,
    )


def gpu_caps_of(s: NodeSettings, cfg: NodeConfig, *, gpus_are_real: bool) -> Judged:
    """What caps a GPU's speed by setting, on every GPU of the node: the power limit in force
    below the expected one and an applications clock below its default (failures: the GPU runs
    slower than the card under every load), a compute mode other than the profile's."""
    why = _no_gpus(s, gpus_are_real)
    if why:
        return Judged(not_applicable=why)
    if s.gpus.error:
        return Judged((Finding.on_node(s.node, f"{s.node}: GPU settings unreadable: {s.gpus.error}"),))
    read = (
        "power_limit_w",
        "power_enforced_w",
        "app_clock_mhz",
        "app_memory_clock_mhz",
        "compute_mode",
    )
    if all(getattr(g, name) is None for g in s.gpus.gpus for name in read):
        return Judged(
            not_applicable=f"{s.node}: NVML reports no power limit, applications clock or compute mode on these GPUs"
        )
    out: list[Finding] = []
    for g in s.gpus.gpus:
        if all(getattr(g, name) is None for name in read):  # its peers were read: never a silent pass
            why = (
                f"{s.node}:gpu{g.index}: power limit, applications clocks and compute mode not read (NVML reports none)"
            )
            out.append(Finding.on_node(s.node, why, gpu=g.index, severity="not_judged"))
            continue
        power, mode = _power(s.node, g, cfg), _compute_mode(s.node, g, cfg)
        out.extend(f for f in (power, *_app_clocks(s.node, g), mode) if f is not None)
    return Judged(tuple(out))


def _kernel(release: str) -> tuple[int, int]:
    parts = release.split("-")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return 0, 0


def gpudirect(s: NodeSettings, *, gpus_are_real: bool, ib_hcas: int) -> Judged:
    """Where GPUs and RDMA meet, a peer-memory path: nvidia_peermem loaded, or dma-buf."""
    why = _no_gpus(s, gpus_are_real)
    if why:
        return Judged(not_applicable=why)
    if not rdma_in_use(s, ib_hcas):
        return Judged(
            not_applicable=f"{s.node}: no InfiniBand (the profile expects no HCA, ib_hcas = 0, and the node has no "
            "RDMA device): GPUDirect RDMA has nothing to serve"
        )
    if s.peermem_module or (s.nvidia_open_module and _kernel(s.kernel) >= DMABUF_KERNEL):
        return Judged()
    found = "nvidia_peermem not loaded" + (
        f", kernel {s.kernel} older than 5.12" if s.nvidia_open_module else ", proprietary kernel module (no dma-buf)"
    )
    text = (
        f"{s.node}: GPUDirect RDMA has no peer-memory path ({found}), expected nvidia_peermem loaded or dma-buf: "
        "NCCL then stages every inter-node transfer through host memory"
    )
    remedy = "modprobe nvidia_peermem and list it in /etc/modules-load.d/, or the open kernel module on Linux ≥ 5.12"
    expected = "nvidia_peermem loaded, or dma-buf"
    return Judged((setting(s.node, "GPUDirect RDMA", text, found=found, expected=expected, remedy=remedy),))


def nvswitch_fabric(s: NodeSettings, *, gpus_are_real: bool) -> Judged:
    """Every GPU registered with the NVLink fabric (fabric manager), where NVSwitches exist."""
    why = _no_gpus(s, gpus_are_real)
    if why:
        return Judged(not_applicable=why)
    if s.gpus.error:
        return Judged((Finding.on_node(s.node, f"{s.node}: GPU modes unreadable: {s.gpus.error}"),))
    states = [g.fabric_state for g in s.gpus.gpus]
    if any(state is None for state in states):
        return Judged(not_applicable=f"{s.node}: this NVML has no GPU fabric query (nvmlDeviceGetGpuFabricInfo)")
    if all(state == gpu_modes.FABRIC_NOT_SUPPORTED for state in states):
        return Judged(not_applicable=f"{s.node}: no NVSwitch fabric: the GPUs take part in none")
    out = []
    remedy = "systemctl enable --now nvidia-fabricmanager (its version must match the driver's), then reset the GPUs"
    for g in s.gpus.gpus:
        state = gpu_modes.FABRIC_STATES.get(g.fabric_state or 0, str(g.fabric_state))
        if g.fabric_state != gpu_modes.FABRIC_COMPLETED:
            found = f"registration {state}"
        elif g.fabric_status:
            found = f"registration failed (NVML status {g.fabric_status})"
        else:
            continue
        text = f"{s.node}:gpu{g.index}: NVLink fabric {found}, expected completed: the GPU has no NVLink to its peers"
        out.append(
            setting(s.node, "NVSwitch fabric", text, found=found, expected="completed", remedy=remedy, gpu=g.index)
        )
    return Judged(tuple(out))


def _judged_by(unread: tuple[pci_acs.Bridge, ...]) -> str:
    """How a person gets the unread bridges judged: a task with root's capability, or a read by
    hand as root."""
    bdfs = " ".join(b.bdf for b in unread)
    by_hand = f"`for b in {bdfs}; do lspci -vvv -s $b | grep ACSCtl; done` (each should read ReqRedir- CmpltRedir-)"
    if all(b.unread == pci_acs.NOT_ROOT for b in unread):
        return (
            "run the suite's jobs as root (its tasks then hold CAP_SYS_ADMIN and read the extended configuration "
            f"space), or read them as root on the node, as a Slurm prolog or a node health check can: {by_hand}"
        )
    return f"read them as root on the node: {by_hand}"


def acs(s: NodeSettings) -> Judged:
    """No P2P request/completion redirect on the PCIe bridges above the GPUs and NICs (bare
    metal). The bridges read are judged; those that could not be read (the task not root) are
    not judged, named with why and how to get them judged."""
    if s.virtual_machine:
        return Judged(
            not_applicable=f"{s.node}: a virtual machine ({s.virtual_machine}): ACS on the physical bridges is the "
            "hypervisor's to set, and the bridges the guest sees are emulated"
        )
    failed = [e for e in s.errors if e.startswith(f"{PCI_READING}:")]
    if failed:
        text = f"{s.node}: PCIe ACS not judged: the PCIe devices could not be read ({'; '.join(failed)})"
        return Judged((Finding.on_node(s.node, text, severity="not_judged"),))
    if not s.acs.devices:
        return Judged(not_applicable=f"{s.node}: no GPU or NIC on PCIe")
    if not s.acs.bridges:
        return Judged(not_applicable=f"{s.node}: no PCIe bridge above the GPUs and NICs (they sit on a root bus)")
    out = []
    for b in s.acs.bridges:
        if b.unread or b.control is None or not b.control & pci_acs.REDIRECT_MASK:
            continue
        found = pci_acs.describe(b.control)
        text = (
            f"{s.node}: PCIe ACS on bridge {b.bdf} (above {', '.join(b.above)}) is {found}, expected ReqRedir- "
            "CmpltRedir-: peer-to-peer traffic (GPUDirect RDMA, GPU to GPU over PCIe) detours through the root "
            "complex, slower, and on some platforms it hangs"
        )
        remedy = f"disable ACS in the BIOS, or at every boot: setpci -s {b.bdf} ECAP_ACS+0x6.w=0000"
        out.append(
            setting(s.node, f"PCIe ACS {b.bdf}", text, found=found, expected="ReqRedir- CmpltRedir-", remedy=remedy)
        )
    unread = s.acs.unread
    if unread:
        reasons = sorted({b.unread for b in unread})
        read = len(s.acs.bridges) - len(unread)
        judged = f"the {read} other read and judged" if read else "none read"
        text = (
            f"{s.node}: PCIe ACS not judged on {len(unread)} of {len(s.acs.bridges)} bridges above the GPUs and "
            f"NICs ({', '.join(b.bdf for b in unread)}; {judged}): {'; '.join(reasons)}. To judge them: "
            f"{_judged_by(unread)}"
        )
        out.append(Finding.on_node(s.node, text, severity="not_judged"))
    return Judged(tuple(out))
