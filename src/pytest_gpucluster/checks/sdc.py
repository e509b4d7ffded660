"""Silent data corruption: judging the GEMM chain every GPU computed (``workloads.sdc``).

Two rules, each naming the GPU (``node:gpuN``) that breaks it:

1. GPUs of one model are bit-identical: the digest that more than half of them share is the
   model's answer, and every GPU with another digest is named with the first block that differs,
   the element in it where a single one differs, and the values (block sums, samples, total).
   With no such majority every GPU of the model is named.
2. Every GPU matches a reference within a tolerance: the chain in float64 on a CPU where the
   caller computed one, else the answer of the model most GPUs have. Per block, the sum of the
   values may be off by at most ``rtol`` times the block's sum of magnitudes; ``rtol`` defaults
   to the looser of the two dtypes' entries in ``RTOL``.

Results computed at different sizes are not compared: each is named instead. Results of one
model in different dtypes are judged as different models.

A GPU that breaks a rule is the culprit of its finding (scope gpu, or its node for a CPU rank);
GPUs of one model with no majority are their node's where they are one node's, else named
together with no culprit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gpucluster.checks.places import gpu_index, of_nodes
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.sdc import SdcResult, scramble

# Relative tolerance of a block sum against a reference, by the dtype the GPUs computed in.
# Each leaves a wide margin over the rounding of that precision against float64 (24 significant
# bits for float32 without TF32, 8 for bfloat16), and is far below what a flipped exponent bit does.
RTOL = {"float64": 1e-12, "float32": 1e-5, "bfloat16": 1e-2}


@dataclass(frozen=True)
class BlockDiff:
    """Where two fingerprints first differ."""

    block: int
    first_element: int  # of the block, in the flattened result
    last_element: int
    element: int | None  # the single differing element, when the checksums single one out
    blocks_differing: int


def first_difference(result: SdcResult, other: SdcResult) -> BlockDiff | None:
    """The first block whose checksums differ between two fingerprints, None when all agree."""
    size = result.config.block_elements
    mine = list(zip(result.block_s0, result.block_s1, result.block_s2, strict=True))
    theirs = list(zip(other.block_s0, other.block_s1, other.block_s2, strict=True))
    differing = [i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b]
    if not differing:
        return None
    block = differing[0]
    d0, d1, d2 = (a - b for a, b in zip(mine[block], theirs[block], strict=True))
    element = None
    if d0 != 0 and d1 % d0 == 0 and 1 <= d1 // d0 <= size and d2 == scramble(d1 // d0 - 1) * d0:
        element = block * size + d1 // d0 - 1
    count = result.config.n * result.config.n
    return BlockDiff(block, block * size, min(count, (block + 1) * size) - 1, element, len(differing))


def _model(result: SdcResult) -> str:
    return result.device_name


def _short(digest: str) -> str:
    return digest[:12]


def _sample_diff(result: SdcResult, other: SdcResult) -> str:
    for (index, value), (_, expected) in zip(result.samples, other.samples, strict=False):
        if value != expected:
            return f"; sample [{index}] {value!r} vs {expected!r}"
    return ""


def _bit_sentence(result: SdcResult, majority: SdcResult, peers: int) -> str:
    n = result.config.n
    head = (
        f"{result.where} ({_model(result)}): result differs from the {peers} other GPU(s) of its model "
        f"(digest {_short(result.digest)} vs {_short(majority.digest)})"
    )
    diff = first_difference(result, majority)
    if diff is None:
        return head + "; no block checksum differs, so only the column sums do"
    span = f"elements {diff.first_element}–{diff.last_element}"
    where = f"first differing block {diff.block} of {len(result.block_s0)} ({span})"
    if diff.element is not None:
        row, col = divmod(diff.element, n)
        where += f", element {diff.element} (row {row}, col {col}) the only one differing in it"
    else:
        where += ", several elements differing in it"
    values = (
        f"block sum {result.block_sums[diff.block]!r} vs {majority.block_sums[diff.block]!r}"
        f"{_sample_diff(result, majority)}; total {result.total!r} vs {majority.total!r}"
    )
    return f"{head}; {where}; {diff.blocks_differing} block(s) differ in all; {values}"


def _shape(r: SdcResult) -> str:
    c = r.config
    return f"n={c.n}, chain={c.chain}, seed={c.seed}, block_elements={c.block_elements}"


def _of(result: SdcResult, text: str) -> Finding:
    """A finding of ``result``'s GPU (of its node for a CPU rank)."""
    return Finding.on_node(result.node, text, gpu=gpu_index(result.gpu))


