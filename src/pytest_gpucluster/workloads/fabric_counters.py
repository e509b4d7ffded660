"""Fabric error counters of one node: every InfiniBand port's error counters from sysfs and every
NVLink's error counters from NVML, read at one moment into a picklable snapshot.

Two snapshots, one before the first workload and one after every other job of the run, are
compared on the login node (``pytest_gpucluster.checks.fabric``): a link that corrupts or drops
traffic under load shows as a counter that rose while the collectives still passed.

InfiniBand, per ``<root>/<hca>/ports/<port>/``:
- ``counters/``: the PortCounters error counters of the InfiniBand specification (the kernel's
  sysfs ABI names them); the data and packet counters there are traffic, not errors, and are
  not read.
- ``hw_counters/``, where the driver provides it (mlx5 does): the error counters of the
  device's queue counters (sequence errors, retries exceeded, completions with error).

NVLink, per GPU and link: ``nvmlDeviceGetNvLinkErrorCounter`` for replay, recovery, CRC flit,
CRC data and ECC data. PCIe, per GPU: ``nvmlDeviceGetPcieReplayCounter``, the TLPs the GPU's
PCIe link sent again after an error (DCGM's ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``). A counter NVML
does not support on a GPU is listed as unsupported; NVML missing altogether is recorded in
``nvml_status``. Neither raises.

Clock events, per GPU: NVML's cumulative time, in nanoseconds since the driver loaded, that the
GPU spent with its clocks held down for each reason that slows it (``nvmlDeviceGetFieldValues``
with the ``NVML_FI_DEV_CLOCKS_EVENT_REASON_*`` fields; nvidia-smi prints them in microseconds as
"Clocks Event Reasons Counters"). The thermal and power-brake fields' numbers moved between NVML
releases (251–253 in some, 269–271 in 13.x); the binding's numbers are asked for, and a rise the
span cannot hold tells the judge that the driver meant another field. Not fabric errors, but
read in the same two snapshots so the time a GPU ran slowed over the whole run is known
(``checks.gpu_slowdown``); a field the GPU does not keep is left out.

PCIe AER, per GPU and per HCA: the kernel's error statistics of the PCIe device
(``aer_dev_correctable``, ``aer_dev_nonfatal``, ``aer_dev_fatal`` in its sysfs folder; the ABI's
sysfs-bus-pci-devices-aer_stats), each file's total. A device the kernel keeps no statistics for
(no AER capability, as under most hypervisors) is left out.

The sysfs roots are parameters so tests read recorded trees.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.nvml_util import node_gpu_indices
from pytest_gpucluster.workloads.xid import KernelLog, read_kernel_log

SYSFS_ROOT = "/sys/class/infiniband"

# counters/ error counters → width in bits. These PortCounters fields saturate at their maximum
# (they never wrap), so a counter already at 2**width - 1 cannot show a further increase.
IB_ERROR_COUNTERS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}

# hw_counters/ (driver-specific, 64-bit) that count errors; read only where present.
IB_HW_ERROR_COUNTERS: tuple[str, ...] = (
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "req_cqe_error",
    "resp_cqe_error",
    "resp_local_length_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
)

# Counter name in a snapshot → the nvmlNvLinkErrorCounter_t member it is read with.
NVLINK_ERROR_COUNTERS: dict[str, str] = {
    "nvlink_replay": "NVML_NVLINK_ERROR_DL_REPLAY",
    "nvlink_recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
    "nvlink_crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "nvlink_crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA",
    "nvlink_ecc_data": "NVML_NVLINK_ERROR_DL_ECC_DATA",
}


@dataclass(frozen=True)
class IbPortCounters:
    """One HCA port's error counters; ``unreadable`` names files present but not an integer."""

    hca: str
    port: str
    counters: dict[str, int]
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class NvLinkCounters:
    """One NVLink's error counters; ``unsupported`` names those NVML does not report on it."""

    link: int
    counters: dict[str, int]
    unsupported: tuple[str, ...] = ()


