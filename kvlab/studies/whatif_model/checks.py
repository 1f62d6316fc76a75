"""Report 04's checks: the article's claims as the fitted model sees them (one checker per claim kind, dispatched by
:data:`CLAIM_CHECKS`) and kvlab's own checks of the model (:data:`OWN_CHECKS`): its held-out test, the crossover's
range over the assumption sets, the fit's physical plausibility and its bound against published GPU runs.

Rule 3 of :mod:`kvlab.claims.grading`: a modelled claim is an illustration unless the held-out test passes, which
shows as a row of its own. Checks return verdicts built by the grading constructors, never paragraphs."""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from kvlab.claims.grading import ASSUMED_FROM_CLAIM, UNSTATED_CONDITION, held_out_gate, held_out_grade
from kvlab.claims.held_out import consistent_phrase, grade_model_claim, held_out_error, model_margin, winners_held_out
from kvlab.claims.held_out import held_out_verdict
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.perfmodel.calibrate import SANE_RANGES, implausible, refits
from kvlab.perfmodel.outside import CAPACITY_FRACTIONS, OutsideChecks, outside_checks, terms_tokens_per_s
from kvlab.perfmodel.ranges import _default_index, model_ranges
from kvlab.perfmodel.reference import bound_checks
from kvlab.studies.whatif_model.formats import k_span, pct
from kvlab.studies.whatif_model.result import Consistent
from kvlab.units import tokens_label
from kvlab.verdicts import Verdict

#: The fitted parameters in words, for a verdict's unit.
PARAMETER_NAMES = {
    "prefill_efficiency": "prefill efficiency",
    "bandwidth_efficiency": "decode bandwidth efficiency",
    "dcp_layer_latency_s": "DCP latency per layer and step",
}
#: A claim's context label -> tokens (the article's two contexts).
CONTEXTS = {"64K": 65536, "200K": 204800}


@dataclass(frozen=True)
class Evidence:
    """What every check reads: the free fit at the default assumptions and its crossover, the refits per assumption
    set (``sens``), the consistent fits' summary, the model's memory check for the article's configuration
    (``head``: Kimi-K3 without DCP at 200K on the fit's GPU, per memory target) and the bound checks."""

    fit: object
    sens: pl.DataFrame
    head: pl.DataFrame
    crossover: float | None
    consistent: Consistent | None = None
    bounds: tuple = ()
    #: the checks that can fail (kvlab.perfmodel.outside), and the runs the fitted terms are tested at
    outside: OutsideChecks | None = None
    terms_runs: tuple[str, ...] = ("lmsys_gb300_longctx",)

    @property
    def contexts(self) -> list[int]:
        return sorted(self.fit.residuals["context_tokens"].unique().to_list())

    @property
    def facts(self) -> tuple[int, int, float, float]:
        """(winners right, held out, the model's margin, its mean held-out error): what rule 3 reads."""
        return (
            *winners_held_out(self.fit),
            model_margin(self.fit, self.contexts) or 0.0,
            held_out_error(self.fit),
        )

    @property
    def crossovers(self) -> pl.Series:
        return self.sens["crossover_tokens"].drop_nulls()

    def allowed(self) -> str:
        """The consistent fits' crossover range, for a verdict's number ('' without them), in report 01's words for
        the same summary (:func:`kvlab.claims.held_out.consistent_phrase`): the two pages give one range."""
        return consistent_phrase(self.consistent.as_dict() if self.consistent else None)


def _ratio_words(ev: Evidence, tokens: int, label: str) -> str | None:
    """vLLM's modelled time over SGLang's at ``tokens`` (below 1: vLLM faster) with its range over the sets: a
    measurement, naming no winner (the verdict it sits in is the model's, graded by rule 3)."""
    d = ev.fit.residuals.filter(pl.col("context_tokens") == tokens)
    times = {r["engine"]: r["modelled_s"] for r in d.iter_rows(named=True)}
    if len(times) < 2:
        return None
    vllm = next(t for e, t in times.items() if e.startswith(VLLM))
    sglang = next(t for e, t in times.items() if e.startswith(SGLANG))
    span = next(iter(model_ranges(ev.sens, contexts=(tokens,)).ratios), None) if ev.sens.height else None
    rng = f" ({span.ratio.lo:.2f}–{span.ratio.hi:.2f})" if span and span.ratio.lo is not None else ""
    return f"{vllm / sglang:.2f} at {label}{rng}"


