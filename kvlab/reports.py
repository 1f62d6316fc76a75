"""Build the reports: execute each notebook with papermill, export self-contained HTML, write an index.

Templates in ``notebooks/`` are never modified: every execution writes a new notebook under
``reports/`` and its HTML beside it (code hidden for readers, figures embedded as data URIs).
"""

from __future__ import annotations

import ast
import difflib
import html
import json
import multiprocessing
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import papermill as pm
import polars as pl
import zmq
from jinja2 import pass_context
from jupyter_client.manager import AsyncKernelManager
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from traitlets.config import Config

from kvlab import __version__, host, store, studies, tables, tinymodel
from kvlab import verdicts as vd
from kvlab.studies.capacity.frames import SLO_SHARE
from kvlab.claims.grading import CPU_IMPLEMENTATIONS
from kvlab.units import count
from kvlab.engines import engine_label, registry
from kvlab.markup import controls_shown, markdown_inline, name_html
from kvlab.paths import DATA_DIR, NOTEBOOKS_DIR, REPORTS_DIR
from kvlab.figures import FIGURE_DIR_ENV, FIGURE_MIME
from kvlab.explore import STATIC_ENV
from kvlab.verdicts import Sources, extract_sources

#: Every run row the reports read, written beside them (linked from each report's provenance panel).
RUNS_CSV = "runs.csv"


#: An embedded output image (the HTML template's own CSS icons are not <img> tags).
FIGURE_RE = re.compile(r'<img[^>]*src="data:image/(?:png|jpeg|svg\+xml);base64,')


#: The folder beside a report's HTML and executed notebook that holds its figures' data: one CSV per figure and
#: FIGURES_JSON listing them (number, caption, file, columns, rows).
FIGURES_SUFFIX = ".figures"
FIGURES_JSON = "figures.json"
#: kvlab's page template (nbconvert, package data): kvlab/templates/kvlab/index.html.j2 on nbconvert's lab page.
TEMPLATES_DIR = Path(__file__).parent / "templates"
ASSETS_DIR = Path(__file__).parent / "assets"


def asset(name: str) -> str:
    """A file of the pages' style or scripts (kvlab/assets/, package data), as text."""
    return (ASSETS_DIR / name).read_text(encoding="utf-8")


#: A report's result file beside its HTML (``05_prefix_sharing.result.json``): the study's typed result as JSON,
#: written by the notebook (:func:`kvlab.studies.notebook`); ``index.json`` is assembled from these files.
RESULT_SUFFIX = ".result.json"

#: A token count abbreviated with K ('64K', '200K') in a page's text; :func:`k_note` says what K is.
K_ABBREV_RE = re.compile(r"(?<![\w.,])\d+(?:\.\d+)?K(?![\w])")
#: What K is, said once per page: in its provenance panel where the page abbreviates token counts and does not
#: already say it.
K_NOTE = "K = 1,024 tokens: 64K is 65,536 tokens, 200K is 204,800"


def visible_text(page: str) -> str:
    """A page's text as a reader sees it: no style, script or embedded image data, no tags (alt text kept)."""
    page = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S | re.I)
    page = re.sub(r"base64,[A-Za-z0-9+/=]+", " ", page)
    alts = " ".join(re.findall(r'\balt="([^"]*)"', page))
    return html.unescape(re.sub(r"<[^>]+>", " ", page) + " " + alts)


def k_note(page: str) -> str | None:
    """:data:`K_NOTE` where ``page`` abbreviates a token count with K and nowhere says 'K = 1,024'; else None."""
    text = visible_text(page)
    return K_NOTE if K_ABBREV_RE.search(text) and "K = 1,024" not in text else None


def with_k_note(panel: str, page: str) -> str:
    """``panel`` (a provenance panel) with a 'token counts' row saying what K is, where :func:`k_note` asks for it."""
    note = k_note(page + panel)
    if not note or "</table>" not in panel:
        return panel
    return panel.replace("</table>", f"<tr><th>token counts</th><td>{html.escape(note)}</td></tr></table>", 1)


@dataclass(frozen=True)
class Report:
    """One built report, as ``index.json`` keeps it: ``answer`` and ``verdicts`` come from the result file its
    notebook wrote (:data:`RESULT_SUFFIX`): the study computed once, never again for the index."""

    notebook: str
    title: str
    summary: str
    html: Path
    seconds: float
    figures: int
    verdicts: tuple = ()
    answer: dict | None = None
    experiments: tuple = ()
    documents: tuple = ()
    #: What its provenance panel shows, as data (:func:`provenance`); None in an index.json written before 2026-12-05.
    provenance: dict | None = None


def extract_answer(nb) -> dict | None:
    """Remove every answer output (:data:`kvlab.studies.ANSWER_MIME`) from an executed notebook (in place) and
    return the last one's display data (its Markdown, plain text and typed answer); None where it showed none."""
    found = None
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if studies.ANSWER_MIME in (out.get("data") or {}):
                found = dict(out["data"])
            else:
                kept.append(out)
        cell["outputs"] = kept
    return found


