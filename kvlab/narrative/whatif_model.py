"""Report 04 (what-if model): the calibrated model's fit, sensitivity, curves and headroom in words, and its verdicts."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from kvlab.guide import engine_label
from kvlab.narrative.common import _implausible, config_name, setup_phrase
from kvlab.units import approx_label, approx_tokens, k_label, tokens_label


def model_conclusions(fit, sens: pl.DataFrame, crossover: float | None, at_max: pl.DataFrame, head: pl.DataFrame,
                      workload, *, gpu: str, tp: int, dcp: int, published_contexts: list[int],
                      ratio_range: tuple[float, float] | None = None) -> str:
    """The what-if report's conclusions, as markdown bullets, from its fit, sensitivity, curves and headroom.

    ``at_max``: the modelled curves at the largest context drawn (one row per engine); ``head``: the KV
    headroom table; the memory bullet reads it without DCP at the largest published context (the smallest
    headroom context when that one is not in the table), and says what its flag means.
    """

    lo, hi = min(published_contexts), max(published_contexts)
    model = at_max["model"][0] if "model" in at_max.columns and at_max.height else head["model"][0]
    who = setup_phrase(model, gpu, tp)
    xo_txt = (f"{approx_tokens(crossover)}, " + ("between" if lo < crossover < hi else "outside")
              + f" the published {tokens_label(lo)} and {tokens_label(hi)} points"
              ) if crossover else "no crossover up to the largest context drawn"
    head_contexts = head["context_tokens"].unique().to_list()
    mem_ctx = hi if hi in head_contexts else min(head_contexts)
    h = head.filter((pl.col("dcp") == 1) & (pl.col("context_tokens") == mem_ctx))
    seqs = {r["mem_util"]: r["max_concurrent_seqs"] for r in h.iter_rows(named=True)}
    u_lo, u_hi = min(head["mem_util"]), max(head["mem_util"])
    xo = sens["crossover_tokens"].drop_nulls()
    bad = _implausible(fit)
    right, total = winners_held_out(fit)
    flagged = head.filter(pl.col("outside_pool_gib_per_gpu") < pl.col("outside_need_gib_per_gpu"))
    lines = [
        f"- **Fit:** the {fit.residuals.height} published times are reproduced within {fit.max_abs_residual_pct:.1f}%; "
        f"held out in turn, each is predicted within {fit.loo_max_abs_pct:.1f}% (mean {fit.loo_mean_abs_pct:.1f}%), "
        f"with the right winner at its context in {right} of {total}: {confidence(fit)}.",
        ("- **Plausibility:** " + "; ".join(bad) + ": a description of the published figures, not proof of their "
         "physics.") if bad else "- **Plausibility:** every fitted parameter is in its physical range.",
        f"- **Crossover** (vLLM TP{tp} vs SGLang TP{tp}+DCP{dcp}, {who}): {xo_txt}"
        + (f"; **{k_label(xo.min())}–{k_label(xo.max())}** over the {sens.height} assumption sets the data "
           "cannot choose among (the range, not the point, is the model's answer)." if xo.len() else "."),
        at_max_sentence(at_max, hi, ratio_range),
        f"- **Memory** (vLLM without DCP, {who}, {tokens_label(mem_ctx)}): {seqs.get(u_lo)} sequences fit at {u_lo:g}, "
        f"{seqs.get(u_hi)} at {u_hi:g}" + (f"; the model flags {', '.join(f'{u:g}' for u in flagged['mem_util'].unique().sort())} "
                                           "only through its assumed need outside the pool, so it does not predict "
                                           "an out-of-memory there (see the KV headroom section)." if flagged.height else "."),
    ]
    return "\n".join(line for line in lines if line)


def whatif_setup(fit, workload, *, gpu: str, model: str, tp: int, dcp: int, published: pl.DataFrame) -> str:
    """What the report models and what it rests on, with every value named (no parameter names)."""
    pub = published.filter(pl.col("source") == "published") if "source" in published.columns else published
    ref_model = pub["model"][0] if pub.height else "?"
    ref_gpus = pub["gpu_count"][0] if pub.height and "gpu_count" in pub.columns else tp
    ref = setup_phrase(ref_model, fit.hardware, ref_gpus)
    shown = setup_phrase(model, gpu, tp)
    text = (f"Shown: **{shown}**, vLLM TP{tp} (no DCP) against SGLang TP{tp}+DCP{dcp}. The fit rests on the article's "
            f"{fit.residuals.height} published batch times ({ref}); the article states neither batch size nor output "
            f"length, so the model assumes a batch of **{workload.batch_size} requests × {workload.output_tokens:,} "
            "output tokens**.")
    if (model, gpu) != (ref_model, fit.hardware):
        text += (f" {shown} is not what the article measured: every curve for it is an extrapolation of the "
                 f"efficiencies fitted on {ref}.")
    return text


def fit_sentence(fit, workload) -> str:
    """The fitted parameters in words, how closely they reproduce the published points, and their plausibility."""
    p = fit.params
    parts = [f"prefill runs at **{p.prefill_efficiency:.1%}** of the GPUs' dense peak",
             f"decode reads memory at **{p.bandwidth_efficiency:.1%}** of peak bandwidth"]
    if "dcp_layer_latency_s" in fit.free:
        parts.append(f"DCP adds **{p.dcp_layer_latency_s * 1e6:,.0f} µs** per full-attention layer per decode step")
    text = (f"- Fitted on {fit.hardware} (batch {workload.batch_size} × {workload.output_tokens:,} output tokens assumed): "
            + ", ".join(parts[:-1]) + f" and {parts[-1]}. The fitted times are within "
            f"**{fit.max_abs_residual_pct:.1f}%** of the {fit.residuals.height} published ones.")
    bad = _implausible(fit)
    if bad:
        text += ("\n- **Plausibility:** " + "; ".join(bad) + f". The fit reproduces the table only with such values: "
                 f"under the assumed workload the published times are far slower than the roofline of the article's "
                 f"{fit.hardware} host. Read the model as a consistent description of the published figures, not as "
                 "proof of their physics.")
    else:
        text += "\n- Every fitted parameter is in its physically plausible range."
    return text


def loo_sentence(fit) -> str:
    """Leave-one-out: mean and worst error, and whether each held-out point's context keeps its winner."""
    if fit.loo.is_empty():
        return "- Leave-one-out: one point only, nothing to hold out."
    worst = fit.loo.sort(pl.col("loo_error_pct").abs(), descending=True).row(0, named=True)
    right, total = winners_held_out(fit)
    return (f"- **Leave-one-out**, each published point predicted by a fit to the other {fit.loo.height - 1}: mean error "
            f"**{fit.loo_mean_abs_pct:.1f}%**, worst **{abs(worst['loo_error_pct']):.1f}%** "
            f"({engine_label(worst['engine'])} at {tokens_label(worst['context_tokens'])}: {worst['loo_modelled_s']:.3g} s "
            f"predicted, {worst['observed_s']:.4g} s published); the faster engine at the held-out point's context is "
            f"predicted right in {right} of {total}. With {len(fit.free)} parameters and {fit.loo.height} points this, "
            f"not the residuals, measures what the model predicts: {confidence(fit)}.")