def check_relative_speed(rows: list[dict], ev: Evidence) -> list[Verdict]:
    """The article's winners at 64K and 200K, together: does the fitted model cross between the published contexts
    with the article's winner at each? One verdict, ``crossover_modelled``, graded by rule 3."""
    agree, ratios = True, []
    for c in rows:
        tokens = CONTEXTS.get(c["context_from"])
        d = ev.fit.residuals.filter(pl.col("context_tokens") == tokens).sort("modelled_s")
        if d.height < 2:
            continue
        agree &= d["engine"][0] == c["engine"]
        ratios.append(_ratio_words(ev, tokens, c["context_from"]))
    if not ratios:
        return []
    lo, hi = ev.contexts[0], ev.contexts[-1]
    inside = ev.crossover is not None and lo < ev.crossover < hi
    grade, _ = grade_model_claim(ev.fit, agree and inside, ev.contexts, value=ev.crossover, unit="tokens")
    xo = ev.crossovers
    if xo.len():  # the value's range over the assumption sets, in its unit (tokens)
        grade = replace(grade, spread=(float(xo.min()), float(xo.max())))
    crossing = f"crossover {k_span(ev.crossover)}" if ev.crossover else "no crossover"
    within = f" ({k_span(xo.min(), xo.max())} over all {ev.sens.height} assumption sets)" if xo.len() else ""
    stated = "; ".join(c["statement"] for c in rows)
    return [
        grade.verdict(
            f"{stated}: so the winner changes between {tokens_label(lo)} and {tokens_label(hi)} — as kvlab's model "
            "fitted to the same four points sees it (not an independent check)",
            f"{crossing}{within}; vLLM ÷ SGLang modelled time {', '.join(r for r in ratios if r)}",
            claim_id="crossover_modelled",
            kind="crossover",
        )
    ]


def check_memory(rows: list[dict], ev: Evidence) -> list[Verdict]:
    """A memory setting claimed to run out of memory (``oom_retries``, direction 'some') where a lower one does not:
    the model's memory check flags it only through a need outside the pool taken from this very claim, so it
    cannot be tested here."""
    head = ev.head
    flagged = head.filter(pl.col("outside_pool_gib_per_gpu") < pl.col("outside_need_gib_per_gpu"))
    oom = [c for c in rows if c.get("metric") == "oom_retries" and c.get("direction") == "some"]
    if not oom or head["mem_util"].n_unique() < 2 or not flagged.height:
        return []
    hi_u, lo_u = flagged["mem_util"].max(), head["mem_util"].min()
    r = flagged.row(0, named=True)
    return [
        Verdict(
            f"{hi_u:g} runs out of memory where {lo_u:g} does not (the article's memory study) — can the model tell?",
            "cannot be tested here",
            "modelled",
            f"{hi_u:g} leaves {r['outside_pool_gib_per_gpu']:.1f} GiB/GPU outside the target, under an "
            f"assumed {r['outside_need_gib_per_gpu']:.1f} GiB taken from this very claim",
            claim_id=c["claim_id"],
            kind="memory_setting",
            value=r["outside_pool_gib_per_gpu"],
            unit="GiB/GPU",
            n=1,
            scope="model fitted to the published table",  # one assumption set
            limit=ASSUMED_FROM_CLAIM,
            reason="the model's memory check rests on a need outside the pool chosen from this claim",
        )
        for c in oom
    ]


