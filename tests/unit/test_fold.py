"""Repeated sentences fold into one line with a count (fold.py), whatever check wrote them."""

from __future__ import annotations

from pytest_gpucluster.verdict.fold import fold, fold_lines, index_set


def _crc(node: str, gpu: int, link: int, rose: int) -> str:
    return (
        f"{node}:gpu{gpu} link {link}: nvlink_crc_flit_errors rose 0 → {rose} (+{rose}, at most +0 allowed) "
        "over 1 min 35 s"
    )


def test_a_counter_family_on_many_links_is_one_line_per_node():
    sentences = [_crc("node1", g, link, 10 + g * link) for g in range(4) for link in range(18)]
    sentences += [_crc("node2", g, link, 3) for g in range(2) for link in range(18)]
    folded = fold(sentences)
    assert [f.line for f in folded] == [
        "node1:gpu0–3 link 0–17: nvlink_crc_flit_errors rose 0 → 10–61 (+10–61, at most +0 allowed) "
        "over 1 min 35 s (×72)",
        "node2:gpu0,1 link 0–17: nvlink_crc_flit_errors rose 0 → 3 (+3, at most +0 allowed) over 1 min 35 s (×36)",
    ]
    assert folded[0].count == 72 and len(folded[0].members) == 72 and folded[0].members[0] == sentences[0]


def test_identical_sentences_fold_with_their_count():
    line = "node2: lost during the run: NODE_FAIL"
    assert fold_lines([line, line, line, "node3: lost during the run: NODE_FAIL"]) == [
        f"{line} (×3)",
        "node3: lost during the run: NODE_FAIL",
    ]


def test_ports_and_hcas_fold_into_the_set_they_took():
    lines = [f"gpu-051: mlx5_{h} port 1 is DOWN" for h in (0, 1, 2, 5)]
    assert fold_lines(lines) == ["gpu-051: mlx5_0–2,5 port 1 is DOWN (×4)"]


def test_a_node_name_is_never_an_index_nor_a_number():
    # The leading name before ':' and the names given as fixed keep their own lines.
    lines = ["gpu017:gpu3: gpu.temperature = 88 C", "gpu018:gpu3: gpu.temperature = 89 C"]
    assert fold_lines(lines) == lines
    named = ["dcgmi is not installed on node1 (test_dcgm[node1])", "dcgmi is not installed on node2 (test_dcgm[node2])"]
    assert fold_lines(named, fixed=["node1", "node2"]) == named
    assert fold_lines(["gpu-017:gpu3: slow", "gpu-018:gpu3: slow"]) == ["gpu-017:gpu3: slow", "gpu-018:gpu3: slow"]


def test_versions_and_cpu_ranges_stay_text():
    lines = ["node1: NCCL 2.28.9, CPUs 0-63: differs", "node1: NCCL 2.28.10, CPUs 0-63: differs"]
    assert fold_lines(lines) == lines


def test_values_that_agree_stay_and_values_that_differ_become_their_span():
    lines = [
        "node1:gpu0: compute.matmul_bf16 = 410.2 TFLOP/s is below the fail line 600 TFLOP/s",
        "node1:gpu5: compute.matmul_bf16 = 590.7 TFLOP/s is below the fail line 600 TFLOP/s",
    ]
    assert fold_lines(lines) == [
        "node1:gpu0,5: compute.matmul_bf16 = 410.2–590.7 TFLOP/s is below the fail line 600 TFLOP/s (×2)"
    ]


def test_different_causes_keep_their_own_lines_in_first_order():
    lines = [
        "node1:gpu0 link 1: symbol_errors rose 0 → 4",
        "node1:gpu0: NVLink counters read before the run, GPU missing after",
        "node1:gpu1 link 1: symbol_errors rose 0 → 9",
    ]
    assert fold_lines(lines) == [
        "node1:gpu0,1 link 1: symbol_errors rose 0 → 4–9 (×2)",
        "node1:gpu0: NVLink counters read before the run, GPU missing after",
    ]


def test_a_single_sentence_is_itself():
    assert fold_lines(["node1: x = 3 (test_a[node1])"]) == ["node1: x = 3 (test_a[node1])"]
    assert fold_lines([]) == []


def test_index_sets_read_as_ranges():
    assert index_set([3, 0, 1, 2, 6]) == "0–3,6"
    assert index_set([4, 5]) == "4,5"
    assert index_set([7]) == "7"
