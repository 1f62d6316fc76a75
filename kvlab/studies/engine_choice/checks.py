"""Report 06's checks: the KV-design article's claims this report takes up, one checker per kind (by the claim
row's ``metric``), and the tree's answer for the workload asked against what the data can decide.

The cache-share claims (vLLM shares nothing, SGLang's radix cache shares) are graded once in
:mod:`kvlab.studies.sharing_frames` (report 05 quotes the same verdicts); the checks here are the cross-engine
claims (CPU runs of two engines never decide one: the ratio where the claim's mechanism is absent is quoted).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvlab.claims import MODEL_SCOPE, modelled_claim
from kvlab.claims.grading import NOTHING_MEASURED, Repeats, cpu_cross_engine, measured_difference, speed_gap
from kvlab.engines import SGLANG, VLLM, engine_label, registry
from kvlab.guide import Evidence, Factor, Recommendation, UserWorkload
from kvlab.studies.sharing_frames import cache_share_verdict
from kvlab.tables import experiment_words
from kvlab.units import k_label, ratio, sig2
from kvlab.verdicts import Verdict

#: The article's claims report 06 checks against measured runs (the tree's other branches: document verdicts).
CHOICE_CLAIM_IDS = ("vllm_no_prefix_sharing", "sglang_radix_sharing", "shared_prefix_threshold", "high_concurrency")


@dataclass(frozen=True)
class Inputs:
    sharing: pl.DataFrame
    conc: pl.DataFrame


@dataclass(frozen=True)
class Pair:
    """Two engines' rows compared on ``metric`` (``best`` ahead), the rows of a setting below the claim's threshold
    (``base``) where its mechanism is absent, and how to word it."""

    best: dict
    other: dict
    base: pl.DataFrame
    at_col: str
    at_label: object
    metric: str
    lower_is_better: bool
    at_claim: str
    claimed_family: str
    missing: str


def _nothing(claim: str, cid: str, why: str, kind: str) -> Verdict:
    return Verdict(
        claim,
        "cannot be tested here",
        "measured",
        why,
        claim_id=cid,
        kind=kind,
        n=0,
        scope="nothing measured to test it",
        limit=NOTHING_MEASURED,
        reason=why,
    )


def _baseline(p: Pair) -> tuple[float | None, str, list[int]]:
    """The ratio at the baseline setting (> 1: ``best`` ahead there too), where it is, and the runs behind it."""
    a, b = p.best["engine"], p.other["engine"]
    ra, rb = p.base.filter(pl.col("engine") == a), p.base.filter(pl.col("engine") == b)
    ns = [p.best.get("n_runs") or 1, p.other.get("n_runs") or 1]
    if not (ra.height and rb.height):
        return None, p.missing, ns
    ta, tb = ra[p.metric][0], rb[p.metric][0]
    ns = [(r["n_runs"][0] if "n_runs" in r.columns else None) or 1 for r in (ra, rb)]
    return (tb / ta if p.lower_is_better else ta / tb), p.at_label(ra[p.at_col][0]), ns


def pair_verdict(claim: str, cid: str, p: Pair, kind: str = "engine_choice") -> Verdict:
    """A claim that one engine family beats the other: CPU runs of two engines cannot decide it (rule 1; the ratio
    at the baseline quoted, or ``missing`` said); GPU runs decide by rule 2 on the metric."""
    a, b = p.best["engine"], p.other["engine"]
    ratio, where, ns = _baseline(p)
    kinds = [r.get("device_kind") for r in (p.best, p.other)]
    scope = f"{p.best.get('hardware') or 'CPU'}"
    grade = cpu_cross_engine(a, b, kinds, baseline=ratio, n=min(ns), baseline_at=where, scope=scope)
    if grade is not None:
        if ratio is None:
            number = f"{p.at_claim} ({p.missing}, so nothing shows the gap is the claim's mechanism)"
        else:
            fast, slow = (a, b) if ratio >= 1 else (b, a)
            number = (
                f"{speed_gap(engine_label(fast), engine_label(slow), grade.value, 'ahead')} at {where}; {p.at_claim}"
            )
        return grade.verdict(claim, number, claim_id=cid, kind=kind)
    claimed_first = (registry.family(a) or a) == p.claimed_family
    mine, theirs = (p.best, p.other) if claimed_first else (p.other, p.best)
    grade = measured_difference(
        Repeats.of_row(mine, p.metric),
        Repeats.of_row(theirs, p.metric),
        "lower" if p.lower_is_better else "higher",
        what=f"{engine_label(mine['engine'])} against {engine_label(theirs['engine'])}",
        scope=p.best.get("hardware") or "",
    )
    return grade.verdict(claim, p.at_claim, claim_id=cid, kind=kind)


def check_threshold(c: dict, x: Inputs) -> Verdict:
    """Shared prefix ≥ the claim's threshold: choose SGLang (median batch time, each engine's cache on)."""
    at, on = (
        c["threshold"],
        x.sharing.filter(pl.col("prefix_caching").fill_null(True)) if x.sharing.height else x.sharing,
    )
    pairs = []
    fractions = (
        sorted(on.filter(pl.col("shared_fraction") >= at)["shared_fraction"].unique().to_list()) if on.height else []
    )
    for f in fractions:
        d = on.filter(pl.col("shared_fraction") == f).sort("batch_time_s")
        if d["engine"].n_unique() >= 2:
            pairs.append((f, d.row(0, named=True), d.row(1, named=True)))
    if not pairs:
        return _nothing(
            c["statement"], c["claim_id"], f"no shared fraction ≥ {at:.0%} measured with two engines", "engine_choice"
        )
    f, best, other = pairs[-1]
    below = on.filter(pl.col("engine").is_in([best["engine"], other["engine"]]) & (pl.col("shared_fraction") < at))
    zero = below.filter((pl.col("shared_fraction") - 0.0).abs() == (pl.col("shared_fraction") - 0.0).abs().min())
    m = other["batch_time_s"] / best["batch_time_s"]
    claim = (
        f"{c['statement']} — on this host: {engine_label(best['engine'])} against {engine_label(other['engine'])}, "
        "each with its prefix cache on"
    )
    return pair_verdict(
        claim,
        c["claim_id"],
        Pair(
            best,
            other,
            zero,
            "shared_fraction",
            lambda v: f"{v:.0%} shared",
            "batch_time_s",
            True,
            f"{engine_label(best['engine'])} {sig2(m)}× shorter median batch time at {f:.0%} shared",
            SGLANG,
            f"no shared fraction below the claim's {at:.0%} measured with both engines",
        ),
    )


def check_concurrency(c: dict, x: Inputs) -> Verdict:
    """≥ the claim's threshold in flight without a shared prefix: choose vLLM (completed requests/s)."""
    at, conc = c["threshold"], x.conc
    hi = conc.filter(pl.col("in_flight") >= at) if conc.height else conc
    top = (
        hi.filter(pl.col("in_flight") == hi["in_flight"].max()).sort("requests_per_s", descending=True)
        if hi.height
        else hi
    )
    if top.is_empty() or top["engine"].n_unique() < 2:
        why = f"no run with ≥ {at:g} requests in flight measured with two engines"
        return _nothing(c["statement"], c["claim_id"], why, "concurrency_threshold")
    a, b = top.row(0, named=True), top.row(1, named=True)
    pair = conc.filter(pl.col("engine").is_in([a["engine"], b["engine"]]))
    below = pair.filter(pl.col("in_flight") < at)  # a baseline must lie below the claim's threshold
    low = below.filter(pl.col("in_flight") == below["in_flight"].min()) if below.height else below
    levels = pair["in_flight"].n_unique()
    claim = (
        f"{c['statement']} — on this host: {engine_label(a['engine'])} against {engine_label(b['engine'])}, "
        f"distinct prompts ({levels} concurrency level{'' if levels == 1 else 's'} measured)"
    )
    m = a["requests_per_s"] / b["requests_per_s"]
    return pair_verdict(
        claim,
        c["claim_id"],
        Pair(
            a,
            b,
            low,
            "in_flight",
            lambda v: f"{v} in flight (the lowest load measured)",
            "requests_per_s",
            False,
            f"{engine_label(a['engine'])} {sig2(m)}× the completed requests/s at {a['in_flight']} in flight",
            VLLM,
            f"no load below the claim's {at:g} in flight measured with both engines",
        ),
        kind="concurrency_threshold",
    )


