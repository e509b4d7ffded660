"""The report's soak block (report/soak.py, html.soak_block) and the handover sheet's soak line:
how each node's soak ended with its recorded verdicts, the failing GPUs marked in the figures,
series never read left out, the drift table's order and limit, the big cluster's few figures,
escaping, and nothing at all without a soak."""

from __future__ import annotations

import base64
import re
from typing import Any

from result_docs import document, record_of_test
from soak_docs import synthetic_soak_doc

from pytest_gpucluster.report import html, plots, soak
from pytest_gpucluster.results import codec
from pytest_gpucluster.verdict import Finding

EVIL = "<img src=x onerror=alert(1)>"


def gpu(cycles: int = 6, *, tflops: float = 700.0, device: str = "NVIDIA H100 80GB HBM3", **more: Any) -> dict:
    """One GPU's series as ``checks.soak.section`` writes them, a cycle a minute."""
    real = device != "cpu"
    return {
        "device": device,
        "t": [60.0 * c for c in range(cycles)],
        "tflops": [tflops] * cycles,
        "copy_tbps": [2.9] * cycles,
        "sm_mhz": [1980] * cycles if real else [None] * cycles,
        "temp_c": [60] * cycles if real else [None] * cycles,
        "power_w": [690.0] * cycles if real else [None] * cycles,
        **more,
    }


def node(ended: str = "duration", cycles: int = 6, gpus: int = 2, **more: Any) -> dict:
    return {
        "job_id": "12",
        "ended": ended,
        "started": 1_800_000_000.0,
        "soaked_s": 60.0 * cycles,
        "cycles": cycles,
        "busbw_gbps": [],
        "gpus": {f"gpu{g}": gpu(cycles) for g in range(gpus)},
        **more,
    }


def soak_doc(
    nodes: dict[str, dict], findings: list[Finding] = (), verdicts: dict[str, str] | None = None, **section: Any
) -> dict:
    """A results document of a soak of ``nodes``: a soak check per node with ``verdicts`` (else its
    findings' worst severity, or pass), its verdicts decided as a run records them."""
    found = [codec.encode_finding(f) for f in findings]
    verdicts = verdicts or {}
    tests = []
    for name in nodes:
        mine = [f for f in found if name in f["nodes"]]
        worst = [s for s in ("fail", "warn") if any(f["severity"] == s for f in mine)]
        outcome = verdicts.get(name) or (worst[0] if worst else "pass")
        tests.append(
            record_of_test(
                f"tests/acceptance/test_soak.py::test_soak[{name}]", outcome, node=name, area="soak", findings=mine
            )
        )
    doc = document(tests, nodes=list(nodes))
    doc["soak"] = {
        "requested_s": 360.0,
        "config": {"cycle_s": 60.0},
        "rules": {"drift": {"warn": 0.05, "fail": 0.1, "source": "docs/thresholds.md"}, "thermal": None},
        "nodes": nodes,
        "findings": found,
        **section,
    }
    return codec.with_verdicts(doc)


def drift_finding(where: str, gpu_index: int, cycle: int, severity: str = "fail") -> Finding:
    text = f"{where}:gpu{gpu_index} GEMM 600 TFLOP/s is 14.3 % below its own start from cycle {cycle}"
    return Finding.on_node(where, text, gpu=gpu_index, severity=severity, cycle=cycle)  # type: ignore[arg-type]


def svg_of(uri: str) -> str:
    return base64.b64decode(uri.split(",", 1)[1]).decode()


