"""GPU isolation judging on what tasks saw, as the GpuView dataclasses the workload returns.
The GRES-only views are those recorded from the project's Slurm test cluster."""

from __future__ import annotations

from dataclasses import replace

from pytest_gpucluster.checks import isolation as iso_checks
from pytest_gpucluster.workloads import isolation as iso
from pytest_gpucluster.workloads.context import local_context


def _view(rank=0, node="node1", job="10", cvd="0,1", job_gpus="0,1", step=None, **kw) -> iso.GpuView:
    return iso.GpuView(
        node=node,
        rank=rank,
        job_id=job,
        cuda_visible_devices=cvd,
        job_gpus=job_gpus,
        step_gpus=job_gpus if step is None else step,
        pid=100,
        **kw,
    )


def _judged(view, asked, **kw):
    """(failures, warnings) of one task's view, as sentences."""
    found = iso_checks.view_findings([(view, asked)], **kw)
    return [f.text for f in found if f.severity == "fail"], [f.text for f in found if f.severity == "warn"]


def _devices(minors, procs=None) -> tuple[iso.Device, ...]:
    return tuple(iso.Device(i, f"GPU-{m}aaa", m, (procs or {}).get(m, ())) for i, m in enumerate(minors))


def test_gres_only_view_passes_with_a_warning_when_cgroups_are_off():
    (warned,) = iso_checks.view_findings([(_view(), 2)], device_cgroups=False)
    assert (warned.scope, warned.setting, warned.nodes, warned.severity) == (
        "config",
        "device_cgroups",
        ("node1",),
        "warn",
    )
    problems, warns = _judged(_view(), 2, device_cgroups=False)
    assert problems == []
    assert warns == [
        "node1 (job 10, task 0): device cgroups are off on this cluster (profile device_cgroups = false): a job "
        "can open GPUs it was not given; only Slurm's view was checked"
    ]


def test_wrong_counts_are_named():
    problems, _ = _judged(_view(cvd="0,1,2", job_gpus="0"), 2, device_cgroups=False)
    assert problems == [
        "node1 (job 10, task 0): CUDA_VISIBLE_DEVICES='0,1,2' lists 3 GPU(s), the job asked for 2",
        "node1 (job 10, task 0): Slurm allotted GPU(s) 0 (SLURM_STEP_GPUS/SLURM_JOB_GPUS), the job asked for 2",
    ]
    problems, _ = _judged(_view(cvd=None), 2, device_cgroups=True)
    assert problems[0] == "node1 (job 10, task 0): CUDA_VISIBLE_DEVICES is not set; Slurm did not bind the job's GPUs"


def test_a_setup_problem_on_few_nodes_is_theirs_on_many_the_setups():
    good = [_view(0, f"node{i}") for i in range(2, 5)]
    odd = _view(0, "node1", cvd=None)
    (found,) = iso_checks.view_findings([(v, 2) for v in (odd, *good)], device_cgroups=False)[:1]
    assert (found.scope, found.culprits) == ("node", ("node1",))  # 1 of 4 nodes: its own
    views = [(_view(0, f"node{i}", cvd=None), 2) for i in range(1, 3)] + [(v, 2) for v in good[1:]]
    found = iso_checks.view_findings(views, device_cgroups=True)
    assert [(f.scope, f.culprits) for f in found] == [("node", ("node1",)), ("node", ("node2",))]  # 2 of 4: theirs
    views = [(_view(0, f"node{i}", cvd=None), 2) for i in range(1, 4)] + [(good[-1], 2)]
    found = iso_checks.view_findings(views, device_cgroups=True)
    assert [(f.scope, f.nodes, f.culprits) for f in found] == [
        ("nodes", ("node1", "node2", "node3"), ()),  # 3 of 4 nodes: Slurm's setup, no culprit
        ("nodes", ("node2", "node1", "node3"), ()),
        ("nodes", ("node3", "node1", "node2"), ()),
    ]
    (alone,) = iso_checks.view_findings([(odd, 2)], device_cgroups=True)
    assert (alone.scope, alone.culprits) == ("nodes", ())  # the only node: the setup cannot be told apart
    nvml = _view(0, "node3", nvml_error="NVML unavailable: Driver Not Loaded")
    (found,) = [f for f in iso_checks.view_findings([(nvml, 2)], device_cgroups=True) if "NVML" in f.text]
    assert (found.scope, found.culprits) == ("node", ("node3",))  # the node's driver, whatever the others do


