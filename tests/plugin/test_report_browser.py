"""The report in a real browser: headless Chromium runs pytest-html's JavaScript, then we check the
rendered DOM, the pixels of a screenshot (kept as a CI artifact in build/artifacts/), that no block
is wider than its column from 1024 to 1600 px (measured in the page), and that the printed report's
first page is the handover sheet."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from pytest_gpucluster.report.html import render_page
from pytest_gpucluster.results import codec

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "artifacts"
SAMPLES = REPO / "docs" / "samples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PDFTOTEXT = shutil.which("pdftotext")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install --no-install-recommends chromium)"
)

# Four nodes of eight GPUs: a slow GPU, a hot GPU, a busbw series, a script in a place name, and
# NVLink CRC errors on every link of four GPUs of node1, one sentence per link and counter (144).
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

@pytest.mark.parametrize("host", NODES)
def test_fabric_counters(judge, host):
    judge.problems([f"{host}:gpu{g} link {link}: nvlink_crc_{kind}_errors rose 0 → {3 + g * link} "
                    f"(+{3 + g * link}, at most +0 allowed) over 1 min 35 s"
                    for g in range(4) for link in range(18) for kind in ("flit", "data") if host == "node1"],
                   "fabric error counters")

def test_all_reduce(judge, record):
    for n in NODES:
        record("series", name="all_reduce intra_node busbw", where=n, x_label="message size (bytes)",
               y_label="busbw (GB/s)", threshold=0.01, x_log=True,
               points=[[2**k, 0.02 * (k - 9) ** 1.2 * (0.9 if n == "node4" else 1)] for k in range(10, 24)])
    judge(Measurement("nccl.all_reduce.intra_node", 0.5, "GB/s", where="node1"))

def test_escaped(judge):
    judge(Measurement("gpu.temperature", 99, "C", where="node1:<script>document.title='pwned'</script>"))

@pytest.mark.gpu(8)
def test_needs_eight_gpus():
    pass
"""

# Added to a copy of a page: once the page's own script has run, open every folded list and list
# each element wider than its box or reaching past the window's right edge (its scrollWidth
# against its clientWidth, its right edge against the document's width), then the per-GPU maps.
PROBE = """<script>
addEventListener('load', () => setTimeout(() => {
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  const root = document.documentElement;
  const width = root.clientWidth;
  const wide = [];
  if (root.scrollWidth > width + 1) wide.push(['page', root.scrollWidth, width]);
  for (const el of document.querySelectorAll('td, th, li, table, figure, section, .gc-scroll')) {
    if (el.closest('.gc-log, .log, template')) continue;
    const box = el.getBoundingClientRect();
    if (box.width === 0) continue;
    if (el.scrollWidth > el.clientWidth + 1 || box.right > width + 1) {
      wide.push([el.tagName + '.' + el.className, el.scrollWidth, el.clientWidth, (el.textContent || '').slice(0, 80)]);
    }
  }
  const found = {wide: wide, width: width, maps: document.querySelectorAll('#gc-gpu-map table.gc-heat').length};
  const out = document.createElement('pre');
  out.id = 'gc-probe';
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
}, 300));
</script>"""

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


def _probe(page: Path, width: int, tmp_path: Path) -> tuple[dict, str]:
    """The probe's findings and the DOM of ``page`` in a window ``width`` px wide."""
    probed = tmp_path / f"probe-{width}-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = _chromium(
        f"--window-size={width},1200",
        "--virtual-time-budget=8000",
        "--dump-dom",
        probed.as_uri(),
        profile=tmp_path / f"p-{width}-{page.stem}",
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="gc-probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, "the probe did not run"
    return json.loads(html.unescape(found.group(1))), dom.stdout


