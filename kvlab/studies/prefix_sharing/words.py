"""Report 05's sentences, tables and captions, built only from its verdicts and typed values (row dicts of its
frames). A sentence that names a winner, a direction, a threshold or a shape asks :func:`kvlab.verdicts.decides` of
the verdict it speaks to; where that is False it gives the measurement with
:func:`kvlab.verdicts.undecided_label` instead."""

from __future__ import annotations

from kvlab import tables
from kvlab.studies.prefix_sharing.frames import _prefix_bracket, saving_trend
from kvlab.engines import SGLANG, VLLM, VLLM_CPU_BLOCK_TOKENS, engine_label, registry
from kvlab.tables import ms, percent
from kvlab.units import ratio, signed_pct, time_against
from kvlab.verdicts import Verdict, decides, undecided_label

#: How this report tests each of the article's claims it takes up.
TESTED_BY = {
    "vllm_no_prefix_sharing": "vLLM's CPU build with automatic prefix caching on (its default) and off: the share of "
    "prompt tokens it served from its cache",
    "sglang_radix_sharing": "SGLang (on a CPU host, PyTorch SGLang with torch-native kernels; sglang-jax, its JAX "
    "runtime, keeps the same radix cache): the share of prompt tokens served from the cache",
    "sglang_radix_suffix": "the same runs: which requests found the prefix in the radix cache (each request after "
    "the first should compute only its own suffix)",
    "shared_prefix_threshold": "both engines below and above 30% shared: which finishes the batch first, and "
    "whether what the cache saves jumps at 30%",
}


def _groups(rows, *keys: str) -> dict:
    """``rows`` grouped by ``keys`` (one key: its value; several: a tuple), in order of first appearance."""
    out: dict = {}
    for r in rows:
        out.setdefault(r[keys[0]] if len(keys) == 1 else tuple(r[k] for k in keys), []).append(r)
    return out


def _rank(engine: str) -> int:
    return registry.order(engine)


def off_on(x: float, n: int | None = None) -> str:
    """A cache-off ÷ cache-on ratio as measured: '1.4×' (two significant figures on one run a side)."""
    return f"{ratio(x, n)}×"


# -- tables ----------------------------------------------------------------------------------------------------------


def claims_table(claims: list[dict]):
    """The claims (row dicts) this report tests, each beside how it tests them."""
    c = [
        {"statement": r["statement"], "tested_by": TESTED_BY[r["claim_id"]]}
        for r in claims
        if r["claim_id"] in TESTED_BY
    ]
    return tables.table(c, {"statement": "what the article says", "tested_by": "how this report tests it"})


def citation_note(claims: list[dict]) -> str:
    """Where the claims come from: the document named once and the sections after it."""
    cites = list(dict.fromkeys(r["citation"] for r in claims if r.get("citation") is not None))
    if not cites:
        return "*No citation recorded for these claims.*"
    docs: dict[str, list[str]] = {}
    for c in cites:
        head, sep, tail = c.rpartition("), ")
        doc, part = (head + ")", tail) if sep else (c, "")
        docs.setdefault(doc, []).append(part)
    return " ".join(f"Source: {d}." + "".join(f" Cited: {p}." for p in ps if p) for d, ps in docs.items())


def _spread_columns(rows: list[dict], cols: dict, notes: list[str]) -> list[dict]:
    runs = [v for v in [r["runs_on"] for r in rows] + [r["runs_off"] for r in rows] if v is not None]
    if not runs or max(runs) <= 1:
        notes.insert(0, "one run per point (no repeats)")
        return rows
    cols |= {
        "range_on": "batch time, cache on: least–most over the runs (s)",
        "range_off": "batch time, cache off: least–most over the runs (s)",
        "runs_on": "runs, on",
        "runs_off": "runs, off",
    }
    notes.insert(0, "median over the runs of each point; spread: least to most over them, as the figure's whiskers")
    return [
        r | {"range_on": tables.span(r["lo_on"], r["hi_on"]), "range_off": tables.span(r["lo_off"], r["hi_off"])}
        for r in rows
    ]


def sharing_table(rows: list[dict], block_tokens: int = VLLM_CPU_BLOCK_TOKENS):
    """One row per engine and shared fraction (the result's ``sharing_points``): cache on beside off and the two
    ideals, rates in %; spread columns only where points have repeats."""
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
    rows = _spread_columns(rows, cols, notes)
    return tables.table(rows, cols, caption="; ".join(notes))