def test_real_gpus_with_device_cgroups():
    view = _view(job_gpus="2,3", nvml=_devices([2, 3]), torch_count=2, torch_uuids=("2aaa", "3aaa"))
    assert _judged(view, 2, device_cgroups=True) == ([], [])


def test_nvml_seeing_every_gpu_is_a_failure_or_a_warning():
    view = _view(cvd="2,3", job_gpus="2,3", nvml=_devices([0, 1, 2, 3]), torch_count=2, torch_uuids=("2aaa", "3aaa"))
    text = (
        "node1 (job 10, task 0): NVML inside the job sees 4 GPUs, the job was allotted 2: devices are not "
        "constrained (ConstrainDevices=yes in cgroup.conf)"
    )
    assert _judged(view, 2, device_cgroups=True) == ([text], [])
    assert _judged(view, 2, device_cgroups=False) == ([], [text])
    (warned,) = iso_checks.view_findings([(view, 2)], device_cgroups=False)
    assert (warned.scope, warned.severity) == ("config", "warn")  # the profile says devices are not constrained
    wrong = replace(view, torch_uuids=("0aaa", "3aaa"))  # CUDA's index 0 is not a GPU Slurm gave
    assert _judged(wrong, 2, device_cgroups=False)[0] == [
        "node1 (job 10, task 0): CUDA sees GPU(s) 0aaa outside the allotment 2aaa, 3aaa"
    ]


def test_without_device_cgroups_the_allotment_is_read_through_the_nodes_gres_conf():
    # node2 of a split machine: GRES indices 0-1 are /dev/nvidia2-3 (its gres.conf); NVML sees all
    # four GPUs, so the job's GPUs are picked by the files gres.conf gives its indices.
    gres = "NodeName=node1 Name=gpu File=/dev/nvidia[0-1]\nNodeName=node2 Name=gpu File=/dev/nvidia[2-3]\n"
    procs = {0: ((4242, 30000),), 3: ((5151, 1000),)}
    view = _view(node="node2", job_gpus="0,1", nvml=_devices([0, 1, 2, 3], procs), gres_conf=gres)
    assert [d.minor for d in iso_checks.allotted(view)] == [2, 3]
    (found,) = iso_checks.foreign_process_findings(view)  # node1's process on gpu0 is not node2's
    assert (found.gpu, found.culprits) == (3, ("node2",)) and "process 5151" in found.text
    # no files for the node in gres.conf: index and minor are one
    assert [d.minor for d in iso_checks.allotted(replace(view, gres_conf=None))] == [0, 1]


def test_foreign_process():
    view = _view(job_gpus="0,1", nvml=_devices([0, 1], {1: ((4242, 30000), (100, 500))}))
    (found,) = iso_checks.foreign_process_findings(view)
    assert found.text == "node1:gpu1 (GPU-1aaa): process 4242 holds 30000 MiB (job 10 was given this GPU)"
    assert (found.scope, found.gpu, found.culprits) == ("gpu", 1, ("node1",))
    (found,) = iso_checks.foreign_process_findings(_view())
    assert (found.text, found.scope) == ("node1 (job 10, task 0): NVML could not be read (not measured)", "node")


