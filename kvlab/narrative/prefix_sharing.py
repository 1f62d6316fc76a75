"""Report 05 (prefix sharing): hit rates, radix against paged caches, the threshold test, multi-turn reuse, tables, captions and verdicts."""

from __future__ import annotations

from kvlab import tables
from kvlab.claims.sharing import _prefix_bracket, _prefix_times, prefix_verdicts, saving_trend, turn_n
from kvlab.engines import SGLANG, VLLM, VLLM_CPU_BLOCK_TOKENS, engine_label, registry
from kvlab.tables import ms, percent
from kvlab.units import apart, measured, minus, ratio, signed_pct, time_against

__all__ = ["prefix_verdicts"]


def _rank(engine: str) -> int:
    """An engine's place in the order every prefix figure and table lists them (kvlab.engines.registry.order),
    unknown ones last."""
    return registry.order(engine)


def _groups(rows, *keys: str) -> dict:
    """``rows`` grouped by ``keys`` (one key: its value; several: a tuple), in order of first appearance."""
    out: dict = {}
    for r in rows:
        out.setdefault(r[keys[0]] if len(keys) == 1 else tuple(r[k] for k in keys), []).append(r)
    return out


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


def prefix_claims_table(claims: list[dict]):
    """The claims (row dicts) this report tests, each beside how it tests them (the source is said once, below the
    table)."""
    c = [
        {"statement": r["statement"], "tested_by": PREFIX_CLAIMS[r["claim_id"]]}
        for r in claims
        if r["claim_id"] in PREFIX_CLAIMS
    ]
    return tables.table(c, {"statement": "what the article says", "tested_by": "how this report tests it"})


def sharing_table(rows: list[dict], block_tokens: int = VLLM_CPU_BLOCK_TOKENS):
    """One row per engine and shared fraction (``rows``: :func:`kvlab.claims.sharing.sharing_points`' row dicts):
    the cache on beside off (hit rate, mean TTFT, median batch time) and the two ideals, rates in %; spread columns
    only where points have repeats."""
    cols = {
        "engine": "engine",
        "fraction_pct": "shared prefix (% of prompt)",
        "shared_prefix_tokens": "shared prefix (tokens)",
        "hit_on": "cache-hit rate, cache on (%)",
        "hit_off": "cache-hit rate, cache off (%)",
        "ideal": "ideal, token-exact (%)",
        "block": f"ideal in whole {block_tokens}-token blocks (%)",
        "ttft_on": "mean TTFT, cache on (ms)",
        "ttft_off": "mean TTFT, cache off (ms)",
        "batch_on": "median batch time, cache on (s)",
        "batch_off": "median batch time, cache off (s)",
    }
    notes = []
    off = [r["hit_off"] for r in rows if r["hit_off"] is not None]
    if off and max(off) == 0:  # said once instead of a column of zeros
        del cols["hit_off"]
        notes.append("with the prefix cache off every cache-hit rate is 0%")
    runs = [v for v in [r["runs_on"] for r in rows] + [r["runs_off"] for r in rows] if v is not None]
    if runs and max(runs) > 1:  # the spread the figure's whiskers draw: least to most over the runs, not a std
        cols |= {
            "range_on": "batch time, cache on: least–most over the runs (s)",
            "range_off": "batch time, cache off: least–most over the runs (s)",
            "runs_on": "runs, on",
            "runs_off": "runs, off",
        }
        rows = [
            r | {"range_on": tables.span(r["lo_on"], r["hi_on"]), "range_off": tables.span(r["lo_off"], r["hi_off"])}
            for r in rows
        ]
        notes.insert(0, "median over the runs of each point; spread: least to most over them, as the figure's whiskers")
    else:
        notes.insert(0, "one run per point (no repeats)")
    return tables.table(rows, cols, caption="; ".join(notes))


