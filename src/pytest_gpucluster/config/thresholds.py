"""``[thresholds.SET]``: the numbers every check is judged by.

One set per GPU model (``match`` lists NVML name fragments) and node shape (``gpus_per_node``: the
GPUs per node its intra-node lines were measured on) plus a ``default`` set every other set falls
back on; the across-node busbw lines a set leaves out are derived from the profile's fabric.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_gpucluster.config.metrics import LAYER_SCOPES, METRICS
from pytest_gpucluster.config.profile import Profile, node_network_gbps
from pytest_gpucluster.errors import ConfigError, MissingThresholdError


@dataclass(frozen=True)
class Threshold:
    """Pass/warn/fail lines for one metric. Only the side matching the metric's direction is set."""

    metric: str
    unit: str
    fail_below: float | None = None
    warn_below: float | None = None
    fail_above: float | None = None
    warn_above: float | None = None
    xfail: str | None = None
    source: str = ""  # where the bound is set: "FILE [thresholds.SET.METRIC]", or a derived line's arithmetic
    evidence: str = ""  # the table's ``source`` key: the reference, measured run or calibration behind it
    # The line proves a path works (catches a zero or a wrong result), not a speed: the report says so
    # instead of showing a pass against a reference.
    path_only: bool = False
    defined_in: str = ""  # the [thresholds.SET] whose table holds the line (a set it extends, perhaps)

    @property
    def origin(self) -> str:
        """What the bound rests on: ``reference``, ``calibration``, ``derived``, ``site`` or ``path``."""
        return "path" if self.path_only else origin_of(self.source, self.evidence)

    @property
    def better(self) -> str:
        """``higher`` or ``lower`` is better: the side the bounds are on, else the metric's direction."""
        if self.fail_below is not None or self.warn_below is not None:
            return "higher"
        if self.fail_above is not None or self.warn_above is not None:
            return "lower"
        known = METRICS.get(self.metric)
        return known.better if known else ""

    def describe(self) -> str:
        """The bounds as a short phrase, e.g. ``fail < 350 GB/s, warn < 400 GB/s``."""
        parts = []
        if self.fail_below is not None:
            parts.append(f"fail < {self.fail_below:g} {self.unit}")
        if self.warn_below is not None:
            parts.append(f"warn < {self.warn_below:g} {self.unit}")
        if self.fail_above is not None:
            parts.append(f"fail > {self.fail_above:g} {self.unit}")
        if self.warn_above is not None:
            parts.append(f"warn > {self.warn_above:g} {self.unit}")
        return ", ".join(parts) or "no bound"


CALIBRATED_PREFIX = "calibrated"  # every ``source`` ``--gpucluster-calibrate`` writes begins so
ORIGINS = {
    "reference": "a published reference or measured run (docs/thresholds.md)",
    "calibration": "calibrated from known-good runs of this cluster",
    "derived": "derived from the profile's fabric",
    "site": "a site's choice: no source given",
    "path": "proves the path only (catches a zero or a wrong result), not a speed",
}


def origin_of(source: str, evidence: str) -> str:
    """The kind of evidence behind a bound: a ``source`` key written by ``--gpucluster-calibrate`` is a
    calibration, any other a reference; a line derived from the fabric says so; a bound with
    no ``source`` key is the site's choice."""
    if evidence.startswith(CALIBRATED_PREFIX):
        return "calibration"
    if evidence:
        return "reference"
    if source.startswith("derived"):
        return "derived"
    return "site"


