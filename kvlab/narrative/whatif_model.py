"""Report 04 (what-if model): the calibrated model's fit, sensitivity, curves and headroom in words, and its verdicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.claims import model as claims_model
from kvlab.claims.memory import short_outside_pool
from kvlab.claims.modelled import model_verdicts
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.narrative.common import config_name, setup_phrase
from kvlab.perfmodel import Assumptions, Config, Workload, batch_time
from kvlab.perfmodel.calibrate import PRIORS, implausible
from kvlab.perfmodel.catalog import gpu as find_gpu
from kvlab.perfmodel.catalog import model as find_model
from kvlab.perfmodel.ranges import per_step_costs
from kvlab.units import approx_label, approx_tokens, k_label, sig2, token_range, tokens_label

if TYPE_CHECKING:
    from polars import DataFrame

__all__ = ["model_verdicts"]


def model_conclusions(fit, sens: DataFrame, crossover: float | None, at_max: DataFrame, head: DataFrame,
                      workload, *, gpu: str, tp: int, dcp: int, published_contexts: list[int],
                      ratio_range: tuple[float, float] | None = None, consistent: dict | None = None,
                      held_out=None) -> str:
    """The what-if report's conclusions, as markdown bullets, from its fit, sensitivity, curves and headroom.

    ``consistent``: what the fits consistent with the published totals share
    (:func:`kvlab.perfmodel.report.consistent_summary`), one bullet. ``held_out``: the leave-one-out test per
    assumption set (:func:`kvlab.perfmodel.ranges.held_out_by_set`), one bullet.

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
    seqs = {r["mem_util"]: r["max_concurrent_seqs"] for r in head.iter_rows(named=True)
            if r["dcp"] == 1 and r["context_tokens"] == mem_ctx}
    u_lo, u_hi = min(head["mem_util"]), max(head["mem_util"])
    xo = sens["crossover_tokens"].drop_nulls()
    bad = implausible(fit)
    right, total = winners_held_out(fit)
    flagged = sorted({r["mem_util"] for r in head.iter_rows(named=True) if short_outside_pool(r)})
    lines = [
        step_cost_bullet(sens, fit),
        f"- **Fit:** the {fit.residuals.height} published times are reproduced within {fit.max_abs_residual_pct:.1f}%; "
        f"held out in turn, each is predicted within {fit.loo_max_abs_pct:.1f}% (mean {fit.loo_mean_abs_pct:.1f}%), "
        f"with the right winner at its context in {right} of {total}: {confidence(fit)}.",
        held_out_bullet(held_out, fit, tp) if held_out is not None else "",
        ("- **Plausibility:** " + "; ".join(bad) + ": a description of the published figures, not proof of their "
         "physics.") if bad else "- **Plausibility:** every fitted parameter is in its physical range.",
        f"- **Crossover** (vLLM TP{tp} vs SGLang TP{tp}+DCP{dcp}, {who}): {xo_txt}"
        + (f"; **{token_range(xo.min(), xo.max())}** over the {sens.height} assumption sets the data "
           "cannot choose among (the range, not the point, is the model's answer)." if xo.len() else "."),
        consistent_bullet(consistent) if consistent else "",
        at_max_sentence(at_max, hi, ratio_range),
        f"- **Memory** (vLLM without DCP, {who}, {tokens_label(mem_ctx)}): {seqs.get(u_lo)} sequences fit at {u_lo:g}, "
        f"{seqs.get(u_hi)} at {u_hi:g}" + (f"; the model flags {', '.join(f'{u:g}' for u in flagged)} "
                                           "only through its assumed need outside the pool, so it does not predict "
                                           "an out-of-memory there (see the KV headroom section)." if flagged else "."),
    ]
    return "\n".join(line for line in lines if line)


