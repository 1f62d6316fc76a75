"""Report 04 (what-if model): the calibrated model's fit, sensitivity, curves and headroom in words, and its verdicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.claims import held_out as claims_model
from kvlab.claims.memory import short_outside_pool
from kvlab.claims.modelled import model_verdicts
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab import tables
from kvlab.narrative.common import config_name, setup_phrase
from kvlab.perfmodel import Assumptions, Config, Workload, batch_time
from kvlab.perfmodel.calibrate import PRIORS, implausible
from kvlab.perfmodel.ranges import per_step_costs
from kvlab.units import approx_label, approx_tokens, k_label, sig2, token_range, tokens_label

if TYPE_CHECKING:
    from polars import DataFrame

__all__ = ["model_verdicts"]


def model_conclusions(
    fit,
    sens: DataFrame,
    crossover: float | None,
    at_max: list[dict],
    head: list[dict],
    workload,
    *,
    gpu: str,
    tp: int,
    dcp: int,
    published_contexts: list[int],
    ratio_range: tuple[float, float] | None = None,
    consistent: dict | None = None,
    held_out=None,
) -> str:
    """The what-if report's conclusions, as markdown bullets, from its fit, sensitivity, curves and headroom.

    ``consistent``: what the fits consistent with the published totals share
    (:func:`kvlab.perfmodel.report.consistent_summary`), one bullet. ``held_out``: the leave-one-out test per
    assumption set (:func:`kvlab.perfmodel.ranges.held_out_by_set`), one bullet.

    ``at_max``: the modelled curves' row dicts at the largest context drawn (one per engine); ``head``: the KV
    headroom table's row dicts; the memory bullet reads it without DCP at the largest published context (the smallest
    headroom context when that one is not in the table), and says what its flag means.
    """

    lo, hi = min(published_contexts), max(published_contexts)
    model = at_max[0]["model"] if at_max and "model" in at_max[0] else head[0]["model"]
    who = setup_phrase(model, gpu, tp)
    xo_txt = (
        (
            f"{approx_tokens(crossover)}, "
            + ("between" if lo < crossover < hi else "outside")
            + f" the published {tokens_label(lo)} and {tokens_label(hi)} points"
        )
        if crossover
        else "no crossover up to the largest context drawn"
    )
    head_contexts = {r["context_tokens"] for r in head}
    mem_ctx = hi if hi in head_contexts else min(head_contexts)
    seqs = {r["mem_util"]: r["max_concurrent_seqs"] for r in head if r["dcp"] == 1 and r["context_tokens"] == mem_ctx}
    u_lo, u_hi = min(r["mem_util"] for r in head), max(r["mem_util"] for r in head)
    xo = sens["crossover_tokens"].drop_nulls()
    bad = implausible(fit)
    right, total = winners_held_out(fit)
    flagged = sorted({r["mem_util"] for r in head if short_outside_pool(r)})
    lines = [
        step_cost_bullet(sens, fit),
        f"- **Fit:** the {fit.residuals.height} published times are reproduced within {fit.max_abs_residual_pct:.1f}%; "
        f"held out in turn, each is predicted within {fit.loo_max_abs_pct:.1f}% (mean {fit.loo_mean_abs_pct:.1f}%), "
        f"with the right winner at its context in {right} of {total}: {confidence(fit)}.",
        held_out_bullet(held_out, fit, tp) if held_out is not None else "",
        (
            "- **Plausibility:** " + "; ".join(bad) + ": a description of the published figures, not proof of their "
            "physics."
        )
        if bad
        else "- **Plausibility:** every fitted parameter is in its physical range.",
        f"- **Crossover** (vLLM TP{tp} vs SGLang TP{tp}+DCP{dcp}, {who}): {xo_txt}"
        + (
            f"; **{token_range(xo.min(), xo.max())}** over the {sens.height} assumption sets the data "
            "cannot choose among (the range, not the point, is the model's answer)."
            if xo.len()
            else "."
        ),
        consistent_bullet(consistent) if consistent else "",
        at_max_sentence(at_max, hi, ratio_range),
        f"- **Memory** (vLLM without DCP, {who}, {tokens_label(mem_ctx)}): {seqs.get(u_lo)} sequences fit at {u_lo:g}, "
        f"{seqs.get(u_hi)} at {u_hi:g}"
        + (
            f"; the model flags {', '.join(f'{u:g}' for u in flagged)} "
            "only through its assumed need outside the pool, so it does not predict "
            "an out-of-memory there (see the KV headroom section)."
            if flagged
            else "."
        ),
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
        if f"{span.lo:.1f}" == f"{span.hi:.1f}":  # the same in every set: one value, not '5.0–5.0 ms (default set 5.0)'
            return f"{span.lo:.1f} ms in every set"
        at = f", default set {span.default:.1f}" if span.default is not None else ""
        return f"{span.lo:.1f}–{span.hi:.1f} ms{at}"

    parts = [
        f"{engine_label(e)} needs **{ms(c.unexplained_ms)}** per decode step that nothing in the model explains "
        f"(beyond its fitted per-step overhead of {ms(c.fitted_overhead_ms)})"
        for e, c in costs.items()
    ]
    free = ""
    if fit is not None and fit.kind == "free":
        free = (
            f" The free fit, which instead puts {fit.params.dcp_layer_latency_s * 1e6:,.0f} µs into each DCP "
            "collective"
            + (" (outside its 1–100 µs prior: a non-physical fit, shown as such)" if not fit.physical else "")
            + ", stays beside it."
        )
    cap = PRIORS["sglang_step_overhead_s"][1] * 1e3
    return (
        f"- **Unexplained per-step cost** (over the {sens.height} assumption sets, every named term held to its "
        f"prior: per-step overhead ≤ {cap:g} ms, DCP ≤ 100 µs per collective, decode bandwidth ≥ 30% of peak): to "
        "match the article's table, " + "; ".join(parts) + "." + free
    )


def held_out_bullet(h, fit, tp: int = 8) -> str:
    """The held-out test with what it depends on: per assumption set, how many get every held-out winner right and at
    which batch sizes, and what that says about the article's table (a finding about it, with its caveats)."""
    text = f"- **Held out, per assumption set:** {h.text()}."
    if h.all_right and h.batch_sizes:
        b = max(h.batch_sizes)
        pr = batch_time(
            Config.of(fit.hardware, "Kimi-K3", VLLM, tp, 1, Assumptions().default_mem_util),
            204800,
            Workload(b, Workload().output_tokens),
            fit.params,
        )
        text += (
            f" A finding about the article's table, not its stated setup: its totals are predicted from each other "
            f"only where the batch is {b}, where vLLM runs 200K in {pr.waves} waves of up to {pr.concurrent_seqs} "
            "sequences in this model; four interpolated totals cannot show that the article ran that batch."
        )
    return text