def notebooks(selected: list[str] | None = None, notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The report notebooks (``NN_name.ipynb``), optionally only those whose name starts with a selector."""
    found = sorted(p for p in notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if selected:
        chosen = [p for p in found if any(p.stem.startswith(s) or p.name == s for s in selected)]
        unknown = [s for s in selected if not any(p.stem.startswith(s) or p.name == s for p in found)]
        if unknown:
            raise FileNotFoundError(
                f"no notebook matches {unknown} in {notebooks_dir} (have: {[p.name for p in found]})"
            )
        return chosen
    return found


def describe(nb_path: Path) -> tuple[str, str]:
    """Title (the first markdown heading) and one-line summary (the paragraph after it)."""
    nb = nbformat.read(nb_path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            lines = [ln.strip() for ln in cell.source.strip().splitlines()]
            title = re.sub(r"^\d\d\s*·\s*", "", lines[0].lstrip("# ").strip())  # the index numbers them
            rest = " ".join(ln for ln in lines[1:] if ln and not ln.startswith("#"))
            return title, rest.split(". ")[0].rstrip(".") + "."
    return nb_path.stem, ""


def figure_dir(html_path: Path) -> Path:
    """Where a report's figure data files go: ``<report>.figures`` beside its HTML."""
    return html_path.parent / f"{html_path.stem}{FIGURES_SUFFIX}"


def write_figure_data(nb, out: Path) -> list[dict]:
    """Write each figure's data, carried as typed JSON in the executed notebook (:data:`kvlab.figures.FIGURE_MIME`),
    as a CSV file in :func:`figure_dir` with :data:`FIGURES_JSON` listing them; return the listing (each figure
    once, by number). The figures' links point there already: the build sets :data:`kvlab.figures.FIGURE_DIR_ENV`."""
    found: dict[str, dict] = {}  # by file: an unnumbered figure (figures.show without numbers) is figure.csv
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = (output.get("data") or {}).get(FIGURE_MIME)
            if data:
                found.setdefault(data["file"], dict(data))
    folder = figure_dir(out)
    if folder.exists():
        for old in folder.glob("figure*.csv"):
            old.unlink()
    if not found:
        (folder / FIGURES_JSON).unlink(missing_ok=True)
        return []
    folder.mkdir(parents=True, exist_ok=True)
    listing = []
    for data in sorted(found.values(), key=lambda d: d["number"] or 0):
        (folder / data["file"]).write_text(data["csv"], encoding="utf-8")
        listing.append({k: data[k] for k in ("number", "caption", "file", "columns", "rows")})
    (folder / FIGURES_JSON).write_text(json.dumps(listing, indent=2), encoding="utf-8")
    return listing


def _exporter():
    """nbconvert's HTML exporter, with Markdown *outputs* rendered escaped.

    nbconvert renders every Markdown source with raw HTML passed through (its mistune renderer runs with
    ``escape=False``). The notebooks' own Markdown cells are the project's prose and keep that; a Markdown
    output (``display(Markdown(...))``) is a sentence computed from data (a model name, a host, a reference
    CSV's statement, an engine's reported version), so raw HTML in it is shown as text, not made an element,
    and links with a harmful protocol (``javascript:``) are not made links."""

    class Exporter(HTMLExporter):
        @pass_context
        def markdown2html(self, context, source):
            cell = context.get("cell", {})
            if cell.get("cell_type") == "markdown":  # a template's own prose
                return HTMLExporter.markdown2html(self, context, source)
            path = context.get("resources", {}).get("metadata", {}).get("path", "")
            renderer = IPythonRenderer(
                escape=True,
                allow_harmful_protocols=False,
                embed_images=False,
                path=path,
                anchor_link_text=self.anchor_link_text,
                exclude_anchor_links=self.exclude_anchor_links,
                **self.lexer_options,
            )
            return MarkdownWithMath(renderer=renderer).render(source)

    return Exporter


#: Where the provenance panel goes in an exported page until the page's text is known (:func:`with_k_note`).
PANEL_SLOT = '<div class="kvlab-provenance-slot"></div>'
#: Where the table of contents goes in an exported page once its sections are known (:func:`toc_html`).
TOC_SLOT = '<div class="kvlab-toc-slot"></div>'
#: A page with more sections (<h2>) than this gets a table of contents under its provenance panel.
TOC_MIN_SECTIONS = 5
#: Code cells with this tag are JupyterLab-only (interactive controls): dropped from the static HTML.
JUPYTERLAB_ONLY = "jupyterlab-only"
#: The page of short definitions every page links to (:func:`write_glossary`).
GLOSSARY = "glossary.html"

#: The terms every page uses, defined once (:func:`write_glossary`): term, definition (inline Markdown).
GLOSSARY_TERMS = [
    (
        "TP (tensor parallelism)",
        "each layer's weights are split across TP GPUs, which compute every step together; "
        "TP 8 is one model served by 8 GPUs.",
    ),
    (
        "DCP (decode context parallelism)",
        "the KV cache of one long sequence is split across DCP GPUs, each "
        "attending over its share of the context and exchanging partial results once per layer and step. DCP 1 is no "
        "split (vLLM's default); larger DCP sizes trade that exchange for room to hold longer contexts.",
    ),
    (
        "MLA (multi-head latent attention)",
        "DeepSeek's attention that caches one compressed latent vector per token "
        "instead of full keys and values, so a token's KV entry is several times smaller (\"DeepSeek-V2: A Strong, "
        'Economical, and Efficient Mixture-of-Experts Language Model", DeepSeek-AI, May 2024, '
        "https://arxiv.org/abs/2405.04434).",
    ),
    (
        "KV pool",
        "the memory an engine reserves for the KV cache, in tokens it can hold at once; requests past it "
        "wait (queue) or are pre-empted.",
    ),
    (
        "memory setting",
        "the share of the accelerator's memory the engine may use (vLLM's `gpu_memory_utilization`, "
        "SGLang's `mem_fraction_static`), 0.92 or 0.95 here. What is left after the weights and activations becomes "
        "the KV pool, so a small change of the setting can be a large change of the pool (report 03 gives it in MiB "
        "and tokens for this host).",
    ),
    (
        "TTFT (time to first token)",
        "from sending a request to receiving its first output token: queueing plus prefill.",
    ),
    (
        "TPOT (time per output token)",
        "the mean time between output tokens after the first: the decode speed one request sees.",
    ),
    (
        "SLO (service-level objective)",
        f"a latency target a load must meet: here a bound on TTFT and one on TPOT that at least {SLO_SHARE:.0%} of a "
        f"load point's requests must both meet (the SLO held at p{SLO_SHARE * 100:.0f}; report 07's load ladder). "
        "Report 07's search on a replayed trace judges a load by the Wilson 95% lower bound of that share instead.",
    ),
    (
        "goodput",
        "the requests per second completed within the SLO: throughput that counts only the requests that "
        "met the target.",
    ),
    (
        "published, measured, modelled, configuration",
        "where a number comes from: a document (cited by title, publisher and "
        "date), a real engine run on a named host, kvlab's physical model with its stated assumptions, or the "
        "experiment file's own setting (shown, not graded).",
    ),
    ("K", "1,024 tokens: 64K is 65,536 tokens, 200K is 204,800."),
    (
        "stands in for",
        "a CPU run's context scaled down by a stated factor: 1,024 tokens on this host stands in for 64K on the "
        "reference host. The run tests a mechanism at that size, not the reference host's speed.",
    ),
    (
        "reproduced",
        "a document's claim that evidence independent of the document agrees with; for one of kvlab's own checks, "
        "passed.",
    ),
    (
        "contradicted",
        "a document's claim that evidence independent of the document disagrees with; for one of kvlab's own "
        "checks, failed.",
    ),
    (
        "consistent, inconsistent",
        "a document checked against its own figures (or another document's): its claim does or does not follow "
        "from them. Never called reproduced: the figures are the document's own.",
    ),
    (
        "inconclusive",
        "the evidence here cannot tell: a difference inside the spread of its repeats, one run only, or a model "
        "that fails its held-out test.",
    ),
    (
        "cannot be tested here",
        "no evidence this host can produce decides the claim: a B300 speed claim measured on a CPU, or a GPU's "
        "memory behaviour on a machine without one.",
    ),
    ("configured", "a value the experiment file sets (a KV budget, a ceiling derived from it): shown, not graded."),
    ("found", "kvlab's answer to a question of its own that no document states."),
    (
        "document, consistency, own",
        "the three families verdicts are counted in, never mixed: documents' claims on independent evidence, "
        "documents against their own figures, and kvlab's own questions and self-checks.",
    ),
    (
        "held-out test",
        "the model is fitted without one published point and then predicts it; a model whose prediction misses "
        "illustrates, it does not decide.",
    ),
    (
        "roofline",
        "the model's bound on a step's time: the larger of its arithmetic at the GPU's peak rate and its memory "
        "traffic at the GPU's bandwidth, each scaled by a fitted efficiency.",
    ),
    (
        "crossover",
        "the context length at which the faster engine changes; the model gives it as a range over its "
        "assumption sets, never as a point.",
    ),
    (
        "concurrency ceiling",
        "how many sequences of a given context the KV pool holds at once (modelled from the memory setting, the "
        "weights and the KV bytes per token; a range over the KV format and MLA width).",
    ),
]

#: Every standalone page's head opens with these (index and glossary; nbconvert's template has its own): the
#: page is laid out for the device's width, so a phone at 390 px reads it without zooming.
VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'


#: The style every built page gets (reports and index): the top bar, the table of contents, figures at the text
#: column's width, folded tables.
PAGE_CSS_TEXT = asset("page.css")
PAGE_CSS = f'<style id="kvlab-page-css">\n{PAGE_CSS_TEXT}</style>'


#: "report 04" / "reports 05" in a page's text (not in a tag, a link, a script, a style or a figure).
_REPORT_MENTION = re.compile(r"\b([Rr]eports? )(0[1-9])\b")
_TAG = re.compile(r"(<[^>]*>)")
_NO_LINK_IN = ("a", "script", "style", "svg", "title", "textarea", "code")


def reports_linked(page: str, here: str = "") -> str:
    """``page`` with each mention of another report in its text ("report 04") a link to that report's page (the
    study's own stem, :data:`kvlab.studies.STUDIES`); a mention of ``here`` (this page's stem) and text inside a
    link, script, style, svg, title or code stays as it is."""
    pages = {stem[:2]: f"{stem}.html" for stem in studies.STUDIES if stem[:2] != here[:2]}
    inside: list[str] = []
    parts = _TAG.split(page)
    for i, part in enumerate(parts):
        if i % 2:  # a tag: track the elements a link may not go in
            m = re.match(r"<(/?)([a-zA-Z][\w-]*)", part)
            name = m.group(2).lower() if m else ""
            if name in _NO_LINK_IN and not part.endswith("/>"):
                if not m.group(1):
                    inside.append(name)
                elif name in inside:
                    inside.remove(name)
        elif not inside and part:
            parts[i] = _REPORT_MENTION.sub(
                lambda m: f'<a href="{pages[m[2]]}">{m[1]}{m[2]}</a>' if m[2] in pages else m[0], part
            )
    return "".join(parts)


def topbar_html(here: str, previous: tuple[str, str] | None = None, following: tuple[str, str] | None = None) -> str:
    """The bar at the top of every page: the index, the previous and next report (file, numbered title), the
    glossary; ``here`` names the page itself."""
    e = html.escape
    links = ['<a href="index.html">kvlab reports (index)</a>']
    if previous:  # the number on the bar, the whole title on hover: the bar stays one line
        links.append(
            f'<a href="{e(previous[0])}" rel="prev" title="{e(previous[1])}">← previous: {e(previous[1][:2])}</a>'
        )
    if following:
        links.append(
            f'<a href="{e(following[0])}" rel="next" title="{e(following[1])}">next: {e(following[1][:2])} →</a>'
        )
    links.append(f'<a href="{GLOSSARY}">glossary</a>')
    # a <div role="navigation">, not a <nav>: the provenance panel is the page's <nav>, which readers of a page
    # (tests/test_notebooks.py among them) find as its first
    return (
        f'<div class="kvlab-topbar" role="navigation" aria-label="reports">{"".join(links)}'
        f'<span class="kvlab-here">{e(here)}</span></div>'
    )


def neighbours(nb_path: Path) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """The reports before and after ``nb_path`` among the notebooks beside it: (HTML file, numbered title) each."""
    found = notebooks(notebooks_dir=nb_path.parent)
    at = next((i for i, p in enumerate(found) if p.name == nb_path.name), None)
    if at is None:
        return None, None

    def link(p: Path) -> tuple[str, str]:
        return f"{p.stem}.html", f"{p.stem[:2]} · {describe(p)[0]}"

    return (link(found[at - 1]) if at > 0 else None), (link(found[at + 1]) if at + 1 < len(found) else None)


#: A section heading as nbconvert writes it: its id, then its text before the anchor link.
H2_RE = re.compile(r'<h2 id="([^"]+)"[^>]*>(.*?)(?:<a class="anchor-link"[^>]*>.*?</a>)?</h2>', re.S)


def toc_html(page: str) -> str:
    """A table of contents of ``page``'s sections (its <h2> headings) where it has more than four; else ''."""
    found = H2_RE.findall(page)
    if len(found) < TOC_MIN_SECTIONS:
        return ""
    items = "".join(
        f'<li><a href="#{anchor}">{re.sub(r"<[^>]+>", "", text).strip()}</a></li>' for anchor, text in found
    )
    return f'<div class="kvlab-toc" role="navigation" aria-label="contents"><b>On this page</b><ol>{items}</ol></div>'


def numbered(heading: str, stem: str) -> str:
    """A report's title heading ('# Title') numbered as its file ('# 01 · Title'), unless it already is."""
    number = stem[:2]
    if not number.isdigit() or re.match(r"#\s*\d\d\s*·", heading):
        return heading
    return f"# {number} · {heading.lstrip('#').strip()}"


def write_glossary(out_dir: Path) -> Path:
    """``glossary.html``: the terms the pages use (:data:`GLOSSARY_TERMS`), linked from every page's top bar."""
    items = "".join(f"<dt>{html.escape(t)}</dt><dd>{markdown_inline(d)}</dd>" for t, d in GLOSSARY_TERMS)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">{VIEWPORT}<title>Glossary — kvlab</title>{PAGE_CSS}
<style>{asset("glossary.css")}</style>
</head><body>
{topbar_html("Glossary")}
<h1>Glossary</h1>
<p>The terms the reports use, in the order a reader meets them.</p>
<dl>{items}</dl>
</body></html>
"""
    path = out_dir / GLOSSARY
    path.write_text(controls_shown(page), encoding="utf-8")
    return path


def to_html(
    executed: Path,
    out: Path,
    title: str | None = None,
    panel: str = "",
    topbar: str = "",
    summary: dict | None = None,
) -> tuple[int, list[dict]]:
    """Export an executed notebook to standalone HTML without code, titled ``title``; write each figure's data
    beside it. The page's first screen: the report's title (its first heading), the verdict box (which opens with
    the three headline sentences), then ``panel`` (the provenance panel), then the rest of the title's cell (the
    introduction) and the report; ``topbar`` (:func:`topbar_html`) above the title, a table of contents under the
    panel where the page has more than four sections. Cells tagged :data:`JUPYTERLAB_ONLY` (interactive controls and
    the heading that introduces them) are left out: they do nothing in a static page. Return the number of embedded figures and the verdicts."""
    nb = nbformat.read(executed, as_version=4)
    nb.cells = [c for c in nb.cells if JUPYTERLAB_ONLY not in (c.get("metadata", {}).get("tags") or [])]
    title_cell = next((c for c in nb.cells if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")), None)
    if title_cell is not None:
        title_cell.source = (
            numbered(title_cell.source.lstrip().partition("\n")[0], out.stem)
            + "\n"
            + title_cell.source.lstrip().partition("\n")[2]
        )
    write_figure_data(nb, out)
    # the notebook's answer, verdict box and sources outputs come off the page: the answer and the verdicts stand
    # under the title, taken from the result file (``summary``, :func:`kvlab.studies.read_summary`) where given
    found = vd.extract(nb)
    shown = extract_answer(nb)
    extract_sources(nb)  # read by run_one for the panel; nothing to show
    answer = summary["answer"] if summary else (shown or {}).get(studies.ANSWER_MIME)
    if summary:
        found = list(summary["verdicts"])
    top = (
        (answer_html(answer) if answer else "")
        + (vd.box_html(found) if found else "")
        + (PANEL_SLOT if panel else "")
        + TOC_SLOT
    )
    # right under the title: the first markdown cell's heading (the template puts ``top`` after the cell it marks),
    # split from the introduction after it
    first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), None)
    if first is not None:
        heading, _, intro = nb.cells[first].source.lstrip().partition("\n")
        if heading.startswith("# ") and intro.strip():
            nb.cells[first].source = heading
            nb.cells.insert(first + 1, nbformat.v4.new_markdown_cell(intro.strip()))
        nb.cells[first].metadata["kvlab"] = "title"
    else:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell("", metadata={"kvlab": "title"}))
    exporter = _exporter()(
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        template_name="kvlab",
        extra_template_basedirs=[str(TEMPLATES_DIR)],
    )
    if title:
        nb.metadata["title"] = f"{title} — kvlab"  # the page's <title>
    page = {"top": top, "topbar": topbar, "css": PAGE_CSS_TEXT}
    body, _ = exporter.from_notebook_node(nb, resources={"kvlab": page})
    # two slots filled once the page's text is known: the panel's K note reads the page, the contents its headings
    if panel:
        body = body.replace(PANEL_SLOT, with_k_note(panel, body), 1)
    body = body.replace(TOC_SLOT, toc_html(body), 1)
    body = reports_linked(body, out.stem)
    out.write_text(controls_shown(body), encoding="utf-8")  # a control from data reorders nothing (markup.py)
    return len(FIGURE_RE.findall(body)), found


class ParameterError(ValueError):
    """A ``-p`` parameter no selected notebook has, or a value of the wrong type: the message names the parameter,
    the notebooks' parameters and the closest name."""


