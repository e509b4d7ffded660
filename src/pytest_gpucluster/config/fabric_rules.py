"""What the fabric check judges a counter's rise by: every error counter belongs to one *family*,
and a family's increase over the run, as a rate, is held against its warn and fail lines.

A line is a rate at or above which the family warns or fails; a line of 0 means any increase. A
family with neither line is recorded (its counters' rises stay in the results) but never judged.
NVLink families sum the increase over every link of a GPU (as DCGM judges CRC errors, per GPU);
InfiniBand families judge each HCA port. Lifetime totals are never judged, only what rose between
the two snapshots.

``DEFAULT_RULES`` are the suite's lines, each with the reference it rests on (docs/thresholds.md);
a profile's ``[profiles.NAME.fabric.FAMILY]`` table tightens or loosens them (``with_overrides``).
"""

from __future__ import annotations

import difflib
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pytest_gpucluster.workloads.fabric_counters import (
    AER_COUNTERS,
    IB_ERROR_COUNTERS,
    IB_HW_ERROR_COUNTERS,
    NVLINK_ERROR_COUNTERS,
    PCIE_ERROR_COUNTERS,
)

Scope = Literal["gpu", "port"]
Per = Literal["s", "min"]
Status = Literal["fail", "warn", "note"]
SECONDS: Mapping[str, float] = {"s": 1.0, "min": 60.0}
DEFAULTS_WHERE = "the suite's defaults (config/fabric_rules.py)"


@dataclass(frozen=True)
class FabricRule:
    """One family of counters and its lines, in events per ``per`` (a second or a minute)."""

    family: str
    title: str  # how a sentence names the family: "NVLink CRC", "InfiniBand symbol_error"
    counters: tuple[str, ...]
    scope: Scope
    warn: float | None = None  # None: no line; 0: any increase
    fail: float | None = None
    per: Per = "s"
    source: str = ""  # the reference or measurement behind the lines; empty: a site's choice
    set_in: str = DEFAULTS_WHERE
    meaning: str = ""  # what a rise that reaches a line means for the cluster's user, and what to do

    def rate(self, increase: int, seconds: float) -> float:
        """``increase`` over ``seconds`` in events per ``per``."""
        return increase / max(seconds, 1.0) * SECONDS[self.per]

    def status(self, increase: int, seconds: float) -> Status:
        """fail / warn where the rise reaches a line, else note (recorded, not judged)."""
        if increase <= 0:
            return "note"
        rate = self.rate(increase, seconds)
        for status, line in (("fail", self.fail), ("warn", self.warn)):
            if line is not None and (line == 0 or rate >= line):
                return status  # type: ignore[return-value]
        return "note"

    @property
    def counts_only(self) -> bool:
        """Whether every line it has is "any increase": its rises are shown as counts, not rates."""
        lines = [line for line in (self.warn, self.fail) if line is not None]
        return bool(lines) and not any(lines)

    def lines(self) -> str:
        """The lines as a phrase: ``warn > 0, fail ≥ 100/s per GPU``; ``recorded, not judged``."""
        parts = [
            f"{name} > 0" if line == 0 else f"{name} ≥ {line:g}/{self.per}"
            for name, line in (("warn", self.warn), ("fail", self.fail))
            if line is not None
        ]
        if not parts:
            return "recorded, not judged"
        rated = any(line for line in (self.warn, self.fail))
        return ", ".join(parts) + (f" per {'GPU' if self.scope == 'gpu' else 'port'}" if rated else "")


def _rule(family: str, title: str, counters: tuple[str, ...], scope: Scope, **lines: Any) -> FabricRule:
    return FabricRule(family, title, counters, scope, **lines)


