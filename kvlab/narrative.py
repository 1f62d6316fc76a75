"""Markdown sentences for the reports, written from the data so no conclusion is typed by hand."""

from __future__ import annotations

import polars as pl

from kvlab.analysis import Crossover
from kvlab.guide import (
    CONCURRENCY_THRESHOLD, FAMILY, MIN_MARGIN, STAND_IN, Evidence, Recommendation, UserWorkload, engine_label, nearest,
)
from kvlab.tables import ms, percent
from kvlab.units import approx_label, approx_tokens, k_label, scaled_context, tokens_label


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


def relative_speed_sentences(rel: pl.DataFrame, label: str) -> str:
    """'vllm is 1.50× faster at 64K (100.5 s vs 150.8 s)' for every context in ``rel``."""
    if rel.is_empty():
        return f"*{label}: no context holds runs of both engines.*"
    lines = []
    for r in rel.iter_rows(named=True):
        times = {r["engine"]: r["batch_time_s"], r["other_engine"]: r["other_batch_time_s"]}
        slower = r["other_engine"] if r["faster"] == r["engine"] else r["engine"]
        lines.append(
            f"- {label}: **{r['faster']} is {r['speedup']:.2f}× faster at {r['context_label']}** "
            f"({times[r['faster']]:.4g} s vs {times[slower]:.4g} s for {slower})."
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
        f"- {label} ({x.method}): the engines' batch times meet at **{approx_tokens(x.context_tokens)}**; "
        f"{x.faster_below} is faster below, {x.faster_above} above. Assumption: {x.assumption}."
    )


def decay_sentences(decay: pl.DataFrame, label: str) -> str:
    """Per engine: how batch time grows between the two contexts, and which way each throughput goes
    ('requests/s falls 2.94×', 'prompt tokens/s rises 1.06×'), with the real token counts of scaled contexts."""
    if decay.is_empty():
        return f"*{label}: no engine has runs at both contexts.*"
    lines = []
    for r in decay.iter_rows(named=True):
        bt = r["batch_time_ratio"]
        grows = (f"batch time grows **{bt:.2f}×** (so requests/s falls {bt:.2f}×)" if bt >= 1 else
                 f"batch time shrinks **{1 / bt:.2f}×** (so requests/s rises {1 / bt:.2f}×)")
        lines.append(
            f"- {label}, {r['engine']}: from {r['context_from']} to {r['context_to']} {grows}, while "
            f"{_change(r['prompt_tokens_per_s_ratio'], 'prompt tokens/s')}{_scaled_span(r)}."
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
            f"best ({_change(best['batch_time_ratio'], 'requests/s', bold=True)}) and {worst['engine']}'s falls most "
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


def consistency_sentences(verdicts: pl.DataFrame, check: pl.DataFrame | None = None) -> str:
    """One line per stated ratio: ✓ with the definition(s) under which the table gives it, or ✗ with what the
    table gives instead under each definition (read from ``check``, :func:`kvlab.analysis.consistency`'s rows)."""
    lines = []
    for r in verdicts.iter_rows(named=True):
        rows = check.filter(pl.col("claim_id") == r["claim_id"]) if check is not None else None
        if r["consistent_under_any"]:
            how = ", ".join(DEFINITION_NAMES.get(d, d) for d in r["consistent_definitions"])
            lines.append(f"- ✓ “{r['statement']}” — consistent with the table ({how}).")
        elif rows is not None and rows.height:
            gives = " and ".join(_implied_phrase(x) for x in rows.iter_rows(named=True))
            lines.append(f"- ✗ “{r['statement']}” — **not** what the table implies under any definition checked: "
                         f"by its batch times {gives}; the text says {r['stated_value']:g}×.")
        else:
            lines.append(
                f"- ✗ “{r['statement']}” — **not** what the table implies under any definition checked: "
                f"the table's batch times give {r['implied_by_time_ratio']:.2f}×, the text says {r['stated_value']:g}×."
            )
    return "\n".join(lines)


def memory_study_summary(stats: pl.DataFrame, causes: pl.DataFrame) -> str:
    """One line per engine and memory setting: retries, failures, run-time spread, latency."""
    if stats.is_empty():
        return "*No measured runs with a memory setting.*"
    lines = ["### In words (measured)"]
    several = stats["experiment"].n_unique() > 1
    for r in stats.iter_rows(named=True):
        c = causes.filter((pl.col("experiment") == r["experiment"]) & (pl.col("engine") == r["engine"])
                          & (pl.col("mem_util") == r["mem_util"]) & (pl.col("context_tokens") == r["context_tokens"]))
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
            f"- {r['experiment'] + ': ' if several else ''}{r['engine']} at **{r['mem_util']:g}**, "
            f"{scaled_context(r['context_label'], r.get('context_tokens'))}: {r['runs_ok']}/{r['runs']} runs succeeded "
            f"with **{r['retries']} retr{'y' if r['retries'] == 1 else 'ies'}**"
            f"{' (' + why + ')' if why else ''}; {time_txt}{ttft}{pre_txt}."
        )
    return "\n".join(lines)


def memory_conclusion(cmp: pl.DataFrame, stats: pl.DataFrame) -> str:
    """The memory study's conclusion, aspect by aspect: retries at each setting (over every run), then, at every
    context an engine was measured at both settings, the lower setting against the higher — run time, its spread
    over repeats, and latency (mean request latency and mean TTFT) — with each change's direction and size.
    An engine compared at one context gets the values; at several, the signed change per context (scaled contexts'
    real tokens said once).

    ``cmp`` is :func:`kvlab.analysis.memory_comparison`'s frame, ``stats`` :func:`kvlab.analysis.memory_study`'s.
    """
    if cmp.is_empty():
        return "*No engine was measured at both memory settings at the same context.*"
    lines = ["### Conclusion (measured)"]
    several = cmp["experiment"].n_unique() > 1
    for (exp,), g in cmp.group_by(["experiment"], maintain_order=True):
        lo, hi = g["mem_low"][0], g["mem_high"][0]
        st = stats.filter(pl.col("experiment") == exp)
        g = g.sort(pl.col("engine").map_elements(_engine_rank, return_dtype=pl.Int64), "context_tokens")
        if several:
            lines.append(f"\n#### {exp}")
        compact = g.group_by("engine").len()["len"].max() > 1
        pairs = g.select("context_label", "context_tokens").unique().sort("context_tokens")
        scaled = [f"{lab} = {tok:,} tokens" for lab, tok in pairs.iter_rows() if scaled_context(lab, tok) != lab]
        if compact and scaled:
            lines.append(f"\nContexts scaled: {', '.join(scaled)}.\n")
        lines.append(f"- **Retries**: {_retries_by_setting(st, [lo, hi])}.")
        times, spreads, lat = [], [], []
        for (engine,), e in g.group_by(["engine"], maintain_order=True):
            t_parts, s_parts, l_parts = [], [], []
            for r in e.iter_rows(named=True):
                ctx = r["context_label"] if compact else scaled_context(r["context_label"], r.get("context_tokens"))
                low, high = (_stats_row(st, r, u) for u in (lo, hi))
                t_lo, t_hi = r["batch_time_mean_s_low"], r["batch_time_mean_s_high"]
                if not (t_lo and t_hi):
                    t_parts.append(f"{ctx} not comparable (no successful run at one setting)")
                elif compact:
                    t_parts.append(f"{ctx} {_signed_pct(t_lo / t_hi - 1)}")
                else:
                    t_parts.append(f"{ctx} {_relative(t_lo, t_hi, 'longer', 'shorter')} ({t_lo:.3g} s vs {t_hi:.3g} s)")
                if low and high and (low["runs_ok"] or 0) > 1 and (high["runs_ok"] or 0) > 1:
                    s_parts.append(f"{ctx} {low['batch_time_cv']:.1%} → {high['batch_time_cv']:.1%}")
                if low and high and low["e2e_mean_ms"] and high["e2e_mean_ms"]:
                    has_ttft = bool(low["ttft_mean_ms"] and high["ttft_mean_ms"])
                    if compact:
                        l_parts.append(f"{ctx} {_signed_pct(low['e2e_mean_ms'] / high['e2e_mean_ms'] - 1)}"
                                       + (f" (TTFT {_signed_pct(low['ttft_mean_ms'] / high['ttft_mean_ms'] - 1)})"
                                          if has_ttft else ""))
                    else:
                        l_parts.append(
                            f"{ctx} mean request latency {_relative(low['e2e_mean_ms'], high['e2e_mean_ms'])} "
                            f"({ms(low['e2e_mean_ms'])} vs {ms(high['e2e_mean_ms'])})"
                            + (f", mean TTFT {_relative(low['ttft_mean_ms'], high['ttft_mean_ms'])} "
                               f"({ms(low['ttft_mean_ms'])} vs {ms(high['ttft_mean_ms'])})" if has_ttft else ""))
            sep = ", " if compact else "; "
            join = ": " if compact else " at "
            times.append(f"{engine}{join}{sep.join(t_parts)}")
            if s_parts:
                spreads.append(f"{engine}: {', '.join(s_parts)}")
            if l_parts:
                lat.append(f"{engine}{join}{sep.join(l_parts)}")
        change = " (change in mean batch time)" if compact else ""
        lines.append(f"- **Run time** at {lo:g} against {hi:g}{change}: " + "; ".join(times) + ".")
        lines.append(f"- **Spread** of batch time over repeats (coefficient of variation, {lo:g} → {hi:g}): " + (
            "; ".join(spreads) + "." if spreads else
            "not measured — one successful run per engine, setting and context, so run-time stability cannot be "
            "compared."))
        what = " (change in mean request latency, and in mean TTFT)" if compact else ""
        lines.append(f"- **Latency** at {lo:g} against {hi:g}{what}: " + ("; ".join(lat) if lat else "not measured") + ".")
    return "\n".join(lines)


def model_crossover_sentence(crossover_tokens: float | None, fit, xrange: tuple[float, float] | None = None) -> str:
    """The physical model's crossover, with its range over what the data cannot pin (``xrange``), its fit
    quality and, when a fitted parameter is outside its physical range, that flag — in the sentence itself."""
    quality = (f"fit to the {fit.residuals.height} published points: max residual {fit.max_abs_residual_pct:.1f}%, "
               f"leave-one-out mean error {fit.loo_mean_abs_pct:.1f}%")
    flag = (f"; **non-physical fit** ({'; '.join(_implausible(fit, short=True))}), so read it as a description of "
            "the four points, not as physics" if _implausible(fit) else "")
    spread = (f"; **{k_label(xrange[0])}–{k_label(xrange[1])}** over the batch sizes, output lengths, expert-read "
              "models and MLA cache widths the article leaves open (report 04)" if xrange else "")
    if crossover_tokens is None:
        return f"- modelled: no crossover within the modelled range ({quality}{flag})."
    return (f"- modelled: the batch times meet at **{approx_tokens(crossover_tokens)}** under the default "
            f"assumptions{spread} ({quality}{flag}).")


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