def confidence(fit) -> str:
    """How far to trust the model's figures, from its held-out errors (not from its residuals): the phrase every
    report uses after a modelled number."""
    if fit.loo.is_empty():
        return "with nothing held out, its figures are untested"
    right, total = winners_held_out(fit)
    mean = fit.loo_mean_abs_pct
    if mean <= 10 and right == total:
        return f"held-out points are predicted within {mean:.0f}% on average, winners included"
    if mean <= 25 and right == total:
        return f"held-out points are predicted only roughly ({mean:.0f}% on average): read its figures as ±{mean:.0f}%"
    return (f"four points do not pin it — held out, they are missed by {mean:.0f}% on average and the winner is "
            f"wrong at {total - right} of {total}, so its figures are illustrations under stated assumptions, "
            "not forecasts")


def winners_held_out(fit) -> tuple[int, int]:
    """Held-out fits that still name the published winner at their point's context (:mod:`kvlab.claims.model`)."""
    from kvlab.claims import winners_held_out as count

    return count(fit)


def sensitivity_sentence(sens: pl.DataFrame) -> str:
    """How what the article does not state (batch size, output length, expert reads, cached MLA width) moves the
    fitted parameters and the crossover: one refit per combination (:func:`~kvlab.perfmodel.calibrate.sensitivity`)."""
    axes = [("batch", "batch_size", "{:,}"), ("output tokens", "output_tokens", "{:,}"),
            ("expert reads", "expert_reads", "{}"), ("MLA width", "mla_width", "{}")]
    varied = [f"{name} {{{', '.join(fmt.format(v) for v in sens[col].unique(maintain_order=True))}}}"
              for name, col, fmt in axes if col in sens.columns and sens[col].n_unique() > 1]
    xo = sens["crossover_tokens"].drop_nulls()
    cross = (f"the crossover moves over **{k_label(xo.min())}–{k_label(xo.max())}** tokens "
             f"({xo.min():,.0f}–{xo.max():,.0f})" if xo.len() == sens.height else
             f"the crossover is found under {xo.len()} of {sens.height} of them"
             + (f", over {k_label(xo.min())}–{k_label(xo.max())}" if xo.len() else ""))
    physical = int(sens["physical"].sum()) if "physical" in sens.columns else None
    plaus = ("" if physical is None else
             f" {physical} of {sens.height} fits are physically plausible" + (
                 f" (DCP latency {sens['dcp_layer_latency_us'].min():,.0f}–{sens['dcp_layer_latency_us'].max():,.0f} µs "
                 "per layer and step against NVLink collectives' 1–100 µs)" if physical < sens.height else "") + ".")
    return (f"- **Range:** refitting under every combination of {' × '.join(varied) or 'the assumed workload'} "
            f"({sens.height} fits, each to the same four points) moves the decode bandwidth efficiency over "
            f"{sens['bandwidth_efficiency'].min():.1%}–{sens['bandwidth_efficiency'].max():.1%}, the leave-one-out "
            f"error over {sens['loo_mean_abs_pct'].min():.0f}–{sens['loo_mean_abs_pct'].max():.0f}%, and {cross}: "
            f"four published points cannot choose among these assumptions, so the crossover is this range, not a "
            f"point.{plaus}")


