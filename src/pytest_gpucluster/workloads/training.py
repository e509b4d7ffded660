"""Training throughput and correctness: the decoder of ``model.py`` under DDP and FSDP2.

``train`` runs on every task of a job; one job can run several wrappings in turn ("single" for
one GPU without a wrapper, "ddp", "fsdp") so the processes, the CUDA context and the process group
are paid for once. ``summarise`` (pure, login side) turns the tasks' results into the numbers the
tests judge and the problems they report.

Timing: warm-up steps first (allocator, cuDNN/cuBLAS heuristics, NCCL channels, compilation),
then ``steps`` steps timed on the GPU with CUDA events and read once at the end; no ``.item()``
or other host sync inside the loop, so the host runs ahead and the GPU never waits on Python.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_gpucluster.workloads.context import TaskContext
from pytest_gpucluster.workloads.distributed import device_for, pick_backend, process_group
from pytest_gpucluster.workloads.flops import ModelShape, mfu_percent, peak_bf16_tflops, training_flops_per_token
from pytest_gpucluster.workloads.model import ModelConfig, build_model, synthetic_batches
from pytest_gpucluster.workloads.nvml_util import gpu_label

MODES = ("single", "ddp", "fsdp")

# The loss must end at least this much below where it started: on the learnable synthetic data
# it falls by far more within a few steps, while a broken optimiser or gradient leaves it flat.
MIN_LOSS_DROP = 0.05
# DDP and FSDP see the same data from the same initial weights, so their losses differ only by
# rounding. In fp32 (CPU) that is summation order at 1e-7 compounded over a few Adam steps, far
# under 1e-4. On GPUs both run bf16 autocast (8 mantissa bits, 0.4 % per rounding), all-reduce
# and reduce-scatter add in different orders, and FSDP computes with bf16 parameter copies, so
# their final losses differ by up to a few 1e-4 relative (docs/training.md). 1 % leaves a wide
# margin over that and is still small against the fall of the loss itself.
LOSS_AGREEMENT = {"fp32": 1e-4, "bf16": 1e-2}


@dataclass(frozen=True)
class TrainConfig:
    """Model shape and the run's length; a profile's ``[training]`` table is one of these
    (config/profile.py lists the keys it may set)."""

    d_model: int = 2048
    n_layers: int = 16
    n_heads: int = 16
    seq_len: int = 2048
    vocab: int = 32000
    micro_batch: int = 12
    # Micro-batches per optimiser step; gradients are reduced across ranks on the last one only.
    # Two halve the gradient communication per token, which raises DDP's scaling efficiency
    # (docs/training.md); 2 × 12 × 2048 tokens per GPU per step is still a small batch by the
    # standards of real pre-training runs.
    grad_accum: int = 2
    steps: int = 10
    warmup_steps: int = 3
    # The training stability check's run (test_training_stability.py): as long as the reference
    # training validation's 100+ iterations, so a falling loss and the step-time spread show.
    stability_steps: int = 120
    compile: bool = False
    timeout_s: int = 900  # the training job's time limit is derived from it (TrainingPlan)
    lr: float = 6e-4
    seed: int = 0
    ddp_bucket_mb: int = 100
    grad_reduce_dtype: str = "fp32"  # "bf16": DDP compresses gradients, FSDP reduce-scatters in bf16
    fsdp_param_dtype: str = "bf16"  # FSDP all-gathers and computes with bf16 parameters (GPU only)
    data_pool: int = 4

    @property
    def model(self) -> ModelConfig:
        """The decoder's shape."""
        return ModelConfig(self.d_model, self.n_layers, self.n_heads, self.seq_len, self.vocab)


# The model a CPU runs instead of the GPU-sized default: the ci profile's [training] sizes.
TINY = TrainConfig(
    d_model=64, n_layers=2, n_heads=4, seq_len=64, vocab=512, micro_batch=2, steps=8, warmup_steps=2, lr=3e-3
)


# Without real GPUs, this many CPU ranks per node stand in for a node's GPUs: enough to exercise
# the process group, DDP's all-reduce and FSDP's sharding, few enough for a 2-core CI machine.
CPU_RANKS_PER_NODE = 2


