"""The report's pure parts: verdict rule, node attribution, readable properties, HTML escaping, plots."""

from __future__ import annotations

import base64

from pytest_gpucluster.report import html, model, plots


def _m(metric, value, status, where, **threshold):
    unit = {"gpu.temperature": "C"}.get(metric, "GB/s")
    return {"kind": "measurement", "metric": metric, "value": value, "unit": unit, "where": where, "detail": "",
            "status": status, "sentence": f"{where}: {metric} = {value}", "threshold": threshold}  # fmt: skip


def _t(nodeid, verdict, measurements=(), params="", message="", area="x", problems=()):
    name = nodeid.split("::")[-1].split("[")[0]
    return {"nodeid": nodeid, "area": area, "name": name, "params": params, "verdict": verdict, "series": [],
            "measurements": list(measurements), "message": message, "problems": list(problems)}  # fmt: skip


def _doc(tests, status="complete", nodes=("node1", "node2", "node10")):
    return {"status": status, "nodes": list(nodes), "tests": tests, "environment": {}, "inventory": {}}


def test_any_failure_rejects_even_an_interrupted_run():
    tests = [_t("a::t1", "pass"), _t("a::t2", "fail", message="Failed: node2 slow")]
    acc = model.acceptance(_doc(tests, "interrupted"))
    assert acc.verdict == "REJECTED" and acc.reasons == ("a::t2: node2 slow",)


def test_interruption_or_a_skipped_area_is_incomplete_and_warnings_still_accept():
    assert model.acceptance(_doc([_t("a::t1", "pass")], "interrupted")).verdict == "INCOMPLETE"
    skipped = _doc([_t("a::t1", "pass", area="a"), _t("b::t2", "skip", area="b", message="Skipped: needs 2 nodes")])
    acc = model.acceptance(skipped)
    assert acc.verdict == "INCOMPLETE" and acc.reasons == ("area 'b' was not run: needs 2 nodes",)
    assert model.acceptance(_doc([])).verdict == "INCOMPLETE"
    acc = model.acceptance(_doc([_t("a::t1", "warn"), _t("a::t2", "pass")]))
    assert acc.verdict == "ACCEPTED" and acc.counts["warn"] == 1 and acc.counts["pass"] == 1


def test_matrix_puts_results_on_the_node_they_name():
    tests = [
        _t("a::test_gpu[node2]", "fail", params="node2"),
        _t("a::test_bw", "fail", [_m("nccl.x", 1, "pass", "node1:gpu0"), _m("nccl.x", 0, "fail", "node10:gpu1")]),
        _t("a::test_whole", "error", message="job 7 vanished"),
        _t("a::test_ib", "fail", problems=["node1: mlx5_0 port 1 is DOWN"]),
    ]
    m = model.matrix(_doc(tests))
    assert m.rows == ("node1", "node2", "node10", model.CLUSTER_ROW)
    status = {(r, c[1]): m.cell(r, c).status for r in m.rows for c in m.columns}
    assert status[("node2", "test_gpu")] == "fail" and status[("node1", "test_gpu")] == "none"
    assert status[("node1", "test_bw")] == "pass" and status[("node10", "test_bw")] == "fail"
    assert status[(model.CLUSTER_ROW, "test_bw")] == "none"  # explained by node10
    assert status[(model.CLUSTER_ROW, "test_whole")] == "error"
    assert status[("node1", "test_ib")] == "fail"
    assert model.nodes_in("node10:gpu1", ["node1", "node10"]) == ["node10"]


def test_junit_properties_are_readable_lines():
    props = model.junit_properties(
        [_m("nccl.all_reduce.intra_node", 354.2, "pass", "node1", fail_below=320, warn_below=340),
         {"kind": "job", "job_id": "42", "name": "run-sweep", "folder": "/shared/jobs"},
         {"kind": "series", "name": "s", "points": []}]
    )  # fmt: skip
    assert props == [
        ("nccl.all_reduce.intra_node[node1]", "354.2 GB/s pass (fail < 320 GB/s, warn < 340 GB/s)"),
        ("gpucluster.job", "42 run-sweep /shared/jobs"),
    ]


def test_versions_fall_back_to_the_inventory():
    doc = {"environment": {"plugin": "0.1.0", "cuda": "12.8"},
           "inventory": {"node1": {"driver": "570.1"}, "node2": {"driver": "570.2"}}}  # fmt: skip
    got = dict(model.versions(doc))
    assert got["CUDA"] == "12.8" and got["NVIDIA driver"] == "570.1 / 570.2" and got["NCCL"] == "not recorded"


def test_every_run_value_is_escaped_in_html():
    evil = "<img src=x onerror=alert(1)>"
    doc = _doc([_t(f"a::test_x[{evil}]", "fail", [_m("gpu.temperature", 99, "fail", f"node1:{evil}", fail_above=85)],
                   message=evil, problems=[evil])])  # fmt: skip
    doc["tests"][0]["logs"] = [{"job_id": "1", "path": "/x", "tail": evil}]
    page = html.render_page(doc)
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_series_with_the_same_name_share_one_plot_with_its_threshold_line():
    series = [{"name": "busbw", "where": w, "x_label": "bytes", "y_label": "GB/s", "threshold": 300.0, "x_log": True,
               "points": [[2**k, 10.0 * k] for k in range(10, 30)]} for w in ("node1", "node2")]  # fmt: skip
    doc = {"tests": [{"series": series[:1]}, {"series": series[1:]}]}
    (plot,) = plots.series_plots(doc)
    svg = base64.b64decode(plot.data_uri.split(",", 1)[1]).decode()
    assert plot.title == "busbw" and svg.startswith("<?xml") and "<svg" in svg
    assert "node1" in svg and "node2" in svg and "fail line" in svg
