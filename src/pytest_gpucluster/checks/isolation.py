"""GPU isolation, judged on the login node: from the ``GpuView`` each task of a job read
(``workloads.isolation.gpu_view``), a job sees exactly the GPUs it was allotted, two jobs on one
node get disjoint GPUs, each ``--gpus-per-task=1`` task gets its own, and no foreign process
holds memory on them. Missing device cgroups is a warning, never a silent pass.

What a task was given is Slurm's setup (gres.conf, cgroup.conf, slurm.conf): a problem of one
kind seen on no more than half of the nodes is each such node's own, seen on more it names those
nodes together with no culprit (``places.own_or_setup``). NVML unreadable on a node, and a
foreign process on a GPU, are that node's and that GPU's; two jobs that never ran at once leave
the overlap not judged (the queue, not the nodes).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpucluster.checks.gres_conf import gres_order_mismatch, minor_of, node_gpu_files
from pytest_gpucluster.checks.places import own_or_setup
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads.isolation import Device, GpuView


def parse_list(text: str | None) -> tuple[str, ...]:
    """``"0,1"`` / ``"GPU-ab,GPU-cd"`` / ``""`` → entries (Slurm writes ``NoDevFiles`` when the GRES
    has no device files)."""
    if not text or text.strip() in ("NoDevFiles", "(null)"):
        return ()
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _words(items: Sequence[str]) -> str:
    """``("0", "1")`` → ``0, 1`` (``none`` for none): a sentence names GPUs, not a Python list."""
    return ", ".join(items) or "none"


def _norm(uuid: str) -> str:
    # NVML writes "GPU-<uuid>", torch the bare uuid.
    return uuid.lower().removeprefix("gpu-")


def allotted(view: GpuView) -> tuple[Device, ...]:
    """The NVML devices Slurm gave the task: all of them when NVML sees only the allotment (device
    cgroups), else those of the allotted GRES indices (``_of``: through the node's gres.conf). A task of a
    ``--gpus-per-task`` job: the one CUDA gives it, where it read one, since its SLURM_STEP_GPUS
    does not always name it (Slurm 22.05 can give a task the index of another GPU of the job;
    docs/checks-infrastructure.md)."""
    if view.nvml is None:
        return ()
    if view.gpus_per_task and view.torch_uuids:
        cuda = {_norm(u) for u in view.torch_uuids}
        own = tuple(d for d in view.nvml if _norm(d.uuid) in cuda)
        if own:
            return own
    return _of(view, parse_list(view.step_gpus) or parse_list(view.job_gpus))


def _of(view: GpuView, indices: tuple[str, ...]) -> tuple[Device, ...]:
    """The NVML devices of GRES ``indices``: all NVML sees where it sees no more (device cgroups),
    else those whose minor is the device file gres.conf gives each index (index i is the node's
    i-th file; where gres.conf names no files, index and minor are one)."""
    nvml = view.nvml or ()
    if len(nvml) <= len(indices) or not indices:
        return nvml
    files = node_gpu_files(view.gres_conf, view.node) if view.gres_conf else None
    if files and all(i.isdigit() and int(i) < len(files) for i in indices):
        minors = {minor_of(files[int(i)]) for i in indices}
    else:
        minors = {int(i) for i in indices if i.isdigit()}
    return tuple(d for d in nvml if d.minor in minors)


def view_findings(
    views: Sequence[tuple[GpuView, int]], *, device_cgroups: bool, job_holds: int | None = None
) -> list[Finding]:
    """Every task's view against the ``asked`` GPUs it asked for (``(view, asked)``): failures of
    Slurm's setup or of a node (see the module), and warnings. ``job_holds``: what a task's job
    holds on its node, when that is more (a task of a ``--gpus-per-task=1`` job): the device
    cgroup may be the job's or the step's, so NVML may show that many, not more."""
    seen: list[tuple[str, str, str]] = []
    found: list[Finding] = []
    for view, asked in views:
        issues, more = _view(view, asked, device_cgroups=device_cgroups, job_holds=job_holds)
        seen += [(kind, view.node, text) for kind, text in issues]
        found += more
    return own_or_setup(seen, [v.node for v, _ in views]) + found


def _view(
    view: GpuView, asked: int, *, device_cgroups: bool, job_holds: int | None
) -> tuple[list[tuple[str, str]], list[Finding]]:
    """One task's view: (setup problems as (kind, sentence), its node's failures and warnings)."""
    problems: list[tuple[str, str]] = []
    found: list[Finding] = []
    w = view.where
    cvd = view.cuda_visible_devices
    if cvd is None:
        problems.append(("cvd", f"{w}: CUDA_VISIBLE_DEVICES is not set; Slurm did not bind the job's GPUs"))
    elif len(parse_list(cvd)) != asked:
        problems.append(
            ("cvd", f"{w}: CUDA_VISIBLE_DEVICES={cvd!r} lists {len(parse_list(cvd))} GPU(s), the job asked for {asked}")
        )
    slurm = parse_list(view.step_gpus) or parse_list(view.job_gpus)
    # A per-task task's SLURM_STEP_GPUS may name its own GPU or the whole step's (the variable is
    # the step's in Slurm's documentation); either count is Slurm's allotment, not a fault.
    if len(slurm) != asked and not (view.gpus_per_task and len(slurm) == max(asked, job_holds or 0)):
        problems.append(
            (
                "slurm",
                f"{w}: Slurm allotted GPU(s) {_words(slurm)} (SLURM_STEP_GPUS/SLURM_JOB_GPUS), the job asked "
                f"for {asked}",
            )
        )
    if view.torch_count is not None and view.torch_count != asked:
        problems.append(("torch", f"{w}: torch.cuda.device_count() = {view.torch_count}, the job asked for {asked}"))
    if view.nvml is None:
        if view.nvml_error:
            found.append(Finding.on_node(view.node, f"{w}: NVML could not be read ({view.nvml_error})"))
        elif not device_cgroups:
            text = (
                f"{w}: device cgroups are off on this cluster (profile device_cgroups = false): a job can "
                "open GPUs it was not given; only Slurm's view was checked"
            )
            found.append(_cgroups_off(view, text))
        return problems, found
    mine = allotted(view)
    holds = max(asked, job_holds or 0)
    if len(view.nvml) > holds:
        text = (
            f"{w}: NVML inside the job sees {len(view.nvml)} GPUs, the job was allotted {holds}: devices are not "
            "constrained (ConstrainDevices=yes in cgroup.conf)"
        )
        if device_cgroups:
            problems.append(("cgroup", text))
        else:
            found.append(_cgroups_off(view, text))
    elif not view.gpus_per_task and slurm:  # a per-task SLURM_STEP_GPUS may not name the task's GPU
        # GRES indices count the node's gres.conf devices in the order it lists them: a job's
        # indices and its devices disagree only where gres.conf maps those indices elsewhere.
        minors = sorted(d.minor for d in mine)
        named = gres_order_mismatch(view.gres_conf, view.node, slurm, minors)
        if named is not None:
            held = ", ".join(f"/dev/nvidia{m}" for m in minors) or "no device"
            text = (
                f"{w}: the job holds {held}, but the node's gres.conf gives its GRES indices "
                f"{', '.join(slurm)} to {named}: gres.conf's File= lines do not name this node's devices"
            )
            found.append(Finding.on_node(view.node, text, severity="warn"))
    if view.torch_uuids:
        seen = {_norm(u) for u in view.torch_uuids}
        if view.gpus_per_task:  # the task's own GPU is the one CUDA gives it: one of its job's
            given = {_norm(d.uuid) for d in _of(view, parse_list(view.job_gpus))}
            wrong = bool(seen - given)
        else:
            given = {_norm(d.uuid) for d in mine}
            wrong = seen != given
        if wrong:
            outside = sorted(seen - given) or sorted(seen)
            text = f"{w}: CUDA sees GPU(s) {_words(outside)} outside the allotment {_words(sorted(given))}"
            problems.append(("cuda", text))
    return problems, found


def _cgroups_off(view: GpuView, text: str) -> Finding:
    """A warning of the profile's word that devices are not constrained (``device_cgroups``)."""
    return Finding.outside("config", text, nodes=[view.node], setting="device_cgroups", severity="warn")


