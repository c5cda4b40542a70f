"""The HTML report in a real headless browser (Debian's chromium).

Renders a report with telemetry, takes a screenshot and dumps the DOM. Without chromium the
test is skipped, unless CI is set: then scripts/ensure-browser.sh installs it first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envkit.certify.report import write_reports

from ..unit.certify.test_certificate import build, cpu_doc, gpu_doc, set_check

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ENSURE = ROOT / "scripts" / "ensure-browser.sh"
XSS = "<script>document.title='pwned'</script>"


def find_chromium() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    browser = find_chromium()
    if browser is None and os.environ.get("CI"):
        proc = subprocess.run([str(ENSURE)], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"scripts/ensure-browser.sh failed:\n{proc.stderr[-3000:]}"
        browser = find_chromium()
    if browser is None:
        pytest.skip("chromium is not installed (run scripts/ensure-browser.sh, or set CI=1 to install it)")
    return browser


def headless(browser: str, profile: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={profile}", *args]
    env = {**os.environ, "HOME": str(profile)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    second = {"index": 1, "name": "NVIDIA H200", "cc": "9.0", "memory_gib": 139.8}
    certs = [
        build(gpu_doc(gpus=({"index": 0, "name": "NVIDIA H200", "cc": "9.0", "memory_gib": 139.8}, second))),
        build(set_check(gpu_doc(), "dataloader", "failed", f"workers died {XSS}")),
        build(cpu_doc(), gpu_requested=False),
    ]
    out = tmp_path_factory.mktemp("report")
    return write_reports(certs, out, generated_at="2025-06-02T08:00:00Z")["html"]


def test_report_renders_in_headless_chromium(chromium, report, tmp_path):
    dom = headless(chromium, tmp_path / "profile-dom", "--dump-dom", report.as_uri())
    assert dom.returncode == 0, dom.stderr[-3000:]
    html = dom.stdout
    assert '<table id="summary">' in html
    rows = html.count('<tr class="summary-row')
    assert rows == 3, html[:2000]
    for status in ("certified", "failed", "verified"):
        assert f"summary-row row-{status}" in html
    assert "<svg" in html and "<polyline" in html
    assert "<title>envkit certification report</title>" in html  # the escaped <script> did not run
    assert "&lt;script&gt;" in html
    # the verification without a GPU reads as such, never as a GPU model called "none"
    assert "without a GPU (CPU only)" in html and "no GPU (CPU only)" in html and "on none" not in html

    png = tmp_path / "report.png"
    shot = headless(chromium, tmp_path / "profile-shot", f"--screenshot={png}", "--window-size=1280,2000",
                    "--hide-scrollbars", report.as_uri())
    assert shot.returncode == 0, shot.stderr[-3000:]
    assert png.is_file(), shot.stderr[-3000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10 * 1024, f"screenshot is only {len(data)} bytes"