def headroom_sentences(head: pl.DataFrame) -> str:
    """How many sequences fit at each memory setting, per DCP size and context (modelled), then what the model's
    *fits* column says and what it rests on (read from each row's ``reason``), so a reader never takes a restated
    assumption for a prediction."""
    lines = []
    for (dcp, ctx), g in head.group_by(["dcp", "context_tokens"], maintain_order=True):
        g = g.sort("mem_util")
        parts = ", ".join(f"{r['max_concurrent_seqs']:,} at {r['mem_util']:g}" for r in g.iter_rows(named=True))
        seqs = g["max_concurrent_seqs"].to_list()
        more = (f" ({_relative(seqs[-1], seqs[0], 'more', 'fewer')} at {g['mem_util'][-1]:g})"
                if len(seqs) > 1 and seqs[0] else "")
        path = " (vLLM's path)" if dcp == 1 else " (SGLang's path)"
        lines.append(f"- modelled, DCP {dcp}{path}, {tokens_label(ctx)} context: sequences that fit — {parts}{more}.")
    lines.append("")
    lines.append(fits_sentence(head))
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
        span = _scaled_span(r).strip().removeprefix("(").removesuffix(")")
        lines.append(f"- measured: {r['engine']} batch time grows **{r['batch_time_ratio']:.2f}×** "
                     f"from {r['context_from']} to {r['context_to']} ({span or 'full-scale contexts'}){cmp}.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- figure captions and verdicts (01)

def speed_caption(rel: pl.DataFrame, label: str) -> str:
    """One sentence for a batch-time figure: who is faster at each context, by how much."""
    if rel.is_empty():
        return f"{label}: no context holds runs of both engines."
    parts = [f"{engine_label(r['faster'])} is {r['speedup']:.2f}× faster at {r['context_label']}"
             for r in rel.sort("context_tokens").iter_rows(named=True)]
    winners = rel["faster"].unique().to_list()
    tail = "the winner changes with context" if len(winners) > 1 else f"{engine_label(winners[0])} wins at every context"
    return f"{label.capitalize()}: {'; '.join(parts)} — {tail}."


def growth_caption(growth: pl.DataFrame, label: str) -> str:
    """One sentence for a batch-time-against-context figure: how much each engine's batch time grows."""
    g = growth.filter(pl.col("growth").is_not_null())
    if g.is_empty():
        return f"{label.capitalize()}: no engine has runs at two contexts."
    parts = [f"{engine_label(r['engine'])}'s batch time grows {r['growth']:.2f}× from {r['context_from']} to "
             f"{r['context_to']}" for r in g.sort("growth", descending=True).iter_rows(named=True)]
    return f"{label.capitalize()}: {'; '.join(parts)} — the steeper line is the engine whose speed falls most with context."


def _claim_row(rel: pl.DataFrame, context_label: str) -> dict | None:
    hit = rel.filter(pl.col("context_label") == context_label)
    return hit.row(0, named=True) if hit.height else None


def speed_claim_verdicts(claims: pl.DataFrame, rel_published: pl.DataFrame, rel_measured: pl.DataFrame | None,
                         engine_family: dict[str, str] | None = None) -> list:
    """Each relative-speed claim checked against the document's own table (winner and stated ratio, to the
    claim's last digit) and, where measured runs exist at the same (scaled) context, its shape on this host:
    does the same engine family win there? ``engine_family`` maps a claim's engine to the measured engine that
    stands for it (e.g. sglang → sglang-jax)."""
    from kvlab.analysis import _stated_tolerance
    from kvlab.verdicts import Verdict

    family = engine_family or {}
    out = []
    for c in claims.filter(pl.col("kind") == "relative_speed").iter_rows(named=True):
        ctx, claimed = c["context_from"], c["engine"]
        r = _claim_row(rel_published, ctx)
        if r is None:
            out.append(Verdict(c["statement"], "cannot be tested here", "published", f"no table row at {ctx}"))
        else:
            ok = r["faster"] == claimed and abs(r["speedup"] - c["stated_value"]) <= _stated_tolerance(c["stated_value"])
            out.append(Verdict(f"{c['statement']} (the article's own table)", "reproduced" if ok else "contradicted",
                               "published", f"{engine_label(r['faster'])} {r['speedup']:.2f}× faster at {ctx}"))
        m = _claim_row(rel_measured, ctx) if rel_measured is not None and not rel_measured.is_empty() else None
        if m is None:
            continue
        stands_for = family.get(claimed, claimed)
        tokens = f"{m['context_tokens']:,} tokens"
        out.append(Verdict(
            f"{engine_label(stands_for)} wins at {ctx} — the claim's direction on this host ({ctx} scaled to {tokens})",
            "reproduced" if m["faster"] == stands_for else "contradicted", "measured",
            f"{engine_label(m['faster'])} {m['speedup']:.2f}× faster at {ctx} ({tokens})"))
    return out


def crossover_verdicts(estimates: list, model_tokens: float | None, measured: list | None,
                       model_range: tuple[float, float] | None = None) -> list:
    """Where the winner changes: the article's table interpolated, the calibrated model, and the measured
    contexts (found, never reproduced: the article states no crossover)."""
    from kvlab.verdicts import Verdict

    out = []
    found = [x for x in estimates if x.context_tokens is not None]
    if found:
        lo, hi = min(x.context_tokens for x in found), max(x.context_tokens for x in found)
        out.append(Verdict("The winner changes between 64K and 200K (the article's table, interpolated)", "found",
                           "published", f"{k_label(lo)}–{k_label(hi)} tokens ({', '.join(x.method for x in found)})"))
    if model_tokens is not None:
        out.append(Verdict("Where the winner changes, from kvlab's physical model calibrated on the same four points",
                           "found", "modelled", f"≈{k_label(model_tokens)} tokens" + (
                               f", {k_label(model_range[0])}–{k_label(model_range[1])} over the assumptions the "
                               "article leaves open" if model_range else "") + " (not an independent check)"))
    if measured:
        x = next((m for m in measured if m.context_tokens is not None), None)
        m = measured[0]
        out.append(Verdict("Do the measured curves cross inside the measured contexts?", "found", "measured",
                           f"yes, at ≈{x.context_tokens:,.0f} tokens ({x.method})" if x else
                           f"no: {engine_label(m.faster_below)} faster at every measured context" if m.faster_below
                           else f"no: {m.note}"))
    return out


def citation_note(published: pl.DataFrame) -> str:
    """Where published rows come from, said once under their table instead of on every row."""
    cites = [c for c in published["citation"].drop_nulls().unique(maintain_order=True).to_list()] \
        if "citation" in published.columns else []
    return "Source: " + "; ".join(cites) + "." if cites else "*No citation recorded for these rows.*"


# --------------------------------------------------------------------------- prefix sharing (05)

#: The article's claims report 05 tests, each with how it tests them (the article's other claims are 06's).
PREFIX_CLAIMS = {
    "vllm_no_prefix_sharing": "vLLM's CPU build with automatic prefix caching on (its default) and off: the share of "
                              "prompt tokens it served from its cache",
    "sglang_radix_sharing": "sglang-jax (CPU), SGLang's JAX runtime with the same radix cache: the share of prompt "
                            "tokens served from the cache, and which requests found the prefix there",
    "shared_prefix_threshold": "both engines below and above 30% shared: which finishes the batch first, and "
                               "whether what the cache saves jumps at 30%",
}


def _prefix_engine_order() -> pl.Expr:
    from kvlab.style import ENGINE_COLORS

    return pl.col("engine").replace_strict({e: i for i, e in enumerate(ENGINE_COLORS)}, default=len(ENGINE_COLORS),
                                           return_dtype=pl.Int64)


def _prefix_times(x: float, more: str = "shorter", less: str = "longer") -> str:
    """A ratio with its direction: 1.37 → '1.37× shorter', 0.96 → '1.04× longer', 1.002 → 'unchanged (1.00×)'."""
    if abs(x - 1) < 0.005:
        return "unchanged (1.00×)"
    return f"{x:.2f}× {more}" if x > 1 else f"{1 / x:.2f}× {less}"


def prefix_claims_table(claims: pl.DataFrame):
    """The claims this report tests, each beside how it tests them (the source is said once, below the table)."""
    from kvlab import tables

    c = claims.filter(pl.col("claim_id").is_in(list(PREFIX_CLAIMS))).with_columns(
        pl.col("claim_id").replace_strict(PREFIX_CLAIMS, default=None).alias("tested_by"))
    return tables.table(c, {"statement": "what the article says", "tested_by": "how this report tests it"})


def sharing_table(sharing: pl.DataFrame, block_tokens: int = 128):
    """One row per engine and shared fraction: the cache on beside off (hit rate, mean TTFT, median batch time) and
    the two ideals, rates in %; spread columns only where points have repeats."""
    from kvlab import tables

    keys = ["engine", "shared_fraction"]

    def side(on: bool, sfx: str) -> pl.DataFrame:
        return sharing.filter(pl.col("prefix_caching") == on).select(
            *keys, (pl.col("cache_hit_rate") * 100).round(1).alias(f"hit_{sfx}"), pl.col("ttft_mean_ms").alias(f"ttft_{sfx}"),
            pl.col("batch_time_s").alias(f"batch_{sfx}"), pl.col("batch_time_std_s").alias(f"std_{sfx}"),
            pl.col("n_runs").alias(f"runs_{sfx}"))

    base = sharing.group_by(keys).agg(pl.col("shared_prefix_tokens").first(),
                                      (pl.col("ideal_hit_rate").first() * 100).round(1).alias("ideal"),
                                      (pl.col("block_ideal_hit_rate").first() * 100).round(1).alias("block"))
    t = (base.join(side(True, "on"), on=keys, how="left").join(side(False, "off"), on=keys, how="left")
         .with_columns((pl.col("shared_fraction") * 100).alias("fraction_pct"))
         .sort(_prefix_engine_order(), "shared_fraction"))
    cols = {"engine": "engine", "fraction_pct": "shared prefix (% of prompt)", "shared_prefix_tokens": "shared prefix (tokens)",
            "hit_on": "cache-hit rate, cache on (%)", "hit_off": "cache-hit rate, cache off (%)",
            "ideal": "ideal, token-exact (%)", "block": f"ideal in whole {block_tokens}-token blocks (%)",
            "ttft_on": "mean TTFT, cache on (ms)", "ttft_off": "mean TTFT, cache off (ms)",
            "batch_on": "median batch time, cache on (s)", "batch_off": "median batch time, cache off (s)"}
    notes = []
    off = t["hit_off"].drop_nulls()
    if off.len() and off.max() == 0:  # said once instead of a column of zeros
        del cols["hit_off"]
        notes.append("with the prefix cache off every cache-hit rate is 0%")
    runs = [v for v in t["runs_on"].to_list() + t["runs_off"].to_list() if v is not None]
    if runs and max(runs) > 1:
        cols |= {"std_on": "batch time spread, on, std (s)", "std_off": "batch time spread, off, std (s)",
                 "runs_on": "runs, on", "runs_off": "runs, off"}
        notes.insert(0, "median over the runs of each point; spread: standard deviation over them")
    else:
        notes.insert(0, "one run per point (no repeats)")
    return tables.table(t, cols, caption="; ".join(notes))


def gain_table(gain: pl.DataFrame):
    """Per engine and shared fraction: what the prefix cache buys (off ÷ on), rates in %."""
    from kvlab import tables

    t = gain.with_columns((pl.col("shared_fraction") * 100).alias("fraction_pct"),
                          (pl.col("cache_hit_rate_on") * 100).round(1).alias("hit_on"),
                          (pl.col("time_saved") * 100).round(1).alias("saved")).sort(_prefix_engine_order(), "shared_fraction")
    return tables.table(t, {"engine": "engine", "fraction_pct": "shared prefix (% of prompt)",
                            "hit_on": "cache-hit rate, cache on (%)", "ttft_speedup": "mean TTFT, off ÷ on (×)",
                            "batch_speedup": "median batch time, off ÷ on (×)",
                            "saved": "batch time saved by the cache (%)"})


def turns_table(by_turn: pl.DataFrame):
    """Per engine and turn: prompt length, tokens served from the cache and mean TTFT with the cache on beside off."""
    from kvlab import tables

    keys = ["engine", "turn"]

    def side(on: bool, sfx: str) -> pl.DataFrame:
        return by_turn.filter(pl.col("prefix_caching") == on).select(
            *keys, pl.col("cached_tokens").alias(f"cached_{sfx}"), (pl.col("cached_share") * 100).round(1).alias(f"share_{sfx}"),
            pl.col("ttft_mean_ms").alias(f"ttft_{sfx}"), pl.col("cached_reported").alias(f"reported_{sfx}"))

    base = by_turn.group_by(keys).agg(pl.col("prompt_tokens").first(), pl.col("requests").first())
    t = (base.join(side(True, "on"), on=keys, how="left").join(side(False, "off"), on=keys, how="left")
         .with_columns((pl.col("ttft_off") / pl.col("ttft_on")).alias("ratio")).sort(_prefix_engine_order(), "turn"))
    cols = {"engine": "engine", "turn": "turn", "prompt_tokens": "prompt (tokens)", "requests": "conversations",
            "cached_on": "cached per request, cache on (tokens)", "share_on": "share of prompt cached, cache on (%)",
            "cached_off": "cached per request, cache off (tokens)", "ttft_on": "mean TTFT, cache on (ms)",
            "ttft_off": "mean TTFT, cache off (ms)", "ratio": "mean TTFT, off ÷ on (×)"}
    if t.filter((pl.col("reported_on") != pl.col("requests")) | (pl.col("reported_off") != pl.col("requests"))).height:
        cols |= {"reported_on": "requests reporting a cached count, cache on",
                 "reported_off": "requests reporting a cached count, cache off"}
    off = t["cached_off"].drop_nulls()
    caption = None
    if off.len() and off.max() == 0 and t["cached_off"].null_count() == 0:  # said once instead of a column of zeros
        del cols["cached_off"]
        caption = "with the prefix cache off no request found any token in the cache"
    return tables.table(t, cols, caption=caption)


def ideal_reuse_caption(ideal: pl.DataFrame, prompt_tokens: int, requests: int, block_tokens: int,
                        threshold: float) -> str:
    """What the modelled ideal-reuse figure shows: the straight token-exact line, and where whole blocks lose most."""
    if ideal.is_empty():
        return "Modelled: no shared fraction given."
    top = ideal.sort("shared_fraction").row(-1, named=True)
    gap = ideal.with_columns((pl.col("ideal_hit_rate") - pl.col("block_hit_rate")).alias("d")).sort(
        "d", descending=True).row(0, named=True)
    return (f"Modelled for {requests} requests of {prompt_tokens:,} tokens: a token-exact cache could serve at most "
            f"{top['ideal_hit_rate']:.0%} of prompt tokens at {top['shared_fraction']:.0%} shared, on a straight line "
            f"(shared fraction × {requests - 1}/{requests}) with no step at the article's {threshold:.0%}; a cache of "
            f"whole {block_tokens}-token blocks falls short of it by up to {gap['d'] * 100:.1f} percentage points "
            f"({gap['block_hit_rate']:.0%} against {gap['ideal_hit_rate']:.0%} at {gap['shared_fraction']:.0%} shared).")


def prefix_sharing_caption(sharing: pl.DataFrame) -> str:
    """What the measured prefix-sharing figure shows: each engine's hit rate at the most shared fraction against
    its ideal, the caches off, and which engine finishes the batch first with and without sharing."""
    on = sharing.filter(pl.col("prefix_caching") & pl.col("cache_hit_rate").is_not_null())
    if on.is_empty():
        return "Measured: no engine reported a cache-hit count with its prefix cache on."
    top = on["shared_fraction"].max()
    parts = []
    for r in on.filter(pl.col("shared_fraction") == top).sort(_prefix_engine_order()).iter_rows(named=True):
        ideal = (f"its whole-block ideal {r['block_ideal_hit_rate']:.0%}" if FAMILY.get(r["engine"]) == "vllm"
                 else f"token-exact ideal {r['ideal_hit_rate']:.0%}")
        parts.append(f"{engine_label(r['engine'])} {r['cache_hit_rate']:.0%} ({ideal})")
    text = f"At {top:.0%} shared, with its prefix cache on, " + " and ".join(parts) + " of prompt tokens came from the cache"
    off = sharing.filter(~pl.col("prefix_caching"))["cache_hit_rate"].drop_nulls()
    if off.len():
        text += ("; with the caches off every hit rate is 0%" if off.max() == 0 else
                 f"; with the caches off at most {off.max():.0%}")
    cache_on = sharing.filter(pl.col("prefix_caching"))
    pair = {f: g.sort("batch_time_s") for (f,), g in cache_on.group_by(["shared_fraction"])
            if g["engine"].n_unique() >= 2 and g["batch_time_s"].null_count() == 0}
    if top in pair:
        g = pair[top]
        fast, slow = g.row(0, named=True), g.row(-1, named=True)
        text += (f". {engine_label(fast['engine'])} finishes the batch {slow['batch_time_s'] / fast['batch_time_s']:.1f}× "
                 f"sooner than {engine_label(slow['engine'])} there")
        zero = pair.get(0.0)
        if zero is not None and top != 0.0:
            z = zero.row(0, named=True)
            ratio = zero["batch_time_s"].max() / zero["batch_time_s"].min()
            text += (f" and {ratio:.1f}× sooner with nothing shared, so sharing does not change which engine is faster"
                     if z["engine"] == fast["engine"] else
                     f", but {engine_label(z['engine'])} is {ratio:.1f}× faster with nothing shared: sharing changes "
                     "which engine is faster")
    return text + "."


def _prefix_bracket(g: pl.DataFrame, at: float) -> tuple[dict, dict] | None:
    """The measured points either side of ``at`` (the last below, the first at or above)."""
    lo, hi = g.filter(pl.col("shared_fraction") < at), g.filter(pl.col("shared_fraction") >= at)
    if lo.is_empty() or hi.is_empty():
        return None
    return lo.sort("shared_fraction").row(-1, named=True), hi.sort("shared_fraction").row(0, named=True)


def caching_gain_caption(gain: pl.DataFrame, thresholds: dict) -> str:
    """What the caching-gain figure shows, per engine: batch time off ÷ on with nothing shared and at the most shared
    fraction, and what the threshold test made of it."""
    parts = []
    for (engine,), g in gain.sort(_prefix_engine_order(), "shared_fraction").group_by(["engine"], maintain_order=True):
        first, last = g.row(0, named=True), g.row(-1, named=True)
        th = thresholds.get(engine)
        s = (f"{engine_label(engine)}: batch time {_prefix_times(first['batch_speedup'])} with the cache at "
             f"{first['shared_fraction']:.0%} shared, {_prefix_times(last['batch_speedup'])} at {last['shared_fraction']:.0%}")
        if th is not None and th.verdict == "inconclusive":
            s += (f" — but at {first['shared_fraction']:.0%} nothing can be reused, so a difference that size is not "
                  "the cache's doing")
        elif th is not None and th.verdict == "threshold" and (b := _prefix_bracket(g, th.at)):
            s += (f", the saving jumping from {b[0]['time_saved']:+.0%} at {b[0]['shared_fraction']:.0%} to "
                  f"{b[1]['time_saved']:+.0%} at {b[1]['shared_fraction']:.0%}")
        elif th is not None and th.verdict == "smooth":
            s += ", rising with no jump"
        parts.append(s)
    if not parts:
        return "Measured: no shared fraction was run with the prefix cache both on and off."
    return "Above 1× the cache helps: " + "; ".join(parts) + "."


def multi_turn_caption(by_turn: pl.DataFrame) -> str:
    """What the multi-turn figure shows: the last turn's cached share and TTFT, cache on against off, per engine."""
    parts, last_turn = [], None
    for (engine,), g in by_turn.sort(_prefix_engine_order(), "turn").group_by(["engine"], maintain_order=True):
        on, off = g.filter(pl.col("prefix_caching")), g.filter(~pl.col("prefix_caching"))
        if on.is_empty():
            continue
        last = on.row(-1, named=True)
        last_turn = last["turn"]
        share = ("no cached-token count" if last["cached_share"] is None else
                 f"{last['cached_share']:.0%} of its prompt cached")
        o = off.filter(pl.col("turn") == last["turn"])
        ttft = ""
        if o.height and last["ttft_mean_ms"]:
            t = _prefix_times(o["ttft_mean_ms"][0] / last["ttft_mean_ms"])
            ttft = f", mean TTFT {t} {'against' if t.startswith('unchanged') else 'than with'} the cache off"
        parts.append(f"{engine_label(engine)} {share}{ttft}")
    if not parts:
        return "Measured: no multi-turn run with the prefix cache on."
    off_all = by_turn.filter(~pl.col("prefix_caching"))["cached_tokens"].drop_nulls()
    tail = "; with the caches off no token came from the cache" if off_all.len() and off_all.max() == 0 else ""
    return f"Last turn (turn {last_turn}), prefix cache on: " + "; ".join(parts) + tail + "."


def reuse_sentences(reuse: pl.DataFrame) -> str:
    """Per engine with its cache on: how many requests found the prefix cached at each shared fraction, in all and
    among the first wave sent together at the start; then, computed, what that says about when each cache shares."""
    on = reuse.filter(pl.col("prefix_caching") & (pl.col("shared_fraction") > 0) & pl.col("requests_hit").is_not_null())
    if on.is_empty():
        return "*No per-request cached-token counts with the cache on: which requests reused the prefix is not known.*"
    lines, first_wave = [], {}
    for (engine,), g in on.sort(_prefix_engine_order(), "shared_fraction").group_by(["engine"], maintain_order=True):
        pts = ", ".join(f"{r['shared_fraction']:.0%} shared: {r['requests_hit']} of {r['requests']} "
                        f"({r['first_wave_hit']} of the {r['first_wave']} sent first)" for r in g.iter_rows(named=True))
        lines.append(f"- {engine_label(engine)}, cache on — requests that found the prefix in the cache: {pts}.")
        first_wave[engine] = g.row(-1, named=True)
    radix = [e for e in first_wave if FAMILY.get(e) == "sglang"]
    if radix and "vllm" in first_wave:
        r, v = first_wave[radix[0]], first_wave["vllm"]
        if r["first_wave_hit"] < v["first_wave_hit"]:
            later_all = (r["requests_hit"] - r["first_wave_hit"] == r["requests"] - r["first_wave"]
                         and r["cached_tokens_per_hit"] == r["shared_prefix_tokens"])
            lines.append(
                f"- At {r['shared_fraction']:.0%} shared, {r['first_wave_hit']} of the {r['first_wave']} requests "
                f"{engine_label(radix[0])} received together at the start found the prefix in its radix cache; vLLM "
                f"reused its blocks for {v['first_wave_hit']} of {v['first_wave']}. In these runs the requests that "
                f"reached {engine_label(radix[0])} while the prefix was still being computed computed it again"
                + (f"; every later request reused all {r['shared_prefix_tokens']:,} prefix tokens." if later_all else "."))
    return "\n".join(lines)


def prefix_verdicts(claims: pl.DataFrame, sharing: pl.DataFrame, gain: pl.DataFrame, thresholds: dict,
                    by_turn: pl.DataFrame, reuse: pl.DataFrame | None = None, threshold: float = 0.3) -> list:
    """Report 05's verdicts: each of the article's claims in :data:`PREFIX_CLAIMS` against the measured runs, the
    threshold test, and multi-turn reuse (found). Computed from the frames the report shows."""
    from kvlab.verdicts import Verdict

    stmt = {r["claim_id"]: r["statement"] for r in claims.iter_rows(named=True)}
    on = sharing.filter(pl.col("prefix_caching")) if sharing.height else sharing
    hits = on.filter(pl.col("cache_hit_rate").is_not_null()) if on.height else on
    out = []

    def off_hit(engine: str, f: float) -> str:
        o = sharing.filter((pl.col("engine") == engine) & ~pl.col("prefix_caching") & (pl.col("shared_fraction") == f))
        v = o["cache_hit_rate"].drop_nulls()
        return f"; {v[0]:.0%} with it off" if v.len() else ""

    if s := stmt.get("vllm_no_prefix_sharing"):
        claim = f"“{s}” — vLLM's CPU build, automatic prefix caching on (its default)"
        v = hits.filter(pl.col("engine") == "vllm") if hits.height else hits
        if v.is_empty():
            out.append(Verdict(claim, "cannot be tested here", "measured", "no vLLM run with its prefix cache on"))
        else:
            r = v.sort("shared_fraction").row(-1, named=True)
            out.append(Verdict(claim, "contradicted" if r["cache_hit_rate"] > 0 else "reproduced", "measured",
                               f"{r['cache_hit_rate']:.0%} of prompt tokens served from vLLM's cache at "
                               f"{r['shared_fraction']:.0%} shared{off_hit('vllm', r['shared_fraction'])}"))

    radix = [e for e in (hits["engine"].unique(maintain_order=True).to_list() if hits.height else [])
             if FAMILY.get(e) == "sglang"]
    if s := stmt.get("sglang_radix_sharing"):
        share, suffix = s.split(" and computes", 1) if " and computes" in s else (s, None)
        if not radix:
            out.append(Verdict(f"“{s}”", "cannot be tested here", "measured",
                               "no SGLang-family run with its radix cache on reported a hit count"))
        else:
            e = radix[0]
            lab = engine_label(e)
            r = hits.filter(pl.col("engine") == e).sort("shared_fraction").row(-1, named=True)
            out.append(Verdict(f"“{share}” — {lab}, SGLang's JAX runtime with the same radix cache",
                               "reproduced" if r["cache_hit_rate"] > 0 else "contradicted", "measured",
                               f"{r['cache_hit_rate']:.0%} of prompt tokens served from its radix cache at "
                               f"{r['shared_fraction']:.0%} shared{off_hit(e, r['shared_fraction'])}"))
            if suffix:
                rr = None
                if reuse is not None and reuse.height:
                    q = reuse.filter((pl.col("engine") == e) & pl.col("prefix_caching")
                                     & (pl.col("shared_fraction") == r["shared_fraction"]))
                    rr = q.row(0, named=True) if q.height and q["requests_hit"][0] is not None else None
                if rr is not None:
                    possible = rr["requests"] - rr["n_runs"]  # every request but each run's first
                    ok = rr["requests_hit"] >= possible
                    first = "none" if rr["first_wave_hit"] == 0 else f"{rr['first_wave_hit']}"
                    number = (f"{rr['requests_hit']} of {rr['requests']} requests reused the {rr['shared_prefix_tokens']:,}-token "
                              f"prefix at {r['shared_fraction']:.0%} shared ({possible} could); {first} of the "
                              f"{rr['first_wave']} sent together first")
                    setting = f", requests arriving {rr['first_wave'] // rr['n_runs']} at a time"
                else:
                    ok = r["cache_hit_rate"] >= 0.95 * r["ideal_hit_rate"]
                    number = (f"{r['cache_hit_rate']:.0%} of prompt tokens from the cache at {r['shared_fraction']:.0%} "
                              f"shared against {r['ideal_hit_rate']:.0%} if every request after the first reused it")
                    setting = ""
                out.append(Verdict(f"“…and computes{suffix}” — {lab}{setting}", "reproduced" if ok else "contradicted",
                                   "measured", number))

    if s := stmt.get("shared_prefix_threshold"):
        both = {f: g for (f,), g in on.group_by(["shared_fraction"])
                if g["engine"].n_unique() >= 2 and g["batch_time_s"].null_count() == 0} if on.height else {}
        above = {f: g for f, g in both.items() if f >= threshold}
        engines = " against ".join(engine_label(e) for e in _prefix_ordered(on)) if on.height else ""
        claim = (f"“{s}” — its direction on this host: {engines}, caches on (engine speed on CPU decides as much as "
                 "the cache)")
        if not above:
            out.append(Verdict(claim, "cannot be tested here", "measured",
                               f"no shared fraction ≥ {threshold:.0%} measured with two engines"))
        else:
            wins = {f: g.sort("batch_time_s").row(0, named=True)["engine"] for f, g in above.items()}
            ratios = {f: g["batch_time_s"].max() / g["batch_time_s"].min() for f, g in above.items()}
            winners = set(wins.values())
            if len(winners) == 1:
                w = winners.pop()
                lo, hi = min(ratios.values()), max(ratios.values())
                span = f"{lo:.1f}×" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f}×"
                fr = [f"{f:.0%}" for f in sorted(above)]
                fr = ", ".join(fr[:-1]) + " and " + fr[-1] if len(fr) > 1 else fr[0]
                number = f"{engine_label(w)} finishes the batch {span} sooner at {fr} shared"
                if 0.0 in both:
                    z = both[0.0]
                    z_fast = z.sort("batch_time_s")["engine"][0]
                    number += (f", {z['batch_time_s'].max() / z['batch_time_s'].min():.1f}× sooner at 0%" if z_fast == w
                               else f"; at 0% {engine_label(z_fast)} is "
                               f"{z['batch_time_s'].max() / z['batch_time_s'].min():.1f}× faster")
                outcome = "reproduced" if FAMILY.get(w) == "sglang" else "contradicted"
            else:
                number = "; ".join(f"{engine_label(wins[f])} faster at {f:.0%} ({ratios[f]:.2f}×)" for f in sorted(above))
                outcome = "contradicted"
            out.append(Verdict(claim, outcome, "measured", number))
        parts = []
        for engine, th in thresholds.items():
            if th.verdict == "no data":
                continue
            b = _prefix_bracket(gain.filter(pl.col("engine") == engine), th.at)
            if th.verdict == "inconclusive":
                parts.append(f"{engine_label(engine)}: inconclusive (on vs off already {abs(th.gain_at_zero):.0%} "
                             "apart at 0%, where nothing is reused)")
            elif th.verdict == "threshold" and b:
                parts.append(f"{engine_label(engine)}: saving jumps from {b[0]['time_saved']:+.0%} at "
                             f"{b[0]['shared_fraction']:.0%} to {b[1]['time_saved']:+.0%} at {b[1]['shared_fraction']:.0%} shared")
            elif th.verdict == "threshold":
                parts.append(f"{engine_label(engine)}: a jump near {th.at:.0%}")
            else:
                parts.append(f"{engine_label(engine)}: no jump, a steady rise (R² {th.r2_linear:.2f})")
        if parts:
            out.append(Verdict(f"Does what the prefix cache saves jump at {threshold:.0%} shared, as the article's "
                               "threshold implies?", "found", "measured", "; ".join(parts)))

    if by_turn is not None and by_turn.height:
        parts = []
        for (engine,), g in by_turn.sort(_prefix_engine_order(), "turn").group_by(["engine"], maintain_order=True):
            o = g.filter(pl.col("prefix_caching"))
            if o.is_empty() or o["cached_share"][-1] is None:
                continue
            last = o.row(-1, named=True)
            f = g.filter(~pl.col("prefix_caching") & (pl.col("turn") == last["turn"]))
            ttft = (f", TTFT {_prefix_times(f['ttft_mean_ms'][0] / last['ttft_mean_ms'])}" if f.height and last["ttft_mean_ms"]
                    else "")
            parts.append(f"{engine_label(engine)} {last['cached_share']:.0%}{ttft}")
        if parts:
            out.append(Verdict("Multi-turn RAG (the article's example 1): how much of the last turn's prompt the cache "
                               "serves, and its time to first token against the cache off", "found", "measured",
                               f"turn {last['turn']}: " + "; ".join(parts)))
    return out


