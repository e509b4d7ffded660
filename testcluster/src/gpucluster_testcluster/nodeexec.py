"""Become a node: run as ``python -I nodeexec.py NODE [DEVICE ...] -- COMMAND ...`` inside the
node's fresh UTS and mount namespaces (``unshare --uts --mount``), it mounts /dev/null over every
DEVICE, sets the host name to NODE and execs COMMAND (slurmd), whose job steps inherit both.

A real node has only its own GPUs' device files. Here every node would see every /dev/nvidiaN of
the machine, and Slurm's device cgroup denies only the devices in the node's own gres.conf, so the
files of the other nodes' GPUs are replaced by /dev/null in the node's view: NVML, nvidia-smi and
CUDA then see only the node's GPUs. (An empty /dev with only the node's files would not do: NVML,
running as root, creates the missing device files again.)

Run by path with ``-I``: it imports only the standard library, not its own package.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys
from collections.abc import Sequence

MS_BIND = 4096  # <sys/mount.h>


def split_args(argv: Sequence[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """``NODE [DEVICE ...] -- COMMAND ...`` → (node, devices, command); ValueError when malformed."""
    if "--" not in argv:
        raise ValueError("usage: nodeexec.py NODE [DEVICE ...] -- COMMAND ...")
    sep = list(argv).index("--")
    head, command = tuple(argv[:sep]), tuple(argv[sep + 1 :])
    if not head or not command:
        raise ValueError("usage: nodeexec.py NODE [DEVICE ...] -- COMMAND ...")
    for path in head[1:]:
        if not path.startswith("/"):
            raise ValueError(f"{path!r}: a device file to hide is an absolute path")
    return head[0], head[1:], command


def hide(device: str) -> None:
    """Mount /dev/null over ``device`` in this mount namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"/dev/null", os.fsencode(device), None, MS_BIND, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mounting /dev/null over {device}: {os.strerror(errno)}")


def main(argv: Sequence[str]) -> None:
    node, devices, command = split_args(argv)
    for device in devices:
        hide(device)
    socket.sethostname(node)
    os.execv(command[0], list(command))


if __name__ == "__main__":
    main(sys.argv[1:])
