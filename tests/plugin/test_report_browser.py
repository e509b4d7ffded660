"""The report in a real browser: headless Chromium runs pytest-html's JavaScript, then we check the
rendered DOM and the pixels of a screenshot (kept as a CI artifact in build/artifacts/)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install --no-install-recommends chromium)"
)

SUITE = """
import pytest
from pytest_gpucluster.verdict import Measurement

NODES = ["node1", "node2", "node3", "node4"]

def test_matmul(judge):
    judge.all([Measurement("compute.fraction_of_node_median", 0.2 if (n, g) == ("node3", 5) else 0.9 + 0.01 * g,
                           "ratio", where=f"{n}:gpu{g}") for n in NODES for g in range(8)])

@pytest.mark.parametrize("host", NODES)
def test_gpu_health(judge, host):
    judge.all([Measurement("gpu.temperature", 40 + g + (38 if host == "node2" and g == 0 else 0), "C",
                           where=f"{host}:gpu{g}") for g in range(8)])

def test_all_reduce(judge, record):
    for n in NODES:
        record("series", name="all_reduce intra_node busbw", where=n, x_label="message size (bytes)",
               y_label="busbw (GB/s)", threshold=0.01, x_log=True,
               points=[[2**k, 0.02 * (k - 9) ** 1.2 * (0.9 if n == "node4" else 1)] for k in range(10, 24)])
    judge(Measurement("nccl.all_reduce.intra_node", 0.5, "GB/s", where="node1"))

def test_escaped(judge):
    judge(Measurement("gpu.temperature", 99, "C", where="node1:<script>document.title='pwned'</script>"))
"""

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of raw pixels of an 8-bit, non-interlaced RGB/RGBA PNG (what
    Chromium writes): enough to tell a rendered page from a blank one, without PIL."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


@pytest.fixture
def report(gpc: pytest.Pytester) -> Path:
    gpc.makepyfile(test_cluster=SUITE)
    gpc.runpytest_subprocess("--html=report.html", "--self-contained-html", "--results=results.json")
    return gpc.path / "report.html"


def test_report_renders_in_chromium(report: Path, tmp_path: Path) -> None:
    url = report.as_uri()
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", url, profile=tmp_path / "p1")
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = dom.stdout
    assert '<div class="gc-word">REJECTED</div>' in page
    assert 'id="gc-matrix"' in page and page.count('class="gc-cell gc-s-fail"') >= 2
    assert page.count('src="data:image/svg+xml;base64,') == 3
    # rows exist only after pytest-html's script ran: the table is built from JSON in the browser
    assert page.count('class="results-table-row') >= 7
    assert 'class="col-measured">0.2 ratio (worst of 32)</td>' in page
    # the place name that tried to set the title stayed text: no script of a run ever executes
    assert '<title id="head-title">GPU cluster acceptance: local</title>' in page

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-screenshot.png"
    taken = _chromium(
        "--screenshot=" + str(shot),
        "--window-size=1400,2400",
        "--virtual-time-budget=5000",
        url,
        profile=tmp_path / "p2",
    )
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    shutil.copy(report, ARTIFACTS / "report-example.html")
    data = shot.read_bytes()
    assert len(data) > 50_000, "a blank page compresses to a few kB"
    width, height, rows = png_pixels(data)
    assert (width, height) == (1400, 2400)
    colours = {row[x : x + 3] for row in rows[::8] for x in range(0, width * 3, 24)}
    assert len(colours) > 100, f"only {len(colours)} colours: the page did not render"
    # the red REJECTED banner is on screen near the top
    red = [1 for row in rows[:500:4] for x in range(0, width * 3, 12) if row[x] > 180 and max(row[x + 1 : x + 3]) < 80]
    banner = len(red)
    assert banner > 500