def _prefix_ordered(frame: pl.DataFrame) -> list[str]:
    return frame.select("engine").unique().sort(_prefix_engine_order())["engine"].to_list()


# --------------------------------------------------------------------------- what-if model (04): sentences, captions, verdicts

def setup_phrase(model: str, gpu: str, tp: int) -> str:
    """'Kimi-K3 on 8× B300': a configuration named by its values."""
    return f"{model} on {tp}× {gpu}"


def _config_name(label: str) -> str:
    """A curve's configuration as reports name it: 'vllm TP8' → 'vLLM TP8', 'sglang TP8+DCP8' → 'SGLang TP8+DCP8'."""
    engine, _, rest = label.partition(" ")
    return f"{engine_label(engine)} {rest}".strip()


def _implausible(fit, short: bool = False) -> list[str]:
    """The fitted parameters outside their physically sane ranges, each in words with its value and (unless
    ``short``) the plausible range."""
    from kvlab.perfmodel.calibrate import SANE_RANGES

    if fit.hardware == "CPU":
        return []
    p, out = fit.params, []
    for name in fit.free:
        lo, hi = SANE_RANGES[name]
        v = getattr(p, name)
        if lo <= v <= hi:
            continue
        if name == "prefill_efficiency":
            text, rng = f"prefill at {v:.1%} of dense peak", f" (plausible: {lo:.0%}–{hi:.0%})"
        elif name == "bandwidth_efficiency":
            text, rng = f"decode at {v:.1%} of peak memory bandwidth", f" (plausible: {lo:.0%}–{hi:.0%})"
        else:
            text = f"DCP at {v * 1e6:,.0f} µs per layer and step"
            rng = f" (plausible for NVLink collectives: {lo * 1e6:g}–{hi * 1e6:g} µs)"
        out.append(text if short else text + rng)
    return out


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
    """Held-out fits that still name the published winner at their point's context: (right, held-out points
    that have another engine's published time at the same context)."""
    obs = {(r["engine"], r["context_tokens"]): r["observed_s"] for r in fit.residuals.iter_rows(named=True)}
    right = total = 0
    for r in fit.loo.iter_rows(named=True):
        others = [t for (e, c), t in obs.items() if c == r["context_tokens"] and e != r["engine"]]
        if not others:
            continue
        total += 1
        right += (r["loo_modelled_s"] < min(others)) == (r["observed_s"] < min(others))
    return right, total


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