def gain_table(rows: list[dict]):
    """Per engine and shared fraction: what the prefix cache buys (off ÷ on), rates in %. Each ratio and the time
    saved as :func:`kvlab.units.ratio` gives a measured ratio: two significant figures where the row rests on one run
    a side (``n_runs`` = 1), else two decimals; where points have repeats, each ratio's least–most over them (least
    off ÷ most on to most off ÷ least on: the figure's whiskers). ``rows``: :func:`kvlab.claims.sharing.gain_points`'
    row dicts."""
    runs = [r["n_runs"] for r in rows if r.get("n_runs") is not None]
    spread = bool(runs) and max(runs) > 1 and all("batch_speedup_min" in r for r in rows)
    shown = []
    for r in rows:
        n = r.get("n_runs")
        row = {
            "engine": r["engine"],
            "fraction_pct": r["fraction_pct"],
            "hit_on": r["hit_on"],
            "ttft_speedup": _measured_ratio(r["ttft_speedup"], n),
            "batch_speedup": _measured_ratio(r["batch_speedup"], n),
            "saved": "–" if r["saved"] is None else ratio(r["saved"], 1) if n == 1 else tables.number(r["saved"]),
        }
        if spread:
            row |= {
                "ttft_range": tables.span(r["ttft_speedup_min"], r["ttft_speedup_max"], lambda x: ratio(x, n)),
                "batch_range": tables.span(r["batch_speedup_min"], r["batch_speedup_max"], lambda x: ratio(x, n)),
            }
        shown.append(row)
    ttft = {"ttft_speedup": "mean TTFT, off ÷ on (×)"}
    batch = {"batch_speedup": "median batch time, off ÷ on (×)"}
    if spread:
        ttft["ttft_range"] = "mean TTFT, off ÷ on: least–most over the runs (×)"
        batch["batch_range"] = "median batch time, off ÷ on: least–most over the runs (×)"
        caption = "median over the runs of each point; spread: least to most over them, as the figure's whiskers"
    else:
        caption = "one run a side per point (no repeats): ratios to two significant figures" if runs else None
    return tables.table(
        shown,
        {
            "engine": "engine",
            "fraction_pct": "shared prefix (% of prompt)",
            "hit_on": "cache-hit rate, cache on (%)",
            **ttft,
            **batch,
            "saved": "batch time saved by the cache (%)",
        },
        caption=caption,
    )


def _measured_ratio(x: float | None, n: int | None) -> str:
    """A measured ratio as a cell: :func:`kvlab.units.ratio` (two significant figures at n = 1), '–' when missing."""
    return "–" if x is None else ratio(x, n)


def turns_table(t: list[dict]):
    """Per engine and turn (``t``: :func:`kvlab.claims.sharing.turn_points`' row dicts): prompt length, tokens
    served from the cache and mean TTFT with the cache on beside off."""
    cols = {
        "engine": "engine",
        "turn": "turn",
        "prompt_tokens": "prompt (tokens)",
        "requests": "conversations",
        "cached_on": "cached per request, cache on (tokens)",
        "share_on": "share of prompt cached, cache on (%)",
        "cached_off": "cached per request, cache off (tokens)",
        "ttft_on": "mean TTFT, cache on (ms)",
        "ttft_off": "mean TTFT, cache off (ms)",
        "ratio": "mean TTFT, off ÷ on (×)",
    }
    if any(
        (r["reported_on"] is not None and r["reported_on"] != r["requests"])
        or (r["reported_off"] is not None and r["reported_off"] != r["requests"])
        for r in t
    ):
        cols |= {
            "reported_on": "requests reporting a cached count, cache on",
            "reported_off": "requests reporting a cached count, cache off",
        }
    off = [r["cached_off"] for r in t]
    caption = None
    if off and None not in off and max(off) == 0:  # said once instead of a column of zeros
        del cols["cached_off"]
        caption = "with the prefix cache off no request found any token in the cache"
    return tables.table(t, cols, caption=caption)


def ideal_reuse_caption(
    rows: list[dict], prompt_tokens: int, requests: int, block_tokens: int, threshold: float
) -> str:
    """What the modelled ideal-reuse figure (``rows``: :func:`kvlab.analysis.ideal_sharing`'s row dicts) shows: the
    straight token-exact line, and where whole blocks lose most."""
    if not rows:
        return "Modelled: no shared fraction given."
    top = max(rows, key=lambda r: r["shared_fraction"])
    gap = max(({**r, "d": r["ideal_hit_rate"] - r["block_hit_rate"]} for r in rows), key=lambda r: r["d"])
    return (
        f"Modelled for {requests} requests of {prompt_tokens:,} tokens: a token-exact cache could serve at most "
        f"{top['ideal_hit_rate']:.0%} of prompt tokens at {top['shared_fraction']:.0%} shared, on a straight line "
        f"(shared fraction × {requests - 1}/{requests}) with no step at the article's {threshold:.0%}; a cache of "
        f"whole {block_tokens}-token blocks falls short of it by up to {gap['d'] * 100:.1f} percentage points "
        f"({gap['block_hit_rate']:.0%} against {gap['ideal_hit_rate']:.0%} at {gap['shared_fraction']:.0%} shared)."
    )