def throughput_caption(model_df: pl.DataFrame, workload) -> str:
    """One sentence for the modelled throughput curves: how far each configuration's output rate falls."""

    lo, hi = model_df["context_tokens"].min(), model_df["context_tokens"].max()
    parts = []
    for (cfg,), g in model_df.group_by(["config"], maintain_order=True):
        a = g.filter(pl.col("context_tokens") == lo)["output_tokens_per_s"][0]
        b = g.filter(pl.col("context_tokens") == hi)["output_tokens_per_s"][0]
        parts.append(f"{config_name(cfg)} falls {a / b:.1f}× ({a:.3g} → {b:.3g} tokens/s)")
    return (f"Output tokens/s is the batch's {workload.batch_size} × {workload.output_tokens:,} assumed output tokens "
            f"over its batch time, so the curves cross where the batch times do; from {tokens_label(lo)} to "
            f"{tokens_label(hi)} " + " and ".join(parts) + ".")


def at_max_sentence(at_max: pl.DataFrame, calibrated_to: int | None,
                    ratio_range: tuple[float, float] | None = None) -> str:
    """The largest context drawn: which configuration is faster, by how much (and, with ``ratio_range`` — vLLM's
    time over SGLang's under every assumption set — the range of that), and that it is an extrapolation."""

    d = at_max.sort("batch_time_s")
    if d.height < 2:
        return ""
    c = d["context_tokens"][0]
    fast, slow = d.row(0, named=True), d.row(-1, named=True)
    flags = [f"{config_name(r['config'])} does not fit in memory" for r in d.iter_rows(named=True) if not r["fits"]]
    extra = (f" — an extrapolation {c / calibrated_to:.1f}× beyond the largest published context "
             f"({tokens_label(calibrated_to)})" if calibrated_to and c > calibrated_to else "")
    spread = ""
    if ratio_range:
        lo, hi = ratio_range  # vLLM's time / SGLang's: above 1, SGLang faster
        def side(r: float) -> str:
            return f"SGLang {r:.2f}× faster" if r >= 1 else f"vLLM {1 / r:.2f}× faster"
        spread = (f"; over the assumption sets the four points cannot choose among it ranges from {side(lo)} to "
                  f"{side(hi)}" + (" — the winner itself is not pinned" if lo < 1 < hi else ""))
    return (f"- At {tokens_label(c)} ({c:,} tokens) the model gives {config_name(fast['config'])} "
            f"**{slow['batch_time_s'] / fast['batch_time_s']:.2f}×** the speed of {config_name(slow['config'])} "
            f"({fast['batch_time_s']:,.0f} s vs {slow['batch_time_s']:,.0f} s per batch, {slow['waves']} wave"
            f"{'s' if slow['waves'] != 1 else ''} for the slower){spread}{extra}."
            + (f" {'; '.join(flags)}." if flags else ""))


