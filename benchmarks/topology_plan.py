"""How long the across-node round plan takes on the login node at 128 to 4096 nodes.

For each node count, writes a topology.conf of leaves of ``--per-leaf`` nodes (under one spine,
or, past ``--pod-leaves`` leaves, under spines of that many leaves and a core), then times: reading
it (``parse_topology``), planning the rounds (``plan_rounds``), their cost and dry-run lines, and
naming one slow node from every group's busbw (``localise``). Prints a Markdown table row per
count: median of ``--repeat`` runs, and the process's peak RSS after the largest.

    python benchmarks/topology_plan.py --nodes 128 256 1024 4096

``--write DIR`` also writes, for the first count, ``DIR/topology.conf`` and a ``DIR/thresholds.toml``
whose profile ``big`` names it and lists every node, for a dry run of the suite:

    python benchmarks/topology_plan.py --nodes 1024 --write /tmp/big
    PATH=/usr/bin:/bin pytest tests/acceptance --gpucluster-thresholds=/tmp/big/thresholds.toml \\
        --cluster=big --gpucluster-dry-run -q
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_gpucluster.checks.localise import localise
from pytest_gpucluster.config.topology import parse_topology
from pytest_gpucluster.plan.round_cost import cost, lines
from pytest_gpucluster.plan.rounds import plan_rounds


def topology_conf(nodes: int, per_leaf: int, pod_leaves: int) -> str:
    leaves = -(-nodes // per_leaf)
    out = [f"# {nodes} nodes, leaves of {per_leaf}"]
    for i in range(leaves):
        first, last = i * per_leaf + 1, min((i + 1) * per_leaf, nodes)
        out.append(f"SwitchName=leaf{i + 1:03d} Nodes=gpu[{first:04d}-{last:04d}]")
    if leaves <= pod_leaves:
        out.append(f"SwitchName=spine Switches=leaf[001-{leaves:03d}]")
        return "\n".join(out) + "\n"
    spines = -(-leaves // pod_leaves)
    for s in range(spines):
        first, last = s * pod_leaves + 1, min((s + 1) * pod_leaves, leaves)
        out.append(f"SwitchName=spine{s + 1:02d} Switches=leaf[{first:03d}-{last:03d}]")
    out.append(f"SwitchName=core Switches=spine[01-{spines:02d}]")
    return "\n".join(out) + "\n"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def measure(nodes: int, per_leaf: int, pod_leaves: int) -> dict[str, Any]:
    text = topology_conf(nodes, per_leaf, pod_leaves)
    read_s, tree = timed(lambda: parse_topology(text))
    names = [n for leaf in tree.leaves for n in leaf.nodes]
    plan_s, plan = timed(lambda: plan_rounds(names, tree))
    lines_s, printed = timed(lambda: lines(plan, cost(plan)))
    bad = names[len(names) // 3]
    busbw = {g: 12.0 if bad in g.nodes else 40.0 for g in plan.groups}
    localise_s, found = timed(lambda: localise(plan, busbw, 30.0))
    assert [c.name for c in found.culprits] == [bad], found.culprits
    return {
        "leaves": len(tree.leaves),
        "levels": tree.levels,
        "jobs": len(plan.rounds),
        "groups": len(plan.groups),
        "read_s": read_s,
        "plan_s": plan_s,
        "lines_s": lines_s,
        "localise_s": localise_s,
        "lines": printed,
    }


def write_profile(folder: Path, nodes: int, per_leaf: int, pod_leaves: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "topology.conf").write_text(topology_conf(nodes, per_leaf, pod_leaves))
    nodelist = ", ".join(f'"gpu{i:04d}"' for i in range(1, nodes + 1))
    (folder / "thresholds.toml").write_text(
        "[profiles.big]\n"
        'executor = "slurm"\n'
        'partition = "gpu"\n'
        f"nodes = {nodes}\n"
        "gpus_per_node = 8\n"
        'gpu_model = "NVIDIA H100 80GB HBM3"\n'
        "ib_hcas = 8\n"
        "slurm_retry_s = 0\n"
        'thresholds = "default"\n'
        'topology_file = "topology.conf"\n'
        f"nodelist = [{nodelist}]\n\n"
        "[thresholds.default]\n"
        '"gpu.temperature" = { unit = "C", fail_above = 85, warn_above = 75 }\n'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[128, 256, 1024, 4096])
    parser.add_argument("--per-leaf", type=int, default=16)
    parser.add_argument("--pod-leaves", type=int, default=64, help="leaves under one spine before a core is added")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", type=Path, help="write topology.conf and thresholds.toml for the first count here")
    args = parser.parse_args(argv)
    if args.write:
        write_profile(args.write, args.nodes[0], args.per_leaf, args.pod_leaves)
    print("| nodes | leaves | levels | jobs | groups | read | plan | cost + lines | localise one slow node |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.nodes:
        runs = [measure(n, args.per_leaf, args.pod_leaves) for _ in range(args.repeat)]
        first = runs[0]

        def median(key: str, runs: list[dict[str, Any]] = runs) -> str:
            return f"{statistics.median(r[key] for r in runs):.3f} s"

        print(
            f"| {n} | {first['leaves']} | {first['levels']} | {first['jobs']} | {first['groups']} | "
            f"{median('read_s')} | {median('plan_s')} | {median('lines_s')} | {median('localise_s')} |",
            flush=True,
        )
    print(f"\npeak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print("\n".join(first["lines"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