def _ratio_at(model_df: pl.DataFrame, context: int, y: str = "batch_time_s") -> tuple[str, float] | None:
    """(faster configuration, slower ÷ faster) at ``context`` when ``model_df`` holds exactly two curves there."""
    d = model_df.filter(pl.col("context_tokens") == context).sort(y)
    if d.height != 2:
        return None
    return d["config"][0], d[y][1] / d[y][0]


def curves_caption(model_df: pl.DataFrame, crossover: float | None, published: pl.DataFrame | None = None,
                   xrange: tuple[float, float] | None = None) -> str:
    """One sentence for the modelled batch-time curves: who is faster at each end, where they cross (and the
    shaded range of the crossover over the unpinned assumptions, ``xrange``), which parts are extrapolations."""
    from kvlab.perfmodel.figures import calibrated_ranges

    first = model_df.row(0, named=True)
    who = setup_phrase(first["model"], first["gpu"], first["tp"])
    lo, hi = model_df["context_tokens"].min(), model_df["context_tokens"].max()
    ends, winners = [], set()
    for c in (lo, hi):
        r = _ratio_at(model_df, c)
        if r:
            ends.append(f"{_config_name(r[0])} is {r[1]:.2f}× faster at {tokens_label(c)}")
            winners.add(r[0])
    band = (f" (shaded: {k_label(xrange[0])}–{k_label(xrange[1])} over the assumptions the data cannot pin)"
            if xrange else "")
    cross = (f"the curves cross at {approx_tokens(crossover)}{band}" if crossover is not None and lo <= crossover <= hi
             else f"the curves cross between {tokens_label(lo)} and {tokens_label(hi)}" if len(winners) > 1
             else f"the curves do not cross between {tokens_label(lo)} and {tokens_label(hi)}")
    ranges = calibrated_ranges(model_df, published)
    if ranges:
        spans = ", ".join(sorted({f"{tokens_label(a)}–{tokens_label(b)}" for a, b in ranges.values()}))
        lines = (f"solid lines span the published {spans} the fit rests on (circles: the article's times), dashed "
                 "lines are extrapolations")
    else:
        lines = "every line is dashed: no published point for this configuration, so all of it is an extrapolation"
    body = "; ".join(ends[:1] + [cross] + ends[1:])
    misfits = []
    for (cfg,), g in model_df.group_by(["config"], maintain_order=True):
        bad = g.filter(~pl.col("fits"))
        if bad.height:
            misfits.append(f"{_config_name(cfg)} " + ("at every context" if bad.height == g.height else
                                                      f"from {tokens_label(bad['context_tokens'].min())}"))
    flags = f"; crosses: does not fit in memory ({', '.join(misfits)})" if misfits else ""
    return f"Modelled for {who}: {body}; {lines}{flags}."


def throughput_caption(model_df: pl.DataFrame, workload) -> str:
    """One sentence for the modelled throughput curves: how far each configuration's output rate falls."""

    lo, hi = model_df["context_tokens"].min(), model_df["context_tokens"].max()
    parts = []
    for (cfg,), g in model_df.group_by(["config"], maintain_order=True):
        a = g.filter(pl.col("context_tokens") == lo)["output_tokens_per_s"][0]
        b = g.filter(pl.col("context_tokens") == hi)["output_tokens_per_s"][0]
        parts.append(f"{_config_name(cfg)} falls {a / b:.1f}× ({a:.3g} → {b:.3g} tokens/s)")
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
    flags = [f"{_config_name(r['config'])} does not fit in memory" for r in d.iter_rows(named=True) if not r["fits"]]
    extra = (f" — an extrapolation {c / calibrated_to:.1f}× beyond the largest published context "
             f"({tokens_label(calibrated_to)})" if calibrated_to and c > calibrated_to else "")
    spread = ""
    if ratio_range:
        lo, hi = ratio_range  # vLLM's time / SGLang's: above 1, SGLang faster
        def side(r: float) -> str:
            return f"SGLang {r:.2f}× faster" if r >= 1 else f"vLLM {1 / r:.2f}× faster"
        spread = (f"; over the assumption sets the four points cannot choose among it ranges from {side(lo)} to "
                  f"{side(hi)}" + (" — the winner itself is not pinned" if lo < 1 < hi else ""))
    return (f"- At {tokens_label(c)} ({c:,} tokens) the model gives {_config_name(fast['config'])} "
            f"**{slow['batch_time_s'] / fast['batch_time_s']:.2f}×** the speed of {_config_name(slow['config'])} "
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
    if modelled:
        stated = "; ".join(c["statement"] for c in speed.iter_rows(named=True))
        rng = sens["crossover_tokens"].drop_nulls()
        within = f" (range {k_label(rng.min())}–{k_label(rng.max())})" if rng.len() else ""
        out.append(Verdict(f"{stated}: so the winner changes between {tokens_label(lo)} and {tokens_label(hi)} — as kvlab's model "
                           "fitted to the same four points sees it (not an independent check)",
                           "reproduced" if agree and inside else "contradicted", "modelled",
                           f"crossover {approx_tokens(crossover)}{within}" if crossover
                           else f"no crossover; {', '.join(modelled)}"))
    if fit.loo.height:
        right, total = winners_held_out(fit)
        worst = fit.loo.sort(pl.col("loo_error_pct").abs(), descending=True).row(0, named=True)
        out.append(Verdict(f"Held out in turn, is each published point predicted from the other {fit.loo.height - 1} "
                           "(leave-one-out), and does its context keep its winner?", "found", "modelled",
                           f"{right} of {total} winners right; mean error {fit.loo_mean_abs_pct:.1f}% (worst "
                           f"{abs(worst['loo_error_pct']):.1f}%, {engine_label(worst['engine'])} at "
                           f"{tokens_label(worst['context_tokens'])})"))
    xo = sens["crossover_tokens"].drop_nulls()
    if xo.len():
        out.append(Verdict("Where is the crossover over what the article leaves open (batch size, output length, "
                           "expert reads, cached MLA width), each refitted to the same four points?", "found",
                           "modelled", f"{k_label(xo.min())}–{k_label(xo.max())} tokens over {sens.height} "
                           "assumption sets"))
    bad = _implausible(fit)
    out.append(Verdict(f"Are the fitted parameters physically plausible for the article's {fit.hardware} host?", "found",
                       "modelled", "no: " + "; ".join(_implausible(fit, short=True)) if bad else "yes, every one in range"))
    flagged = head.filter(pl.col("outside_pool_gib_per_gpu") < pl.col("outside_need_gib_per_gpu"))
    if head["mem_util"].n_unique() > 1 and flagged.height:
        hi_u, lo_u = flagged["mem_util"].max(), head["mem_util"].min()
        r = flagged.row(0, named=True)
        out.append(Verdict(f"{hi_u:g} runs out of memory where {lo_u:g} does not (the article's memory study) — can the "
                           "model tell?", "cannot be tested here", "modelled",
                           f"{hi_u:g} leaves {r['outside_pool_gib_per_gpu']:.1f} GiB/GPU outside the target, under an "
                           f"assumed {r['outside_need_gib_per_gpu']:.1f} GiB taken from this very claim"))
    return out


# --------------------------------------------------------------------------- engine choice (06): captions and verdicts

def prefix_caption(sharing: pl.DataFrame) -> str:
    """One sentence for the measured prefix-sharing figure: each engine's cache-hit rate at the largest shared
    fraction against its ideal, then which engine's batch time is shorter there and with nothing to share."""
    on = sharing.filter(pl.col("prefix_caching").fill_null(True))
    if on.is_empty():
        return "No measured run with a prefix cache on."
    top = on["shared_fraction"].max()
    hw = ", ".join(on["hardware"].unique(maintain_order=True))
    hits = []
    for r in on.filter(pl.col("shared_fraction") == top).sort("engine", descending=True).iter_rows(named=True):
        ideal = r["block_ideal_hit_rate"] if r["engine"] == "vllm" and r.get("block_ideal_hit_rate") is not None \
            else r["ideal_hit_rate"]
        kind = "whole-block ideal" if r["engine"] == "vllm" else "token-exact ideal"
        hit = "not available" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.0%}"
        hits.append(f"{engine_label(r['engine'])} {hit} ({kind} {ideal:.0%})")
    text = f"Measured on {hw}, prefix cache on, at shared fraction {top:g}: prompt tokens served from the cache — " \
           + ", ".join(hits)
    times = []
    for f in sorted({0.0, top}):
        d = on.filter(pl.col("shared_fraction") == f).sort("batch_time_s")
        if d["engine"].n_unique() >= 2:
            times.append((engine_label(d["engine"][0]), d["batch_time_s"][1] / d["batch_time_s"][0], f))
    if len({t[0] for t in times}) == 1:  # one engine shorter at both: say so once
        tail = f"{times[0][0]}'s median batch time is " + " and ".join(f"{r:.1f}× shorter at {f:g}" for _, r, f in times)
    else:
        tail = " and ".join(f"{e}'s median batch time is {r:.1f}× shorter at {f:g}" for e, r, f in times)
    return text + (f"; {tail}" if times else "") + "."


def concurrency_caption(conc: pl.DataFrame) -> str:
    """One sentence for the measured concurrency figure: at the largest in-flight count, throughput and TTFT of
    each engine, and whether every request completed."""
    if conc.is_empty():
        return "No measured concurrency run."
    top = conc["in_flight"].max()
    d = conc.filter(pl.col("in_flight") == top).sort("requests_per_s", descending=True)
    parts = [f"{engine_label(r['engine'])} completes {r['requests_per_s']:.3g} requests/s (mean TTFT "
             f"{r['ttft_mean_ms']:,.0f} ms)" for r in d.iter_rows(named=True)]
    ratio = (f" — {engine_label(d['engine'][0])} {d['requests_per_s'][0] / d['requests_per_s'][1]:.1f}× the throughput"
             if d.height >= 2 else "")
    sent, ok = int(conc["requests_sent"].sum()), int(conc["requests_ok"].sum())
    done = f"{ok:,} of {sent:,} requests sent completed" + (" (none failed)" if ok == sent else "")
    return (f"Measured on {', '.join(conc['hardware'].unique(maintain_order=True))} at {top} requests in flight: "
            + " and ".join(parts) + ratio + f"; {done}.")


def _at_largest_fraction(on: pl.DataFrame, engines) -> dict | None:
    d = on.filter(pl.col("engine").is_in(list(engines)) & pl.col("cache_hit_rate").is_not_null())
    if d.is_empty():
        return None
    return d.sort("shared_fraction").row(-1, named=True)


def engine_choice_verdicts(claims: pl.DataFrame, sharing: pl.DataFrame, conc: pl.DataFrame, w, tree, ev) -> list:
    """Report 06's verdicts: the KV-design article's claims against the measured runs where kvlab has them (each
    a claim's shape on this host: vLLM's CPU build against sglang-jax on CPU), then the tree's answer for this
    workload against the data's."""
    from kvlab.verdicts import Verdict

    on = sharing.filter(pl.col("prefix_caching").fill_null(True)) if not sharing.is_empty() else sharing
    by_id = {c["claim_id"]: c for c in claims.iter_rows(named=True)}
    out = []
    c = by_id.get("vllm_no_prefix_sharing")
    if c:
        r = _at_largest_fraction(on, ["vllm"]) if not on.is_empty() else None
        out.append(Verdict(f"{c['statement']} — vLLM as measured here, prefix cache on (its default)", "cannot be tested here", "measured",
                           "no measured vLLM prefix-sharing run") if r is None else
                   Verdict(f"{c['statement']} — vLLM as measured here ({r['hardware'].split(' (')[0]}), prefix cache on "
                           "(its default)", "contradicted" if r["cache_hit_rate"] > 0 else "reproduced", "measured",
                           f"{r['cache_hit_rate']:.0%} of prompt tokens from vLLM's cache at shared fraction "
                           f"{r['shared_fraction']:g}"))
    c = by_id.get("sglang_radix_sharing")
    if c:
        radix = [e for e in (on["engine"].unique().to_list() if not on.is_empty() else []) if FAMILY.get(e) == "sglang"]
        r = _at_largest_fraction(on, radix) if radix else None
        out.append(Verdict(c["statement"], "cannot be tested here", "measured", "no measured SGLang-family run")
                   if r is None else
                   Verdict(f"{c['statement']} — does it share? Measured on {engine_label(r['engine'])}, its radix "
                           "cache on; the gap to the ideal is what it recomputed",
                           "reproduced" if r["cache_hit_rate"] > 0 else "contradicted", "measured",
                           f"{r['cache_hit_rate']:.0%} of prompt tokens from its cache at shared fraction "
                           f"{r['shared_fraction']:g} (token-exact ideal {r['ideal_hit_rate']:.0%})"))
    c = by_id.get("shared_prefix_threshold")
    if c:
        at = c["stated_value"]
        pairs = []
        for f in sorted(on.filter(pl.col("shared_fraction") >= at)["shared_fraction"].unique().to_list()) \
                if not on.is_empty() else []:
            d = on.filter(pl.col("shared_fraction") == f).sort("batch_time_s")
            if d["engine"].n_unique() >= 2:
                pairs.append((f, d["engine"][0], d["engine"][1], d["batch_time_s"][1] / d["batch_time_s"][0]))
        if not pairs:
            out.append(Verdict(c["statement"], "cannot be tested here", "measured",
                               f"no shared fraction ≥ {at:g} measured with two engines"))
        else:
            wins = {FAMILY.get(p[1], p[1]) for p in pairs if p[3] >= MIN_MARGIN}
            f, best, other, m = pairs[-1]
            zero = on.filter(pl.col("shared_fraction") == 0).sort("batch_time_s")
            z = (f" ({engine_label(zero['engine'][0])} {zero['batch_time_s'][1] / zero['batch_time_s'][0]:.1f}× at 0, "
                 "with nothing shared)" if zero["engine"].n_unique() >= 2 else "")
            outcome = "reproduced" if wins == {"sglang"} else "contradicted"  # vLLM wins, mixed, or no difference
            out.append(Verdict(f"{c['statement']} — its direction on this host: {engine_label(best)} against "
                               f"{engine_label(other)}, each with its prefix cache on", outcome, "measured",
                               (f"{engine_label(best)} {m:.1f}× shorter median batch time at {f:g}" if m >= MIN_MARGIN
                                else f"no difference at {f:g} ({m:.2f}×, under {MIN_MARGIN - 1:.0%})") + z))
    c = by_id.get("high_concurrency")
    if c:
        at = c["stated_value"]
        hi = conc.filter(pl.col("in_flight") >= at) if not conc.is_empty() else conc
        top = hi.filter(pl.col("in_flight") == hi["in_flight"].max()).sort("requests_per_s", descending=True) \
            if not hi.is_empty() else hi
        if top.is_empty() or top["engine"].n_unique() < 2:
            out.append(Verdict(c["statement"], "cannot be tested here", "measured",
                               f"no run with ≥ {at:g} requests in flight measured with two engines"))
        else:
            a, b = top.row(0, named=True), top.row(1, named=True)
            m = a["requests_per_s"] / b["requests_per_s"]
            ok = m >= MIN_MARGIN and FAMILY.get(a["engine"]) == "vllm"
            out.append(Verdict(f"{c['statement']} — its direction on this host: {engine_label(a['engine'])} against "
                               f"{engine_label(b['engine'])}, distinct prompts", "reproduced" if ok else "contradicted",
                               "measured",
                               (f"{engine_label(a['engine'])} {m:.1f}× the completed requests/s at {a['in_flight']} in "
                                "flight" + (", every request completed" if a["requests_failed"] == b["requests_failed"] == 0
                                            else f" ({a['requests_ok']}/{a['requests_sent']} and {b['requests_ok']}/"
                                                 f"{b['requests_sent']} completed)")) if m >= MIN_MARGIN else
                               f"no difference at {a['in_flight']} in flight ({m:.2f}×, under {MIN_MARGIN - 1:.0%})"))
    out.append(recommendation_verdict(w, tree, ev))
    return out