#: Parameters that say where things are, not what a report computes: a build with another value is the same
#: report of other data, written under the report's own name (every other changed parameter makes a variant).
LOCATION_PARAMETERS = frozenset({"data_dir", "fig_format"})


def _expected(info: dict) -> type | None:
    try:
        return type(ast.literal_eval(info["default"]))
    except (ValueError, SyntaxError, TypeError):
        return None


def _typed(name: str, value, info: dict, where: str):
    """``value`` as the type of the notebook's default for ``name`` (an int given for a float is a float); a value
    that is not that type is refused, naming the parameter, the type and where it is declared."""
    want = _expected(info)
    if want is None or value is None or isinstance(value, want) and not (want is int and isinstance(value, bool)):
        return value
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ParameterError(
        f"parameter {name}={value!r}: expected {want.__name__} ({where} declares {name} = {info['default']})"
    )


def checked_parameters(paths: list[Path], parameters: dict | None) -> dict[Path, dict]:
    """Each notebook's own parameters from ``parameters`` (papermill passes a name a notebook lacks with only a
    warning): a name none of ``paths`` declares is refused with the closest names and every name they declare, and
    each value must have its default's type."""
    declared = {p: pm.inspect_notebook(str(p)) for p in paths}
    known: dict[str, tuple[dict, str]] = {}
    for p, names in declared.items():
        for name, info in names.items():
            known.setdefault(name, (info, p.name))
    unknown = [n for n in (parameters or {}) if n not in known]
    if unknown:
        hints = []
        for n in unknown:
            close = difflib.get_close_matches(n, list(known), n=2, cutoff=0.6)
            hints.append(f"{n!r}" + (f" (did you mean {' or '.join(close)}?)" if close else ""))
        raise ParameterError(
            f"unknown parameter {', '.join(hints)}: the selected notebooks declare {', '.join(sorted(known))}"
        )
    typed = {n: _typed(n, v, *known[n]) for n, v in (parameters or {}).items()}
    return {p: {n: v for n, v in typed.items() if n in declared[p]} for p in paths}