def prefix_sharing_caption(rows: list[dict], compare_engines: bool = True) -> str:
    """What the measured prefix-sharing figure shows: each engine's hit rate at the most shared fraction against
    its ideal, the caches off, and (``compare_engines``) which engine finishes the batch first with and without
    sharing; without it, for a figure that sets each engine only against itself, the hit rates alone (``rows``:
    :func:`kvlab.analysis.prefix_sharing`'s row dicts)."""
    on = [r for r in rows if r["prefix_caching"] and r["cache_hit_rate"] is not None]
    if not on:
        return "Measured: no engine reported a cache-hit count with its prefix cache on."
    top = max(r["shared_fraction"] for r in on)
    parts = []
    for r in sorted((r for r in on if r["shared_fraction"] == top), key=lambda r: _rank(r["engine"])):
        ideal = (
            f"its whole-block ideal {r['block_ideal_hit_rate']:.0%}"
            if registry.family(r["engine"]) == VLLM
            else f"token-exact ideal {r['ideal_hit_rate']:.0%}"
        )
        parts.append(f"{engine_label(r['engine'])} {r['cache_hit_rate']:.0%} ({ideal})")
    text = (
        f"At {top:.0%} shared, with its prefix cache on, "
        + " and ".join(parts)
        + " of prompt tokens came from the cache"
    )
    off = [r["cache_hit_rate"] for r in rows if r["prefix_caching"] is False and r["cache_hit_rate"] is not None]
    if off:
        text += (
            "; with the caches off every hit rate is 0%"
            if max(off) == 0
            else f"; with the caches off at most {max(off):.0%}"
        )
    pair = {
        f: sorted(g, key=lambda r: r["batch_time_s"])
        for f, g in _groups((r for r in rows if r["prefix_caching"]), "shared_fraction").items()
        if compare_engines and len({r["engine"] for r in g}) >= 2 and all(r["batch_time_s"] is not None for r in g)
    }
    if top in pair:
        g = pair[top]
        fast, slow = g[0], g[-1]
        text += (
            f". {engine_label(fast['engine'])} finishes the batch {slow['batch_time_s'] / fast['batch_time_s']:.1f}× "
            f"sooner than {engine_label(slow['engine'])} there"
        )
        zero = pair.get(0.0)
        if zero is not None and top != 0.0:
            z = zero[0]
            ratio = zero[-1]["batch_time_s"] / zero[0]["batch_time_s"]
            text += (
                f" and {ratio:.1f}× sooner with nothing shared, so sharing does not change which engine is faster"
                if z["engine"] == fast["engine"]
                else f", but {engine_label(z['engine'])} is {ratio:.1f}× faster with nothing shared: sharing changes "
                "which engine is faster"
            )
    return text + "."


def caching_gain_caption(gain: list[dict], thresholds: dict) -> str:
    """What the caching-gain figure shows, per engine: batch time off ÷ on with nothing shared and at the most shared
    fraction (two significant figures where a point rests on one run a side), and what the threshold test made of
    it."""
    parts = []
    rows = sorted(gain, key=lambda r: (_rank(r["engine"]), r["shared_fraction"]))
    for engine, g in _groups(rows, "engine").items():
        first, last = g[0], g[-1]
        th = thresholds.get(engine)
        s = (
            f"{engine_label(engine)}: batch time {_prefix_times(first['batch_speedup'], n=first.get('n_runs'))} with "
            f"the cache at {first['shared_fraction']:.0%} shared, "
            f"{_prefix_times(last['batch_speedup'], n=last.get('n_runs'))} at {last['shared_fraction']:.0%}"
        )
        if th is not None and th.verdict == "inconclusive":
            s += (
                f" — but at {first['shared_fraction']:.0%} nothing can be reused, so a difference that size is not "
                "the cache's doing"
            )
        elif th is not None and th.verdict == "threshold" and (b := _prefix_bracket(g, th.at)):
            s += (
                f", the saving {'jumping' if b[1]['time_saved'] > b[0]['time_saved'] else 'falling'} from "
                f"{signed_pct(b[0]['time_saved'])} at {b[0]['shared_fraction']:.0%} to "
                f"{signed_pct(b[1]['time_saved'])} at {b[1]['shared_fraction']:.0%}"
            )
        elif th is not None and th.verdict == "smooth":
            s += f", {'falling' if saving_trend(g) == 'fall' else 'rising'} with no jump"
        parts.append(s)
    if not parts:
        return "Measured: no shared fraction was run with the prefix cache both on and off."
    return "Above 1× the cache helps: " + "; ".join(parts) + "."


