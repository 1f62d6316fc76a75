"""Every report, as a reader's browser shows it: rendered in headless Chromium, checked in its DOM and on screen.

The whole set is built once (conftest.built_reports: default parameters, the real measured runs of tests/fixtures,
so the measured sections are on the page on every machine) and each page is checked for what
issue #13 asks of every report: a verdict box first, then provenance (issue 22's order), no raw dataframe or error
output, every figure with alt text and a sentence, nothing wider than the page, at a desktop's width and at a phone's
(issue 53). The fixture data is hostile (tests/payloads.py, issue #25): every page carries script payloads as data, and
none may run.

One headless Chromium (the system's, never a downloaded one) serves the whole module, driven through Playwright: each
check opens a page in a browser context of its own at the viewport it needs, loads the file:// URL and reads what its
probes wrote; screenshots and the printed PDF come from the same browser.
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import matplotlib.image as mpimg
import pytest

from kvlab import reports
from payloads import IMG, LINK, SCRIPT

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NOTEBOOKS = [p.stem for p in reports.notebooks()]
WIDTH = 1200


#: The flags every launch of Chromium had when each check started its own: no network of its own, no GPU, no sandbox
#: (a container's root), no scrollbars taking width from the layout.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
#: Milliseconds a launch, a load, a screenshot or a print may take (each check's own launch had 120 s)
TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def browser():
    """The module's one headless Chromium: the system's (`make browser`), launched through Playwright (the `test`
    extra, `make install`), which never downloads a browser of its own here. What the checks get is one browser
    context in it (a fresh profile, for the module: the pages keep nothing in storage), in which each check opens a
    page of its own."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: `make test` installs it with apt (needs root)")
        pytest.skip("chromium not installed (run `make browser`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        reason = f"the playwright library is not importable ({e}): run `make install` (the test extra installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    driver = sync_playwright().start()
    try:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, timeout=TIMEOUT_MS)
        try:
            context = chromium.new_context()
            context.set_default_timeout(TIMEOUT_MS)
            yield context
        finally:
            chromium.close()
    finally:
        driver.stop()


@pytest.fixture(scope="module")
def built(built_reports):
    return built_reports[0]


@contextlib.contextmanager
def _open(browser, page, size: tuple[int, int]):
    """``page`` (a file) in a new page of ``browser`` (the module's context) with a ``size`` viewport, once its load
    event has fired; closed after."""
    tab = browser.new_page()
    try:
        tab.set_viewport_size({"width": size[0], "height": size[1]})
        tab.goto(page.as_uri(), wait_until="load")
        yield tab
    finally:
        tab.close()


def screenshot(browser, page, png, height=1400):
    """What the first ``height`` px of ``page`` show in a window ``WIDTH`` px wide."""
    with _open(browser, page, (WIDTH, height)) as tab:
        tab.screenshot(path=png)
    return mpimg.imread(png)


#: Injected into a copy of a page: after layout, list every element that reaches past the window's right edge
#: outside a box that scrolls sideways within the window (a table wrapper, a table shown as a scrolling block), and
#: whether the page itself scrolls sideways.
OVERFLOW_PROBE = """<script>
window.addEventListener('load', () => {
  const w = document.documentElement.clientWidth, bad = [];
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX)
                        && el.getBoundingClientRect().right <= w + 1;
  const inScroller = el => { for (let a = el.parentElement; a && a !== document.body; a = a.parentElement)
                               if (scrolls(a)) return true;
                             return false; };
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > w + 1 && !el.closest('.kvlab-table-wrap') && !inScroller(el))
      bad.push(`${el.tagName}.${el.className}: ${Math.round(r.right)}px "${(el.textContent || '').slice(0, 60)}"`);
  }
  const out = document.createElement('pre'); out.id = 'kvlab-overflow';
  out.textContent = JSON.stringify({page: document.documentElement.scrollWidth, window: w, bad: bad.slice(0, 8)});
  document.body.appendChild(out);
});
</script>"""


def _js(text: str) -> str:
    """``text`` as a JavaScript string literal that is safe inside an inline <script>."""
    return json.dumps(text).replace("<", "\\u003c")


#: Injected at the very top of a copy of a page, before anything of the page runs: alert, confirm, prompt and print
#: record their calls instead of opening a dialog; once the page has loaded, the probe counts what a payload would
#: have made live (an <img src=x>, a script calling alert, an on* handler calling alert, a javascript: link) and
#: whether both payloads are on the page as text (read as the page loads, before a later probe adds text of its
#: own). Its <pre> is hidden, so the layout checks do not see it.
DIALOG_PROBE = """<script id="kvlab-dialog-probe">
(() => {
  const calls = [];
  let shown = null;
  const report = () => {
    if (!document.body) return;
    let out = document.getElementById('kvlab-dialogs');
    if (!out) { out = document.createElement('pre'); out.id = 'kvlab-dialogs'; out.hidden = true;
                document.body.appendChild(out); }
    out.textContent = JSON.stringify({
      calls,
      img: document.querySelectorAll('img[src="x"]').length,
      scripts: [...document.scripts].filter(s => s.id !== 'kvlab-dialog-probe' && s.textContent.includes('alert(')).length,
      handlers: [...document.querySelectorAll('*')].filter(
        el => [...el.attributes].some(a => a.name.startsWith('on') && a.value.includes('alert'))).map(el => el.tagName),
      links: document.querySelectorAll('a[href^="javascript:" i]').length,
      shown});
  };
  for (const name of ['alert', 'confirm', 'prompt', 'print'])
    window[name] = (...args) => { calls.push(`${name}(${args.join(', ')})`); report(); };
  window.addEventListener('load', () => {
    shown = [%s, %s].map(p => document.body.textContent.includes(p));
    setTimeout(report, 100);
  });
})();
</script>""" % (_js(IMG), _js(SCRIPT))


#: What the probes named (the ids of their <pre>) wrote, parsed, each once it has written it (the dialog probe: its
#: report after the load event), and the page's named <meta> elements (name: content); and whether all had written.
PROBES_READ = """ids => {
  const found = {meta: Object.fromEntries([...document.querySelectorAll('meta[name]')].map(m => [m.name, m.content]))};
  let done = true;
  for (const id of ids) {
    const out = document.getElementById(id);
    let value = null;
    try { value = out && JSON.parse(out.textContent); } catch (e) { value = null; }
    if (value && value.shown !== null) found[id] = value; else done = false;
  }
  return [done, found];
}"""


def _load(browser, page, size: tuple[int, int], top: str = "", end: str = "", probes: tuple[str, ...] = ()) -> dict:
    """What the ``probes`` (the ids of their <pre>) found in a copy of ``page`` laid out at ``size``, with ``top``
    injected first in its <head> (before any script of the page) and ``end`` last in its <body>, after its scripts
    have run; read once all have written (or 10 s have passed: `_read` then says which did not run)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    text = page.read_text()
    if top:
        text, n = re.subn(r"<head[^>]*>", lambda m: m.group(0) + top, text, count=1)
        assert n == 1, f"{page.name}: no <head>"
    probe = page.with_name(f"probe_{page.name}")
    probe.write_text(text.replace("</body>", end + "</body>"))
    try:
        with _open(browser, probe, size) as tab:
            with contextlib.suppress(PlaywrightTimeout):
                tab.wait_for_function(f"ids => ({PROBES_READ})(ids)[0]", arg=list(probes), timeout=10_000)
            return tab.evaluate(PROBES_READ, list(probes))[1]
    finally:
        probe.unlink()


def _read(found: dict, probe_id: str) -> dict:
    """The JSON a probe wrote into its <pre id=probe_id>."""
    assert probe_id in found, f"the {probe_id} probe did not run"
    return found[probe_id]


def _probe(browser, page, script: str, probe_id: str, size: tuple[int, int]) -> dict:
    """Run ``script`` (it writes JSON into <pre id=probe_id>) in a copy of ``page`` laid out at ``size``."""
    return _read(_load(browser, page, size, end=script, probes=(probe_id,)), probe_id)


#: Injected at the end of a copy of a page: where its answer starts (the index's answer section, a report's
#: "Answer." paragraph), its top bar's links and its table of contents' entries.
ANSWER_PROBE = """<script>
window.addEventListener('load', () => {
  const found = document.querySelector('.kvlab-answer')
    || [...document.querySelectorAll('p')].find(p => p.textContent.trim().startsWith('Answer.'));
  const out = document.createElement('pre'); out.id = 'kvlab-answer-probe'; out.hidden = true;
  out.textContent = JSON.stringify({
    answer: found ? Math.round(found.getBoundingClientRect().top + window.scrollY) : null,
    height: window.innerHeight,
    topbar: [...document.querySelectorAll('.kvlab-topbar a')].map(a => a.getAttribute('href')),
    toc: [...document.querySelectorAll('.kvlab-toc a')].map(a => a.getAttribute('href')),
    sections: document.querySelectorAll('h2').length});
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def probed(browser, built):
    """Each page (a report's name or "index") loaded once at 1280×800 (the first screen issue 39 asks about) with
    the dialog probe at its top and the overflow and answer probes at its end: what the three found, kept for the
    tests that read any probe."""
    pages = {}

    def found(name: str) -> dict:
        if name not in pages:
            pages[name] = _load(
                browser,
                built / f"{name}.html",
                (1280, 800),
                top=DIALOG_PROBE,
                end=OVERFLOW_PROBE + ANSWER_PROBE,
                probes=("kvlab-dialogs", "kvlab-overflow", "kvlab-answer-probe"),
            )
        return pages[name]

    return found


PAGES = NOTEBOOKS + ["index"]


@pytest.mark.parametrize("name", PAGES)
def test_the_answer_is_on_the_first_screen_with_the_top_bar(probed, name):
    """Issue 39: at 1280×800 the page's answer starts within the first 800 px; the top bar links the index, the
    glossary and the neighbouring reports (previous and next, by number); a page with more than four sections
    has a table of contents that links each one."""
    found = _read(probed(name), "kvlab-answer-probe")
    assert found["answer"] is not None and found["answer"] < 800, found
    at = PAGES.index(name) if name != "index" else -1
    expected = (
        ["index.html"]
        + ([f"{NOTEBOOKS[at - 1]}.html"] if at > 0 else [])
        + ([f"{NOTEBOOKS[at + 1]}.html"] if at + 1 < len(NOTEBOOKS) else [])
        + ["glossary.html"]
    )
    assert found["topbar"] == expected, found
    if name != "index":
        assert (len(found["toc"]) == found["sections"]) if found["sections"] > 4 else not found["toc"], found


#: Issue 39's printed lengths: A4 pages at Chromium's default margins.
MAX_PRINTED_PAGES = {"index": 4, **dict.fromkeys(NOTEBOOKS, 8)}
#: Chromium's default print margins (what its --print-to-pdf used): 1 cm on every side
PRINT_MARGINS = dict.fromkeys(("top", "right", "bottom", "left"), "1cm")


def print_to_pdf(browser, page, pdf):
    """``page`` printed to ``pdf`` as Chromium's --print-to-pdf printed it: A4 (the pages' own `@page { size: A4 }`,
    honoured as that flag honoured it), Chromium's default margins, no header or footer."""
    with _open(browser, page, (WIDTH, 900)) as tab:
        tab.pdf(path=pdf, format="A4", prefer_css_page_size=True, margin=PRINT_MARGINS)


def printed_pages(pdf) -> int:
    """The pages of a PDF Chromium printed: its page tree's root /Count (the largest /Count in the file)."""
    counts = [int(n) for n in re.findall(rb"/Count (\d+)", pdf.read_bytes())]
    assert counts, f"{pdf}: no page tree"
    return max(counts)


@pytest.mark.parametrize("name", PAGES)
def test_the_printed_page_is_short(browser, built, name, tmp_path):
    """Issue 39: a report prints on at most 8 A4 pages, the index on at most 4 (headless Chromium's print to PDF,
    its default margins)."""
    pdf = tmp_path / f"{name}.pdf"
    print_to_pdf(browser, built / f"{name}.html", pdf)
    assert printed_pages(pdf) <= MAX_PRINTED_PAGES[name], f"{name}: {printed_pages(pdf)} A4 pages"


def test_the_print_rules_apply(browser, built):
    """The pages' print stylesheet is read, not dropped: printed, the top bar is hidden (on screen it shows). A stray
    brace before `@media print` once made Chromium drop the whole print block, and report 04 printed on 8 pages,
    not 7, still within the length limit above."""
    with _open(browser, built / "04_whatif_model.html", (WIDTH, 900)) as tab:
        shown = "getComputedStyle(document.querySelector('.kvlab-topbar')).display"
        assert tab.evaluate(shown) != "none"
        tab.emulate_media(media="print")
        assert tab.evaluate(shown) == "none"


def test_the_glossary_defines_every_term_and_links_back(built):
    """The glossary page the build writes defines the terms the pages use and has the top bar."""
    page = (built / "glossary.html").read_text()
    text = parse(built / "glossary.html").visible
    for term in ("TP", "DCP", "MLA", "KV pool", "SLO", "goodput", "TTFT", "TPOT", "memory setting"):
        assert f"<dt>{term}" in page, term
    assert 'href="index.html"' in page and "Explore" not in text
    # issue 53: every verdict label a page can show is defined, and the page is laid out for a phone's width
    from kvlab.verdicts import EVIDENCE_COLORS, FAMILIES, OUTCOME_COLORS

    terms = " ".join(re.findall(r"<dt>(.*?)</dt>", page))
    assert all(o.split()[0] in terms for o in OUTCOME_COLORS), terms
    assert all(f in terms for f in FAMILIES)
    # ... and every evidence kind a badge names, configuration included (report 03's badge was defined nowhere)
    assert all(e in terms for e in (*EVIDENCE_COLORS, "configuration")), terms
    for name in ("glossary.html", "index.html"):
        assert '<meta name="viewport" content="width=device-width' in (built / name).read_text(), name


#: Injected into a copy of the index: sort the runs table by TTFT p50 (ascending, then descending), filter it,
#: and report what the rows show.
SORT_PROBE = """<script>
window.addEventListener('load', () => {
  const table = document.getElementById('kvlab-runs'), ths = [...table.querySelectorAll('th')];
  const col = ths.findIndex(th => th.textContent.startsWith('TTFT p50'));
  const values = () => [...table.tBodies[0].rows].filter(r => !r.hidden)
    .map(r => r.cells[col].dataset.v).filter(v => v !== '').map(Number);
  const before = values();
  ths[col].click(); const up = values();
  ths[col].click(); const down = values();
  const filter = document.getElementById('kvlab-runs-filter');
  filter.value = 'failed'; filter.dispatchEvent(new Event('input'));
  const kept = [...table.tBodies[0].rows].filter(r => !r.hidden).map(r => r.textContent.includes('failed'));
  const out = document.createElement('pre'); out.id = 'kvlab-sort';
  out.textContent = JSON.stringify({before, up, down, kept, rows: table.tBodies[0].rows.length,
                                    count: document.getElementById('kvlab-runs-count').textContent});
  document.body.appendChild(out);
});
</script>"""


def test_the_runs_table_sorts_and_filters_from_file(browser, built):
    """The index's runs table, opened from file:// in Chromium: a click on TTFT p50 sorts the runs by it, a second
    reverses them; the filter keeps only the rows with its text and says how many."""
    found = _probe(browser, built / "index.html", SORT_PROBE, "kvlab-sort", (1280, 800))
    assert found["up"] == sorted(found["before"]) and found["down"] == sorted(found["before"], reverse=True), found
    assert len(found["up"]) > 10 and found["up"] != found["down"], found
    assert all(found["kept"]) and found["count"] == f"{len(found['kept'])} of {found['rows']} runs", found


#: Injected into a copy of a page laid out at 1280×800: where the verdict box and the headline start.
FIRST_SCREEN_PROBE = """<script>
window.addEventListener('load', () => {
  const top = sel => { const el = document.querySelector(sel);
                       return el ? Math.round(el.getBoundingClientRect().top + window.scrollY) : null; };
  const out = document.createElement('pre'); out.id = 'kvlab-first-screen';
  out.textContent = JSON.stringify({answer: top('.kvlab-answer'), headline: top('.kvlab-headline'),
                                    verdicts: top('.kvlab-verdicts'),
                                    provenance: top('.kvlab-provenance'), height: window.innerHeight});
  document.body.appendChild(out);
});
</script>"""


def fonts_with_glyphs() -> list[set[int]]:
    """The code points each installed font covers, as fontconfig (which Chromium asks for fallback fonts on
    Linux) lists its fonts; read with fontTools (matplotlib's dependency), so no other tool is needed."""
    from pathlib import Path

    from fontTools.ttLib import TTCollection, TTFont

    files = []
    if shutil.which("fc-list"):
        out = subprocess.run(["fc-list", "--format", "%{file}\n"], capture_output=True, text=True, check=True).stdout
        files = sorted({Path(f) for f in out.splitlines() if f.strip()})
    else:  # fontconfig's default folders
        for d in (
            Path("/usr/share/fonts"),
            Path("/usr/local/share/fonts"),
            Path.home() / ".local/share/fonts",
            Path.home() / ".fonts",
        ):
            files += (
                [f for f in d.rglob("*") if f.suffix.lower() in (".ttf", ".otf", ".ttc", ".otc")] if d.is_dir() else []
            )
    covered = []
    for f in files:
        try:
            fonts = (
                TTCollection(str(f), lazy=True).fonts
                if f.suffix.lower() in (".ttc", ".otc")
                else [TTFont(str(f), lazy=True)]
            )
            covered += [set((font.getBestCmap() or {}).keys()) for font in fonts]
        except Exception:  # a font fontTools cannot read (a bitmap .pcf.gz, a Type 1): not what Chromium uses
            continue
    return covered


def missing_glyphs(text: str, fonts: list[set[int]]) -> list[str]:
    """The characters of ``text`` that no font covers: what a browser draws as tofu (an empty box)."""
    return sorted(
        ch for ch in set(text) if ch.isprintable() and not ch.isspace() and not any(ord(ch) in f for f in fonts)
    )


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
    """No raw dataframe output, no error or warning, every figure with alt text and its sentence, the verdicts
    and then the provenance before the first section."""
    page = built / f"{name}.html"
    p = parse(page)
    for raw in ("Traceback", "dtype", "shape: (", "┌─", "Warning:", "null", "NaN"):
        assert raw not in p.visible, (
            f"{name}: {raw!r} on the page: …{p.visible[max(0, p.visible.find(raw) - 80) :][:200]}…"
        )
    assert p.stderr == 0, f"{name}: {p.stderr} stderr output block(s) on the page"
    assert p.imgs and all(p.imgs), f"{name}: an image without alt text"
    assert len(p.figures) == len(p.imgs), f"{name}: an image outside a <figure> with a caption"
    for f in p.figures:
        assert re.match(r"Figure \d+\. \S", f["caption"].strip()) and len(f["caption"]) > 40, f
    text = page.read_text()
    assert text.index('class="kvlab-verdicts"') < text.index('class="kvlab-provenance"') < text.index("<h2")
    assert not re.search(r'<script[^>]*src="http', text)  # self-contained: nothing fetched to read it


@pytest.mark.parametrize("name", NOTEBOOKS + ["index"])
def test_nothing_is_wider_than_the_page(probed, name):
    found = _read(probed(name), "kvlab-overflow")
    assert found["page"] <= found["window"] and not found["bad"], found


#: A phone held upright (issue 53): 390 CSS px wide
PHONE = (390, 844)


@pytest.mark.parametrize("name", NOTEBOOKS + ["index", "glossary"])
def test_every_page_fits_a_phone(browser, built, name):
    """Issue 53: every page, the index and the glossary included, at a 390×844 viewport: it declares the viewport
    meta (so a phone lays it out at its own width, not a desktop's), and nothing is wider than the page except inside
    a sideways-scrolling table wrapper (`.kvlab-table-wrap`: the overflow probe's rule, as at 1280 px)."""
    loaded = _load(browser, built / f"{name}.html", PHONE, end=OVERFLOW_PROBE, probes=("kvlab-overflow",))
    assert loaded["meta"].get("viewport", "").startswith("width=device-width"), f"{name}: no viewport meta"
    found = _read(loaded, "kvlab-overflow")
    assert found["page"] <= found["window"] and not found["bad"], f"{name} at {PHONE[0]} px: {found}"


#: What the dialog probe finds on a page where the payloads are text only
INERT = {"calls": [], "img": 0, "scripts": 0, "handlers": [], "links": 0, "shown": [True, True]}


@pytest.mark.parametrize("name", NOTEBOOKS + ["index"])
def test_no_payload_from_the_data_runs_in_the_browser(probed, name):
    """The data every page is built from is hostile (tests/payloads.py: an <img onerror>, a <script> and a
    javascript: link in each run's hardware and engine version, each sweep's host, each experiment's description,
    every reference statement and citation). In Chromium no payload runs: no alert, confirm, prompt or print is
    called, no payload element or link exists, and both payloads are on the page as text."""
    found = _read(probed(name), "kvlab-dialogs")
    # 07 reads only cpu_capacity's runs and the catalog, and the fixture runs hold no cpu_capacity run: its page
    # carries no payload to show (its panel lists only what it read); every other page does
    expected = {**INERT, "shown": [False, False]} if name == "07_capacity" else INERT
    assert found == expected, f"{name}: {found}"


def test_the_dialog_probe_sees_a_live_payload(browser, tmp_path):
    """The probe itself: on a page that makes the payloads live it records their dialogs and elements; beside
    them, escaped, the same text is found as text."""
    import html

    page = tmp_path / "live.html"
    link = '<a href="javascript:alert(3)">a link</a>'
    page.write_text(
        f"<!DOCTYPE html><html><head><title>t</title></head><body><p>{IMG}</p>{SCRIPT}{link}"
        f"<p>{html.escape(IMG)} {html.escape(SCRIPT)} {html.escape(LINK)}</p></body></html>"
    )
    found = _read(_load(browser, page, (WIDTH, 900), top=DIALOG_PROBE, probes=("kvlab-dialogs",)), "kvlab-dialogs")
    assert sorted(found["calls"]) == ["alert(1)", "alert(2)"], found
    assert (found["img"], found["scripts"], found["handlers"], found["links"], found["shown"]) == (
        1,
        1,
        ["IMG"],
        1,
        [True, True],
    ), found


def test_index_answers_first_and_links_every_report_and_its_data(built):
    """The index opens with the reference host's answer (report 01's table), links every report, runs.csv,
    index.json and each figure's CSV, and does not repeat the reports' verdict boxes (issue 39: one line per
    report; the verdicts are counted by kind after the reports)."""
    index = (built / "index.html").read_text()
    links = set(re.findall(r"""href=["']([^"']+)["']""", index))
    assert links >= {f"{name}.html" for name in NOTEBOOKS} | {"runs.csv", "index.json"} | {
        f"{name}.figures/{f['file']}"
        for name in NOTEBOOKS
        for f in json.loads((built / f"{name}.figures" / "figures.json").read_text())
    }
    assert 'class="kvlab-verdicts"' not in index
    assert index.index('class="kvlab-answer"') < index.index("<h2>The reports</h2>") < index.index("kvlab-headline")
    assert "`" not in parse(built / "index.html").visible  # no Markdown left raw


def test_index_and_report_render_with_figures(browser, built, tmp_path):
    index = screenshot(browser, built / "index.html", tmp_path / "index.png", height=600)
    assert index.shape[0] == 600 and index.std() > 0.01  # not a blank page
    page = screenshot(browser, built / "01_context_scaling.html", tmp_path / "report.png", height=4000)
    rgb = page[..., :3]
    # the engines' bar colours (vLLM blue #3b75af, SGLang orange #e1812c) are on screen: the figure rendered
    blue = (
        (abs(rgb[..., 0] - 0x3B / 255) < 0.04)
        & (abs(rgb[..., 1] - 0x75 / 255) < 0.04)
        & (abs(rgb[..., 2] - 0xAF / 255) < 0.04)
    ).sum()
    orange = (
        (abs(rgb[..., 0] - 0xE1 / 255) < 0.04)
        & (abs(rgb[..., 1] - 0x81 / 255) < 0.04)
        & (abs(rgb[..., 2] - 0x2C / 255) < 0.04)
    ).sum()
    assert blue > 2000 and orange > 2000, (blue, orange)


@pytest.fixture(scope="module")
def fonts(browser):
    return fonts_with_glyphs()


@pytest.mark.parametrize("name", NOTEBOOKS + ["index"])
def test_every_character_on_the_page_has_a_glyph(fonts, built, name):
    """No tofu: every character a page shows (report 05's Korean citation included) is in an installed font.
    `make browser` installs Noto Sans CJK from PyPI for the Korean."""
    text = parse(built / f"{name}.html").visible
    missing = missing_glyphs(text, fonts)
    assert not missing, (
        f"{name}: no installed font has a glyph for {''.join(missing)!r} "
        f"({', '.join(f'U+{ord(c):04X}' for c in missing[:12])}): run `make browser`"
    )


def test_the_glyph_check_finds_tofu():
    """The check itself: a character no font covers is reported, one a font covers is not."""
    latin = {ord(c) for c in "vLLM is faster"}
    assert missing_glyphs("vLLM is faster — 성능", [latin]) == ["—", "능", "성"]
    assert missing_glyphs("vLLM is faster", [latin]) == []


@pytest.mark.parametrize("name", ["index", "01_context_scaling", "05_prefix_sharing"])
def test_the_answer_is_on_the_first_screen(browser, built, name):
    """At 1280×800 the answer is on the first screen, on every report above its verdict box (headline first), the
    provenance panel after the box; the index answers first and counts the verdicts after the reports."""
    found = _probe(browser, built / f"{name}.html", FIRST_SCREEN_PROBE, "kvlab-first-screen", (1280, 800))
    assert found["answer"] is not None and found["answer"] < 800, found
    assert found["headline"] is not None and found["headline"] > found["answer"], found
    if name != "index":
        assert found["verdicts"] is not None and found["verdicts"] > found["answer"], found
        assert found["provenance"] is not None and found["provenance"] > found["verdicts"], found