def variant_stem(nb_path: Path, parameters: dict | None) -> str:
    """The file stem a build of ``nb_path`` with ``parameters`` writes: the notebook's own where every parameter that
    changes what it computes is its default, else the stem with those parameters (``01_context_scaling--mem_util-0.95``),
    so a re-run with other parameters never overwrites the default report."""
    changed = {k: v for k, v in changed_parameters(nb_path, parameters).items() if k not in LOCATION_PARAMETERS}
    if not changed:
        return nb_path.stem
    parts = [f"{k}-{v}" for k, v in sorted(changed.items())]
    return nb_path.stem + "--" + "--".join(re.sub(r"[^A-Za-z0-9_.+-]+", "-", p).strip("-") for p in parts)[:120]


def changed_parameters(nb_path: Path, parameters: dict | None) -> dict:
    """The parameters given that differ from the template's defaults (its ``parameters`` cell)."""
    defaults = pm.inspect_notebook(str(nb_path))
    out = {}
    for name, value in (parameters or {}).items():
        if name not in defaults:
            continue  # papermill ignores names a notebook lacks
        try:
            default = ast.literal_eval(defaults[name]["default"])
        except (ValueError, SyntaxError):
            default = object()
        if value != default:
            out[name] = value
    return out


def provenance(data_dir: Path, nb_path: Path | None, parameters: dict | None, sources: Sources | None = None) -> dict:
    """What a report rests on: the measured runs (engines with versions, models, hosts, dates, experiments),
    the published documents (by title, publisher and date), the code that built it and the parameters that differ
    from the template's.

    ``sources`` (what the notebook read, :func:`kvlab.verdicts.extract_sources`) narrows it to the report's own
    measured experiments and documents; without it (the index: the whole build) it covers every run and document
    under ``data_dir``."""
    runs = store.load_runs(data_dir)
    measured = runs.filter(pl.col("source") == "measured")
    if sources is None:
        experiments = sorted(measured["experiment"].unique())
        documents = sorted(
            set(runs.filter(pl.col("source") == "published")["experiment"].unique())
            | set(store.load_claims(data_dir)["experiment"].unique())
        )
    else:
        experiments, documents = list(sources.measured), list(sources.documents)
        measured = measured.filter(pl.col("experiment").is_in(experiments))
    hosts, sweep_commits, without_bf16 = set(), set(), False
    for exp in sorted(measured["experiment"].unique()):
        for sweep in store.read_manifest(data_dir / "runs" / exp).get("sweeps") or []:
            h = sweep.get("host") or {}
            cpu_flags = h.get("cpu_flags") or []  # empty where unknown: then nothing is claimed
            flags = ", ".join(cpu_flags)
            without_bf16 |= bool(cpu_flags) and not h.get("gpus") and not host.NATIVE_BF16_FLAGS.intersection(cpu_flags)
            hosts.add(
                h.get("accelerator")
                if h.get("gpus")
                else f"{h.get('cpu')}, {h.get('cpu_cores')} cores{f' ({flags})' if flags else ''}"
            )
            sweep_commits.add((sweep.get("git_commit") or "unknown")[:12])
    started = measured["started_at"].drop_nulls().sort()
    return {
        "engines": [
            _engine_line(e, v, d, k, without_bf16)
            for e, v, d, k in measured.select("engine", "engine_version", "dtype", "device_kind")
            .unique()
            .sort("engine", "dtype", nulls_last=True)
            .iter_rows()
        ],
        "models": sorted({tinymodel.describe(m) for m in measured["model"].drop_nulls().unique()}),
        "hosts": sorted(h for h in hosts if h),
        "runs": measured.height,
        "run_dates": (started[0][:16].replace("T", " "), started[-1][:16].replace("T", " ")) if len(started) else None,
        "experiments": experiments,
        "published": document_names(store.load_documents(data_dir), documents),
        "sweep_commits": sorted(sweep_commits),
        "kvlab": f"{__version__} at {(host.git_commit() or 'unknown commit')[:12]}",
        "built": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "parameters": changed_parameters(nb_path, parameters) if nb_path else dict(parameters or {}),
        "notebook": nb_path.name if nb_path else None,
    }