def _gain_row(r: dict, spread: bool) -> dict:
    n = r.get("n_runs")
    row = {
        "engine": r["engine"],
        "fraction_pct": r["fraction_pct"],
        "hit_on": r["hit_on"],
        "ttft_speedup": "–" if r["ttft_speedup"] is None else ratio(r["ttft_speedup"], n),
        "batch_speedup": "–" if r["batch_speedup"] is None else ratio(r["batch_speedup"], n),
        "saved": "–" if r["saved"] is None else ratio(r["saved"], 1) if n == 1 else tables.number(r["saved"]),
    }
    if spread:
        row |= {
            "ttft_range": tables.span(r["ttft_speedup_min"], r["ttft_speedup_max"], lambda x: ratio(x, n)),
            "batch_range": tables.span(r["batch_speedup_min"], r["batch_speedup_max"], lambda x: ratio(x, n)),
        }
    return row


def gain_table(rows: list[dict]):
    """Per engine and shared fraction (the result's ``gain_points``): what the prefix cache buys (off ÷ on), with
    each ratio's least–most over the repeats where points have them."""
    runs = [r["n_runs"] for r in rows if r.get("n_runs") is not None]
    spread = bool(runs) and max(runs) > 1 and all("batch_speedup_min" in r for r in rows)
    ttft = {"ttft_speedup": "mean TTFT, off ÷ on (×)"}
    batch = {"batch_speedup": "median batch time, off ÷ on (×)"}
    if spread:
        ttft["ttft_range"] = "mean TTFT, off ÷ on: least–most over the runs (×)"
        batch["batch_range"] = "median batch time, off ÷ on: least–most over the runs (×)"
        caption = "median over the runs of each point; spread: least to most over them, as the figure's whiskers"
    else:
        caption = "one run a side per point (no repeats): ratios to two significant figures" if runs else None
    cols = {"engine": "engine", "fraction_pct": "shared prefix (% of prompt)", "hit_on": "cache-hit rate, cache on (%)"}
    cols |= {**ttft, **batch, "saved": "batch time saved by the cache (%)"}
    return tables.table([_gain_row(r, spread) for r in rows], cols, caption=caption)


def turns_table(t: list[dict]):
    """Per engine and turn (the result's ``turn_points``): prompt length, tokens served from the cache and mean
    TTFT with the cache on beside off."""
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
    if any((r[f"reported_{s}"] is not None and r[f"reported_{s}"] != r["requests"]) for r in t for s in ("on", "off")):
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


# -- captions --------------------------------------------------------------------------------------------------------


def ideal_reuse_caption(
    rows: list[dict], prompt_tokens: int, requests: int, block_tokens: int, threshold: float
) -> str:
    """The modelled ideal-reuse figure (the result's ``ideal``): the straight token-exact line, and where whole
    blocks lose most."""
    if not rows:
        return "Modelled: no shared fraction given."
    top = max(rows, key=lambda r: r["shared_fraction"])
    gap = max(({**r, "d": r["ideal_hit_rate"] - r["block_hit_rate"]} for r in rows), key=lambda r: r["d"])
    return (
        f"Modelled for {requests} requests of {prompt_tokens:,} tokens: a token-exact cache serves at most "
        f"{top['ideal_hit_rate']:.0%} of prompt tokens at {top['shared_fraction']:.0%} shared, on a straight line "
        f"(shared fraction × {requests - 1}/{requests}) with no step at the article's {threshold:.0%}. Whole "
        f"{block_tokens}-token blocks fall short of it by up to {gap['d'] * 100:.1f} percentage points "
        f"({gap['block_hit_rate']:.0%} against {gap['ideal_hit_rate']:.0%} at {gap['shared_fraction']:.0%} shared)."
    )


def hit_rates_caption(rows: list[dict]) -> str:
    """The measured figure's hit rates: each engine's at the most shared fraction against its ideal, and the caches
    off (each engine set only against itself: no engine is compared with the other)."""
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
    return text + "."


def _gain_shape(th, g: list[dict]) -> str:
    """', the saving jumping from +11% at 20% to +20% at 50%' / ', falling with no jump': a decided shape, worded."""
    if th.verdict == "smooth":
        return f", {'falling' if saving_trend(g) == 'fall' else 'rising'} with no jump"
    b = _prefix_bracket(g, th.at)
    if th.verdict != "threshold" or not b:
        return ""
    way = "jumping" if b[1]["time_saved"] > b[0]["time_saved"] else "falling"
    return (
        f", the saving {way} from {signed_pct(b[0]['time_saved'])} at {b[0]['shared_fraction']:.0%} to "
        f"{signed_pct(b[1]['time_saved'])} at {b[1]['shared_fraction']:.0%}"
    )


