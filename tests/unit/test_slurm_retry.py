"""The retry rules of Slurm commands (``slurm_retry``): which failures say a daemon was not
reached, how long a command is tried again, and how one outage is shared by every command. The
failure texts are those of Slurm 22.05's clients with slurmctld stopped on the test cluster."""

from __future__ import annotations

import re

import pytest

from pytest_gpucluster.errors import ClusterFault, DaemonUnreachable, SlurmQueryError
from pytest_gpucluster.slurm import telling_line
from pytest_gpucluster.slurm.retry import Outages, Unreachable, retry_delay, unreachable

CONNECT = "`squeue -h` exited 1: slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
SBATCH_CONNECT = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"
PING_DOWN = "`scontrol ping` exited 1: Slurmctld(primary) at vm is DOWN"


@pytest.mark.parametrize(
    ("command", "text", "said"),
    [
        ("squeue", CONNECT, Unreachable("slurmctld", not_received=True)),
        ("sbatch", SBATCH_CONNECT, Unreachable("slurmctld", not_received=True)),
        ("scontrol", PING_DOWN, Unreachable("slurmctld", not_received=False)),
        ("sbatch", "sbatch: error: Socket timed out on send/recv operation", Unreachable("slurmctld", False)),
        ("sinfo", "`sinfo --json` reported errors and no data: Unspecified error", Unreachable("slurmctld", False)),
        ("sacct", "sacct: error: Problem talking to the database: Connection refused", Unreachable("slurmdbd", True)),
        ("squeue", "`squeue -h -j 7` did not answer within 30 s.", Unreachable("slurmctld", False)),
    ],
)
def test_a_failure_that_says_the_daemon_was_not_reached_names_the_daemon(command, text, said):
    assert unreachable(command, text) == said


@pytest.mark.parametrize(
    "text",
    [
        "slurm_load_jobs error: Invalid job id specified",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
        "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is DOWN",  # the health check's finding
    ],
)
def test_the_daemons_own_answer_is_not_retried(text):
    assert unreachable("scontrol", text) is None


def test_the_delay_doubles_up_to_a_cap_and_never_runs_past_the_window():
    assert [retry_delay(n, 0.0, 60.0) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert retry_delay(3, 57.5, 60.0) == 2.5
    assert retry_delay(0, 60.0, 60.0) is None
    assert retry_delay(0, 0.0, 0.0) is None  # slurm_retry_s = 0: no retry


class _Clock:
    """Time that passes only when the code under test sleeps (and by ``cost`` per try)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_short_outage_costs_the_command_seconds_not_a_failure():
    clock = _Clock()
    outages = Outages(60.0, clock=clock, sleep=clock.sleep)
    answers = iter([SlurmQueryError(CONNECT), SlurmQueryError(CONNECT), "JOBID\n"])

    def once() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert outages.ended_ago("slurmctld") is None  # it never stopped answering
    assert outages.attempt("squeue", once) == "JOBID\n"
    assert clock.slept == [1.0, 2.0]
    assert outages.downtime("slurmctld", 0.0) == 3.0  # from the first unanswered request to the answer
    assert outages.down_s("slurmctld") is None  # the answer ended the outage
    clock.now += 30.0
    assert outages.ended_ago("slurmctld") == 30.0


def test_past_the_window_the_command_fails_as_a_fault_of_the_cluster_and_later_ones_fail_at_once():
    clock = _Clock()
    outages = Outages(20.0, clock=clock, sleep=clock.sleep)

    def down() -> str:
        clock.now += 9.0  # what one try of a client costs with slurmctld stopped (measured)
        raise SlurmQueryError(CONNECT)

    with pytest.raises(DaemonUnreachable) as info:
        outages.attempt("squeue", down)
    assert isinstance(info.value, ClusterFault) and isinstance(info.value, SlurmQueryError)
    assert info.value.what == "slurmctld"
    assert str(info.value).startswith("the Slurm controller (slurmctld) did not answer for ")
    assert re.fullmatch(
        r"the Slurm controller \(slurmctld\) stopped answering at \d\d:\d\d:\d\d UTC \(.*\)", info.value.sentence
    )
    assert CONNECT in info.value.sentence
    assert clock.now - 100.0 >= 20.0  # gave up once the controller had not answered for the window
    before = len(clock.slept)
    with pytest.raises(DaemonUnreachable) as again:
        outages.attempt("scontrol", down)  # the outage is shared: no new window
    assert len(clock.slept) == before
    assert again.value.sentence == info.value.sentence  # one outage, one sentence for every check


def test_a_submission_that_may_have_arrived_is_not_sent_again():
    clock = _Clock()
    outages = Outages(60.0, clock=clock, sleep=clock.sleep)
    tries = []

    def sbatch() -> str:
        tries.append(1)
        raise SlurmQueryError("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation")

    with pytest.raises(DaemonUnreachable, match="the job may exist, so it is not sent again"):
        outages.attempt("sbatch", sbatch, resend=False)
    assert len(tries) == 1 and clock.slept == []


def test_any_other_failure_is_raised_as_it_is_at_once():
    outages = Outages(60.0, sleep=lambda s: pytest.fail("slept"))

    def refused() -> str:
        raise SlurmQueryError("sbatch: error: Batch job submission failed: Invalid partition name specified")

    with pytest.raises(SlurmQueryError, match="Invalid partition") as info:
        outages.attempt("sbatch", refused)
    assert not isinstance(info.value, ClusterFault)


def test_the_telling_line_of_a_ping_is_not_its_banner():
    ping = (
        "Slurmctld(primary) at vm is DOWN\n*****************************************\n"
        "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n*****************************************\n"
    )
    assert telling_line(ping) == "Slurmctld(primary) at vm is DOWN"
    assert telling_line("a\nsbatch: error: refused\n") == "sbatch: error: refused"


def test_the_outages_sentence_quotes_the_plainest_failure_seen_before_giving_up():
    clock = _Clock()
    outages = Outages(10.0, clock=clock, sleep=clock.sleep)
    vague = SlurmQueryError("`sinfo --json` reported errors and no data: Unspecified error")
    seen = iter([vague, SlurmQueryError(CONNECT)])

    def down() -> str:
        clock.now += 1.0
        raise next(seen, SlurmQueryError(CONNECT))

    with pytest.raises(DaemonUnreachable) as info:
        outages.attempt("sinfo", down)
    assert info.value.sentence.endswith(f"({CONNECT})")
