"""``--gpucluster-metrics``: a run writes its verdicts and figures where node_exporter's textfile
collector reads them, and the real node_exporter (Debian's, unpacked by ``tools/setup --dev``)
serves them without a scrape error; the file a results file gives through ``python -m
pytest_gpucluster metrics`` is the same; an unwritable path stops the run before any check."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXPORTER = REPO / "build" / "node-exporter" / "usr" / "bin" / "prometheus-node-exporter"

ONE_SLOW_GPU = """
from pytest_gpucluster.verdict import Measurement

def test_speed(judge):
    judge.all([Measurement("compute.fraction_of_node_median", 0.1 if g == 2 else 0.98, "ratio", where=f"node1:gpu{g}")
               for g in range(4)])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(textfile_dir: Path) -> str:
    """What node_exporter, with its textfile collector alone, serves for ``textfile_dir``."""
    if not EXPORTER.is_file():
        pytest.fail(f"{EXPORTER} is missing: run tools/setup --dev")
    port = _free_port()
    argv = [
        str(EXPORTER),
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile_dir}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
                    return page.read().decode()
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_runs_metrics_are_served_by_node_exporter_and_match_the_results_file(gpc):
    gpc.makepyfile(test_cluster=ONE_SLOW_GPU)
    result = gpc.runpytest_subprocess("--gpucluster-results=r.json", "--gpucluster-metrics=textfile/gpucluster.prom")
    assert result.ret == 1, result.stdout.str()[-2000:]
    written = (gpc.path / "textfile" / "gpucluster.prom").read_text()
    served = _scrape(gpc.path / "textfile")
    assert "node_textfile_scrape_error 0" in served, served[-2000:]
    assert 'gpucluster_run_verdict{profile="local",verdict="REJECTED"} 1' in served
    slow = 'metric="compute.fraction_of_node_median",node="node1",unit="ratio",where="node1:gpu2"'
    assert 'gpucluster_measurement{check="test_speed",gpu="2",' + slow + "} 0.1" in served
    # The same file from the results file afterwards.
    again = gpc.run(sys.executable, "-m", "pytest_gpucluster", "metrics", "r.json", "-o", "again.prom")
    assert again.ret == 0 and (gpc.path / "again.prom").read_text() == written


def test_a_metrics_path_that_cannot_be_written_stops_the_run_before_any_check(gpc):
    gpc.makepyfile(test_cluster=ONE_SLOW_GPU)
    (gpc.path / "textfile").mkdir()
    result = gpc.runpytest_subprocess("--gpucluster-metrics=textfile")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gpucluster-metrics=textfile: " in result.stderr.str() and "is a folder; name a file in it" in (
        result.stderr.str()
    )
    assert "test_speed" not in result.stdout.str()


def test_metrics_of_a_file_that_is_no_results_file_is_an_error_naming_it(gpc):
    (gpc.path / "r.json").write_text("{}")
    done = gpc.run(sys.executable, "-m", "pytest_gpucluster", "metrics", "r.json")
    assert done.ret == 1 and "r.json: not a pytest-gpucluster results file" in done.stderr.str()


def test_a_dry_run_leaves_the_last_runs_metrics_file_as_it_is(gpc):
    gpc.makepyfile(test_cluster=ONE_SLOW_GPU)
    (gpc.path / "last.prom").write_text("# the last real run's\n")
    result = gpc.runpytest_subprocess("--gpucluster-dry-run", "--gpucluster-metrics=last.prom")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert (gpc.path / "last.prom").read_text() == "# the last real run's\n"