@dataclass(frozen=True)
class ThresholdSet:
    """The thresholds in force for one run: the model's set laid over ``default``."""

    name: str
    values: Mapping[str, Threshold]
    file: str = "thresholds.toml"
    # The GPU model no set matched (so only ``default`` is in force); empty when a set was named,
    # one matched, or no model was known.
    unmatched: str = ""
    # The node shape no line of the set was measured on ("2 × NVIDIA H200"), and the lines left out
    # for it: metric → the set and GPUs per node it was measured for. Empty when every line fits.
    shape: str = ""
    other_shapes: Mapping[str, tuple[str, int]] = dataclasses.field(default_factory=dict)

    def __getitem__(self, metric: str) -> Threshold:
        try:
            return self.values[metric]
        except KeyError:
            if metric in METRICS or metric.startswith("site."):
                raise MissingThresholdError(self.missing(metric), metric=metric, set_name=self.name) from None
            raise ConfigError(f"{metric!r} is not a known metric.") from None

    def get(self, metric: str) -> Threshold | None:
        """The threshold for ``metric``, or None when neither the set nor default has one."""
        return self.values.get(metric)

    def missing(self, metric: str) -> str:
        """Why there is no bound for ``metric`` and how to add one, naming the file and the set."""
        if metric in self.other_shapes:
            return self._no_line_for_shape(metric)
        if self.unmatched:
            return (
                f"{self.file}: no threshold for {metric!r}: no [thresholds.SET] matches GPU model "
                f"{self.unmatched!r}, so only [thresholds.default] is in force and it has none. Name a set "
                'in the profile with thresholds = "SET", add a fragment of the model to a set\'s match list, '
                "or run with --gpucluster-calibrate=PATH to write a set from this run's measurements."
            )
        where = "in set 'default'" if self.name == "default" else f"in set {self.name!r} nor in 'default'"
        if metric.startswith("site.") and metric not in METRICS:
            return (
                f'{self.file}: no threshold for {metric!r} {where}: declare it under [metrics."{metric}"] '
                f'(unit, better) and add its bounds under [thresholds.{self.name}."{metric}"].'
            )
        calibrate = (
            " or run with --gpucluster-calibrate=PATH on known-good nodes to write one from their measurements"
            if METRICS[metric].calibrate
            else ""
        )
        return (
            f"{self.file}: no threshold for {metric!r} {where}; add [thresholds.{self.name}.{metric}] with "
            f'unit = "{METRICS[metric].unit}" and its bounds{calibrate}.'
        )

    def _no_line_for_shape(self, metric: str) -> str:
        measured = ", ".join(
            sorted({f"{gpus} GPUs per node ([thresholds.{name}])" for name, gpus in self.other_shapes.values()})
        )
        return (
            f"{self.file}: no intra-node NCCL lines for {self.shape} ({metric}): the lines of set {self.name!r} "
            f"were measured on {measured}, and a line of another node shape does not judge this one. Run with "
            "--gpucluster-calibrate=PATH on known-good nodes of this shape to write a set for it, or add a "
            f"[thresholds.SET] with match and gpus_per_node = {self.shape.split(' ', 1)[0]} and its lines."
        )


def shape_specific(metric: str) -> bool:
    """Whether a line of ``metric`` holds for one node shape only: intra-node busbw depends on how
    many GPUs share the node's NVLink (docs/thresholds.md has the H200 figures per shape), and the
    layer-by-layer busbw on how many GPUs share its NVLink or its NICs."""
    return metric.startswith("nccl.") and (".intra_node" in metric or metric.rsplit(".", 1)[-1] in LAYER_SCOPES)


def choose_set(
    sets: Mapping[str, Mapping[str, Threshold]],
    matches: Mapping[str, tuple[str, ...]],
    profile: Profile,
    gpu_model: str | None,
    file: str,
    *,
    shapes: Mapping[str, int | None] | None = None,
    gpus_per_node: int | None = None,
) -> ThresholdSet:
    """The set that applies to ``profile``: named explicitly, else matched on the GPU model
    (``gpu_model`` if given, e.g. what NVML reports, else the profile's) and the GPUs per node the
    jobs see, laid over default; the across-node busbw lines it does not set are derived from the
    profile's fabric. A shape-specific line (``shape_specific``) measured on another number of
    GPUs per node is left out, so the check says it has no line for this shape."""
    shapes = shapes or {}
    name = profile.thresholds
    model = gpu_model or profile.gpu_model or ""
    unmatched = ""
    if name is None and model:
        name = matching_set(matches, model, shapes, gpus_per_node)
        unmatched = "" if name else model
    name = name or "default"
    merged = dict(sets.get("default", {}))
    merged.update(sets.get(name, {}))
    other: dict[str, tuple[str, int]] = {}
    for metric, line in list(merged.items()):
        measured_on = shapes.get(line.defined_in)
        if gpus_per_node and measured_on and measured_on != gpus_per_node and shape_specific(metric):
            other[metric] = (line.defined_in, measured_on)
            del merged[metric]
    # The report names the set in force; a line it inherits says which set's table holds it.
    for metric, line in merged.items():
        if line.defined_in:
            where = f"{file} [thresholds.{name}.{metric}]"
            if line.defined_in != name:
                where += f" (inherited from [thresholds.{line.defined_in}])"
            merged[metric] = dataclasses.replace(line, source=where)
    # A line the file sets wins; the fabric fills in the across-node lines it leaves out.
    for metric, derived in derived_inter_node(profile).items():
        merged.setdefault(metric, derived)
    return ThresholdSet(
        name=name,
        values=types.MappingProxyType(merged),
        file=file,
        unmatched=unmatched,
        shape=f"{gpus_per_node} × {model or 'GPU'}" if other else "",
        other_shapes=types.MappingProxyType(other),
    )


