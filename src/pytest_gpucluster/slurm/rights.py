"""Whether this user may drain nodes (``--gpucluster-drain-failed``), asked before any job.

slurmctld lets root, its ``SlurmUser`` and users whose ``AdminLevel`` in accounting is Operator or
Administrator change a node's state; anyone else's ``scontrol update nodename=... state=drain``
ends in "slurm_update error: Invalid user id". ``scontrol show config`` names the SlurmUser and
whether accounting exists; ``sacctmgr show user`` gives the AdminLevel. Where neither answers, the
run cannot tell beforehand and names the right needed if a drain is refused at its end. One try
each, no retry window: this is a courtesy before the run, not a check of Slurm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_gpucluster.errors import SlurmQueryError
from pytest_gpucluster.slurm import commands

OPERATOR_LEVELS = ("Operator", "Administrator")
# What slurmctld answers a user without the right (Slurm 22.05: "slurm_update error: Invalid
# user id"; other versions say access or permission is denied).
_REFUSED = ("invalid user id", "access denied", "permission denied", "access/permission denied")


def right_needed(slurm_user: str = "") -> str:
    """The right, in words, that draining a node needs."""
    who = f"its SlurmUser ({slurm_user})" if slurm_user else "its SlurmUser"
    return (
        f"Slurm lets only root, {who} and users whose AdminLevel in accounting is Operator or Administrator "
        "change a node's state"
    )


@dataclass(frozen=True)
class DrainRight:
    """``allowed``: True, False, or None where Slurm could not tell; ``sentence``: why not, or
    the right needed when Slurm could not tell (empty when allowed)."""

    allowed: bool | None
    sentence: str = ""

    def to_json(self) -> dict[str, object]:
        """What the results record (``environment.drain_right``)."""
        return {"allowed": self.allowed, "why": self.sentence}


def parse_config(text: str) -> dict[str, str]:
    """``Key = Value`` lines of ``scontrol show config``."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+)\s*=\s*(.*)$", text, flags=re.M)}


def parse_slurm_user(value: str) -> tuple[str, int | None]:
    """``root(0)`` → ("root", 0); a value without a uid → (name, None)."""
    m = re.fullmatch(r"\s*([^()\s]+)\s*(?:\((\d+)\))?\s*", value)
    if m is None:
        return value.strip(), None
    return m.group(1), int(m.group(2)) if m.group(2) is not None else None


def parse_admin_level(text: str, user: str) -> str | None:
    """The AdminLevel of ``user`` in ``sacctmgr -n -P show user USER format=user,adminlevel``
    output (``gcop1|None``); None when accounting holds no record of the user."""
    for line in text.splitlines():
        name, _, level = line.strip().partition("|")
        if name == user:
            return level
    return None


def drain_right(user: str, uid: int) -> DrainRight:
    """Whether ``user`` (uid ``uid``) may drain nodes, as Slurm tells before any job."""
    try:
        config = parse_config(commands.ask_once(["scontrol", "show", "config"]))
    except SlurmQueryError:
        return DrainRight(None, right_needed())
    slurm_user, slurm_uid = parse_slurm_user(config.get("SlurmUser", ""))
    if uid == 0 or uid == slurm_uid or user == slurm_user:
        return DrainRight(True)
    needed = right_needed(slurm_user)
    if "slurmdbd" not in config.get("AccountingStorageType", ""):
        return DrainRight(
            False,
            f"{user} may not drain nodes: {needed}, and this cluster keeps no accounting; REJECTED nodes are named, "
            "not drained.",
        )
    try:
        level = parse_admin_level(
            commands.ask_once(["sacctmgr", "-n", "-P", "show", "user", user, "format=user,adminlevel"]), user
        )
    except SlurmQueryError:
        return DrainRight(None, needed)
    if level in OPERATOR_LEVELS:
        return DrainRight(True)
    has = f"AdminLevel {level}" if level else "no record in accounting"
    return DrainRight(
        False,
        f"{user} may not drain nodes: {needed}, and {user} has {has}; REJECTED nodes are named, not drained "
        f"(`sacctmgr modify user {user} set adminlevel=Operator` gives the right).",
    )


def refused_for_rights(failure: str) -> bool:
    """Whether a failed drain says this user lacks the right, not that Slurm failed."""
    low = failure.lower()
    return any(words in low for words in _REFUSED)