@dataclass(frozen=True)
class TrainingPlan:
    """What the tests launch: the configuration, the job shape and why it differs, if it does."""

    config: TrainConfig
    ranks_per_node: int  # tasks per node (one per GPU)
    gpus_per_node: int  # GPUs each job asks the scheduler for per node
    timeout_s: int
    note: str = ""

    @property
    def timeout_min(self) -> int:
        """The job's time limit: the training timeout plus start-up, in whole minutes."""
        return max(2, math.ceil(self.timeout_s / 60) + 1)


def plan_training(config: TrainConfig, *, gpus_per_node: int, real_gpus: bool) -> TrainingPlan:
    """The plan for a profile's ``[training]`` config on nodes with ``gpus_per_node`` GPUs.

    Rule: on nodes without real GPUs (CPU/gloo), a profile whose model shape and micro-batch are
    still the GPU-sized default gets ``TINY`` instead (a 937 M-parameter model would take hours
    on a CPU), with ``CPU_RANKS_PER_NODE`` ranks per node (one per GPU where the profile's GPUs
    are GRES only and fewer, so a node of one GPU trains on one rank, as it would on a device);
    a profile that sets its own sizes is run as written.
    """
    timeout_s = config.timeout_s
    if real_gpus and gpus_per_node > 0:
        return TrainingPlan(config, gpus_per_node, gpus_per_node, timeout_s)
    default = TrainConfig()
    ranks = min(CPU_RANKS_PER_NODE, gpus_per_node) if gpus_per_node > 0 else CPU_RANKS_PER_NODE
    note = ""
    if config.model == default.model and config.micro_batch == default.micro_batch:
        config = replace(TINY, timeout_s=timeout_s)
        note = (
            f"no GPUs: the GPU-sized default model was replaced by the tiny CPU model (d {TINY.d_model}, "
            f"{TINY.n_layers} layers, seq {TINY.seq_len}, vocab {TINY.vocab}, micro-batch {TINY.micro_batch}, "
            f"{TINY.steps} steps), fp32 over gloo, {ranks} CPU rank{'s' * (ranks != 1)} per node"
        )
    return TrainingPlan(config, ranks, 0, timeout_s, note)


