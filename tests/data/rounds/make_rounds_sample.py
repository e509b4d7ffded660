"""Writes ``results_64_nodes_4_leaves_synthetic.json``: the results of an across-node all_reduce
by rounds over four leaves of 16 nodes (``topology/topology-one-spine_representative_sample.conf``),
with the path between leaf2 and leaf4 slow and node37 (leaf3) slow. Every group's busbw is made
up (healthy 42–48 GB/s, spread deterministically; a slow path 18–21; a slow node 9–11), then
judged, localised and decided by the suite's own code, so the file has the shapes the results file
has. Not captured from a cluster.

    python tests/data/rounds/make_rounds_sample.py
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_gpucluster import verdict
from pytest_gpucluster.checks.rounds import GroupResult, judge_rounds
from pytest_gpucluster.config.topology import read_topology
from pytest_gpucluster.plan.rounds import Group, plan_rounds
from pytest_gpucluster.results import codec

HERE = Path(__file__).resolve().parent
TREE = read_topology(HERE.parent / "topology" / "topology-one-spine_representative_sample.conf")
LINE = 40.0
METRIC = "nccl.all_reduce.inter_node"


def busbw(number: int, g: Group) -> float:
    spread = (sum(map(ord, "".join(g.nodes))) + 7 * number) % 60 / 10  # 0.0–5.9
    if "node37" in g.nodes:
        return 9.0 + spread / 3
    if set(g.leaves) == {"leaf2", "leaf4"} or len(g.leaves) == 4:
        return 18.0 + spread / 2
    return 42.0 + spread


def main() -> None:
    nodes = [n for leaf in TREE.leaves for n in leaf.nodes]
    plan = plan_rounds(nodes, TREE)
    results = [GroupResult(i, g, busbw(i, g)) for i, r in enumerate(plan.rounds, start=1) for g in r.groups]
    parents = {leaf.name: "spine" for leaf in TREE.leaves}
    found = judge_rounds(plan, results, op="all_reduce", metric=METRIC, fail_below=LINE, parents=parents)
    test = {
        "nodeid": "tests/acceptance/test_nccl.py::test_busbw_across_nodes[all_reduce]",
        "node": "",
        "area": "nccl",
        "name": "test_busbw_across_nodes",
        "params": "all_reduce",
        "verdict": "fail",
        "outcome": "failed",
        "series": [],
        "measurements": [],
        "message": "; ".join(f.text for f in found.findings),
        "findings": [codec.encode_finding(f) for f in found.findings],
        "problems": [f.text for f in found.findings],
        "warnings": [],
        "unjudged": "",
        "cluster_fault": None,
        "rounds": codec.encode_finding(found),
    }
    doc = {"status": "complete", "nodes": nodes, "tests": [test], "environment": {}, "inventory": {}}
    doc["acceptance"] = codec.encode_decided(verdict.decided(codec.decode_run(doc)))
    out = HERE / "results_64_nodes_4_leaves_synthetic.json"
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