def recommendation_verdict(w, tree, ev):
    """The tree's answer for this workload against the data's: reproduced / contradicted when a measured or modelled
    factor decides, 'cannot be tested here' when the data's engine is only the tie-break."""
    from kvlab.verdicts import Verdict

    claim = (f"For this workload ({w.context_tokens:,}-token context, {w.shared_fraction:.0%} shared, {w.concurrency} "
             f"in flight, {w.model}) the decision tree says {engine_label(tree.engine)}: do kvlab's data here agree?")
    if ev.decided_by == "tie-break":
        measured = any(f.source == "measured" and f.n_engines >= 2 for f in ev.factors)
        return Verdict(claim, "cannot be tested here", "measured" if measured else "modelled",
                       f"nothing separates the engines here; {engine_label(ev.engine)} only as the tie-break")
    f = ev.deciding
    number = (f"data: {engine_label(f.winner)}, {f.metric.split(', each')[0]} ({f.experiment})"
              if f is not None and f.winner else
              f"{engine_label(ev.engine)}: {f.finding.split(';')[0]}" if f is not None else engine_label(ev.engine))
    return Verdict(claim, "reproduced" if ev.engine == tree.engine else "contradicted", ev.decided_by, number)


def prefix_citation_note(claims: pl.DataFrame) -> str:
    """Where the claims come from, the document named once and the sections after it."""
    cites = claims["citation"].drop_nulls().unique(maintain_order=True).to_list() if "citation" in claims.columns else []
    if not cites:
        return "*No citation recorded for these claims.*"
    docs: dict[str, list[str]] = {}
    for c in cites:
        head, sep, tail = c.rpartition("), ")
        doc, part = (head + ")", tail) if sep else (c, "")
        docs.setdefault(doc, []).append(part)
    return "Source: " + "; ".join(f"{d}" + (f" — {', '.join(p for p in parts if p)}" if any(parts) else "")
                                  for d, parts in docs.items()) + "."


# --------------------------------------------------------------------------- throughput decay (02) and memory study (03)

#: The definitions a stated ratio is checked under, as a reader names them.
DEFINITION_NAMES: dict[str, str] = {
    "time_ratio": "T(slower) ÷ T(faster)",
    "percent_less_time": "1 + time saved ÷ T(slower)",
    "batch_time_ratio": "requests/s, short ÷ long context",
    "prompt_tokens_per_s_ratio": "prompt tokens/s, short ÷ long context",
}


def _change(factor: float | None, noun: str, bold: bool = False) -> str:
    """A decay factor (throughput at the short context ÷ at the long one) as a direction and size:
    2.94 → 'requests/s falls 2.94×', 0.94 → 'prompt tokens/s rises 1.06×'."""
    if factor is None:
        return f"{noun}: not available"
    return f"{noun} {_direction(factor, bold)}".strip()


def _direction(factor: float, bold: bool = False) -> str:
    """2.94 → 'falls 2.94×', 0.94 → 'rises 1.06×', 1.0 → 'stays the same'."""
    b = "**" if bold else ""
    if abs(factor - 1) < 0.005:
        return f"stays {b}the same{b}"
    return f"falls {b}{factor:.2f}×{b}" if factor > 1 else f"rises {b}{1 / factor:.2f}×{b}"


def _scaled_span(r: dict) -> str:
    """' (scaled contexts: 1,024 → 3,200 tokens)' for a decay row whose contexts were scaled down, else ''."""
    scaled = scaled_context(r["context_from"], r.get("c_from")) != r["context_from"] or \
        scaled_context(r["context_to"], r.get("c_to")) != r["context_to"]
    return f" (scaled contexts: {r['c_from']:,} → {r['c_to']:,} tokens)" if scaled else ""


def _relative(new: float, old: float, more: str = "higher", less: str = "lower") -> str:
    """``new`` against ``old`` as a direction and a percentage: '29% longer', '1.6% higher', 'the same'."""
    ratio = new / old
    if ratio == 1:
        return "the same"
    pct = abs(ratio - 1)
    return f"{pct:.1%} {more if ratio > 1 else less}" if pct < 0.1 else f"{pct:.0%} {more if ratio > 1 else less}"


def _retries_by_setting(stats: pl.DataFrame, settings: list[float]) -> str:
    """'0 at 0.92 (4 runs) and 1 at 0.95 (2 runs: sglang-jax at 200K (6,400 tok))', failed runs added when any."""
    parts, failed = [], []
    for u in settings:
        s = stats.filter(pl.col("mem_util") == u)
        where = [f"{r['engine']} at {scaled_context(r['context_label'], r.get('context_tokens'))}"
                 for r in s.filter(pl.col("retries") > 0).iter_rows(named=True)]
        runs = int(s["runs"].sum())
        parts.append(f"{int(s['retries'].sum())} at {u:g} ({runs} run{'' if runs == 1 else 's'}"
                     + (f": {', '.join(where)}" if where else "") + ")")
        n_failed = int(s["runs_failed"].sum())
        if n_failed:
            failed.append(f"{n_failed} at {u:g}")
    return " and ".join(parts) + ("; failed runs: " + ", ".join(failed) if failed else "; no run failed")


def _stats_row(stats: pl.DataFrame, r: dict, mem_util: float) -> dict | None:
    """The memory-study row of ``r``'s engine and context at ``mem_util``."""
    hit = stats.filter((pl.col("engine") == r["engine"]) & (pl.col("context_tokens") == r["context_tokens"])
                       & (pl.col("mem_util") == mem_util))
    return hit.row(0, named=True) if hit.height else None


def _implied_phrase(row: dict) -> str:
    """What one definition makes of the table: 'requests/s falls 2.94×', 'T(slower) ÷ T(faster) gives 1.50×'."""
    d, v = row["definition"], row["implied_value"]
    if v is None:
        return f"{DEFINITION_NAMES.get(d, d)} cannot be computed"
    if d == "batch_time_ratio":
        return _change(v, "requests/s")
    if d == "prompt_tokens_per_s_ratio":
        return _change(v, "prompt tokens/s")
    if v < 0:
        return f"{DEFINITION_NAMES.get(d, d)} gives {-v:.2f}× for the other engine"
    return f"{DEFINITION_NAMES.get(d, d)} gives {v:.2f}×"


def decay_table(decay: pl.DataFrame):
    """The decay factors as a reader's table: batch time at both contexts and which way each throughput goes."""
    from kvlab import tables

    if decay.is_empty():
        return tables.table(decay.select("engine"))
    r0 = decay.row(0, named=True)
    lo, hi = r0["context_from"], r0["context_to"]
    frame = decay.select(
        "engine", "t_from_s", "t_to_s",
        pl.col("batch_time_ratio").map_elements(_direction, return_dtype=pl.String).alias("requests_per_s"),
        pl.col("prompt_tokens_per_s_ratio").map_elements(_direction, return_dtype=pl.String).alias("prompt_tokens_per_s"),
    )
    span = _scaled_span(r0).strip()
    return tables.table(frame, {"engine": "engine", "t_from_s": f"batch time at {lo} (s)",
                                "t_to_s": f"batch time at {hi} (s)", "requests_per_s": f"requests/s, {lo} → {hi}",
                                "prompt_tokens_per_s": f"prompt tokens/s, {lo} → {hi}"},
                        caption=span.strip("()").capitalize() if span else None)


def decay_caption(decay: pl.DataFrame, label: str, measure: str) -> str:
    """One sentence for a throughput-against-context figure: how far each engine's ``measure`` falls between the
    decay's two contexts, which engine holds up better, and who is ahead at each end."""
    if decay.is_empty():
        return f"{label.capitalize()}: no engine has runs at both contexts."
    d = decay.sort("batch_time_ratio", descending=True)
    r0 = d.row(0, named=True)
    span = f"from {scaled_context(r0['context_from'], r0['c_from'])} to {scaled_context(r0['context_to'], r0['c_to'])}"
    parts, verb = [], None
    for r in d.iter_rows(named=True):  # 'falls 2.94× for vLLM and 1.49× for SGLang': the verb said once if shared
        text = _direction(r["batch_time_ratio"])
        word = text.split(" ")[0]
        parts.append(f"{text if word != verb else text.split(' ', 1)[1]} for {engine_label(r['engine'])}")
        verb = word
    falls = " and ".join(parts)
    text = f"{label.capitalize()}: {span}, {measure} {falls}"
    if d.height > 1:
        best = d.row(-1, named=True)["engine"]
        first = d.sort("t_from_s")["engine"][0]
        last = d.sort("t_to_s")["engine"][0]
        ahead = (f"{engine_label(first)} is ahead at both ends" if first == last else
                 f"the lines cross: {engine_label(first)} ahead at {r0['context_from']}, "
                 f"{engine_label(last)} at {r0['context_to']}")
        text += f" — {engine_label(best)}'s throughput holds up better; {ahead}"
    return text + "."


def claim_labels(check: pl.DataFrame, claims: pl.DataFrame | None = None) -> dict[str, str]:
    """A short name per stated ratio ('vLLM 1.5× faster at 64K', 'vLLM falls 3.29× 64K→200K'); the claim id when
    ``claims`` (with the contexts) is not given."""
    out = {}
    rows = {r["claim_id"]: r for r in claims.iter_rows(named=True)} if claims is not None else {}
    for cid, kind, engine, v in check.select("claim_id", "kind", "engine", "stated_value").unique(
            maintain_order=True).iter_rows():
        c = rows.get(cid)
        if c is None:
            out[cid] = cid
        elif kind == "relative_speed":
            out[cid] = f"{engine_label(engine)} {v:g}× faster at {c['context_from']}"
        elif kind == "throughput_decay":
            out[cid] = f"{engine_label(engine)} falls {v:g}× {c['context_from']}→{c['context_to']}"
        else:
            out[cid] = cid
    return out


def consistency_table(check: pl.DataFrame, claims: pl.DataFrame | None = None):
    """Each stated ratio beside what the table implies under each definition, as a reader's table."""
    from kvlab import tables

    names = claim_labels(check, claims)
    frame = check.select(
        pl.col("claim_id").replace_strict(names, default=pl.col("claim_id")).alias("claim"),
        pl.col("definition").replace_strict(DEFINITION_NAMES, default=pl.col("definition")),
        "stated_value", "implied_value", "consistent")
    return tables.table(frame, {"claim": "claim", "definition": "definition", "stated_value": "stated (×)",
                                "implied_value": "the table implies (×)", "consistent": "consistent"})


def claims_caption(check: pl.DataFrame, claims: pl.DataFrame | None = None) -> str:
    """One sentence for the stated-vs-implied figure: which stated ratios the table reproduces, which it does not."""
    from kvlab.analysis import consistency_verdicts

    names = claim_labels(check, claims)
    v = consistency_verdicts(check)
    ok = v.filter(pl.col("consistent_under_any"))
    bad = v.filter(~pl.col("consistent_under_any"))
    text = f"Published: {ok.height} of the article's {v.height} stated ratios match its own table"
    if ok.height:
        by_def: dict[str, list[str]] = {}
        for r in ok.iter_rows(named=True):
            how = " or ".join(DEFINITION_NAMES.get(d, d) for d in r["consistent_definitions"])
            by_def.setdefault(how, []).append(names[r["claim_id"]])
        text += " — " + "; ".join(f"{' and '.join(c)}, read as {how}" for how, c in by_def.items())
    if bad.height:
        text += (f"; {bad.height} match under no definition checked (hatched, ✗): "
                 + ", ".join(f"{names[r['claim_id']]} (table: {r['implied_by_time_ratio']:.2f}×)"
                             for r in bad.iter_rows(named=True)))
    return text + "."


def _stand_in(engine: str, present: list[str], family: dict[str, str] | None = None) -> str | None:
    """The measured engine that stands for a claim's ``engine``: itself, the one ``family`` names, or the first
    measured engine of its family (sglang → sglang-jax)."""
    if engine in present:
        return engine
    if family and family.get(engine) in present:
        return family[engine]
    return next((e for e in present if e.startswith(engine + "-")), None)