def crossover_caption(xo: pl.DataFrame) -> str:
    """One sentence for the crossover-by-GPU figure: the trend with DCP, hypothetical GPUs, and GPUs without a crossing."""
    if xo.is_empty():
        return "No GPU and DCP size was modelled."
    parts = []
    found = xo.filter(pl.col("crossover_tokens").is_not_null())
    for (g,), d in found.group_by(["gpu"], maintain_order=True):
        d = d.sort("dcp")
        a, b = d.row(0, named=True), d.row(-1, named=True)
        tag = "" if d["weights_fit"].all() else " (hypothetical: the weights do not fit)"
        if d.height == 1:
            parts.append(f"on {g} {approx_tokens(a['crossover_tokens'])} at DCP {a['dcp']}{tag}")
        else:
            verb = "falls" if b["crossover_tokens"] < a["crossover_tokens"] else "rises"
            parts.append(f"on {g} it {verb} from {approx_label(a['crossover_tokens'])} at DCP {a['dcp']} to "
                         f"{approx_label(b['crossover_tokens'])} at DCP {b['dcp']}{tag}")
        if b.get("crossover_low_tokens") is not None:  # the ranges over the assumption sets (table below)
            parts[-1] += (f" ({approx_label(b['crossover_low_tokens'])}–{approx_label(b['crossover_high_tokens'])} at "
                          f"DCP {b['dcp']} over the assumption sets, crossing in {b['crosses_in']})")
    none = xo.filter(pl.col("crossover_tokens").is_null())
    missing = ", ".join(f"{g} at DCP {', '.join(str(x) for x in d['dcp'])}"
                        for (g,), d in none.group_by(["gpu"], maintain_order=True))
    model, tp = xo["model"][0], xo["tp"][0]
    text = (f"Modelled context from which SGLang TP{tp}+DCP beats vLLM TP{tp} for {model}: " + "; ".join(parts)
            if parts else f"No crossover for {model} on any GPU modelled")
    return text + (f"; no crossover in the modelled range for {missing}" if missing else "") + "."


def whatif_headroom_caption(head: pl.DataFrame, context: int | None = None) -> str:
    """One sentence for the KV-headroom figure: sequences at the highest vs the lowest memory target, per DCP size,
    at ``context`` (default: 200K when drawn, else the smallest context), and what the crosses mean."""
    from kvlab.perfmodel.figures import flag_kinds

    ctxs = head["context_tokens"].unique().sort().to_list()
    c = context if context in ctxs else (204800 if 204800 in ctxs else ctxs[0])
    lo, hi = head["mem_util"].min(), head["mem_util"].max()
    parts = []
    for (d,), g in head.filter(pl.col("context_tokens") == c).group_by(["dcp"], maintain_order=True):
        a = g.filter(pl.col("mem_util") == lo)["max_concurrent_seqs"][0]
        b = g.filter(pl.col("mem_util") == hi)["max_concurrent_seqs"][0]
        parts.append(f"{b} against {a} with DCP {d}" + (f" ({b / a:.2f}×)" if a else ""))
    r = head.row(0, named=True)
    parts[0] = parts[0].replace(" against ", f" sequences against {lo:g}'s ", 1)
    text = (f"Modelled for {setup_phrase(r['model'], r['gpu'], r['tp'])} at {tokens_label(c)}: {hi:g} fits "
            + ", and ".join(parts))
    kinds = flag_kinds(head)
    if kinds:
        text += "; crosses mark what the memory check flags (" + "; ".join(k.replace("\n", " ") for k in kinds) + ")"
    return text + "."


