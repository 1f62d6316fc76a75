"""Report 03 (memory utilisation): the memory study, KV headroom, counters, captions and verdicts."""

from __future__ import annotations

from kvlab import tables
from kvlab.claims.memory import engine_rank as _engine_rank
from kvlab.claims.memory import (
    fails_outside_pool,
    headroom_by_config,
    headroom_pairs,
    kv_budget_simulated,
    memory_claim_verdicts,
    memory_setting,
)
from kvlab.claims.memory import stats_row as _stats_row
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.perfmodel.roofline import Assumptions
from kvlab.tables import ms
from kvlab.units import scaled_context, sig2, signed_pct, tokens_label

__all__ = ["kv_budget_simulated", "memory_claim_verdicts", "memory_setting"]


def memory_study_summary(stats: list[dict], causes: list[dict]) -> str:
    """One line per engine and memory setting (``stats``: :func:`kvlab.analysis.memory_study`'s row dicts,
    ``causes``: :func:`kvlab.analysis.failure_causes`'): retries, failures, run-time spread, latency."""
    if not stats:
        return "*No measured runs with a memory setting.*"
    lines = ["### In words (measured)"]
    several = len({r["experiment"] for r in stats}) > 1
    keys = ("experiment", "engine", "mem_util", "context_tokens")
    by_point: dict[tuple, list[str]] = {}
    for c in causes:
        by_point.setdefault(tuple(c[k] for k in keys), []).append(f"{c['failed_attempts']}× {c['failure_cause']}")
    for r in stats:
        why = ", ".join(by_point.get(tuple(r[k] for k in keys), []))
        mean, std = r["batch_time_mean_s"], r["batch_time_std_s"]
        one = r["runs_ok"] == 1  # one run: two significant figures
        time_txt = (
            "no successful run"
            if mean is None
            else (
                f"batch time {sig2(mean) if one else f'{mean:.3g}'} s"
                + (f" ± {std:.2g} s (CV {r['batch_time_cv']:.1%})" if std is not None else "")
            )
        )
        t_ms = r["ttft_mean_ms"]
        ttft = (
            ""
            if t_ms is None
            else f", mean TTFT {sig2(t_ms)} ms"
            if one
            else f", mean TTFT {t_ms:,.0f} ms"
            if t_ms >= 1000
            else f", mean TTFT {t_ms:.4g} ms"
        )
        pre = r.get("preemptions")
        pre_txt = "; preemptions not available" if pre is None else f"; {pre} preemption{'' if pre == 1 else 's'}"
        lines.append(
            f"- {r['experiment'] + ': ' if several else ''}{engine_label(r['engine'])} at **{r['mem_util']:g}**, "
            f"{scaled_context(r['context_label'], r.get('context_tokens'))}: {r['runs_ok']}/{r['runs']} runs succeeded "
            f"with **{r['retries']} retr{'y' if r['retries'] == 1 else 'ies'}**"
            f"{' (' + why + ')' if why else ''}; {time_txt}{ttft}{pre_txt}."
        )
    return "\n".join(lines)


