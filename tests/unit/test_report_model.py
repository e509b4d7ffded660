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


def _sel(required, not_selected=(), not_applicable=None, named=()):
    return {"required": list(required), "not_selected": list(not_selected), "named": list(named),
            "not_applicable": dict(not_applicable or {}), "optional": []}  # fmt: skip


def test_any_failure_rejects_even_an_interrupted_run_and_names_the_culprit():
    tests = [_t("a::t1", "pass"), _t("a::t2", "fail", message="Failed: node2 slow")]
    acc = model.acceptance(_doc(tests, "interrupted"))
    assert acc.verdict == "REJECTED" and acc.reasons == ("node2 slow (a::t2)",)
    assert acc.headline == "REJECTED: 1 check failed"


def test_a_cluster_error_reads_as_its_sentence_without_the_exception_path():
    lost = _t("a::t2", "fail", message="pytest_gpucluster.errors.NodeLostError: job 1 (x-nccl-inter) on node1, "
              "node2: lost its node(s) while RUNNING: node2 is DOWN\nlogs: ...")  # fmt: skip
    acc = model.acceptance(_doc([lost]))
    expected = "job 1 (x-nccl-inter) on node1, node2: lost its node(s) while RUNNING: node2 is DOWN (a::t2)"
    assert acc.reasons == (expected,)


def test_every_problem_of_a_failure_is_a_reason_not_only_the_first_line():
    failed = _t("x/test_slurm_health.py::test_nodes_are_usable", "fail",
                message="Failed: nodes of partition 'debug' are not usable:\n- node2: DRAIN (bad DIMM)",
                problems=["node2: DRAIN (bad DIMM)", "node3: DOWN (not responding)"])  # fmt: skip
    acc = model.acceptance(_doc([failed]))
    assert acc.reasons == ("node2: DRAIN (bad DIMM) (test_slurm_health.py::test_nodes_are_usable)",
                           "node3: DOWN (not responding) (test_slurm_health.py::test_nodes_are_usable)")  # fmt: skip


def test_a_required_check_skipped_or_not_reached_is_incomplete():
    assert model.acceptance(_doc([_t("a::t1", "pass")], "interrupted")).verdict == "INCOMPLETE"
    tests = [_t("a::t1", "pass"), _t("b::t2", "skip", message="Skipped: node2 is excluded: DRAIN")]
    acc = model.acceptance({**_doc(tests), "selection": _sel(["a::t1", "b::t2", "c::t3"])})
    assert acc.verdict == "INCOMPLETE"
    assert acc.reasons == ("b::t2: skipped: node2 is excluded: DRAIN", "c::t3: not reached (the run ended before it)")
    assert model.acceptance(_doc([])).verdict == "INCOMPLETE"


def test_an_error_of_the_harness_is_incomplete_an_error_of_the_cluster_rejects():
    harness = _t("a::t2", "error", message="AttributeError: 'NoneType' object has no attribute 'x'")
    acc = model.acceptance({**_doc([_t("a::t1", "pass"), {**harness, "unjudged": "AttributeError"}]),
                            "selection": _sel(["a::t1", "a::t2"])})  # fmt: skip
    assert acc.verdict == "INCOMPLETE" and acc.reasons[0].startswith("a::t2: could not be judged (AttributeError)")
    cluster = _t("a::t2", "error", message="LaunchError: job 7 on node2: submission refused")
    assert model.acceptance(_doc([_t("a::t1", "pass"), cluster])).verdict == "REJECTED"


def test_not_applicable_is_neither_a_pass_nor_missing():
    tests = [_t("a::t1", "pass"), _t("b::t2", "n/a", message="Skipped: not applicable: profile has 1 node")]
    acc = model.acceptance({**_doc(tests), "selection": _sel(["a::t1"], not_applicable={"b::t2": "1 node"})})
    assert acc.verdict == "ACCEPTED" and acc.counts["n/a"] == 1 and acc.not_applicable == ("b::t2: 1 node",)
    only_na = model.acceptance({**_doc([tests[1]]), "selection": _sel([], not_applicable={"b::t2": "1 node"})})
    assert only_na.verdict == "INCOMPLETE" and only_na.reasons == ("no acceptance check passed",)


