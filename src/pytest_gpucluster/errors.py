"""One exception hierarchy for the plugin.

Every message says what was wrong, where (file and key, option, job id, node) and what to do.
"""

from __future__ import annotations


class GpuClusterError(Exception):
    """Base class of every error the plugin raises on purpose."""


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
    ) -> None:
        self.job_id = job_id
        self.state = state
        self.nodes = nodes
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