def memory_conclusion(cmp: list[dict], stats: list[dict]) -> str:
    """The memory study's conclusion, aspect by aspect: retries at each setting (over every run), then, at every
    context an engine was measured at both settings, the lower setting against the higher — run time, its spread
    over repeats, and latency (mean request latency and mean TTFT) — with each change's direction and size.
    An engine compared at one context gets the values; at several, the signed change per context (scaled contexts'
    real tokens said once).

    ``cmp`` is :func:`kvlab.analysis.memory_comparison`'s row dicts, ``stats`` :func:`kvlab.analysis.memory_study`'s.
    """
    if not cmp:
        return "*No engine was measured at both memory settings at the same context.*"
    lines = ["### Conclusion (measured)"]
    several = len({r["experiment"] for r in cmp}) > 1
    by_exp: dict[str, list[dict]] = {}
    for r in cmp:
        by_exp.setdefault(r["experiment"], []).append(r)
    for exp, g in by_exp.items():
        lo, hi = g[0]["mem_low"], g[0]["mem_high"]
        st = [s for s in stats if s["experiment"] == exp]
        g = sorted(g, key=lambda r: (_engine_rank(r["engine"]), r["context_tokens"]))
        if several:
            lines.append(f"\n#### {exp}")
        per_engine: dict[str, list[dict]] = {}
        for r in g:
            per_engine.setdefault(r["engine"], []).append(r)
        compact = max(len(e) for e in per_engine.values()) > 1
        pairs = sorted({(r["context_label"], r["context_tokens"]) for r in g}, key=lambda p: p[1])
        scaled = [f"{lab} = {tok:,} tokens" for lab, tok in pairs if scaled_context(lab, tok) != lab]
        if compact and scaled:
            lines.append(f"\nContexts scaled: {', '.join(scaled)}.\n")
        lines.append(f"- **Retries**: {_retries_by_setting(st, [lo, hi])}.")
        times, spreads, lat = [], [], []
        for engine, e in per_engine.items():
            t_parts, s_parts, l_parts = [], [], []
            for r in e:
                ctx = r["context_label"] if compact else scaled_context(r["context_label"], r.get("context_tokens"))
                low, high = (_stats_row(st, r, u) for u in (lo, hi))
                t_lo, t_hi = r["batch_time_mean_s_low"], r["batch_time_mean_s_high"]
                if not (t_lo and t_hi):
                    t_parts.append(f"{ctx} not comparable (no successful run at one setting)")
                elif compact:
                    t_parts.append(f"{ctx} {signed_pct(t_lo / t_hi - 1)}")
                else:  # one successful run a side: its times to two significant figures (units.sig2)
                    one = bool(low and high and low["runs_ok"] == 1 and high["runs_ok"] == 1)
                    secs = (lambda t: sig2(t)) if one else (lambda t: f"{t:.3g}")
                    t_parts.append(
                        f"{ctx} {_relative(t_lo, t_hi, 'longer', 'shorter')} ({secs(t_lo)} s vs {secs(t_hi)} s)"
                    )
                if low and high and (low["runs_ok"] or 0) > 1 and (high["runs_ok"] or 0) > 1:
                    s_parts.append(f"{ctx} {low['batch_time_cv']:.1%} → {high['batch_time_cv']:.1%}")
                if low and high and low["e2e_mean_ms"] and high["e2e_mean_ms"]:
                    has_ttft = bool(low["ttft_mean_ms"] and high["ttft_mean_ms"])
                    if compact:
                        l_parts.append(
                            f"{ctx} {signed_pct(low['e2e_mean_ms'] / high['e2e_mean_ms'] - 1)}"
                            + (
                                f" (TTFT {signed_pct(low['ttft_mean_ms'] / high['ttft_mean_ms'] - 1)})"
                                if has_ttft
                                else ""
                            )
                        )
                    else:
                        l_parts.append(
                            f"{ctx} mean request latency {_relative(low['e2e_mean_ms'], high['e2e_mean_ms'])} "
                            f"({ms(low['e2e_mean_ms'])} vs {ms(high['e2e_mean_ms'])})"
                            + (
                                f", mean TTFT {_relative(low['ttft_mean_ms'], high['ttft_mean_ms'])} "
                                f"({ms(low['ttft_mean_ms'])} vs {ms(high['ttft_mean_ms'])})"
                                if has_ttft
                                else ""
                            )
                        )
            sep = ", " if compact else "; "
            join = ": " if compact else " at "
            name = engine_label(engine)
            times.append(f"{name}{join}{sep.join(t_parts)}")
            if s_parts:
                spreads.append(f"{name}: {', '.join(s_parts)}")
            if l_parts:
                lat.append(f"{name}{join}{sep.join(l_parts)}")
        change = " (change in mean batch time)" if compact else ""
        lines.append(f"- **Run time** at {lo:g} against {hi:g}{change}: " + "; ".join(times) + ".")
        lines.append(
            f"- **Spread** of batch time over repeats (coefficient of variation, {lo:g} → {hi:g}): "
            + (
                "; ".join(spreads) + "."
                if spreads
                else "not measured — one successful run per engine, setting and context, so run-time stability cannot be "
                "compared."
            )
        )
        what = " (change in mean request latency, and in mean TTFT)" if compact else ""
        lines.append(
            f"- **Latency** at {lo:g} against {hi:g}{what}: " + ("; ".join(lat) if lat else "not measured") + "."
        )
    return "\n".join(lines)