def _first_page(page: Path, tmp_path: Path, last: int = 1) -> str:
    """The text of the first page (to ``last``) of ``page`` printed to PDF (A4, as the style
    sheet asks)."""
    pdf = tmp_path / f"{page.stem}.pdf"
    printed = _chromium(
        "--no-pdf-header-footer",
        "--virtual-time-budget=5000",
        f"--print-to-pdf={pdf}",
        page.as_uri(),
        profile=tmp_path / f"pdf-{page.stem}",
    )
    assert printed.returncode == 0 and pdf.is_file(), printed.stderr[-2000:]
    assert PDFTOTEXT is not None
    text = subprocess.run(
        [PDFTOTEXT, "-f", "1", "-l", str(last), "-layout", str(pdf), "-"], capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0, text.stderr
    return text.stdout


@pytest.fixture
def report(gpc: pytest.Pytester) -> Path:
    gpc.makepyfile(test_cluster=SUITE)
    gpc.runpytest_subprocess("--html=report.html", "--self-contained-html", "--gpucluster-results=results.json")
    return gpc.path / "report.html"


def _standalone(name: str, tmp_path: Path) -> Path:
    """The standalone page of a results file of docs/samples."""
    page = tmp_path / f"{name}.html"
    page.write_text(render_page(codec.with_verdicts(codec.load(SAMPLES / f"results-{name}.json"))), encoding="utf-8")
    return page


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
    # 144 sentences of one counter family: one line per counter, with its count and a link
    failures = re.search(r'<h3 id="gc-failures">Failures</h3>(.*?)</ul>', page, re.S)
    assert failures
    crc = [li for li in re.findall(r"<li>(.*?)</li>", failures.group(1), re.S) if "nvlink_crc" in li]
    assert len(crc) == 2 and all("node1:gpu0–3 link 0–17: nvlink_crc_" in li and "×72" in li for li in crc)
    link = re.search(r'href="#(gc-t-\w+)"', crc[0])
    assert link and f'id="{link.group(1)}"' in page  # the details it links to are in the page
    # pytest-html's filter counts in the suite's words: the same numbers as the chips above
    assert ">7 passed</span>" in page and ">1 passed with warnings</span>" in page
    assert "8 Passed (7 passed, 1 passed with warnings)," in page and "1 Not applicable," in page

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


@pytest.mark.parametrize("sample", ["pytest-html-4x8", "4xh200-slurm", "64node-synthetic"])
def test_every_block_holds_its_column_from_1024_to_1600_px(
    sample: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """pytest-html's page of a 4-node suite, and the standalone pages of a real 1 × 4 H200 run and
    of the synthetic 64 × 8 cluster: at 1024 and 1600 px, with every folded list open, no cell,
    list or table is wider than its box and nothing reaches past the window; the per-GPU map is
    there; no Python literal is anywhere in the page."""
    page = request.getfixturevalue("report") if sample.startswith("pytest-html") else _standalone(sample, tmp_path)
    for width in (1024, 1600):
        found, dom = _probe(page, width, tmp_path)
        assert found["wide"] == [], f"{sample} at {width} px: {found['wide'][:5]}"
        assert found["maps"] >= 2, f"{sample}: no per-GPU map"
    assert "{'" not in dom and "{&#39;" not in dom


@pytest.mark.skipif(PDFTOTEXT is None, reason="pdftotext is not installed (Debian: apt-get install poppler-utils)")
def test_the_printed_report_opens_with_the_handover_sheet(report: Path, tmp_path: Path) -> None:
    """Printed to PDF, page 1 holds the verdict, the nodes accepted as a hostlist, the exclusions,
    the key figures against their lines, the thresholds' hash, the tool's version and its page
    number of the whole; a run that is not an acceptance has no signature boxes, an ACCEPTED one
    has two; the details start after the sheet."""
    first = _first_page(_standalone("64node-synthetic", tmp_path), tmp_path)
    for said in (
        "REJECTED",
        "60 of 64: gpu-[001-016,018-032,034-050,052-059,061-064]",
        "rejected: gpu-[017,033,051]",
        "not judged in full: gpu-060",
        "compute.matmul_bf16",
        "410 TFLOP/s",
        "fail < 600 TFLOP/s,",
        "sha256 " + "0" * 64,
        "pytest-gpucluster 0.1.0",
        "page 1 of ",
    ):
        assert said in first, f"{said!r} not on page 1:\n{first}"
    assert "Signature:" not in first
    assert "Nodes × checks" not in first and "Per GPU" not in first
    # an ACCEPTED sheet: its list of what was not tested may take it past page 1; it ends with
    # the signatures before the details begin
    sheet = _first_page(_standalone("h100-2node-shared-gpu", tmp_path), tmp_path, last=3)
    assert sheet.startswith("GPU cluster acceptance") and "ACCEPTED" in sheet[:400]
    for said in ("Not tested, and why", "Customer", "Provider", "Signature:", "page 1 of ", "page 2 of "):
        assert said in sheet, f"{said!r} not on pages 1-3:\n{sheet}"
    assert "Nodes × checks" not in sheet[: sheet.index("Signature:")]
    # pytest-html's page too: its own blocks are reordered around the summary
    first = _first_page(report, tmp_path)
    assert "REJECTED" in first and "Key figures against their lines" in first and "Signature:" not in first
    assert "Environment" not in first and "Failures" not in first