def consistent_bullet(c: dict) -> str:
    """One conclusion bullet from :func:`kvlab.perfmodel.report.consistent_summary`."""
    if not c["kept"]:
        return f"- **Consistent with the totals:** none of {c['candidates']:,} candidate fits is within the rule."
    wins = "; ".join(
        f"{w} faster at {tokens_label(ctx)} in {n} of {c['kept']}" for ctx, counts in c["winners"] for w, n in counts
    )
    xo = token_range(*c["crossover"]) if c["crossover"] else "no crossover up to 1M tokens"
    return (
        f"- **Consistent with the totals** (largest residual within {c['tolerance_pct']:g} points of the best): "
        f"{c['kept']:,} of {c['candidates']:,} candidate fits, at batch {c['batches']}; {wins}; crossover "
        f"**{xo}** — narrower than the one-fit-per-set range above, because most of those fits miss the totals "
        "by more."
    )


def whatif_setup(fit, workload, *, gpu: str, model: str, tp: int, dcp: int, published: list[dict]) -> str:
    """What the report models and what it rests on (``published``: the article's row dicts), with every value named
    (no parameter names)."""
    pub = [r for r in published if r.get("source", "published") == "published"]
    ref_model = pub[0]["model"] if pub else "?"
    ref_gpus = pub[0]["gpu_count"] if pub and "gpu_count" in pub[0] else tp
    ref = setup_phrase(ref_model, fit.hardware, ref_gpus)
    shown = setup_phrase(model, gpu, tp)
    text = (
        f"Shown: **{shown}**, vLLM TP{tp} (no DCP) against SGLang TP{tp}+DCP{dcp}. The fit rests on the article's "
        f"{fit.residuals.height} published batch times ({ref}); the article states neither batch size nor output "
        f"length, so the model assumes a batch of **{workload.batch_size} requests × {workload.output_tokens:,} "
        "output tokens**."
    )
    if (model, gpu) != (ref_model, fit.hardware):
        text += (
            f" {shown} is not what the article measured: every curve for it is an extrapolation of the "
            f"efficiencies fitted on {ref}."
        )
    return text


