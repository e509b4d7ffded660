"""Each test-cluster node sees only its own GPUs: which device files a node owns (by PCI bus order,
through the driver's minor numbers) and which ones /dev/null covers in its mount namespace (pure;
the mounting itself runs in tests/integration/test_testcluster_gpu_hiding.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster_testcluster import config, gpus, nodeexec
from gpucluster_testcluster.config import ClusterSpec, Paths

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = (DATA / "nvidia_gpu_information_H200_representative_sample.txt").read_text()


def spec(**kw: object) -> ClusterSpec:
    base: dict[str, object] = {"controller_host": "ctl", "paths": Paths(state_dir=Path("/st"))}
    base.update(kw)
    return ClusterSpec(**base)  # type: ignore[arg-type]


def information(bus: str, minor: int) -> str:
    return SAMPLE.replace("0000:18:00.0", bus).replace("Device Minor: \t 2", f"Device Minor: \t {minor}")


def test_the_drivers_information_file_gives_bus_minor_uuid_and_model() -> None:
    gpu = gpus.parse_information(SAMPLE)
    assert gpu == gpus.Gpu(
        bus_id="0000:18:00.0", minor=2, uuid="GPU-5d3e1f0a-8b7c-4e2d-9a61-3c0f7b2e4d19", model="NVIDIA H200"
    )
    assert gpu.device == "/dev/nvidia2"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (SAMPLE.replace("Device Minor: \t 2\n", ""), "no number in 'Device Minor' (got '')"),
        (SAMPLE.replace("Device Minor: \t 2", "Device Minor: \t ?"), "no number in 'Device Minor' (got '?')"),
        (SAMPLE.replace("0000:18:00.0", "18:00"), "no PCI bus id in 'Bus Location' (got '18:00')"),
    ],
)
def test_an_information_file_without_bus_or_minor_is_refused_naming_it(text: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        gpus.parse_information(text, "/proc/x/information")
    assert str(info.value) == f"/proc/x/information: {why}"


def test_the_machines_gpus_come_in_pci_bus_order_whatever_their_minors(tmp_path: Path) -> None:
    # Minors out of bus order, as a driver may number them; a directory with no information file
    # (being torn down) is passed over.
    for bus, minor in [("0000:9a:00.0", 0), ("0000:18:00.0", 3), ("0000:ab:00.0", 1), ("0000:2a:00.0", 2)]:
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(information(bus, minor))
    (tmp_path / "0000:ff:00.0").mkdir()
    found = gpus.machine_gpus(tmp_path)
    assert [(g.bus_id, g.minor) for g in found] == [
        ("0000:18:00.0", 3),
        ("0000:2a:00.0", 2),
        ("0000:9a:00.0", 0),
        ("0000:ab:00.0", 1),
    ]
    assert gpus.machine_gpus(tmp_path / "absent") == ()


def test_only_gpus_with_a_device_file_here_count_else_the_device_files_alone(tmp_path: Path) -> None:
    listed = (gpus.Gpu("0000:18:00.0", 3), gpus.Gpu("0000:2a:00.0", 1))
    for name in ("nvidia1", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert gpus.with_device_files(listed, tmp_path) == listed
    # A container: the driver lists the host's GPUs, only one device file is here.
    (tmp_path / "nvidia3").unlink()
    assert gpus.with_device_files(listed, tmp_path) == (gpus.Gpu("0000:2a:00.0", 1),)
    # No driver list: the device files in minor order.
    (tmp_path / "nvidia0").touch()
    assert [g.minor for g in gpus.with_device_files((), tmp_path)] == [0, 1]


def test_real_nodes_own_a_share_in_bus_order_and_the_rest_is_hidden() -> None:
    # Minors in bus order 3, 2, 0, 1: node1 owns the first two GPUs of nvidia-smi's list.
    s = spec(nodes=2, gpus_per_node=2, gpu_mode="real", real_gpu_count=4, gpu_minors=(3, 2, 0, 1))
    assert s.node_devices(0) == ("/dev/nvidia3", "/dev/nvidia2")
    assert s.node_devices(1) == ("/dev/nvidia0", "/dev/nvidia1")
    # Out of order: the files in bus order, which is the order jobs number the node's GPUs.
    assert s.gpu_files(0) == "/dev/nvidia3,/dev/nvidia2"
    assert s.gpu_files(1) == "/dev/nvidia[0-1]"
    assert s.hidden_devices(0) == ("/dev/nvidia0", "/dev/nvidia1")
    assert s.hidden_devices(1) == ("/dev/nvidia3", "/dev/nvidia2")


def test_four_nodes_of_one_gpu_each_hide_the_three_others() -> None:
    s = spec(nodes=4, gpus_per_node=1, gpu_mode="real", real_gpu_count=4)
    assert [s.gpu_files(i) for i in range(4)] == [f"/dev/nvidia{i}" for i in range(4)]
    assert s.hidden_devices(1) == ("/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia3")


def test_a_gpu_no_node_owns_stays_visible_so_a_node_told_of_fewer_gpus_shows_it() -> None:
    # One node told of 3 of the machine's 4 GPUs (GPUS=3 tools/testbox-setup, a fault run).
    fewer = spec(nodes=1, gpus_per_node=3, gpu_mode="real", real_gpu_count=4)
    assert fewer.gpu_files(0) == "/dev/nvidia[0-2]" and fewer.hidden_devices(0) == ()
    two = spec(nodes=2, gpus_per_node=1, gpu_mode="real", real_gpu_count=4)
    assert two.hidden_devices(0) == ("/dev/nvidia1",) and two.hidden_devices(1) == ("/dev/nvidia0",)


def test_shared_gpus_hide_nothing() -> None:
    shared = spec(nodes=2, gpus_per_node=1, gpu_mode="real", real_gpu_count=4, shared_gpus=True)
    assert not shared.nodes_own_gpus and shared.hidden_devices(1) == ()
    too_few = spec(nodes=2, gpus_per_node=4, gpu_mode="real", real_gpu_count=4)
    assert too_few.hidden_devices(0) == () and too_few.gpu_files(1) == "/dev/nvidia[0-3]"
    fake_shared = spec(nodes=2, gpus_per_node=2, shared_gpus=True)
    assert fake_shared.fake_gpu_count == 2 and fake_shared.hidden_devices(0) == ()
    assert fake_shared.gpu_files(1) == "/st/dev/gpu[0-1]"


def test_fake_nodes_own_files_of_their_own_and_the_others_are_hidden() -> None:
    s = spec(nodes=2, gpus_per_node=2)
    assert s.fake_gpu_count == 4
    assert (s.gpu_files(0), s.gpu_files(1)) == ("/st/dev/gpu[0-1]", "/st/dev/gpu[2-3]")
    assert s.hidden_devices(0) == ("/st/dev/gpu2", "/st/dev/gpu3")
    assert s.hidden_devices(1) == ("/st/dev/gpu0", "/st/dev/gpu1")
    # Not /dev/null's numbers: a hidden file reads differently from an owned one.
    assert config.FAKE_GPU_DEVICE != (1, 3)
    # A node Slurm is told has no GPUs keeps its files; only its gres.conf line goes.
    hidden = spec(nodes=2, gpus_per_node=2, gpuless_nodes=("node2",))
    assert hidden.hidden_devices(0) == ("/st/dev/gpu2", "/st/dev/gpu3")
    assert "NodeName=node2" not in config.render_gres_conf(hidden)


def test_the_node_exec_takes_node_devices_and_command() -> None:
    assert nodeexec.split_args(["node1", "/dev/nvidia2", "--", "/usr/sbin/slurmd", "-N", "node1"]) == (
        "node1",
        ("/dev/nvidia2",),
        ("/usr/sbin/slurmd", "-N", "node1"),
    )
    assert nodeexec.split_args(["node1", "--", "/bin/true"]) == ("node1", (), ("/bin/true",))
    for bad in (["node1", "/bin/true"], ["--", "/bin/true"], ["node1", "--"], ["node1", "nvidia2", "--", "/x"]):
        with pytest.raises(ValueError):
            nodeexec.split_args(bad)
