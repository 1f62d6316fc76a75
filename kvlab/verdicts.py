"""Verdicts: what a report found, claim by claim, shown first on the page and on the index.

A notebook computes its verdicts from the same frames as its text and displays them with
``display(verdicts.box([...]))``. In JupyterLab the box appears where the cell is; in a built report
(:mod:`kvlab.reports`) it is moved to the top, under the title and above the provenance panel, and copied to
the index.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from typing import Literal

from kvlab.markup import markdown_inline

#: The MIME type under which a verdict box carries its verdicts in a notebook output (read back by reports).
MIME = "application/vnd.kvlab.verdicts+json"

#: Verdict kinds that test a report's own question, which no document states (report 07's capacity study): the
#: headline does not attribute them to the documents.
OWN_QUESTION_KINDS = frozenset({"capacity"})

Outcome = Literal["reproduced", "contradicted", "inconclusive", "cannot be tested here", "found"]
Evidence = Literal["published", "measured", "modelled"]
#: Badge colours from the Okabe–Ito palette ("Color Universal Design", Masataka Okabe and Kei Ito, 2008,
#: https://jfly.uni-koeln.de/color/), distinct to readers with the common colour-vision deficiencies: outcomes and
#: evidence kinds never share a colour, and the two kinds of badge differ in shape too (square outcome, round
#: evidence). Text is black or white, whichever contrasts more with the fill.
OUTCOME_COLORS = {"reproduced": "#009E73", "contradicted": "#D55E00", "inconclusive": "#E69F00",
                  "cannot be tested here": "#6e7781", "found": "#0072B2"}
EVIDENCE_COLORS = {"published": "#CC79A7", "measured": "#56B4E9", "modelled": "#F0E442"}
#: Fills that take white text (the rest take black).
_WHITE_TEXT = frozenset({"#6e7781", "#0072B2"})


@dataclass(frozen=True)
class Verdict:
    """One claim a report tests and what came of it.

    ``claim``: the statement tested (a document's claim, or the question the report answers when no document
    states one); ``outcome``: reproduced / contradicted / inconclusive / cannot be tested here, or *found* for a
    report's own answer to its question; ``evidence``: the kind of numbers it rests on; ``number``: the one
    figure that decides it, as displayed, with its unit and context (e.g. '1.50× at 64K').

    The typed fields say what the evidence can decide (see the grading rules in :mod:`kvlab.claims`):
    ``claim_id`` (the reference row or the report's question id), ``kind`` (the claim kind whose checker graded
    it), ``value`` and ``unit`` (the deciding figure as a number), ``n`` (the runs behind it; None for published
    or modelled evidence), ``spread`` (the min–max range of ``value`` over the repeats, or the interval the
    checker states), ``scope`` (where the evidence comes from, e.g. "CPU, tiny model"), ``reason`` (one line:
    why this outcome) and, for a verdict the evidence here cannot decide (*cannot be tested here*, *inconclusive*),
    ``limit``: its cause in a few words, the same for every verdict of that cause (the grading rules' constants in
    :mod:`kvlab.claims.grading`), which the headline groups by."""

    claim: str
    outcome: Outcome
    evidence: Evidence
    number: str
    claim_id: str = ""
    kind: str = ""
    value: float | None = None
    unit: str = ""
    n: int | None = None
    spread: tuple[float, float] | None = None
    scope: str = ""
    reason: str = ""
    limit: str = ""

    def __post_init__(self):
        if self.outcome not in OUTCOME_COLORS:
            raise ValueError(f"Verdict outcome {self.outcome!r}: expected one of {list(OUTCOME_COLORS)}")
        if self.evidence not in EVIDENCE_COLORS:
            raise ValueError(f"Verdict evidence {self.evidence!r}: expected one of {list(EVIDENCE_COLORS)}")
        if self.spread is not None:
            object.__setattr__(self, "spread", tuple(self.spread))  # a list from JSON reads back as the tuple


def _badge(text: str, color: str, radius: str = "3px") -> str:
    ink = "#fff" if color in _WHITE_TEXT else "#000"
    return (f'<span class="kvlab-badge" style="display: inline-block; padding: 0 .5em; border-radius: {radius}; '
            f'color: {ink}; background: {color}; font-size: 12px; font-weight: 600; line-height: 1.5; '
            f'white-space: nowrap;">{html.escape(text)}</span>')


#: Inline cell style (the notebook HTML template right-aligns table cells with a rule a <style> here cannot beat).
_TD = "padding: 3px .6rem 3px 0; vertical-align: top; text-align: left; border: none;"


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _first_clause(text: str) -> str:
    """A reason's first clause (up to its first ';' or ':'), for a sentence that quotes one."""
    return text.split(";")[0].split(":")[0].strip().rstrip(".")


def _key(v: Verdict) -> str:
    """What a claim is, across reports and kinds of evidence: its id, else its statement."""
    return v.claim_id or v.claim