def test_concurrent_jobs_recorded_on_the_test_cluster_are_disjoint():
    # Two 2-GPU jobs on the CI cluster's nodes: SLURM_JOB_GPUS 0,1 and 2,3 (jobs 10 and 11).
    a = [_view(0, "node1", "10", peer_seen=True), _view(1, "node2", "10", peer_seen=True)]
    b = [
        _view(0, "node1", "11", cvd="2,3", job_gpus="2,3", peer_seen=True),
        _view(1, "node2", "11", cvd="2,3", job_gpus="2,3", peer_seen=True),
    ]
    assert iso_checks.disjoint_findings(a, b) == []
    clash = [replace(b[0], job_gpus="1,2", step_gpus="1,2"), b[1]]
    (found,) = iso_checks.disjoint_findings(a, clash)
    assert found.text == "node1: jobs 10 and 11 ran at the same time on gres index 1"
    assert (found.scope, found.culprits) == ("node", ("node1",))  # node2 was set up alike and shared nothing
    late = [replace(b[0], peer_seen=False), b[1]]
    (found,) = iso_checks.disjoint_findings(a, late)
    assert found.text == (
        "node1 (job 11, task 0): the other job never ran alongside it (it waited in the queue?); overlap not tested"
    )
    assert (found.scope, found.severity, found.nodes, found.convicts) == ("queue", "not_judged", ("node1",), ())


def test_gpus_per_task_recorded_on_the_test_cluster():
    # --gpus-per-task=1, 4 tasks: CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS 0..3, SLURM_JOB_GPUS 0,1,2,3.
    views = [_view(r, cvd=str(r), job_gpus="0,1,2,3", step=str(r)) for r in range(4)]
    assert iso_checks.per_task_findings(views) == []
    views[3] = _view(3, cvd="2", job_gpus="0,1,2,3", step="2")
    assert [f.text for f in iso_checks.per_task_findings(views)] == ["node1: tasks [2, 3] share gres index 2"]
    views[3] = _view(3, cvd="2,3", job_gpus="0,1,2,3", step="2,3")
    assert iso_checks.per_task_findings(views)[0].text == (
        "node1 (job 10, task 3): sees 2 GPU(s) gres index 2, gres index 3 (CUDA_VISIBLE_DEVICES='2,3'), "
        "expected exactly 1"
    )


def test_gpu_view_reads_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("SLURM_JOB_GPUS", "1")
    monkeypatch.delenv("SLURM_STEP_GPUS", raising=False)
    (tmp_path / f"b-{local_context().hostname}-0").touch()
    view = iso.gpu_view(local_context(), real=False, hold_dir=str(tmp_path), hold_as="a", hold_for="b", timeout_s=1)
    assert (view.cuda_visible_devices, view.job_gpus, view.step_gpus) == ("1", "1", None)
    assert (view.nvml, view.peer_seen) == (None, True)
    assert iso_checks.parse_list("NoDevFiles") == ()


def test_a_task_of_a_gpus_per_task_job_is_judged_against_its_one_gpu_and_its_jobs_hold():
    # Second job of the pair: 2 tasks per node, --gpus-per-task=1, the job holds GPUs 2 and 3.
    # Whether the device cgroup is the step's (NVML shows 2) or the task's (NVML shows 1), the
    # task sees its one GPU through CUDA; NVML showing all 4 means devices are not constrained.
    step_cgroup = _view(
        1, cvd="3", job_gpus="2,3", step="3", nvml=_devices([2, 3]), torch_count=1, torch_uuids=("3aaa",)
    )
    task_cgroup = replace(step_cgroup, nvml=_devices([3]))
    for view in (step_cgroup, task_cgroup):
        assert _judged(view, 1, device_cgroups=True, job_holds=2) == ([], [])
    loose = replace(step_cgroup, nvml=_devices([0, 1, 2, 3]))
    assert _judged(loose, 1, device_cgroups=True, job_holds=2)[0] == [
        "node1 (job 10, task 1): NVML inside the job sees 4 GPUs, the job was allotted 2: devices are not "
        "constrained (ConstrainDevices=yes in cgroup.conf)"
    ]
    two = replace(step_cgroup, cuda_visible_devices="2,3", torch_count=2, torch_uuids=("2aaa", "3aaa"))
    assert _judged(two, 1, device_cgroups=True, job_holds=2)[0][0] == (
        "node1 (job 10, task 1): CUDA_VISIBLE_DEVICES='2,3' lists 2 GPU(s), the job asked for 1"
    )
    assert iso_checks.foreign_process_findings(replace(step_cgroup, nvml=_devices([2, 3], {2: ((77, 900),)}))) == []
    (found,) = iso_checks.foreign_process_findings(replace(step_cgroup, nvml=_devices([2, 3], {3: ((77, 900),)})))
    assert (found.text, found.gpu) == ("node1:gpu3 (GPU-3aaa): process 77 holds 900 MiB (job 10 was given this GPU)", 3)


