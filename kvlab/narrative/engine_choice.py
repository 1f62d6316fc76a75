"""Report 06 (engine choice): the evidence rule, the decision tree and the evidence in words, the answer, captions and verdicts."""

from __future__ import annotations

import polars as pl

from kvlab.guide import (
    CONCURRENCY_THRESHOLD, FAMILY, MIN_MARGIN, Evidence, Recommendation, UserWorkload, engine_label, nearest,
)
from kvlab.tables import ms


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