def step_cost_bullet(sens: DataFrame, fit=None) -> str:
    """The report's first conclusion: per engine, the per-step overhead the bounded fits give (inside its cited prior)
    and the **unexplained per-step cost** — what the article's table needs beyond every bounded term — each with its
    range over the assumption sets (:func:`kvlab.perfmodel.ranges.per_step_costs`); the free fit beside it, labelled.
    Empty without the bounded fits' columns."""
    if "phys_sglang_unexplained_ms" not in sens.columns:
        return ""
    costs = per_step_costs(sens)

    def ms(span) -> str:
        at = f" (default set {span.default:.1f})" if span.default is not None else ""
        return f"{span.lo:.1f}–{span.hi:.1f} ms{at}"

    parts = [f"{engine_label(e)} needs **{ms(c.unexplained_ms)}** per decode step that nothing in the model explains "
             f"(beyond its fitted per-step overhead of {ms(c.fitted_overhead_ms)})" for e, c in costs.items()]
    free = ""
    if fit is not None and fit.kind == "free":
        free = (f" The free fit, which instead puts {fit.params.dcp_layer_latency_s * 1e6:,.0f} µs into each DCP "
                "collective" + (" (outside its 1–100 µs prior: a non-physical fit, shown as such)" if not fit.physical
                                else "") + ", stays beside it.")
    cap = PRIORS["sglang_step_overhead_s"][1] * 1e3
    return (f"- **Unexplained per-step cost** (over the {sens.height} assumption sets, every named term held to its "
            f"prior: per-step overhead ≤ {cap:g} ms, DCP ≤ 100 µs per collective, decode bandwidth ≥ 30% of peak): to "
            "match the article's table, " + "; ".join(parts) + "." + free)


def held_out_bullet(h, fit, tp: int = 8) -> str:
    """The held-out test with what it depends on: per assumption set, how many get every held-out winner right and at
    which batch sizes, and what that says about the article's table (a finding about it, with its caveats)."""
    text = f"- **Held out, per assumption set:** {h.text()}."
    if h.all_right and h.batch_sizes:
        b = max(h.batch_sizes)
        pr = batch_time(Config.of(fit.hardware, "Kimi-K3", VLLM, tp, 1, Assumptions().default_mem_util), 204800,
                        Workload(b, Workload().output_tokens), fit.params)
        text += (f" A finding about the article's table, not its stated setup: its totals are predicted from each other "
                 f"only where the batch is {b}, where vLLM runs 200K in {pr.waves} waves of up to {pr.concurrent_seqs} "
                 "sequences in this model; four interpolated totals cannot show that the article ran that batch.")
    return text


def consistent_bullet(c: dict) -> str:
    """One conclusion bullet from :func:`kvlab.perfmodel.report.consistent_summary`."""
    if not c["kept"]:
        return f"- **Consistent with the totals:** none of {c['candidates']:,} candidate fits is within the rule."
    wins = "; ".join(f"{w} faster at {tokens_label(ctx)} in {n} of {c['kept']}" for ctx, counts in c["winners"]
                     for w, n in counts)
    xo = (token_range(*c["crossover"]) if c["crossover"] else "no crossover up to 1M tokens")
    return (f"- **Consistent with the totals** (largest residual within {c['tolerance_pct']:g} points of the best): "
            f"{c['kept']:,} of {c['candidates']:,} candidate fits, at batch {c['batches']}; {wins}; crossover "
            f"**{xo}** — narrower than the one-fit-per-set range above, because most of those fits miss the totals "
            "by more.")


def whatif_setup(fit, workload, *, gpu: str, model: str, tp: int, dcp: int, published: DataFrame) -> str:
    """What the report models and what it rests on, with every value named (no parameter names)."""
    pub = [r for r in published.iter_rows(named=True) if r.get("source", "published") == "published"]
    ref_model = pub[0]["model"] if pub else "?"
    ref_gpus = pub[0]["gpu_count"] if pub and "gpu_count" in pub[0] else tp
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
    bad = implausible(fit)
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
    worst = max(fit.loo.iter_rows(named=True), key=lambda r: abs(r["loo_error_pct"]))
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
    return claims_model.winners_held_out(fit)