_DCGM = "NVIDIA/DCGM"
_NVSENTINEL = "NVIDIA NVSentinel link-counter detection"
_FATAL = f"{_NVSENTINEL}: any increase is fatal (docs/thresholds.md)"
_AER = "the kernel's PCIe AER statistics (sysfs-bus-pci-devices-aer_stats, the PCIe AER how-to)"
# fmt: off
DEFAULT_RULES: Mapping[str, FabricRule] = types.MappingProxyType({r.family: r for r in (
    _rule("nvlink_replay", "NVLink replay", ("nvlink_replay",), "gpu", fail=0,
          source=f"{_DCGM} health watch: replay and recovery errors are failures, not warnings (docs/thresholds.md)"),
    _rule("nvlink_recovery", "NVLink recovery", ("nvlink_recovery",), "gpu", fail=0,
          source=f"{_DCGM} health watch and diag max_nvlink_recovery_errors = 0 (docs/thresholds.md)"),
    _rule("nvlink_crc", "NVLink CRC", ("nvlink_crc_flit", "nvlink_crc_data"), "gpu", warn=200, fail=500,
          source="healthy H200s (NV18) read 0.3-58/s per GPU over whole runs and 123-125/s over 23 s of "
          "NCCL sweeps alone: the rate follows the NVLink traffic, so DCGM's 100/s per GPU "
          f"({_DCGM} DcgmGPUHardwareLimits.h) rejects a healthy GPU whose links are kept busy; the warn "
          "line sits at 1.6 times and the fail line at 4 times the densest healthy rate (docs/thresholds.md)",
          meaning="NVLink corrects a CRC error by sending the data again, so nothing is lost, but each "
          "resend takes bandwidth: a GPU this far above what healthy GPUs under full NVLink traffic show "
          "slows its NVLink traffic; a rate that grows from run to run points at that GPU's NVLink "
          "(board, connector or NVSwitch port) for the vendor"),
    _rule("pcie_replay", "PCIe replay", ("pcie_replay",), "gpu", warn=0, fail=8, per="min",
          source=f"{_DCGM} DcgmGPUHardwareLimits.h: 8 replays per minute is the most the driver's team "
          "recommends (DCGM_LIMIT_MAX_PCIREPLAY_RATE) (docs/thresholds.md)",
          meaning="the GPU's PCIe link sent packets again after errors: nothing is lost, but the "
          "host-to-GPU and GPUDirect traffic through that link slows, and a rising count marks a "
          "marginal riser, slot or retimer for the vendor"),
    _rule("pcie_aer_fatal", "PCIe AER fatal errors", ("aer_fatal",), "port", fail=0,
          source=f"{_AER}: a fatal uncorrectable error leaves the link unreliable until it is reset "
          "(docs/thresholds.md)",
          meaning="the device's PCIe link lost data it could not recover; the device, its slot or its "
          "riser is for the vendor"),
    _rule("pcie_aer_nonfatal", "PCIe AER non-fatal errors", ("aer_nonfatal",), "port", fail=0,
          source=f"{_AER}: a non-fatal uncorrectable error lost a transaction the driver had to "
          "recover (docs/thresholds.md)",
          meaning="a transaction on the device's PCIe link was lost and recovered by its driver; a "
          "healthy link loses none"),
    _rule("pcie_aer_correctable", "PCIe AER correctable errors", ("aer_correctable",), "port",
          source=f"{_AER}: corrected by the link itself, by sending again; a GPU's resends are judged "
          "in pcie_replay (docs/thresholds.md)"),
    _rule("nvlink_ecc", "NVLink ECC", ("nvlink_ecc_data",), "gpu",
          source="no published rate (DCGM diag does not read it); a healthy 4×H200 counts about 6.7/s "
          "per link under NCCL traffic (docs/thresholds.md)"),
    _rule("link_downed", "InfiniBand link_downed", ("link_downed",), "port", fail=0, source=_FATAL),
    _rule("local_link_integrity_errors", "InfiniBand local_link_integrity_errors",
          ("local_link_integrity_errors",), "port", fail=0, source=_FATAL),
    _rule("excessive_buffer_overrun_errors", "InfiniBand excessive_buffer_overrun_errors",
          ("excessive_buffer_overrun_errors",), "port", fail=0, source=_FATAL),
    _rule("rnr_nak_retry_err", "InfiniBand rnr_nak_retry_err", ("rnr_nak_retry_err",), "port", fail=0,
          source=_FATAL),
    _rule("symbol_error", "InfiniBand symbol_error", ("symbol_error",), "port", warn=0, fail=10,
          source=f"{_NVSENTINEL}: fails above 10/s; PAM4 links take raw bit errors (docs/thresholds.md)"),
    _rule("port_rcv_errors", "InfiniBand port_rcv_errors", ("port_rcv_errors",), "port", warn=0, fail=10,
          source=f"{_NVSENTINEL}: fails above 10/s (docs/thresholds.md)"),
    _rule("link_error_recovery", "InfiniBand link_error_recovery", ("link_error_recovery",), "port",
          warn=0, fail=5, per="min", source=f"{_NVSENTINEL}: fails above 5/min (docs/thresholds.md)"),
    _rule("port_xmit_discards", "InfiniBand port_xmit_discards", ("port_xmit_discards",), "port",
          warn=0, fail=100, source=f"{_NVSENTINEL}: fails above 100/s (docs/thresholds.md)"),
    _rule("local_ack_timeout_err", "InfiniBand local_ack_timeout_err", ("local_ack_timeout_err",), "port",
          warn=0, fail=1, source=f"{_NVSENTINEL}: fails above 1/s (docs/thresholds.md)"),
    _rule("ib_remote_errors", "InfiniBand errors from elsewhere on the path",
          ("port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors"), "port", warn=0,
          source="another link's or the switch's fault, not this port's: shown, never fails the node "
          "(docs/thresholds.md)"),
    _rule("ib_constraint_errors", "InfiniBand partition constraint errors",
          ("port_xmit_constraint_errors", "port_rcv_constraint_errors"), "port", warn=0,
          source="partition (P_Key) filtering: configuration, not link health (docs/thresholds.md)"),
    _rule("ib_retries_exceeded", "InfiniBand connections given up",
          ("req_transport_retries_exceeded", "req_rnr_retries_exceeded"), "port", warn=0,
          source="a connection given up after its retries; the cause may be the peer (a rank that ended) "
          "(docs/thresholds.md)"),
    _rule("VL15_dropped", "InfiniBand VL15_dropped", ("VL15_dropped",), "port",
          source="subnet management packets dropped by a busy agent: not data traffic (docs/thresholds.md)"),
    _rule("ib_sequence_errors", "InfiniBand out-of-sequence packets",
          ("out_of_sequence", "packet_seq_err", "implied_nak_seq_err"), "port",
          source="retransmissions that adaptive routing and congestion cause; lost links show in the judged "
          "families (docs/thresholds.md)"),
    _rule("ib_completion_errors", "InfiniBand completions with error",
          ("req_cqe_error", "resp_cqe_error", "resp_local_length_error", "req_remote_invalid_request",
           "req_remote_access_errors", "resp_remote_access_errors"), "port",
          source="software's errors (a process ended with work queued, a bad key), not the fabric's "
          "(docs/thresholds.md)"),
)})
# fmt: on