def document_names(register: pl.DataFrame, documents: list[str]) -> list[str]:
    """How a provenance panel names each document, from the register (``reference/documents.csv``): its kind and
    title, then in brackets the English title where it has another language, its language and date, and its
    publisher (or that it names none). A document the register lacks is named by its experiment name, and says so."""
    rows = {r["experiment"]: r for r in register.iter_rows(named=True)}
    names = []
    for doc in documents:
        r = rows.get(doc)
        if r is None:
            names.append(f"{doc} (not in the document register)")
            continue
        facts = ([f"‘{r['title_en']}’"] if r["title_en"] else []) + [
            ", ".join(f for f in (r["language"], r["published"]) if f),
            r["publisher"] or "no publisher named",
        ]
        names.append(f"{r['kind']} ‘{r['title']}’ ({'; '.join(f for f in facts if f)})")
    return names


def _engine_line(
    engine: str, version: str | None, dtype: str | None, device_kind: str | None, without_bf16: bool = False
) -> str:
    """How a provenance line names what ran: display name, version, and in brackets where it ran (on a CPU, the
    adapter's note, e.g. 'CPU, torch-native kernels') and the compute dtype (runs stored before it was recorded have
    none); float32 on a CPU without native bfloat16 says why (EngineSpec.dtype bfloat16-if-native)."""
    notes = []
    if device_kind == "cpu" and registry.cpu_note(engine):
        notes.append(registry.cpu_note(engine))
    if dtype == "float32" and without_bf16:
        notes.append("float32 compute: this CPU has no native bfloat16")
    elif dtype:
        notes.append(f"{dtype} compute")
    line = f"{engine_label(engine)} {version or '(version not reported)'}"
    return line + (f" ({'; '.join(notes)})" if notes else "")


def panel_html(prov: dict) -> str:
    """The provenance panel under a report's verdict box: where it comes from, in one screen-wide box. It stands in
    a notebook output, whose template right-aligns and stripes table cells: its rules say ``!important``. Every value is
    data (a model name, a host's facts, an engine's reported version, a run's date, an experiment's name) and is
    escaped and isolated here, where it becomes HTML (:func:`kvlab.markup.name_html`); only the panel's own markup is
    written raw."""
    e = name_html

    def joined(values, sep: str) -> str:
        return sep.join(e(str(v)) for v in values)

    dates = prov["run_dates"]
    rows = [
        ("measured with", joined(prov["engines"], "; ") or "nothing yet (run <code>make report</code>)"),
        ("model", joined(prov["models"], ", ") or "–"),
        ("hardware", joined(prov["hosts"], "; ") or "–"),
        (
            "runs",
            f"{e(str(prov['runs']))} measured" + (f", {e(str(dates[0]))} to {e(str(dates[1]))} UTC" if dates else ""),
        ),
        ("experiments", ", ".join(f"<code>data/experiments/{e(x)}.yaml</code>" for x in prov["experiments"]) or "–"),
        ("documents", joined(prov["published"], "; ") or "–"),
        (
            "built",
            f"{e(str(prov['built']))} by kvlab {e(prov['kvlab'])}; runs measured at "
            f"{'commit' if len(prov['sweep_commits']) == 1 else 'commits'} {joined(prov['sweep_commits'], ', ') or '–'}",
        ),
        (
            "parameters",
            ", ".join(f"<code>{e(str(k))} = {e(repr(v))}</code>" for k, v in prov["parameters"].items())
            or "the template's defaults",
        ),
    ]
    cells = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    links = (
        f'<a href="index.html">← all reports</a> · <a href="{html.escape(prov["notebook"])}">this report as a notebook '
        f'(.ipynb)</a> · <a href="{RUNS_CSV}">the run data behind it (CSV)</a>'
        if prov["notebook"]
        else f'<a href="{RUNS_CSV}">every run row the reports read (CSV)</a>'
    )
    return f"""<nav class="kvlab-provenance" style="font: 13px system-ui, sans-serif; background: #f4f6f8;
border: 1px solid #d0d7de; border-radius: 6px; padding: .5rem .9rem; margin: 0 0 1rem;">
<div style="margin-bottom: .3rem;">{links}</div>
<table style="border-collapse: collapse; margin: 0; table-layout: auto; font-size: 13px;">{cells}</table>
<style>.kvlab-provenance th {{ text-align: left !important; padding: 1px 1rem 1px 0 !important; color: #555;
font-weight: 600; vertical-align: top !important; white-space: nowrap !important; }}
.kvlab-provenance td {{ text-align: left !important; padding: 1px 0 !important; vertical-align: top !important; }}
.kvlab-provenance tr {{ background: none !important; }}</style>
</nav>
"""


class QuietShutdownKernelManager(AsyncKernelManager):
    """The kernel manager notebooks run under. jupyter_client 8 interrupts (SIGINT) every kernel before shutting
    it down; a notebook executed to its end has nothing left to interrupt, and the signal, landing while
    ipykernel handles the shutdown request, made it print ``[IPKernelApp] ERROR | KeyboardInterrupt caught in
    kernel.`` on a clean ``make report``. Only that interrupt is skipped: one asked for while a cell runs (a
    timeout) still goes out."""

    async def _async_interrupt_kernel(self) -> None:
        if self.shutting_down:
            return
        await super()._async_interrupt_kernel()


def kernel_config():
    """Kernel-manager settings for executing notebooks: CurveZMQ keys for the kernel's sockets where this
    pyzmq supports them. Without keys ipykernel (7.4) warns on every start that its TCP traffic is
    unencrypted; with ``auto`` the manager provisions keys only for kernelspecs that declare support."""
    return Config(
        {
            "KernelManager": {"transport_encryption": "auto" if zmq.has("curve") else "disabled"},
            "NotebookClient": {"kernel_manager_class": QuietShutdownKernelManager},
        }
    )


