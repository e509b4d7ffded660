"""The report's at-a-glance figures (report/figures.py) and its inventory in words
(report/inventory.py): pure functions of a results document."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_gpucluster.report import figures, inventory

REPO = Path(__file__).resolve().parents[2]
TFLOPS = {
    "fail_below": 600.0,
    "warn_below": 650.0,
    "source": "/etc/gc/thresholds.toml [thresholds.h100.compute.matmul_bf16]",
}
TEMP = {
    "fail_above": 85.0,
    "warn_above": 75.0,
    "source": "/etc/gc/thresholds.toml [thresholds.default.gpu.temperature]",
}


def _m(metric: str, value: float, where: str, threshold: dict, unit: str = "TFLOP/s") -> dict:
    fail = threshold.get("fail_below", -1e9) > value or threshold.get("fail_above", 1e9) < value
    warn = threshold.get("warn_below", -1e9) > value or threshold.get("warn_above", 1e9) < value
    status = "fail" if fail else "warn" if warn else "pass"
    return {"metric": metric, "value": value, "unit": unit, "where": where, "status": status, "threshold": threshold}


def _doc(measurements: list[dict], nodes: list[str]) -> dict:
    return {"nodes": nodes, "tests": [{"nodeid": "a::t", "measurements": measurements}], "inventory": {}}


def _cluster(nodes: int = 3, gpus: int = 4) -> dict:
    names = [f"node{i}" for i in range(1, nodes + 1)]
    speed = [
        _m(
            "compute.matmul_bf16",
            410.0 if (n, g) == ("node2", 3) else 640.0 if (n, g) == ("node3", 0) else 700 + g,
            f"{n}:gpu{g}",
            TFLOPS,
        )
        for n in names
        for g in range(gpus)
    ]
    temps = [_m("gpu.temperature", 40.0 + g, f"{n}:gpu{g}", TEMP, "C") for n in names for g in range(gpus)]
    ecc = [
        _m("gpu.ecc_volatile_uncorrectable", 0, f"{n}:gpu{g}", {"fail_above": 0}, "count")
        for n in names
        for g in range(gpus)
    ]
    busbw = [
        _m(
            "nccl.all_reduce.intra_node",
            360.0 + i,
            n,
            {"fail_below": 320.0, "source": "t.toml [thresholds.h100]"},
            "GB/s",
        )
        for i, n in enumerate(names)
    ]
    return _doc(speed + temps + ecc + busbw, names)


def test_each_metric_measured_on_gpus_is_a_map_of_nodes_by_gpus_the_bad_gpu_marked():
    maps, uniform = figures.gpu_maps(_cluster())
    by_title = {m.title: m for m in maps}
    assert list(by_title) == ["compute.matmul_bf16", "gpu.temperature", "per node"]  # speeds first
    speed = by_title["compute.matmul_bf16"]
    assert speed.columns == ("0", "1", "2", "3") and [node for node, _ in speed.rows] == ["node1", "node2", "node3"]
    cells = {(node, i): c for node, row in speed.rows for i, c in enumerate(row)}
    assert cells[("node2", 3)].status == "fail" and cells[("node2", 3)].text == "410"
    assert "node2:gpu3: compute.matmul_bf16 = 410 TFLOP/s: fail" in cells[("node2", 3)].title
    assert cells[("node3", 0)].status == "warn"
    assert speed.worst == "fail" and speed.bounds == "fail < 600 TFLOP/s, warn < 650 TFLOP/s"
    assert speed.note.startswith("median 701 TFLOP/s; lowest: node2:gpu3 410 TFLOP/s (58 % of the median)")
    # every value the same and passed: one line, no map
    assert [(u.metric, u.text) for u in uniform] == [("gpu.ecc_volatile_uncorrectable", "0 count on all 12 GPUs")]
    # busbw, one value per node, in the per-node map
    assert by_title["per node"].columns == ("nccl.all_reduce.intra_node",)
    assert [c.text for _, row in by_title["per node"].rows for c in row] == ["360", "361", "362"]


def test_a_pass_that_lags_its_peers_reads_paler_than_they_do():
    doc = _doc(
        [_m("compute.matmul_bf16", v, f"node1:gpu{g}", TFLOPS) for g, v in enumerate([700, 700, 700, 660])], ["node1"]
    )
    (speed,), _ = figures.gpu_maps(doc)
    shades = [c.shade for _, row in speed.rows for c in row]
    assert shades[:3] == [0, 0, 0] and shades[3] == figures.SHADES - 1  # 660 is 80 % of the way to the warn line


def test_a_gpu_measured_twice_shows_its_worst_and_a_gpu_not_measured_a_dash():
    doc = _doc(
        [
            _m("compute.matmul_bf16", 700, "node1:gpu0", TFLOPS),
            _m("compute.matmul_bf16", 590, "node1:gpu0", TFLOPS),
            _m("compute.matmul_bf16", 700, "node2:gpu1", TFLOPS),
        ],
        ["node1", "node2"],
    )
    (speed,), _ = figures.gpu_maps(doc)
    rows = dict(speed.rows)
    assert rows["node1"][0].status == "fail" and rows["node1"][0].title.count("compute.matmul_bf16 =") == 2
    assert rows["node1"][1].status == "none" and rows["node1"][1].text == "–"


def test_key_figures_are_the_speeds_and_anything_failed_or_warned_failures_first():
    keys = figures.key_figures(_cluster())
    assert [k.metric for k in keys] == ["compute.matmul_bf16", "nccl.all_reduce.intra_node"]
    speed = keys[0]
    assert (speed.worst, speed.where, speed.places, speed.median) == ("410 TFLOP/s", "node2:gpu3", 12, "701 TFLOP/s")
    assert speed.line == "fail < 600 TFLOP/s, warn < 650 TFLOP/s" and speed.status == "fail"
    assert speed.source == "site's choice · thresholds.toml [thresholds.h100]"
    assert "/etc/gc/thresholds.toml [thresholds.h100.compute.matmul_bf16]" in speed.source_detail
    hot = _cluster()
    hot["tests"][0]["measurements"].append(_m("gpu.temperature", 90.0, "node1:gpu0", TEMP, "C"))
    assert [k.metric for k in figures.key_figures(hot)][:2] == ["compute.matmul_bf16", "gpu.temperature"]


def test_short_numbers_keep_three_or_four_figures():
    assert [figures.short_number(v) for v in (749.6, 4.271, 0.98714, 41.0, 12.34)] == [
        "750",
        "4.27",
        "0.987",
        "41",
        "12.3",
    ]


def test_the_inventory_of_a_node_reads_as_words_with_its_details_folded():
    sample = json.loads((REPO / "docs" / "samples" / "results-4xh200-slurm.json").read_text(encoding="utf-8"))
    rows, note = inventory.inventory_rows(sample["inventory"])
    assert note == "" and [r.label for r in rows] == ["node1"]
    cells = dict(zip(inventory.COLUMNS, rows[0].cells, strict=True))
    assert cells == {
        "GPUs": "4 × NVIDIA H200, 140 GiB each",
        "driver / CUDA": "580.159.04 / CUDA 13.0",
        "NVLink": "NV18 on 6 GPU pairs",
        "InfiniBand": "none",
        "kernel": "6.18.44-fc-v657-gpu (Ubuntu 24.04.3 LTS)",
        "RAM": "504 GiB, 1 NUMA node",
        "CPUs": "64 × Intel(R) Xeon(R) Processor (sockets × cores × threads 1 × 64 × 1)",
    }
    details = {d.title: d for d in rows[0].details}
    assert details["gpus"].columns[:3] == ("index", "name", "uuid") and len(details["gpus"].rows) == 4
    assert details["numa"].rows == (("0", "0-63", "11.09"),)
    assert details["gpu_topology"].text.startswith("0-1: NV18; 0-2: NV18")
    # no Python literal anywhere: neither a dict nor a list written with its brackets and quotes
    texts = [*rows[0].cells, *(d.text for d in rows[0].details)]
    texts += [cell for d in rows[0].details for row in d.rows for cell in row]
    assert not [t for t in texts if "{" in t or "['" in t]


def test_past_sixteen_nodes_alike_nodes_share_a_row_named_by_their_hostlist():
    summary = {
        "gpu_model": "H100",
        "gpu_count": 8,
        "driver": "575",
        "cuda": "12.9",
        "ib_devices": 8,
        "ib_active_ports": 8,
    }
    odd = {**summary, "ib_active_ports": 7}
    inv = {f"gpu-{i:02d}": {"summary": odd if i == 7 else summary, "gpus": [{"serial": i}]} for i in range(1, 21)}
    rows, note = inventory.inventory_rows(inv)
    assert [r.label for r in rows] == ["gpu-[01-06,08-20] (19)", "gpu-07 (1)"]
    assert rows[1].cells[3] == "8 HCAs, 7 port(s) active" and inventory.differing(rows) == {3}
    assert "per-node details" in note and all(d.title != "gpus" for r in rows for d in r.details)


def test_plain_never_writes_a_python_literal():
    value = {"node": 0, "cpus": "0-63", "holds": ["/", "/tmp"], "nested": {"a": 1.5, "b": None}, "own": True}
    assert inventory.plain(value) == "node: 0; cpus: 0-63; holds: /, /tmp; nested: a: 1.5; b: ; own: yes"
    assert inventory.plain(False) == "no"


def test_a_metric_measured_on_each_node_and_across_nodes_is_two_key_figures():
    line = {"fail_below": 60000.0, "warn_below": 70000.0, "source": "t.toml [thresholds.h100]"}
    metric = "train.ddp.tokens_per_s_per_gpu"
    nodes = ["node1", "node2", "node3"]
    per_node = [{**_m(metric, 82000.0 + i * 1000, n, line, "tokens/s"), "nodes": [n]} for i, n in enumerate(nodes)]
    across = {**_m(metric, 75000.0, "+".join(nodes), line, "tokens/s"), "nodes": nodes}
    keys = [k for k in figures.key_figures(_doc([*per_node, across], nodes)) if k.metric == metric]
    # the nodes' median is theirs, not mixed with the run across them, and the two rows say which is which
    assert [(k.worst, k.where, k.places, k.median, k.across, k.scope) for k in keys] == [
        ("82000.0 tokens/s", "node1", 3, "83000 tokens/s", False, ""),
        ("75000.0 tokens/s", "node1+node2+node3", 1, "", True, "across nodes"),
    ]
    # a metric measured across nodes only needs no word to tell it apart
    (alone,) = [k for k in figures.key_figures(_doc([across], nodes)) if k.metric == metric]
    assert (alone.across, alone.scope) == (True, "")
