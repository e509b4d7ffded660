"""One exception hierarchy for the plugin.

Every message says what was wrong, where (file and key, option, job id, node) and what to do.
"""

from __future__ import annotations


class GpuClusterError(Exception):
    """Base class of every error the plugin raises on purpose."""


class DeclarationError(GpuClusterError):
    """A check's declaration of its jobs is wrong (no job, several where one is read, a request
    with neither workload nor producer): the check could not judge, and no node is judged on it."""


class ConfigError(GpuClusterError):
    """thresholds.toml or a command-line option is wrong; raised before any job exists."""


class MissingThresholdError(ConfigError):
    """thresholds.toml has no bound for a metric a check measured: the check cannot judge it. A
    missing reference number is not a fault of the cluster, so the check ends unjudged (the run is
    INCOMPLETE), never failed."""

    def __init__(self, message: str, *, metric: str, set_name: str) -> None:
        self.metric = metric
        self.set_name = set_name
        super().__init__(message)


class LaunchError(GpuClusterError):
    """A job could not be submitted, failed, vanished or ran past its time limit."""

    def __init__(
        self,
        message: str,
        *,
        job_id: str | None = None,
        state: str | None = None,
        nodes: tuple[str, ...] = (),
        log_paths: tuple[str, ...] = (),
        stderr_tail: str = "",
        culprits: tuple[str, ...] = (),
        held: dict[str, str] | None = None,
    ) -> None:
        self.job_id = job_id
        self.state = state
        self.nodes = nodes  # the job's nodes (those Slurm gave it, else those it was pinned to)
        self.culprits = culprits  # the nodes whose tasks failed, where the job can tell
        self.held = dict(held or {})  # node → the other work holding it, for a job that never started
        self.log_paths = log_paths
        self.stderr_tail = stderr_tail
        parts = [message]
        if log_paths:
            parts.append("logs: " + ", ".join(log_paths))
        if stderr_tail:
            parts.append("end of the job's stderr:\n" + stderr_tail)
        super().__init__("\n".join(parts))


class QueueTimeoutError(LaunchError):
    """A job stayed PENDING longer than the profile's queue_timeout_s; it has been cancelled."""


class WallTimeoutError(LaunchError):
    """A job ran longer than its time limit plus a grace period; it has been cancelled."""


class SlurmQueryError(GpuClusterError):
    """A login-node Slurm command (sinfo, scontrol, sacct) failed or timed out."""


class NodeLostError(LaunchError):
    """A node under a job went down or stopped answering Slurm; the job has been cancelled.
    ``lost`` maps each such node to Slurm's state and reason."""

    def __init__(self, message: str, *, lost: dict[str, str], **kwargs: object) -> None:
        self.lost = dict(lost)
        # The results of the tasks that did answer (TaskResult), for a caller that can judge the
        # other nodes on them: what was measured is kept.
        self.answered: list[object] = []
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


class ClusterFault(GpuClusterError):
    """A fault outside the nodes: a Slurm daemon that does not answer, a shared filesystem the
    run cannot write, other work holding the nodes past ``queue_timeout_s``. The checks it stops
    are not judged (the run is INCOMPLETE, not REJECTED) and no node is excluded or drained for
    it. ``what`` names the part at fault; ``sentence`` says it in one line, the part first."""

    what = "cluster"
    # The sentence, where the message's first line names a job rather than the fault.
    fault_sentence = ""

    @property
    def sentence(self) -> str:
        if self.fault_sentence:
            return self.fault_sentence
        lines = str(self).strip().splitlines()
        return lines[0] if lines else self.what


# How a fault's sentence names each Slurm daemon.
DAEMON_NAMES = {"slurmctld": "the Slurm controller (slurmctld)", "slurmdbd": "Slurm's accounting daemon (slurmdbd)"}