# Counter name in a snapshot → the NVML call that reads it for a GPU's PCIe link.
PCIE_ERROR_COUNTERS: dict[str, str] = {"pcie_replay": "nvmlDeviceGetPcieReplayCounter"}

# Reason in a snapshot → the NVML field holding the nanoseconds the GPU's clocks were held down
# for it (nvml.h; sync boost is left out: it holds a GPU to its group's clock, not below it).
CLOCK_EVENT_FIELDS: dict[str, str] = {
    "sw_power_cap": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP",
    "sw_thermal": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
    "hw_thermal": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
    "hw_power_brake": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",
}

PCI_ROOT = "/sys/bus/pci/devices"
# Counter name in a snapshot → (the AER statistics file of a PCI device, the line of its total).
AER_COUNTERS: dict[str, tuple[str, str]] = {
    "aer_correctable": ("aer_dev_correctable", "TOTAL_ERR_COR"),
    "aer_nonfatal": ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    "aer_fatal": ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
}


@dataclass(frozen=True)
class PcieAer:
    """One PCIe device's AER totals: ``device`` is a GPU (``gpu0``) or an HCA (``mlx5_0``),
    ``address`` its PCI address."""

    device: str
    address: str
    counters: dict[str, int]


@dataclass(frozen=True)
class GpuNvLinks:
    """One GPU's link error counters: its NVLinks (empty when it has none) and its PCIe link's
    (``pcie``; ``pcie_unsupported`` names those NVML does not report); ``errors``: NVML failures
    other than unsupported."""

    index: int
    links: tuple[NvLinkCounters, ...]
    errors: tuple[str, ...] = ()
    pcie: dict[str, int] = field(default_factory=dict)
    pcie_unsupported: tuple[str, ...] = ()
    address: str = ""  # the GPU's PCI address as sysfs names it (0000:18:00.0); empty: not read
    slowed_ns: dict[str, int] = field(default_factory=dict)  # CLOCK_EVENT_FIELDS → ns, those NVML keeps


@dataclass(frozen=True)
class FabricSnapshot:
    """Every fabric error counter of one node at ``time_s`` (epoch seconds).

    ``nvml_status`` is ``"ok"`` or ``"unsupported: <why>"`` (no NVML library, no driver, NVML
    refused to start); ``error`` says why the InfiniBand tree could not be read at all.
    """

    node: str
    time_s: float
    root: str
    ib_ports: tuple[IbPortCounters, ...]
    gpus: tuple[GpuNvLinks, ...]
    nvml_status: str
    error: str = ""
    aer: tuple[PcieAer, ...] = ()  # the GPUs' and HCAs' PCIe AER totals, where the kernel keeps them


def snapshot_from_dict(data: Mapping[str, Any]) -> FabricSnapshot:
    """A snapshot from its ``dataclasses.asdict`` form (a results record, a recorded file)."""
    ports = tuple(
        IbPortCounters(p["hca"], str(p["port"]), dict(p["counters"]), tuple(p.get("unreadable", ())))
        for p in data.get("ib_ports", ())
    )
    gpus = tuple(
        GpuNvLinks(
            int(g["index"]),
            tuple(
                NvLinkCounters(int(link["link"]), dict(link["counters"]), tuple(link.get("unsupported", ())))
                for link in g.get("links", ())
            ),
            tuple(g.get("errors", ())),
            dict(g.get("pcie", {})),
            tuple(g.get("pcie_unsupported", ())),
            str(g.get("address", "")),
            {str(k): int(v) for k, v in dict(g.get("slowed_ns", {})).items()},
        )
        for g in data.get("gpus", ())
    )
    aer = tuple(PcieAer(str(a["device"]), str(a["address"]), dict(a["counters"])) for a in data.get("aer", ()))
    return FabricSnapshot(
        str(data["node"]),
        float(data["time_s"]),
        str(data.get("root", SYSFS_ROOT)),
        ports,
        gpus,
        str(data["nvml_status"]),
        str(data.get("error", "")),
        aer,
    )


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_port(hca: str, port_dir: Path) -> IbPortCounters:
    counters: dict[str, int] = {}
    unreadable: list[str] = []
    sources = [(port_dir / "counters", tuple(IB_ERROR_COUNTERS)), (port_dir / "hw_counters", IB_HW_ERROR_COUNTERS)]
    for folder, names in sources:
        for name in names:
            path = folder / name
            if name in counters or not path.exists():
                continue
            value = _read_int(path)
            if value is None:
                unreadable.append(name)
            else:
                counters[name] = value
    return IbPortCounters(hca, port_dir.name, counters, tuple(unreadable))