def fit_sentence(fit, workload) -> str:
    """The fitted parameters in words, how closely they reproduce the published points, and their plausibility."""
    p = fit.params
    parts = [
        f"prefill runs at **{p.prefill_efficiency:.1%}** of the GPUs' dense peak",
        f"decode reads memory at **{p.bandwidth_efficiency:.1%}** of peak bandwidth",
    ]
    if "dcp_layer_latency_s" in fit.free:
        parts.append(f"DCP adds **{p.dcp_layer_latency_s * 1e6:,.0f} µs** per full-attention layer per decode step")
    text = (
        f"- Fitted on {fit.hardware} (batch {workload.batch_size} × {workload.output_tokens:,} output tokens assumed): "
        + ", ".join(parts[:-1])
        + f" and {parts[-1]}. The fitted times are within "
        f"**{fit.max_abs_residual_pct:.1f}%** of the {fit.residuals.height} published ones."
    )
    bad = implausible(fit)
    if bad:
        text += (
            "\n- **Plausibility:** " + "; ".join(bad) + f". The fit reproduces the table only with such values: "
            f"under the assumed workload the published times are far slower than the roofline of the article's "
            f"{fit.hardware} host. Read the model as a consistent description of the published figures, not as "
            "proof of their physics."
        )
    else:
        text += "\n- Every fitted parameter is in its physically plausible range."
    return text


def loo_sentence(fit) -> str:
    """Leave-one-out: mean and worst error, and whether each held-out point's context keeps its winner."""
    if fit.loo.is_empty():
        return "- Leave-one-out: one point only, nothing to hold out."
    worst = max(fit.loo.to_dicts(), key=lambda r: abs(r["loo_error_pct"]))
    right, total = winners_held_out(fit)
    return (
        f"- **Leave-one-out**, each published point predicted by a fit to the other {fit.loo.height - 1}: mean error "
        f"**{fit.loo_mean_abs_pct:.1f}%**, worst **{abs(worst['loo_error_pct']):.1f}%** "
        f"({engine_label(worst['engine'])} at {tokens_label(worst['context_tokens'])}: {worst['loo_modelled_s']:.3g} s "
        f"predicted, {worst['observed_s']:.4g} s published); the faster engine at the held-out point's context is "
        f"predicted right in {right} of {total}. With {len(fit.free)} parameters and {fit.loo.height} points this, "
        f"not the residuals, measures what the model predicts: {confidence(fit)}."
    )


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
    return (
        f"four points do not pin it — held out, they are missed by {mean:.0f}% on average and the winner is "
        f"wrong at {total - right} of {total}, so its figures are illustrations under stated assumptions, "
        "not forecasts"
    )


def winners_held_out(fit) -> tuple[int, int]:
    """Held-out fits that still name the published winner at their point's context (:mod:`kvlab.claims.held_out`)."""
    return claims_model.winners_held_out(fit)


def _values(rows: list[dict], col: str) -> list:
    """``col``'s values over ``rows``, nulls left out."""
    return [r[col] for r in rows if r.get(col) is not None]