class DaemonUnreachable(SlurmQueryError, ClusterFault):
    """A Slurm daemon (``slurmctld``, ``slurmdbd``) did not answer for the retry window, or did
    not answer srun as a job started."""

    def __init__(self, daemon: str, down_s: float, error: str, *, sent: bool = False, said: str = "") -> None:
        self.what = daemon
        self.down_s = down_s
        self.error = error
        name = DAEMON_NAMES.get(daemon, daemon)
        if said:
            said = f"{name} {said}"
        elif sent:
            said = f"{name} did not answer a submission ({error.strip()}); the job may exist, so it is not sent again"
        else:
            said = f"{name} did not answer for {down_s:.0f} s: {error.strip()}"
        super().__init__(said)

    @classmethod
    def for_step(cls, job_id: str, job_name: str, line: str) -> DaemonUnreachable:
        """srun, inside job ``job_id``, could not reach slurmctld to start the job's tasks."""
        why = line.rsplit(": ", 1)[-1]
        fault = cls("slurmctld", 0.0, line, said=f"did not answer srun as job {job_id} ({job_name}) started: {line}")
        fault.fault_sentence = f"{DAEMON_NAMES['slurmctld']} did not answer srun as a job started ({why})"
        return fault


class SharedFsFault(LaunchError, ClusterFault):
    """The run cannot write its job files on the shared filesystem (read-only, full, missing)."""

    what = "shared_fs"

    @classmethod
    def cannot_write(cls, shared: str, why: str, detail: str) -> SharedFsFault:
        """The fault of a shared filesystem the login node cannot write: one sentence naming the
        directory and the system's reason (the same wherever the run meets it), then ``detail``."""
        sentence = f"shared_fs {shared!r} cannot be written from this login node ({why})"
        fault = cls(f"{sentence}: {detail}")
        fault.fault_sentence = sentence
        return fault


class EnvironmentFault(LaunchError, ClusterFault):
    """The run's Python environment cannot use the nodes' GPUs (a torch built for a CUDA their
    driver cannot run, a CPU build of torch) while NVML sees them: no node's fault. ``nodes`` are
    the nodes where a task found it."""

    what = "environment"

    @classmethod
    def torch_cannot_use_gpus(cls, what: str, where: str, detail: str, job: str) -> EnvironmentFault:
        """One sentence for every node where torch could not use the GPUs: the environment
        (``what``: torch's build and the driver), the nodes, CUDA's words, what to do."""
        sentence = f"{what} on {where}: {detail}"
        fault = cls(
            f"{sentence}; job {job} stopped before it measured. Install a torch built for a CUDA that driver "
            "runs (README: 'torch and the nodes' driver'); no node is judged on it."
        )
        fault.fault_sentence = sentence
        return fault


class ConfigFault(LaunchError, ClusterFault):
    """The run's own configuration is wrong for the cluster, as a job found it on every node (a
    network setting of the profile's env that matches nothing there): one finding naming the
    setting, no node judged, excluded or drained. ``setting``: the variable or key at fault."""

    what = "config"
    setting = ""

    @classmethod
    def of_setting(cls, sentence: str, *, setting: str, nodes: tuple[str, ...], job: str) -> ConfigFault:
        """The fault of ``setting``, said in ``sentence`` (the setting, where it comes from, the
        nodes and what they offer), as job ``job`` met it."""
        fault = cls(f"{sentence}; job {job} stopped before its collectives. Fix the setting; no node is judged on it.")
        fault.fault_sentence = sentence
        fault.setting = setting
        fault.nodes = nodes
        return fault


class QueueHeldError(QueueTimeoutError, ClusterFault):
    """A job stayed PENDING past ``queue_timeout_s`` while other work (another user's or another
    run's jobs) held its nodes; it has been cancelled."""

    what = "queue"


class NodesHeld(ClusterFault):
    """Other work holds tested nodes past ``queue_timeout_s``: learned once (before the run's first
    job, or from a job that waited for them), those nodes are left out of every later job, and a
    check of them, or one across nodes left with fewer than it needs, is not judged naming the
    holder. ``held``: node → the job holding it."""

    what = "queue"

    def __init__(self, sentence: str, held: dict[str, str]) -> None:
        self.held = dict(held)
        self.fault_sentence = sentence
        super().__init__(sentence)


class QueueAfterOutageError(QueueTimeoutError, ClusterFault):
    """A job stayed PENDING past ``queue_timeout_s`` (and the time excused) just after slurmctld
    came back from an outage, with no other work on its nodes; it has been cancelled. The wait
    is the controller's: it schedules again only from its next pass, and jobs that ended while
    it was away stay COMPLETING until their nodes report again."""

    what = "slurmctld"
