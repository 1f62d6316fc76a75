"""Report 04's modelled claims: the article's winners and crossover as kvlab's model fitted to the same four points
sees them (rule 3 of :mod:`kvlab.claims.grading`: an illustration unless the held-out test passes, which shows as a
row of its own), the crossover's range over the assumption sets and over the fits consistent with the published
totals, the fit's physical plausibility, and the 0.95 memory claim, which the model cannot test (its memory check rests on a need taken from that claim)."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from kvlab.claims.grading import ASSUMED_FROM_CLAIM, held_out_gate, held_out_grade
from kvlab.claims.held_out import (
    consistent_phrase,
    grade_model_claim,
    held_out_error,
    model_margin,
    winners_held_out,
)
from kvlab.claims.speed import held_out_verdict
from kvlab.engines import SGLANG, engine_label
from kvlab.perfmodel import Assumptions, Workload
from kvlab.perfmodel.calibrate import SANE_RANGES, crossover_from_fit, implausible
from kvlab.perfmodel.ranges import model_ranges
from kvlab.perfmodel.reference import bound_checks
from kvlab.units import approx_tokens, token_range, tokens_label
from kvlab.verdicts import Verdict


#: The fitted parameters in words, for a verdict's unit.
PARAMETER_NAMES = {
    "prefill_efficiency": "prefill efficiency",
    "bandwidth_efficiency": "decode bandwidth efficiency",
    "dcp_layer_latency_s": "DCP latency per layer and step",
}


def outside_factor(fit) -> tuple[str, float, str] | None:
    """The fitted parameter furthest from its physically plausible range (:data:`kvlab.perfmodel.calibrate.SANE_RANGES`)
    and how far, as (name, factor, "maximum" | "minimum"): value ÷ the plausible maximum above it, or the plausible
    minimum ÷ value below it; ≤ 1 for a parameter inside its range (the largest then says how close the nearest
    comes). None for a CPU fit (the ranges are a GPU host's) or one with no free parameter in the table."""
    if fit.hardware == "CPU":
        return None
    best = None
    for name in fit.free:
        if name not in SANE_RANGES:
            continue
        lo, hi = SANE_RANGES[name]
        v = getattr(fit.params, name)
        cand = (name, v / hi, "maximum") if v / hi >= (lo / v if v > 0 else 0) else (name, lo / v, "minimum")
        if best is None or cand[1] > best[1]:
            best = cand
    return best


def bound_verdicts(checks) -> list:
    """The model against published measured GPU runs (:func:`kvlab.perfmodel.reference.bound_checks`): one verdict
    per run, the model's own check (no document claims it). *reproduced* when the model's throughput bound at the
    run's conditions is at or above the published figure and its KV capacity holds the published concurrency;
    *contradicted* otherwise, naming the term of the model that is wrong. The number is the margin, bound ÷ published."""
    out = []
    for c in checks:
        r = c.run
        conc = (
            f"; capacity {c.capacity_per_gpu:,.1f} sequences per GPU for {r.concurrency_per_gpu:g} published"
            if r.concurrency_per_gpu
            else ""
        )
        out.append(
            Verdict(
                f"A published measured run stays under the model's throughput bound: {r.model} on {r.gpu} ({engine_label(r.engine)}, "
                f"{r.input_tokens:,} input tokens, {r.kv_format.upper()} KV), {r.value:,.1f} output tokens/s per GPU — "
                f"{r.citation()}",
                "reproduced" if c.consistent else "contradicted",
                "published",
                f"bound {float(f'{c.bound:.3g}'):,.0f} tokens/s per GPU, {c.margin:.2f}× the published {r.value:,.1f}{conc}",
                claim_id=f"published_bound_{r.run_id}",
                kind="model_bound",
                value=c.margin,
                family="own",
                unit="× (the model's bound ÷ the published figure)",
                n=1,
                scope="the model's roofline bound at the published run's conditions (data/reference/published_gpu_runs.yaml)",
                reason=(
                    "the bound is above the published figure and the modelled KV capacity holds its concurrency"
                    if c.consistent
                    else f"the model is contradicted: {c.wrong_term()}"
                ),
            )
        )
    return out


def model_verdicts(
    fit, sens, head, claims, workload=None, assumptions=None, consistent: dict | None = None, bounds: list | None = None
) -> list:
    """Report 04's verdicts: the article's winners and crossover as the fitted model sees them, held-out
    prediction, the assumption's effect, the fit's plausibility, and the 0.95 memory claim (untestable by the model).

    ``consistent``: :func:`kvlab.perfmodel.report.consistent_summary` of the fits consistent with the published
    totals; with it both crossover verdicts give the range over every assumption set and the (narrower) range those
    fits allow. It adds words, never a grade: a model that fails its held-out test still only illustrates.

    Every verdict is about the article's own configuration (Kimi-K3 on 8× the fit's GPU, DCP 8), whatever GPU or
    model the report shows; ``head`` gives only the memory targets compared. ``bounds``: the model's throughput bound
    against published measured GPU runs (:func:`kvlab.perfmodel.reference.bound_checks`; default: every run in
    data/reference/published_gpu_runs.yaml), one verdict each (:func:`bound_verdicts`)."""
    # matplotlib: perfmodel.figures draws, and importing kvlab.claims must not load it
    from kvlab.perfmodel.figures import headroom_table

    workload, assumptions = workload or Workload(), assumptions or Assumptions()
    crossover = crossover_from_fit(fit, gpu=fit.hardware, workload=workload, assumptions=assumptions)
    head = headroom_table(
        fit.hardware, "Kimi-K3", sorted(head["mem_util"].unique().to_list()), [1], [204800], assumptions
    )
    out = []
    res = fit.residuals
    speed = claims.filter(pl.col("kind") == "relative_speed") if "kind" in claims.columns else claims.head(0)
    ctx = {"64K": 65536, "200K": 204800}
    modelled, agree = [], True
    for c in speed.iter_rows(named=True):
        tokens = ctx.get(c["context_from"])
        d = res.filter(pl.col("context_tokens") == tokens).sort("modelled_s")
        if d.height < 2:
            continue
        winner, ratio = d["engine"][0], d["modelled_s"][1] / d["modelled_s"][0]
        agree &= winner == c["engine"]
        span = (
            next((r for r in model_ranges(sens, contexts=(tokens,)).ratios), None)
            if sens is not None and sens.height
            else None
        )
        over = (
            ""
            if span is None
            else f" ({span.margin()} over the {span.ratio.sets} sets)"
            if span.winner
            else f" (over the {span.ratio.sets} sets: {span.margin()}; {engine_label(SGLANG)} faster in "
            f"{span.sglang_faster})"
        )
        modelled.append(f"{engine_label(winner)} {ratio:.2f}× faster at {c['context_from']}{over}")
    lo, hi = res["context_tokens"].min(), res["context_tokens"].max()
    inside = crossover is not None and lo < crossover < hi
    held = None
    if modelled:
        stated = "; ".join(c["statement"] for c in speed.iter_rows(named=True))
        rng = sens["crossover_tokens"].drop_nulls()
        allowed = consistent_phrase(consistent)
        within = (
            f"; range {token_range(rng.min(), rng.max())} over all {sens.height} assumption sets"
            + (f", {allowed}" if allowed else "")
            if rng.len()
            else ""
        )
        grade, held = grade_model_claim(
            fit, agree and inside, sorted(res["context_tokens"].unique().to_list()), value=crossover, unit="tokens"
        )
        if rng.len():  # the value's range over the assumption sets, in its unit (tokens)
            grade = replace(grade, spread=(float(rng.min()), float(rng.max())))
        out.append(
            grade.verdict(
                f"{stated}: so the winner changes between {tokens_label(lo)} and {tokens_label(hi)} — as kvlab's model "
                "fitted to the same four points sees it (not an independent check)",
                (f"crossover {approx_tokens(crossover)}{within}" if crossover else "no crossover")
                + f"; {', '.join(modelled)}",
                claim_id="crossover_modelled",
                kind="crossover",
            )
        )
    if fit.loo.height:
        right, total = winners_held_out(fit)
        if held is None:
            held = held_out_grade(
                right,
                total,
                model_margin(fit, sorted(res["context_tokens"].unique().to_list())) or 0.0,
                held_out_error(fit),
            )
        worst = fit.loo.sort(pl.col("loo_error_pct").abs(), descending=True).row(0, named=True)
        v = held_out_verdict(held, fit)
        out.append(
            replace(
                v,
                number=v.number + f" (worst {abs(worst['loo_error_pct']):.1f}%, "
                f"{engine_label(worst['engine'])} at {tokens_label(worst['context_tokens'])})",
            )
        )
    contexts = sorted(res["context_tokens"].unique().to_list())
    facts = (*winners_held_out(fit), model_margin(fit, contexts) or 0.0, held_out_error(fit))
    xo = sens["crossover_tokens"].drop_nulls()
    if xo.len():
        allowed = consistent_phrase(consistent)
        outcome, why, limit = held_out_gate("found", *facts)
        out.append(
            Verdict(
                "Where is the crossover over what the article leaves open (batch size, output length, "
                "expert reads, cached MLA width, KV number format), each refitted to the same four "
                "points?",
                outcome,
                "modelled",
                f"{token_range(xo.min(), xo.max())} over all {sens.height} "
                "assumption sets" + (f"; {allowed}" if allowed else ""),
                claim_id="crossover_range",
                kind="crossover",
                value=float(xo.median()),
                unit="tokens",
                spread=(float(xo.min()), float(xo.max())),
                n=sens.height,  # the assumption sets, each refitted
                scope="model fitted to the published table, refitted per assumption set",
                limit=limit,
                family="own",
                reason=(f"{why}; " if why else "")
                + f"{xo.len()} of {sens.height} assumption sets cross; the range is the answer"
                + (
                    f"; the narrower range is what the totals allow: the fits whose largest residual is "
                    f"within {consistent['tolerance_pct']:g} points of the best fit's (value and spread: "
                    "all sets)"
                    if allowed
                    else ""
                ),
            )
        )
    bad = implausible(fit)
    worst = outside_factor(fit)
    # an implausible fit fails whatever its held-out test says; a plausible one passes only with the held-out test
    plausible, why, limit = ("contradicted", "", "") if bad else held_out_gate("reproduced", *facts)
    out.append(
        Verdict(
            f"The fitted parameters are physically plausible for the article's {fit.hardware} host",
            plausible,
            "modelled",
            "no: " + "; ".join(implausible(fit, short=True)) if bad else "yes, every one in range",
            claim_id="model_plausible",
            kind="model_plausibility",
            scope="model fitted to the published table",
            value=worst[1] if worst else None,
            unit=f"× the plausible {worst[2]} ({PARAMETER_NAMES.get(worst[0], worst[0])}, the fitted "
            "parameter furthest out)"
            if worst
            else "",
            n=fit.residuals.height,  # the published points fitted
            limit=limit,
            family="own",
            reason=(
                "a fitted parameter lies outside its physical range, so the fit describes the table "
                "rather than its physics"
            )
            if bad
            else "every fitted parameter is in its physical range" + (f"; {why}" if why else ""),
        )
    )
    flagged = head.filter(pl.col("outside_pool_gib_per_gpu") < pl.col("outside_need_gib_per_gpu"))  # short outside
    if head["mem_util"].n_unique() > 1 and flagged.height:
        hi_u, lo_u = flagged["mem_util"].max(), head["mem_util"].min()
        r = flagged.row(0, named=True)
        out.append(
            Verdict(
                f"{hi_u:g} runs out of memory where {lo_u:g} does not (the article's memory study) — can the "
                "model tell?",
                "cannot be tested here",
                "modelled",
                f"{hi_u:g} leaves {r['outside_pool_gib_per_gpu']:.1f} GiB/GPU outside the target, under an "
                f"assumed {r['outside_need_gib_per_gpu']:.1f} GiB taken from this very claim",
                claim_id="memory_095",
                kind="memory_setting",
                value=r["outside_pool_gib_per_gpu"],
                unit="GiB/GPU",
                n=1,
                scope="model fitted to the published table",  # one assumption set
                limit=ASSUMED_FROM_CLAIM,
                reason="the model's memory check rests on a need outside the pool chosen from this claim",
            )
        )
    if bounds is None:
        bounds = bound_checks()
    out += bound_verdicts(bounds)
    return out
