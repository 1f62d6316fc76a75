"""Report 01's checks: one small function per claim kind (a claim is a row of the reference CSVs), dispatched by
kind through :data:`CHECKERS`, and kvlab's own questions about where the winner changes. Verdicts are built by the
constructors of :mod:`kvlab.claims.grading`; the words here are a verdict's short claim, number and reason only."""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from kvlab.claims import document_claim_verdicts
from kvlab.claims.grading import NO_TABLE_ROW, Repeats, cpu_cross_engine, finding, measured_difference, speed_gap
from kvlab.claims.held_out import consistent_phrase, grade_model_claim
from kvlab.claims.held_out import held_out_verdict
from kvlab.engines import engine_label
from kvlab.studies.measured_frames import context_name
from kvlab.units import k_label
from kvlab.verdicts import Verdict


@dataclass(frozen=True)
class Inputs:
    """What the checks read: the document's claims and table, every document's claims, the published and measured
    relative speeds (``rel_measured`` None: nothing measured) and which measured engine stands for which."""

    claims: pl.DataFrame
    all_claims: pl.DataFrame
    published: pl.DataFrame
    rel_published: pl.DataFrame
    rel_measured: pl.DataFrame | None
    family: dict[str, str]


def stated_tolerance(value: float, precision: float | None = None) -> float:
    """Half the precision the document wrote the value to (0.1 → 0.05); without one, half a unit of the value's
    last digit (1.5 → 0.05, 3.29 → 0.005)."""
    if precision:
        return 0.5 * precision
    text = repr(float(value)).rstrip("0")
    decimals = len(text.split(".")[1]) if "." in text and not text.endswith(".") else 0
    return 0.5 * 10 ** (-decimals)


def _row_at(rel: pl.DataFrame | None, context_label: str) -> dict | None:
    if rel is None or rel.is_empty():
        return None
    hit = rel.filter(pl.col("context_label") == context_label)
    return hit.row(0, named=True) if hit.height else None


def _repeats(r: dict, prefix: str = "") -> Repeats:
    return Repeats.summary(
        r[f"{prefix}batch_time_s"],
        r.get(f"{prefix}batch_time_min_s"),
        r.get(f"{prefix}batch_time_max_s"),
        r.get(f"{prefix}n_runs") or 1,
    )


def _ratio_spread(r: dict) -> tuple[float, float] | None:
    """engine_b's time over engine_a's, lowest to highest over the repeats of a relative-speed row."""
    a_lo, a_hi = r.get("batch_time_min_s"), r.get("batch_time_max_s")
    b_lo, b_hi = r.get("other_batch_time_min_s"), r.get("other_batch_time_max_s")
    if None in (a_lo, a_hi, b_lo, b_hi) or not (a_lo and a_hi):
        return None
    return b_lo / a_hi, b_hi / a_lo


def speed_against_table(c: dict, rel: pl.DataFrame) -> Verdict:
    """A stated speed-up against the document's own table: the winner and the ratio, to the claim's last digit."""
    ctx, cid = c["context_from"], c.get("claim_id") or ""
    r = _row_at(rel, ctx)
    if r is None:
        return Verdict(
            c["statement"],
            "cannot be tested here",
            "published",
            f"no table row at {ctx}",
            claim_id=cid,
            kind="relative_speed",
            scope="published table",
            n=0,
            limit=NO_TABLE_ROW,
            reason=f"the table has no row at {ctx}",
            family="consistency",
        )
    tol = stated_tolerance(c["stated_value"], c.get("stated_precision"))
    ok = r["faster"] == c["engine"] and abs(r["speedup"] - c["stated_value"]) <= tol
    return Verdict(
        f"{c['statement']} — against the article's own table",
        "consistent" if ok else "inconsistent",
        "published",
        f"{engine_label(r['faster'])} {r['speedup']:.2f}× faster at {ctx}",
        claim_id=cid,
        kind="relative_speed",
        value=r["speedup"],
        unit="×",
        n=2,
        scope="published table",
        family="consistency",
        reason=f"the table gives {engine_label(r['faster'])} {r['speedup']:.2f}× against the stated "
        f"{c['stated_value']:g}× (to the claim's last digit)",
    )


def _cpu_grade(m: dict, base: dict):
    """Rule 1 for CPU runs of two engines (None for GPU runs): the shortest measured context's ratio as baseline."""
    return cpu_cross_engine(
        m["engine"],
        m["other_engine"],
        [m.get("device_kind"), m.get("other_device_kind")],
        baseline=base["other_batch_time_s"] / base["batch_time_s"],
        n=min(base.get("n_runs") or 1, base.get("other_n_runs") or 1),
        spread=_ratio_spread(base),
        baseline_at=f"the shortest measured context, {context_name(base['context_label'], base['context_tokens'])}",
        scope=f"{m.get('hardware') or 'CPU'}, contexts scaled",
    )


