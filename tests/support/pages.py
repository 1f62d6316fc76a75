"""A report as its notebook computes and shows it, in the test's own process: the typed result and what each of the
notebook's ``page.<section>(r, wb)`` cells returns, in the notebook's order, so the figures are numbered as on the
built page. No kernel starts and nothing is exported: a test that reads numbers, verdicts and figure data needs
neither (conftest.built_reports executes and exports every notebook once, and the page tests read those pages)."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import mistune
import nbformat
import polars as pl

from kvlab import reports, studies, verdicts
from kvlab.figures import FigureView

#: A notebook line that shows a section of the study's page module
SECTION_CALL = re.compile(r"^page\.(\w+)\(r, wb\)$", re.M)


def _cells(prefix: str, parameters: dict) -> tuple[studies.StudyResult, list]:
    """``prefix``'s study computed with ``parameters`` over the notebook's defaults, as its first cell does, and the
    page in the notebook's order: each markdown cell's source (a str) and every item its ``page.<section>`` cells
    show."""
    nb = reports.notebooks([prefix])[0]
    wb, r, page = studies.open_page(prefix, reports._defaults(nb) | parameters)
    out: list = []
    try:
        for cell in nbformat.read(nb, as_version=4).cells:
            if cell.cell_type == "markdown":
                out.append(cell.source)
            for name in SECTION_CALL.findall(cell.source) if cell.cell_type == "code" else ():
                out += list(getattr(page, name)(r, wb))
    finally:
        plt.close("all")  # the figures' data is what a test reads; their drawings are not kept
    return r, out


def shown(prefix: str, parameters: dict) -> tuple[studies.StudyResult, list]:
    """``prefix``'s study as its first cell computes it, and every item its page's cells show, in order."""
    r, cells = _cells(prefix, parameters)
    return r, [c for c in cells if not isinstance(c, str)]


def figure_data(items: list) -> dict[int, pl.DataFrame]:
    """The data each numbered figure links as its CSV (what the build writes as figureN.csv), by figure number."""
    return {
        v.number: v.data for v in items if isinstance(v, FigureView) and v.number is not None and v.data is not None
    }


def figure_count(items: list) -> int:
    """How many figures the page shows."""
    return sum(isinstance(v, FigureView) for v in items)


def text_html(item) -> str:
    """One shown item as the page's text carries it, for the prose checks: a figure by its caption (its image holds
    no text, and is not drawn here), anything else by its own HTML."""
    if isinstance(item, FigureView):
        return f"<figure><figcaption>{item.caption_html()}</figcaption></figure>"
    return item._repr_html_() if hasattr(item, "_repr_html_") else ""


def page_texts(prefix: str, parameters: dict) -> tuple[str, str]:
    """``prefix``'s page prose as the built report shows it, for :func:`kvlab.prose.problems`, with the verdict box and
    without it (its headline is kvlab.verdicts', outside the study, so sentence checks leave it out), from one
    computation of the study: the answer, the notebook's markdown cells and every shown item (Markdown rendered,
    tables as their HTML, figures by caption)."""
    r, cells = _cells(prefix, parameters)
    return _text(r, cells, True), _text(r, cells, False)


def _text(r: studies.StudyResult, cells: list, box: bool) -> str:
    parts = ["".join(f"<p>{s}</p>" for s in r.answer.sentences), verdicts.box_html(list(r.verdicts)) if box else ""]
    for c in cells:
        if isinstance(c, str):
            parts.append(mistune.html(c))
            continue
        parts.append(mistune.html(c.data) if isinstance(getattr(c, "data", None), str) else "")
        parts.append(text_html(c))
    return "\n".join(parts)