def run_one(nb_path: Path, out_dir: Path, parameters: dict | None = None, kernel_name: str = "python3") -> Report:
    """Execute one notebook into ``out_dir`` with papermill and export it to HTML."""
    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = variant_stem(nb_path, parameters)  # a re-run with other parameters writes its own files
    before = {name: os.environ.get(name) for name in (STATIC_ENV, FIGURE_DIR_ENV)}
    os.environ[STATIC_ENV] = "1"  # inherited by the kernel papermill starts
    os.environ[FIGURE_DIR_ENV] = f"{stem}{FIGURES_SUFFIX}"  # where its figures link their data
    executed = out_dir / f"{stem}.ipynb"
    result_path = out_dir / f"{stem}{RESULT_SUFFIX}"
    result_path.unlink(missing_ok=True)  # an earlier build's file must not stand in for this one's
    os.environ[studies.RESULT_ENV] = str(result_path.resolve())  # the notebook writes its result there
    try:
        pm.execute_notebook(
            str(nb_path),
            str(executed),
            parameters=parameters or {},
            kernel_name=kernel_name,
            cwd=str(nb_path.parent),
            progress_bar=False,
            log_output=False,
            config=kernel_config(),
        )
    finally:  # this process may build another report, or be a test's or a notebook session's
        os.environ.pop(studies.RESULT_ENV, None)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    html_path = out_dir / f"{stem}.html"
    title, page_summary = describe(nb_path)
    if changed := {k: v for k, v in changed_parameters(nb_path, parameters).items() if k not in LOCATION_PARAMETERS}:
        title += " (" + ", ".join(f"{k} = {v}" for k, v in changed.items()) + ")"
    data_dir = Path((parameters or {}).get("data_dir") or DATA_DIR)
    if not result_path.exists():
        raise RuntimeError(
            f"{nb_path.name} ran without writing its result ({result_path.name}): its first code cell must call "
            "kvlab.studies.notebook(...)"
        )
    # the study computed once, in the notebook: the page, the result file beside it and the index read the same
    summary = studies.read_summary(result_path)
    sources = Sources(summary["experiments"], summary["documents"])  # what the notebook read: its panel covers that
    previous, following = neighbours(nb_path)
    prov = provenance(data_dir, nb_path, parameters, sources)
    figures, _ = to_html(
        executed,
        html_path,
        title,
        panel_html(prov),
        topbar=topbar_html(f"{nb_path.stem[:2]} · {title}", previous, following),
        summary=summary,
    )
    return Report(
        nb_path.name,
        title,
        page_summary,
        html_path,
        time.perf_counter() - start,
        figures,
        tuple(summary["verdicts"]),
        summary["answer"],
        summary["experiments"],
        summary["documents"],
        prov,
    )


def _defaults(nb_path: Path) -> dict:
    """A template's parameter defaults (its ``parameters`` cell), as papermill reads them."""
    out = {}
    for name, p in pm.inspect_notebook(str(nb_path)).items():
        try:
            out[name] = ast.literal_eval(p["default"])
        except (ValueError, SyntaxError, TypeError):  # not a literal: the study's own default stands
            pass
    return out


#: The runs table's columns: (run column, header, how a cell shows it). Numbers sort by their value (data-v).
RUN_COLUMNS = [
    ("experiment", "experiment", None),
    ("engine", "engine", None),
    ("context_tokens", "context (tokens)", "int"),
    ("mem_util", "memory setting", "setting"),
    ("status", "status", None),
    ("ttft_p50_ms", "TTFT p50 (ms)", "num"),
    ("ttft_p99_ms", "TTFT p99 (ms)", "num"),
    ("tpot_p50_ms", "TPOT p50 (ms)", "num"),
    ("output_tokens_per_s", "output tokens/s", "num"),
    ("requests_ok", "n (requests)", "int"),
    ("run_id", "run id", None),
]

#: The runs table's inline script: click a header to sort by it (again to reverse), type to keep only the rows
#: that contain the text. No library, nothing fetched: it works from file://.
RUNS_SCRIPT = f"<script>\n{asset('runs.js')}</script>"


def run_tables_html(runs) -> str:
    """Every measured run in one table for the index: per run its experiment, engine, context, memory setting,
    status, TTFT p50/p99, TPOT p50, output tokens/s, n (completed requests) and run id; sortable by any column and
    filterable by text (:data:`RUNS_SCRIPT`), folded under a summary so the printed index stays short."""
    measured = runs.filter(pl.col("source") == "measured").sort(
        "experiment", "engine", "context_tokens", "mem_util", nulls_last=True
    )
    if not measured.height:
        return ""
    e = html.escape

    def cell(kind, v, column):
        if v is None or (isinstance(v, float) and v != v):
            return '<td data-v="">–</td>' if kind else "<td>–</td>"
        if column == "engine":
            return f"<td>{name_html(engine_label(str(v)))}</td>"
        if kind == "int":
            return f'<td data-v="{int(v)}">{int(v):,}</td>'
        if kind == "setting":
            return f'<td data-v="{float(v)}">{float(v):g}</td>'
        if kind == "num":
            return f'<td data-v="{float(v):.6g}">{e(tables.number(float(v)))}</td>'
        return f"<td>{name_html(v)}</td>"  # an experiment's name, a status, a run id: data, shown isolated

    head = "".join(f'<th scope="col">{e(h)}</th>' for _, h, _ in RUN_COLUMNS)
    body = "".join(
        "<tr>" + "".join(cell(k, r.get(c), c) for c, _, k in RUN_COLUMNS) + "</tr>"
        for r in measured.iter_rows(named=True)
    )
    return f"""<details class="kvlab-runs"><summary>{measured.height} measured runs: TTFT, TPOT, throughput and n per run
(show; sort by a header, filter by any text)</summary>
<p><label>Filter: <input id="kvlab-runs-filter" type="search" placeholder="vLLM, cpu_capacity, failed…"></label>
<span id="kvlab-runs-count"></span></p>
<div class="kvlab-table-wrap" style="overflow-x: auto; max-width: 100%;">
<table id="kvlab-runs" class="kvlab-runs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>
</details>
{RUNS_SCRIPT}"""


def figure_links_html(reports: list[Report], out_dir: Path) -> str:
    """One line per report linking each of its figures' data (the CSVs in ``<report>.figures``)."""
    lines = []
    for r in reports:
        listing = figure_dir(out_dir / r.html.name) / FIGURES_JSON
        figs = json.loads(listing.read_text()) if listing.exists() else []
        if figs:
            folder = f"{Path(r.html.name).stem}{FIGURES_SUFFIX}"
            links = ", ".join(
                f'<a href="{html.escape(folder)}/{html.escape(f["file"])}">Figure {f["number"]}</a>'
                if f.get("number")
                else f'<a href="{html.escape(folder)}/{html.escape(f["file"])}">figure</a>'
                for f in figs
            )
            lines.append(f"<li>{html.escape(Path(r.html.name).stem[:2])} · {html.escape(r.title)}: {links}</li>")
    return f'<ul class="kvlab-figure-data">{"".join(lines)}</ul>' if lines else ""


#: Beside index.json: the run folders and manifests the build did not read (:func:`kvlab.store.quarantined`), each
#: with its path and reason; an empty list where every one was read.
QUARANTINED_JSON = "quarantined.json"


