"""Every report, as a reader's browser shows it: rendered in headless Chromium, checked in its DOM and on screen.

The whole set is built once (the real data under data/, whatever it holds) and each page is checked for what
issue #13 asks of every report: provenance first, a verdict box, no raw dataframe or error output, every figure
with alt text and a sentence, nothing wider than the page.
"""

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import matplotlib.image as mpimg
import pytest

from kvlab import reports

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NOTEBOOKS = [p.stem for p in reports.notebooks()]
WIDTH = 1200


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: `make test` installs it with apt (needs root)")
        pytest.skip("chromium not installed (run `make browser`)")
    return CHROMIUM


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    reports.build(out)
    return out


def _chromium(browser, page, profile, *args):
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--hide-scrollbars", *args, page.as_uri()],
        check=True, capture_output=True, timeout=120, text=True,
    )


def screenshot(browser, page, png, tmp_path, height=1400):
    _chromium(browser, page, tmp_path / "profile", f"--window-size={WIDTH},{height}", f"--screenshot={png}")
    return mpimg.imread(png)


#: Injected into a copy of a page: after layout, list every element that reaches past the window's right edge
#: outside a sideways-scrolling table wrapper, and whether the page itself scrolls sideways.
OVERFLOW_PROBE = """<script>
window.addEventListener('load', () => {
  const w = document.documentElement.clientWidth, bad = [];
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > w + 1 && !el.closest('.kvlab-table-wrap'))
      bad.push(`${el.tagName}.${el.className}: ${Math.round(r.right)}px "${(el.textContent || '').slice(0, 60)}"`);
  }
  const out = document.createElement('pre'); out.id = 'kvlab-overflow';
  out.textContent = JSON.stringify({page: document.documentElement.scrollWidth, window: w, bad: bad.slice(0, 8)});
  document.body.appendChild(out);
});
</script>"""


def overflow(browser, page, tmp_path):
    probe = page.with_name(f"probe_{page.name}")
    probe.write_text(page.read_text().replace("</body>", OVERFLOW_PROBE + "</body>"))
    dom = _chromium(browser, probe, tmp_path / "profile", f"--window-size={WIDTH},900",
                    "--virtual-time-budget=5000", "--dump-dom").stdout
    probe.unlink()
    found = re.search(r'<pre id="kvlab-overflow">(.*?)</pre>', dom, re.S)
    assert found, "the overflow probe did not run"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


class _Page(HTMLParser):
    """The visible text of a page (no script/style), its figures and images, and stderr output blocks."""

    def __init__(self):
        super().__init__()
        self.text, self.skip, self.imgs, self.figures, self.stderr = [], 0, [], [], 0
        self._figure = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "style"):
            self.skip += 1
        if tag == "figure":
            self._figure = {"alt": None, "caption": ""}
        if tag == "img" and (a.get("src") or "").startswith("data:image"):
            self.imgs.append(a.get("alt"))
            if self._figure is not None:
                self._figure["alt"] = a.get("alt")
        if a.get("data-mime-type") == "application/vnd.jupyter.stderr":
            self.stderr += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip -= 1
        if tag == "figure" and self._figure is not None:
            self.figures.append(self._figure)
            self._figure = None

    def handle_data(self, data):
        if not self.skip:
            self.text.append(data)
            if self._figure is not None:
                self._figure["caption"] += data


def parse(page) -> _Page:
    p = _Page()
    p.feed(page.read_text())
    p.visible = " ".join(" ".join(p.text).split())
    return p


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_report_reads_without_the_code(built, name):
    """No raw dataframe output, no error or warning, every figure with alt text and its sentence, provenance
    and verdicts first."""
    page = built / f"{name}.html"
    p = parse(page)
    for raw in ("Traceback", "dtype", "shape: (", "┌─", "Warning:", "null", "NaN"):
        assert raw not in p.visible, f"{name}: {raw!r} on the page: …{p.visible[max(0, p.visible.find(raw) - 80):][:200]}…"
    assert p.stderr == 0, f"{name}: {p.stderr} stderr output block(s) on the page"
    assert p.imgs and all(p.imgs), f"{name}: an image without alt text"
    assert len(p.figures) == len(p.imgs), f"{name}: an image outside a <figure> with a caption"
    for f in p.figures:
        assert re.match(r"Figure \d+\. \S", f["caption"].strip()) and len(f["caption"]) > 40, f
    text = page.read_text()
    assert text.index('class="kvlab-provenance"') < text.index('class="kvlab-verdicts"') < text.index("<h2")
    assert not re.search(r'<script[^>]*src="http', text)  # self-contained: nothing fetched to read it


@pytest.mark.parametrize("name", NOTEBOOKS + ["index"])
def test_nothing_is_wider_than_the_page(browser, built, name, tmp_path):
    found = overflow(browser, built / f"{name}.html", tmp_path)
    assert found["page"] <= found["window"] and not found["bad"], found


def test_index_shows_every_report_with_its_verdicts(built):
    index = (built / "index.html").read_text()
    for name in NOTEBOOKS:
        assert f'href="{name}.html"' in index
    assert index.count('class="kvlab-verdicts"') == len(NOTEBOOKS)
    assert "<h2>Runs measured</h2>" in index and "`" not in parse(built / "index.html").visible


def test_index_and_report_render_with_figures(browser, built, tmp_path):
    index = screenshot(browser, built / "index.html", tmp_path / "index.png", tmp_path, height=600)
    assert index.shape[0] == 600 and index.std() > 0.01  # not a blank page
    page = screenshot(browser, built / "01_context_scaling.html", tmp_path / "report.png", tmp_path, height=2400)
    rgb = page[..., :3]
    # the engines' bar colours (vLLM blue #3b75af, SGLang orange #e1812c) are on screen: the figure rendered
    blue = ((abs(rgb[..., 0] - 0x3B / 255) < 0.04) & (abs(rgb[..., 1] - 0x75 / 255) < 0.04)
            & (abs(rgb[..., 2] - 0xAF / 255) < 0.04)).sum()
    orange = ((abs(rgb[..., 0] - 0xE1 / 255) < 0.04) & (abs(rgb[..., 1] - 0x81 / 255) < 0.04)
              & (abs(rgb[..., 2] - 0x2C / 255) < 0.04)).sum()
    assert blue > 2000 and orange > 2000, (blue, orange)