def matching_set(
    matches: Mapping[str, tuple[str, ...]],
    model: str,
    shapes: Mapping[str, int | None] | None = None,
    gpus_per_node: int | None = None,
) -> str | None:
    """The set for ``model`` (a ``match`` fragment in it, case-insensitive): the first one measured
    on ``gpus_per_node`` GPUs per node, else the first that names no shape, else the first; None
    when no set's fragments fit."""
    shapes = shapes or {}
    fitting = [
        name for name, fragments in matches.items() if any(fragment.lower() in model.lower() for fragment in fragments)
    ]
    if gpus_per_node:
        for wanted in (gpus_per_node, None):
            for name in fitting:
                if shapes.get(name) == wanted:
                    return name
    return fitting[0] if fitting else None


def no_set_for(file: str, profile: Profile, matches: Mapping[str, tuple[str, ...]]) -> str | None:
    """Why ``profile`` has no threshold set: it names a ``gpu_model`` that no set's ``match``
    fits and names no set itself; None when a set applies (or no model is named). Judged by
    ``default`` alone, most checks would have no bound."""
    model = profile.gpu_model
    if profile.thresholds is not None or not model or matching_set(matches, model) is not None:
        return None
    listed = "; ".join(f"{name}: {', '.join(frags)}" for name, frags in matches.items() if frags) or "none"
    return (
        f"{file}: profiles.{profile.name}.gpu_model = {model!r}: no threshold set applies to it (the profile "
        f'names none with thresholds = "SET", and no set\'s match fits it; match lists: {listed}). Name a '
        f'set in [profiles.{profile.name}] with thresholds = "SET", add a fragment of {model!r} to a set\'s '
        "match list, or run with --gpucluster-calibrate=PATH to measure this cluster and write a set for it."
    )


# --------------------------------------------------------------------------- lines derived from the fabric

# Collectives whose across-node busbw the network bounds, and how: Ring-bound ones at the node's
# network bandwidth; alltoall at what uniform traffic lets through it.
DERIVED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")


def network_busbw(op: str, per_node_gbps: float, nodes: int, gpus_per_node: int) -> tuple[float, str]:
    """The busbw ``op`` reaches across ``nodes`` when the network runs at line rate, and the
    arithmetic as a phrase.

    On Ring, every channel crosses each node boundary on one NIC and carries busbw's share of the
    data, so all_reduce, all_gather, reduce_scatter and broadcast read at most the node's network
    bandwidth, whatever the node count. alltoall sends the fraction ``(nodes−1)/nodes`` of every
    rank's buffer off its node: busbw ≤ per-GPU share × nodes/(nodes−1) × (n−1)/n over n ranks.
    """
    if op != "alltoall":
        return per_node_gbps, " (the Ring bound)"
    n = nodes * gpus_per_node
    bound = per_node_gbps / gpus_per_node * nodes / (nodes - 1) * (n - 1) / n
    return bound, (
        f"; alltoall over {nodes} × {gpus_per_node} GPUs: {per_node_gbps:g}/{gpus_per_node} × "
        f"{nodes}/{nodes - 1} × {n - 1}/{n} = {bound:.4g} GB/s"
    )


def derived_inter_node(profile: Profile) -> dict[str, Threshold]:
    """``nccl.<op>.inter_node`` lines from the profile's fabric: the network bound of each
    collective times ``[nccl] inter_node_fail_fraction`` and ``inter_node_warn_fraction``. Empty
    where nothing crosses a network (``node_network_gbps`` is None)."""
    per_node = node_network_gbps(profile)
    if per_node is None:
        return {}
    s = profile.nccl
    out: dict[str, Threshold] = {}
    for op in DERIVED_OPS:
        if op == "alltoall" and not profile.gpus_per_node:
            continue  # its bound needs the GPUs per node
        bound, how = network_busbw(op, per_node, profile.nodes, profile.gpus_per_node or 1)
        fail, warn = bound * s.inter_node_fail_fraction, bound * s.inter_node_warn_fraction
        source = (
            f"derived: {profile.ib_hcas} × {profile.ib_rate_gbps:g} Gb/s = {per_node:g} GB/s per node"
            f"{how}; fail × {s.inter_node_fail_fraction:g} = {fail:.4g}, warn × "
            f"{s.inter_node_warn_fraction:g} = {warn:.4g} GB/s ([profiles.{profile.name}] ib_hcas, "
            "ib_rate_gbps, nccl.inter_node_*_fraction)"
        )
        metric = f"nccl.{op}.inter_node"
        out[metric] = Threshold(
            metric=metric, unit="GB/s", fail_below=round(fail, 3), warn_below=round(warn, 3), source=source
        )
    return out