def decay_claim_verdicts(claims: pl.DataFrame, check: pl.DataFrame, decay_published: pl.DataFrame,
                         decay_measured: pl.DataFrame | None = None, engine_family: dict[str, str] | None = None) -> list:
    """Each throughput-decay claim against the document's own table (consistent under any definition checked), then
    the claims' shared shape — which engine's throughput holds up better — in the table and, where measured runs
    hold both engines (or their stand-ins) at the two contexts, on this host."""
    from kvlab.verdicts import Verdict

    dec = claims.filter((pl.col("kind") == "throughput_decay") & pl.col("stated_value").is_not_null())
    out = []
    for c in dec.iter_rows(named=True):
        lo, hi, e = c["context_from"], c["context_to"], c["engine"]
        rows = check.filter(pl.col("claim_id") == c["claim_id"])
        pub = decay_published.filter(pl.col("engine") == e)
        if pub.is_empty() or rows.is_empty():
            out.append(Verdict(c["statement"], "cannot be tested here", "published",
                               f"no table rows for {engine_label(e)} at {lo} and {hi}"))
            continue
        ok = bool(rows["consistent"].fill_null(False).any())
        out.append(Verdict(f"{c['statement']} (the article's own table)", "reproduced" if ok else "contradicted",
                           "published", f"table: {_change(pub['batch_time_ratio'][0], 'requests/s')} from {lo} to {hi} "
                                        f"(stated {c['stated_value']:g}×)"))
    if dec.height < 2:
        return out
    ranked = dec.sort("stated_value")  # the claimed-flatter engine first
    better, worse = ranked["engine"][0], ranked["engine"][-1]
    lo, hi = ranked["context_from"][0], ranked["context_to"][0]
    shape = f"{engine_label(better)}'s throughput holds up better than {engine_label(worse)}'s from {lo} to {hi}"

    def factors(decay: pl.DataFrame, a: str, b: str) -> tuple[float, float] | None:
        fa, fb = (decay.filter(pl.col("engine") == x)["batch_time_ratio"] for x in (a, b))
        return (fa[0], fb[0]) if len(fa) and len(fb) else None

    f = factors(decay_published, better, worse)
    if f:
        out.append(Verdict(f"{shape} — the two claims' shape, in the article's table",
                           "reproduced" if f[0] < f[1] else "contradicted", "published",
                           f"{engine_label(better)} falls {f[0]:.2f}×, {engine_label(worse)} {f[1]:.2f}×"))
    if decay_measured is not None and not decay_measured.is_empty():
        present = decay_measured["engine"].unique(maintain_order=True).to_list()
        a, b = _stand_in(better, present, engine_family), _stand_in(worse, present, engine_family)
        m = factors(decay_measured, a, b) if a and b else None
        if m:
            r = decay_measured.row(0, named=True)
            tokens = f"{r['c_from']:,} → {r['c_to']:,} tokens"
            stands = [f"{engine_label(x)} standing for {engine_label(y)}" for x, y in ((a, better), (b, worse)) if x != y]
            out.append(Verdict(
                f"{shape} — the claims' shape on this host ({lo} → {hi} run as {tokens}"
                + (f"; {', '.join(stands)}" if stands else "") + ")",
                "reproduced" if m[0] < m[1] else "contradicted", "measured",
                f"{engine_label(a)} falls {m[0]:.2f}×, {engine_label(b)} {m[1]:.2f}× ({tokens})"))
    return out


def measured_table_caption(frame: pl.DataFrame, mem_util: float | None = None) -> str:
    """'memory utilisation 0.92; contexts scaled ÷64: 64K = 1,024 tokens, 200K = 3,200 tokens' for a measured table."""
    parts = [f"memory utilisation {mem_util:g}"] if mem_util is not None else []
    scale = frame["scale_factor"].drop_nulls().max() if "scale_factor" in frame.columns else None
    if scale and scale != 1:
        pairs = frame.select("context_label", "context_tokens").unique().sort("context_tokens")
        parts.append(f"contexts scaled ÷{scale:g}: " + ", ".join(f"{lab} = {tok:,} tokens" for lab, tok in pairs.iter_rows()))
    return "; ".join(parts)


def claims_list(claims: pl.DataFrame) -> str:
    """The document's statements as a list, each with where it says so."""
    if claims.is_empty():
        return "*The document makes no claim of this kind.*"
    return "\n".join(f"- “{s}” ({c})" for s, c in claims.select("statement", "citation").iter_rows())


def headroom_intro(head: pl.DataFrame, gpu: str, model: str, article: pl.DataFrame | None = None) -> str:
    """What the modelled headroom is of: the model, GPUs and DCP sizes, and the article's own set-up when it differs."""
    tp = head["tp"][0] if "tp" in head.columns and head.height else 8
    dcps = sorted(head["dcp"].unique().to_list())
    paths = " and ".join("without DCP (vLLM's path)" if d == 1 else f"with DCP {d} (SGLang's)" for d in dcps)
    text = (f"KV-cache room that each memory setting leaves for {model} on {tp}× {gpu}, {paths}, from kvlab's physical "
            f"model (the model of report 04).")
    if article is not None and article.height:
        a = article.row(0, named=True)
        a_gpu = str(a.get("hardware") or "").removeprefix("NVIDIA ").strip()
        if (a.get("model"), a_gpu) != (model, gpu):
            text += f" The article ran {a.get('model')} on {a.get('gpu_count')}× {a_gpu}."
    return text


def fits_sentence(head: pl.DataFrame) -> str:
    """What the model's *fits* column says at each memory setting and what it rests on: KV room for one sequence,
    weights within the target, and memory left outside the target against an assumed need (an assumption set from
    the B300 article's own report, so a *fits = false* there restates the article rather than predicting it)."""
    from kvlab.perfmodel.roofline import Assumptions

    frac = Assumptions().outside_pool_fraction
    parts, restated = [], False
    for (u,), g in head.sort("mem_util").group_by(["mem_util"], maintain_order=True):
        bad = g.filter(~pl.col("fits"))
        if bad.is_empty():
            parts.append(f"every row fits at {u:g}")
            continue
        r = bad.row(0, named=True)
        n = f"{bad.height} of {g.height} rows"
        if "left outside the target" in r["reason"]:
            outside = r["outside_pool_gib_per_gpu"]
            need = r.get("outside_need_gib_per_gpu") or frac * outside / (1 - u)
            parts.append(f"at {u:g} it marks {n} as not fitting — not for lack of KV room, but because {u:g} leaves "
                         f"{outside:.1f} GiB per GPU outside the target, less than the {need:.1f} GiB ({frac:.1%} of "
                         f"the GPU) the model assumes activations, CUDA graphs and communication buffers need there")
            restated = True
        else:
            parts.append(f"at {u:g} {n} do not fit: {r['reason']}")
    text = "The model's *fits* column: " + "; ".join(parts) + "."
    if restated:
        text += (f" That {frac:.1%} is not derived: it was chosen between what the article's two settings leave "
                 "outside the target (the one that failed and the one that worked), so *fits = false* there restates "
                 "the article's OOM claim rather than predicting it — report 04's table shows the same flag for the same "
                 "reason. What the model does derive is the KV room above.")
    return text


def headroom_caption(head: pl.DataFrame) -> str:
    """One sentence for the headroom figure: how much more the higher setting fits, and what DCP multiplies it by."""
    us = sorted(head["mem_util"].unique().to_list())
    if not head.height:
        return "Modelled: no configuration."
    lo, hi = us[0], us[-1]
    text = "Modelled"
    if lo != hi:
        w = (head.filter(pl.col("mem_util") == lo).select("dcp", "context_tokens", pl.col("max_concurrent_seqs").alias("a"))
             .join(head.filter(pl.col("mem_util") == hi).select("dcp", "context_tokens",
                                                                pl.col("max_concurrent_seqs").alias("b")),
                   on=["dcp", "context_tokens"]).filter(pl.col("a") > 0).sort("dcp", "context_tokens"))
        gain = (w["b"] / w["a"] - 1).to_list()
        if not gain:
            return (f"Modelled: not one sequence fits at {lo:g} in any configuration shown "
                    f"({head['reason'][0]}), so there is no room to compare.")
        g_txt = (f"{min(gain):.0%}" if round(min(gain), 2) == round(max(gain), 2)
                 else f"{min(gain) * 100:.0f}–{max(gain):.0%}")
        ex = w.filter(pl.col("dcp") == w["dcp"].min()).row(-1, named=True)
        text += (f": {hi:g} fits {g_txt} more sequences than {lo:g} at every context and DCP size shown "
                 f"(DCP {ex['dcp']}, {tokens_label(ex['context_tokens'])}: {ex['b']:,} vs {ex['a']:,})")
    dcps = sorted(head["dcp"].unique().to_list())
    if len(dcps) > 1:
        base = head.filter(pl.col("dcp") == dcps[0]).select("mem_util", "context_tokens", pl.col("max_concurrent_seqs").alias("a"))
        top = head.filter(pl.col("dcp") == dcps[-1]).select("mem_util", "context_tokens", pl.col("max_concurrent_seqs").alias("b"))
        x = base.join(top, on=["mem_util", "context_tokens"]).filter(pl.col("a") > 0)
        r = (x["b"] / x["a"]).to_list()
        if r:
            r_txt = f"{min(r):.1f}×" if round(min(r), 1) == round(max(r), 1) else f"{min(r):.1f}–{max(r):.1f}×"
            text += f"{';' if lo != hi else ':'} DCP {dcps[-1]} fits {r_txt} as many as DCP {dcps[0]}"
    if text == "Modelled":
        r = head.row(0, named=True)
        text += f": {r['max_concurrent_seqs']:,} sequences of {tokens_label(r['context_tokens'])} fit at {r['mem_util']:g}"
    return text + "."


def memory_table(stats: pl.DataFrame):
    """The memory study as a reader's table: one row per engine, context and setting (settings of one context side
    by side), with the spread and counters only where some run has them."""
    from kvlab import tables

    several = stats["experiment"].n_unique() > 1
    s = stats.with_columns((pl.col("batch_time_cv") * 100).alias("batch_time_cv_pct"))
    s = s.with_columns(pl.col("engine").map_elements(_engine_rank, return_dtype=pl.Int64).alias("_rank")).sort(
        *(["experiment"] if several else []), "_rank", "engine", "context_tokens", "mem_util")
    cols = {"experiment": "experiment"} if several else {}
    cols |= {"engine": "engine", "context_label": "context", "context_tokens": "context (tokens)",
             "mem_util": "memory utilisation", "runs": "runs", "runs_ok": "runs succeeded", "retries": "retries"}
    if s["runs_failed"].sum():
        cols["runs_failed"] = "runs failed"
    cols["batch_time_mean_s"] = "batch time, mean (s)"
    if s["batch_time_cv_pct"].drop_nulls().len():
        cols["batch_time_cv_pct"] = "batch-time spread, CV (%)"
    cols |= {"ttft_mean_ms": "mean TTFT (ms)", "e2e_mean_ms": "mean request latency (ms)"}
    if "preemptions" in s.columns and s["preemptions"].drop_nulls().len():
        cols["preemptions"] = "preemptions"
    return tables.table(s, cols)


def memory_caption(stats: pl.DataFrame, cmp: pl.DataFrame) -> str:
    """One sentence for the memory-study figure: retries at each setting, then at the largest context measured at
    both settings, batch time and mean request latency at the lower setting against the higher, per engine."""
    if stats.is_empty():
        return "Measured: no run with a memory setting."
    us = sorted(stats["mem_util"].unique().to_list())
    retries = {u: int(stats.filter(pl.col("mem_util") == u)["retries"].sum()) for u in us}
    failed = int(stats["runs_failed"].sum())
    text = ("Measured: " + ("no retry" if not any(retries.values()) else
                           ", ".join(f"{n} retr{'y' if n == 1 else 'ies'} at {u:g}" for u, n in retries.items()))
            + ("" if any(retries.values()) else " at any setting")
            + (f", {failed} failed run{'s' if failed != 1 else ''}" if failed else ", no failed run"))
    ok = cmp.filter(pl.col("time_ratio").is_not_null())
    if ok.height:
        top = ok["context_tokens"].max() if "context_tokens" in ok.columns else None
        at = ok.filter(pl.col("context_tokens") == top) if top is not None else ok
        at = at.sort(pl.col("engine").map_elements(_engine_rank, return_dtype=pl.Int64))
        r0 = at.row(0, named=True)
        lo, hi = r0["mem_low"], r0["mem_high"]
        times = " and ".join(f"{_relative(r['batch_time_mean_s_low'], r['batch_time_mean_s_high'], 'longer', 'shorter')} "
                             f"for {engine_label(r['engine'])}" for r in at.iter_rows(named=True))
        lat = []
        for r in at.iter_rows(named=True):
            a, b = _stats_row(stats, r, lo), _stats_row(stats, r, hi)
            if a and b and a["e2e_mean_ms"] and b["e2e_mean_ms"]:
                lat.append(f"{_relative(a['e2e_mean_ms'], b['e2e_mean_ms'])} for {engine_label(r['engine'])}")
        text += (f"; at {scaled_context(r0['context_label'], r0.get('context_tokens'))}, {lo:g} against {hi:g}: batch time "
                 f"{times}" + (f", mean request latency {' and '.join(lat)}" if lat else ""))
    return text + "."


def kv_budget_simulated(runs: pl.DataFrame) -> bool:
    """Whether the measured runs' memory setting is a simulated KV-cache budget: no GPU served them (CPU runs map
    the setting to an explicit KV budget; see data/experiments/cpu_long_context.yaml)."""
    m = runs.filter(pl.col("source") == "measured")
    return m.height > 0 and not (m["gpu_count"].fill_null(0) > 0).any()


def memory_scope(runs: pl.DataFrame) -> str:
    """What the measured memory study can and cannot test on the host that ran it."""
    m = runs.filter(pl.col("source") == "measured")
    if m.is_empty():
        return ""
    if kv_budget_simulated(m):
        return ("**What this host tests.** These runs had no GPU: kvlab maps each memory setting to an explicit "
                "KV-cache budget (a simulated device), so the lower setting only means less KV room — fewer requests "
                "held at once. That tests the capacity side of the trade-off (run time, latency). It does not test the "
                "article's OOM retries: on a GPU they come from activations, CUDA graphs and communication buffers "
                "overflowing the memory left outside the KV pool, which a CPU run does not carve up. The verdicts at "
                "the top say so claim by claim.")
    gpus = ", ".join(sorted({str(g) for g in m["gpu_count"].drop_nulls().to_list()}))
    return (f"**What this host tests.** These runs were served on GPUs ({gpus} per run): each memory setting is the "
            "engine's own memory-utilisation target, so retries, run time and latency test the article's claims "
            "directly, for this hardware and model.")