def check_held_out(ev: Evidence) -> list[Verdict]:
    """The model's held-out test (each published point refitted from the others) as a row of its own, its errors
    in whole percent: the one rounding the page gives them."""
    fit = ev.fit
    if not fit.loo.height:
        return []
    right, total, margin, error = ev.facts
    worst = fit.loo.sort(pl.col("loo_error_pct").abs(), descending=True).row(0, named=True)
    v = held_out_verdict(held_out_grade(right, total, margin, error), fit)
    return [
        replace(
            v,
            number=f"{right} of {total} winners right; margin {pct(100 * margin)} against a "
            f"{pct(fit.loo_mean_abs_pct)} mean held-out error (worst {pct(abs(worst['loo_error_pct']))}, "
            f"{engine_label(worst['engine'])} at {tokens_label(worst['context_tokens'])})",
        )
    ]


def check_crossover_range(ev: Evidence) -> list[Verdict]:
    """Where the crossover lies over what the article leaves open, each set refitted: the range is the answer."""
    xo, sens = ev.crossovers, ev.sens
    if not xo.len():
        return []
    allowed = ev.allowed()
    outcome, why, limit = held_out_gate("found", *ev.facts)
    narrower = (
        f"; the narrower range is what the totals allow: the fits whose largest residual is within "
        f"{ev.consistent.tolerance_pct:g} points of the best fit's (value and spread: all sets)"
        if allowed
        else ""
    )
    return [
        Verdict(
            "Where is the crossover over what the article leaves open (batch size, output length, expert reads, "
            "cached MLA width, KV number format), each refitted to the same four points?",
            outcome,
            "modelled",
            f"{k_span(xo.min(), xo.max())} over all {sens.height} assumption sets"
            + (f"; {allowed}" if allowed else ""),
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
            + narrower,
        )
    ]


def outside_factor(fit) -> tuple[str, float, str] | None:
    """The fitted parameter furthest from its physically plausible range (:data:`~kvlab.perfmodel.calibrate.SANE_RANGES`)
    and how far, as (name, factor, "maximum" | "minimum"): value ÷ the plausible maximum above it, or the plausible
    minimum ÷ value below it; ≤ 1 inside its range. None for a CPU fit or one with no free parameter in the table."""
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


def check_plausible(ev: Evidence) -> list[Verdict]:
    """Whether the fitted parameters are physically plausible: an implausible fit fails whatever its held-out test
    says; a plausible one passes only with the held-out test."""
    fit = ev.fit
    bad = implausible(fit)
    worst = outside_factor(fit)
    outcome, why, limit = ("contradicted", "", "") if bad else held_out_gate("reproduced", *ev.facts)
    unit = (
        f"× the plausible {worst[2]} ({PARAMETER_NAMES.get(worst[0], worst[0])}, the fitted parameter furthest out)"
        if worst
        else ""
    )
    reason = (
        "a fitted parameter lies outside its physical range, so the fit describes the table rather than its physics"
        if bad
        else "every fitted parameter is in its physical range" + (f"; {why}" if why else "")
    )
    return [
        Verdict(
            f"The fitted parameters are physically plausible for the article's {fit.hardware} host",
            outcome,
            "modelled",
            "no: " + "; ".join(implausible(fit, short=True)) if bad else "yes, every one in range",
            claim_id="model_plausible",
            kind="model_plausibility",
            scope="model fitted to the published table",
            value=worst[1] if worst else None,
            unit=unit,
            n=fit.residuals.height,  # the published points fitted
            limit=limit,
            family="own",
            reason=reason,
        )
    ]