def gain_caption(gain: list[dict], thresholds: dict, jump: Verdict | None) -> str:
    """What the cache buys per engine (batch time off ÷ on, nothing shared and most shared); the threshold test's
    shape named only where the jump question's verdict decides, else its undecided label."""
    parts = []
    rows = sorted(gain, key=lambda r: (_rank(r["engine"]), r["shared_fraction"]))
    for engine, g in _groups(rows, "engine").items():
        first, last = g[0], g[-1]
        th = thresholds.get(engine)
        s = (
            f"{engine_label(engine)}: batch time off ÷ on {off_on(first['batch_speedup'], first.get('n_runs'))} at "
            f"{first['shared_fraction']:.0%} shared, {off_on(last['batch_speedup'], last.get('n_runs'))} at "
            f"{last['shared_fraction']:.0%}"
        )
        if th is not None and th.verdict == "inconclusive":
            s += f", but at {first['shared_fraction']:.0%} nothing can be reused"
        elif th is not None and decides(jump):
            s += _gain_shape(th, g)
        parts.append(s + ".")
    if not parts:
        return "Measured: no shared fraction was run with the prefix cache both on and off."
    tail = "" if decides(jump) else f" Whether the saving jumps at the threshold: {undecided_label(jump)}."
    return "Above 1× the cache helps. " + " ".join(parts) + tail


def multi_turn_caption(by_turn: list[dict], verdict: Verdict | None) -> str:
    """The multi-turn figure: the last turn's cached share and mean TTFT off ÷ on, per engine."""
    parts, last_turn = [], None
    rows = sorted(by_turn, key=lambda r: (_rank(r["engine"]), r["turn"]))
    for engine, g in _groups(rows, "engine").items():
        on = [r for r in g if r["prefix_caching"]]
        if not on:
            continue
        last, last_turn = on[-1], on[-1]["turn"]
        share = (
            "no cached-token count"
            if last["cached_share"] is None
            else f"{last['cached_share']:.0%} of its prompt cached"
        )
        o = [r for r in g if r["prefix_caching"] is False and r["turn"] == last["turn"]]
        ttft = ""
        if o and last["ttft_mean_ms"]:
            n = None if any(r.get("n_runs") is None for r in (last, o[0])) else min(last["n_runs"], o[0]["n_runs"])
            ttft = f", mean TTFT off ÷ on {off_on(o[0]['ttft_mean_ms'] / last['ttft_mean_ms'], n)}"
        parts.append(f"{engine_label(engine)}: {share}{ttft}.")
    if not parts:
        return "Measured: no multi-turn run with the prefix cache on."
    tail = "" if decides(verdict) else f" Verdict: {undecided_label(verdict)}."
    return f"Last turn (turn {last_turn}), prefix cache on. " + " ".join(parts) + tail


# -- sentences -------------------------------------------------------------------------------------------------------


def hit_sources(sharing: list[dict]) -> str:
    """Which count each engine's hit rate comes from, once per engine (the numbers are in the table)."""
    src = {}
    for r in sorted(sharing, key=lambda r: _rank(r["engine"])):
        if r.get("hit_source") is not None:
            src.setdefault(r["engine"], r["hit_source"])
    missing = sorted({r["engine"] for r in sharing if r["prefix_caching"] and r["cache_hit_rate"] is None})
    parts = [f"{engine_label(e)} from its {s}" for e, s in src.items()]
    text = ("Hit rates counted: " + "; ".join(parts) + ".") if parts else ""
    if missing:
        text += f" Not available (not 0) for {', '.join(engine_label(e) for e in missing)}: no count was reported."
    return text.strip()