def _cpu_number(m: dict, base: dict, grade, ctx: str) -> str:
    pair = (m["engine"], m["other_engine"])
    fast, slow = pair if base["other_batch_time_s"] >= base["batch_time_s"] else pair[::-1]
    fast, slow = engine_label(fast), engine_label(slow)
    at, first = context_name(ctx, m["context_tokens"]), context_name(base["context_label"], base["context_tokens"])
    if base["context_tokens"] == m["context_tokens"]:
        return f"{speed_gap(fast, slow, grade.value, already=False)} at {at}, the shortest context measured"
    there = pair if m["faster"] == m["engine"] else pair[::-1]
    then = speed_gap(engine_label(there[0]), engine_label(there[1]), m["speedup"], word="", already=False)
    return f"{speed_gap(fast, slow, grade.value)} at {first}; at {at}: {then}"


def speed_on_this_host(c: dict, rel_m: pl.DataFrame, stands_for: str) -> Verdict | None:
    """A stated speed-up against this host's runs at the same (scaled) context: CPU runs of two engines cannot
    decide it (rule 1, the claim's own ratio as the value); GPU runs decide by rule 2. None: no run there."""
    ctx = c["context_from"]
    m = _row_at(rel_m, ctx)
    if m is None:
        return None
    base = rel_m.sort("context_tokens").row(0, named=True)
    grade = _cpu_grade(m, base)
    if grade is not None:
        number = _cpu_number(m, base, grade, ctx)
    else:  # GPU runs: the other engine's time over the claimed one's
        first, second = ("other_", "") if m["engine"] == stands_for else ("", "other_")
        number = f"{engine_label(m['faster'])} {m['speedup']:.2f}× faster at {ctx} ({m['context_tokens']:,} tokens)"
        what = f"the other engine's batch time against {engine_label(stands_for)}'s"
        grade = measured_difference(
            _repeats(m, first), _repeats(m, second), "higher", what=what, scope=m.get("hardware") or ""
        )
    if grade.outcome == "cannot be tested here":  # value: the claimed engine's speed-up at the claim's context
        mine, theirs = ("", "other_") if m["engine"] == stands_for else ("other_", "")
        at = _repeats(m, theirs), _repeats(m, mine)
        spread = None if at[0].unranged or at[1].unranged else (at[0].lo / at[1].hi, at[0].hi / at[1].lo)
        n = min(m.get("n_runs") or 1, m.get("other_n_runs") or 1)
        grade = replace(grade, value=at[0].mid / at[1].mid, unit="×", spread=spread, n=n)
    claim = f"{c['statement']} — on this host ({ctx} scaled to {m['context_tokens']:,} tokens)"
    return grade.verdict(claim, number, claim_id=c.get("claim_id") or "", kind="relative_speed")


def check_speed(c: dict, x: Inputs) -> list[Verdict]:
    """Kind ``relative_speed``: against the table, then (where measured) on this host."""
    out = [speed_against_table(c, x.rel_published)]
    if x.rel_measured is not None and (
        v := speed_on_this_host(c, x.rel_measured, x.family.get(c["engine"], c["engine"]))
    ):
        out.append(v)
    return out


#: What the article's set-up claim is checked against: DCP sizes its prose states beside the table (not the table).
SETUP_SOURCE = "the article's stated set-up"


def setup_in_words(v: Verdict) -> Verdict:
    """The set-up check worded for where its numbers are: the article's prose (DCP 1 for vLLM, DCP 8 for SGLang),
    not its table, which gives batch times only."""
    if v.kind != "setup" or not v.number.startswith("its table: "):
        return v
    return replace(
        v,
        claim=v.claim.replace("— against the article's own table", f"— against {SETUP_SOURCE}"),
        number="its prose: " + v.number.removeprefix("its table: "),
        reason=v.reason.replace("the document's own rows record", "the article's text gives"),
    )


def check_documents(rows: pl.DataFrame, x: Inputs) -> list[Verdict]:
    """Kinds mechanism, operations and setup (:data:`kvlab.claims.documents.KINDS`): graded by
    :mod:`kvlab.claims.documents`, the set-up worded by :func:`setup_in_words`."""
    return [setup_in_words(v) for v in document_claim_verdicts(rows, x.all_claims, x.published)]


#: One checker per claim kind this report tests, each taking one claim row.
CHECKERS = {"relative_speed": check_speed}


def claim_verdicts(x: Inputs) -> list[Verdict]:
    """Every claim of the document this report tests, through the checker of its kind, in the table's order;
    then the mechanism, operations and set-up claims (:func:`check_documents`)."""
    out: list[Verdict] = []
    for c in x.claims.filter(pl.col("kind").is_in(list(CHECKERS))).iter_rows(named=True):
        out += CHECKERS[c["kind"]](c, x)
    return out + check_documents(x.claims, x)