def sensitivity_sentence(sens: DataFrame) -> str:
    """How what the article does not state (batch size, output length, expert reads, cached MLA width) moves the
    fitted parameters and the crossover: one refit per combination (:func:`~kvlab.perfmodel.calibrate.sensitivity`)."""
    axes = [("batch", "batch_size", "{:,}"), ("output tokens", "output_tokens", "{:,}"),
            ("expert reads", "expert_reads", "{}"), ("MLA width", "mla_width", "{}"), ("KV format", "kv_format", "{}")]
    varied = [f"{name} {{{', '.join(fmt.format(v) for v in sens[col].unique(maintain_order=True))}}}"
              for name, col, fmt in axes if col in sens.columns and sens[col].n_unique() > 1]
    xo = sens["crossover_tokens"].drop_nulls()
    cross = (f"the crossover moves over **{token_range(xo.min(), xo.max())}**" if xo.len() == sens.height else
             f"the crossover is found under {xo.len()} of {sens.height} of them"
             + (f", over {token_range(xo.min(), xo.max())}" if xo.len() else ""))
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


def throughput_caption(model_df: DataFrame, workload) -> str:
    """One sentence for the modelled throughput curves: how far each configuration's output rate falls."""

    lo, hi = model_df["context_tokens"].min(), model_df["context_tokens"].max()
    parts = []
    at: dict[str, dict[int, float]] = {}
    for r in model_df.iter_rows(named=True):  # each configuration's first row at each context
        at.setdefault(r["config"], {}).setdefault(r["context_tokens"], r["output_tokens_per_s"])
    for cfg, by_ctx in at.items():
        a, b = by_ctx[lo], by_ctx[hi]
        parts.append(f"{config_name(cfg)} falls {a / b:.1f}× ({a:.3g} → {b:.3g} tokens/s)")
    return (f"Output tokens/s is the batch's {workload.batch_size} × {workload.output_tokens:,} assumed output tokens "
            f"over its batch time, so the curves cross where the batch times do; from {tokens_label(lo)} to "
            f"{tokens_label(hi)} " + " and ".join(parts) + ".")


def band_sentence(model_df: DataFrame, y: str = "batch_time_s", unit: str = "s", context: int | None = None,
                  tokens_per_batch: tuple[int, int] | None = None) -> str:
    """What a figure's bands are and how wide, read at ``context`` (default: 200K when drawn, else the largest
    context): each configuration's value under the default assumptions with its lowest-highest over the assumption
    sets. ``tokens_per_batch`` (a throughput figure): the sets' lowest and highest batch x output tokens, which
    scale a throughput by themselves."""
    if f"{y}_lo" not in model_df.columns:
        return ""
    ctxs = sorted(set(model_df["context_tokens"].to_list()))
    c = context if context in ctxs else (204800 if 204800 in ctxs else ctxs[-1])
    n = max(model_df["assumption_sets"]) if "assumption_sets" in model_df.columns else None
    few = min(model_df["assumption_sets"]) if "assumption_sets" in model_df.columns else n
    first_full = min((r["context_tokens"] for r in model_df.iter_rows(named=True) if r.get("assumption_sets") == n),
                     default=None)
    parts = []
    for r in model_df.iter_rows(named=True):
        if r["context_tokens"] == c:
            parts.append(f"{config_name(r['config'])} {r[y]:,.3g} {unit} ({r[y + '_lo']:,.3g}–{r[y + '_hi']:,.3g})")
    if "uncalibrated" in model_df.columns and model_df["uncalibrated"].any():
        text = (f"Bands: uncalibrated (no published point of this model was fitted, and a fit to another model's is "
                f"never applied): the lowest to highest over the priors' centre, fast end and slow end under each "
                f"assumption set ({n or ''} in all), the line inside being the priors' centre; at {tokens_label(c)} "
                + ", ".join(parts) + ".")
    else:
        text = (f"Bands: the lowest to highest over the {n or ''} assumption sets the published points cannot choose "
                f"among (each refitted to them), the line inside being the default set's; at {tokens_label(c)} "
                + ", ".join(parts) + ".").replace("the  assumption", "the assumption")
    if few != n and first_full:
        text += (f" Below {tokens_label(first_full)} only {few} of the sets count: the others' output is as long as "
                 "the context, leaving no prompt.")
    if tokens_per_batch:
        lo, hi = tokens_per_batch
        text += (f" Most of a throughput band's width is the unstated batch: the sets' batches hold {lo:,}–{hi:,} "
                 f"output tokens ({hi / lo:.0f}×), and tokens/s scales with them; the published circles' bars are the "
                 "article's own times under the same sets. Which engine is faster is read in the batch-time figure.")
    return text