def headroom_sentences(head: list[dict]) -> str:
    """How many sequences fit at each memory setting, per DCP size and context (modelled), then what the model's
    *fits* column says and what it rests on (read from each row's ``reason``), so a reader never takes a restated
    assumption for a prediction."""
    lines = []
    for row in headroom_by_config(head):
        dcp, ctx, settings = row["dcp"], row["context_tokens"], row["settings"]
        parts = ", ".join(f"{seqs:,} at {mu:g}" for mu, seqs in settings)
        more = (
            f" ({_relative(settings[-1][1], settings[0][1], 'more', 'fewer')} at {settings[-1][0]:g})"
            if len(settings) > 1 and settings[0][1]
            else ""
        )
        path = f" ({engine_label(VLLM if dcp == 1 else SGLANG)}'s path)"
        lines.append(f"- modelled, DCP {dcp}{path}, {tokens_label(ctx)} context: sequences that fit — {parts}{more}.")
    lines.append("")
    lines.append(fits_sentence(head))
    return "\n".join(lines)


def _relative(new: float, old: float, more: str = "higher", less: str = "lower") -> str:
    """``new`` against ``old`` as a direction and a percentage: '29% longer', '1.6% higher', 'the same'."""
    ratio = new / old
    if ratio == 1:
        return "the same"
    pct = abs(ratio - 1)
    return f"{pct:.1%} {more if ratio > 1 else less}" if pct < 0.1 else f"{pct:.0%} {more if ratio > 1 else less}"


def _retries_by_setting(rows: list[dict], settings: list[float]) -> str:
    """'0 at 0.92 (4 runs) and 1 at 0.95 (2 runs: sglang-jax at 200K (6,400 tok))', failed runs added when any."""
    parts, failed = [], []
    for u in settings:
        s = [r for r in rows if r["mem_util"] == u]
        where = [
            f"{engine_label(r['engine'])} at {scaled_context(r['context_label'], r.get('context_tokens'))}"
            for r in s
            if (r["retries"] or 0) > 0
        ]
        runs = sum(r["runs"] or 0 for r in s)
        parts.append(
            f"{sum(r['retries'] or 0 for r in s)} at {u:g} ({runs} run{'' if runs == 1 else 's'}"
            + (f": {', '.join(where)}" if where else "")
            + ")"
        )
        n_failed = sum(r["runs_failed"] or 0 for r in s)
        if n_failed:
            failed.append(f"{n_failed} at {u:g}")
    return " and ".join(parts) + ("; failed runs: " + ", ".join(failed) if failed else "; no run failed")


def claims_list(claims: list[dict]) -> str:
    """The document's statements (claim row dicts) as a list, each with where it says so."""
    if not claims:
        return "*The document makes no claim of this kind.*"
    return "\n".join(f"- “{r['statement']}” ({r['citation']})" for r in claims)


def headroom_intro(head: list[dict], gpu: str, model: str, article: list[dict] | None = None) -> str:
    """What the modelled headroom (row dicts) is of: the model, GPUs and DCP sizes, and the article's own set-up
    (its published row dicts) when it differs."""
    tp = head[0]["tp"] if head and "tp" in head[0] else 8
    dcps = sorted({r["dcp"] for r in head})
    paths = " and ".join(
        f"without DCP ({engine_label(VLLM)}'s path)" if d == 1 else f"with DCP {d} ({engine_label(SGLANG)}'s)"
        for d in dcps
    )
    text = (
        f"KV-cache room that each memory setting leaves for {model} on {tp}× {gpu}, {paths}, from kvlab's physical "
        f"model (the model of report 04)."
    )
    if article:
        a = article[0]
        a_gpu = str(a.get("hardware") or "").removeprefix("NVIDIA ").strip()
        if (a.get("model"), a_gpu) != (model, gpu):
            text += f" The article ran {a.get('model')} on {a.get('gpu_count')}× {a_gpu}."
    return text