def rows_of(block: str, table: str) -> list[list[str]]:
    body = re.search(rf'id="{table}">(.*?)</table>', block, re.S)
    assert body
    return [
        [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
        if "<td" in row
    ]


def test_each_node_says_how_its_soak_ended_how_long_and_its_recorded_verdicts():
    nodes = {
        "n1": node(),
        "n2": node("stopped", cycles=3),
        "n3": node("failed", cycles=0, gpus=0, error="job 13 failed on n3: NCCL error"),
        "n4": node("interrupted", cycles=2),
    }
    # n4's check is recorded as a warning with no finding: the block shows what was recorded
    doc = soak_doc(nodes, [drift_finding("n2", 1, 2)], verdicts={"n3": "not_judged", "n4": "warn"})
    block = html.soak_block(doc)
    assert rows_of(block, "gc-soak-nodes") == [
        ["n1", "ran its length", "6 min of 6 min", "6", "pass", "ACCEPTED"],
        ["n2", "stopped for its own failure", "3 min of 6 min (50 %)", "3", "FAIL", "REJECTED"],
        ["n3", "its job failedjob 13 failed on n3: NCCL error", "0 s of 6 min (0 %)", "0", "not judged", "INCOMPLETE"],
        ["n4", "interrupted with the run", "2 min of 6 min (33 %)", "2", "warn", "ACCEPTED"],
    ]
    assert "6 min asked for on 4 nodes, cycles of 1 min" in block
    assert "n3: no cycle to draw." in block and block.count('class="gc-plot gc-soak-node"') == 3
    rules = rows_of(block, "gc-soak-rules-table")
    assert rules == [["drift", "warn 0.05; fail 0.1", "docs/thresholds.md"], ["thermal", "not in force", ""]]
    assert '<span class="gc-badge gc-s-fail">FAIL</span> n2:gpu1 GEMM 600 TFLOP/s' in block


def test_the_gpus_a_failing_finding_names_are_marked_with_the_cycle_it_began_in():
    data = node(cycles=8, gpus=3)
    data["gpus"]["gpu1"]["t"] = [0.0, 61.0, 122.0, 183.0, 244.0, 305.0, 366.0, 427.0]
    found = [
        codec.encode_finding(drift_finding("n1", 1, 5)),
        # a warning of no metric: amber on every panel
        codec.encode_finding(drift_finding("n1", 2, 3, severity="warn")),
        codec.encode_finding(drift_finding("n2", 0, 1)),  # another node's
    ]
    fig = soak.node_figure("n1", data, found, 60.0)
    assert [p.title for p in fig.panels] == [
        "GEMM, TFLOP/s",
        "device copy, TB/s",
        "SM clock, MHz",
        "temperature, C",
        "power, W",
    ]
    assert {line.label: line.marked for line in fig.panels[0].lines} == {"gpu0": False, "gpu1": True, "gpu2": False}
    assert fig.marks == (plots.Mark(305.0 / 60.0, "gpu1 from cycle 5"), plots.Mark(3.0, "gpu2 cycle 3", "warn"))
    assert "failing: gpu1 (red)" in fig.caption and fig.note == ""
    svg = svg_of(plots.small_multiples("soak of n1", fig.panels, fig.marks, "minutes"))
    assert "gpu1 (fails)" in svg and "gpu1 from cycle 5" in svg and "#c62828" in svg


def test_series_never_read_are_left_out_with_a_note():
    data = node(gpus=0)
    data["gpus"] = {"cpu0": gpu(device="cpu"), "cpu1": gpu(device="cpu")}
    fig = soak.node_figure("n1", data, [], 60.0)
    assert [p.title for p in fig.panels] == ["GEMM, TFLOP/s", "device copy, TB/s"]
    assert fig.note == (
        "No reading of SM clock, temperature, power on this node (CPU ranks stand in for GPUs: nothing to read)."
    )


def test_the_drift_table_puts_failing_gpus_first_then_the_largest_drop_and_says_how_many_more():
    changes = {"gpu0": -0.4, "gpu1": -3.0, "gpu2": 0.2, "gpu3": -0.1, "gpu4": None}
    data = node(gpus=0)
    for label, change in changes.items():
        row = dict(metric="tflops", first=700.0, last=699.0, worst=690.0, worst_cycle=4, change_pct=change)
        data["gpus"][label] = gpu(drift=row)
    findings = [drift_finding("n1", 3, 2), drift_finding("n1", 2, 4, severity="warn")]
    section = soak_doc({"n1": data}, findings)["soak"]
    rows, more = soak.drift_rows(section, limit=4)
    assert [(r.where, r.change, r.status) for r in rows] == [
        ("n1:gpu3", "−0.10 %", "fail"),
        ("n1:gpu2", "+0.20 %", "warn"),
        ("n1:gpu1", "−3.00 %", ""),
        ("n1:gpu0", "−0.40 %", ""),
    ]
    assert more == 1
    assert (rows[0].metric, rows[0].first, rows[0].worst, rows[0].worst_cycle) == ("GEMM, TFLOP/s", "700", "690", "4")
    block = html.soak_block(soak_doc({"n1": data}, findings))
    assert rows_of(block, "gc-soak-drift-table")[0][:2] == ["n1:gpu3", "GEMM, TFLOP/s"]


def test_past_16_nodes_only_the_nodes_with_something_to_see_are_drawn_and_rows_fold():
    nodes = {f"gpu-{i:02d}": node(cycles=2, gpus=1) for i in range(1, 21)}
    nodes["gpu-07"]["ended"] = "stopped"
    doc = soak_doc(nodes, [drift_finding("gpu-07", 0, 1), drift_finding("gpu-12", 0, 1, severity="warn")])
    drawn, notes = soak.figures(doc["soak"], doc, limit=16)
    assert [f.node for f in drawn] == ["gpu-07", "gpu-12"]
    assert notes == [
        "18 other node(s) soaked without a finding and are not drawn: gpu-[01-06,08-11,13-20]; "
        "their series are in the results file."
    ]
    rows = soak.node_rows(doc["soak"], doc, limit=16)
    assert [(r.label, r.soak_verdict, r.group) for r in rows] == [
        ("gpu-07", "fail", False),
        ("gpu-12", "warn", False),
        ("gpu-[01-06,08-11,13-20] (18 nodes)", "pass", True),
    ]
    assert rows[-1].soaked == "2 min of 6 min" and rows[-1].node_verdict == "ACCEPTED"


def test_the_handover_sheet_states_the_soak():
    few = soak_doc({"n1": node(), "n2": node("stopped", cycles=3)}, [drift_finding("n2", 1, 2)])
    sheet = html.acceptance_block(few, codec.decode_recorded(few))
    line = re.search(r'<tr><th>Soak</th><td id="gc-sheet-soak">(.*?)</td></tr>', sheet)
    assert line and line.group(1) == (
        "6 min asked for, cycles of 1 min; soaked: n1 6 min (6 cycles), n2 3 min (3 cycles); "
        "passed on 1 of 2 nodes, failed on n2"
    )
    one = soak.sheet_line(soak_doc({"vm": node(cycles=1)}))
    assert one == "6 min asked for, cycles of 1 min; soaked: vm 1 min (1 cycle); passed on 1 of 1 node"
    many = {f"n{i}": node(cycles=6 - i % 3) for i in range(1, 7)}
    line = soak.sheet_line(soak_doc(many, interrupted=True))
    assert line == (
        "6 min asked for, cycles of 1 min, interrupted; each node soaked 4 min – 6 min (4 – 6 cycles); "
        "passed on 6 of 6 nodes"
    )


def test_nothing_without_a_soak():
    doc = codec.with_verdicts(document([record_of_test("a::test_x[node1]", "pass", node="node1")]))
    assert html.soak_block(doc) == "" and soak.sheet_line(doc) == "" and soak.block(doc, 16) is None
    page = html.render_page(doc)
    assert 'id="gc-soak"' not in page and "gc-sheet-soak" not in page


def test_every_node_name_and_sentence_is_escaped():
    doc = soak_doc({EVIL: node(error=EVIL)}, [drift_finding(EVIL, 0, 1)])
    page = html.render_page(doc)
    assert EVIL not in page
    block = page[page.index('id="gc-soak"') :]
    assert block.count("&lt;img src=x onerror=alert(1)&gt;") >= 4  # the row, its error, the figure, the finding


def test_a_synthetic_soak_renders_whole():
    doc = synthetic_soak_doc(nodes=4, gpus=2, hours=0.5)
    assert doc["acceptance"]["nodes"]["summary"] == "3 of 4 nodes accepted; rejected: gpu-002"
    page = html.render_page(doc)
    block = page[page.index('id="gc-soak"') :]
    assert page.count('class="gc-plot gc-soak-node"') == 4
    assert rows_of(block, "gc-soak-drift-table")[0][0] == "gpu-002:gpu0"
    assert "stopped for its own failure" in block and "HW power brake" in block
    assert re.search(r'id="gc-sheet-soak">30 min asked for, cycles of 1 min; soaked: gpu-001 30 min', page)


def test_thin_keeps_each_buckets_lowest_and_highest_point():
    ys: list[float | None] = [5.0] * 1000
    ys[123], ys[700], ys[400] = 1.0, 9.0, None
    xs, thinned = plots.thin(range(1000), ys, limit=100)
    assert len(xs) <= 100 and 1.0 in thinned and 9.0 in thinned
    assert xs == sorted(xs)
    assert plots.thin([0, 1], [None, 2.0])[1][1] == 2.0