def bound_verdict(c) -> Verdict:
    """One published measured GPU run against the model's throughput bound (:func:`kvlab.perfmodel.reference
    .bound_checks`): *reproduced* when the bound is at or above the published figure and the modelled KV capacity
    holds its concurrency, *contradicted* otherwise, naming the model's wrong term. The number: bound ÷ published."""
    r = c.run
    conc = (
        f"; capacity {c.capacity_per_gpu:,.1f} sequences per GPU for {r.concurrency_per_gpu:g} published"
        if r.concurrency_per_gpu
        else ""
    )
    return Verdict(
        f"A published run stays under the model's throughput bound: {r.model} on {r.gpu} "
        f"({engine_label(r.engine)}, {r.input_tokens:,} input tokens), {r.value:,g} output tokens/s per GPU — "
        f"{r.publisher}, {r.published}",
        "reproduced" if c.consistent else "contradicted",
        "published",
        f"bound {float(f'{c.bound:.3g}'):,.0f} tokens/s per GPU, {c.margin:.2f}× the published {r.value:,g}{conc}",
        claim_id=f"published_bound_{r.run_id}",
        kind="model_bound",
        value=c.margin,
        family="own",
        unit="× (the model's bound ÷ the published figure)",
        n=1,
        scope="the model's roofline bound at the published run's conditions (data/reference/published_gpu_runs.yaml)",
        reason=(
            "the bound is above the published figure"
            + (" and the modelled KV capacity holds its concurrency" if r.concurrency_per_gpu else "")
            + (f"; per GPU: {r.per_gpu}" if r.per_gpu else "")
            + f"; {r.citation()}"
            if c.consistent
            else f"the model is contradicted: {c.wrong_term()}; {r.citation()}"
        ),
    )


def check_bounds(ev: Evidence) -> list[Verdict]:
    """The model against every published measured GPU run, one verdict each (the model's own check)."""
    return [bound_verdict(c) for c in ev.bounds]


# --------------------------------------------------------------------------- checked where it can fail (issue 55)

OUTSIDE_SCOPE = "the model at a published run's or log's conditions (data/reference/published_gpu_runs.yaml)"


def capacity_verdict(c) -> Verdict:
    """A published concurrency against the modelled KV capacity (:class:`kvlab.perfmodel.outside.CapacityCheck`):
    *contradicted* when the published requests per GPU need more than all of the GPU's memory for weights plus KV."""
    r = c.run
    ctx = r.input_tokens + r.output_tokens
    at = ", ".join(f"{c.capacity(f):.1f}" for f in CAPACITY_FRACTIONS)
    fr = "/".join(f"{f:.2f}" for f in CAPACITY_FRACTIONS)
    mem = f"{c.memory_bytes / 1e9:g} GB"
    other = (
        f" ({c.capacity(memory_bytes=c.catalog_memory_bytes):.1f} in {c.catalog_memory_bytes / 1e9:g})"
        if c.catalog_memory_bytes != c.memory_bytes
        else ""
    )
    return Verdict(
        f"{r.concurrency_per_gpu:g} requests per GPU fit the KV capacity: {r.gpu}, {ctx:,} tokens — {r.publisher}, "
        f"{r.published}",
        "reproduced" if c.consistent else "contradicted",
        "published",
        f"needs {c.fraction_needed:.2f} of HBM; {c.capacity():.1f} fit in {mem}{other}",
        claim_id=f"published_capacity_{r.run_id}",
        kind="model_capacity",
        value=c.margin,
        unit="× (modelled capacity at all of HBM ÷ published concurrency)",
        n=1,
        scope=OUTSIDE_SCOPE,
        family="own",
        reason=(
            f"the published concurrency fits in {c.fraction_needed:.0%} of HBM (weights {c.weights_per_gpu_bytes / 1e9:.1f}"
            f" GB per GPU, {c.kv_bytes_per_seq / 1e9:.2f} GB of KV per sequence; {at} sequences at {fr} of HBM); "
            f"{r.citation()}"
            if c.consistent
            else f"the model is contradicted: {r.concurrency_per_gpu:g} requests need {c.fraction_needed:.2f} of HBM: "
            "the KV bytes per token or the weight bytes per GPU are too large"
        ),
    )


