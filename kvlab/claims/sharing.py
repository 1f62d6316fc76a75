"""Prefix-sharing claims (report 05): the KV-design article's claims in turn — vLLM shares no prefix, SGLang's radix
cache does and computes only each request's suffix (one engine's own runs decide: :func:`kvlab.claims.prefix.
cache_shares`), choose SGLang at ≥ 30% shared (two engines: rule 1 on a CPU) — and the report's own findings (what
the cache saves by shared fraction, multi-turn reuse)."""

from __future__ import annotations

import polars as pl

from dataclasses import replace

from kvlab.claims.grading import (
    NOT_REUSABLE,
    NOTHING_MEASURED,
    Repeats,
    combined,
    counted,
    cpu_cross_engine,
    finding,
    measured_difference,
    negated,
)
from kvlab.claims.prefix import cache_shares
from kvlab.engines import SGLANG, VLLM, engine_label, registry
from kvlab.units import apart, ratio, sig2, signed_pct
from kvlab.verdicts import Verdict


def _prefix_engine_order() -> pl.Expr:
    """Engines in display order (kvlab.engines.registry.order), unknown ones last."""
    return pl.col("engine").replace_strict(
        {e: registry.order(e) for e in registry.ENGINE_NAMES}, default=len(registry.ENGINE_NAMES), return_dtype=pl.Int64
    )


def _prefix_times(x: float, more: str = "shorter", less: str = "longer", n: int | None = None) -> str:
    """A ratio with its direction: 1.37 → '1.37× shorter', 0.96 → '1.04× longer', 1.002 → 'unchanged (1.00×)';
    resting on one run a side (``n`` = 1), two significant figures (:func:`kvlab.units.ratio`): '4.0× shorter',
    'unchanged (1.0×)'."""
    if abs(x - 1) < 0.005:
        return f"unchanged ({ratio(1.0, n)}×)"
    return f"{ratio(x, n)}× {more}" if x > 1 else f"{ratio(1 / x, n)}× {less}"


#: The keys of a multi-turn configuration (:func:`kvlab.analysis.multi_turn_by_turn`'s groups, less the turn).
TURN_KEYS = ("experiment", "hardware", "engine", "prefix_caching")