def at_max_sentence(at_max: DataFrame, calibrated_to: int | None,
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
            return f"{engine_label(SGLANG)} {r:.2f}× faster" if r >= 1 else f"{engine_label(VLLM)} {1 / r:.2f}× faster"
        spread = (f"; over the assumption sets the four points cannot choose among it ranges from {side(lo)} to "
                  f"{side(hi)}" + (" — the winner itself is not pinned" if lo < 1 < hi else ""))
    return (f"- At {tokens_label(c)} ({c:,} tokens) the model gives {config_name(fast['config'])} "
            f"**{slow['batch_time_s'] / fast['batch_time_s']:.2f}×** the speed of {config_name(slow['config'])} "
            f"({fast['batch_time_s']:,.0f} s vs {slow['batch_time_s']:,.0f} s per batch, {slow['waves']} wave"
            f"{'s' if slow['waves'] != 1 else ''} for the slower){spread}{extra}."
            + (f" {'; '.join(flags)}." if flags else ""))


def crossover_caption(xo: DataFrame) -> str:
    """One sentence for the crossover-by-GPU figure: the trend with DCP, hypothetical GPUs, and GPUs without a crossing."""
    if xo.is_empty():
        return "No GPU and DCP size was modelled."
    parts = []
    found: dict[str, list[dict]] = {}
    none: dict[str, list[int]] = {}
    for r in xo.iter_rows(named=True):
        if r["crossover_tokens"] is not None:
            found.setdefault(r["gpu"], []).append(r)
        else:
            none.setdefault(r["gpu"], []).append(r["dcp"])
    for g, d in found.items():
        d = sorted(d, key=lambda r: r["dcp"])
        a, b = d[0], d[-1]
        tag = "" if all(r["weights_fit"] for r in d) else " (hypothetical: the weights do not fit)"
        if len(d) == 1:
            parts.append(f"on {g} {approx_tokens(a['crossover_tokens'])} at DCP {a['dcp']}{tag}")
        else:
            verb = "falls" if b["crossover_tokens"] < a["crossover_tokens"] else "rises"
            parts.append(f"on {g} it {verb} from {approx_label(a['crossover_tokens'])} at DCP {a['dcp']} to "
                         f"{approx_label(b['crossover_tokens'])} at DCP {b['dcp']}{tag}")
        if b.get("crossover_low_tokens") is not None:  # the ranges over the assumption sets (table below)
            parts[-1] += (f" ({approx_label(b['crossover_low_tokens'])}–{approx_label(b['crossover_high_tokens'])} at "
                          f"DCP {b['dcp']} over the assumption sets, crossing in {b['crosses_in']})")
    missing = ", ".join(f"{g} at DCP {', '.join(str(x) for x in d)}" for g, d in none.items())
    model, tp = xo["model"][0], xo["tp"][0]
    text = (f"Modelled context from which SGLang TP{tp}+DCP beats vLLM TP{tp} for {model}: " + "; ".join(parts)
            if parts else f"No crossover for {model} on any GPU modelled")
    return text + (f"; no crossover in the modelled range for {missing}" if missing else "") + "."


def whatif_headroom_caption(head: DataFrame, context: int | None = None) -> str:
    """One sentence for the KV-headroom figure: sequences at the highest vs the lowest memory target, per DCP size,
    at ``context`` (default: 200K when drawn, else the smallest context), and what the crosses mean."""
    # matplotlib: perfmodel.figures draws, and importing kvlab.narrative must not load it
    from kvlab.perfmodel.figures import flag_kinds

    ctxs = head["context_tokens"].unique().sort().to_list()
    c = context if context in ctxs else (204800 if 204800 in ctxs else ctxs[0])
    lo, hi = head["mem_util"].min(), head["mem_util"].max()
    parts = []
    by_dcp: dict[int, dict[float, int]] = {}
    for r in head.iter_rows(named=True):  # each DCP size's first row at each memory target, at context c
        if r["context_tokens"] == c:
            by_dcp.setdefault(r["dcp"], {}).setdefault(r["mem_util"], r["max_concurrent_seqs"])
    for d, seqs in by_dcp.items():
        a, b = seqs[lo], seqs[hi]
        parts.append(f"{b} against {a} with DCP {d}" + (f" ({b / a:.2f}×)" if a else ""))
    r = head.row(0, named=True)
    parts[0] = parts[0].replace(" against ", f" sequences against {lo:g}'s ", 1)
    text = (f"Modelled for {setup_phrase(r['model'], r['gpu'], r['tp'])} at {tokens_label(c)}: {hi:g} fits "
            + ", and ".join(parts))
    if "max_concurrent_seqs_lo" in head.columns:
        rng = {(r["dcp"], r["mem_util"]): (r["max_concurrent_seqs_lo"], r["max_concurrent_seqs_hi"])
               for r in head.iter_rows(named=True) if r["context_tokens"] == c}
        text += ("; over " + head["assumption_sets"][0] + " (shaded) " + ", ".join(
            f"{a}–{b} fit at {hi:g} with DCP {d}" for (d, u), (a, b) in rng.items() if u == hi))
    kinds = flag_kinds(head)
    if kinds:
        text += "; crosses mark what the memory check flags (" + "; ".join(k.replace("\n", " ") for k in kinds) + ")"
    return text + "."


def oom_flag_note(head: DataFrame, a=None) -> str:
    """What the model's ``fits`` column means at a memory target: KV room plus an assumed need outside the pool.
    A flag from that assumption restates the article's memory claim; it is not a predicted out-of-memory."""
    a = a or Assumptions()
    r = head.row(0, named=True)
    need = r["outside_need_gib_per_gpu"]
    flagged = [r for r in head.iter_rows(named=True) if short_outside_pool(r)]
    text = (f"The model's memory check counts KV room and assumes the process needs **{a.outside_pool_fraction:.1%}** of "
            f"each GPU's memory outside the target ({need:.1f} GiB per {r['gpu']}): the middle of the window the B300 "
            "article implies (0.95 failed there, 0.92 worked). ")
    if not flagged:
        return text + "No memory target shown leaves less than that, so none is flagged for it."
    utils = ", ".join(f"{u:g}" for u in sorted({r["mem_util"] for r in flagged}))
    left = flagged[0]["outside_pool_gib_per_gpu"]
    return text + (f"At {utils} only {left:.1f} GiB is left outside the target, so the model flags it "
                   "(`fits` = no): that restates the article's claim, it does not predict an out-of-memory by "
                   "itself. Whether a setting runs out of memory is for measured runs to say (report 03).")


def bound_sentence(frac: DataFrame) -> str:
    """How close published and measured runs came to the model's bound (peak compute and bandwidth, no latency)."""
    lines = []
    rows = frac.to_dicts()

    def of(source: str, col: str) -> list:
        return [r[col] for r in rows if r["source"] == source and r.get(col) is not None]

    def hardware(source: str) -> str:
        return ", ".join(dict.fromkeys(r["hardware"] for r in rows if r["source"] == source))

    if any(r["source"] == "published" for r in rows):
        f, b = of("published", "batch_fraction_of_bound"), of("published", "bandwidth_fraction_of_peak")
        lines.append(f"- published ({hardware('published')}): the article's runs took "
                     f"{1 / max(f):.0f}–{1 / min(f):.0f}× the model's bound, i.e. reached {min(f):.1%}–{max(f):.1%} "
                     "of it" + (f"; decode read memory at {min(b):.1%}–{max(b):.1%} of peak bandwidth" if b else "")
                     + ".")
    m = [r for r in rows if r["source"] == "measured"]
    if m:
        f = of("measured", "batch_fraction_of_bound")
        # each share rests on one run: two significant figures (units.sig2), as every n=1 number
        lines.append(f"- measured ({hardware('measured')}, {len(m)} runs): "
                     f"{sig2(100 * min(f))}%–{sig2(100 * max(f))}% of a bound computed from the catalog's nominal CPU "
                     "figures — compare "
                     "these runs with each other, not with a GPU.")
    return "\n".join(lines) or "*No run with a batch time to set against the bound.*"


def model_answer(fit, x_range: tuple[float, float] | None, sets: int, model: str, gpu: str,
                 tp: int, held_out=None) -> tuple[str, ...]:
    """Report 04's answer: whether the model can decide anything (its held-out test at the default assumptions, and
    over the assumption sets: ``held_out``, :class:`kvlab.perfmodel.ranges.HeldOutBySet`), and the range of its
    crossover over the assumption sets the article leaves open."""
    right, total = winners_held_out(fit)
    passes = total and right == total and fit.loo_mean_abs_pct <= 25
    first = (f"kvlab's physical model of {setup_phrase(model, gpu, tp)} "
             + ("passes its held-out test" if passes else "illustrates, it does not decide")
             + (f": held out, each published point is missed by {fit.loo_mean_abs_pct:.0f}% on average and the "
                f"faster engine is named right at {right} of {total} (default assumptions)" if total else
                ": nothing could be held out")
             + (f"; all {total} right in {held_out.all_right} of {held_out.sets} assumption sets, all at batch "
                f"{' or '.join(str(b) for b in held_out.batch_sizes)}, a batch the article does not state."
                if held_out is not None and held_out.all_right else "."))
    second = (f"Over the {sets} assumption sets the article leaves open (batch size, output length, expert reads, "
              f"cached MLA width, KV number format) its crossover lies anywhere from {k_label(x_range[0])} to "
              f"{k_label(x_range[1])} tokens, so it cannot say where the winner changes." if x_range else
              f"Under none of the {sets} assumption sets does the winner change.")
    return (first, second)


def catalogued(runs: DataFrame, sources: tuple[str, ...] = ("published", "measured")) -> tuple[DataFrame, str]:
    """The rows of ``runs`` whose model and hardware the catalog has (``data/catalog``: what the model's bound needs),
    and a sentence naming the experiments whose model or hardware it lacks (empty where none does): the report shows
    their measured parts and says their modelled part is skipped, instead of failing on the catalog's KeyError."""
    known: dict[tuple[str, str], str | None] = {}  # (what, name) -> None where catalogued, else what is missing
    keep, missing = [], {}
    for r in runs.select("source", "experiment", "model", "hardware").iter_rows(named=True):
        why = None
        if r["source"] in sources:
            for what, name, find in (("model", r["model"], find_model), ("hardware", r["hardware"], find_gpu)):
                if name is None:
                    continue
                if (what, name) not in known:
                    try:
                        find(name)
                        known[what, name] = None
                    except KeyError:
                        known[what, name] = f"{what} `{name}`"
                why = why or known[what, name]
        keep.append(why is None)
        if why is not None:
            missing.setdefault(why, set()).add(r["experiment"])
    if not missing:
        return runs, ""
    parts = "; ".join(f"{why} (experiment{'s' if len(exps) > 1 else ''} {', '.join(f'`{e}`' for e in sorted(exps))})"
                      for why, exps in sorted(missing.items()))
    return runs.filter(keep), (f"*Not in the model's catalog (data/catalog): {parts}. Their modelled bound is "
                               "skipped; what was measured is still shown.*")