@dataclass(frozen=True)
class RunStats:
    """One task's view of one training run."""

    mode: str
    rank: int
    world_size: int
    node: str
    gpu: str
    device_name: str
    dtype: str
    compiled: bool
    n_params: int
    tokens_per_step: int
    step_times_s: tuple[float, ...]
    elapsed_s: float
    losses: tuple[float, ...]
    peak_memory_bytes: int
    # DDP only: ranks whose parameters differ from rank 0's after training, as
    # (rank, differing parameter tensors, name of the first one).
    replica_mismatches: tuple[tuple[int, int, str], ...] = ()

    @property
    def tokens_per_s(self) -> float:
        """This task's training throughput over the timed steps."""
        return self.tokens_per_step * len(self.step_times_s) / self.elapsed_s if self.elapsed_s > 0 else 0.0


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a cpuset narrows), else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_threads(tasks_per_node: int, env: Mapping[str, str] | None = None, usable: int | None = None) -> int:
    """Threads for one CPU rank: its share of the CPUs Slurm allotted the job on this node
    (``SLURM_CPUS_ON_NODE``), never more than the CPUs the process may run on. A job given part of
    a node would otherwise run a thread per core of the whole machine in every rank; nodes that
    advertise more CPUs than their host has (the test cluster's) would run several spinning
    threads per core, which makes every step many times slower."""
    allotted = (os.environ if env is None else env).get("SLURM_CPUS_ON_NODE", "")
    real = usable_cpus() if usable is None else usable
    cpus = min(int(allotted), real) if allotted.isdigit() and int(allotted) > 0 else real
    return max(1, cpus // max(1, tasks_per_node))


def train(
    ctx: TaskContext,
    *,
    config: TrainConfig,
    modes: Sequence[str] = ("ddp", "fsdp"),
    backend: str | None = None,
    timeout_s: float = 600.0,
) -> tuple[RunStats, ...]:
    """Train ``config`` once per mode on this task's GPU (or CPU); one RunStats per mode.

    "single" trains without a wrapper or collectives (the one-GPU baseline; in a job of several
    tasks, every GPU trains alone at the same time); "ddp" and "fsdp" join every task of the job
    in one process group.
    """
    import torch

    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown training mode {mode!r}; known: {', '.join(MODES)}")
    backend = pick_backend(backend)
    device = device_for(ctx, backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # Pure bf16 GEMMs may accumulate in reduced precision on Hopper: the fast path.
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    elif ctx.world_size > 1:
        # Several ranks per CPU node share its cores; oversubscribed threads slow every rank.
        torch.set_num_threads(cpu_threads(ctx.tasks_per_node))
    out: list[RunStats] = []
    if any(m != "single" for m in modes):
        with process_group(ctx, backend=backend, timeout_s=timeout_s):
            out += [_run(ctx, config, mode, device) for mode in modes]
    else:
        out += [_run(ctx, config, mode, device) for mode in modes]
    return tuple(out)


def _run(ctx: TaskContext, cfg: TrainConfig, mode: str, device: Any) -> RunStats:
    import torch

    on_gpu = device.type == "cuda"
    world = 1 if mode == "single" else ctx.world_size
    # Every task of a "single" run trains rank 0's data alone: the same baseline on each GPU.
    rank = 0 if mode == "single" else ctx.rank
    if on_gpu:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(cfg.model, device=device, seed=cfg.seed)
    n_params = sum(p.numel() for p in model.parameters())
    if cfg.compile:
        for block in model.blocks:
            block.compile()
    wrapped = _wrap(model, mode, device, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=on_gpu)
    batches = synthetic_batches(
        cfg.model, micro_batch=cfg.micro_batch, pool=cfg.data_pool, seed=cfg.seed * 100003 + rank, device=device
    )
    losses, times, elapsed = _loop(wrapped, opt, batches, cfg, device, mode)
    mismatches = _replica_mismatches(model, rank, world) if mode == "ddp" else ()
    peak = int(torch.cuda.max_memory_allocated(device)) if on_gpu else 0
    stats = RunStats(
        mode=mode,
        rank=ctx.rank,
        world_size=world,
        node=ctx.hostname,
        gpu=gpu_label(device, ctx.local_rank),
        device_name=torch.cuda.get_device_name(device) if on_gpu else "cpu",
        dtype="bf16" if on_gpu else "fp32",
        compiled=cfg.compile,
        n_params=n_params,
        tokens_per_step=cfg.micro_batch * cfg.seq_len * cfg.grad_accum,
        step_times_s=times,
        elapsed_s=elapsed,
        losses=losses,
        peak_memory_bytes=peak,
        replica_mismatches=mismatches,
    )
    del wrapped, model, opt, batches
    return stats


def _wrap(model: Any, mode: str, device: Any, cfg: TrainConfig) -> Any:
    import torch

    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # Gradients live in the all-reduce buckets (no copy in or out); a static graph lets DDP
        # skip the per-step search for unused parameters (but its reducer does not accept
        # no_sync, so not with gradient accumulation); larger buckets mean fewer, more efficient
        # collectives while backward still overlaps them.
        ddp = DistributedDataParallel(
            model,
            device_ids=[device] if device.type == "cuda" else None,
            gradient_as_bucket_view=True,
            static_graph=cfg.grad_accum == 1,
            bucket_cap_mb=cfg.ddp_bucket_mb,
        )
        if cfg.grad_reduce_dtype == "bf16" and device.type == "cuda":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
        return ddp
    if mode == "fsdp":
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        # Each block is one unit, prefetched while the previous one computes. bf16 parameter
        # copies halve the all-gather and skip autocast's weight casts (the torchtitan recipe);
        # master weights, optimiser state and the gradient reduce-scatter stay fp32. Both raise
        # FSDP's scaling efficiency (docs/training.md).
        on_gpu = device.type == "cuda"
        policy = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if on_gpu and cfg.fsdp_param_dtype == "bf16" else None,
            reduce_dtype=torch.bfloat16 if on_gpu and cfg.grad_reduce_dtype == "bf16" else torch.float32,
        )
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    return model


def _loop(
    model: Any, opt: Any, batches: list[Any], cfg: TrainConfig, device: Any, mode: str = "single"
) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """Each step: ``grad_accum`` micro-batches (the gradient is reduced across ranks on the last
    only: DDP's ``no_sync``, FSDP2's ``set_requires_gradient_sync``), then the optimiser."""
    import torch

    on_gpu = device.type == "cuda"
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=on_gpu)
    total = cfg.warmup_steps + cfg.steps
    losses: list[Any] = []
    events = [torch.cuda.Event(enable_timing=True) for _ in range(cfg.steps + 1)] if on_gpu else []  # type: ignore[no-untyped-call]
    host_marks: list[float] = []
    for step in range(total):
        timed = step - cfg.warmup_steps
        if timed == 0:
            if on_gpu:
                events[0].record()
            else:
                host_marks.append(time.perf_counter())
        accum = cfg.grad_accum
        step_loss: Any = 0.0
        for micro in range(accum):
            last = micro == accum - 1
            if mode == "fsdp" and accum > 1:
                # No reduce-scatter before the last micro-batch, and the parameters stay gathered
                # after backward so the next forward need not gather them again.
                model.set_requires_gradient_sync(last)
                model.set_reshard_after_backward(last)
            no_sync = model.no_sync() if mode == "ddp" and not last else contextlib.nullcontext()
            tokens, targets = batches[(step * accum + micro) % len(batches)]
            with no_sync:
                with autocast:
                    loss = model(tokens, targets) / accum
                loss.backward()
            step_loss = step_loss + loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss)
        if timed >= 0:
            if on_gpu:
                events[timed + 1].record()
            else:
                host_marks.append(time.perf_counter())
    if on_gpu:
        torch.cuda.synchronize(device)
        times = tuple(events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(cfg.steps))
        elapsed = events[0].elapsed_time(events[-1]) / 1e3
    else:
        times = tuple(b - a for a, b in itertools.pairwise(host_marks))
        elapsed = host_marks[-1] - host_marks[0] if host_marks else 0.0
    return tuple(float(v) for v in torch.stack(losses).float().cpu().tolist()), times, elapsed