def sensitivity_sentence(sens: list[dict]) -> str:
    """How what the article does not state (batch size, output length, expert reads, cached MLA width) moves the
    fitted parameters and the crossover: one refit per combination (``sens``: the row dicts of
    :func:`~kvlab.perfmodel.calibrate.sensitivity`)."""
    axes = [
        ("batch", "batch_size", "{:,}"),
        ("output tokens", "output_tokens", "{:,}"),
        ("expert reads", "expert_reads", "{}"),
        ("MLA width", "mla_width", "{}"),
        ("KV format", "kv_format", "{}"),
    ]
    cols = sens[0] if sens else {}
    distinct = {col: list(dict.fromkeys(r[col] for r in sens)) for _, col, _ in axes if col in cols}
    varied = [
        f"{name} {{{', '.join(fmt.format(tables.kv_format_words(v) if col == 'kv_format' else v) for v in distinct[col])}}}"
        for name, col, fmt in axes
        if col in distinct and len(distinct[col]) > 1
    ]
    xo = _values(sens, "crossover_tokens")
    cross = (
        f"the crossover moves over **{token_range(min(xo), max(xo))}**"
        if len(xo) == len(sens)
        else f"the crossover is found under {len(xo)} of {len(sens)} of them"
        + (f", over {token_range(min(xo), max(xo))}" if xo else "")
    )
    physical = int(sum(_values(sens, "physical"))) if "physical" in cols else None
    dcp_us = _values(sens, "dcp_layer_latency_us")
    plaus = (
        ""
        if physical is None
        else f" {physical} of {len(sens)} fits are physically plausible"
        + (
            f" (DCP latency {min(dcp_us):,.0f}–{max(dcp_us):,.0f} µs "
            "per layer and step against NVLink collectives' 1–100 µs)"
            if physical < len(sens)
            else ""
        )
        + "."
    )
    bw, loo = _values(sens, "bandwidth_efficiency"), _values(sens, "loo_mean_abs_pct")
    return (
        f"- **Range:** refitting under every combination of {' × '.join(varied) or 'the assumed workload'} "
        f"({len(sens)} fits, each to the same four points) moves the decode bandwidth efficiency over "
        f"{min(bw):.1%}–{max(bw):.1%}, the leave-one-out "
        f"error over {min(loo):.0f}–{max(loo):.0f}%, and {cross}: "
        f"four published points cannot choose among these assumptions, so the crossover is this range, not a "
        f"point.{plaus}"
    )


def throughput_caption(model_df: list[dict], workload) -> str:
    """One sentence for the modelled throughput curves (their row dicts): how far each configuration's output rate
    falls."""

    lo, hi = min(r["context_tokens"] for r in model_df), max(r["context_tokens"] for r in model_df)
    parts = []
    at: dict[str, dict[int, float]] = {}
    for r in model_df:  # each configuration's first row at each context
        at.setdefault(r["config"], {}).setdefault(r["context_tokens"], r["output_tokens_per_s"])
    for cfg, by_ctx in at.items():
        a, b = by_ctx[lo], by_ctx[hi]
        parts.append(f"{config_name(cfg)} falls {a / b:.1f}× ({a:.3g} → {b:.3g} tokens/s)")
    return (
        f"Output tokens/s is the batch's {workload.batch_size} × {workload.output_tokens:,} assumed output tokens "
        f"over its batch time, so the curves cross where the batch times do; from {tokens_label(lo)} to "
        f"{tokens_label(hi)} " + " and ".join(parts) + "."
    )