def prefill_verdict(c) -> Verdict:
    """A published TTFT against the least time its prefill's FLOPs take at peak (:class:`kvlab.perfmodel.outside
    .PrefillCheck`): it decides only where the source states the GPUs one prefill runs over."""
    r = c.run
    number = (
        f"{c.flops / 1e16:.2f} × 10¹⁶ FLOPs, {c.one_gpu_s:.1f} s on one GPU at peak ({c.least_one_gpu_s:.1f} s for all "
        f"but the routed experts, which may run at FP4): {r.ttft_s:g} s needs ≥ {c.gpus_needed:.2f} GPUs"
    )
    if not c.decidable:
        outcome, limit = "cannot be tested here", UNSTATED_CONDITION
        reason = (
            f"the source does not state the prefill's pipeline-parallel degree: {r.ttft_s:g} s contradicts the FLOPs only "
            f"if the prefill ran on one GPU, and holds over two or more ({c.least_one_gpu_s:.1f} s on one GPU without "
            f"the routed experts, which may run at FP4); {r.citation()}"
        )
    else:
        outcome, limit = ("reproduced" if c.consistent else "contradicted"), ""
        number += f"; over the stated {r.prefill_gpus}: at least {c.least_s:.1f} s"
        reason = (
            "the published TTFT is above the least prefill time over the stated GPUs"
            if c.consistent
            else "the model is contradicted: the prefill FLOPs (attention pairs and active parameters) are too many "
            "for the published TTFT over the stated GPUs"
        )
    return Verdict(
        f"A {r.input_tokens:,}-token prefill fits the {r.ttft_s:g} s TTFT: {r.gpu} — {r.publisher}, {r.published}",
        outcome,
        "published",
        number,
        claim_id=f"published_prefill_{r.run_id}",
        kind="model_prefill",
        value=c.gpus_needed,
        unit="GPUs at 100% of peak the published TTFT needs",
        n=1,
        scope=OUTSIDE_SCOPE,
        limit=limit,
        family="own",
        reason=reason,
    )


def pool_verdict(c) -> Verdict:
    """An engine's logged KV pool against the model's KV bytes per token (:class:`kvlab.perfmodel.outside
    .PoolCheck`): *contradicted* when the logged tokens differ from the modelled by more than the log's rounding."""
    lg = c.log
    cfg = f"{engine_label(lg.engine)} TP{lg.tp}" + (f"+DCP{lg.dcp}" if lg.dcp > 1 else "")
    return Verdict(
        f"The KV formula fills a logged pool: {lg.gpu}, {cfg}, {lg.kv_tokens:,} tokens — {lg.title}, {lg.published}",
        "reproduced" if c.consistent else "contradicted",
        "published",
        f"{c.modelled_tokens:,.0f} modelled, {c.margin:.4f}× (±{c.tolerance:.2%}); "
        f"{c.non_kv_inside_target_bytes / 2**30:.1f} GiB non-KV in the target",
        claim_id=f"published_pool_{lg.log_id}",
        kind="model_pool",
        value=c.margin,
        unit="× (logged tokens ÷ modelled tokens)",
        n=1,
        scope=OUTSIDE_SCOPE,
        family="own",
        reason=(
            f"the KV formula holds within the log's rounding (its printed GiB and one block per rank); the log implies "
            f"{c.implied_bytes_per_token:,.0f} B per token per GPU; {lg.citation()}"
            if c.consistent
            else "the model is contradicted: its KV bytes per token (or the DCP split) differ from the engine's log "
            "by more than the log's rounding"
        ),
    )


def terms_verdict(run, kind: str, preds: tuple[float, float, float], residual_pct: float, facts) -> Verdict:
    """A hypothesis test: a fit's terms (fitted on the article's Kimi-K3 table) carried to a published run's model,
    host and concurrency (:func:`kvlab.perfmodel.outside.terms_tokens_per_s`). ``preds``: the default set's
    prediction and the lowest and highest over the sets. *Contradicted* when the default set predicts less than the
    published figure by more than the fit misses its own table (``residual_pct``); otherwise rule 3 applies."""
    default, lo, hi = preds
    known = residual_pct is not None  # None: the set's fit left no residual to measure its miss by
    short = known and default < run.value * (1 - residual_pct / 100)
    outcome, why, limit = ("contradicted", "", "") if short else held_out_gate("reproduced", *facts)
    if not known:
        outcome, why = "inconclusive", "the fit's own miss on its table is not known"
    return Verdict(
        f"Hypothesis test: the {kind} fit's terms reach {run.value:,.1f} tokens/s per GPU at {run.gpu}'s "
        f"{run.concurrency_per_gpu:g} requests — {run.publisher}, {run.published}",
        outcome,
        "modelled",
        f"{default:,.0f} ({lo:,.0f}–{hi:,.0f} over the sets), {default / run.value:.2f}×; own miss "
        + (f"up to {residual_pct:.1f}%" if known else "not known"),
        claim_id=f"published_terms_{kind.replace('-', '_')}_{run.run_id}",
        kind="model_terms",
        value=default / run.value,
        unit="× (predicted ÷ published)",
        spread=(lo / run.value, hi / run.value),
        n=1,
        scope=OUTSIDE_SCOPE + "; a hypothesis test: terms carried across models and hosts",
        limit=limit,
        family="own",
        reason=(
            "the terms do not carry: the prediction falls short of the published figure by more than the fit's own "
            "miss on the table it was fitted to"
            if short
            else why
            if not known
            else "within the fit's own miss of the published figure" + (f"; {why}" if why else "")
        ),
    )


