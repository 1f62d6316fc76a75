"""Markdown sentences for the reports, written from the data so no conclusion is typed by hand."""

from __future__ import annotations

import polars as pl

from kvlab.analysis import DECAY_DEFINITIONS, Crossover


#: What a reader must know about a measured engine whose name could be misread.
ENGINE_NOTES: dict[str, str] = {
    "sglang-jax": ("SGLang's JAX runtime (`sgl_jax`) on JAX's CPU backend, **not PyTorch SGLang** (the engine the "
                   "article measured): its kernels and speed differ, so its results are labelled sglang-jax and "
                   "never stand for sglang"),
}


def measured_engines_note(runs: pl.DataFrame) -> str:
    """Which engines the measured rows hold, with what each one is (said once per report)."""
    from kvlab.engines import ENGINE_LABELS, ENGINE_NAMES

    m = runs.filter(pl.col("source") == "measured")
    if m.is_empty():
        return ""
    engines = sorted(m["engine"].unique().to_list(),
                     key=lambda e: (ENGINE_NAMES.index(e) if e in ENGINE_NAMES else len(ENGINE_NAMES), e))
    hw = ", ".join(m["hardware"].unique(maintain_order=True).to_list())
    parts = [f"{e} = {ENGINE_LABELS.get(e, e)}" + (f": {ENGINE_NOTES[e]}" if e in ENGINE_NOTES else "")
             for e in engines]
    return f"Measured engines ({len(engines)}, on {hw}): " + "; ".join(parts) + "."


def unavailable_counters(runs: pl.DataFrame) -> str:
    """Engines whose server counters (``server_*`` columns) are null in every measured run: not available, not 0."""
    m = runs.filter(pl.col("source") == "measured")
    cols = [c for c in m.columns if c.startswith("server_")]
    lines = []
    for (engine,), g in m.group_by(["engine"], maintain_order=True):
        missing = [c for c in cols if g[c].null_count() == g.height]
        if len(missing) == len(cols):
            lines.append(f"- {engine} reported no server counters (all {len(cols)} `server_*` columns null in its "
                         f"{g.height} runs): they are shown empty (not available), never as 0.")
        elif missing:
            lines.append(f"- {engine} did not report {', '.join(missing)} (null in its {g.height} runs): shown empty "
                         "(not available), never as 0.")
    return "\n".join(lines)


def markdown_inline(text: str) -> str:
    """The inline markdown kvlab's sentences use (``**bold**``, ``*italic*``, ```code```) as escaped HTML."""
    import html
    import re

    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", out)


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


def decay_comparison(decay: pl.DataFrame, label: str) -> str:
    """Which engine's throughput holds up best between the two contexts (two or more engines)."""
    if decay["engine"].n_unique() < 2:
        return ""
    lines = []
    for _, g in decay.group_by(["source", "experiment", "hardware"], maintain_order=True):
        g = g.sort("batch_time_ratio")
        best, worst = g.row(0, named=True), g.row(-1, named=True)
        if best["batch_time_ratio"] == worst["batch_time_ratio"]:
            lines.append(f"- {label}: every engine's batch time grows {best['batch_time_ratio']:.2f}× from "
                         f"{best['context_from']} to {best['context_to']}.")
            continue
        lines.append(
            f"- {label}: from {best['context_from']} to {best['context_to']}, {best['engine']}'s throughput holds up "
            f"best (batch time **{best['batch_time_ratio']:.2f}×**) and {worst['engine']}'s falls most "
            f"(**{worst['batch_time_ratio']:.2f}×**)."
        )
    return "\n".join(lines)