#: One checker per kind of claim, by the claim row's metric.
CHECKERS = {
    "cache_hit_share": lambda c, x: cache_share_verdict(c, x.sharing),
    "batch_time": check_threshold,
    "requests_per_s": check_concurrency,
}


def claim_verdicts(claims: pl.DataFrame, x: Inputs) -> list[Verdict]:
    """The article's claims of :data:`CHOICE_CLAIM_IDS` the claims table holds, in its order, each by its checker."""
    rows = [r for r in claims.iter_rows(named=True) if r["claim_id"] in CHOICE_CLAIM_IDS]
    return [CHECKERS[r["metric"]](r, x) for r in rows]


# -- the tree's answer for the workload asked against the data's ------------------------------------------------------


def workload_phrase(w: UserWorkload, low: int | None = None) -> str:
    """'Kimi-K3 on 8× B300, 64K–200K tokens, distinct prompts, 8 in flight': the workload as the page names it."""
    ctx = f"{k_label(low)}–{k_label(w.context_tokens)}" if low and low < w.context_tokens else k_label(w.context_tokens)
    shared = f"{w.shared_fraction:.0%} shared prefix" if w.shared_prefix else "distinct prompts"
    return f"{w.model} on {w.tp}× {w.gpu}, {ctx} tokens, {shared}, {w.concurrency} in flight"