def read_ib_counters(root: str = SYSFS_ROOT) -> tuple[IbPortCounters, ...]:
    """Error counters of every port of every HCA under ``root`` (empty when ``root`` does not exist)."""
    base = Path(root)
    if not base.is_dir():
        return ()
    ports = []
    for hca in sorted(base.iterdir(), key=lambda p: p.name):
        port_root = hca / "ports"
        if not port_root.is_dir():
            continue
        for port_dir in sorted(port_root.iterdir(), key=lambda p: p.name):
            ports.append(_read_port(hca.name, port_dir))
    return tuple(ports)


def _read_each(nvml: Any, readers: Mapping[str, Callable[[], Any] | None]) -> tuple[dict[str, int], tuple[str, ...]]:
    """(each counter its reader read, those unsupported): no reader (an older NVML binding without
    the call or constant) or NVML answering not-supported. Other NVML errors are raised."""
    counters: dict[str, int] = {}
    unsupported: list[str] = []
    for name, read in readers.items():
        if read is None:
            unsupported.append(name)
            continue
        try:
            counters[name] = int(read())
        except nvml.NVMLError_NotSupported:
            unsupported.append(name)
    return counters, tuple(unsupported)


def _nvlink_counters(nvml: Any, handle: Any, link: int) -> NvLinkCounters:
    def reader(member: str) -> Callable[[], Any] | None:
        kind = getattr(nvml, member, None)
        return None if kind is None else lambda: nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, kind)

    counters, unsupported = _read_each(nvml, {name: reader(m) for name, m in NVLINK_ERROR_COUNTERS.items()})
    return NvLinkCounters(link, counters, unsupported)


def gpu_links(nvml: Any, index: int) -> GpuNvLinks:
    """One GPU's NVLink error counters (NVML index ``index``) through an initialised ``nvml``."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    links: list[NvLinkCounters] = []
    errors: list[str] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            nvml.nvmlDeviceGetNvLinkState(handle, link)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
            break  # past the GPU's last link, or no NVLink at all
        try:
            links.append(_nvlink_counters(nvml, handle, link))
        except nvml.NVMLError as exc:
            errors.append(f"link {link}: {exc}")
    calls = {name: getattr(nvml, call, None) for name, call in PCIE_ERROR_COUNTERS.items()}
    pcie: dict[str, int] = {}
    unsupported: tuple[str, ...] = ()
    try:
        pcie, unsupported = _read_each(
            nvml, {name: None if call is None else partial(call, handle) for name, call in calls.items()}
        )
    except nvml.NVMLError as exc:
        errors.append(f"PCIe: {exc}")
    slowed = _slowed_ns(nvml, handle)
    return GpuNvLinks(index, tuple(links), tuple(errors), pcie, unsupported, _address(nvml, handle), slowed)


def _slowed_ns(nvml: Any, handle: Any) -> dict[str, int]:
    """The GPU's clock-event times (``CLOCK_EVENT_FIELDS``) in one NVML call; a field this NVML
    binding does not name, or the GPU does not keep, is left out, and so is every field where the
    call itself fails (a driver without field values)."""
    ids = {name: getattr(nvml, const, None) for name, const in CLOCK_EVENT_FIELDS.items()}
    known = {name: fid for name, fid in ids.items() if fid is not None}
    if not known:
        return {}
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, list(known.values()))
    except (AttributeError, nvml.NVMLError):
        return {}
    return {name: int(v.value.ullVal) for name, v in zip(known, values, strict=True) if v.nvmlReturn == 0}


def _address(nvml: Any, handle: Any) -> str:
    """The GPU's PCI address as sysfs names its folder (``0000:18:00.0``, from NVML's
    ``00000000:18:00.0``); empty where NVML does not say."""
    try:
        bus_id = nvml.nvmlDeviceGetPciInfo(handle).busId
    except (AttributeError, nvml.NVMLError):
        return ""
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    parts = text.strip().lower().split(":")
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}" if len(parts) == 3 else ""
    except ValueError:
        return ""


def read_aer(device: str, folder: Path) -> PcieAer | None:
    """``device``'s AER totals from its PCI device folder; None where the kernel keeps none."""
    counters: dict[str, int] = {}
    for name, (file, total) in AER_COUNTERS.items():
        try:
            text = (folder / file).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.strip().rpartition(" ")
            if key == total and value.isdigit():
                counters[name] = int(value)
    if not counters:
        return None
    try:
        address = folder.resolve().name
    except OSError:
        address = folder.name
    return PcieAer(device, address, counters)