def _by_evidence(vs: list[Verdict]) -> str:
    """'on measured evidence', or 'on published (2) and measured (1) evidence' where kinds mix: claims counted once
    per kind of evidence, however many reports repeat them."""
    kinds: dict[str, set[str]] = {}
    for v in vs:
        kinds.setdefault(v.evidence, set()).add(_key(v))
    if len(kinds) == 1:
        return f"on {next(iter(kinds))} evidence"
    return "on " + " and ".join(f"{k} ({len(n)})" for k, n in kinds.items()) + " evidence"


def _why(vs: list[Verdict]) -> str:
    """The causes of ``vs`` (one outcome), each claim counted once per cause: 'CPU runs … (3); no GPU memory … (2)'
    — by each verdict's ``limit``, else the first clause of its reason."""
    causes: dict[str, set[str]] = {}
    for v in vs:
        cause = v.limit or (_first_clause(v.reason) if v.reason else "")
        if cause:
            causes.setdefault(cause, set()).add(_key(v))
    if len(causes) == 1:
        return next(iter(causes))
    return "; ".join(f"{c} ({len(k)})" for c, k in sorted(causes.items(), key=lambda kv: -len(kv[1])))


def headline(verdicts: list[Verdict] | list[dict]) -> list[str]:
    """The three sentences a page opens with, computed from its verdicts: what the documents claim; what holds,
    and on what evidence; what this host cannot say, and why (markdown, inline). A claim counts once in each
    sentence however many reports or kinds of evidence test it (the index holds every report's verdicts); the
    causes of what cannot be said are each verdict's own (``limit``), grouped."""
    vs = [v if isinstance(v, Verdict) else Verdict(**v) for v in verdicts]
    tested = [v for v in vs if v.outcome != "found"]
    found = [v for v in vs if v.outcome == "found"]
    first: dict = {}
    for v in tested:  # one claim tested on two kinds of evidence: quoted as first listed (the document's own
        first.setdefault(_key(v), v)  # wording, before a row that says where it was tested: '— on this host')
    claims = list(first.values())
    documents = [v for v in claims if v.kind not in OWN_QUESTION_KINDS]
    own = [v for v in claims if v.kind in OWN_QUESTION_KINDS]

    def quoted(vs: list[Verdict], noun: str) -> str:
        # the statement only: a row's claim may go on, after " — ", with where it was tested ("— on this host: …")
        said = [v.claim.split(" — ")[0].strip() for v in vs[:2]]
        first = "; ".join(c if c[:1] in "“\"'" else f"“{c}”" for c in said)
        return first + (f" and {_count(len(vs) - 2, 'more ' + noun)}" if len(vs) > 2 else "")

    def claims_of(outcome: str) -> list[Verdict]:
        return [v for v in tested if v.outcome == outcome]

    def n_claims(vs: list[Verdict]) -> int:
        return len({_key(v) for v in vs})

    if documents:
        claim = f"**The documents claim** {quoted(documents, 'claim')}." + (
            f" The page also tests {_count(len(own), 'question')} of its own." if own else "")
    elif own:
        claim = f"**The documents make no claim this page tests**; it tests its own: {quoted(own, 'question')}."
    else:
        claim = "**The documents make no claim this page tests**; it answers its own question."
    held = [v for v in tested if v.outcome in ("reproduced", "contradicted")]
    if held:
        parts = []
        for outcome in ("reproduced", "contradicted"):
            these = claims_of(outcome)
            if these:
                parts.append(f"{_count(n_claims(these), 'claim')} {outcome} {_by_evidence(these)}")
        holds = "**What holds:** " + ", ".join(parts) + "."
    else:
        holds = "**What holds:** no claim is reproduced or contradicted by evidence that can decide it."
    if found:
        holds += f" The page's own answer: {found[0].claim} — {found[0].number}."
    cannot, open_ = claims_of("cannot be tested here"), claims_of("inconclusive")
    if cannot or open_:
        parts = []
        if cannot:
            why = _why(cannot)
            parts.append(f"{_count(n_claims(cannot), 'claim')} cannot be tested on this host" + (f" ({why})" if why else ""))
        if open_:
            why, k = _why(open_), n_claims(open_)
            parts.append(f"{_count(k, 'claim')} {'is' if k == 1 else 'are'} inconclusive" + (f" ({why})" if why else ""))
        limits = "**What this host cannot say:** " + "; ".join(parts) + "."
    else:
        limits = "**What this host cannot say:** nothing on this page; every claim it tests was decided."
    return [claim, holds, limits]