def cited(ev: Evidence, w: UserWorkload) -> Factor | None:
    """The measured comparison that speaks to this workload where no factor decides: the factor of the tree's first
    question (prefix for a shared prefix, else concurrency) where two engines were compared, else the other."""
    graded = [f for f in ev.factors if f.source == "measured" and f.grade is not None]
    primary = "prefix" if w.shared_prefix else "concurrency"
    return next((f for f in graded if f.name == primary), graded[0] if graded else None)


def _lead(f: Factor) -> str:
    """'vLLM, 17× the completed requests/s' style: the leader and its lead on what (the grade decides its weight)."""
    second = engine_label(f.rows[1]["engine"])
    ns = [r.get("n_runs") for r in f.rows if r.get("n_runs") is not None]
    n = min(ns) if ns else None
    if f.name == "prefix":
        what = f"median batch time {ratio(f.margin, n)}× shorter than {second}'s"
    else:
        what = f"{ratio(f.margin, n)}× the completed requests/s of {second}"
    return f"{engine_label(f.rows[0]['engine'])}, {what} ({experiment_words(f.rows[0]['experiment'])})"


def _tree_followed(claim: str, ev: Evidence, w: UserWorkload, common: dict) -> Verdict:
    f = cited(ev, w)
    if f is not None:
        g = f.grade
        base = (
            f"; already {sig2(g.value)}× apart where the mechanism plays no part"
            if g.value is not None and g.outcome == "cannot be tested here"
            else ""
        )
        return g.verdict(claim, f"no factor decides; data: {_lead(f)}{base}", **common)
    measured = any(f.source == "measured" for f in ev.factors)
    return Verdict(
        claim,
        "cannot be tested here",
        "measured" if measured else "modelled",
        f"nothing measured or modelled here separates the engines; the guide follows the tree ({engine_label(ev.engine)})",
        n=0 if measured else (ev.factors[0].held_out[1] if ev.factors[0].held_out else None),
        scope="measured runs and model" if measured else MODEL_SCOPE,
        reason="no measurement compares two engines and the model does not separate them",
        **common,
    )


def recommendation_verdict(w: UserWorkload, tree: Recommendation, ev: Evidence, low: int | None = None) -> Verdict:
    """The tree's answer for the workload asked against the data's: where no factor decides, the grade of the
    measured comparison that speaks to it (or *cannot be tested here*); a measured factor decides by the grading
    rules; a modelled one only past the model's held-out test (rule 3)."""
    claim = f"For {workload_phrase(w, low)} the decision tree says {engine_label(tree.engine)}: do kvlab's data agree?"
    common = dict(claim_id="engine_choice_recommendation", kind="engine_choice")
    if ev.decided_by == "tree":
        return _tree_followed(claim, ev, w, common)
    f = ev.deciding
    agree = "reproduced" if ev.engine == tree.engine else "contradicted"
    if ev.decided_by == "measured" and f is not None and f.winner:
        return Verdict(
            claim,
            agree,
            "measured",
            f"data: {_lead(f)}",
            value=f.margin,
            unit="×",
            n=f.grade.n if f.grade else None,
            spread=f.grade.spread if f.grade else None,
            scope=f.rows[0].get("hardware") or "",
            reason=f"the {f.name} factor decides by {f.margin:.2f}× ({f.grade.reason if f.grade else ''})",
            **common,
        )
    if f is not None and f.held_out is not None and f.times:
        right, total, error = f.held_out
        r = max(f.times) / min(f.times)
        grade = modelled_claim(ev.engine == tree.engine, right, total, r - 1, error, value=r, unit="×")
        return grade.verdict(
            claim, f"modelled: {engine_label(ev.engine)} {r:.2f}× faster at {w.context_tokens:,} tokens", **common
        )
    return Verdict(
        claim,
        agree,
        ev.decided_by,
        engine_label(ev.engine),
        scope=MODEL_SCOPE,
        reason="decided by the modelled context factor",
        **common,
    )
