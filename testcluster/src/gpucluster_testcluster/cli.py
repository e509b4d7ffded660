"""``python -m gpucluster_testcluster up|down|status``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import config
from .cluster import TestCluster
from .proc import ClusterError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpucluster_testcluster",
        description="A multi-node Slurm test cluster on this machine (needs root).",
    )
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--nodes", type=int, default=config.DEFAULT_NODES)
    parser.add_argument("--gpus-per-node", type=int, default=config.DEFAULT_GPUS_PER_NODE)
    parser.add_argument("--gpu-mode", choices=("fake", "real"), default="fake")
    parser.add_argument(
        "--debs",
        type=Path,
        help="unpack these Debian 12 .debs instead of using apt (GPU machine)",
    )
    parser.add_argument("--state-dir", type=Path, default=config.DEFAULT_STATE_DIR)
    parser.add_argument("--shared-dir", type=Path, default=config.DEFAULT_SHARED_DIR)
    parser.add_argument(
        "--no-accounting",
        action="store_true",
        help="run without slurmdbd/MariaDB (sacct will not work)",
    )
    parser.add_argument(
        "--no-constrain-devices",
        action="store_true",
        help="real mode: do not confine jobs to their GPUs (ConstrainDevices=no)",
    )
    parser.add_argument(
        "--network",
        choices=("netns", "host"),
        default="netns",
        help="netns: a network namespace per node on a private bridge (needs iproute2); host: all "
        "nodes on 127.0.0.1 in the host's network, a slurmd port each",
    )
    parser.add_argument(
        "--share-gpus",
        action="store_true",
        help="every node's gres.conf names the same GPUs (/dev/nvidia0..G-1), also where the machine "
        "has enough for each: two nodes sharing one GPU are two hosts to NCCL",
    )
    parser.add_argument(
        "--hide-gpus-on",
        action="append",
        default=[],
        metavar="NODE",
        help="tell Slurm NODE has no GPUs (no Gres, no gres.conf line): a fault run; repeatable",
    )
    parser.add_argument(
        "--cpus-per-node",
        type=int,
        default=None,
        help=f"fake mode: CPUs each node advertises (default {config.NODE_CPUS}); 8 tasks per node need 8",
    )
    parser.add_argument("--no-install", action="store_true", help="never call apt-get")
    parser.add_argument("--keep-logs", action="store_true", help="down: keep <state>/log")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for idle nodes")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cluster = TestCluster(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        gpu_mode=args.gpu_mode,
        accounting=False if args.no_accounting else None,
        constrain_devices=not args.no_constrain_devices,
        debs=args.debs,
        install=not args.no_install,
        state_dir=args.state_dir,
        shared_dir=args.shared_dir,
        keep_logs=args.keep_logs,
        timeout=args.timeout,
        network=args.network,
        shared_gpus=args.share_gpus,
        gpuless_nodes=tuple(args.hide_gpus_on),
        cpus_per_node=args.cpus_per_node,
    )
    try:
        if args.command == "up":
            info = cluster.up()
            print(
                f"nodes: {' '.join(info.nodes)} (partition {info.partition}, "
                f"{info.gpus_per_node} GPUs each, {info.gpu_mode} mode"
                + (", shared by every node" if args.share_gpus else "")
                + (f"; none on {', '.join(args.hide_gpus_on)}" if args.hide_gpus_on else "")
                + ")"
            )
            print(f"shared directory: {info.shared_dir}")
            print(f"accounting: {'slurmdbd' if info.accounting else 'off'}")
            print("use it with:")
            print(f"  export SLURM_CONF={info.slurm_conf}")
            return 0
        if args.command == "down":
            cluster.down()
            print("test cluster is down")
            return 0
        return _status(args.state_dir)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _status(state_dir: Path) -> int:
    running = TestCluster.from_running(state_dir)
    if running is None:
        probe = TestCluster(state_dir=state_dir, install=False)
        for s in probe.node_states():
            print(f"{s.name} {s.state}{'' if s.responding else ' (not responding)'}")
        for problem in probe.problems():
            print(f"problem: {problem}")
        print("test cluster is not healthy")
        return 1
    for s in running.node_states():
        print(f"{s.name} {s.state}")
    print(f"healthy; export SLURM_CONF={running.paths.slurm_conf}")
    return 0