def growth_sentences(growth: pl.DataFrame, label: str) -> str:
    """'vllm: batch time grows 2.50× from 2,048 to 6,400 tokens, about C^0.81' per engine."""
    lines = []
    for r in growth.filter(pl.col("growth").is_not_null()).iter_rows(named=True):
        k = r["exponent"]
        shape = "faster than linear" if k > 1.05 else "slower than linear" if k < 0.95 else "about linear"
        lines.append(
            f"- {label}, {r['engine']}: batch time grows **{r['growth']:.2f}×** from {r['c_from']:,} to {r['c_to']:,} "
            f"tokens ({r['context_from']} to {r['context_to']}, {r['n_contexts']} contexts), "
            f"T ∝ C^{k:.2f} ({shape} in context)."
        )
    return "\n".join(lines) or f"*{label}: no engine has runs at two contexts.*"


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
        t_ms = r["ttft_mean_ms"]
        ttft = "" if t_ms is None else f", mean TTFT {t_ms:,.0f} ms" if t_ms >= 1000 else f", mean TTFT {t_ms:.4g} ms"
        pre = r.get("preemptions")
        pre_txt = "; preemptions not available" if pre is None else f"; {pre} preemption{'' if pre == 1 else 's'}"
        lines.append(
            f"- {r['experiment']}: {r['engine']} at **{r['mem_util']:g}**, {r['context_label']}: "
            f"{r['runs_ok']}/{r['runs']} runs succeeded "
            f"with **{r['retries']} retr{'y' if r['retries'] == 1 else 'ies'}**"
            f"{' (' + why + ')' if why else ''}; {time_txt}{ttft}{pre_txt}."
        )
    return "\n".join(lines)


def memory_conclusion(cmp: pl.DataFrame, tolerance: float = 0.05) -> str:
    """The memory study's conclusion per engine: the higher setting against the lower, where both were measured.

    ``cmp`` is :func:`kvlab.analysis.memory_comparison`'s frame. A batch-time ratio within
    ``tolerance`` of 1 counts as unchanged.
    """
    if cmp.is_empty():
        return "*No engine was measured at both memory settings at the same context.*"

    def count(n: int, word: str, where: list[str]) -> str:
        plural = {"retry": "retries", "failed run": "failed runs"}[word]
        return f"{n} {word if n == 1 else plural}" + (f" (at {', '.join(where)})" if n else "")

    lines = ["### Conclusion (measured)"]
    for (exp, engine), g in cmp.group_by(["experiment", "engine"], maintain_order=True):
        lo, hi = g["mem_low"][0], g["mem_high"][0]
        times = []
        for r in g.iter_rows(named=True):
            ratio = r["time_ratio"]
            if ratio is None:
                times.append(f"{r['context_label']} not comparable (no successful run at one setting)")
                continue
            verb = ("about the same" if abs(ratio - 1) <= tolerance
                    else f"{1 - ratio:.0%} less" if ratio < 1 else f"{ratio - 1:.0%} more")
            times.append(f"{r['context_label']} {verb} ({r['batch_time_mean_s_high']:.3g} s vs "
                         f"{r['batch_time_mean_s_low']:.3g} s, {ratio:.2f}×)")
        where = {k: [r["context_label"] for r in g.iter_rows(named=True) if r[k]]
                 for k in ("retries_high", "retries_low", "runs_failed_high", "runs_failed_low")}
        retries_hi, retries_lo = g["retries_high"].sum(), g["retries_low"].sum()
        failed_hi, failed_lo = g["runs_failed_high"].sum(), g["runs_failed_low"].sum()
        verdict = (f"**no retries** at {hi:g} or {lo:g}" if retries_hi == retries_lo == 0
                   else f"{hi:g} caused **{count(retries_hi, 'retry', where['retries_high'])}** against "
                        f"{count(retries_lo, 'retry', where['retries_low'])} at {lo:g}")
        if failed_hi or failed_lo:
            verdict += (f"; {count(failed_hi, 'failed run', where['runs_failed_high'])} at {hi:g} against "
                        f"{count(failed_lo, 'failed run', where['runs_failed_low'])} at {lo:g}")
        lines.append(f"- {exp}, **{engine}**: {verdict}; batch time at {hi:g} against {lo:g}: " + ", ".join(times) + ".")
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
        cmp = (f"; the article's {r['engine']} grew {ref:.2f}×" if ref is not None
               else f"; the article has no {r['engine']} figure" if pub else "")
        lines.append(f"- measured ({r['hardware']}): {r['engine']} batch time grows **{r['batch_time_ratio']:.2f}×** "
                     f"from {r['context_from']} to {r['context_to']} (scaled contexts){cmp}.")
    return "\n".join(lines)