def multi_turn_caption(by_turn: list[dict]) -> str:
    """What the multi-turn figure shows: the last turn's cached share and TTFT, cache on against off, per engine."""
    parts, last_turn = [], None
    rows = sorted(by_turn, key=lambda r: (_rank(r["engine"]), r["turn"]))
    for engine, g in _groups(rows, "engine").items():
        on, off = [r for r in g if r["prefix_caching"]], [r for r in g if r["prefix_caching"] is False]
        if not on:
            continue
        last = on[-1]
        last_turn = last["turn"]
        share = (
            "no cached-token count"
            if last["cached_share"] is None
            else f"{last['cached_share']:.0%} of its prompt cached"
        )
        o = [r for r in off if r["turn"] == last["turn"]]
        ttft = ""
        if o and last["ttft_mean_ms"]:
            t = _prefix_times(o[0]["ttft_mean_ms"] / last["ttft_mean_ms"], n=turn_n(last, o[0]))
            ttft = f", mean TTFT {t} {'against' if t.startswith('unchanged') else 'than with'} the cache off"
        parts.append(f"{engine_label(engine)} {share}{ttft}")
    if not parts:
        return "Measured: no multi-turn run with the prefix cache on."
    off_all = [r["cached_tokens"] for r in rows if r["prefix_caching"] is False and r["cached_tokens"] is not None]
    tail = "; with the caches off no token came from the cache" if off_all and max(off_all) == 0 else ""
    return f"Last turn (turn {last_turn}), prefix cache on: " + "; ".join(parts) + tail + "."


def reuse_sentences(reuse: list[dict]) -> str:
    """Per engine with its cache on: how many requests found the prefix cached at each shared fraction, in all and
    among the first wave sent together at the start; then, computed, what that says about when each cache shares."""
    on = [r for r in reuse if r["prefix_caching"] and r["shared_fraction"] > 0 and r["requests_hit"] is not None]
    if not on:
        return "*No per-request cached-token counts with the cache on: which requests reused the prefix is not known.*"
    lines, first_wave = [], {}
    on.sort(key=lambda r: (_rank(r["engine"]), r["shared_fraction"]))
    for engine, g in _groups(on, "engine").items():
        pts = ", ".join(
            f"{r['shared_fraction']:.0%} shared: {r['requests_hit']} of {r['requests']} "
            f"({r['first_wave_hit']} of the {r['first_wave']} sent first)"
            for r in g
        )
        lines.append(f"- {engine_label(engine)}, cache on — requests that found the prefix in the cache: {pts}.")
        first_wave[engine] = g[-1]
    radix = [e for e in first_wave if registry.family(e) == SGLANG]
    if radix and VLLM in first_wave:
        r, v = first_wave[radix[0]], first_wave[VLLM]
        if r["first_wave_hit"] < v["first_wave_hit"]:
            later_all = (
                r["requests_hit"] - r["first_wave_hit"] == r["requests"] - r["first_wave"]
                and r["cached_tokens_per_hit"] == r["shared_prefix_tokens"]
            )
            lines.append(
                f"- At {r['shared_fraction']:.0%} shared, {r['first_wave_hit']} of the {r['first_wave']} requests "
                f"{engine_label(radix[0])} received together at the start found the prefix in its radix cache; "
                f"{engine_label(VLLM)} reused its blocks for {v['first_wave_hit']} of {v['first_wave']}. In these runs the requests that "
                f"reached {engine_label(radix[0])} while the prefix was still being computed computed it again"
                + (
                    f"; every later request reused all {r['shared_prefix_tokens']:,} prefix tokens."
                    if later_all
                    else "."
                )
            )
    return "\n".join(lines)


def prefix_citation_note(claims: list[dict]) -> str:
    """Where the claims (row dicts) come from, the document named once and the sections after it."""
    cites = list(dict.fromkeys(r["citation"] for r in claims if r.get("citation") is not None))
    if not cites:
        return "*No citation recorded for these claims.*"
    docs: dict[str, list[str]] = {}
    for c in cites:
        head, sep, tail = c.rpartition("), ")
        doc, part = (head + ")", tail) if sep else (c, "")
        docs.setdefault(doc, []).append(part)
    return (
        "Source: "
        + "; ".join(
            f"{d}" + (f" — {', '.join(p for p in parts if p)}" if any(parts) else "") for d, parts in docs.items()
        )
        + "."
    )