def fits_sentence(head: list[dict]) -> str:
    """What the model's *fits* column says at each memory setting and what it rests on: KV room for one sequence,
    weights within the target, and memory left outside the target against an assumed need (an assumption set from
    the B300 article's own report, so a *fits = false* there restates the article rather than predicting it)."""
    frac = Assumptions().outside_pool_fraction
    parts, restated = [], False
    by_util: dict[float, list[dict]] = {}
    for r in sorted(head, key=lambda r: r["mem_util"]):
        by_util.setdefault(r["mem_util"], []).append(r)
    for u, g in by_util.items():
        bad = [r for r in g if r["fits"] is False]
        if not bad:
            parts.append(f"every row fits at {u:g}")
            continue
        r = bad[0]
        n = f"{len(bad)} of {len(g)} rows"
        if fails_outside_pool(r):  # short outside the pool, not of KV room or of room for the weights
            outside = r["outside_pool_gib_per_gpu"]
            need = r.get("outside_need_gib_per_gpu") or frac * outside / (1 - u)
            parts.append(
                f"at {u:g} it marks {n} as not fitting — not for lack of KV room, but because {u:g} leaves "
                f"{outside:.1f} GiB per GPU outside the target, less than the {need:.1f} GiB ({frac:.1%} of "
                f"the GPU) the model assumes activations, CUDA graphs and communication buffers need there"
            )
            restated = True
        else:
            parts.append(f"at {u:g} {n} do not fit: {r['reason']}")
    text = "The model's *fits* column: " + "; ".join(parts) + "."
    if restated:
        text += (
            f" That {frac:.1%} is not derived: it was chosen between what the article's two settings leave "
            "outside the target (the one that failed and the one that worked), so *fits = false* there restates "
            "the article's OOM claim rather than predicting it — report 04's table shows the same flag for the same "
            "reason. What the model does derive is the KV room above."
        )
    return text


def headroom_caption(head: list[dict]) -> str:
    """One sentence for the headroom figure (``head``: the headroom row dicts): how much more the higher setting
    fits, and what DCP multiplies it by."""
    us = sorted({r["mem_util"] for r in head})
    if not head:
        return "Modelled: no configuration."
    lo, hi = us[0], us[-1]
    text = "Modelled"
    if lo != hi:
        w = sorted(headroom_pairs(head, "mem_util", lo, hi), key=lambda r: (r["dcp"], r["context_tokens"]))
        gain = [r["b"] / r["a"] - 1 for r in w]
        if not gain:
            return (
                f"Modelled: not one sequence fits at {lo:g} in any configuration shown "
                f"({head[0]['reason']}), so there is no room to compare."
            )
        g_txt = (
            f"{min(gain):.0%}"
            if round(min(gain), 2) == round(max(gain), 2)
            else f"{min(gain) * 100:.0f}–{max(gain):.0%}"
        )
        ex = [r for r in w if r["dcp"] == min(x["dcp"] for x in w)][-1]
        text += (
            f": {hi:g} fits {g_txt} more sequences than {lo:g} at every context and DCP size shown "
            f"(DCP {ex['dcp']}, {tokens_label(ex['context_tokens'])}: {ex['b']:,} vs {ex['a']:,})"
        )
    dcps = sorted({r["dcp"] for r in head})
    if len(dcps) > 1:
        r = [x["b"] / x["a"] for x in headroom_pairs(head, "dcp", dcps[0], dcps[-1])]
        if r:
            r_txt = f"{min(r):.1f}×" if round(min(r), 1) == round(max(r), 1) else f"{min(r):.1f}–{max(r):.1f}×"
            text += f"{';' if lo != hi else ':'} DCP {dcps[-1]} fits {r_txt} as many as DCP {dcps[0]}"
    if text == "Modelled":
        r = head[0]
        text += (
            f": {r['max_concurrent_seqs']:,} sequences of {tokens_label(r['context_tokens'])} fit at {r['mem_util']:g}"
        )
    return text + "."


def memory_table(stats: list[dict]):
    """The memory study (``stats``: :func:`kvlab.analysis.memory_study`'s row dicts) as a reader's table: one row
    per engine, context and setting (settings of one context side by side), with the spread and counters only where
    some run has them."""
    several = len({r["experiment"] for r in stats}) > 1
    s = [r | {"batch_time_cv_pct": None if r["batch_time_cv"] is None else r["batch_time_cv"] * 100} for r in stats]
    s.sort(
        key=lambda r: (
            ((r["experiment"],) if several else ())
            + (_engine_rank(r["engine"]), r["engine"], r["context_tokens"], r["mem_util"])
        )
    )
    cols = {"experiment": "experiment"} if several else {}
    cols |= {
        "engine": "engine",
        "context_label": "context",
        "context_tokens": "context (tokens)",
        "mem_util": "memory utilisation",
        "runs": "runs",
        "runs_ok": "runs succeeded",
        "retries": "retries",
    }
    if sum(r["runs_failed"] or 0 for r in s):
        cols["runs_failed"] = "runs failed"
    cols["batch_time_mean_s"] = "batch time, mean (s)"
    if any(r["batch_time_cv_pct"] is not None for r in s):
        cols["batch_time_cv_pct"] = "batch-time spread, CV (%)"
    cols |= {"ttft_mean_ms": "mean TTFT (ms)", "e2e_mean_ms": "mean request latency (ms)"}
    if any(r.get("preemptions") is not None for r in s):
        cols["preemptions"] = "preemptions"
    return tables.table(s, cols)


