"""Markdown sentences for the reports, written from the data so no conclusion is typed by hand."""

from __future__ import annotations

import polars as pl

from kvlab.analysis import DECAY_DEFINITIONS, Crossover


def _fmt_tokens(c: float) -> str:
    return f"{c:,.0f} tokens (≈{c / 1024:.0f}K)"


def relative_speed_sentences(rel: pl.DataFrame, label: str) -> str:
    """'vllm is 1.50× faster at 64K (100.5 s vs 150.8 s)' for every context in ``rel``."""
    if rel.is_empty():
        return f"*{label}: no context holds runs of both engines.*"
    lines = []
    for r in rel.iter_rows(named=True):
        engines = [c[:-2] for c in rel.columns if c.endswith("_s") and c != "batch_time_s"]
        slower = next(e for e in engines if e != r["faster"])
        lines.append(
            f"- {label}: **{r['faster']} is {r['speedup']:.2f}× faster at {r['context_label']}** "
            f"({r[r['faster'] + '_s']:.4g} s vs {r[slower + '_s']:.4g} s for {slower})."
        )
    winners = rel["faster"].unique().to_list()
    if len(winners) > 1:
        lines.append(f"- The winner changes with context: {', '.join(f'{w}' for w in rel['faster'])} "
                     f"at {', '.join(rel['context_label'])}.")
    else:
        lines.append(f"- {winners[0]} wins at every context shown.")
    return "\n".join(lines)


def crossover_sentence(x: Crossover, label: str) -> str:
    if x.context_tokens is None:
        return f"- {label} ({x.method}): no crossover estimate — {x.note}."
    return (
        f"- {label} ({x.method}): the engines' batch times meet at about **{_fmt_tokens(x.context_tokens)}**; "
        f"{x.faster_below} is faster below, {x.faster_above} above. Assumption: {x.assumption}."
    )


def decay_sentences(decay: pl.DataFrame, label: str) -> str:
    if decay.is_empty():
        return f"*{label}: no engine has runs at both contexts.*"
    lines = []
    for r in decay.iter_rows(named=True):
        lines.append(
            f"- {label}, {r['engine']}: from {r['context_from']} to {r['context_to']} batch time grows "
            f"**{r['batch_time_ratio']:.2f}×** (so requests/s falls {r['batch_time_ratio']:.2f}×), while prompt "
            f"tokens/s changes by a factor {1 / r['prompt_tokens_per_s_ratio']:.2f}."
        )
    return "\n".join(lines)


def consistency_sentences(verdicts: pl.DataFrame) -> str:
    lines = []
    for r in verdicts.iter_rows(named=True):
        if r["consistent_under_any"]:
            how = ", ".join(r["consistent_definitions"])
            lines.append(f"- ✓ “{r['statement']}” — consistent with the table ({how}).")
        else:
            lines.append(
                f"- ✗ “{r['statement']}” — **not** what the table implies under any definition checked "
                f"({'; '.join(DECAY_DEFINITIONS) if 'decay' in r['claim_id'] else 'time ratio'}): "
                f"the table's batch times give {r['implied_by_time_ratio']:.2f}×, the text says {r['stated_value']:g}×."
            )
    return "\n".join(lines)


def memory_study_summary(stats: pl.DataFrame, causes: pl.DataFrame) -> str:
    """One line per engine and memory setting: retries, failures, run-time spread, latency."""
    if stats.is_empty():
        return "*No measured runs with a memory setting.*"
    lines = ["### In words (measured)"]
    for r in stats.iter_rows(named=True):
        c = causes.filter((pl.col("experiment") == r["experiment"]) & (pl.col("engine") == r["engine"])
                          & (pl.col("mem_util") == r["mem_util"]) & (pl.col("context_label") == r["context_label"]))
        why = ", ".join(f"{n}× {cause}" for cause, n in c.select("failure_cause", "failed_attempts").iter_rows())
        mean, std = r["batch_time_mean_s"], r["batch_time_std_s"]
        time_txt = "no successful run" if mean is None else (
            f"batch time {mean:.3g} s" + (f" ± {std:.2g} s (CV {r['batch_time_cv']:.1%})" if std is not None else "")
        )
        ttft = "" if r["ttft_mean_ms"] is None else f", mean TTFT {r['ttft_mean_ms']:.4g} ms"
        lines.append(
            f"- {r['experiment']}: {r['engine']} at **{r['mem_util']:g}**, {r['context_label']}: "
            f"{r['runs_ok']}/{r['runs']} runs succeeded "
            f"with **{r['retries']} retr{'y' if r['retries'] == 1 else 'ies'}**"
            f"{' (' + why + ')' if why else ''}; {time_txt}{ttft}."
        )
    return "\n".join(lines)


def model_crossover_sentence(crossover_tokens: float | None, fit) -> str:
    """The physical model's crossover, with its fit quality so a reader can weigh it."""
    quality = (f"fit to the {fit.residuals.height} published points: max residual {fit.max_abs_residual_pct:.1f}%, "
               f"leave-one-out mean error {fit.loo_mean_abs_pct:.1f}%")
    if crossover_tokens is None:
        return f"- modelled: no crossover within the modelled range ({quality})."
    return f"- modelled: the batch times meet at about **{_fmt_tokens(crossover_tokens)}** ({quality})."