def oom_flag_note(head: pl.DataFrame, a=None) -> str:
    """What the model's ``fits`` column means at a memory target: KV room plus an assumed need outside the pool.
    A flag from that assumption restates the article's memory claim; it is not a predicted out-of-memory."""
    from kvlab.perfmodel import Assumptions

    a = a or Assumptions()
    r = head.row(0, named=True)
    need = r["outside_need_gib_per_gpu"]
    flagged = head.filter(pl.col("outside_pool_gib_per_gpu") < pl.col("outside_need_gib_per_gpu"))
    text = (f"The model's memory check counts KV room and assumes the process needs **{a.outside_pool_fraction:.1%}** of "
            f"each GPU's memory outside the target ({need:.1f} GiB per {r['gpu']}): the middle of the window the B300 "
            "article implies (0.95 failed there, 0.92 worked). ")
    if flagged.is_empty():
        return text + "No memory target shown leaves less than that, so none is flagged for it."
    utils = ", ".join(f"{u:g}" for u in flagged["mem_util"].unique().sort())
    left = flagged["outside_pool_gib_per_gpu"][0]
    return text + (f"At {utils} only {left:.1f} GiB is left outside the target, so the model flags it "
                   "(`fits` = no): that restates the article's claim, it does not predict an out-of-memory by "
                   "itself. Whether a setting runs out of memory is for measured runs to say (report 03).")


def bound_sentence(frac: pl.DataFrame) -> str:
    """How close published and measured runs came to the model's bound (peak compute and bandwidth, no latency)."""
    lines = []
    pub = frac.filter(pl.col("source") == "published")
    if pub.height:
        f, b = pub["batch_fraction_of_bound"], pub["bandwidth_fraction_of_peak"].drop_nulls()
        lines.append(f"- published ({', '.join(pub['hardware'].unique(maintain_order=True))}): the article's runs took "
                     f"{1 / f.max():.0f}–{1 / f.min():.0f}× the model's bound, i.e. reached {f.min():.1%}–{f.max():.1%} "
                     "of it" + (f"; decode read memory at {b.min():.1%}–{b.max():.1%} of peak bandwidth" if b.len() else "")
                     + ".")
    m = frac.filter(pl.col("source") == "measured")
    if m.height:
        f = m["batch_fraction_of_bound"]
        lines.append(f"- measured ({', '.join(m['hardware'].unique(maintain_order=True))}, {m.height} runs): "
                     f"{f.min():.1%}–{f.max():.1%} of a bound computed from the catalog's nominal CPU figures — compare "
                     "these runs with each other, not with a GPU.")
    return "\n".join(lines) or "*No run with a batch time to set against the bound.*"


