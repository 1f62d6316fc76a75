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
from kvlab.units import count, sentence_start

#: The MIME type under which a verdict box carries its verdicts in a notebook output (read back by reports).
MIME = "application/vnd.kvlab.verdicts+json"

#: Verdict kinds that test a report's own question, which no document states (report 07's capacity study, the
#: model's self-checks): family *own* (:func:`family_of`).
OWN_QUESTION_KINDS = frozenset({"capacity", "model_held_out", "model_plausibility"})
#: Claim ids of kvlab's own questions and self-checks (no document states them): family *own*.
#: (crossover_modelled is the model's own answer, fitted to the very table it would check: not independent evidence.)
OWN_CLAIM_IDS = frozenset(
    {
        "crossover_published",
        "crossover_measured",
        "crossover_modelled",
        "crossover_range",
        "model_held_out",
        "model_plausible",
        "shared_prefix_threshold_jump",
        "multi_turn_reuse",
        "engine_choice_recommendation",
    }
)

Outcome = Literal[
    "reproduced",
    "contradicted",
    "consistent",
    "inconsistent",
    "inconclusive",
    "cannot be tested here",
    "configured",
    "found",
]
Evidence = Literal["published", "measured", "modelled"]
#: The three families of verdicts, counted apart everywhere (docs/verdicts.md): *document* — a document's claim
#: graded on evidence independent of that document (another document included); *consistency* — a document checked
#: against its own figures; *own* — kvlab's own questions and self-checks, never counted as document claims.
Family = Literal["document", "consistency", "own"]
FAMILIES = ("document", "consistency", "own")
#: Badge colours from the Okabe–Ito palette ("Color Universal Design", Masataka Okabe and Kei Ito, 2008,
#: https://jfly.uni-koeln.de/color/), distinct to readers with the common colour-vision deficiencies: outcomes and
#: evidence kinds never share a colour, and the two kinds of badge differ in shape too (square outcome, round
#: evidence). Text is black or white, whichever contrasts more with the fill. A consistency outcome takes the colour
#: of its document counterpart (consistent as reproduced, inconsistent as contradicted).
OUTCOME_COLORS = {
    "reproduced": "#009E73",
    "contradicted": "#D55E00",
    "consistent": "#009E73",
    "inconsistent": "#D55E00",
    "inconclusive": "#E69F00",
    "cannot be tested here": "#6e7781",
    "configured": "#000000",
    "found": "#0072B2",
}
EVIDENCE_COLORS = {"published": "#CC79A7", "measured": "#56B4E9", "modelled": "#F0E442"}
#: Fills that take white text (the rest take black).
_WHITE_TEXT = frozenset({"#6e7781", "#0072B2", "#000000"})


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
    :mod:`kvlab.claims.grading`), which the headline groups by.

    ``family``: *document*, *consistency* or *own* (:data:`FAMILIES`); a checker sets it, and a verdict built
    without one (or read back from an older ``index.json``) gets :func:`family_of` its claim id, kind and
    evidence. A consistency verdict decides only as *consistent* / *inconsistent*; the other families never use
    those two. *configured*: the value is one the experiment file sets (a KV budget, a ceiling derived from it),
    shown as configuration and not graded."""

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
    family: Family | str = ""

    def __post_init__(self):
        if self.outcome not in OUTCOME_COLORS:
            raise ValueError(f"Verdict outcome {self.outcome!r}: expected one of {list(OUTCOME_COLORS)}")
        if self.evidence not in EVIDENCE_COLORS:
            raise ValueError(f"Verdict evidence {self.evidence!r}: expected one of {list(EVIDENCE_COLORS)}")
        if not self.family:
            object.__setattr__(self, "family", family_of(self.claim_id, self.kind, self.evidence, self.outcome))
            if self.family == "consistency" and self.outcome in ("reproduced", "contradicted"):
                # read back from before the families (an older index.json): a document checked against its own
                # figures was "reproduced" where it agrees with them
                object.__setattr__(self, "outcome", "consistent" if self.outcome == "reproduced" else "inconsistent")
        if self.family not in FAMILIES:
            raise ValueError(
                f"Verdict {self.claim_id or self.claim!r}: family {self.family!r}: expected one of {list(FAMILIES)}"
            )
        wrong = ("reproduced", "contradicted") if self.family == "consistency" else ("consistent", "inconsistent")
        if self.outcome in wrong:
            raise ValueError(
                f"Verdict {self.claim_id or self.claim!r}: a {self.family} verdict cannot be "
                f"{self.outcome!r} (consistency verdicts say consistent / inconsistent; the others never do)"
            )
        if self.spread is not None:
            object.__setattr__(self, "spread", tuple(self.spread))  # a list from JSON reads back as the tuple


#: Outcomes that let a page name a winner, a direction or a threshold: the evidence decided the claim (or, for
#: *found*, answered the report's own question). Any other outcome lets a figure or sentence show the measurement
#: with its label, never a winner (:func:`decides`).
DECIDING = frozenset({"reproduced", "contradicted", "consistent", "inconsistent", "found"})


def decides(verdict: Verdict | None) -> bool:
    """Whether ``verdict`` lets a page name a winner or direction: it exists and its outcome is in :data:`DECIDING`.
    Every caption, title, annotation and map cell that names one asks this first."""
    return verdict is not None and verdict.outcome in DECIDING


def undecided_label(verdict: Verdict | None) -> str:
    """What a figure says in place of a winner its verdict does not allow: 'not decidable on this host' for *cannot
    be tested here* (or no verdict), else the outcome itself with its cause ('inconclusive: inside the spread')."""
    if verdict is None or verdict.outcome == "cannot be tested here":
        return "not decidable on this host"
    return f"{verdict.outcome}: {verdict.limit}" if verdict.limit else verdict.outcome


def family_of(claim_id: str, kind: str, evidence: str, outcome: str = "") -> str:
    """The family of a verdict that does not state one: *own* for kvlab's own questions and self-checks
    (:data:`OWN_CLAIM_IDS`, :data:`OWN_QUESTION_KINDS`, or a *found* row, the report's own answer), *consistency* for
    a document's claim checked against published figures (its own table), else *document*."""
    if kind in OWN_QUESTION_KINDS or claim_id in OWN_CLAIM_IDS or outcome == "found":
        return "own"
    return "consistency" if evidence == "published" else "document"


def _badge(text: str, color: str, radius: str = "3px") -> str:
    ink = "#fff" if color in _WHITE_TEXT else "#000"
    return (
        f'<span class="kvlab-badge" style="display: inline-block; padding: 0 .5em; border-radius: {radius}; '
        f"color: {ink}; background: {color}; font-size: 12px; font-weight: 600; line-height: 1.5; "
        f'white-space: nowrap;">{html.escape(text)}</span>'
    )


#: Inline cell style (the notebook HTML template right-aligns table cells with a rule a <style> here cannot beat).
_TD = "padding: 3px .6rem 3px 0; vertical-align: top; text-align: left; border: none;"


def _first_clause(text: str) -> str:
    """A reason's first clause (up to its first ';' or ':'), for a sentence that quotes one."""
    return text.split(";")[0].split(":")[0].strip().rstrip(".")


def claim_keys(v: Verdict) -> tuple[str, ...]:
    """The claims a verdict speaks to: each id of a compound id ("decay_vllm,decay_sglang": the decay shape built
    from two claims is about those two claims, not a third), else its statement."""
    return tuple(k.strip() for k in v.claim_id.split(",") if k.strip()) if v.claim_id else (v.claim,)


#: Which verdict of a claim counts when a family holds several (two reports, two kinds of evidence): a deciding
#: outcome first, then inconclusive, cannot be tested here, configured, found; ties go to the first listed.
_RANK = {
    "reproduced": 0,
    "contradicted": 0,
    "consistent": 0,
    "inconsistent": 0,
    "inconclusive": 1,
    "cannot be tested here": 2,
    "configured": 3,
    "found": 4,
}


def outranks(outcome: str, other: str) -> bool:
    """Whether a claim's verdict with ``outcome`` is the one it counts by over one with ``other`` (:data:`_RANK`)."""
    return _RANK[outcome] < _RANK[other]


def _as_verdicts(verdicts) -> list[Verdict]:
    return [v if isinstance(v, Verdict) else Verdict(**v) for v in verdicts]


def by_family(verdicts: list[Verdict] | list[dict]) -> dict[str, dict[str, Verdict]]:
    """Each claim once per family, with the one verdict it counts by (:data:`_RANK`): {family: {claim: verdict}},
    claims in the order first listed. Every count the headline gives is a count of these, so the counts of a
    family's outcomes add up to its claims, and a claim's cause is its counted verdict's own."""
    out: dict[str, dict[str, Verdict]] = {f: {} for f in FAMILIES}
    for v in _as_verdicts(verdicts):
        for k in claim_keys(v):
            got = out[v.family].get(k)
            if got is None or outranks(v.outcome, got.outcome):
                out[v.family][k] = v
    return out


def family_counts(verdicts: list[Verdict] | list[dict]) -> dict[str, dict[str, int]]:
    """{family: {outcome: claims}} from :func:`by_family` (for ``index.json`` and tests): each claim counted once in
    its family, so each family's counts add up to its claims."""
    counts: dict[str, dict[str, int]] = {}
    for fam, claims in by_family(verdicts).items():
        c: dict[str, int] = {}
        for v in claims.values():
            c[v.outcome] = c.get(v.outcome, 0) + 1
        counts[fam] = c
    return counts


def _by_evidence(vs: dict[str, Verdict]) -> str:
    """'on measured evidence', or 'on published (2) and measured (1) evidence' where kinds mix (``vs``: claim →
    its counted verdict)."""
    kinds: dict[str, int] = {}
    for v in vs.values():
        kinds[v.evidence] = kinds.get(v.evidence, 0) + 1
    if len(kinds) == 1:
        return f"on {next(iter(kinds))} evidence"
    return "on " + " and ".join(f"{k} ({n})" for k, n in kinds.items()) + " evidence"


def _why(vs: dict[str, Verdict]) -> str:
    """The causes of ``vs`` (claim → its counted verdict, one outcome), each claim under its counted verdict's
    cause, so the counts add up: 'CPU runs … — 3; no GPU memory … — 2' (no bracket inside the bracket it stands in)
    — by ``limit``, else the first clause of the reason."""
    causes: dict[str, int] = {}
    for v in vs.values():
        cause = v.limit or (_first_clause(v.reason) if v.reason else "") or "no cause given"
        causes[cause] = causes.get(cause, 0) + 1
    if len(causes) == 1:
        return next(iter(causes))
    return "; ".join(f"{c} — {k}" for c, k in sorted(causes.items(), key=lambda kv: -kv[1]))


def by_row(verdicts: list[Verdict] | list[dict]) -> dict[str, dict[str, Verdict]]:
    """Each verdict row on its own, by family ({family: {key: verdict}}, rows in order): what a page's headline
    counts, so its counts are the counts of the very rows in the box under it (:func:`by_family` counts claims,
    for the index, where the rows are not shown)."""
    out: dict[str, dict[str, Verdict]] = {f: {} for f in FAMILIES}
    for i, v in enumerate(_as_verdicts(verdicts)):
        out[v.family][f"{i}:{','.join(claim_keys(v))}"] = v
    return out


def _noun(rows: dict[str, Verdict], noun: str = "claim") -> str:
    """``noun`` where each row of ``rows`` is a claim of its own; 'check' where a claim has several rows (two kinds
    of evidence), so a count of rows never calls itself a count of claims."""
    claims = {k.split(":", 1)[-1] for k in rows}
    return noun if len(claims) == len(rows) else "check"


def _of(claims: dict[str, Verdict], *outcomes: str) -> dict[str, Verdict]:
    return {k: v for k, v in claims.items() if v.outcome in outcomes}


#: The most words the headline's first sentence quotes of the documents' statements (two when they fit, else one).
QUOTED_WORDS = 24


def _quoted(vs: list[Verdict], total: int, noun: str) -> str:
    """The first two statements of ``vs`` in quotes (a row's claim may go on, after " — ", with where it was
    tested: the statement only), and how many more."""
    said = list(dict.fromkeys(v.claim.split(" — ")[0].strip() for v in vs))[:2]
    if len(said) == 2 and len(" ".join(said).split()) > QUOTED_WORDS:
        said = said[:1]  # two long statements would make a sentence no one reads: the first, and how many more
    first = "; ".join(c if c[:1] in "“\"'" else f"“{c}”" for c in said)
    return first + (f" and {count(total - len(said), 'more ' + noun)}" if total > len(said) else "")


def _claim_sentence(vs: list[Verdict], own: dict[str, Verdict], index: bool) -> str:
    """What the documents claim (each claim once, in the document's words: its first row's), and how many
    questions of its own the page (or, with ``index``, the reports) asks."""
    documents: dict[str, Verdict] = {}
    for v in vs:  # quoted as first listed (the document's own wording, before a row that says where it was tested)
        if v.family != "own":
            for k in claim_keys(v):
                documents.setdefault(k, v)
    asked = [v for v in own.values() if v.outcome != "found"]
    if documents:
        also = ""
        if own:
            also = (
                f" The reports also ask {count(len(own), 'question')} of their own."
                if index
                else f" The page also asks {count(len(own), 'question')} of its own."
            )
        return (
            f"**The documents claim** {_quoted(list(dict.fromkeys(documents.values())), len(documents), 'claim')}."
            + also
        )
    if asked:
        return (
            f"**The documents make no claim this page tests**; it asks its own: "
            f"{_quoted(list(dict.fromkeys(asked)), len(asked), 'question')}."
        )
    return "**The documents make no claim this page tests**; it answers its own question."


def _holds_sentence(doc: dict, cons: dict, own: dict, index: bool) -> str:
    """What holds: the document claims reproduced or contradicted (with their evidence), the checks against the
    documents' own figures, kvlab's own checks, and (on a page) its own answer. The index quotes no own answer: its
    answer table stands above, with the ranges a single quoted answer would leave out."""
    parts = [
        f"{count(len(these), _noun(these))} {outcome} {_by_evidence(these)}"
        for outcome in ("reproduced", "contradicted")
        if (these := _of(doc, outcome))
    ]
    if parts:
        holds = "**What holds:** " + ", ".join(parts) + "."
    elif doc or cons:
        holds = "**What holds:** no document claim is reproduced or contradicted by independent evidence."
    else:  # the first sentence said the documents make no claim here: not said again
        holds = "**What holds:**"
    checked = [f"{len(_of(cons, o))} {o}" for o in ("consistent", "inconsistent") if _of(cons, o)]
    if checked:
        both = _of(cons, "consistent", "inconsistent")
        holds += (
            f" Checked against the documents' own figures, {count(len(both), _noun(both))}: {' and '.join(checked)}."
        )
    own_decided = {o: _of(own, o) for o in ("reproduced", "contradicted")}
    if any(own_decided.values()):
        said = [f"{len(c)} {'passed' if o == 'reproduced' else 'failed'}" for o, c in own_decided.items() if c]
        holds += f" kvlab's own checks: {' and '.join(said)}."
    found = [v for v in own.values() if v.outcome == "found"]
    if found and not index:
        holds += f" The page's own answer: {found[0].claim} — {found[0].number}."
    if holds == "**What holds:**":  # nothing decided at all: the documents' side said plainly after all
        holds += " no document claim is reproduced or contradicted by independent evidence."
    return holds


def _with_causes(said: str, vs: dict[str, Verdict]) -> str:
    """``said`` with its cause in brackets, or, where there are several, followed by a sentence of them (one
    sentence with three long causes ran past 45 words)."""
    why = _why(vs)
    return f"{said}. Causes: {why}" if "; " in why else f"{said} ({why})"


def _limits_sentence(doc: dict, cons: dict, own: dict) -> str:
    """What this host cannot say: the claims and own questions it cannot test or that stay inconclusive, each
    group with its causes (which add up to it), and the values the experiment file sets."""
    limits = []
    undecided = ("cannot be tested here", "inconclusive")
    claims = {**_of(doc, *undecided), **{k: v for k, v in _of(cons, *undecided).items() if k not in doc}}
    for name, these in (("claim", claims), ("own question", _of(own, *undecided))):
        cannot, open_ = _of(these, "cannot be tested here"), _of(these, "inconclusive")
        if cannot:
            limits.append(
                _with_causes(f"{count(len(cannot), _noun(cannot, name))} cannot be tested on this host", cannot)
            )
        if open_:
            k = len(open_)
            limits.append(
                _with_causes(f"{count(k, _noun(open_, name))} {'is' if k == 1 else 'are'} inconclusive", open_)
            )
    configured = {**_of(doc, "configured"), **_of(own, "configured")}
    if configured:
        k = len(configured)
        are = "is" if k == 1 else "are"
        limits.append(f"{count(k, 'value')} the experiment file sets {are} shown as configuration, not graded")
    if limits:  # one sentence a group, so no sentence runs past what a reader takes in at once
        return "**What this host cannot say:** " + ". ".join(sentence_start(x) for x in limits) + "."
    return "**What this host cannot say:** nothing on this page; every claim it tests was decided."


def headline(verdicts: list[Verdict] | list[dict], index: bool = False) -> list[str]:
    """The three sentences a page opens with, computed from its verdicts (a list of :class:`Verdict` or of their
    dicts, as ``index.json`` holds them): what the documents claim; what holds, and on what evidence; what this host
    cannot say, and why (markdown, inline).

    The three families are counted apart. On a page every count is a count of the rows in the box under it
    (:func:`by_row`); on the index (``index``), which shows no rows, each claim once per family (:func:`by_family`),
    under one outcome and one cause, and the sentences speak of the reports, not of one page. Every count adds up
    (each group's causes to the group)."""
    vs = _as_verdicts(verdicts)
    fam = by_family(vs) if index else by_row(vs)
    doc, cons, own = fam["document"], fam["consistency"], fam["own"]
    return [_claim_sentence(vs, own, index), _holds_sentence(doc, cons, own, index), _limits_sentence(doc, cons, own)]


#: A verdict box folds its rows with nothing here to test them (:func:`split_rows`) from this many on.
FOLD_UNTESTED = 2


def untested(v: Verdict) -> bool:
    """A row with nothing behind it here: *cannot be tested here* on no run or table row at all (``n`` = 0), e.g.
    a GPU host's mechanism no run of this host exercises. Its number only names what would decide it."""
    return v.outcome == "cannot be tested here" and v.n == 0


def split_rows(verdicts: list[Verdict] | list[dict]) -> tuple[list[Verdict], list[Verdict]]:
    """A verdict box's rows: (shown, folded). The rows with nothing here to test them (:func:`untested`) are folded
    under one line when there are at least :data:`FOLD_UNTESTED` of them and another row remains: the headline above
    counts them with their cause, and report 01's box, six such rows of fifteen, stays one screen shorter (issue 39)."""
    vs = _as_verdicts(verdicts)
    folded = [v for v in vs if untested(v)]
    if len(folded) < FOLD_UNTESTED or len(folded) == len(vs):
        return vs, []
    return [v for v in vs if not untested(v)], folded


def _rows_html(vs: list[Verdict]) -> str:
    return "".join(
        # the two badges share one narrow cell (outcome over evidence): the claim and the number keep the width,
        # so a row stays a few lines deep on a printed page too
        f'<tr style="background: none;"><td style="{_TD} width: 1%;">{_badge(v.outcome, OUTCOME_COLORS[v.outcome])}'
        f"<br>{evidence_badge(v.evidence)}</td>"
        f'<td style="{_TD} width: 50%;">{markdown_inline(v.claim)}</td>'
        f'<td style="{_TD}" class="kvlab-number"><b>{markdown_inline(v.number)}</b></td></tr>'
        for v in vs
    )


def box_html(verdicts: list[Verdict] | list[dict], heading: str = "What this report found", lead: bool = True) -> str:
    """The verdict box: the three headline sentences (``lead``), then one row per claim: its outcome and evidence as
    coloured badges (one over the other), the claim, then the number; the rows with nothing here to test them
    folded under one line (:func:`split_rows`)."""
    shown, folded = split_rows(verdicts)
    body = _rows_html(shown) or '<tr><td colspan="4"><i>This report tests no claim.</i></td></tr>'
    table = '<table class="kvlab-verdict-rows" style="border-collapse: collapse; width: 100%; table-layout: auto;">'
    more = (
        f'<details class="kvlab-fold kvlab-verdicts-untested"><summary>{count(len(folded), "more claim")} with '
        f"nothing here to test {'it' if len(folded) == 1 else 'them'} (show)</summary>"
        f"{table}{_rows_html(folded)}</table></details>"
        if folded
        else ""
    )
    sentences = " ".join(markdown_inline(t) for t in headline(verdicts)) if lead and verdicts else ""
    top = (
        f'<p class="kvlab-headline" style="margin: 0 0 .5rem; font-size: 15px; line-height: 1.45;">{sentences}</p>'
        if sentences
        else ""
    )
    return f"""<section class="kvlab-verdicts" style="font: 14px system-ui, sans-serif; border: 2px solid #0969da;
border-radius: 6px; padding: .5rem .9rem; margin: 0 0 1rem;">
{top}<div style="font-weight: 700; margin-bottom: .3rem;">{html.escape(heading)}</div>
{table}{body}</table>{more}
</section>
"""


class Box:
    """Displays as the verdict box and carries the verdicts as data (:data:`MIME`) for the report builder."""

    def __init__(self, verdicts: list[Verdict]):
        self.verdicts = list(verdicts)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {
            "text/html": box_html(self.verdicts),
            MIME: [asdict(v) for v in self.verdicts],
            "text/plain": "\n".join(f"[{v.outcome} · {v.evidence}] {v.claim}: {v.number}" for v in self.verdicts),
        }


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
        if (
            had
            and before is not None
            and before.get("cell_type") == "markdown"
            and before.get("source", "").lstrip().startswith("## Verdict")
        ):
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
        line = (
            f"Read by this notebook: measured experiments {', '.join(self.measured) or 'none'}; "
            f"documents {', '.join(self.documents) or 'none'}."
        )
        return {
            "text/html": f'<p style="font-size: 12px; color: #555;">{html.escape(line)}</p>',
            "text/plain": line,
            SOURCES_MIME: {"measured": list(self.measured), "documents": list(self.documents)},
        }


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
    """A badge naming an evidence kind (published, measured, modelled; configuration in light grey, a colour no outcome has)."""
    return _badge(kind, EVIDENCE_COLORS.get(kind, "#DDDDDD"), radius="1em")