def band_sentence(
    model_df: list[dict],
    y: str = "batch_time_s",
    unit: str = "s",
    context: int | None = None,
    tokens_per_batch: tuple[int, int] | None = None,
) -> str:
    """What a figure's bands (``model_df``: the curves' row dicts) are and how wide, read at ``context`` (default: 200K when drawn, else the largest
    context): each configuration's value under the default assumptions with its lowest-highest over the assumption
    sets. ``tokens_per_batch`` (a throughput figure): the sets' lowest and highest batch x output tokens, which
    scale a throughput by themselves."""
    cols = model_df[0] if model_df else {}
    if f"{y}_lo" not in cols:
        return ""
    ctxs = sorted({r["context_tokens"] for r in model_df})
    c = context if context in ctxs else (204800 if 204800 in ctxs else ctxs[-1])
    n = max(r["assumption_sets"] for r in model_df) if "assumption_sets" in cols else None
    few = min(r["assumption_sets"] for r in model_df) if "assumption_sets" in cols else n
    first_full = min((r["context_tokens"] for r in model_df if r.get("assumption_sets") == n), default=None)
    parts = []
    for r in model_df:
        if r["context_tokens"] == c:
            parts.append(
                f"{config_name(r['config'])} {r[y]:,.3g} {unit} ({r[y + '_lo']:,.3g}–{r[y + '_hi']:,.3g} {unit})"
            )
    if any(r.get("uncalibrated") for r in model_df):
        text = (
            f"Bands: uncalibrated (no published point of this model was fitted, and a fit to another model's is "
            f"never applied): the lowest to highest over the priors' centre, fast end and slow end under each "
            f"assumption set ({n or ''} in all), the line inside being the priors' centre; at {tokens_label(c)} "
            + ", ".join(parts)
            + "."
        )
    else:
        text = (
            f"Bands: the lowest to highest over the {n or ''} assumption sets the published points cannot choose "
            f"among (each refitted to them), the line inside being the default set's; at {tokens_label(c)} "
            + ", ".join(parts)
            + "."
        ).replace("the  assumption", "the assumption")
    if few != n and first_full:
        text += (
            f" Below {tokens_label(first_full)} tokens only {few} of the sets count: the others' output is as long as "
            "the context, leaving no prompt."
        )
    if tokens_per_batch:
        lo, hi = tokens_per_batch
        text += (
            f" Most of a throughput band's width is the unstated batch: the sets' batches hold {lo:,}–{hi:,} "
            f"output tokens ({hi / lo:.0f}×), and tokens/s scales with them; the published circles' bars are the "
            "article's own times under the same sets. Which engine is faster is read in the batch-time figure."
        )
    return text


def at_max_sentence(
    at_max: list[dict], calibrated_to: int | None, ratio_range: tuple[float, float] | None = None
) -> str:
    """The largest context drawn (``at_max``: the curves' row dicts there): which configuration is faster, by how
    much (and, with ``ratio_range`` — vLLM's time over SGLang's under every assumption set — the range of that), and
    that it is an extrapolation."""

    d = sorted(at_max, key=lambda r: r["batch_time_s"])
    if len(d) < 2:
        return ""
    c = d[0]["context_tokens"]
    fast, slow = d[0], d[-1]
    flags = [f"{config_name(r['config'])} does not fit in memory" for r in d if not r["fits"]]
    extra = (
        f" — an extrapolation {c / calibrated_to:.1f}× beyond the largest published context "
        f"({tokens_label(calibrated_to)})"
        if calibrated_to and c > calibrated_to
        else ""
    )
    spread = ""
    if ratio_range:
        lo, hi = ratio_range  # vLLM's time / SGLang's: above 1, SGLang faster

        def side(r: float) -> str:
            return f"{engine_label(SGLANG)} {r:.2f}× faster" if r >= 1 else f"{engine_label(VLLM)} {1 / r:.2f}× faster"

        spread = (
            f"; over the assumption sets the four points cannot choose among it ranges from {side(lo)} to "
            f"{side(hi)}" + (" — the winner itself is not pinned" if lo < 1 < hi else "")
        )
    return (
        f"- At {tokens_label(c)} ({c:,} tokens) the model gives {config_name(fast['config'])} "
        f"**{slow['batch_time_s'] / fast['batch_time_s']:.2f}×** the speed of {config_name(slow['config'])} "
        f"({fast['batch_time_s']:,.0f} s vs {slow['batch_time_s']:,.0f} s per batch, {slow['waves']} wave"
        f"{'s' if slow['waves'] != 1 else ''} for the slower){spread}{extra}."
        + (f" {'; '.join(flags)}." if flags else "")
    )