def memory_caption(stats: list[dict], cmp: list[dict]) -> str:
    """One sentence for the memory-study figure: retries at each setting, then at the largest context measured at
    both settings, batch time and mean request latency at the lower setting against the higher, per engine."""
    if not stats:
        return "Measured: no run with a memory setting."
    us = sorted({r["mem_util"] for r in stats})
    retries = {u: sum(r["retries"] or 0 for r in stats if r["mem_util"] == u) for u in us}
    failed = int(sum(r["runs_failed"] or 0 for r in stats))
    text = (
        "Measured: "
        + (
            "no retry"
            if not any(retries.values())
            else ", ".join(f"{n} retr{'y' if n == 1 else 'ies'} at {u:g}" for u, n in retries.items())
        )
        + ("" if any(retries.values()) else " at any setting")
        + (f", {failed} failed run{'s' if failed != 1 else ''}" if failed else ", no failed run")
    )
    ok = [r for r in cmp if r["time_ratio"] is not None]
    if ok:
        top = max(r["context_tokens"] for r in ok) if "context_tokens" in ok[0] else None
        at = [r for r in ok if top is None or r["context_tokens"] == top]
        at = sorted(at, key=lambda r: _engine_rank(r["engine"]))
        r0 = at[0]
        lo, hi = r0["mem_low"], r0["mem_high"]
        times = " and ".join(
            f"{_relative(r['batch_time_mean_s_low'], r['batch_time_mean_s_high'], 'longer', 'shorter')} "
            f"for {engine_label(r['engine'])}"
            for r in at
        )
        lat = []
        for r in at:
            a, b = _stats_row(stats, r, lo), _stats_row(stats, r, hi)
            if a and b and a["e2e_mean_ms"] and b["e2e_mean_ms"]:
                lat.append(f"{_relative(a['e2e_mean_ms'], b['e2e_mean_ms'])} for {engine_label(r['engine'])}")
        text += (
            f"; at {scaled_context(r0['context_label'], r0.get('context_tokens'))}, {lo:g} against {hi:g}: batch time "
            f"{times}" + (f", mean request latency {' and '.join(lat)}" if lat else "")
        )
    return text + "."


def memory_scope(runs: list[dict], setting: str | None) -> str:
    """What the measured memory study can and cannot test on the host that ran it (``runs``: the run row dicts;
    ``setting``: what their memory setting means, :func:`kvlab.claims.memory.memory_setting`)."""
    m = [r for r in runs if r["source"] == "measured"]
    if not m:
        return ""
    if setting == "host_reserve":
        return (
            "**What this host tests.** These runs had no GPU and no explicit KV-cache budget: each memory setting "
            "is the share of host memory vLLM's CPU build reserves, and it refuses to start when that much is not "
            "free. Retries here are those start-up refusals on this host's free memory — the CPU twin of a GPU's "
            "start-up memory check. They do not test the article's OOM retries, which on a GPU come from "
            "activations, CUDA graphs and communication buffers overflowing the memory left outside the KV pool. "
            "The verdicts at the top say so claim by claim."
        )
    if setting is None:
        return (
            "**What this host tests.** These runs record neither a KV-cache budget nor the device they ran on, so "
            "what their memory setting meant is not known here: the verdicts at the top do not take the article's "
            "OOM claims as tested."
        )
    if setting == "mixed":
        return (
            "**What this host tests.** These runs mix memory settings of different meaning (explicit KV-cache "
            "budgets and host-memory reserves, or CPU and GPU runs): read each experiment on its own. The "
            "verdicts at the top do not take the article's OOM claims as tested."
        )
    if setting == "kv_budget":
        return (
            "**What this host tests.** These runs had no GPU: kvlab maps each memory setting to an explicit "
            "KV-cache budget (a simulated device), so the lower setting only means less KV room — fewer requests "
            "held at once. That tests the capacity side of the trade-off (run time, latency). It does not test the "
            "article's OOM retries: on a GPU they come from activations, CUDA graphs and communication buffers "
            "overflowing the memory left outside the KV pool, which a CPU run does not carve up. The verdicts at "
            "the top say so claim by claim."
        )
    gpus = ", ".join(sorted({str(r["gpu_count"]) for r in m if r.get("gpu_count") is not None}))
    return (
        f"**What this host tests.** These runs were served on GPUs ({gpus} per run): each memory setting is the "
        "engine's own memory-utilisation target, so retries, run time and latency test the article's claims "
        "directly, for this hardware and model."
    )