def with_turn_runs(by_turn: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """``by_turn`` (:func:`kvlab.analysis.multi_turn_by_turn`) with ``n_runs``: the successful measured multi-turn
    runs of ``runs`` behind each configuration's turns, which every per-turn ratio rests on (0 where none)."""
    keys = [k for k in TURN_KEYS if k in by_turn.columns and k in runs.columns]
    if by_turn.is_empty() or runs.is_empty() or not keys:
        return by_turn.with_columns(pl.lit(None, pl.Int64).alias("n_runs"))
    ok = runs.filter((pl.col("source") == "measured") & (pl.col("mode") == "multi_turn") & (pl.col("status") == "ok"))
    n = ok.group_by(keys).agg(pl.col("run_id").n_unique().cast(pl.Int64).alias("n_runs"))
    return by_turn.join(n, on=keys, how="left", nulls_equal=True).with_columns(pl.col("n_runs").fill_null(0))


def turn_n(*rows: dict) -> int | None:
    """The runs a per-turn comparison of ``rows`` (one per cache setting) rests on: the fewest of theirs; None when
    the frame does not say (:func:`with_turn_runs` not applied)."""
    ns = [r.get("n_runs") for r in rows]
    return None if any(v is None for v in ns) else min(ns)


def _prefix_bracket(g: pl.DataFrame | list[dict], at: float) -> tuple[dict, dict] | None:
    """The measured points either side of ``at`` (the last below, the first at or above)."""
    rows = sorted(g if isinstance(g, list) else g.to_dicts(), key=lambda r: r["shared_fraction"])  # rows or a frame
    lo, hi = [r for r in rows if r["shared_fraction"] < at], [r for r in rows if r["shared_fraction"] >= at]
    return (lo[-1], hi[0]) if lo and hi else None


def saving_trend(g: pl.DataFrame | list[dict]) -> str:
    """Which way one engine's saving goes from its least to its most shared point: 'rise', or 'fall' where the cache
    saves less (or costs more) at the most shared point than at the least; a smooth curve is called a steady rise only
    where it rises (issue 39: SGLang's saving went from +6.6% at 0% to −205% at 90% and was called a rise)."""
    rows = sorted(
        (r for r in (g if isinstance(g, list) else g.to_dicts()) if r.get("time_saved") is not None),
        key=lambda r: r["shared_fraction"],
    )
    return "fall" if len(rows) >= 2 and rows[-1]["time_saved"] < rows[0]["time_saved"] else "rise"


def _threshold_shape(g: pl.DataFrame, th) -> str:
    """What makes one engine's saving curve a threshold, with every measured point: a step across ``th.at`` or a
    slope above it more than twice the one below (analysis.sharing_threshold's rule), never called a jump where the
    saving falls across it."""
    points = ", ".join(
        f"{signed_pct(r['time_saved'])} at {r['shared_fraction']:.0%}"
        for r in g.filter(pl.col("time_saved").is_not_null()).sort("shared_fraction").iter_rows(named=True)
    )
    if (
        th.step_at is not None
        and th.step_at > 0
        and (th.slope_above is None or th.slope_below is None or th.slope_above <= 2 * max(th.slope_below, 1e-9))
    ):
        shape = f"a step of {signed_pct(th.step_at)} across {th.at:.0%}"
    else:
        shape = f"it rises more steeply from {th.at:.0%} up than below"
    return f"saving {points} shared: {shape}"


def prefix_verdicts(
    claims: pl.DataFrame,
    sharing: pl.DataFrame,
    gain: pl.DataFrame,
    thresholds: dict,
    by_turn: pl.DataFrame,
    reuse: pl.DataFrame | None = None,
    threshold: float = 0.3,
) -> list:
    """Report 05's verdicts: each of the article's claims in :data:`PREFIX_CLAIMS` against the measured runs, the
    threshold test, and multi-turn reuse (found). Computed from the frames the report shows; the claims are found
    by id, their parts (sharing, suffix-only) are rows of their own (:mod:`kvlab.schema` CLAIMS)."""
    stmt = {r["claim_id"]: r["statement"] for r in claims.iter_rows(named=True)}
    on = sharing.filter(pl.col("prefix_caching")) if sharing.height else sharing
    hits = on.filter(pl.col("cache_hit_rate").is_not_null()) if on.height else on
    out = []

    def off_row(engine: str, f: float) -> dict | None:
        o = sharing.filter(
            (pl.col("engine") == engine)
            & ~pl.col("prefix_caching")
            & (pl.col("shared_fraction") == f)
            & pl.col("cache_hit_rate").is_not_null()
        )
        return o.row(0, named=True) if o.height else None

    def off_hit(engine: str, f: float) -> str:
        o = off_row(engine, f)
        return f"; {o['cache_hit_rate']:.0%} with it off" if o else ""

    if s := stmt.get("vllm_no_prefix_sharing"):
        claim = f"“{s}” — vLLM's CPU build, automatic prefix caching on (its default)"
        v = hits.filter(pl.col("engine") == VLLM) if hits.height else hits
        if v.is_empty():
            out.append(
                Verdict(
                    claim,
                    "cannot be tested here",
                    "measured",
                    "no vLLM run with its prefix cache on",
                    claim_id="vllm_no_prefix_sharing",
                    kind="prefix_sharing",
                    n=0,
                    scope="nothing measured to test it",
                    limit=NOTHING_MEASURED,
                    reason="no vLLM run with its prefix cache on",
                )
            )
        else:
            r = v.sort("shared_fraction").row(-1, named=True)
            grade = negated(cache_shares(r, off_row(VLLM, r["shared_fraction"])))  # the claim: it shares nothing
            out.append(
                grade.verdict(
                    claim,
                    f"{r['cache_hit_rate']:.0%} of prompt tokens served from vLLM's cache at "
                    f"{r['shared_fraction']:.0%} shared{off_hit(VLLM, r['shared_fraction'])}",
                    claim_id="vllm_no_prefix_sharing",
                    kind="prefix_sharing",
                )
            )

    radix = [
        e
        for e in (hits["engine"].unique(maintain_order=True).to_list() if hits.height else [])
        if registry.family(e) == SGLANG
    ]
    if s := stmt.get("sglang_radix_sharing"):
        suffix = stmt.get("sglang_radix_suffix")  # its own row: "… computes only each request's own suffix"
        if not radix:
            out.append(
                Verdict(
                    f"“{s}”",
                    "cannot be tested here",
                    "measured",
                    "no SGLang-family run with its radix cache on reported a hit count",
                    claim_id="sglang_radix_sharing",
                    kind="prefix_sharing",
                    n=0,
                    scope="nothing measured to test it",
                    limit=NOTHING_MEASURED,
                    reason="no SGLang-family run with its radix cache on reported a hit count",
                )
            )
            if suffix:
                out.append(
                    Verdict(
                        f"“{suffix}”",
                        "cannot be tested here",
                        "measured",
                        "no SGLang-family run with its radix cache on reported a hit count",
                        claim_id="sglang_radix_suffix",
                        kind="prefix_sharing",
                        n=0,
                        scope="nothing measured to test it",
                        limit=NOTHING_MEASURED,
                        reason="no SGLang-family run with its radix cache on reported a hit count",
                    )
                )
        else:
            e = radix[0]
            lab = engine_label(e)
            r = hits.filter(pl.col("engine") == e).sort("shared_fraction").row(-1, named=True)
            out.append(
                cache_shares(r, off_row(e, r["shared_fraction"])).verdict(
                    f"“{s}” — {lab}"
                    + (", SGLang's JAX runtime with the same radix cache" if registry.is_stand_in(e) else ""),
                    f"{r['cache_hit_rate']:.0%} of prompt tokens served from its radix cache at "
                    f"{r['shared_fraction']:.0%} shared{off_hit(e, r['shared_fraction'])}",
                    claim_id="sglang_radix_sharing",
                    kind="prefix_sharing",
                )
            )
            if suffix:
                rr = None
                if reuse is not None and reuse.height:
                    q = reuse.filter(
                        (pl.col("engine") == e)
                        & pl.col("prefix_caching")
                        & (pl.col("shared_fraction") == r["shared_fraction"])
                    )
                    rr = q.row(0, named=True) if q.height and q["requests_hit"][0] is not None else None
                if rr is not None:
                    # a request sent in a run's first wave (together with its first request) arrives before anyone
                    # has computed the prefix, so it cannot reuse it: only the later ones can (and must)
                    possible = rr["requests"] - rr["first_wave"]
                    reused = rr["requests_hit"] - rr["first_wave_hit"]
                    ok = reused >= possible
                    first = "none" if rr["first_wave_hit"] == 0 else f"{rr['first_wave_hit']}"
                    number = (
                        f"{reused} of the {possible} requests sent after each run's first wave reused the "
                        f"{rr['shared_prefix_tokens']:,}-token prefix at {r['shared_fraction']:.0%} shared; "
                        f"{first} of the {rr['first_wave']} sent together first (before it could be cached)"
                    )
                    setting = f", requests arriving {rr['first_wave'] // rr['n_runs']} at a time"
                else:
                    ok = r["cache_hit_rate"] >= 0.95 * r["ideal_hit_rate"]
                    number = (
                        f"{r['cache_hit_rate']:.0%} of prompt tokens from the cache at {r['shared_fraction']:.0%} "
                        f"shared against {r['ideal_hit_rate']:.0%} if every request after the first reused it"
                    )
                    setting = ""
                n = (rr or r).get("n_runs") or 1
                share_of = reused / possible if rr is not None and possible else r["cache_hit_rate"]
                grade = counted(
                    ok,
                    n,
                    reason=(
                        "every request that could reuse the prefix did"
                        if ok
                        else "requests that could reuse the prefix computed it again"
                    ),
                    value=share_of,
                    unit=(
                        "fraction of the requests that could reuse the prefix"
                        if rr is not None and possible
                        else "fraction of prompt tokens from the cache"
                    ),
                    scope=f"{r.get('hardware') or 'this host'}, {lab}'s own cache",
                )
                if rr is not None and not possible:
                    grade = replace(
                        grade,
                        outcome="cannot be tested here",
                        value=None,
                        unit="",
                        limit=NOT_REUSABLE,
                        reason="every request was sent in a run's first wave, before the prefix could be "
                        "cached: none could reuse it",
                    )
                out.append(
                    grade.verdict(
                        f"“{suffix}” — {lab}{setting}", number, claim_id="sglang_radix_suffix", kind="prefix_sharing"
                    )
                )

    if s := stmt.get("shared_prefix_threshold"):
        both = (
            {
                f: g
                for (f,), g in on.group_by(["shared_fraction"])
                if g["engine"].n_unique() >= 2 and g["batch_time_s"].null_count() == 0
            }
            if on.height
            else {}
        )
        above = {f: g for f, g in both.items() if f >= threshold}
        engines = _prefix_ordered(on) if on.height else []
        claim = f"“{s}” — on this host: {' against '.join(engine_label(e) for e in engines)}, caches on"
        if not above:
            out.append(
                Verdict(
                    claim,
                    "cannot be tested here",
                    "measured",
                    f"no shared fraction ≥ {threshold:.0%} measured with two engines",
                    claim_id="shared_prefix_threshold",
                    kind="engine_choice",
                    n=0,
                    scope="nothing measured to test it",
                    limit=NOTHING_MEASURED,
                    reason=f"no shared fraction ≥ {threshold:.0%} measured with two engines",
                )
            )
        else:
            ratios = {f: g["batch_time_s"].max() / g["batch_time_s"].min() for f, g in above.items()}
            wins = {f: g.sort("batch_time_s")["engine"][0] for f, g in above.items()}
            # the baseline: the least shared fraction both engines ran below the threshold (0%, where the cache has
            # nothing to reuse); none measured below it: no baseline, and the verdict says so
            lo_f = min((f for f in both if f < threshold), default=None)
            z = (both[lo_f] if lo_f is not None else both[min(above)]).sort(_prefix_engine_order())
            a, b = z.row(0, named=True), z.row(1, named=True)
            missing = f"no shared fraction below the claim's {threshold:.0%} measured with both engines"
            grade = cpu_cross_engine(
                a["engine"],
                b["engine"],
                z["device_kind"].to_list() if "device_kind" in z.columns else [],
                baseline=b["batch_time_s"] / a["batch_time_s"] if lo_f is not None else None,
                n=int(z["n_runs"].min()),
                baseline_at=f"{lo_f:.0%} shared" if lo_f is not None else missing,
                scope=f"{a['hardware']}, each engine's prefix cache on",
            )
            at = "; ".join(f"{engine_label(wins[f])} {sig2(ratios[f])}× sooner at {f:.0%}" for f in sorted(above))
            if grade is not None and lo_f is None:
                out.append(
                    grade.verdict(
                        claim,
                        f"{at} ({missing}, so nothing shows the gap is the cache's)",
                        claim_id="shared_prefix_threshold",
                        kind="engine_choice",
                    )
                )
            elif grade is not None:
                fast = a["engine"] if b["batch_time_s"] >= a["batch_time_s"] else b["engine"]
                number = (
                    f"{engine_label(fast)} already {sig2(grade.value)}× faster at {lo_f:.0%} shared; {at}. What "
                    "the cache saves within each engine is the fair comparison (the threshold row below)"
                )
                out.append(grade.verdict(claim, number, claim_id="shared_prefix_threshold", kind="engine_choice"))
            else:  # GPU runs: the engines' speed decides, by rule 2, at every fraction from the threshold up
                parts = []
                for f, g in sorted(above.items()):
                    sg = g.filter(pl.col("engine").replace_strict(registry.FAMILY_OF, default=None) == SGLANG)
                    other = g.filter(pl.col("engine").replace_strict(registry.FAMILY_OF, default=None) != SGLANG)
                    if sg.is_empty() or other.is_empty():
                        continue
                    x, y = sg.row(0, named=True), other.row(0, named=True)
                    parts.append(
                        measured_difference(
                            *(
                                Repeats.summary(
                                    r["batch_time_s"], r.get("batch_time_min_s"), r.get("batch_time_max_s"), r["n_runs"]
                                )
                                for r in (x, y)
                            ),
                            "lower",
                            what=f"{engine_label(x['engine'])}'s batch time against {engine_label(y['engine'])}'s at {f:.0%}",
                            scope=a["hardware"],
                        )
                    )
                if parts:
                    out.append(
                        combined(parts).verdict(claim, at, claim_id="shared_prefix_threshold", kind="engine_choice")
                    )
        parts = []
        for engine, th in thresholds.items():
            if th.verdict == "no data":
                continue
            b = _prefix_bracket(gain.filter(pl.col("engine") == engine), th.at)
            if th.verdict == "inconclusive":
                parts.append(
                    f"{engine_label(engine)}: inconclusive (on vs off already {apart(th.gain_at_zero)} "
                    "apart at 0%, where nothing is reused)"
                )
            elif th.verdict == "threshold" and b:
                parts.append(f"{engine_label(engine)}: {_threshold_shape(gain.filter(pl.col('engine') == engine), th)}")
            elif th.verdict == "threshold":
                parts.append(f"{engine_label(engine)}: a jump near {th.at:.0%}")
            else:
                trend = saving_trend(gain.filter(pl.col("engine") == engine))
                parts.append(f"{engine_label(engine)}: no jump, a steady {trend} (R² {th.r2_linear:.2f})")
        if parts:
            n = int(sharing["n_runs"].min()) if sharing.height else 0
            outcome, why, limit = finding(n)  # within each engine; a shape from one run a point is noise
            out.append(
                Verdict(
                    f"Does what the prefix cache saves jump at {threshold:.0%} shared, as the article's "
                    "threshold implies?",
                    outcome,
                    "measured",
                    "; ".join(parts),
                    claim_id="shared_prefix_threshold_jump",
                    kind="prefix_sharing",
                    n=n,
                    limit=limit,
                    scope="each engine's own cache on against off",
                    family="own",
                    reason=(f"{why} (run-to-run noise can make or hide a jump); " if why else "")
                    + "the report's own question: what the cache saves within each engine, by "
                    "fraction; its answer is a shape per engine (a jump or a steady rise), not one "
                    "number, so the row has no value",
                )
            )

    if by_turn is not None and by_turn.height:
        parts, ns, shares = [], [], []
        for (engine,), g in by_turn.sort(_prefix_engine_order(), "turn").group_by(["engine"], maintain_order=True):
            o = g.filter(pl.col("prefix_caching"))
            if o.is_empty() or o["cached_share"][-1] is None:
                continue
            last = o.row(-1, named=True)
            f = g.filter(~pl.col("prefix_caching") & (pl.col("turn") == last["turn"]))
            n = turn_n(last, f.row(0, named=True)) if f.height else turn_n(last)
            ns.append(n)
            ttft = (
                f", TTFT {_prefix_times(f['ttft_mean_ms'][0] / last['ttft_mean_ms'], n=n)}"
                if f.height and last["ttft_mean_ms"]
                else ""
            )
            parts.append(f"{engine_label(engine)} {last['cached_share']:.0%}{ttft}")
            shares.append(last["cached_share"])
        if parts:
            n_turn = None if None in ns else min(ns)
            outcome, why, limit = finding(n_turn)  # one engine's cache on against off, per turn
            out.append(
                Verdict(
                    "Multi-turn RAG (the article's example 1): how much of the last turn's prompt the cache "
                    "serves, and its time to first token against the cache off",
                    outcome,
                    "measured",
                    f"turn {last['turn']}: " + "; ".join(parts),
                    claim_id="multi_turn_reuse",
                    kind="prefix_sharing",
                    scope="each engine's own cache on against off",
                    value=shares[0],
                    unit="fraction of the last turn's prompt from the cache (the first engine named)",
                    spread=None,  # one configuration's share: no range over repeats
                    n=n_turn,
                    limit=limit,
                    family="own",
                    reason=(f"{why}: one turn's time to first token from one run can be an outlier; " if why else "")
                    + "the report's own question about the article's example 1",
                )
            )
    return out


def _prefix_ordered(frame: pl.DataFrame) -> list[str]:
    return frame.select("engine").unique().sort(_prefix_engine_order())["engine"].to_list()


# --------------------------------------------------------------------------- the reductions report 05's tables word


def sharing_points(sharing: pl.DataFrame) -> pl.DataFrame:
    """One row per engine and shared fraction: the cache on beside off (``hit_``, ``ttft_``, ``batch_``, ``runs_``
    and the least and most batch time over the runs, ``lo_`` and ``hi_``, with ``on`` / ``off``: the spread the
    figure's whiskers draw), the two ideals (``ideal``, ``block``) and the fraction in % — rates in %, engines in the
    report's order."""
    keys = ["engine", "shared_fraction"]

    def side(on: bool, sfx: str) -> pl.DataFrame:
        return sharing.filter(pl.col("prefix_caching") == on).select(
            *keys,
            (pl.col("cache_hit_rate") * 100).round(1).alias(f"hit_{sfx}"),
            pl.col("ttft_mean_ms").alias(f"ttft_{sfx}"),
            pl.col("batch_time_s").alias(f"batch_{sfx}"),
            pl.col("batch_time_min_s").alias(f"lo_{sfx}"),
            pl.col("batch_time_max_s").alias(f"hi_{sfx}"),
            pl.col("n_runs").alias(f"runs_{sfx}"),
        )

    base = sharing.group_by(keys).agg(
        pl.col("shared_prefix_tokens").first(),
        (pl.col("ideal_hit_rate").first() * 100).round(1).alias("ideal"),
        (pl.col("block_ideal_hit_rate").first() * 100).round(1).alias("block"),
    )
    return (
        base.join(side(True, "on"), on=keys, how="left")
        .join(side(False, "off"), on=keys, how="left")
        .with_columns((pl.col("shared_fraction") * 100).alias("fraction_pct"))
        .sort(_prefix_engine_order(), "shared_fraction")
    )


def gain_points(gain: pl.DataFrame) -> pl.DataFrame:
    """:func:`kvlab.analysis.caching_gain`'s rows with the fraction, the hit rate and the time saved in %, engines
    in the report's order."""
    return gain.with_columns(
        (pl.col("shared_fraction") * 100).alias("fraction_pct"),
        (pl.col("cache_hit_rate_on") * 100).round(1).alias("hit_on"),
        (pl.col("time_saved") * 100).round(1).alias("saved"),
    ).sort(_prefix_engine_order(), "shared_fraction")


def turn_points(by_turn: pl.DataFrame) -> pl.DataFrame:
    """One row per engine and turn: prompt length and conversations, then cached tokens, cached share (%), mean
    TTFT and requests reporting a count with the cache on beside off, and the TTFT ratio off ÷ on (to two
    significant figures where ``n_runs`` (:func:`with_turn_runs`) says every configuration is one run)."""
    keys = ["engine", "turn"]

    def side(on: bool, sfx: str) -> pl.DataFrame:
        return by_turn.filter(pl.col("prefix_caching") == on).select(
            *keys,
            pl.col("cached_tokens").alias(f"cached_{sfx}"),
            (pl.col("cached_share") * 100).round(1).alias(f"share_{sfx}"),
            pl.col("ttft_mean_ms").alias(f"ttft_{sfx}"),
            pl.col("cached_reported").alias(f"reported_{sfx}"),
        )

    base = by_turn.group_by(keys).agg(pl.col("prompt_tokens").first(), pl.col("requests").first())
    ratio_ = pl.col("ttft_off") / pl.col("ttft_on")
    if "n_runs" in by_turn.columns and by_turn["n_runs"].max() == 1:  # one run a side: two significant figures
        ratio_ = ratio_.round_sig_figs(2)
    return (
        base.join(side(True, "on"), on=keys, how="left")
        .join(side(False, "off"), on=keys, how="left")
        .with_columns(ratio_.alias("ratio"))
        .sort(_prefix_engine_order(), "turn")
    )


def radix_paged_pairs(sharing: pl.DataFrame) -> tuple[str, list[dict]] | None:
    """Cache on, vLLM's paged cache beside the first SGLang-family radix cache at every shared fraction both ran: (the
    radix engine, rows with the paged side's columns and the radix side's suffixed ``_r``); None without both."""
    on = sharing.filter(pl.col("prefix_caching"))
    paged = on.filter(pl.col("engine") == VLLM)
    radix_engines = [e for e in on["engine"].unique(maintain_order=True).to_list() if registry.family(e) == SGLANG]
    if paged.is_empty() or not radix_engines:
        return None
    cols = [
        "shared_fraction",
        "shared_prefix_tokens",
        "cache_hit_rate",
        "ideal_hit_rate",
        "block_ideal_hit_rate",
        "ttft_mean_ms",
        "batch_time_s",
    ]
    both = (
        paged.select(cols)
        .join(on.filter(pl.col("engine") == radix_engines[0]).select(cols), on="shared_fraction", suffix="_r")
        .sort("shared_fraction")
    )
    return radix_engines[0], both.to_dicts()