def prefix_claim_verdict(sharing: list[dict], engine: str = VLLM) -> str:
    """Does ``engine`` share prefixes? Hit rates with its prefix cache on vs off at the largest shared fraction
    (``sharing``: :func:`kvlab.analysis.prefix_sharing`'s row dicts)."""
    e = [r for r in sharing if r["engine"] == engine and r["cache_hit_rate"] is not None]
    on, off = [r for r in e if r["prefix_caching"]], [r for r in e if r["prefix_caching"] is False]
    if not on:
        return f"*No measured {engine_label(engine)} runs with its prefix cache on: the claim is untested here.*"
    top = sorted(on, key=lambda r: r["shared_fraction"])[-1]
    off_top = [r for r in off if r["shared_fraction"] == top["shared_fraction"]]
    off_txt = (
        f"; with it off (`{registry.flag(engine, 'prefix_cache_off')}`, what the document describes) "
        f"{off_top[0]['cache_hit_rate']:.0%}"
        if off_top
        else ""
    )
    shares = top["cache_hit_rate"] > 0
    verdict = (
        "**The claim does not hold for current vLLM**: with automatic prefix caching (on by default) requests "
        "do share the common prefix's KV blocks."
        if shares
        else "**The data agree with the claim**: no prompt token came from the cache."
    )
    return (
        f"- measured ({top['hardware']}): at {top['shared_fraction']:.0%} shared, {engine_label(engine)} with its prefix "
        f"cache on served **{top['cache_hit_rate']:.0%}** of prompt tokens from the cache (ideal "
        f"{top['ideal_hit_rate']:.0%}){off_txt}.\n- {verdict}"
    )


def _sources(g: list[dict]) -> str:
    src = list(dict.fromkeys(r["hit_source"] for r in g if r.get("hit_source") is not None))
    return f" (counted from its {' and '.join(src)})" if src else ""


def hit_rate_sentence(sharing: list[dict]) -> str:
    """Hit rate by shared fraction per configuration (``sharing``: row dicts), as one line each, saying which count
    it comes from."""
    lines = []
    rows = sorted(sharing, key=lambda r: r["shared_fraction"])
    for (engine, caching), g in _groups(rows, "engine", "prefix_caching").items():
        rates = ", ".join(percent(r["cache_hit_rate"]) for r in g)
        shared = ", ".join(f"{r['shared_fraction']:.0%}" for r in g)
        lines.append(
            f"- {engine_label(engine)}, prefix cache {'on' if caching else 'off'}: cache-hit rate {rates} at "
            f"{shared} shared{_sources(g)}."
        )
    return "\n".join(lines)


def radix_vs_paged_sentence(found: tuple[str, list[dict]] | None, block_tokens: int = VLLM_CPU_BLOCK_TOKENS) -> str:
    """SGLang-family radix cache against vLLM's paged blocks, cache on, at every shared fraction both measured
    (``found``: :func:`kvlab.claims.sharing.radix_paged_pairs`, the radix engine and the paired rows, or None).

    Each line: both hit rates beside the token-exact ideal (``ideal_hit_rate``) and the whole-block
    ideal (``block_ideal_hit_rate``), then TTFT and batch time; a last line names the largest hit-rate gap.
    """
    if found is None:
        return "*Radix vs paged: no shared fraction was measured with both vLLM and an SGLang-family engine, cache on.*"
    radix_engine, both = found
    if not both:
        return "*Radix vs paged: no shared fraction holds both engines with the cache on.*"
    lr, lp = engine_label(radix_engine), engine_label(VLLM)
    lines = []
    for r in both:
        lines.append(
            f"- {r['shared_fraction']:.0%} shared ({r['shared_prefix_tokens']:,} prefix tokens): {lr} served "
            f"**{percent(r['cache_hit_rate_r'])}** of prompt tokens from its radix cache (token-exact ideal "
            f"{r['ideal_hit_rate']:.0%}), {lp} **{percent(r['cache_hit_rate'])}** from its paged cache (whole "
            f"{block_tokens}-token-block ideal {r['block_ideal_hit_rate']:.0%}); mean TTFT {ms(r['ttft_mean_ms_r'])} "
            f"vs {ms(r['ttft_mean_ms'])}, median batch time {measured(r['batch_time_s_r'], r.get('n_runs_r', r.get('n_runs')))} s vs "
            f"{measured(r['batch_time_s'], r.get('n_runs'))} s."
        )
    gaps = [
        {**r, "gap": r["cache_hit_rate_r"] - r["cache_hit_rate"]}
        for r in both
        if r["cache_hit_rate"] is not None and r["cache_hit_rate_r"] is not None
    ]
    if gaps:
        g = max(gaps, key=lambda r: abs(r["gap"]))
        more, less = (lr, lp) if g["gap"] >= 0 else (lp, lr)
        lines.append(
            f"- Largest hit-rate gap: at {g['shared_fraction']:.0%} shared, {more} served "
            f"**{abs(g['gap']) * 100:.1f} percentage points** more of the prompt from its cache than {less}."
        )
    return "\n".join(lines)