def crossover_caption(xo: list[dict]) -> str:
    """One sentence for the crossover-by-GPU figure (``xo``: the crossover table's row dicts): the trend with DCP,
    hypothetical GPUs, and GPUs without a crossing."""
    if not xo:
        return "No GPU and DCP size was modelled."
    parts = []
    found: dict[str, list[dict]] = {}
    none: dict[str, list[int]] = {}
    for r in xo:
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
            parts.append(
                f"on {g} it {verb} from {approx_label(a['crossover_tokens'])} at DCP {a['dcp']} to "
                f"{approx_label(b['crossover_tokens'])} at DCP {b['dcp']}{tag}"
            )
        if b.get("crossover_low_tokens") is not None:  # the ranges over the assumption sets (table below)
            parts[-1] += (
                f" ({approx_label(b['crossover_low_tokens'])}–{approx_label(b['crossover_high_tokens'])} at "
                f"DCP {b['dcp']} over the assumption sets, crossing in {b['crosses_in']})"
            )
    missing = ", ".join(f"{g} at DCP {', '.join(str(x) for x in d)}" for g, d in none.items())
    model, tp = xo[0]["model"], xo[0]["tp"]
    text = (
        f"Modelled context from which SGLang TP{tp}+DCP beats vLLM TP{tp} for {model}: " + "; ".join(parts)
        if parts
        else f"No crossover for {model} on any GPU modelled"
    )
    return text + (f"; no crossover in the modelled range for {missing}" if missing else "") + "."


def whatif_headroom_caption(head: list[dict], flags: list[str], context: int | None = None) -> str:
    """One sentence for the KV-headroom figure (``head``: the headroom table's row dicts): sequences at the highest
    vs the lowest memory target, per DCP size, at ``context`` (default: 200K when drawn, else the smallest
    context), and what the crosses mean (``flags``: :func:`kvlab.perfmodel.figures.flag_kinds`)."""
    ctxs = sorted({r["context_tokens"] for r in head})
    c = context if context in ctxs else (204800 if 204800 in ctxs else ctxs[0])
    lo, hi = min(r["mem_util"] for r in head), max(r["mem_util"] for r in head)
    parts = []
    by_dcp: dict[int, dict[float, int]] = {}
    for r in head:  # each DCP size's first row at each memory target, at context c
        if r["context_tokens"] == c:
            by_dcp.setdefault(r["dcp"], {}).setdefault(r["mem_util"], r["max_concurrent_seqs"])
    for d, seqs in by_dcp.items():
        a, b = seqs[lo], seqs[hi]
        parts.append(f"{b} against {a} with DCP {d}" + (f" ({b / a:.2f}×)" if a else ""))
    r = head[0]
    parts[0] = parts[0].replace(" against ", f" sequences against {lo:g}'s ", 1)
    text = (
        f"Modelled for {setup_phrase(r['model'], r['gpu'], r['tp'])} at {tokens_label(c)}: {hi:g} fits "
        + ", and ".join(parts)
    )
    if "max_concurrent_seqs_lo" in head[0]:
        rng = {
            (r["dcp"], r["mem_util"]): (r["max_concurrent_seqs_lo"], r["max_concurrent_seqs_hi"])
            for r in head
            if r["context_tokens"] == c
        }
        text += (
            "; over "
            + head[0]["assumption_sets"]
            + " (shaded) "
            + ", ".join(f"{a}–{b} fit at {hi:g} with DCP {d}" for (d, u), (a, b) in rng.items() if u == hi)
        )
    if flags:
        text += "; crosses mark what the memory check flags (" + "; ".join(k.replace("\n", " ") for k in flags) + ")"
    return text + "."


def oom_flag_note(head: list[dict], a=None) -> str:
    """What the model's ``fits`` column means at a memory target (``head``: the headroom row dicts): KV room plus an
    assumed need outside the pool. A flag from that assumption restates the article's memory claim; it is not a
    predicted out-of-memory."""
    a = a or Assumptions()
    r = head[0]
    need = r["outside_need_gib_per_gpu"]
    flagged = [r for r in head if short_outside_pool(r)]
    text = (
        f"The model's memory check counts KV room and assumes the process needs **{a.outside_pool_fraction:.1%}** of "
        f"each GPU's memory outside the target ({need:.1f} GiB per {r['gpu']}): the middle of the window the B300 "
        "article implies (0.95 failed there, 0.92 worked). "
    )
    if not flagged:
        return text + "No memory target shown leaves less than that, so none is flagged for it."
    utils = ", ".join(f"{u:g}" for u in sorted({r["mem_util"] for r in flagged}))
    left = flagged[0]["outside_pool_gib_per_gpu"]
    return text + (
        f"At {utils} only {left:.1f} GiB is left outside the target, so the model flags it "
        "(`fits` = no): that restates the article's claim, it does not predict an out-of-memory by "
        "itself. Whether a setting runs out of memory is for measured runs to say (report 03)."
    )