def model_conclusions(fit, sens: pl.DataFrame, crossover: float | None, at_max: pl.DataFrame, head: pl.DataFrame,
                      workload, *, gpu: str, tp: int, dcp: int, published_contexts: list[int]) -> str:
    """The what-if report's conclusions, as markdown bullets, from its fit, sensitivity, curves and headroom.

    ``at_max``: the modelled curves at the largest context drawn (one row per engine); ``head``: the KV
    headroom table; the memory bullet reads it for vLLM without DCP at the largest published context
    (the smallest headroom context when that one is not in the table).
    """
    p = fit.params
    res = fit.residuals.sort("context_tokens", "engine")
    res_txt = ", ".join(f"{r['engine']} {r['context_tokens'] // 1024}K {r['residual_pct']:+.1f}%"
                        for r in res.iter_rows(named=True))
    lo, hi = min(published_contexts), max(published_contexts)
    xo_txt = (f"{crossover:,.0f} tokens ({crossover / 1024:.0f}K), "
              + ("between" if lo < crossover < hi else "outside")
              + f" the published {lo // 1024}K and {hi // 1024}K points"
              ) if crossover else "no crossover up to the largest context drawn"
    head_contexts = head["context_tokens"].unique().to_list()
    mem_ctx = hi if hi in head_contexts else min(head_contexts)
    h = head.filter((pl.col("dcp") == 1) & (pl.col("context_tokens") == mem_ctx))
    seqs = {r["mem_util"]: r["max_concurrent_seqs"] for r in h.iter_rows(named=True)}
    reasons = {r["mem_util"]: r["reason"] for r in h.iter_rows(named=True)}
    u_lo, u_hi = min(head["mem_util"]), max(head["mem_util"])
    time_of = {r["engine"]: r["batch_time_s"] for r in at_max.iter_rows(named=True)}
    max_ctx = at_max["context_tokens"].max()
    warn = ("**Plausibility:** " + "; ".join(fit.warnings) + ". The fit reproduces the table only with such values: "
            "under the assumed workload the published times are far slower than the B300 roofline, and the SGLang "
            "penalty at 64K is far larger than NVLink collective latencies explain. Read the model as a consistent "
            "description of the published figures, not as proof of their physics."
            ) if fit.warnings else "All fitted parameters are in their physically sane ranges."
    outs = ", ".join(str(n) for n in sens["output_tokens"])
    return f"""
- **Fit:** prefill at {p.prefill_efficiency:.1%} of dense peak, decode reads at {p.bandwidth_efficiency:.1%} of peak bandwidth,
  DCP adds {p.dcp_layer_latency_s * 1e6:.0f} µs per full-attention layer per step (assumed batch {workload.batch_size} × {workload.output_tokens} output tokens).
- **Residuals** on the {res.height} published points: {res_txt} (max |{fit.max_abs_residual_pct:.1f}|%).
- **Leave-one-out error:** mean |{fit.loo_mean_abs_pct:.1f}|%, max |{fit.loo_max_abs_pct:.1f}|% — with 3 parameters and {res.height} points, each left-out point is predicted from an exact fit to the others, so this is the honest measure of predictive power.
- **Sensitivity:** refitting with {outs} output tokens moves the decode bandwidth efficiency over {sens["bandwidth_efficiency"].min():.1%}–{sens["bandwidth_efficiency"].max():.1%} and the DCP latency over {sens["dcp_layer_latency_us"].min():.0f}–{sens["dcp_layer_latency_us"].max():.0f} µs, while the crossover stays within {sens["crossover_tokens"].min():,.0f}–{sens["crossover_tokens"].max():,.0f} tokens.
- **Crossover** (vLLM TP{tp} vs SGLang TP{tp}+DCP{dcp} on {gpu}): {xo_txt}.
- At {max_ctx:,} tokens the model gives SGLang+DCP {time_of["vllm"] / time_of["sglang"]:.2f}× the speed of vLLM without DCP.
- **Memory** (vLLM without DCP, {mem_ctx:,} tokens): {seqs.get(u_lo)} sequences fit at {u_lo}, {seqs.get(u_hi)} at {u_hi}; at {u_hi}: {reasons.get(u_hi)}.
- {warn}
"""


def headroom_sentences(head: pl.DataFrame) -> str:
    """How many sequences fit at each memory setting, per DCP size and context (modelled)."""
    lines = []
    for (dcp, ctx), g in head.group_by(["dcp", "context_tokens"], maintain_order=True):
        parts = ", ".join(f"{r['max_concurrent_seqs']} at {r['mem_util']:g}" for r in g.sort("mem_util").iter_rows(named=True))
        lines.append(f"- modelled, DCP {dcp}, {ctx / 1024:.0f}K context: concurrent sequences that fit — {parts}.")
    return "\n".join(lines)


def growth_comparison(measured: pl.DataFrame, published: pl.DataFrame) -> str:
    """How much batch time grows between the two contexts, measured here against the document's table."""
    if measured.is_empty():
        return "*measured: no engine has runs at both contexts.*"
    pub = {r["engine"]: r["batch_time_ratio"] for r in published.iter_rows(named=True)}
    lines = []
    for r in measured.iter_rows(named=True):
        ref = pub.get(r["engine"])
        cmp = f"; the article's {r['engine']} grew {ref:.2f}×" if ref is not None else ""
        lines.append(f"- measured ({r['hardware']}): {r['engine']} batch time grows **{r['batch_time_ratio']:.2f}×** "
                     f"from {r['context_from']} to {r['context_to']} (scaled contexts){cmp}.")
    return "\n".join(lines)