def test_the_hold_barrier_meets_any_task_of_the_other_job_on_the_node(tmp_path):
    # The per-task job's tasks 0 and 1 both wait for the one-task job's task 0, and it for them.
    host = local_context().hostname
    (tmp_path / f"a-{host}-0").touch()
    view = iso.gpu_view(
        replace(local_context(), local_rank=1),
        real=False,
        hold_dir=str(tmp_path),
        hold_as="b",
        hold_for="a",
        timeout_s=1,
    )
    assert view.peer_seen is True
    assert (tmp_path / f"b-{host}-1").exists()
    alone = iso.gpu_view(local_context(), real=False, hold_dir=str(tmp_path), hold_as="a", hold_for="c", timeout_s=0.3)
    assert alone.peer_seen is False


def test_per_task_views_as_the_4xh200_machine_gave_them():
    # --gpus-per-task=1, 2 tasks, the job holding GPUs 2 and 3 with device cgroups: task 1 held
    # /dev/nvidia3 (NVML showed that one device) while its SLURM_STEP_GPUS said 2. Not a gres.conf
    # order problem (File=/dev/nvidia[0-3]): no warning for a per-task task; CUDA's UUIDs name each
    # task's GPU, so the two tasks are seen to differ even where NVML shows the step's GPUs.
    t0 = _view(
        0,
        cvd="0",
        job_gpus="2,3",
        step="2",
        nvml=_devices([2]),
        torch_count=1,
        torch_uuids=("2aaa",),
        gpus_per_task="1",
    )
    t1 = replace(t0, rank=1, nvml=_devices([3]), torch_uuids=("3aaa",))
    for task in (t0, t1):
        assert _judged(task, 1, device_cgroups=True, job_holds=2) == ([], [])
    assert iso_checks.per_task_findings([t0, t1]) == []
    # The same with device cgroups per step: NVML shows both GPUs, and a process of task 0 on GPU 2
    # is not foreign to task 1, whose GPU is 3.
    step_wide = [replace(t, nvml=_devices([2, 3], {2: ((t0.pid + 1, 500),)})) for t in (t0, t1)]
    for task in step_wide:
        assert _judged(task, 1, device_cgroups=True, job_holds=2) == ([], [])
    assert iso_checks.per_task_findings(step_wide) == []
    assert iso_checks.foreign_process_findings(step_wide[1]) == []
    outside = replace(t1, nvml=_devices([0, 1, 2, 3]), torch_uuids=("1aaa",))  # GPU 1 is not the job's
    assert _judged(outside, 1, device_cgroups=False, job_holds=2)[0] == [
        "node1 (job 10, task 1): CUDA sees GPU(s) 1aaa outside the allotment 2aaa, 3aaa"
    ]
    shared = [step_wide[0], replace(step_wide[1], torch_uuids=("2aaa",))]  # CUDA gives both tasks GPU 2
    assert [f.text for f in iso_checks.per_task_findings(shared)] == ["node1: tasks [0, 1] share GPU-2aaa"]
    # SLURM_STEP_GPUS as Slurm documents it (the step's GPUs) is no fault either; three are.
    assert _judged(replace(t1, step_gpus="2,3"), 1, device_cgroups=True, job_holds=2) == ([], [])
    assert _judged(replace(t1, step_gpus="1,2,3"), 1, device_cgroups=True, job_holds=2)[0] == [
        "node1 (job 10, task 1): Slurm allotted GPU(s) 1, 2, 3 (SLURM_STEP_GPUS/SLURM_JOB_GPUS), the job asked for 1"
    ]
