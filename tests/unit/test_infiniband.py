"""InfiniBand port checks on fake sysfs trees laid out like /sys/class/infiniband."""

from __future__ import annotations

from pathlib import Path

from pytest_gpucluster.checks import infiniband as infiniband_checks
from pytest_gpucluster.verdict import Finding
from pytest_gpucluster.workloads import infiniband
from pytest_gpucluster.workloads.context import local_context

NDR = "400 Gb/sec (4X NDR)"


def _tree(root: Path, devices: dict[str, tuple[str, str, str, str]]) -> str:
    """One port per device: (state, phys_state, rate, link_layer), as the kernel writes them."""
    for device, (state, phys, rate, layer) in devices.items():
        port = root / device / "ports" / "1"
        port.mkdir(parents=True)
        for name, text in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)):
            (port / name).write_text(text + "\n")
    return str(root)


def _healthy(n: int = 8) -> dict[str, tuple[str, str, str, str]]:
    return {f"mlx5_{i}": ("4: ACTIVE", "5: LinkUp", NDR, "InfiniBand") for i in range(n)}


def _found(root: str) -> list[Finding]:
    node = infiniband.read_node(local_context(), root=root)
    return infiniband_checks.findings(node, hcas=8, rate_gbps=400, link_layer="InfiniBand")


def _check(root: str) -> list[str]:
    return [f.text for f in _found(root)]


def _host() -> str:
    return local_context().hostname


def test_healthy_node(tmp_path):
    root = _tree(tmp_path, {**_healthy(), "mlx5_bond_0": ("4: ACTIVE", "5: LinkUp", "100 Gb/sec", "Ethernet")})
    ports = infiniband.read_ports(root)
    assert len(ports) == 9
    assert ports[0] == infiniband.IbPort("mlx5_0", "1", "4: ACTIVE", "5: LinkUp", NDR, "InfiniBand")
    assert ports[0].rate_gbps == 400.0
    assert _check(root) == []


def test_one_port_down(tmp_path):
    devices = _healthy()
    devices["mlx5_3"] = ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand")
    (found,) = _found(_tree(tmp_path, devices))
    assert found.text == f"{_host()}:mlx5_3/1: state '1: DOWN', phys_state '3: Disabled'; expected ACTIVE / LinkUp"
    assert (found.scope, found.nodes, found.culprits, found.port) == ("port", (_host(),), (_host(),), "mlx5_3/1")


def test_wrong_rate(tmp_path):
    devices = _healthy()
    devices["mlx5_5"] = ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand")
    (found,) = _found(_tree(tmp_path, devices))
    assert found.text == f"{_host()}:mlx5_5/1: rate '200 Gb/sec (4X HDR)', expected 400 Gb/s"
    assert (found.scope, found.port, found.place) == ("port", "mlx5_5/1", f"{_host()} mlx5_5/1")


def test_missing_hca_and_wrong_link_layer(tmp_path):
    devices = _healthy(7)
    devices["mlx5_7"] = ("4: ACTIVE", "5: LinkUp", NDR, "Ethernet")
    assert _check(_tree(tmp_path, devices)) == [
        f"{_host()}: 7 InfiniBand HCA(s) (mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6); "
        "also mlx5_7 (Ethernet), expected 8"
    ]


def test_no_infiniband_at_all(tmp_path):
    absent = str(tmp_path / "absent")
    (found,) = _found(absent)
    assert (
        found.text == f"{_host()}: no RDMA device under {absent} (is the HCA driver, e.g. mlx5_ib, loaded?), expected 8"
    )
    assert (found.scope, found.culprits, found.port) == ("node", (_host(),), "")
    node = infiniband.read_node(local_context(), root=absent)
    assert infiniband_checks.findings(node, hcas=0, rate_gbps=400, link_layer="InfiniBand") == []