def threshold_sentence(th, gain: list[dict]) -> str:
    """Whether the tree's threshold shows in the caching gain (``gain``: one engine's caching-gain row dicts), in
    words, with the numbers that decide it."""
    if th.verdict == "no data":
        return "*Fewer than three shared fractions with the cache both on and off: the threshold cannot be tested.*"
    pts = ", ".join(
        f"{r['shared_fraction']:.0%} → {signed_pct(r['time_saved'])}"
        for r in sorted(gain, key=lambda r: r["shared_fraction"])
    )
    first = (
        f"the smallest measured fraction saving at least {th.min_gain:.0%} of batch time is **{th.first_fraction:.0%} shared**"
        if th.first_fraction is not None
        else f"no measured fraction saves {th.min_gain:.0%} of batch time"
    )
    slopes = (
        f"fitted slope below {th.at:.0%}: {minus(f'{th.slope_below:.2f}')}, from {th.at:.0%} up: "
        f"{minus(f'{th.slope_above:.2f}')} "
        f"(time saved per unit of shared fraction); one straight line through all points has R² {th.r2_linear:.2f}"
    )
    losses = ""
    if th.losses:
        losses = (
            "; below it the cache did not pay: "
            + ", ".join(f"{f:.0%} → {signed_pct(v)}" for f, v in th.losses)
            + " (the cache cost more batch time than it saved)"
        )
    even = (
        f"- the cache saves time at every measured fraction from **{th.break_even:.0%} shared** up{losses}."
        if th.break_even is not None
        else "- no range of measured fractions where the cache always saves time."
    )
    if th.verdict == "inconclusive":
        say = (
            f"**The threshold test is inconclusive on these runs**: at 0% shared nothing is reused, yet the "
            f"runs with the cache on took {time_against(th.gain_at_zero)} with it off, a difference the "
            f"prefix cache cannot explain and as large as the {th.min_gain:.0%} saving the test looks for. More "
            "repeats per point (the full sweep) are needed to test it."
        )
    elif th.verdict == "smooth" and saving_trend(gain) == "fall":
        say = (
            f"**No jump at {th.at:.0%} shows in these runs**: the saving falls as the shared fraction grows, so "
            f"these runs give {th.at:.0%} no support as a point where the cache starts to pay."
        )
    elif th.verdict == "smooth":
        say = (
            f"**No jump at {th.at:.0%} shows in these runs**: past the break-even the saving grows steadily with the "
            f"shared fraction, so {th.at:.0%} reads as a rule of thumb for 'enough sharing to matter', not a property "
            "of the cache."
        )
    else:
        g = sorted((r for r in gain if r["time_saved"] is not None), key=lambda r: r["shared_fraction"])
        lo, hi = [r for r in g if r["shared_fraction"] < th.at], [r for r in g if r["shared_fraction"] >= th.at]
        if lo and hi and hi[0]["time_saved"] <= lo[-1]["time_saved"]:  # a threshold by the slope above, not a step
            say = (
                f"**The saving rises more steeply from {th.at:.0%} up than below it**, but it does not jump at the "
                f"threshold: it falls between {lo[-1]['shared_fraction']:.0%} and "
                f"{hi[0]['shared_fraction']:.0%} shared ({signed_pct(lo[-1]['time_saved'])} → {signed_pct(hi[0]['time_saved'])})."
            )
        else:
            say = (
                f"**The saving jumps between {lo[-1]['shared_fraction']:.0%} and "
                f"{hi[0]['shared_fraction']:.0%} shared** ({signed_pct(lo[-1]['time_saved'])} → {signed_pct(hi[0]['time_saved'])}), where the "
                f"tree puts its {th.at:.0%} threshold; the measured fractions cannot place the jump more closely."
                if lo and hi
                else f"**The saving jumps near {th.at:.0%}**, as the tree's threshold suggests."
            )
    return f"- batch time saved by the prefix cache, by shared fraction: {pts}.\n- {first}; {slopes}.\n{even}\n- {say}"