def test_a_narrower_selection_is_partial_never_accepted():
    tests = [_t("a::t1", "pass")]
    acc = model.acceptance({**_doc(tests), "selection": _sel(["a::t1", "b::t2", "b::t3"], ["b::t2", "b::t3"])})
    assert acc.verdict == "PARTIAL"
    assert acc.headline == "PARTIAL: 1 selected check passed; 2 required checks not selected"
    named = model.acceptance({**_doc(tests), "selection": _sel(["a::t1"], named=["tests/acceptance/test_a.py"])})
    assert named.verdict == "PARTIAL" and "the command line names tests/acceptance/test_a.py" in named.reasons[0]
    failed = model.acceptance({**_doc([_t("a::t1", "fail", message="x")]), "selection": _sel(["a::t1", "b"], ["b"])})
    assert failed.verdict == "REJECTED"


def test_warnings_accept_and_are_counted_in_the_headline():
    warned = {**_t("a::t1", "warn"), "warnings": ["node1: device cgroups are off"]}
    acc = model.acceptance(_doc([warned, _t("a::t2", "pass")]))
    assert acc.verdict == "ACCEPTED" and acc.counts["warn"] == 1 and acc.counts["pass"] == 1
    assert acc.headline == "ACCEPTED, 1 warning" and acc.warnings == ("node1: device cgroups are off (a::t1)",)


def test_each_node_gets_its_verdict_and_the_rejected_ones_a_hostlist():
    tests = [
        _t("a::test_gpu[gpu-03]", "fail", params="gpu-03", problems=["gpu-03: mlx5_2 port 1 is DOWN"]),
        _t("a::test_gpu[gpu-11]", "pass", params="gpu-11"),
        _t("a::test_gpu[gpu-12]", "skip", params="gpu-12", message="Skipped: no result"),
        _t("a::test_bw", "fail", [_m("nccl.x", 0, "fail", "gpu-11:gpu1")]),
        _t("a::test_fabric", "fail", message="all_reduce across nodes = 12 GB/s is below the fail line"),
    ]
    doc = {**_doc(tests, nodes=("gpu-03", "gpu-11", "gpu-12", "gpu-13")),
           "environment": {"lost_nodes": {"gpu-13": {"why": "DOWN", "when": "t", "job": "7", "how": "x"}}}}  # fmt: skip
    nodes = model.node_verdicts(doc, "REJECTED")
    verdicts = {v.node: v.verdict for v in nodes.verdicts}
    assert verdicts == {"gpu-03": "REJECTED", "gpu-11": "REJECTED", "gpu-12": "INCOMPLETE", "gpu-13": "REJECTED"}
    assert nodes.exclude == "gpu-[03,11,13]"
    assert nodes.summary == ("0 of 4 nodes accepted; rejected: gpu-[03,11,13]; not judged in full: gpu-12; "
                             "1 failure(s) name no single node")  # fmt: skip
    assert nodes.cluster_wide == ("test_fabric: fail: all_reduce across nodes = 12 GB/s is below the fail line",)
    by_node = {v.node: v.reasons for v in nodes.verdicts}
    assert "gpu-03: mlx5_2 port 1 is DOWN" in by_node["gpu-03"]
    assert by_node["gpu-13"] == ("gpu-13: lost during the run: DOWN",)


def test_a_failed_pair_convicts_only_the_node_its_isolation_names():
    undetermined = _m("nccl.all_reduce.inter_node", 1.4, "fail", "node1+node2")
    undetermined["sentence"] = ("node1+node2: nccl.all_reduce.inter_node (...; isolation: could not isolate node1, "
                                "node2: with two nodes ...) = 1.4 GB/s is below the fail line 5 GB/s")  # fmt: skip
    nodes = model.node_verdicts(_doc([_t("a::test_across", "fail", [undetermined])], nodes=("node1", "node2")))
    assert {v.node: v.verdict for v in nodes.verdicts} == {"node1": "ACCEPTED", "node2": "ACCEPTED"}
    assert nodes.cluster_wide == (undetermined["sentence"],)
    isolated = {**undetermined, "sentence": "node1+node2+node3: x (isolation: bad node(s): node3 (failed when "
                "paired with a known-good node)) = 1 GB/s is below the fail line 5 GB/s"}  # fmt: skip
    isolated["where"] = "node1+node2+node3"
    doc = _doc([_t("a::test_across", "fail", [isolated])], nodes=("node1", "node2", "node3"))
    verdicts = {v.node: v.verdict for v in model.node_verdicts(doc).verdicts}
    assert verdicts == {"node1": "ACCEPTED", "node2": "ACCEPTED", "node3": "REJECTED"}


def test_hostlist_is_what_sbatch_exclude_takes():
    assert model.hostlist(["node2"]) == "node2"
    assert model.hostlist(["gpu-03", "gpu-11", "gpu-12"]) == "gpu-[03,11-12]"
    assert model.hostlist(["node1", "node2", "node10"]) == "node[1-2],node10"
    assert model.hostlist([]) == ""


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