#: What each server counter is, as a reader names it.
COUNTER_NAMES = {
    "server_preemptions": "preemptions",
    "server_prompt_tokens": "prompt tokens",
    "server_generation_tokens": "generated tokens",
    "server_prefix_cache_queries": "prefix-cache queries",
    "server_prefix_cache_hits": "prefix-cache hits",
}


def counters_note(runs: list[dict]) -> str:
    """Engines whose server counters are missing in every measured run (``runs``: the run row dicts), the counters
    named in words: shown empty (not available), never as 0."""
    cols = [c for c in (runs[0] if runs else {}) if c.startswith("server_")]
    per_engine: dict[str, list[dict]] = {}
    for r in runs:
        if r["source"] == "measured":
            per_engine.setdefault(r["engine"], []).append(r)
    lines = []
    for engine, g in per_engine.items():
        missing = [c for c in cols if all(r[c] is None for r in g)]
        names = ", ".join(COUNTER_NAMES.get(c, c.removeprefix("server_").replace("_", " ")) for c in missing)
        runs_txt = f"{len(g)} run{'' if len(g) == 1 else 's'}"
        if missing and len(missing) == len(cols):
            lines.append(
                f"- {engine_label(engine)} reported no server counters ({names}) in any of its {runs_txt}: "
                "tables show them empty (–, not available), never as 0."
            )
        elif missing:
            lines.append(
                f"- {engine_label(engine)} did not report {names} in any of its {runs_txt}: shown empty (–, not "
                "available), never as 0."
            )
    return "\n".join(lines)


def memory_answer(budgets: list[dict], outside: list[dict], totals: dict, gpu: str, model: str) -> tuple[str, ...]:
    """Report 03's answer: whether 0.95 runs out of memory on the reference host cannot be measured without its GPUs;
    what the documents say (published prose, in conflict); what the setting means on this host (a KV budget the
    experiment file sets: configuration) and what the runs here saw; the model's memory left outside the pool."""
    first = (
        f"Whether 0.95 runs out of memory on {gpu} cannot be tested here: this host has no GPU memory to run out "
        "of. The 8×B300 article says 0.95 caused out-of-memory retries for both engines and 0.92 removed them "
        "(published, no figures given); the KV-cache design article's own example runs vLLM at 0.95, so the two "
        "documents conflict."
    )
    if len(budgets) >= 2:
        lo, hi = budgets[0], budgets[-1]

        def pool(r: dict) -> str:
            return tables.span(r.get("pool_tokens_low"), r.get("pool_tokens_high"), "{:,}".format)

        pools = (
            f"; the engines made KV pools of {pool(lo)} and {pool(hi)} tokens of them"
            if lo.get("pool_tokens_low") is not None and hi.get("pool_tokens_low") is not None
            else ""
        )
        retries = totals["retries"]
        second = (
            f"On this host the setting is configuration, not a finding: {lo['mem_util']:g} and {hi['mem_util']:g} "
            f"are KV budgets of {lo['kv_budget_mib']:.3g} MiB and {hi['kv_budget_mib']:.3g} MiB "
            f"({hi['ratio_to_lowest']:.2f}×) that the experiment file sets{pools}; its {totals['runs']} runs needed "
            f"{'no' if retries == 0 else retries} {'retry' if retries == 1 else 'retries'}."
        )
    else:
        second = "No run on this host compares two memory settings."
    third = ""
    if len(outside) >= 2:
        third = (
            f"The model leaves {outside[0]['outside_pool_gib_per_gpu']:.1f} GiB per GPU outside the KV pool at "
            f"{outside[0]['mem_util']:g} and {outside[-1]['outside_pool_gib_per_gpu']:.1f} GiB at "
            f"{outside[-1]['mem_util']:g} for {model} on {gpu} (modelled; the need it is compared with, "
            f"{outside[-1]['outside_need_gib_per_gpu']:.1f} GiB, is an assumption)."
        )
    return tuple(s for s in (first, second, third) if s)