KNOWN_COUNTERS = (
    *IB_ERROR_COUNTERS,
    *IB_HW_ERROR_COUNTERS,
    *NVLINK_ERROR_COUNTERS,
    *PCIE_ERROR_COUNTERS,
    *AER_COUNTERS,
)
FAMILY_OF: Mapping[str, str] = types.MappingProxyType(
    {counter: rule.family for rule in DEFAULT_RULES.values() for counter in rule.counters}
)
_LINE_KEYS = ("warn_per_s", "warn_per_min", "fail_per_s", "fail_per_min")
_KEYS = (*_LINE_KEYS, "source")


class RuleError(ValueError):
    """A fabric table that cannot be used; ``key`` is its dotted path under the profile."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"{key}: {why}")
        self.key = key


def _line(value: Any, key: str) -> float | None:
    if value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise RuleError(key, f"expected a rate ≥ 0 (0: any increase) or false (no line), got {value!r}.")
    return float(value)


def _override(rule: FabricRule, table: Mapping[str, Any], where: str, set_in: str) -> FabricRule:
    for key in table:
        if key not in _KEYS:
            guess = difflib.get_close_matches(key, _KEYS, n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else f" Known keys: {', '.join(_KEYS)}."
            raise RuleError(f"{where}.{key}", f"unknown key.{hint}")
    changes: dict[str, Any] = {"set_in": set_in, "source": ""}
    for name in ("warn", "fail"):
        given = [k for k in (f"{name}_per_s", f"{name}_per_min") if k in table]
        if len(given) > 1:
            raise RuleError(f"{where}.{given[1]}", f"{given[0]} is set too; give the {name} line once.")
        if given:
            per = given[0].rsplit("_", 1)[1]
            line = _line(table[given[0]], f"{where}.{given[0]}")
            # Lines are held in the family's unit: a line given per minute is shown per minute.
            changes[name] = None if line is None else line * SECONDS[rule.per] / SECONDS[per]
    warn, fail = changes.get("warn", rule.warn), changes.get("fail", rule.fail)
    if "warn" not in changes and warn is not None and fail is not None and warn > fail:
        # A fail line moved under the suite's warn line: the table asked for a stricter family, so
        # every rise the warn line stood for now reaches the fail line instead.
        warn = changes["warn"] = 0.0 if fail == 0 else None
    if warn is not None and fail is not None and warn > fail:
        raise RuleError(where, f"the warn line ({warn:g}/{rule.per}) is above the fail line ({fail:g}/{rule.per}).")
    source = table.get("source", "")
    if not isinstance(source, str) or ("source" in table and not source.strip()):
        raise RuleError(f"{where}.source", f"expected what the lines rest on as text, got {source!r}.")
    changes["source"] = source.strip()
    return replace(rule, **changes)


def with_overrides(table: Any, where: str = "fabric", file: str = "") -> Mapping[str, FabricRule]:
    """``DEFAULT_RULES`` with a profile's ``[fabric.FAMILY]`` tables laid over them; ``where`` is the
    table's dotted path (``profiles.lab.fabric``), which messages and each rule's ``set_in``
    (``thresholds.toml [profiles.lab.fabric.nvlink_crc]``) name. Raises RuleError naming the key."""
    if not isinstance(table, Mapping):
        raise RuleError(where, "expected tables such as [profiles.NAME.fabric.nvlink_crc].")
    rules = dict(DEFAULT_RULES)
    for family, own in table.items():
        here = f"{where}.{family}"
        if family not in rules:
            if family in FAMILY_OF:
                hint = f" It is judged in the family '{FAMILY_OF[family]}': set [{where}.{FAMILY_OF[family]}]."
            else:
                guess = difflib.get_close_matches(family, [*rules, *FAMILY_OF], n=1)
                hint = f" Perhaps you meant '{FAMILY_OF.get(guess[0], guess[0])}'?" if guess else ""
            raise RuleError(here, f"no such counter family.{hint} Families: {', '.join(rules)}.")
        if not isinstance(own, Mapping):
            raise RuleError(here, "expected a table such as { fail_per_s = 100 }.")
        rules[family] = _override(rules[family], own, here, f"{file} [{here}]" if file else here)
    return types.MappingProxyType(rules)