def speed_verdicts(
    claims: pl.DataFrame,
    rel_published: pl.DataFrame,
    rel_measured: pl.DataFrame | None,
    family: dict[str, str] | None = None,
) -> list[Verdict]:
    """The relative-speed claims of ``claims`` alone (:func:`check_speed` each): against the table, then on this
    host where ``rel_measured`` holds the claim's context."""
    x = Inputs(claims, claims.head(0), rel_published.head(0), rel_published, rel_measured, family or {})
    rows = claims.filter(pl.col("kind") == "relative_speed")
    return [v for c in rows.iter_rows(named=True) for v in check_speed(c, x)]


# -- kvlab's own questions: where the winner changes ------------------------------------------------------------


def crossover_published(estimates, model_range: tuple[float, float] | None) -> list[Verdict]:
    """The article's table interpolated between its two contexts: a two-point interpolation, said beside the
    range the model gives over what the article leaves open (it does not pin the crossover)."""
    found = [x for x in estimates if x.context_tokens is not None]
    if not found:
        return []
    lo, hi = min(x.context_tokens for x in found), max(x.context_tokens for x in found)
    pinned = f"; not pinned: {k_label(model_range[0])}–{k_label(model_range[1])} over the model's assumption sets"
    number = f"{k_label(lo)}–{k_label(hi)} tokens by two-point interpolation ({', '.join(x.method for x in found)})"
    return [
        Verdict(
            "The winner changes between 64K and 200K (the article's table, interpolated)",
            "found",
            "published",
            number + (pinned if model_range else ""),
            claim_id="crossover_published",
            kind="crossover",
            value=(lo + hi) / 2,
            unit="tokens",
            n=4,
            spread=(lo, hi),
            scope="published table",
            reason="interpolated between the table's two contexts; the article states no crossover",
        )
    ]


def crossover_modelled(model_tokens, model_range, fit, consistent: dict | None) -> list[Verdict]:
    """The calibrated model's crossover (rule 3: an illustration, with its held-out test as a row of its own),
    its range over the assumption sets in its number, always."""
    if model_tokens is None:
        return []
    allowed = consistent_phrase(consistent)
    over = f"{k_label(model_range[0])}–{k_label(model_range[1])}" if model_range else "range not computed"
    number = (
        f"{over} over the assumptions the article leaves open (≈{k_label(model_tokens)} under the defaults)"
        + (f"; {allowed}" if allowed else "")
        + " (not an independent check)"
    )
    claim = "Where the winner changes, from kvlab's physical model calibrated on the same four points"
    contexts = sorted(fit.residuals["context_tokens"].unique().to_list())
    inside = contexts[0] < model_tokens < contexts[-1]
    grade, held = grade_model_claim(fit, inside, contexts, value=model_tokens, unit="tokens")
    grade = replace(grade, spread=model_range)
    return [
        grade.verdict(
            claim + " (does it cross between the published contexts?)",
            number,
            claim_id="crossover_modelled",
            kind="crossover",
        ),
        held_out_verdict(held, fit),
    ]


def crossover_measured(measured, device_kinds=()) -> list[Verdict]:
    """Do the measured curves cross inside the measured contexts? Two engines compared: CPU runs cannot be
    tested here; otherwise fewer than 3 repeats a side are inconclusive (:func:`kvlab.claims.grading.finding`)."""
    if not measured:
        return []
    x = next((m for m in measured if m.context_tokens is not None), None)
    m = measured[0]
    engines = (m.faster_below, m.faster_above) if m.faster_below and m.faster_above else None
    engines = engines if engines and engines[0] != engines[1] else None
    outcome, why, limit = finding(m.n_runs, engines=engines, cross_engine=True, device_kinds=device_kinds)
    if x:
        number = f"yes, at ≈{x.context_tokens:,.0f} tokens ({x.method})"
    else:
        number = (
            f"no: {engine_label(m.faster_below)} faster at every measured context"
            if m.faster_below
            else f"no: {m.note}"
        )
    none = "" if x else "; the curves do not cross inside the measured contexts, so there is no crossover to give"
    return [
        Verdict(
            "Do the measured curves cross inside the measured contexts?",
            outcome,
            "measured",
            number,
            claim_id="crossover_measured",
            kind="crossover",
            value=x.context_tokens if x else None,
            unit="tokens",
            n=m.n_runs,
            scope="measured runs of this host",
            limit=limit,
            family="own",
            reason=(f"{why}; " if why else "")
            + "the report's own question about its runs; decides no document claim"
            + none,
        )
    ]