def read_device_aer(root: str, gpus: tuple[GpuNvLinks, ...], pci_root: str = PCI_ROOT) -> tuple[PcieAer, ...]:
    """The AER totals of every GPU NVML gave an address for and of every HCA under ``root``."""
    found = [read_aer(f"gpu{g.index}", Path(pci_root) / g.address) for g in gpus if g.address]
    base = Path(root)
    if base.is_dir():
        found += [read_aer(hca.name, hca / "device") for hca in sorted(base.iterdir(), key=lambda p: p.name)]
    return tuple(a for a in found if a is not None)


def read_nvlink_counters(nvml: Any) -> tuple[tuple[GpuNvLinks, ...], str]:
    """(every GPU's NVLink error counters, NVML status) through an initialised ``nvml`` module:
    the node's GPUs, which are those the caller exposed where the node is part of the machine."""
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        return (), f"unsupported: {exc}"
    gpus = []
    for index in node_gpu_indices(count):
        try:
            gpus.append(gpu_links(nvml, index))
        except nvml.NVMLError as exc:
            gpus.append(GpuNvLinks(index, (), (f"NVML: {exc}",)))
    return tuple(gpus), "ok"


def _nvlink_snapshot() -> tuple[tuple[GpuNvLinks, ...], str]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no library, no driver: recorded, never raised
        return (), f"unsupported: NVML unusable ({exc})"
    try:
        return read_nvlink_counters(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def snapshot(
    ctx: TaskContext, *, root: str = SYSFS_ROOT, nvml: bool = True, pci_root: str = PCI_ROOT
) -> FabricSnapshot:
    """Run on each node, in a job holding the node's GPUs (NVML sees only those under device
    cgroups): its InfiniBand, NVLink and PCIe error counters now. ``nvml=False`` skips NVLink
    (recorded as unsupported), for profiles whose nodes have no real GPUs."""
    node = ctx.hostname or socket.gethostname()
    gpus, status = _nvlink_snapshot() if nvml else ((), "unsupported: not asked for (the profile has no real GPUs)")
    now = time.time()
    try:
        aer = read_device_aer(root, gpus, pci_root)
    except OSError:
        aer = ()  # the statistics are extra evidence: a tree that cannot be listed leaves them out
    try:
        return FabricSnapshot(node, now, root, read_ib_counters(root), gpus, status, aer=aer)
    except OSError as exc:
        return FabricSnapshot(node, now, root, (), gpus, status, error=f"cannot read {root}: {exc}", aer=aer)


@dataclass(frozen=True)
class AfterReadings:
    """One node's readings after every other job, from one task: the fabric counters' second
    snapshot and the kernel log's Xid lines (``xid.read_kernel_log``)."""

    node: str
    fabric: FabricSnapshot
    kernel_log: KernelLog


def snapshot_and_kernel_log(ctx: TaskContext, *, root: str = SYSFS_ROOT, nvml: bool = True) -> AfterReadings:
    """Workload: the after snapshot (``snapshot``), then the node's kernel log, in one task: one
    job at the run's end where the run reads both, not two."""
    fabric = snapshot(ctx, root=root, nvml=nvml)
    return AfterReadings(fabric.node, fabric, read_kernel_log(ctx))