def _replica_mismatches(model: Any, rank: int, world: int) -> tuple[tuple[int, int, str], ...]:
    """Compare every rank's parameters with rank 0's, bit for bit, through one tensor all_gather
    of per-parameter checksums (the CPU wheel has no numpy, so no *_object collectives)."""
    import torch
    import torch.distributed as dist

    names, sums = [], []
    with torch.no_grad():
        for name, p in model.named_parameters():
            bits = p.detach().contiguous().view(torch.int32).to(torch.int64)
            # Two integer sums: order-independent, exact, and a flipped bit changes both.
            sums += [bits.sum(), (bits * bits).sum()]
            names.append(name)
    local = torch.stack(sums)
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local)
    reference = gathered[0].view(-1, 2).cpu()
    out = []
    for r in range(1, world):
        differs = (gathered[r].view(-1, 2).cpu() != reference).any(dim=1)
        count = int(differs.sum())
        if count:
            out.append((r, count, names[int(differs.nonzero()[0])]))
    del rank
    return tuple(out)


# --------------------------------------------------------------------------- login side, pure


@dataclass(frozen=True)
class RunProblem:
    """One thing wrong with a run, in one sentence: ``ranks`` are the (node, ``gpuN``) places of
    the ranks it is about (none: the run as a whole); ``step`` where a loss first went wrong."""

    text: str
    ranks: tuple[tuple[str, str], ...] = ()
    step: int | None = None