def _comparable(results: Sequence[SdcResult], reference: SdcResult | None) -> list[Finding]:
    """One finding per result computed at other sizes than most: its GPU's where a strict
    majority computed the common size, else of the nodes together; a reference of another size
    is the suite's own, and leaves the check not judged."""
    shapes = Counter(_shape(r) for r in results)
    common, count = shapes.most_common(1)[0]
    strict = count * 2 > len(results)
    out = []
    for r in (r for r in results if _shape(r) != common):
        text = f"{r.where}: computed {_shape(r)}, the others {common}; not comparable"
        out.append(_of(r, text) if strict else of_nodes([r.node for r in results], text))
    if reference is not None and _shape(reference) != common:
        text = f"reference: computed {_shape(reference)}, the GPUs {common}; not comparable"
        out.append(Finding.outside("harness", text, severity="not_judged"))
    return out


def _tolerance_sentence(result: SdcResult, reference: SdcResult, label: str, rtol: float) -> str | None:
    bad = []
    for i, (value, ref, scale) in enumerate(
        zip(result.block_sums, reference.block_sums, reference.block_abs_sums, strict=True)
    ):
        if abs(value - ref) > rtol * scale:
            bad.append(i)
    if not bad:
        return None
    i = bad[0]
    value, ref, scale = result.block_sums[i], reference.block_sums[i], reference.block_abs_sums[i]
    size = result.config.block_elements
    return (
        f"{result.where} ({_model(result)}): block {i} (elements {i * size}–{(i + 1) * size - 1}) sums to "
        f"{value!r}, {label} {ref!r}: off by {abs(value - ref):.3g}, more than the tolerance "
        f"{rtol * scale:.3g} (rtol {rtol:g} of the block's magnitude {scale:.6g}); "
        f"{len(bad)} of {len(result.block_sums)} block(s) out of tolerance"
    )


def findings(
    results: Sequence[SdcResult], *, reference: SdcResult | None = None, rtol: float | None = None
) -> list[Finding]:
    """One finding per GPU that breaks either rule (module docstring); empty when all agree.

    ``rtol`` defaults to ``RTOL`` for the dtype the GPUs computed in."""
    if not results:
        return [Finding.across((), "no GPU returned an SDC result")]
    out = _comparable(results, reference)
    if out:
        return out
    by_model: dict[tuple[str, str], list[SdcResult]] = {}
    for r in results:
        by_model.setdefault((_model(r), r.config.dtype), []).append(r)
    answers: dict[tuple[str, str], SdcResult] = {}
    for (model, dtype), group in sorted(by_model.items()):
        digests = Counter(r.digest for r in group)
        digest, count = digests.most_common(1)[0]
        if count * 2 > len(group):
            answer = next(r for r in group if r.digest == digest)
            answers[(model, dtype)] = answer
            out += [_of(r, _bit_sentence(r, answer, len(group) - 1)) for r in group if r.digest != digest]
        else:
            spread = "; ".join(f"{_short(d)} on {', '.join(r.where for r in group if r.digest == d)}" for d in digests)
            text = f"{len(group)} GPUs of {model} ({dtype}) disagree with no majority: {spread}"
            out.append(of_nodes([r.node for r in group], text))  # one node's GPUs: that node's
    if reference is not None:
        label = f"the {reference.config.dtype} reference on {reference.device_name}"
        judged = results
    elif answers:
        largest = max(answers, key=lambda key: (len(by_model[key]), key))
        reference = answers[largest]
        label = f"the answer of the {len(by_model[largest])} {largest[0]} GPU(s)"
        judged = [r for r in results if (_model(r), r.config.dtype) != largest]
    else:
        return out
    for r in judged:
        # The looser of the two precisions bounds how far two honest results can be apart.
        tolerance = rtol if rtol is not None else max(RTOL[r.config.dtype], RTOL[reference.config.dtype])
        sentence = _tolerance_sentence(r, reference, label, tolerance)
        if sentence:
            out.append(_of(r, sentence))
    return out


def about_node(found: Sequence[Finding], node: str) -> list[Finding]:
    """The findings that name ``node``, and those that name no node (about the run as a whole)."""
    return [f for f in found if node in f.nodes or not f.nodes]