def radix_vs_paged(radix_engine: str | None, pairs: list[dict], block_tokens: int = VLLM_CPU_BLOCK_TOKENS) -> str:
    """The radix engine against vLLM's paged blocks, cache on, at every shared fraction both measured (the result's
    ``radix_pairs``): both hit rates beside their ideals, mean TTFT and median batch time; then the largest gap as a
    measurement (which cache serves more is a mechanism of each, not a winner)."""
    if radix_engine is None:
        return "*Radix vs paged: no shared fraction was measured with both vLLM and an SGLang-family engine, cache on.*"
    if not pairs:
        return "*Radix vs paged: no shared fraction holds both engines with the cache on.*"
    lr, lp = engine_label(radix_engine), engine_label(VLLM)
    lines = [
        f"- {r['shared_fraction']:.0%} shared ({r['shared_prefix_tokens']:,} prefix tokens): {lr} "
        f"**{percent(r['cache_hit_rate_r'])}** from its radix cache (ideal {r['ideal_hit_rate']:.0%}), {lp} "
        f"**{percent(r['cache_hit_rate'])}** from its paged cache (ideal {r['block_ideal_hit_rate']:.0%})."
        for r in pairs
    ]
    gaps = [r for r in pairs if r["cache_hit_rate"] is not None and r["cache_hit_rate_r"] is not None]
    if gaps:
        g = max(gaps, key=lambda r: abs(r["cache_hit_rate_r"] - r["cache_hit_rate"]))
        lines.append(
            f"- The hit rates differ most at {g['shared_fraction']:.0%} shared: "
            f"{abs(g['cache_hit_rate_r'] - g['cache_hit_rate']) * 100:.1f} percentage points."
        )
    return "\n".join(lines)


def reuse_sentences(reuse: list[dict]) -> str:
    """Per engine with its cache on: how many requests found the prefix cached at each shared fraction, in all and
    among the first wave sent together at the start."""
    on = [r for r in reuse if r["prefix_caching"] and r["shared_fraction"] > 0 and r["requests_hit"] is not None]
    if not on:
        return "*No per-request cached-token counts with the cache on: which requests reused the prefix is not known.*"
    lines = []
    on.sort(key=lambda r: (_rank(r["engine"]), r["shared_fraction"]))
    for engine, g in _groups(on, "engine").items():
        pts = ", ".join(
            f"{r['shared_fraction']:.0%} shared: {r['requests_hit']} of {r['requests']} "
            f"({r['first_wave_hit']} of the {r['first_wave']} sent first)"
            for r in g
        )
        lines.append(f"- {engine_label(engine)}, cache on — requests that found the prefix in the cache: {pts}.")
    return "\n".join(lines)


def vllm_sharing(v: Verdict | None, rows: list[dict]) -> str:
    """Does vLLM share prefixes? Its hit rate cache on against off (``rows``: the sharing row dicts) and what the
    claim's verdict makes of it: the claim's fate said only where the verdict decides."""
    if v is None:
        return "*The claims table holds no claim that vLLM shares no prefixes.*"
    on = sorted(
        (r for r in rows if r["engine"] == VLLM and r["prefix_caching"] and r["cache_hit_rate"] is not None),
        key=lambda r: r["shared_fraction"],
    )
    if not on:
        return f"*No measured {engine_label(VLLM)} runs with its prefix cache on: the claim is untested here.*"
    top = on[-1]
    off = [
        r
        for r in rows
        if r["engine"] == VLLM and r["prefix_caching"] is False and r["shared_fraction"] == top["shared_fraction"]
    ]
    flag = registry.flag(VLLM, "prefix_cache_off")
    off_txt = (
        f"; with it off (`{flag}`) {off[0]['cache_hit_rate']:.0%}"
        if off and off[0]["cache_hit_rate"] is not None
        else ""
    )
    said = (
        f"- At {top['shared_fraction']:.0%} shared, vLLM with its prefix cache on served **{top['cache_hit_rate']:.0%}** "
        f"of prompt tokens from the cache (whole-block ideal {top['block_ideal_hit_rate']:.0%}){off_txt}."
    )
    if v.outcome == "contradicted":
        return (
            said + "\n- **The claim does not hold for current vLLM**: its automatic prefix caching shares the prefix."
        )
    if v.outcome == "reproduced":
        return said + "\n- **The data agree with the claim**: no prompt token came from the cache."
    return said + f"\n- The claim's verdict: **{undecided_label(v)}**; the runs do not yet decide it."


def _saving_points(gain: list[dict]) -> str:
    return ", ".join(
        f"{r['shared_fraction']:.0%} → {signed_pct(r['time_saved'])}"
        for r in sorted(gain, key=lambda r: r["shared_fraction"])
    )