def bound_sentence(rows: list[dict]) -> str:
    """How close published and measured runs (``rows``: :func:`kvlab.perfmodel.achieved_fraction`'s row dicts) came
    to the model's bound (peak compute and bandwidth, no latency)."""
    lines = []

    def of(source: str, col: str) -> list:
        return [r[col] for r in rows if r["source"] == source and r.get(col) is not None]

    def hardware(source: str) -> str:
        return ", ".join(dict.fromkeys(r["hardware"] for r in rows if r["source"] == source))

    if any(r["source"] == "published" for r in rows):
        f, b = of("published", "batch_fraction_of_bound"), of("published", "bandwidth_fraction_of_peak")
        lines.append(
            f"- published ({hardware('published')}): the article's runs took "
            f"{1 / max(f):.0f}–{1 / min(f):.0f}× the model's bound, i.e. reached {min(f):.1%}–{max(f):.1%} "
            "of it" + (f"; decode read memory at {min(b):.1%}–{max(b):.1%} of peak bandwidth" if b else "") + "."
        )
    m = [r for r in rows if r["source"] == "measured"]
    if m:
        f = of("measured", "batch_fraction_of_bound")
        # each share rests on one run: two significant figures (units.sig2), as every n=1 number
        lines.append(
            f"- measured ({hardware('measured')}, {len(m)} runs): "
            f"{sig2(100 * min(f))}%–{sig2(100 * max(f))}% of a bound computed from the catalog's nominal CPU "
            "figures — compare "
            "these runs with each other, not with a GPU."
        )
    return "\n".join(lines) or "*No run with a batch time to set against the bound.*"


def model_answer(
    fit, x_range: tuple[float, float] | None, sets: int, model: str, gpu: str, tp: int, held_out=None
) -> tuple[str, ...]:
    """Report 04's answer: whether the model can decide anything (its held-out test at the default assumptions, and
    over the assumption sets: ``held_out``, :class:`kvlab.perfmodel.ranges.HeldOutBySet`), and the range of its
    crossover over the assumption sets the article leaves open."""
    right, total = winners_held_out(fit)
    passes = total and right == total and fit.loo_mean_abs_pct <= 25
    first = (
        f"kvlab's physical model of {setup_phrase(model, gpu, tp)} "
        + ("passes its held-out test" if passes else "illustrates, it does not decide")
        + (
            f": held out, each published point is missed by {fit.loo_mean_abs_pct:.0f}% on average and the "
            f"faster engine is named right at {right} of {total} (default assumptions)"
            if total
            else ": nothing could be held out"
        )
        + (
            f"; all {total} right in {held_out.all_right} of {held_out.sets} assumption sets, all at batch "
            f"{' or '.join(str(b) for b in held_out.batch_sizes)}, a batch the article does not state."
            if held_out is not None and held_out.all_right
            else "."
        )
    )
    second = (
        f"Over the {sets} assumption sets the article leaves open (batch size, output length, expert reads, "
        f"cached MLA width, KV number format) its crossover lies anywhere from {k_label(x_range[0])} to "
        f"{k_label(x_range[1])} tokens, so it cannot say where the winner changes."
        if x_range
        else f"Under none of the {sets} assumption sets does the winner change."
    )
    return (first, second)


def not_catalogued_note(missing: dict[str, set[str]]) -> str:
    """Names what the model's catalog lacks (``missing``: what is missing -> the experiments it holds back,
    :func:`kvlab.studies.whatif_model.catalogued`), empty where nothing is: the report shows their measured parts and
    says their modelled part is skipped."""
    if not missing:
        return ""
    parts = "; ".join(
        f"{why} (experiment{'s' if len(exps) > 1 else ''} {', '.join(f'`{e}`' for e in sorted(exps))})"
        for why, exps in sorted(missing.items())
    )
    return (
        f"*Not in the model's catalog (data/catalog): {parts}. Their modelled bound is skipped; what was "
        "measured is still shown.*"
    )
