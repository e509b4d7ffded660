"""The machine's NVIDIA GPUs as the kernel driver lists them: PCI bus id → ``/dev/nvidiaN``.

A node of the test cluster owns a share of the machine's GPUs in nvidia-smi's order, which is PCI
bus order. The device file of a GPU is ``/dev/nvidia<minor>``, and the minor need not follow that
order, so the share is mapped to device files through the driver's own record of each GPU,
``/proc/driver/nvidia/gpus/<bus id>/information`` ("Bus Location", "Device Minor").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
_BUS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


@dataclass(frozen=True)
class Gpu:
    """One GPU: where it sits on PCI and the device file the driver serves it through."""

    bus_id: str  # "0000:18:00.0", lower case: sorts in PCI bus order
    minor: int
    uuid: str = ""
    model: str = ""

    @property
    def device(self) -> str:
        return f"/dev/nvidia{self.minor}"


def parse_information(text: str, where: str = "information") -> Gpu:
    """One ``information`` file (lines such as ``Bus Location: \\t 0000:18:00.0`` and ``Device
    Minor: \\t 0``); ValueError naming ``where`` when the bus or the minor is missing or malformed."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match:
            fields.setdefault(match.group(1).strip(), match.group(2))
    bus = fields.get("Bus Location", "")
    minor = fields.get("Device Minor", "")
    if not _BUS.match(bus):
        raise ValueError(f"{where}: no PCI bus id in 'Bus Location' (got {bus!r})")
    if not minor.isdigit():
        raise ValueError(f"{where}: no number in 'Device Minor' (got {minor!r})")
    return Gpu(bus_id=bus.lower(), minor=int(minor), uuid=fields.get("GPU UUID", ""), model=fields.get("Model", ""))


def in_bus_order(gpus: list[Gpu]) -> tuple[Gpu, ...]:
    """``gpus`` in nvidia-smi's order (PCI domain, bus, device, function)."""
    return tuple(sorted(gpus, key=lambda g: tuple(int(p, 16) for p in re.split(r"[:.]", g.bus_id))))


def machine_gpus(root: Path = PROC_GPUS) -> tuple[Gpu, ...]:
    """Every GPU the driver serves, in PCI bus order; empty without the driver's directory."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return ()
    found: list[Gpu] = []
    for entry in entries:
        info = entry / "information"
        try:
            text = info.read_text()
        except OSError:
            continue
        found.append(parse_information(text, str(info)))
    return in_bus_order(found)


def with_device_files(found: tuple[Gpu, ...], dev: Path = Path("/dev")) -> tuple[Gpu, ...]:
    """This machine's GPUs, in PCI bus order: those of ``found`` (the driver's list) that have a
    device file here (a container may see the driver's list of the whole host); where the driver
    lists none of them, every ``/dev/nvidiaN`` in minor order, bus unknown."""
    try:
        minors = sorted(int(p.name[6:]) for p in dev.iterdir() if re.fullmatch(r"nvidia\d+", p.name))
    except OSError:
        minors = []
    present = tuple(g for g in found if g.minor in minors)
    if present and len(present) == len(minors):
        return present
    return tuple(Gpu(bus_id="", minor=m) for m in minors)