def quarantined_html(found: list[store.Quarantined], data_dir: Path) -> str:
    """The index's "Quarantined" list: each run folder or manifest the reports did not read, by its path under the
    data folder, and why (a copy of another folder's run: that folder, kept, named too); empty where there is none.
    Every path and reason is data, shown isolated (:func:`kvlab.markup.name_html`)."""
    if not found:
        return ""

    def item(q: store.Quarantined) -> str:
        kept = f" (read instead: <code>{name_html(_under(q.kept, data_dir))}</code>)" if q.kept is not None else ""
        return f"<li><code>{name_html(_under(q.path, data_dir))}</code>{kept}: {name_html(q.reason)}</li>"

    items = "\n".join(item(q) for q in found)
    copies = sum(q.kept is not None for q in found)
    unread = len(found) - copies
    said = [
        f"{count(unread, 'stored run folder or manifest', 'stored run folders or manifests')} could not be read"
        if unread
        else "",
        f"{count(copies, 'run folder')} {'holds' if copies == 1 else 'hold'} a run another folder holds (a copy)"
        if copies
        else "",
    ]
    return (
        f"<h2>Quarantined</h2>\n<p>{' and '.join(t for t in said if t)}; every report above was built without "
        f"{'it' if len(found) == 1 else 'them'}.</p>\n"
        f'<ul class="kvlab-quarantined">\n{items}\n</ul>\n'
    )


def _under(path: Path, data_dir: Path) -> str:
    try:
        return str(Path(path).relative_to(data_dir))
    except ValueError:
        return str(path)


#: The report whose answer table is the index's first table (the reference host's engine by context).
ANSWER_REPORT = "01_context_scaling.ipynb"
#: The report whose answer says what the memory setting means (the index's line under the table).
MEMORY_REPORT = "03_memory_utilisation.ipynb"


def answer_html(answer: dict) -> str:
    """A report's answer (:meth:`kvlab.studies.Answer.to_json`) as the first thing under its title: its sentences
    after a bold 'Answer.', then its table with the evidence kind of every row (a badge)."""
    text = " ".join(markdown_inline(t) for t in answer.get("sentences") or [])
    return (
        f'<div class="kvlab-answer" style="font-size: 15px; line-height: 1.5; margin: .5rem 0 1rem;">'
        f"<p><b>Answer.</b> {text}</p>{answer_table_html(answer, None)}</div>"
    )


def answer_table_html(answer: dict | None, href: str | None) -> str:
    """An answer's typed table as HTML: engine and evidence kind per row, each row linked to the report that
    decides it (``href``; None: no link, on the report's own page)."""
    table = (answer or {}).get("table") or {}
    rows = [dict(zip(table["columns"], r)) for r in table.get("rows") or []] if table else []
    if not rows:
        return ""
    cols = [c for c in table["columns"] if not c.endswith("_tokens")]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)

    def cell(c, v):
        text = tables.answer_cell(c, v)
        if c == "evidence":
            return f"<td>{vd.evidence_badge(text)}</td>"
        return f"<td>{html.escape(text)}</td>"

    link = (lambda: f'<td><a href="{html.escape(href)}">report</a></td>') if href else (lambda: "")
    body = "".join("<tr>" + "".join(cell(c, r[c]) for c in cols) + link() + "</tr>" for r in rows)
    style = "border-collapse: collapse; margin: .5rem 0;"
    td = "text-align: left; padding: 3px 10px; border-bottom: 1px solid #ddd;"
    table = f'<table class="answer" style="{style}"><tr>{head}{"<th></th>" if href else ""}</tr>{body}</table>'
    return table.replace("<th>", f'<th style="{td}">').replace("<td>", f'<td style="{td}">')


def host_counts(every: list[dict]) -> dict[str, int]:
    """What this host's measured verdicts (index.json's dicts) decide and cannot, each claim once and the families
    apart (docs/verdicts.md: kvlab's own questions are never counted as the documents' claims): ``decided`` and
    ``decided_own`` (document claims, own questions a run here reproduced, contradicted or answered), ``speed`` and
    ``speed_own`` (speed claims and questions two CPU implementations cannot decide), ``gpu_only`` and
    ``gpu_only_own`` (the rest it cannot test: a GPU host's mechanisms, service or memory)."""
    measured = [v for v in every if v.get("evidence") == "measured"]
    out = {"measured": len(measured)}

    def family(v: dict) -> str:
        got = v.get("family") or vd.family_of(
            v.get("claim_id", ""), v.get("kind", ""), "measured", v.get("outcome", "")
        )
        return "own" if got == "own" else "document"

    for suffix, fam in (("", "document"), ("_own", "own")):
        counted: dict[str, dict] = {}  # each claim once, by the verdict it counts by, as the headline counts it
        for v in (v for v in measured if family(v) == fam):
            for k in filter(None, (c.strip() for c in (v.get("claim_id") or v.get("claim", "")).split(","))):
                if k not in counted or vd.outranks(v["outcome"], counted[k]["outcome"]):
                    counted[k] = v
        decided = {k for k, v in counted.items() if v["outcome"] in vd.DECIDING_OUTCOMES}
        cannot = {k: v.get("limit") for k, v in counted.items() if v["outcome"] == "cannot be tested here"}
        speed = {c for c, limit in cannot.items() if limit == CPU_IMPLEMENTATIONS}
        out |= {f"decided{suffix}": len(decided), f"speed{suffix}": len(speed)}
        out[f"gpu_only{suffix}"] = len(cannot) - len(speed)
    return out


def host_sentence(every: list[dict]) -> str:
    """What this host's measurements add, counted from every report's measured verdicts (index.json's dicts), the
    documents' claims apart from kvlab's own questions (:func:`host_counts`): two short sentences."""
    n = host_counts(every)
    if not n["measured"]:
        return "Nothing was measured on this host yet: `make report` measures the embedded default."

    def both(key: str, what: str) -> str:
        doc, own = n[key], n[f"{key}_own"]
        said = [count(doc, f"document {what}")] if doc or not own else []
        return " and ".join(said + ([count(own, "own question")] if own else []))

    decided = (
        f"This host's runs (real engines on a CPU, a tiny model) decide {both('decided', 'claim')} about mechanisms "
        "(prefix-cache reuse, queueing past a KV budget)."
    )
    cannot = [f"{both('speed', 'speed claim')} (CPU runs are no evidence about B300 speed)"]
    if n["gpu_only"] or n["gpu_only_own"]:
        cannot.append(f"{both('gpu_only', 'claim')} about a GPU host's memory or service")
    return f"{decided} They cannot test {' or '.join(cannot)}."


def answer_section(reports: list[Report], every: list[dict]) -> str:
    """The index's first section: the reference host's answer table (report 01's answer: engine by context, each
    row with its evidence kind), what the memory setting means (report 03's answer) and what this host's runs add
    (:func:`host_sentence`); '' where report 01 was not built."""
    by_nb = {r.notebook: r for r in reports if r.html.stem == Path(r.notebook).stem}  # the default pages only
    main, memory = by_nb.get(ANSWER_REPORT), by_nb.get(MEMORY_REPORT)
    if main is None or not main.answer:
        return ""
    answer = (
        f'<section class="kvlab-answer"><h2>Which engine, at which context (reference host)</h2>'
        f"{answer_table_html(main.answer, main.html.name)}"
        f"<p>{markdown_inline(main.answer['sentences'][0])}</p>"
    )
    if memory is not None and memory.answer:
        answer += (
            f"<p><b>Memory setting.</b> {markdown_inline(' '.join(memory.answer['sentences'][:2]))} "
            f'<a href="{html.escape(memory.html.name)}">report</a></p>'
        )
    return answer + f"<p>{markdown_inline(host_sentence(every))}</p></section>"


