"""The HTML dossier in a real browser: headless Chromium shows the verdict and the plots, no console errors.

Needs Debian's `chromium` (installed by .ci/run); skipped cleanly without it. The screenshot is
decoded with a small PNG reader below (zlib + numpy), so no imaging library is needed.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

import tests.report.results as fx
from gate.report import build_report, render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.chromium, pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]
WINDOW = (1000, 3600)
BANNER = {"bad": (198, 40, 40), "good": (26, 127, 55)}
SERIES = (31, 95, 174)  # the |Δlogit| polyline (#1f5fae)
TIE = (224, 161, 0)  # tie diamonds (#e0a100)


def chromium(page: Path, profile: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run with a fresh profile; console messages arrive on stderr."""
    assert CHROMIUM is not None
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *mode, page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def read_png(path: Path) -> np.ndarray:
    """RGB(A) pixels of an 8-bit, non-interlaced PNG as [H, W, C] uint8."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks = 8, []
    width = height = depth = color = interlace = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
    assert depth == 8 and interlace == 0 and color in (2, 6), (depth, color, interlace)
    channels = 3 if color == 2 else 4
    stride = width * channels
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), np.uint8).reshape(height, stride + 1)
    pixels = np.zeros((height, stride), np.uint8)
    prev = np.zeros(stride, np.uint8)
    for y in range(height):
        kind, line = int(raw[y, 0]), raw[y, 1:]
        if kind == 0:
            row = line.copy()
        elif kind == 1:  # Sub: running sum along the row, per channel
            row = (np.cumsum(line.reshape(width, channels).astype(np.int64), axis=0) % 256).astype(np.uint8)
            row = row.reshape(stride)
        elif kind == 2:  # Up
            row = (line.astype(np.uint16) + prev).astype(np.uint8)
        else:  # Average or Paeth: sequential along the row
            cur, up = bytearray(line.tobytes()), prev.tobytes()
            for i in range(stride):
                a = cur[i - channels] if i >= channels else 0
                b = up[i]
                c = up[i - channels] if i >= channels else 0
                if kind == 3:
                    cur[i] = (cur[i] + ((a + b) >> 1)) & 255
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            row = np.frombuffer(bytes(cur), np.uint8)
        pixels[y] = row
        prev = row
    return pixels.reshape(height, width, channels)[:, :, :3]


def count(image: np.ndarray, rgb: tuple[int, int, int]) -> int:
    return int(np.all(image == np.array(rgb, np.uint8), axis=-1).sum())


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "dossier.html"
    path.write_text(render_html(build_report(fx.failing_parity_run())), encoding="utf-8")
    return path


def test_console_errors_are_detected(tmp_path: Path) -> None:
    """Positive control for the console check below: a page that logs an error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!doctype html><p>x</p><script>console.error("planted"); missing();</script>')
    stderr = chromium(bad, tmp_path / "profile", "--dump-dom").stderr
    messages = console_messages(stderr)
    assert any("planted" in m for m in messages) and any("missing" in m for m in messages)


def test_failing_dossier_shows_verdict_and_plots(page: Path, tmp_path: Path) -> None:
    dom = chromium(page, tmp_path / "dom-profile", "--dump-dom")
    assert console_messages(dom.stderr) == []
    html = dom.stdout
    assert 'data-verdict="error"' in html and ">ERROR<" in html and ">UNSIGNED<" in html
    assert 'data-plot="prefix-sweep"' in html and html.count("<circle") >= 9
    assert "first failed at prefix length 512" in html and "positional-index" in html

    shot = tmp_path / "dossier.png"
    run = chromium(page, tmp_path / "shot-profile", f"--screenshot={shot}", "--window-size={},{}".format(*WINDOW))
    assert console_messages(run.stderr) == []
    image = read_png(shot)
    assert image.shape[:2] == (WINDOW[1], WINDOW[0])
    assert tuple(image[8, 8]) == BANNER["bad"]  # the red verdict banner fills the top
    assert count(image[:120], BANNER["bad"]) > WINDOW[0] * 60
    assert count(image, SERIES) > 300, "the |Δlogit| polyline was not painted"
    assert count(image, TIE) > 20, "the tie marker was not painted"


def test_passing_banner_is_green_and_hostile_strings_do_nothing(tmp_path: Path) -> None:
    passing = tmp_path / "passing.html"
    passing.write_text(render_html(build_report(fx.passing_run())), encoding="utf-8")
    shot = tmp_path / "passing.png"
    run = chromium(passing, tmp_path / "p1", f"--screenshot={shot}", "--window-size=800,200")
    assert console_messages(run.stderr) == []
    assert tuple(read_png(shot)[8, 8]) == BANNER["good"]

    hostile = tmp_path / "hostile.html"
    hostile.write_text(render_html(build_report(fx.hostile_run())), encoding="utf-8")
    dom = chromium(hostile, tmp_path / "p2", "--dump-dom")
    assert console_messages(dom.stderr) == [], "an injected script ran or was blocked by the CSP"
    assert "<script" not in dom.stdout and "<img" not in dom.stdout