def _setting_of(statement: str) -> float | None:
    import re

    m = re.search(r"\b0\.\d+\b", statement)
    return float(m.group()) if m else None


def memory_claim_verdicts(claims: pl.DataFrame, stats: pl.DataFrame, cmp: pl.DataFrame,
                          head: pl.DataFrame | None = None, simulated: bool = True) -> list:
    """The B300 article's two memory claims (``memory_095``: the higher setting caused OOM retries with either
    engine; ``memory_092``: the lower one removed them and stabilised run time, at slightly higher latency) against
    the measured memory study and, for the first, the physical model. ``simulated``: the runs' setting is a simulated
    KV budget (no GPU), so the OOM parts cannot be tested; the latency part is tested for its direction only."""
    from kvlab.verdicts import Verdict

    out = []
    us = sorted(stats["mem_util"].unique().to_list()) if stats.height else []
    lo, hi = (us[0], us[-1]) if us else (None, None)
    host = ("on this host the setting is a simulated KV-cache budget, so the GPU memory outside the KV pool, where "
            "those OOMs arise, is not exercised" if simulated else "measured on this host's GPUs")

    def retries(u: float) -> tuple[int, int, list[str]]:
        s = stats.filter(pl.col("mem_util") == u)
        per = s.group_by("engine").agg(pl.col("retries").sum()).sort(pl.col("engine").map_elements(
            _engine_rank, return_dtype=pl.Int64))
        return (int(s["retries"].sum()), int(s["runs"].sum()),
                [f"{engine_label(e)} {n}" for e, n in per.iter_rows()])

    for c in claims.filter(pl.col("kind") == "memory").iter_rows(named=True):
        cid, statement = c["claim_id"], c["statement"]
        u = _setting_of(statement)
        if stats.is_empty() and cid in ("memory_095", "memory_092"):
            out.append(Verdict(statement, "cannot be tested here", "measured", "no measured run with a memory setting"))
            if cid == "memory_092":
                continue
        if cid == "memory_095":
            u = u or hi
            if u not in us:
                if us:
                    out.append(Verdict(statement, "cannot be tested here", "measured", f"no measured run at {u:g}"))
            else:
                n, runs, per = retries(u)
                every = stats.filter(pl.col("mem_util") == u).group_by("engine").agg(pl.col("retries").sum())
                outcome = ("cannot be tested here" if simulated else
                           "reproduced" if (every["retries"] > 0).all() else "contradicted")
                out.append(Verdict(f"{statement} — {host}", outcome, "measured",
                                   f"{n} retr{'y' if n == 1 else 'ies'} in {runs} run{'' if runs == 1 else 's'} at {u:g} "
                                   f"({', '.join(per)})"))
            if head is not None and head.height and u in head["mem_util"].to_list():
                h = head.filter(pl.col("mem_util") == u)
                bad = h.filter(~pl.col("fits") & pl.col("reason").str.contains("left outside the target"))
                if bad.height:
                    from kvlab.perfmodel.roofline import Assumptions

                    r = bad.row(0, named=True)
                    need = r.get("outside_need_gib_per_gpu") or \
                        Assumptions().outside_pool_fraction * r["outside_pool_gib_per_gpu"] / (1 - u)
                    number = (f"{r['outside_pool_gib_per_gpu']:.1f} GiB/GPU left outside the target at {u:g} < {need:.1f} "
                              "GiB assumed need — an assumption taken from this claim")
                elif h["fits"].all():
                    number = (f"every configuration fits at {u:g}; the model's memory check rests on an assumed need "
                              "set from this claim")
                else:
                    number = f"at {u:g}: {h.filter(~pl.col('fits'))['reason'][0]}"
                out.append(Verdict(f"{statement} — kvlab's physical model", "cannot be tested here", "modelled", number))
        elif cid == "memory_092":
            u = u or lo
            first, _, last = statement.partition(", at ")
            if lo is None or lo == hi:
                out.append(Verdict(statement, "cannot be tested here", "measured", "no engine measured at two settings"))
                continue
            n_lo, runs_lo, _ = retries(lo)
            n_hi, runs_hi, _ = retries(hi)
            spreads = []
            for r in cmp.iter_rows(named=True):
                a, b = _stats_row(stats, r, lo), _stats_row(stats, r, hi)
                if a and b and (a["runs_ok"] or 0) > 1 and (b["runs_ok"] or 0) > 1:
                    spreads.append((r, a["batch_time_cv"], b["batch_time_cv"]))
            lower = sum(x < y for _, x, y in spreads)
            spread = ("spread: one run per setting" if not spreads else
                      f"spread (CV) {spreads[0][1]:.1%} at {lo:g} vs {spreads[0][2]:.1%} at {hi:g}" if len(spreads) == 1
                      else f"spread (CV) lower at {lo:g} in {lower} of {len(spreads)} engine–context pairs")
            number = f"retries: {n_lo} at {lo:g}, {n_hi} at {hi:g}; {spread}"
            if simulated:
                out.append(Verdict(f"{first} — on this host there is no GPU OOM to remove (simulated KV budget)",
                                   "cannot be tested here", "measured", number))
            elif n_hi == 0:
                out.append(Verdict(f"{first} — measured on this host's GPUs", "cannot be tested here", "measured",
                                   number + f" (no retry at {hi:g} to remove)"))
            else:
                ok = n_lo == 0 and (not spreads or lower > len(spreads) / 2)
                out.append(Verdict(f"{first} — measured on this host's GPUs", "reproduced" if ok else "contradicted",
                                   "measured", number))
            lat = []
            at = cmp.filter(pl.col("context_tokens") == cmp["context_tokens"].max()) if cmp.height else cmp
            for r in at.iter_rows(named=True):
                a, b = _stats_row(stats, r, lo), _stats_row(stats, r, hi)
                if a and b and a["e2e_mean_ms"] and b["e2e_mean_ms"]:
                    lat.append((r, a["e2e_mean_ms"] / b["e2e_mean_ms"]))
            claim = (f"Lowering the target to {lo:g} comes at {last or 'higher latency'} — "
                     + (f"on this host {lo:g} is a smaller simulated KV budget, so fewer requests run at once: "
                        "direction only" if simulated else "measured on this host's GPUs"))
            if not lat:
                out.append(Verdict(claim, "cannot be tested here", "measured", "no latency measured at both settings"))
                continue
            r0 = lat[0][0]
            out.append(Verdict(
                claim, "reproduced" if all(x > 1 for _, x in lat) else "contradicted", "measured",
                f"mean request latency at {lo:g} against {hi:g}, {scaled_context(r0['context_label'], r0.get('context_tokens'))}: "
                + ", ".join(f"{engine_label(r['engine'])} {_signed_pct(x - 1)}"
                            for r, x in sorted(lat, key=lambda t: _engine_rank(t[0]["engine"])))))
        else:
            out.append(Verdict(statement, "cannot be tested here", "measured", "no test of this claim in this report"))
    return out


def _engine_rank(engine: str) -> int:
    """Engines in the order every report lists them (vLLM, SGLang, sglang-jax), unknown ones last."""
    from kvlab.engines import ENGINE_NAMES

    return ENGINE_NAMES.index(engine) if engine in ENGINE_NAMES else len(ENGINE_NAMES)


def _signed_pct(x: float) -> str:
    """+0.016 → '+1.6%', −0.35 → '−35%' (a true minus sign; one decimal below 10%)."""
    text = f"{x:+.1%}" if abs(x) < 0.1 else f"{x:+.0%}"
    return text.replace("-", "−")


#: What each server counter is, as a reader names it.
COUNTER_NAMES = {"server_preemptions": "preemptions", "server_prompt_tokens": "prompt tokens",
                 "server_generation_tokens": "generated tokens", "server_prefix_cache_queries": "prefix-cache queries",
                 "server_prefix_cache_hits": "prefix-cache hits"}