def _decided_shape(th, gain: list[dict]) -> str:
    """The shape the threshold test found, worded by the points: a steady rise or fall, a jump, or a steeper rise
    above that is no jump because the saving falls across the threshold."""
    if th.verdict == "smooth":
        if saving_trend(gain) == "fall":
            return f"**No jump at {th.at:.0%} shows in these runs**: the saving falls as the shared fraction grows."
        return f"**No jump at {th.at:.0%} shows in these runs**: past the break-even the saving grows steadily."
    g = sorted((r for r in gain if r["time_saved"] is not None), key=lambda r: r["shared_fraction"])
    lo, hi = [r for r in g if r["shared_fraction"] < th.at], [r for r in g if r["shared_fraction"] >= th.at]
    if not (lo and hi):
        return f"**The saving jumps near {th.at:.0%}**, as the tree's threshold suggests."
    a, b = lo[-1], hi[0]
    span = f"{a['shared_fraction']:.0%} and {b['shared_fraction']:.0%} shared"
    moves = f"({signed_pct(a['time_saved'])} → {signed_pct(b['time_saved'])})"
    if b["time_saved"] <= a["time_saved"]:
        return (
            f"**The saving rises more steeply from {th.at:.0%} up than below it**, but it does not jump at the "
            f"threshold: it falls between {span} {moves}."
        )
    return f"**The saving jumps between {span}** {moves}, where the tree puts its {th.at:.0%} threshold."


def _shape_sentence(th, gain: list[dict], jump: Verdict | None, whose: str = "the ") -> str:
    """The threshold test's reading of one engine's curve: its shape only where the jump question decides
    (``whose``: "the " or the engine's label with "'s ")."""
    if th.verdict == "inconclusive":
        return (
            f"**The threshold test is inconclusive on these runs**: at 0% shared nothing is reused, yet the runs "
            f"with the cache on took {time_against(th.gain_at_zero)} with it off."
        )
    if not decides(jump):
        return f"Whether {whose}saving jumps at {th.at:.0%}: **{undecided_label(jump)}**."
    return _decided_shape(th, gain)


def threshold_lines(th, gain: list[dict], jump: Verdict | None, engine: str = "") -> str:
    """One engine's threshold test in words (``gain``: its caching-gain row dicts), with the numbers that decide
    it; the shape named only where the jump question's verdict decides. ``engine`` (its label) names whose smallest
    fraction it is, so two engines with the same numbers do not say the same sentence twice on a page."""
    if th.verdict == "no data":
        return "*Fewer than three shared fractions with the cache both on and off: the threshold cannot be tested.*"
    whose = f"{engine}'s " if engine else "the "
    first = (
        f"{whose}smallest measured fraction saving at least {th.min_gain:.0%} of batch time is "
        f"**{th.first_fraction:.0%} shared**"
        if th.first_fraction is not None
        else f"no measured fraction saves {th.min_gain:.0%} of batch time{f' on {engine}' if engine else ''}"
    )
    losses = (
        "; below it the cache cost time: " + ", ".join(f"{f:.0%} → {signed_pct(v)}" for f, v in th.losses)
        if th.losses
        else ""
    )
    even = (
        f"- {whose}cache saves time at every measured fraction from **{th.break_even:.0%} shared** up{losses}."
        if th.break_even is not None
        else f"- no range of measured fractions where {whose}cache always saves time."
    )
    return (
        f"- batch time saved by the prefix cache, by shared fraction: {_saving_points(gain)}.\n- {first}.\n{even}\n"
        f"- {_shape_sentence(th, gain, jump, whose)}"
    )


def multi_turn_lines(by_turn: list[dict]) -> str:
    """Per engine, the last turn with the cache on against off (the per-turn numbers are in the table above), and
    the turns where the radix cache and vLLM's blocks cached different amounts."""
    lines = []
    for engine, g in _groups(sorted(by_turn, key=lambda r: (_rank(r["engine"]), r["turn"])), "engine").items():
        on = [r for r in g if r["prefix_caching"]]
        off = [r for r in g if r["prefix_caching"] is False]
        if len(on) > 1 and len(off) == len(on) and on[-1]["ttft_mean_ms"]:
            a, b = on[-1], off[-1]
            share = (
                "share not reported"
                if a["cached_share"] is None
                else f"**{a['cached_share']:.0%}** of the prompt cached"
            )
            n = None if any(r.get("n_runs") is None for r in (a, b)) else min(a["n_runs"], b["n_runs"])
            lines.append(
                f"- {engine_label(engine)}, turn {a['turn']}: {share}; mean TTFT {ms(a['ttft_mean_ms'])} on, "
                f"{ms(b['ttft_mean_ms'])} off (off ÷ on {off_on(b['ttft_mean_ms'] / a['ttft_mean_ms'], n)})."
            )
    return "\n".join(lines + _turns_radix_vs_paged(by_turn))