# The four dossiers a reviewer meets: failing, awaiting approval, approved, waived -----------------

NEXT_BORDER = (37, 99, 235)  # the What-next box's border (#2563eb)
AWAIT = (91, 63, 168)  # the awaiting-approval banner and box (--await)
DOSSIERS = {
    "failing": lambda: build_report(fx.window_sweep_run(), out_dir="out/window"),
    "awaiting": lambda: build_report(fx.awaiting_run(), out_dir="out/kv-int8"),
    "approved": lambda: build_report(fx.awaiting_run(), approvals=[fx.APPROVAL], out_dir="out/kv-int8"),
    "waived": lambda: build_report(fx.waived_run(), out_dir="out/layout"),
}


def visible_text(dom: str) -> str:
    """The DOM's text outside <details> that is closed (what a reader sees without clicking)."""
    import re

    shown = re.sub(r"<details(?![^>]*\bopen\b)[^>]*>.*?</details>", "", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", shown))


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, np.ndarray]]:
    """Each dossier rendered, its DOM as Chromium built it and its screenshot (kept under the tmp dir)."""
    out: dict[str, tuple[str, np.ndarray]] = {}
    for name, build in DOSSIERS.items():
        where = tmp_path_factory.mktemp(name)
        page = where / "dossier.html"
        page.write_text(render_html(build()), encoding="utf-8")
        dom = chromium(page, where / "dom", "--dump-dom")
        assert console_messages(dom.stderr) == []
        shot = where / f"{name}.png"
        run = chromium(page, where / "shot", f"--screenshot={shot}", "--window-size=1000,1400")
        assert console_messages(run.stderr) == []
        out[name] = (dom.stdout, read_png(shot))
    return out


def test_failing_dossier_says_what_next_and_folds_rows_with_a_note(shots: dict[str, tuple[str, np.ndarray]]) -> None:
    dom, image = shots["failing"]
    text = visible_text(dom)
    assert tuple(image[8, 8]) == BANNER["bad"]
    assert count(image[:1400], NEXT_BORDER) > 1500, "the What-next box is not on the first screen"
    assert "What next" in text
    assert "gate run examples/change.yaml --out out/window-prefix-sweep --check prefix-sweep -v" in text
    assert "--param prefix-sweep.every_length_up_to=2107" in text  # the wider sweep, up to the first failure
    assert "rows folded (all passing)" in text and 'data-folded="' in dom  # the note, visible without a click
    assert "2107" in text and "2048" in text  # the failing row and the layout boundary stay
    evidence = dom[dom.index('id="checks"') :]
    assert evidence.index('data-status="fail"') < evidence.index('data-status="pass"')  # failing first


def test_awaiting_dossier_gives_the_exact_approve_command(shots: dict[str, tuple[str, np.ndarray]]) -> None:
    dom, image = shots["awaiting"]
    text = visible_text(dom)
    assert tuple(image[8, 8]) == AWAIT and ">AWAITING APPROVAL<" in dom
    assert count(image[:1400], AWAIT) > WINDOW[0] * 60 + 1500  # banner plus the box's border
    assert "gate approve out/kv-int8 --key YOUR.key --reason 'why this envelope is acceptable'" in text
    assert 'href="samples/long-range-retrieval.jsonl"' in dom  # the samples behind the bound
    assert "4.12e-06" in text and "0.0000" not in text


def test_approved_dossier_says_approved_and_nothing_is_left_to_do(shots: dict[str, tuple[str, np.ndarray]]) -> None:
    dom, image = shots["approved"]
    text = visible_text(dom)
    assert tuple(image[8, 8]) == BANNER["good"] and ">APPROVED<" in dom
    assert "approved for release by alice" in text
    assert "waits for" not in text and "AWAITING" not in text
    assert "What next" not in text and count(image, NEXT_BORDER) == 0


def test_waived_dossier_says_when_the_waiver_runs_out(shots: dict[str, tuple[str, np.ndarray]]) -> None:
    dom, image = shots["waived"]
    text = visible_text(dom)
    assert tuple(image[8, 8]) == (31, 95, 139) and ">PASS WITH WAIVERS<" in dom  # --waived
    assert count(image[:1400], NEXT_BORDER) > 1500
    assert "Fix invalidation before its waiver expires on 2025-03-01" in text
    assert "gate run examples/change.yaml --out out/layout-invalidation --check invalidation" in text
    assert "WAIVED" in text