def _threshold_detail(th, min_gain: float) -> str:
    """What follows a threshold test's verdict in the conclusions: the difference at shared fraction 0 that makes it
    inconclusive (a factor from twice as long on), or where the cache first saves ``min_gain``."""
    if th.verdict == "inconclusive":
        far = apart(th.gain_at_zero)  # units.apart decides when a difference reads as a factor
        differ = (
            f"a factor of {far[:-1]} in batch time"
            if far.endswith("×")
            else f"{signed_pct(th.gain_at_zero)} of batch time"
        )
        return f" (at 0% shared, with nothing to reuse, cache on vs off already differ by {differ})."
    if th.first_fraction is not None:
        return f"; the cache first saves ≥{min_gain:.0%} of batch time at {th.first_fraction:.0%} shared."
    return "."


def prefix_conclusions(
    sharing: list[dict],
    thresholds: dict,
    by_turn: list[dict],
    threshold: float,
    min_gain: float,
    radix_pairs: tuple[str, list[dict]] | None,
) -> str:
    """The prefix-sharing report's conclusions: the vLLM claim, radix vs paged, each engine's threshold test,
    multi-turn reuse per engine.

    ``sharing`` and ``by_turn``: row dicts; ``thresholds``: engine -> :class:`kvlab.analysis.Threshold`
    (``analysis.sharing_thresholds``); ``radix_pairs``: :func:`kvlab.claims.sharing.radix_paged_pairs`.
    """
    lines = []
    if not sharing:
        lines.append(
            "- No measured prefix-sharing runs: only the modelled ideal above is shown; the document's "
            "claims stay untested here."
        )
    else:
        lines.append(prefix_claim_verdict(sharing))
        gap = [
            ln for ln in radix_vs_paged_sentence(radix_pairs).splitlines() if ln.startswith("- Largest hit-rate gap")
        ]
        lines += gap
        for engine, th in thresholds.items():
            lines.append(
                f"- {engine_label(engine)}: threshold test at {threshold:.0%} → **{th.verdict}**"
                + _threshold_detail(th, min_gain)
            )
    on = sorted((r for r in by_turn if r["prefix_caching"]), key=lambda r: r["turn"])
    for engine, g in _groups(on, "engine").items():
        share = g[-1]["cached_share"]
        lines.append(
            f"- Multi-turn, {engine_label(engine)}: with the cache on, the last turn found "
            + (
                f"{share:.0%} of its prompt cached."
                if share is not None
                else "no cached-token count reported (not available, not 0)."
            )
        )
    return "\n".join(lines)


def multi_turn_sentence(by_turn: list[dict]) -> str:
    """Turn by turn, per engine and cache setting (``by_turn``: row dicts); then, per engine, the last turn with the
    cache on against off."""

    def cached(r):
        if r["cached_tokens"] is None:
            return f"cached tokens not reported of {r['prompt_tokens']:,.0f}"
        return f"{r['cached_tokens']:,.0f} of {r['prompt_tokens']:,.0f} tokens cached"

    lines = []
    rows = sorted(by_turn, key=lambda r: r["turn"])
    for (engine, caching), g in _groups(rows, "engine", "prefix_caching").items():
        pts = "; ".join(f"turn {r['turn']}: {cached(r)}, TTFT {ms(r['ttft_mean_ms'])}" for r in g)
        lines.append(f"- {engine_label(engine)}, prefix cache {'on' if caching else 'off'}: {pts}.")
    for engine, g in _groups(by_turn, "engine").items():
        on = sorted((r for r in g if r["prefix_caching"]), key=lambda r: r["turn"])
        off = sorted((r for r in g if r["prefix_caching"] is False), key=lambda r: r["turn"])
        if len(on) > 1 and len(off) == len(on):
            last_on, last_off = on[-1], off[-1]
            share = (
                "its share of the prompt served from the cache is not reported"
                if last_on["cached_share"] is None
                else f"the cache serves **{last_on['cached_share']:.0%}** of the prompt"
            )
            lines.append(
                f"- {engine_label(engine)}, last turn (turn {last_on['turn']}): {share} and TTFT is "
                f"**{ratio(last_off['ttft_mean_ms'] / last_on['ttft_mean_ms'], turn_n(last_on, last_off))}×** "
                "shorter than without it "
                f"({ms(last_on['ttft_mean_ms'])} vs {ms(last_off['ttft_mean_ms'])})."
            )
    lines += _turns_radix_vs_paged(by_turn)
    return "\n".join(lines)