def _turns_radix_vs_paged(by_turn: list[dict]) -> list[str]:
    """Cache on: the turns where an SGLang-family radix cache and vLLM's blocks cached different amounts per request."""
    on = [r for r in by_turn if r["prefix_caching"] and r["cached_tokens"] is not None]
    radix = [e for e in dict.fromkeys(r["engine"] for r in on) if registry.family(e) == SGLANG]
    paged = {r["turn"]: r["cached_tokens"] for r in on if r["engine"] == VLLM}
    if not radix or not paged:
        return []
    both = sorted(
        (
            {"turn": r["turn"], "v": paged[r["turn"]], "r": r["cached_tokens"]}
            for r in on
            if r["engine"] == radix[0] and r["turn"] in paged
        ),
        key=lambda r: r["turn"],
    )
    lr, diff = engine_label(radix[0]), [r for r in both if r["r"] != r["v"]]
    if not diff:
        return [f"- Radix vs paged, turn by turn: {lr} and vLLM cached the same tokens per request at every turn."]
    parts = ", ".join(f"turn {r['turn']}: {r['r']:,.0f} vs {r['v']:,.0f}" for r in diff)
    return [f"- Radix vs paged, mean cached tokens per request ({lr} vs vLLM): {parts}."]


#: The conclusions' name for each verdict's question.
_ASKED = {
    "vllm_no_prefix_sharing": f"{engine_label(VLLM)} shares no prefixes",
    "sglang_radix_sharing": "SGLang's radix cache shares the prefix",
    "sglang_radix_suffix": "SGLang computes only each suffix",
    "shared_prefix_threshold": "choose SGLang from 30% shared",
    "shared_prefix_threshold_jump": "the cache's saving jumps at the threshold",
    "multi_turn_reuse": "multi-turn reuse",
}


def conclusions(verdicts: tuple[Verdict, ...], has_runs: bool) -> str:
    """One line per verdict: the question and its outcome (its numbers are in the verdict table and above)."""
    if not has_runs:
        return (
            "- No measured prefix-sharing runs: only the modelled ideal above is shown; the claims stay untested here."
        )
    return "\n".join(f"- {_ASKED.get(v.claim_id, v.claim_id)}: **{v.outcome}**." for v in verdicts)


def _rate(r: dict) -> str:
    lo, hi = r["cache_hit_rate_min"], r["cache_hit_rate_max"]
    if r["n_runs"] == 1:
        return f"{engine_label(r['engine'])} {r['cache_hit_rate']:.0%} (one run)"
    if f"{lo:.0%}" == f"{hi:.0%}":
        return f"{engine_label(r['engine'])} {r['cache_hit_rate']:.0%} in each of {r['n_runs']} runs"
    return f"{engine_label(r['engine'])} {lo:.0%}–{hi:.0%} over {r['n_runs']} runs (median {r['cache_hit_rate']:.0%})"


def answer(hits: list[dict], found: list[Verdict], threshold: float) -> tuple[str, ...]:
    """Report 05's answer: each engine's hit rate at the highest shared fraction measured (with its repeats), the
    verdicts of the article's claims on it, and whether its threshold shows (each from its verdict)."""
    if not hits:
        return ("No prefix-sharing run was measured: nothing here says whether either engine reuses a prefix.",)
    by_id = {v.claim_id: v for v in found}
    first = (
        f"Measured with its prefix cache on, each engine served this share of prompt tokens from its cache at "
        f"{hits[0]['shared_fraction']:.0%} shared: " + "; ".join(_rate(r) for r in hits) + "."
    )
    said = []
    if (v := by_id.get("vllm_no_prefix_sharing")) is not None:
        said.append(f'the article\'s "vLLM shares no prefixes" is {v.outcome} here')
    if (v := by_id.get("sglang_radix_sharing")) is not None:
        said.append(f'its "SGLang shares a common prefix" is {v.outcome}')
    second = ("So " + " and ".join(said) + ".") if said else ""
    t = by_id.get("shared_prefix_threshold")
    third = (
        f"Whether {threshold:.0%} shared is the point to choose SGLang: {t.outcome}"
        + (f", since {t.reason.split(':')[0]}." if t.reason else ".")
        if t is not None
        else ""
    )
    return tuple(s for s in (first, second, third) if s)
