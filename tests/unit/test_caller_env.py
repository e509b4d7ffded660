"""Which of the caller's variables the run sets aside, which would have changed its jobs, and how
they are recorded (slurm/caller_env.py; the names are those of Slurm 22.05's man pages)."""

from __future__ import annotations

from pytest_gpucluster.slurm import caller_env


def test_every_slurm_client_variable_but_the_config_and_the_token_is_set_aside():
    environ = {
        "SBATCH_TIMELIMIT": "1",
        "SALLOC_PARTITION": "debug",
        "SRUN_CPUS_PER_TASK": "8",
        "SLURM_TIME_FORMAT": "relative",
        "SQUEUE_FORMAT": "%j",
        "SCANCEL_NAME": "train",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "SLURM_JWT": "secret",
        "HOME": "/home/op",
    }
    caller = caller_env.set_aside(environ)
    assert environ == {"SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_JWT": "secret", "HOME": "/home/op"}
    assert sorted(caller.set_aside) == [
        "SALLOC_PARTITION",
        "SBATCH_TIMELIMIT",
        "SCANCEL_NAME",
        "SLURM_TIME_FORMAT",
        "SQUEUE_FORMAT",
        "SRUN_CPUS_PER_TASK",
    ]
    caller_env.put_back(environ, caller)
    assert environ["SBATCH_TIMELIMIT"] == "1" and len(environ) == 9


def test_only_what_sbatch_or_srun_take_as_options_would_have_changed_the_jobs():
    caller = caller_env.CallerEnv(
        {
            "SBATCH_JOB_NAME": "x",
            "SBATCH_EXCLUSIVE": "user",
            "SRUN_CPUS_PER_TASK": "8",
            "SLURM_CPU_BIND": "none",
            "SLURM_CLUSTERS": "other",
            "SALLOC_PARTITION": "debug",
            "SLURM_TIME_FORMAT": "relative",
            "SQUEUE_STATES": "all",
        }
    )
    assert caller.shaping == [
        "SBATCH_EXCLUSIVE",
        "SBATCH_JOB_NAME",
        "SLURM_CLUSTERS",
        "SLURM_CPU_BIND",
        "SRUN_CPUS_PER_TASK",
    ]
    line = caller.warning()
    assert line.startswith("the caller's SBATCH_EXCLUSIVE='user', SBATCH_JOB_NAME='x', SLURM_CLUSTERS='other'")
    assert "\n" not in line
    assert caller_env.CallerEnv({"SQUEUE_STATES": "all"}).warning() == ""


def test_a_token_is_never_written_to_the_results():
    assert caller_env.CallerEnv({"SLURM_JWT": "secret"}).to_json() == {"SLURM_JWT": "(set; not recorded)"}


def test_an_allocation_is_known_by_its_job_id():
    assert caller_env.allocation_of({"SLURM_JOB_ID": "12"}) == "12"
    assert caller_env.allocation_of({"SLURM_JOBID": "13"}) == "13"
    assert caller_env.allocation_of({"SLURM_CONF": "/x"}) is None
