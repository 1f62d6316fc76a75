"""Report 05's own frames: what the prefix cache buys (cache on against off), the threshold test on it, multi-turn
reuse turn by turn, per-request reuse, the modelled ideal, and the reductions its tables show."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kvlab.engines import VLLM, VLLM_CPU_BLOCK_TOKENS, registry, SGLANG
from kvlab.studies.sharing_frames import STUDY_KEYS, measured_runs as _measured
from kvlab.workloads.shared_prefix import shared_prefix_length

#: The keys of a multi-turn configuration (:func:`multi_turn_by_turn`'s groups, less the turn).
TURN_KEYS = ("experiment", "hardware", "engine", "prefix_caching")


def caching_gain(sharing: pl.DataFrame) -> pl.DataFrame:
    """Per engine and shared fraction: prefix cache on vs off.

    ``ttft_speedup`` = TTFT(off) / TTFT(on) and ``batch_speedup`` = batch time(off) / batch time(on)
    (> 1: caching helps); ``time_saved`` = 1 - batch time(on) / batch time(off).
    """
    keys = ["experiment", "hardware", "engine", "shared_fraction"]
    cols = ["cache_hit_rate", "ttft_mean_ms", "batch_time_s", "prompt_tokens_per_s"]
    spread = [
        c
        for c in ("n_runs", "ttft_min_ms", "ttft_max_ms", "batch_time_min_s", "batch_time_max_s")
        if c in sharing.columns
    ]
    on = sharing.filter(pl.col("prefix_caching")).select(
        *keys, "ideal_hit_rate", *[pl.col(c).alias(f"{c}_on") for c in [*cols, *spread]]
    )
    off = sharing.filter(~pl.col("prefix_caching")).select(
        *keys, *[pl.col(c).alias(f"{c}_off") for c in [*cols, *spread]]
    )
    out = on.join(off, on=keys, how="inner").with_columns(
        (pl.col("ttft_mean_ms_off") / pl.col("ttft_mean_ms_on")).alias("ttft_speedup"),
        (pl.col("batch_time_s_off") / pl.col("batch_time_s_on")).alias("batch_speedup"),
        (1 - pl.col("batch_time_s_on") / pl.col("batch_time_s_off")).alias("time_saved"),
    )
    if len(spread) == 5:  # the range each speed-up can take over the repeats: least off ÷ most on, most off ÷ least on
        out = out.with_columns(
            pl.min_horizontal("n_runs_on", "n_runs_off").alias("n_runs"),
            (pl.col("ttft_min_ms_off") / pl.col("ttft_max_ms_on")).alias("ttft_speedup_min"),
            (pl.col("ttft_max_ms_off") / pl.col("ttft_min_ms_on")).alias("ttft_speedup_max"),
            (pl.col("batch_time_min_s_off") / pl.col("batch_time_max_s_on")).alias("batch_speedup_min"),
            (pl.col("batch_time_max_s_off") / pl.col("batch_time_min_s_on")).alias("batch_speedup_max"),
        ).drop([f"{c}_{side}" for c in spread for side in ("on", "off")])
    return out.sort(keys)


@dataclass(frozen=True)
class Threshold:
    """Whether a gain-vs-shared-fraction curve has a threshold at ``at`` or grows smoothly."""

    at: float
    min_gain: float  # the gain (time saved) that counts as worth having
    first_fraction: float | None  # smallest measured fraction whose gain reaches min_gain
    slope_below: float | None  # time saved per unit of shared fraction, fitted below ``at``
    slope_above: float | None  # ... fitted from ``at`` up
    step_at: float | None  # jump in gain across ``at`` beyond what the slope below predicts
    r2_linear: float | None  # R² of one straight line through all points
    verdict: str  # "no data" | "smooth" | "threshold" | "inconclusive"
    #: smallest measured fraction from which every larger measured fraction saves time (> 0)
    break_even: float | None = None
    #: measured fractions where the cache cost time (gain < 0), with their gain
    losses: tuple[tuple[float, float], ...] = ()
    #: the gain measured at shared fraction 0, where the cache has nothing to reuse: a difference between the
    #: cache-on and cache-off runs that reuse cannot explain (None when fraction 0 was not measured)
    gain_at_zero: float | None = None


def _fit(x: list[float], y: list[float]) -> tuple[float, float, float] | None:
    """Least-squares line: (slope, intercept, R²); None with fewer than two distinct x."""
    if len(set(x)) < 2:
        return None
    xa, ya = np.asarray(x, float), np.asarray(y, float)
    slope, icpt = np.polyfit(xa, ya, 1)
    ss_res = float(((ya - (slope * xa + icpt)) ** 2).sum())
    ss_tot = float(((ya - ya.mean()) ** 2).sum())
    return float(slope), float(icpt), (1 - ss_res / ss_tot) if ss_tot else 1.0


def sharing_threshold(gain: pl.DataFrame, at: float = 0.3, min_gain: float = 0.10) -> Threshold:
    """Test the decision tree's threshold on one engine's caching gain against shared fraction.

    A threshold shows as a gain that stays small below ``at`` and jumps at it: slope above much
    steeper than below (ratio > 2) or a step across ``at`` larger than the spread of the line.
    A straight line through every point (R² >= 0.9) with similar slopes is "smooth": the gain
    grows with the fraction and no particular fraction is special. "inconclusive": at shared
    fraction 0, where nothing can be reused, the cache-on runs already differ from the cache-off
    runs by ``min_gain`` or more, so differences that size are not the cache's doing.
    """
    g = gain.filter(pl.col("time_saved").is_not_null()).sort("shared_fraction")
    if g.height < 3:
        return Threshold(at, min_gain, None, None, None, None, None, "no data")
    x, y = g["shared_fraction"].to_list(), g["time_saved"].to_list()
    reached = [f for f, v in zip(x, y) if v >= min_gain]
    lo = [(f, v) for f, v in zip(x, y) if f < at]
    hi = [(f, v) for f, v in zip(x, y) if f >= at]
    fit_lo = _fit([f for f, _ in lo], [v for _, v in lo])
    fit_hi = _fit([f for f, _ in hi], [v for _, v in hi])
    fit_all = _fit(x, y)
    step = None
    if fit_lo and hi:
        first_hi = min(hi)
        step = first_hi[1] - (fit_lo[0] * first_hi[0] + fit_lo[1])
    s_lo, s_hi = (fit_lo[0] if fit_lo else None), (fit_hi[0] if fit_hi else None)
    r2 = fit_all[2] if fit_all else None
    resid = 0.0
    if fit_all:
        resid = max(abs(v - (fit_all[0] * f + fit_all[1])) for f, v in zip(x, y))
    steep = s_lo is not None and s_hi is not None and s_hi > 2 * max(s_lo, 1e-9) and s_hi > 0
    jump = step is not None and step > max(2 * resid, min_gain)
    verdict = "threshold" if (steep or jump) else "smooth"
    gain_at_zero = next((v for f, v in zip(x, y) if f == 0), None)
    if gain_at_zero is not None and abs(gain_at_zero) >= min_gain:
        verdict = "inconclusive"
    break_even = None
    for f, v in sorted(zip(x, y), reverse=True):
        if v <= 0:
            break
        break_even = f
    losses = tuple((f, v) for f, v in zip(x, y) if v < 0 and f > 0)  # at 0 there is nothing to reuse
    return Threshold(
        at, min_gain, min(reached) if reached else None, s_lo, s_hi, step, r2, verdict, break_even, losses, gain_at_zero
    )


def sharing_thresholds(gain: pl.DataFrame, at: float = 0.3, min_gain: float = 0.10) -> dict[str, Threshold]:
    """:func:`sharing_threshold` for each engine in ``gain``, in the order the engines appear."""
    return {
        engine: sharing_threshold(g, at, min_gain) for (engine,), g in gain.group_by(["engine"], maintain_order=True)
    }


def _sum_reported(col: str) -> pl.Expr:
    """Sum of a counter over a group; null (not 0) when no row of the group reported it."""
    return pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum()).otherwise(None)


def _with_turn(requests: pl.DataFrame) -> pl.DataFrame:
    """Multi-turn requests with their ``turn``: the one the client recorded (requests.parquet's turn column).

    Runs stored before that column existed have no turn (absent, or null once loaded against the schema):
    only for those is it rebuilt, as the rank of the request's prompt length among the run's successful
    requests (every conversation's turn k has the same length in kvlab's multi_turn workload).
    """
    rank = (pl.col("prompt_tokens").rank("dense").over("run_id") - 1).cast(pl.Int64)
    if "turn" not in requests.columns:
        return requests.with_columns(rank.alias("turn"))
    return requests.with_columns(pl.coalesce(pl.col("turn"), rank).alias("turn"))


def multi_turn_by_turn(runs: pl.DataFrame, requests: pl.DataFrame) -> pl.DataFrame:
    """Per engine configuration and turn: prompt length, cached tokens and TTFT (mean over conversations).

    The turn of a request is the one stored with it (:func:`_with_turn`). ``cached_share`` counts only the
    requests that reported a cached-token count (``cached_reported`` of ``requests``); null, never 0,
    when none did.
    """
    m = _measured(runs, "multi_turn").select("run_id", *STUDY_KEYS)
    r = _with_turn(requests.join(m, on="run_id", how="inner").filter(pl.col("status") == "ok"))
    return (
        r.group_by([*STUDY_KEYS, "turn"])
        .agg(
            pl.len().alias("requests"),
            pl.col("prompt_tokens").mean(),
            pl.col("cached_tokens").mean(),
            pl.col("cached_tokens").is_not_null().sum().alias("cached_reported"),
            (
                _sum_reported("cached_tokens")
                / pl.col("prompt_tokens").filter(pl.col("cached_tokens").is_not_null()).sum()
            ).alias("cached_share"),
            pl.col("ttft_ms").mean().alias("ttft_mean_ms"),
        )
        .sort([*STUDY_KEYS, "turn"])
    )


def ideal_sharing(
    prompt_tokens: int, requests: int, fractions: list[float], block_tokens: int = VLLM_CPU_BLOCK_TOKENS
) -> pl.DataFrame:
    """Modelled: the share of prompt tokens a perfect prefix cache could serve, per shared fraction.

    Every request after the first reuses the whole prefix (``ideal_hit_rate``) or, in a cache
    that stores whole KV blocks of ``block_tokens``, the prefix rounded down to a block
    (``block_hit_rate``; vLLM's CPU backend: VLLM_CPU_BLOCK_TOKENS, GPUs typically 16).
    """
    rows = []
    for f in fractions:
        prefix = shared_prefix_length(prompt_tokens, f)
        rows.append(
            {
                "shared_fraction": f,
                "prefix_tokens": prefix,
                "ideal_hit_rate": prefix * (requests - 1) / (requests * prompt_tokens),
                "block_hit_rate": (prefix // block_tokens) * block_tokens * (requests - 1) / (requests * prompt_tokens),
            }
        )
    return pl.DataFrame(rows)


def multi_turn_requests(runs: pl.DataFrame, requests: pl.DataFrame) -> pl.DataFrame:
    """Every successful request of the measured multi-turn runs with its turn, numbered as
    :func:`multi_turn_by_turn` numbers them: the spread over conversations behind each turn's mean."""
    m = _measured(runs, "multi_turn").select("run_id", *STUDY_KEYS)
    return (
        _with_turn(requests.join(m, on="run_id", how="inner").filter(pl.col("status") == "ok"))
        .select(*STUDY_KEYS, "run_id", "turn", "prompt_tokens", "cached_tokens", "ttft_ms")
        .sort([*STUDY_KEYS, "turn", "run_id"])
    )


def prefix_reuse_by_request(runs: pl.DataFrame, requests: pl.DataFrame) -> pl.DataFrame:
    """Per engine configuration and shared fraction of the measured shared-prefix runs: how many requests found
    any of their prompt in the cache, in all and among the first wave (the first ``batch_size`` requests of a
    run, sent together before anything was cached), and how many tokens each such request found.

    ``requests_hit`` / ``first_wave_hit`` are null, never 0, when no request of the group reported a
    cached-token count. Counts add up over repeats.
    """
    m = _measured(runs, "shared_prefix").select(
        "run_id",
        *STUDY_KEYS,
        "batch_size",
        "shared_prefix_tokens",
        (pl.col("shared_prefix_tokens") / pl.col("prompt_tokens")).round(3).alias("shared_fraction"),
    )
    r = (
        requests.join(m, on="run_id", how="inner")
        .filter(pl.col("status") == "ok")
        .with_columns(
            (pl.col("request_index") < pl.col("batch_size")).alias("first_wave"),
            (pl.col("cached_tokens") > 0).alias("hit"),
        )
    )
    reported = pl.col("cached_tokens").is_not_null().any()
    return (
        r.group_by([*STUDY_KEYS, "shared_fraction"])
        .agg(
            pl.col("run_id").n_unique().alias("n_runs"),
            pl.len().alias("requests"),
            pl.col("first_wave").sum().alias("first_wave"),
            pl.when(reported).then(pl.col("hit").sum()).otherwise(None).alias("requests_hit"),
            pl.when(reported)
            .then((pl.col("hit") & pl.col("first_wave")).sum())
            .otherwise(None)
            .alias("first_wave_hit"),
            pl.col("cached_tokens").filter(pl.col("hit")).median().alias("cached_tokens_per_hit"),
            pl.col("shared_prefix_tokens").first(),
        )
        .sort([*STUDY_KEYS, "shared_fraction"], nulls_last=True)
    )


def _prefix_engine_order() -> pl.Expr:
    """Engines in display order (kvlab.engines.registry.order), unknown ones last."""
    return pl.col("engine").replace_strict(
        {e: registry.order(e) for e in registry.ENGINE_NAMES}, default=len(registry.ENGINE_NAMES), return_dtype=pl.Int64
    )


def with_turn_runs(by_turn: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """``by_turn`` (:func:`multi_turn_by_turn`) with ``n_runs``: the successful measured multi-turn
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
    """:func:`caching_gain`'s rows with the fraction, the hit rate and the time saved in %, engines
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


def engine_order() -> pl.Expr:
    """Engines in display order (kvlab.engines.registry.order), unknown ones last."""
    return _prefix_engine_order()


def hits_at_most_shared(sharing: pl.DataFrame) -> pl.DataFrame:
    """Per engine with its prefix cache on: the cache-hit rate (its min–max over the repeats) and runs at the
    highest shared fraction measured."""
    cols = ["engine", "shared_fraction", "cache_hit_rate", "cache_hit_rate_min", "cache_hit_rate_max", "n_runs"]
    on = sharing.filter(pl.col("prefix_caching"))
    if on.is_empty():
        return on.select(cols)
    top = on["shared_fraction"].max()
    return on.filter(pl.col("shared_fraction") == top).select(cols).sort("engine", descending=True)


def sharing_figure_frame(sharing: pl.DataFrame, gain: pl.DataFrame) -> pl.DataFrame:
    """The measured figure's data: the sharing rows with each point's cache off ÷ on beside them."""
    if sharing.is_empty() or not gain.height:
        return sharing
    return sharing.drop("hardware").join(
        gain.select("engine", "shared_fraction", "ttft_speedup", "batch_speedup"),
        on=["engine", "shared_fraction"],
        how="left",
    )


def radix_pairs_frame(sharing: pl.DataFrame) -> tuple[str | None, pl.DataFrame]:
    """:func:`radix_paged_pairs` as (the radix engine or None, a frame of the paired rows)."""
    found = radix_paged_pairs(sharing) if sharing.height else None
    if found is None:
        return None, pl.DataFrame()
    engine, rows = found
    return engine, pl.DataFrame(rows)