def counters_note(runs: pl.DataFrame) -> str:
    """Engines whose server counters are missing in every measured run, the counters named in words: shown empty
    (not available), never as 0."""
    m = runs.filter(pl.col("source") == "measured")
    cols = [c for c in m.columns if c.startswith("server_")]
    lines = []
    for (engine,), g in m.group_by(["engine"], maintain_order=True):
        missing = [c for c in cols if g[c].null_count() == g.height]
        names = ", ".join(COUNTER_NAMES.get(c, c.removeprefix("server_").replace("_", " ")) for c in missing)
        runs_txt = f"{g.height} run{'' if g.height == 1 else 's'}"
        if missing and len(missing) == len(cols):
            lines.append(f"- {engine} reported no server counters ({names}) in any of its {runs_txt}: "
                         "tables show them empty (–, not available), never as 0.")
        elif missing:
            lines.append(f"- {engine} did not report {names} in any of its {runs_txt}: shown empty (–, not "
                         "available), never as 0.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- prefix-sharing sentences (05)


def stand_in_note(*frames: pl.DataFrame, block_tokens: int = 128) -> str | None:
    """Says, once and plainly, what sglang-jax is, when any of ``frames`` holds its runs; None otherwise."""
    if not any(not f.is_empty() and "engine" in f.columns and (f["engine"] == "sglang-jax").any() for f in frames):
        return None
    return (f"**{engine_label('sglang-jax')} is not PyTorch SGLang.** It is {STAND_IN['sglang-jax']}. vLLM's CPU "
            f"backend caches whole {block_tokens}-token blocks. sglang-jax serves no /metrics: its cache hits are its "
            "requests' usage `cached_tokens`, and server counters it lacks show as not available, never as 0.")


def prefix_claim_verdict(sharing: pl.DataFrame, engine: str = "vllm") -> str:
    """Does ``engine`` share prefixes? Hit rates with its prefix cache on vs off at the largest shared fraction."""
    e = sharing.filter((pl.col("engine") == engine) & pl.col("cache_hit_rate").is_not_null())
    on, off = e.filter(pl.col("prefix_caching")), e.filter(~pl.col("prefix_caching"))
    if on.is_empty():
        return f"*No measured {engine} runs with its prefix cache on: the claim is untested here.*"
    top = on.sort("shared_fraction").row(-1, named=True)
    off_top = off.filter(pl.col("shared_fraction") == top["shared_fraction"])
    off_txt = (f"; with it off (`--no-enable-prefix-caching`, what the document describes) "
               f"{off_top['cache_hit_rate'][0]:.0%}" if off_top.height else "")
    shares = top["cache_hit_rate"] > 0
    verdict = ("**The claim does not hold for current vLLM**: with automatic prefix caching (on by default) requests "
               "do share the common prefix's KV blocks." if shares else
               "**The data agree with the claim**: no prompt token came from the cache.")
    return (f"- measured ({top['hardware']}): at shared fraction {top['shared_fraction']:g}, {engine_label(engine)} with its prefix "
            f"cache on served **{top['cache_hit_rate']:.0%}** of prompt tokens from the cache (ideal "
            f"{top['ideal_hit_rate']:.0%}){off_txt}.\n- {verdict}")


def _sources(g: pl.DataFrame) -> str:
    src = g["hit_source"].drop_nulls().unique(maintain_order=True).to_list() if "hit_source" in g.columns else []
    return f" (counted from its {' and '.join(src)})" if src else ""


def hit_rate_sentence(sharing: pl.DataFrame) -> str:
    """Hit rate by shared fraction per configuration, as one line each, saying which count it comes from."""
    lines = []
    for (engine, caching), g in sharing.sort("shared_fraction").group_by(["engine", "prefix_caching"], maintain_order=True):
        pts = ", ".join(f"{r['shared_fraction']:g} → {percent(r['cache_hit_rate'])}" for r in g.iter_rows(named=True))
        lines.append(f"- {engine_label(engine)}, prefix cache {'on' if caching else 'off'}: cache-hit rate by shared "
                     f"fraction {pts}{_sources(g)}.")
    return "\n".join(lines)


def radix_vs_paged_sentence(sharing: pl.DataFrame, block_tokens: int = 128) -> str:
    """SGLang-family radix cache against vLLM's paged blocks, cache on, at every shared fraction both measured.

    Each line: both hit rates beside the token-exact ideal (``ideal_hit_rate``) and the whole-block
    ideal (``block_ideal_hit_rate``), then TTFT and batch time; a last line names the largest hit-rate gap.
    """
    on = sharing.filter(pl.col("prefix_caching"))
    paged = on.filter(pl.col("engine") == "vllm")
    radix_engines = [e for e in on["engine"].unique(maintain_order=True).to_list() if FAMILY.get(e) == "sglang"]
    if paged.is_empty() or not radix_engines:
        return "*Radix vs paged: no shared fraction was measured with both vLLM and an SGLang-family engine, cache on.*"
    radix_engine = radix_engines[0]
    cols = ["shared_fraction", "shared_prefix_tokens", "cache_hit_rate", "ideal_hit_rate", "block_ideal_hit_rate",
            "ttft_mean_ms", "batch_time_s"]
    both = paged.select(cols).join(on.filter(pl.col("engine") == radix_engine).select(cols), on="shared_fraction",
                                   suffix="_r").sort("shared_fraction")
    if both.is_empty():
        return "*Radix vs paged: no shared fraction holds both engines with the cache on.*"
    lr, lp = engine_label(radix_engine), engine_label("vllm")
    lines = []
    for r in both.iter_rows(named=True):
        lines.append(
            f"- shared fraction {r['shared_fraction']:g} ({r['shared_prefix_tokens']:,} prefix tokens): {lr} served "
            f"**{percent(r['cache_hit_rate_r'])}** of prompt tokens from its radix cache (token-exact ideal "
            f"{r['ideal_hit_rate']:.0%}), {lp} **{percent(r['cache_hit_rate'])}** from its paged cache (whole "
            f"{block_tokens}-token-block ideal {r['block_ideal_hit_rate']:.0%}); mean TTFT {ms(r['ttft_mean_ms_r'])} "
            f"vs {ms(r['ttft_mean_ms'])}, median batch time {r['batch_time_s_r']:.3g} s vs {r['batch_time_s']:.3g} s.")
    gaps = both.filter(pl.col("cache_hit_rate").is_not_null() & pl.col("cache_hit_rate_r").is_not_null()).with_columns(
        (pl.col("cache_hit_rate_r") - pl.col("cache_hit_rate")).alias("gap"))
    if gaps.height:
        g = gaps.sort(pl.col("gap").abs(), descending=True).row(0, named=True)
        more, less = (lr, lp) if g["gap"] >= 0 else (lp, lr)
        lines.append(f"- Largest hit-rate gap: at shared fraction {g['shared_fraction']:g}, {more} served "
                     f"**{abs(g['gap']) * 100:.1f} percentage points** more of the prompt from its cache than {less}.")
    return "\n".join(lines)


def threshold_sentence(th, gain: pl.DataFrame) -> str:
    """Whether the tree's threshold shows in the caching gain, in words, with the numbers that decide it."""
    if th.verdict == "no data":
        return "*Fewer than three shared fractions with the cache both on and off: the threshold cannot be tested.*"
    pts = ", ".join(f"{r['shared_fraction']:g} → {r['time_saved']:+.0%}" for r in gain.sort("shared_fraction").iter_rows(named=True))
    first = (f"the smallest measured fraction saving at least {th.min_gain:.0%} of batch time is "
             f"**{th.first_fraction:g}**" if th.first_fraction is not None else
             f"no measured fraction saves {th.min_gain:.0%} of batch time")
    slopes = (f"fitted slope below {th.at:g}: {th.slope_below:.2f}, from {th.at:g} up: {th.slope_above:.2f} "
              f"(time saved per unit of shared fraction); one straight line through all points has R² {th.r2_linear:.2f}")
    losses = ""
    if th.losses:
        losses = ("; below it the cache did not pay: " + ", ".join(f"{f:g} → {v:+.0%}" for f, v in th.losses)
                  + " (the cache cost more batch time than it saved)")
    even = (f"- the cache saves time at every measured fraction from **{th.break_even:g}** up{losses}."
            if th.break_even is not None else "- no range of measured fractions where the cache always saves time.")
    if th.verdict == "inconclusive":
        say = (f"**The threshold test is inconclusive on these runs**: at shared fraction 0 nothing is reused, yet the "
               f"runs with the cache on took {abs(th.gain_at_zero):.0%} {'less' if th.gain_at_zero > 0 else 'more'} batch "
               f"time than with it off, a difference the "
               f"prefix cache cannot explain and as large as the {th.min_gain:.0%} saving the test looks for. More "
               "repeats per point (the full sweep) are needed to test it.")
    elif th.verdict == "smooth":
        say = (f"**No jump at {th.at:.0%} shows in these runs**: past the break-even the saving grows steadily with the "
               f"shared fraction, so {th.at:.0%} reads as a rule of thumb for 'enough sharing to matter', not a property "
               "of the cache.")
    else:
        g = gain.filter(pl.col("time_saved").is_not_null()).sort("shared_fraction")
        lo, hi = g.filter(pl.col("shared_fraction") < th.at), g.filter(pl.col("shared_fraction") >= th.at)
        say = (f"**The saving jumps between shared fractions {lo['shared_fraction'][-1]:g} and "
               f"{hi['shared_fraction'][0]:g}** ({lo['time_saved'][-1]:+.0%} → {hi['time_saved'][0]:+.0%}), where the "
               f"tree puts its {th.at:.0%} threshold; the measured fractions cannot place the jump more closely."
               if lo.height and hi.height else f"**The saving jumps near {th.at:.0%}**, as the tree's threshold suggests.")
    return f"- batch time saved by the prefix cache, by shared fraction: {pts}.\n- {first}; {slopes}.\n{even}\n- {say}"


def prefix_conclusions(sharing: pl.DataFrame, thresholds: dict, by_turn: pl.DataFrame, threshold: float,
                       min_gain: float) -> str:
    """The prefix-sharing report's conclusions: the vLLM claim, radix vs paged, each engine's threshold test,
    multi-turn reuse per engine.

    ``thresholds``: engine -> :class:`kvlab.analysis.Threshold` (``analysis.sharing_thresholds``).
    """
    lines = []
    if sharing.is_empty():
        lines.append("- No measured prefix-sharing runs: only the modelled ideal above is shown; the document's "
                     "claims stay untested here.")
    else:
        lines.append(prefix_claim_verdict(sharing))
        gap = [ln for ln in radix_vs_paged_sentence(sharing).splitlines() if ln.startswith("- Largest hit-rate gap")]
        lines += gap
        for engine, th in thresholds.items():
            lines.append(f"- {engine_label(engine)}: threshold test at {threshold:.0%} → **{th.verdict}**" + (
                f" (at shared fraction 0, with nothing to reuse, cache on vs off already differ by "
                f"{th.gain_at_zero:+.0%} of batch time)." if th.verdict == "inconclusive" else
                f"; the cache first saves ≥{min_gain:.0%} of batch time at shared fraction "
                f"{th.first_fraction:g}." if th.first_fraction is not None else "."))
    for engine, g in (by_turn.filter(pl.col("prefix_caching")).sort("turn").group_by("engine", maintain_order=True)
                      if not by_turn.is_empty() else []):
        share = g["cached_share"][-1]
        lines.append(f"- Multi-turn, {engine_label(engine[0])}: with the cache on, the last turn found "
                     + (f"{share:.0%} of its prompt cached." if share is not None else
                        "no cached-token count reported (not available, not 0)."))
    return "\n".join(lines)


def multi_turn_sentence(by_turn: pl.DataFrame) -> str:
    """Turn by turn, per engine and cache setting; then, per engine, the last turn with the cache on against off."""
    def cached(r):
        if r["cached_tokens"] is None:
            return f"cached tokens not reported of {r['prompt_tokens']:,.0f}"
        return f"{r['cached_tokens']:,.0f} of {r['prompt_tokens']:,.0f} tokens cached"

    lines = []
    for (engine, caching), g in by_turn.sort("turn").group_by(["engine", "prefix_caching"], maintain_order=True):
        pts = "; ".join(f"turn {r['turn']}: {cached(r)}, TTFT {ms(r['ttft_mean_ms'])}" for r in g.iter_rows(named=True))
        lines.append(f"- {engine_label(engine)}, prefix cache {'on' if caching else 'off'}: {pts}.")
    for (engine,), g in by_turn.group_by(["engine"], maintain_order=True):
        on = g.filter(pl.col("prefix_caching")).sort("turn")
        off = g.filter(~pl.col("prefix_caching")).sort("turn")
        if on.height > 1 and off.height == on.height:
            last_on, last_off = on.row(-1, named=True), off.row(-1, named=True)
            share = ("its share of the prompt served from the cache is not reported" if last_on["cached_share"] is None
                     else f"the cache serves **{last_on['cached_share']:.0%}** of the prompt")
            lines.append(f"- {engine_label(engine)}, last turn (turn {last_on['turn']}): {share} and TTFT is "
                         f"**{last_off['ttft_mean_ms'] / last_on['ttft_mean_ms']:.2f}×** shorter than without it "
                         f"({ms(last_on['ttft_mean_ms'])} vs {ms(last_off['ttft_mean_ms'])}).")
    lines += _turns_radix_vs_paged(by_turn)
    return "\n".join(lines)


def _turns_radix_vs_paged(by_turn: pl.DataFrame) -> list[str]:
    """Cache on: the turns where an SGLang-family radix cache and vLLM's blocks cached different amounts per request."""
    on = by_turn.filter(pl.col("prefix_caching") & pl.col("cached_tokens").is_not_null())
    radix = [e for e in on["engine"].unique(maintain_order=True).to_list() if FAMILY.get(e) == "sglang"]
    if not radix or on.filter(pl.col("engine") == "vllm").is_empty():
        return []
    both = (on.filter(pl.col("engine") == "vllm").select("turn", "cached_tokens")
            .join(on.filter(pl.col("engine") == radix[0]).select("turn", pl.col("cached_tokens").alias("radix")),
                  on="turn").with_columns((pl.col("radix") - pl.col("cached_tokens")).alias("d")).sort("turn"))
    lr, diff = engine_label(radix[0]), both.filter(pl.col("d") != 0)
    if diff.is_empty():
        return [f"- Radix vs paged, turn by turn: {lr} and vLLM cached the same tokens per request at every turn."]
    parts = ", ".join(f"turn {r['turn']}: {r['radix']:,.0f} vs {r['cached_tokens']:,.0f}" for r in diff.iter_rows(named=True))
    same = both.filter(pl.col("d") == 0)["turn"].to_list()
    return [f"- Radix vs paged, turn by turn (cache on, mean cached tokens per request, {lr} vs vLLM): {parts}"
            + (f"; the same at turn{'s' if len(same) > 1 else ''} {', '.join(map(str, same))}" if same else "") + "."]


# --------------------------------------------------------------------------- engine choice: rule, tree, evidence, answer (06)


def evidence_rule() -> str:
    """How the report weighs its evidence, with the margin as a value."""
    return ("Every finding is labelled **modelled** (kvlab's physical model, calibrated on the B300 article's published "
            "points) or **measured** (real engine runs, with the hardware they ran on). A measured factor decides only "
            f"where two engines were measured on the same hardware and differ by more than {MIN_MARGIN - 1:.0%}; the "
            "recommendation then names the engine, the margin, the metric and the experiment. When nothing separates "
            "the engines, the report says its pick is a tie-break.")


def tree_caption(rec: Recommendation) -> str:
    """One sentence for the decision-tree figure: the highlighted path and where it ends."""
    path = " → ".join(f"{q} {a}" for q, a in rec.path)
    return f"Highlighted, this workload's path: {path} ⇒ {engine_label(rec.engine)} ({rec.reason})."


def tree_sentence(rec: Recommendation) -> str:
    path = " → ".join(f"{q} **{a}**" for q, a in rec.path)
    return f"- decision tree: {path} ⇒ **{rec.engine}** ({rec.reason})."


def evidence_sentences(ev: Evidence) -> str:
    lines = [f"- {f.name} ({f.source}): {f.finding}." + (
        f" Favours **{f.favours}**" + (f" (measured on {engine_label(f.winner)})" if f.winner and f.winner != f.favours else "") + "."
        if f.favours else "") for f in ev.factors]
    if ev.decided_by == "tie-break":
        lines.append(f"- from the data: **{ev.engine}**, but only as a tie-break: {ev.basis}.")
    else:
        lines.append(f"- from the data: **{ev.engine}** (decided by {ev.basis}).")
    lines += [f"- {n}" for n in ev.notes]
    return "\n".join(lines)


def evidence_gap_sentence(ev: Evidence) -> str | None:
    """What the measured evidence cannot say: no two-engine comparison, or one within the noise margin; else None."""
    measured = [f for f in ev.factors if f.source == "measured"]
    if not any(f.n_engines >= 2 for f in measured):
        return ("No measurement here compares two engines on the same hardware; the data-backed pick rests on the "
                "model and on the tree's tie-break. Run the GPU experiments (`data/experiments/gpu_*.yaml`) for a "
                "measured comparison.")
    if not any(f.favours for f in measured):
        compared = ", ".join(f.name for f in measured if f.n_engines >= 2)
        return (f"Two engines were measured ({compared}), but every measured difference is under "
                f"{MIN_MARGIN - 1:.0%}: the measurements do not separate them.")
    return None


def disagreement(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: pl.DataFrame) -> str | None:
    """Why the tree and the evidence differ, naming the premise the data contradicts; None when they agree."""
    if tree.engine == ev.engine:
        return None
    if ev.decided_by == "tie-break":
        why = [f"The tree says **{tree.engine}** ({tree.reason}); nothing measured or modelled here separates the "
               f"engines, so the data's **{ev.engine}** is only a tie-break (vLLM, easier to operate), not a finding."]
    else:
        decided = ev.deciding.evidence() if ev.deciding is not None and ev.deciding.winner else ev.basis
        why = [f"The tree says **{tree.engine}** ({tree.reason}); the {ev.decided_by} data say **{ev.engine}** "
               f"({decided})."]
    on = sharing.filter(pl.col("prefix_caching").fill_null(True) & pl.col("cache_hit_rate").is_not_null())
    on_vllm = on.filter(pl.col("engine") == "vllm")
    if w.shared_prefix and tree.engine == "sglang" and not on_vllm.is_empty():
        near = nearest(on_vllm, "shared_fraction", w.shared_fraction).row(0, named=True)
        radix = on.filter((pl.col("engine") != "vllm") & (pl.col("shared_fraction") == near["shared_fraction"]))
        beside = "".join(f" ({engine_label(r['engine'])}'s radix cache: {r['cache_hit_rate']:.0%})"
                         for r in radix.iter_rows(named=True))
        why.append(f"The tree's shared-prefix branch assumes vLLM shares no prefixes; measured, vLLM's automatic "
                   f"prefix caching reused {near['cache_hit_rate']:.0%} of prompt tokens at shared fraction "
                   f"{near['shared_fraction']:g}{beside}, so a shared prefix alone does not separate the engines.")
    conc = ev.factors[2]
    if (not w.shared_prefix and w.concurrency >= CONCURRENCY_THRESHOLD and tree.engine == "vllm"
            and conc.favours == ev.engine):
        why.append(f"The tree's high-concurrency branch assumes PagedAttention's memory efficiency wins with "
                   f"≥ {CONCURRENCY_THRESHOLD} requests in flight; measured, {conc.evidence()}.")
    ctx = ev.factors[0]
    if ctx.favours and ctx.favours != tree.engine:
        why.append(f"The tree never asks the context length; the model does: {ctx.finding}.")
    return " ".join(why)


def recommendation_sentence(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: pl.DataFrame) -> str:
    """The report's answer in one paragraph: they disagree (and why), they agree (and on what), or the data's
    engine is only the tie-break."""
    why = disagreement(w, tree, ev, sharing)
    if why:
        return f"**They disagree.** {why}"
    if ev.decided_by == "tie-break":
        return (f"**The tree says {engine_label(tree.engine)}; the data cannot confirm it**: nothing measured or "
                f"modelled here separates the engines, and {engine_label(ev.engine)} is only the tie-break.")
    f = ev.deciding
    on = (f" ({engine_label(f.winner)}: {f.metric}, {f.experiment})" if f is not None and f.winner else
          f" ({f.finding.split(';')[0]})" if f is not None else "")
    return f"**They agree: {engine_label(tree.engine)}**, on {ev.decided_by} evidence{on}."


def concurrency_sentence(conc: pl.DataFrame) -> str:
    lines = []
    for r in conc.iter_rows(named=True):
        lines.append(f"- {engine_label(r['engine'])}, {r['in_flight']} in flight ({r['hardware']}): **{r['requests_ok']} of "
                     f"{r['requests_sent']}** requests completed, {r['requests_failed']} failed over {r['n_runs']} run(s); "
                     f"{r['requests_per_s']:.3g} requests/s, mean TTFT {ms(r['ttft_mean_ms'])} (p99 {ms(r['ttft_p99_ms'])}).")
    all_ok = conc.height and int(conc["requests_failed"].sum()) == 0
    if all_ok:
        lines.append(f"- Every one of the {int(conc['requests_sent'].sum()):,} requests sent is accounted for and none failed.")
    return "\n".join(lines)