def _turns_radix_vs_paged(by_turn: list[dict]) -> list[str]:
    """Cache on: the turns where an SGLang-family radix cache and vLLM's blocks cached different amounts per request."""
    on = [r for r in by_turn if r["prefix_caching"] and r["cached_tokens"] is not None]
    radix = [e for e in dict.fromkeys(r["engine"] for r in on) if registry.family(e) == SGLANG]
    paged = {}
    for r in on:  # vLLM's rows by turn (the first where a turn repeats, as a join keeps every pair)
        if r["engine"] == VLLM:
            paged.setdefault(r["turn"], []).append(r["cached_tokens"])
    if not radix or not paged:
        return []
    both = sorted(
        (
            {"turn": r["turn"], "cached_tokens": v, "radix": r["cached_tokens"], "d": r["cached_tokens"] - v}
            for r in on
            if r["engine"] == radix[0]
            for v in paged.get(r["turn"], [])
        ),
        key=lambda r: r["turn"],
    )
    lr, diff = engine_label(radix[0]), [r for r in both if r["d"] != 0]
    if not diff:
        return [f"- Radix vs paged, turn by turn: {lr} and vLLM cached the same tokens per request at every turn."]
    parts = ", ".join(f"turn {r['turn']}: {r['radix']:,.0f} vs {r['cached_tokens']:,.0f}" for r in diff)
    same = [r["turn"] for r in both if r["d"] == 0]
    return [
        f"- Radix vs paged, turn by turn (cache on, mean cached tokens per request, {lr} vs vLLM): {parts}"
        + (f"; the same at turn{'s' if len(same) > 1 else ''} {', '.join(map(str, same))}" if same else "")
        + "."
    ]


def prefix_answer(hits: list[dict], found: list, threshold: float) -> tuple[str, ...]:
    """Report 05's answer: whether each engine reuses a shared prefix (its cache-hit rate at the highest shared
    fraction measured, with its repeats), what that does to the article's claims, and whether its threshold shows."""
    if not hits:
        return ("No prefix-sharing run was measured: nothing here says whether either engine reuses a prefix.",)
    by_id = {v.claim_id: v for v in found}

    def rate(r: dict) -> str:
        lo, hi = r["cache_hit_rate_min"], r["cache_hit_rate_max"]
        if r["n_runs"] == 1:
            return f"{engine_label(r['engine'])} {r['cache_hit_rate']:.0%} (one run)"
        if f"{lo:.0%}" == f"{hi:.0%}":
            return f"{engine_label(r['engine'])} {r['cache_hit_rate']:.0%} in each of {r['n_runs']} runs"
        return (
            f"{engine_label(r['engine'])} {lo:.0%}–{hi:.0%} over {r['n_runs']} runs (median {r['cache_hit_rate']:.0%})"
        )

    first = (
        f"Measured with its prefix cache on, each engine served this share of prompt tokens from its cache at "
        f"{hits[0]['shared_fraction']:.0%} shared: " + "; ".join(rate(r) for r in hits) + "."
    )
    said = []
    if (v := by_id.get("vllm_no_prefix_sharing")) is not None:
        said.append(f'the article\'s "vLLM shares no prefixes" is {v.outcome} here')
    if (v := by_id.get("sglang_radix_sharing")) is not None:
        said.append(f'its "SGLang shares a common prefix" is {v.outcome}')
    second = ("So " + " and ".join(said) + ".") if said else ""
    t = by_id.get("shared_prefix_threshold")
    third = (
        (
            f"Whether {threshold:.0%} shared is the point to choose SGLang: {t.outcome}"
            + (f", since {t.reason.split(':')[0]}." if t.reason else ".")
        )
        if t is not None
        else ""
    )
    return tuple(s for s in (first, second, third) if s)
