"""The caller's Slurm environment: the ``SBATCH_*``, ``SALLOC_*``, ``SRUN_*``, ``SLURM_*`` and
client-listing variables of the shell that started the run.

sbatch(1) lets its input variables override every option a batch script states, so an operator's
``SBATCH_TIMELIMIT`` or ``SBATCH_JOB_NAME`` would change every job of the run; srun reads its own
(``SRUN_*`` and many ``SLURM_*``) inside each job, which inherits the submitter's environment;
squeue, sinfo, sacct, scontrol and scancel change what they list or cancel by theirs
(``SQUEUE_STATES``, ``SCANCEL_NAME``, ``SLURM_TIME_FORMAT`` ...). The run sets them aside once, before
any thread, xdist worker or job exists, records them, and puts them back at its end: every job,
and every command the run and submitit start, sees none of them. ``SLURM_CONF`` (where the
cluster is) and ``SLURM_JWT`` (how to authenticate to it) stay.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

# Every variable a Slurm client reads starts with one of these (the ENVIRONMENT VARIABLES of
# sbatch(1), salloc(1), srun(1), squeue(1), sinfo(1), sacct(1), scontrol(1) and scancel(1)).
PREFIXES = ("SBATCH_", "SALLOC_", "SRUN_", "SLURM_", "SLURMD_", "SQUEUE_", "SINFO_", "SACCT_", "SCONTROL_", "SCANCEL_")
KEPT = frozenset({"SLURM_CONF", "SLURM_JWT"})
SECRET = frozenset({"SLURM_JWT"})  # kept, and never written to the results
# What an allocation (salloc, an sbatch script, srun) sets: a run started inside one.
ALLOCATION = ("SLURM_JOB_ID", "SLURM_JOBID")
# The SLURM_* variables srun reads as options of the steps it starts (srun(1), INPUT ENVIRONMENT
# VARIABLES, Slurm 22.05): in the caller's environment, each would reach the step of every job.
SRUN_OPTIONS = frozenset(
    {
        "SLURM_ACCOUNT", "SLURM_ACCTG_FREQ", "SLURM_BCAST", "SLURM_BURST_BUFFER", "SLURM_CLUSTERS",
        "SLURM_COMPRESS", "SLURM_CONSTRAINT", "SLURM_CORE_SPEC", "SLURM_CPU_BIND", "SLURM_CPU_FREQ_REQ",
        "SLURM_CPUS_PER_GPU", "SLURM_CPUS_PER_TASK", "SLURM_DELAY_BOOT", "SLURM_DEPENDENCY", "SLURM_DISTRIBUTION",
        "SLURM_DIST_PLANESIZE", "SLURM_EPILOG", "SLURM_EXACT", "SLURM_EXCLUSIVE", "SLURM_EXPORT_ENV",
        "SLURM_GPU_BIND", "SLURM_GPU_FREQ", "SLURM_GPUS", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK",
        "SLURM_GRES", "SLURM_GRES_FLAGS", "SLURM_HINT", "SLURM_IMMEDIATE", "SLURM_JOB_ID", "SLURM_JOBID",
        "SLURM_JOB_NAME", "SLURM_JOB_NUM_NODES", "SLURM_KILL_BAD_EXIT", "SLURM_LABELIO", "SLURM_MEM_BIND",
        "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_NODE", "SLURM_MPI_TYPE", "SLURM_NETWORK",
        "SLURM_NNODES", "SLURM_NO_KILL", "SLURM_NPROCS", "SLURM_NTASKS", "SLURM_NTASKS_PER_CORE",
        "SLURM_NTASKS_PER_GPU", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS_PER_SOCKET", "SLURM_OPEN_MODE",
        "SLURM_OVERCOMMIT", "SLURM_OVERLAP", "SLURM_PARTITION", "SLURM_POWER", "SLURM_PROFILE", "SLURM_PROLOG",
        "SLURM_QOS", "SLURM_REMOTE_CWD", "SLURM_REQ_SWITCH", "SLURM_RESERVATION", "SLURM_RESV_PORTS",
        "SLURM_SIGNAL", "SLURM_SPREAD_JOB", "SLURM_STEP_GRES", "SLURM_TASK_EPILOG", "SLURM_TASK_PROLOG",
        "SLURM_THREAD_SPEC", "SLURM_THREADS", "SLURM_THREADS_PER_CORE", "SLURM_TIMELIMIT", "SLURM_UMASK",
        "SLURM_UNBUFFEREDIO", "SLURM_USE_MIN_NODES", "SLURM_WAIT", "SLURM_WCKEY", "SLURM_WORKING_DIR",
    }
)  # fmt: skip


def is_client_variable(name: str) -> bool:
    """Whether a Slurm client reads ``name`` and the run sets it aside (``KEPT`` ones stay)."""
    return name.startswith(PREFIXES) and name not in KEPT


def shapes_jobs(name: str) -> bool:
    """Whether ``name`` would change the run's jobs: an sbatch option (``SBATCH_*``), an srun
    option of their steps (``SRUN_*``, ``SRUN_OPTIONS``). Listing and cancelling variables
    change what the run reads, not what it submits."""
    return name.startswith(("SBATCH_", "SRUN_")) or name in SRUN_OPTIONS


@dataclass(frozen=True)
class CallerEnv:
    """The variables set aside from the caller's environment: name → value, as the caller had them."""

    set_aside: Mapping[str, str] = field(default_factory=dict)

    @property
    def shaping(self) -> list[str]:
        """The names that would have changed the run's jobs, sorted."""
        return sorted(name for name in self.set_aside if shapes_jobs(name))

    def to_json(self) -> dict[str, str]:
        """What the results record (``environment.caller_slurm_env``): every name with its value."""
        return {k: "(set; not recorded)" if k in SECRET else v for k, v in sorted(self.set_aside.items())}

    def warning(self) -> str:
        """One line naming the variables that would have changed the run's jobs; empty when none."""
        names = self.shaping
        if not names:
            return ""
        shown = ", ".join(f"{n}={self.set_aside[n]!r}" for n in names[:6]) + (
            f" and {len(names) - 6} more" if len(names) > 6 else ""
        )
        return (
            f"the caller's {shown} would have changed every job of this run (sbatch(1): environment "
            "variables override the batch script's options); the run submits without them "
            "(results: environment.caller_slurm_env)"
        )


def allocation_of(env: Mapping[str, str]) -> str | None:
    """The job id of the Slurm allocation the caller runs inside (salloc, an sbatch script, an
    srun step), or None outside any."""
    return next((env[name] for name in ALLOCATION if env.get(name)), None)


def set_aside(environ: MutableMapping[str, str]) -> CallerEnv:
    """Take every Slurm client variable but ``KEPT`` out of ``environ`` (the process's environment
    at configure time, before any thread or job) and return them."""
    taken = {name: environ.pop(name) for name in [n for n in environ if is_client_variable(n)]}
    return CallerEnv(taken)


def put_back(environ: MutableMapping[str, str], caller: CallerEnv) -> None:
    """The run has ended: the caller's variables return as they were."""
    for name, value in caller.set_aside.items():
        environ.setdefault(name, value)