def foreign_process_findings(view: GpuView) -> list[Finding]:
    """Processes other than the task itself holding memory on the task's GPUs: each of its GPU
    (``node:gpuN``, N the device's minor number); NVML unreadable is the node's."""
    if view.nvml is None:
        return [
            Finding.on_node(view.node, f"{view.where}: NVML could not be read ({view.nvml_error or 'not measured'})")
        ]
    found = []
    for d in allotted(view):
        for pid, mib in d.processes:
            if pid != view.pid:
                text = (
                    f"{view.node}:gpu{d.minor} ({d.uuid}): process {pid} holds {mib} MiB (job {view.job_id} was given"
                )
                found.append(Finding.on_node(view.node, f"{text} this GPU)", gpu=d.minor))
    return found


def _identities(view: GpuView) -> set[str]:
    if view.nvml is not None:
        return {d.uuid for d in allotted(view)}
    return {f"gres index {i}" for i in parse_list(view.step_gpus) or parse_list(view.job_gpus)}


def disjoint_findings(first: Sequence[GpuView], second: Sequence[GpuView]) -> list[Finding]:
    """Two jobs that ran at the same time share no GPU on any node (Slurm's setup, see the
    module); where the other job never ran alongside a task, the overlap is not judged there."""
    found = [
        Finding.outside(
            "queue",
            f"{v.where}: the other job never ran alongside it (it waited in the queue?); overlap not tested",
            nodes=[v.node],
            severity="not_judged",
        )
        for v in (*first, *second)
        if v.peer_seen is False
    ]
    seen = [
        ("shared", a.node, f"{a.node}: jobs {a.job_id} and {b.job_id} ran at the same time on {_words(sorted(shared))}")
        for a in first
        for b in second
        if a.node == b.node and (shared := _identities(a) & _identities(b))
    ]
    return own_or_setup(seen, [v.node for v in (*first, *second)]) + found