def box_html(verdicts: list[Verdict] | list[dict], heading: str = "What this report found",
             lead: bool = True) -> str:
    """The verdict box: the three headline sentences (``lead``), then one row per claim: its outcome and evidence as
    coloured badges (one over the other), the claim, then the number."""
    rows = []
    for v in verdicts:
        v = v if isinstance(v, Verdict) else Verdict(**v)
        rows.append(
            # the two badges share one narrow cell (outcome over evidence): the claim and the number keep the width,
            # so a row stays a few lines deep on a printed page too
            f'<tr style="background: none;"><td style="{_TD} width: 1%;">{_badge(v.outcome, OUTCOME_COLORS[v.outcome])}'
            f'<br>{evidence_badge(v.evidence)}</td>'
            f'<td style="{_TD} width: 50%;">{markdown_inline(v.claim)}</td>'
            f'<td style="{_TD}" class="kvlab-number"><b>{markdown_inline(v.number)}</b></td></tr>'
        )
    body = "".join(rows) or '<tr><td colspan="4"><i>This report tests no claim.</i></td></tr>'
    sentences = " ".join(markdown_inline(t) for t in headline(verdicts)) if lead and verdicts else ""
    top = (f'<p class="kvlab-headline" style="margin: 0 0 .5rem; font-size: 15px; line-height: 1.45;">{sentences}</p>'
           if sentences else "")
    return f"""<section class="kvlab-verdicts" style="font: 14px system-ui, sans-serif; border: 2px solid #0969da;
border-radius: 6px; padding: .5rem .9rem; margin: 0 0 1rem;">
{top}<div style="font-weight: 700; margin-bottom: .3rem;">{html.escape(heading)}</div>
<table class="kvlab-verdict-rows" style="border-collapse: collapse; width: 100%; table-layout: auto;">{body}</table>
</section>
"""


class Box:
    """Displays as the verdict box and carries the verdicts as data (:data:`MIME`) for the report builder."""

    def __init__(self, verdicts: list[Verdict]):
        self.verdicts = list(verdicts)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": box_html(self.verdicts), MIME: [asdict(v) for v in self.verdicts],
                "text/plain": "\n".join(f"[{v.outcome} · {v.evidence}] {v.claim}: {v.number}" for v in self.verdicts)}


def box(verdicts: list[Verdict]) -> Box:
    """``display(box([...]))`` in a notebook: the report's verdicts (moved to the top of the built HTML)."""
    return Box(verdicts)


def extract(nb) -> list[dict]:
    """Remove every verdict box from an executed notebook (in place) and return their verdicts, in order.
    A markdown cell right before a box that is only its heading ("## Verdicts …") goes too: on the page the
    box stands under the title, and the heading would introduce nothing."""
    found: list[dict] = []
    drop = []
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        kept, had = [], False
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            if MIME in data:
                found.extend(data[MIME])
                had = True
            else:
                kept.append(out)
        cell["outputs"] = kept
        before = nb.cells[i - 1] if i else None
        if had and before is not None and before.get("cell_type") == "markdown" \
                and before.get("source", "").lstrip().startswith("## Verdict"):
            drop.append(i - 1)
    for i in reversed(drop):
        del nb.cells[i]
    return found


# --------------------------------------------------------------------------- what a notebook read

#: The MIME type under which a notebook's record of what it read (:class:`Sources`, ``wb.sources`` in
#: :mod:`kvlab.workbook`) travels to the report builder, which builds the report's provenance panel from it.
SOURCES_MIME = "application/vnd.kvlab.sources+json"


def add_names(found: list[str], names) -> None:
    """Append each non-empty name of ``names`` to ``found`` that is not in it yet (the order read is kept)."""
    for name in names:
        if name and name not in found:
            found.append(name)


@dataclass(frozen=True)
class Sources:
    """What a notebook read: its measured experiments and its documents (experiment names), in the order it read
    them. Displays as one line in JupyterLab and carries the names as data (:data:`SOURCES_MIME`) for the report
    builder, which takes the output off the built page."""

    measured: tuple[str, ...]
    documents: tuple[str, ...]

    def _repr_mimebundle_(self, include=None, exclude=None):
        line = (f"Read by this notebook: measured experiments {', '.join(self.measured) or 'none'}; "
                f"documents {', '.join(self.documents) or 'none'}.")
        return {"text/html": f'<p style="font-size: 12px; color: #555;">{html.escape(line)}</p>', "text/plain": line,
                SOURCES_MIME: {"measured": list(self.measured), "documents": list(self.documents)}}


def extract_sources(nb) -> Sources | None:
    """Remove every :class:`Sources` output from an executed notebook (in place, with a cell that showed nothing
    else) and return what they name together; None where the notebook displayed none."""
    measured: list[str] = []
    documents: list[str] = []
    seen, drop = False, []
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        outputs = cell.get("outputs", [])
        kept = [o for o in outputs if SOURCES_MIME not in (o.get("data") or {})]
        for out in outputs:
            data = (out.get("data") or {}).get(SOURCES_MIME)
            if data is not None:
                seen = True
                add_names(measured, data.get("measured", []))
                add_names(documents, data.get("documents", []))
        if len(kept) < len(outputs):
            cell["outputs"] = kept
            if not kept:
                drop.append(i)
    for i in reversed(drop):
        del nb.cells[i]
    return Sources(tuple(measured), tuple(documents)) if seen else None


#: Outcomes that decide a claim (the evidence settled it one way or the other).
DECIDING_OUTCOMES = frozenset({"reproduced", "contradicted", "found"})


def evidence_badge(kind: str) -> str:
    """A badge naming an evidence kind (published, measured, modelled; configuration in grey)."""
    return _badge(kind, EVIDENCE_COLORS.get(kind, "#6e7781"), radius="1em")