def check_outside(ev: Evidence) -> list[Verdict]:
    """Every check that can fail, one verdict each: capacity against published concurrency, a published TTFT
    against the prefill's FLOPs, the fitted terms at published conditions and the KV pool against engine logs."""
    o = ev.outside
    if o is None:
        return []
    out = [capacity_verdict(c) for c in o.capacity] + [prefill_verdict(c) for c in o.prefill]
    out += _terms_verdicts(ev, [r for r in o.runs if r.concurrency_per_gpu and r.value and r.run_id in ev.terms_runs])
    return out + [pool_verdict(c) for c in o.pools]


def _terms_verdicts(ev: Evidence, runs) -> list[Verdict]:
    """The free and the bounded fit's terms at each run's published concurrency, with their range over the sets."""
    if not runs or not ev.sens.height:
        return []
    d = _default_index(ev.sens)
    out = []
    for physics, kind in ((False, "free"), (True, "bounded")):
        if physics and "phys_max_abs_residual_pct" not in ev.sens.columns:
            continue
        params = [p for _w, _a, p in refits(ev.sens, physics=physics)]
        col = "phys_max_abs_residual_pct" if physics else "max_abs_residual_pct"
        residual = ev.sens[col][d] if d is not None else ev.fit.max_abs_residual_pct
        p0 = params[d] if d is not None else ev.fit.params
        for run in runs:
            preds = [terms_tokens_per_s(run, p) for p in params]
            out.append(
                terms_verdict(run, kind, (terms_tokens_per_s(run, p0), min(preds), max(preds)), residual, ev.facts)
            )
    return out


#: The checker of each claim kind this report grades: (its claims' row dicts, the evidence) -> verdicts.
CLAIM_CHECKS = {"relative_speed": check_relative_speed, "memory": check_memory}
#: kvlab's own checks of the model, in the order the verdict box lists them.
OWN_CHECKS = (check_held_out, check_crossover_range, check_plausible, check_bounds, check_outside)


def verdicts(ev: Evidence, claims: pl.DataFrame) -> list[Verdict]:
    """Every verdict of report 04: each claim kind's checker over its rows, then kvlab's own checks."""
    out: list[Verdict] = []
    if "kind" in claims.columns:
        for kind, check in CLAIM_CHECKS.items():
            rows = claims.filter(pl.col("kind") == kind).to_dicts()
            if rows:
                out += check(rows, ev)
    for check in OWN_CHECKS:
        out += check(ev)
    return out


def evidence(fit, sens, head, crossover, consistent: Consistent | None = None, bounds=None, data_dir=None) -> Evidence:
    """The :class:`Evidence` of the checks; ``bounds`` and the checks that can fail come from ``data_dir``'s
    reference/published_gpu_runs.yaml (default: kvlab.paths.DATA_DIR's)."""
    where = () if data_dir is None else (data_dir,)
    return Evidence(
        fit,
        sens,
        head,
        crossover,
        consistent,
        tuple(bound_checks(*where) if bounds is None else bounds),
        outside_checks(*where),
    )