def per_task_findings(views: Sequence[GpuView]) -> list[Finding]:
    """With ``--gpus-per-task=1``: each task sees exactly one GPU, and tasks of a node differ
    (Slurm's setup, see the module). A task's GPU is the one CUDA gives it (its UUID) where it
    read one (see ``allotted``)."""
    seen: list[tuple[str, str, str]] = []
    by_node: dict[str, list[tuple[GpuView, set[str]]]] = {}
    for v in views:
        ids = _identities(v)
        visible = len(v.nvml) if v.nvml is not None and len(v.nvml) <= 1 else len(parse_list(v.cuda_visible_devices))
        if len(ids) != 1 or visible != 1:
            text = (
                f"{v.where}: sees {visible} GPU(s) {_words(sorted(ids))} (CUDA_VISIBLE_DEVICES="
                f"{v.cuda_visible_devices!r}), expected exactly 1"
            )
            seen.append(("count", v.node, text))
        by_node.setdefault(v.node, []).append((v, ids))
    for node, entries in by_node.items():
        owners: dict[str, list[int]] = {}
        for v, ids in entries:
            for i in ids:
                owners.setdefault(i, []).append(v.rank)
        seen += [
            ("shared", node, f"{node}: tasks {ranks} share {gpu}") for gpu, ranks in owners.items() if len(ranks) > 1
        ]
    return own_or_setup(seen, [v.node for v in views])