def model_verdicts(fit, sens: pl.DataFrame, head: pl.DataFrame, claims: pl.DataFrame, workload=None,
                   assumptions=None) -> list:
    """Report 04's verdicts: the article's winners and crossover as the fitted model sees them, held-out
    prediction, the assumption's effect, the fit's plausibility, and the 0.95 memory claim (untestable by the model).

    Every verdict is about the article's own configuration (Kimi-K3 on 8× the fit's GPU, DCP 8), whatever GPU or
    model the report shows; ``head`` gives only the memory targets compared."""
    from kvlab.perfmodel import Assumptions, Workload
    from kvlab.perfmodel.calibrate import crossover_from_fit
    from kvlab.perfmodel.figures import headroom_table
    from kvlab.verdicts import Verdict

    workload, assumptions = workload or Workload(), assumptions or Assumptions()
    crossover = crossover_from_fit(fit, gpu=fit.hardware, workload=workload, assumptions=assumptions)
    head = headroom_table(fit.hardware, "Kimi-K3", sorted(head["mem_util"].unique().to_list()), [1], [204800],
                          assumptions)
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
        modelled.append(f"{engine_label(winner)} {ratio:.2f}× faster at {c['context_from']}")
    lo, hi = res["context_tokens"].min(), res["context_tokens"].max()
    inside = crossover is not None and lo < crossover < hi
    held = None
    if modelled:
        from kvlab.claims import grade_model_claim

        stated = "; ".join(c["statement"] for c in speed.iter_rows(named=True))
        rng = sens["crossover_tokens"].drop_nulls()
        within = f" (range {k_label(rng.min())}–{k_label(rng.max())})" if rng.len() else ""
        grade, held = grade_model_claim(fit, agree and inside, sorted(res["context_tokens"].unique().to_list()),
                                        value=crossover, unit="tokens")
        if rng.len() and grade.outcome != "inconclusive":
            grade = replace(grade, spread=(float(rng.min()), float(rng.max())))
        out.append(grade.verdict(
            f"{stated}: so the winner changes between {tokens_label(lo)} and {tokens_label(hi)} — as kvlab's model "
            "fitted to the same four points sees it (not an independent check)",
            (f"crossover {approx_tokens(crossover)}{within}" if crossover else "no crossover")
            + f"; {', '.join(modelled)}", claim_id="crossover_modelled", kind="crossover"))
    if fit.loo.height:
        from kvlab.claims import held_out_error, held_out_grade, model_margin
        from kvlab.claims.speed import held_out_verdict

        right, total = winners_held_out(fit)
        if held is None:
            held = held_out_grade(right, total, model_margin(fit, sorted(res["context_tokens"].unique().to_list()))
                                  or 0.0, held_out_error(fit))
        worst = fit.loo.sort(pl.col("loo_error_pct").abs(), descending=True).row(0, named=True)
        v = held_out_verdict(held, fit)
        out.append(replace(v, number=v.number + f" (worst {abs(worst['loo_error_pct']):.1f}%, "
                                                f"{engine_label(worst['engine'])} at {tokens_label(worst['context_tokens'])})"))
    xo = sens["crossover_tokens"].drop_nulls()
    if xo.len():
        out.append(Verdict("Where is the crossover over what the article leaves open (batch size, output length, "
                           "expert reads, cached MLA width), each refitted to the same four points?", "found",
                           "modelled", f"{k_label(xo.min())}–{k_label(xo.max())} tokens over {sens.height} "
                           "assumption sets", claim_id="crossover_range", kind="crossover",
                           value=float(xo.median()), unit="tokens", spread=(float(xo.min()), float(xo.max())),
                           scope="model fitted to the published table, refitted per assumption set",
                           reason=f"{xo.len()} of {sens.height} assumption sets cross; the range is the answer"))
    bad = _implausible(fit)
    out.append(Verdict(f"The fitted parameters are physically plausible for the article's {fit.hardware} host",
                       "contradicted" if bad else "reproduced", "modelled",
                       "no: " + "; ".join(_implausible(fit, short=True)) if bad else "yes, every one in range",
                       claim_id="model_plausible", kind="model_plausibility", scope="model fitted to the published table",
                       reason=("a fitted parameter lies outside its physical range, so the fit describes the table "
                               "rather than its physics") if bad else "every fitted parameter is in its physical range"))
    flagged = head.filter(pl.col("outside_pool_gib_per_gpu") < pl.col("outside_need_gib_per_gpu"))
    if head["mem_util"].n_unique() > 1 and flagged.height:
        hi_u, lo_u = flagged["mem_util"].max(), head["mem_util"].min()
        r = flagged.row(0, named=True)
        out.append(Verdict(f"{hi_u:g} runs out of memory where {lo_u:g} does not (the article's memory study) — can the "
                           "model tell?", "cannot be tested here", "modelled",
                           f"{hi_u:g} leaves {r['outside_pool_gib_per_gpu']:.1f} GiB/GPU outside the target, under an "
                           f"assumed {r['outside_need_gib_per_gpu']:.1f} GiB taken from this very claim",
                           claim_id="memory_095", kind="memory_setting", value=r["outside_pool_gib_per_gpu"],
                           unit="GiB/GPU", scope="model fitted to the published table",
                           reason="the model's memory check rests on a need outside the pool chosen from this claim"))
    return out
