"""The reports render with their figures in a real browser (headless Chromium screenshots)."""

import os
import shutil
import subprocess

import matplotlib.image as mpimg
import pytest

from kvlab import reports

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: `make test` installs it with apt (needs root)")
        pytest.skip("chromium not installed (run `make browser`)")
    return CHROMIUM


def screenshot(browser, page, png, tmp_path, height=1400):
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", f"--window-size=1200,{height}",
         f"--screenshot={png}", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    return mpimg.imread(png)


def test_index_and_report_render_with_figures(browser, tmp_path):
    out = tmp_path / "reports"
    reports.build(out, selected=["01"])
    index = screenshot(browser, out / "index.html", tmp_path / "index.png", tmp_path, height=600)
    assert index.shape[0] == 600 and index.std() > 0.01  # not a blank page
    page = screenshot(browser, out / "01_context_scaling.html", tmp_path / "report.png", tmp_path, height=2400)
    rgb = page[..., :3]
    # the engines' bar colours (vLLM blue #3b75af, SGLang orange #e1812c) are on screen: the figure rendered
    blue = ((abs(rgb[..., 0] - 0x3B / 255) < 0.04) & (abs(rgb[..., 1] - 0x75 / 255) < 0.04)
            & (abs(rgb[..., 2] - 0xAF / 255) < 0.04)).sum()
    orange = ((abs(rgb[..., 0] - 0xE1 / 255) < 0.04) & (abs(rgb[..., 1] - 0x81 / 255) < 0.04)
              & (abs(rgb[..., 2] - 0x2C / 255) < 0.04)).sum()
    assert blue > 2000 and orange > 2000, (blue, orange)