def write_index(
    reports: list[Report], out_dir: Path, note: str = "", panel: str = "", runs_html: str = "", quarantine: str = ""
) -> Path:
    """An index page that answers first: the reference host's answer table (report 01's answer: engine by context,
    each row with its evidence kind), what the memory setting means (report 03's answer), what this host's runs
    add; then one line per report (title, answer, link); then the verdicts counted by family
    (:func:`kvlab.verdicts.headline`), the provenance ``panel`` (the whole build's), the run tables (``runs_html``)
    and the ``quarantine`` list (:func:`quarantined_html`). ``reports/index.json`` holds each report's answer and
    verdicts (from its study)."""
    every = [v for r in reports for v in r.verdicts]
    answer = answer_section(reports, every)
    items = "\n".join(
        f'<li><a href="{html.escape(r.html.name)}">{html.escape(Path(r.html.name).stem[:2])} · {html.escape(r.title)}</a>'
        f"<p>{markdown_inline(' '.join((r.answer or {}).get('sentences', [])[:1]) or r.summary)}</p>"
        f"<small>{count(r.figures, 'figure')}, built in {r.seconds:.0f} s</small></li>"
        for r in reports
    )
    lead = (
        f'<h2>Verdicts, counted by kind</h2><p class="kvlab-headline" style="font-size: 16px; line-height: 1.5;">'
        f"{' '.join(markdown_inline(t) for t in vd.headline(every, index=True))}</p>"
        if every
        else ""
    )
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    figures_html = figure_links_html(reports, out_dir)
    panel = with_k_note(panel, answer + lead + items + runs_html) if panel else panel
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">{VIEWPORT}<title>kvlab reports</title>{PAGE_CSS}
<style>
{asset("index.css")}</style></head><body>
{
        topbar_html(
            "Index",
            None,
            (reports[0].html.name, Path(reports[0].html.name).stem[:2] + " · " + reports[0].title) if reports else None,
        )
    }
<h1>kvlab reports</h1>
{answer}
<h2>The reports</h2>
<ul class="kvlab-reports" style="list-style: none; padding-left: 0;">
{items}
</ul>
{lead}<p class="legend">Every figure is labelled <b>published</b> (a document's number, cited),
<b>measured</b> (a real engine run, with the host it ran on) or <b>modelled</b> (kvlab's physical model).</p>
{panel}<h2>Runs measured</h2>
{
        "<p>Every column of every run is in <a href='runs.csv'>runs.csv</a>; each report's answer and verdicts in "
        "<a href='index.json'>index.json</a>.</p>" + runs_html
        if runs_html
        else "<p><i>No measured run yet: <code>make report</code> measures the embedded default on this machine.</i></p>"
    }
{quarantine}{"<h2>Figure data (CSV)</h2>" + figures_html if figures_html else ""}
<p><small>Built {stamp}. {html.escape(note)}</small></p>
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(controls_shown(page), encoding="utf-8")
    write_glossary(out_dir)
    listed = {
        "schema_version": studies.SCHEMA_VERSION,
        "reports": [{**r.__dict__, "html": r.html.name} for r in reports],
    }
    (out_dir / "index.json").write_text(json.dumps(listed, indent=2, default=str))
    return index


def read_index(path: Path) -> list[dict]:
    """The report entries of an ``index.json``: ``{"schema_version": …, "reports": [...]}``, or the bare list an
    index written before schema_version holds."""
    data = json.loads(Path(path).read_text())
    return data if isinstance(data, list) else list(data["reports"])


def _with_earlier(reports: list[Report], out_dir: Path) -> list[Report]:
    """The reports just built plus earlier ones still in ``out_dir`` (a partial rebuild keeps the index whole), each
    page once: a variant (other parameters) is a page of its own beside its report's default page."""
    built = {r.html.name for r in reports}
    earlier = []
    index = out_dir / "index.json"
    if index.exists():
        for e in read_index(index):
            if e["html"] not in built and (out_dir / e["html"]).exists():
                e = {k: v for k, v in e.items() if k in Report.__dataclass_fields__}  # an older index's fields
                earlier.append(
                    Report(
                        **{
                            **e,
                            "html": out_dir / e["html"],
                            "verdicts": tuple(e.get("verdicts", ())),
                            "experiments": tuple(e.get("experiments", ())),
                            "documents": tuple(e.get("documents", ())),
                        }
                    )
                )
    return sorted([*reports, *earlier], key=lambda r: r.html.name)


def build(
    out_dir: Path = REPORTS_DIR,
    selected: list[str] | None = None,
    parameters: dict | None = None,
    workers: int | None = None,
    progress=None,
) -> list[Report]:
    """Execute the selected notebooks (in parallel processes) and write the index.

    ``parameters`` are passed to every notebook; papermill ignores names a notebook lacks only
    with a warning, so pass notebook-specific ones through :func:`run_one`. ``progress`` is an
    optional callable(report) for a progress bar.
    """
    paths = notebooks(selected)
    # the cores this process may use (a pinned process gets one worker per core it has, not per core in the machine)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = workers or min(len(paths), cores) or 1
    out_dir.mkdir(parents=True, exist_ok=True)
    reports: list[Report] = []
    errors: list[str] = []

    per_notebook = checked_parameters(paths, parameters)  # refuses an unknown name or a mistyped value first

    def done(path: Path, outcome) -> None:
        try:
            r = outcome()
            reports.append(r)
            if progress:
                progress(r)
        except Exception as exc:  # keep building the others, then fail naming each
            errors.append(f"{path.name}: {type(exc).__name__}: {str(exc).strip()[-2000:]}")

    if workers == 1:  # one at a time: in this process (each notebook still runs in a kernel of its own)
        for p in paths:
            done(p, lambda p=p: run_one(p, out_dir, per_notebook[p]))
    else:
        # spawn, not fork: the workers use polars (provenance), whose thread pool does not survive a fork of a
        # parent that already used it (a test, a notebook session)
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(run_one, p, out_dir, per_notebook[p]): p for p in paths}
            for fut in as_completed(futures):
                done(futures[fut], fut.result)
    if reports:
        data_dir = Path((parameters or {}).get("data_dir") or DATA_DIR)
        runs = store.load_runs(data_dir)
        store.write_csv(runs, out_dir / RUNS_CSV)
        found = store.quarantined(data_dir)
        (out_dir / QUARANTINED_JSON).write_text(
            json.dumps(
                [
                    {"path": _under(q.path, data_dir), "reason": q.reason}
                    | ({"kept": _under(q.kept, data_dir)} if q.kept is not None else {})
                    for q in found
                ],
                indent=2,
            ),
            encoding="utf-8",
        )
        write_index(
            _with_earlier(reports, out_dir),
            out_dir,
            panel=panel_html(provenance(data_dir, None, parameters)),
            runs_html=run_tables_html(runs),
            quarantine=quarantined_html(found, data_dir),
        )
    if errors:
        raise RuntimeError("report build failed for:\n" + "\n".join(errors))
    return reports