@dataclass(frozen=True)
class TrainingSummary:
    """One training run over all its tasks: what the tests judge."""

    mode: str
    world_size: int
    nodes: tuple[str, ...]
    device_name: str
    dtype: str
    tokens_per_s_per_gpu: float
    step_p50_s: float
    step_p95_s: float
    peak_memory_gib: float
    mfu_percent: float | None
    peak_tflops: float | None
    losses: tuple[float, ...]  # mean over ranks, per step, warm-up included
    problems: tuple[RunProblem, ...]
    n_params: int


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarise(runs: Sequence[RunStats], config: TrainConfig) -> TrainingSummary:
    """All tasks' RunStats of one mode → the run's numbers and every problem seen, each naming
    the rank and its ``node:gpu``."""
    if not runs:
        raise ValueError("no training results to summarise")
    runs = sorted(runs, key=lambda r: r.rank)
    first = runs[0]
    where = {r.rank: f"{r.node}:{r.gpu}" for r in runs}
    place = {r.rank: (r.node, r.gpu) for r in runs}
    problems: list[RunProblem] = []
    for r in runs:
        bad = [i for i, v in enumerate(r.losses) if not math.isfinite(v)]
        if bad:
            text = f"rank {r.rank} ({where[r.rank]}): loss is {r.losses[bad[0]]} at step {bad[0]}"
            problems.append(RunProblem(text, (place[r.rank],), bad[0]))
    steps = min(len(r.losses) for r in runs)
    mean_losses = tuple(sum(r.losses[i] for r in runs) / len(runs) for i in range(steps))
    if steps >= 2 and all(math.isfinite(v) for v in mean_losses):
        tail = mean_losses[-max(1, steps // 4) :]
        end = sum(tail) / len(tail)
        if not end < mean_losses[0] * (1 - MIN_LOSS_DROP):
            text = (
                f"loss did not fall: {mean_losses[0]:.4f} at step 0, {end:.4f} over the last {len(tail)} "
                f"steps (must end at least {MIN_LOSS_DROP:.0%} lower)"
            )
            problems.append(RunProblem(text))
    for r in runs:
        for rank, count, name in r.replica_mismatches:
            line = (
                f"rank {rank} ({where.get(rank, '?')}): {count} parameter tensor(s) differ from rank 0 "
                f"({where.get(0, '?')}) after DDP training, first {name}"
            )
            if line not in [p.text for p in problems]:
                problems.append(RunProblem(line, tuple(place[k] for k in (rank, 0) if k in place)))
    names = {r.device_name for r in runs}
    if len(names) > 1:
        problems.append(RunProblem(f"mixed GPU models in one job: {', '.join(sorted(names))}"))
    per_gpu = sum(r.tokens_per_s for r in runs) / len(runs)
    peak = peak_bf16_tflops(first.device_name) if first.dtype == "bf16" else None
    shape = ModelShape(config.d_model, config.n_layers, config.seq_len, config.vocab, first.n_params)
    times = [t for r in runs for t in r.step_times_s]
    return TrainingSummary(
        mode=first.mode,
        world_size=first.world_size,
        nodes=tuple(dict.fromkeys(r.node for r in runs)),
        device_name=first.device_name,
        dtype=first.dtype,
        tokens_per_s_per_gpu=per_gpu,
        step_p50_s=percentile(times, 50),
        step_p95_s=percentile(times, 95),
        peak_memory_gib=max(r.peak_memory_bytes for r in runs) / 2**30,
        mfu_percent=mfu_percent(per_gpu, training_flops_per_token(shape), peak),
        peak_tflops=peak,
        losses=mean_losses,
        problems=tuple(problems),
        n_params=first.n_params,
    )


def loss_agreement(a: TrainingSummary, b: TrainingSummary) -> tuple[float, float]:
    """Relative difference of the two runs' final losses (mean of the last quarter of steps)
    and the tolerance for their dtype (see LOSS_AGREEMENT)."""
    n = min(len(a.losses), len(b.losses))
    k = max(1, n // 4)
    la, lb = sum(a.losses[n - k : n]) / k, sum(b.losses[n - k : n]) / k
    rel = abs(la - lb) / max(abs(la), abs(lb), 1e-12)
    return rel, LOSS_AGREEMENT.get(a.dtype, LOSS_AGREEMENT["bf16"])


def stability_config(config: TrainConfig) -> TrainConfig:
    """``config`` run for ``stability_steps`` timed steps: the stability check's long run."""
    return replace(config, steps=config.stability_steps)


def scaled(config: TrainConfig, **changes: Any) -> TrainConfig:
    """A copy of ``config`` with ``changes`` (benchmark variants)."""
    return replace(config, **changes)
