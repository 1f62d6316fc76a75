"""Report 05 (prefix sharing): hit rates, radix against paged caches, the threshold test, multi-turn reuse, tables, captions and verdicts."""

from __future__ import annotations

import polars as pl

from kvlab.claims.sharing import _prefix_bracket, _prefix_engine_order, _prefix_ordered, _prefix_times, prefix_verdicts
from kvlab.guide import FAMILY, engine_label
from kvlab.tables import ms, percent

__all__ = ["prefix_verdicts"]


#: The article's claims report 05 tests, each with how it tests them (the article's other claims are 06's).
PREFIX_CLAIMS = {
    "vllm_no_prefix_sharing": "vLLM's CPU build with automatic prefix caching on (its default) and off: the share of "
                              "prompt tokens it served from its cache",
    "sglang_radix_sharing": "SGLang (on a CPU host, PyTorch SGLang with torch-native kernels; sglang-jax, its JAX "
                            "runtime, keeps the same radix cache): the share of prompt tokens served from the cache",
    "sglang_radix_suffix": "the same runs: which requests found the prefix in the radix cache (each request after "
                           "the first should compute only its own suffix)",
    "shared_prefix_threshold": "both engines below and above 30% shared: which finishes the batch first, and "
                               "whether what the cache saves jumps at 30%",
}


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
