"""What reports 05 (prefix sharing) and 06 (engine choice) both read: the measured prefix-sharing frame, the
engines it holds, its figure, and the grade of the article's cache-share claims (vLLM shares no prefix, SGLang's
radix cache does) — graded here once, so both pages quote the same verdict.

Neither study folder imports the other; both import this module.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from kvlab.schema import with_device_kind
from kvlab.claims.grading import NOTHING_MEASURED, negated
from kvlab.claims.prefix import cache_shares
from kvlab.engines import VLLM, VLLM_CPU_BLOCK_TOKENS, engine_label, registry
from kvlab.guide import FIXED_CONTEXT_THRESHOLD
from kvlab.figures import legend_below, ordered_engines, column_whiskers, all_zero
from kvlab.studies.sharing_figures import (
    cache_style,
    config_handles,
    fraction_axis,
    hit_rate_axis,
    ideal_handles,
    study_y,
    threshold_handle,
    THRESHOLD_COLOR,
)
from kvlab.style import styled
from kvlab.verdicts import Verdict

#: Columns that identify one engine configuration in the prefix-sharing and concurrency studies.
STUDY_KEYS = ("experiment", "hardware", "engine", "prefix_caching")


def measured_runs(runs: pl.DataFrame, mode: str) -> pl.DataFrame:
    """The successful measured runs of one workload mode."""
    return runs.filter((pl.col("source") == "measured") & (pl.col("mode") == mode) & (pl.col("status") == "ok"))


def cache_hit_rate() -> pl.Expr:
    """Prompt tokens served from the prefix cache / prompt tokens served, per run: the server's prefix-cache hit
    counter delta, else the sum of the responses' cached-token counts; null when neither was reported."""
    hits = pl.coalesce("server_prefix_cache_hits", "cached_prompt_tokens")
    return (hits / pl.col("served_prompt_tokens")).alias("cache_hit_rate")


def hit_source() -> pl.Expr:
    """Which count :func:`cache_hit_rate` read, per run: "server counter", "usage cached_tokens", or null."""
    return (
        pl.when(pl.col("server_prefix_cache_hits").is_not_null())
        .then(pl.lit("server counter"))
        .when(pl.col("cached_prompt_tokens").is_not_null())
        .then(pl.lit("usage cached_tokens"))
        .otherwise(None)
        .alias("hit_source")
    )


def _aggregates() -> list[pl.Expr]:
    """Repeats folded by their median, with the least and most over them."""
    return [
        pl.len().alias("n_runs"),
        pl.col("cache_hit_rate").median(),
        pl.col("cache_hit_rate").min().alias("cache_hit_rate_min"),
        pl.col("cache_hit_rate").max().alias("cache_hit_rate_max"),
        pl.col("hit_source").drop_nulls().first(),
        pl.col("ttft_mean_ms").median(),
        pl.col("ttft_mean_ms").std().alias("ttft_std_ms"),
        pl.col("ttft_mean_ms").min().alias("ttft_min_ms"),
        pl.col("ttft_mean_ms").max().alias("ttft_max_ms"),
        pl.col("ttft_p99_ms").median(),
        pl.col("batch_time_s").median(),
        pl.col("batch_time_s").std().alias("batch_time_std_s"),
        pl.col("batch_time_s").min().alias("batch_time_min_s"),
        pl.col("batch_time_s").max().alias("batch_time_max_s"),
        pl.col("device_kind").drop_nulls().first(),
        pl.col("accelerator").drop_nulls().first(),
        pl.col("gpu_count").drop_nulls().first(),
        pl.col("prompt_tokens_per_s").median(),
        pl.col("output_tokens_per_s").median(),
        pl.col("requests").first(),
        pl.col("prompt_tokens").first(),
        pl.col("shared_prefix_tokens").first(),
    ]


def prefix_sharing(runs: pl.DataFrame, block_tokens: int = VLLM_CPU_BLOCK_TOKENS) -> pl.DataFrame:
    """Per engine configuration and shared fraction: cache-hit rate, TTFT, batch time and throughput.

    ``ideal_hit_rate`` = shared_fraction × (n − 1) / n (a token-exact cache); ``block_ideal_hit_rate`` the same with
    the prefix rounded down to whole ``block_tokens`` blocks (vLLM's paged cache). Repeats fold by their median.
    """
    m = with_device_kind(measured_runs(runs, "shared_prefix")).with_columns(
        (pl.col("shared_prefix_tokens") / pl.col("prompt_tokens")).round(3).alias("shared_fraction"),
        cache_hit_rate(),
        hit_source(),
        (pl.col("requests_ok") + pl.col("requests_failed")).alias("requests"),
        (pl.col("served_prompt_tokens") / pl.col("batch_time_s")).alias("prompt_tokens_per_s"),
        (pl.col("served_output_tokens") / pl.col("batch_time_s")).alias("output_tokens_per_s"),
    )
    return (
        m.group_by([*STUDY_KEYS, "shared_fraction"])
        .agg(*_aggregates())
        .with_columns(
            (pl.col("shared_fraction") * (pl.col("requests") - 1) / pl.col("requests")).alias("ideal_hit_rate"),
            (
                (pl.col("shared_prefix_tokens") // block_tokens)
                * block_tokens
                * (pl.col("requests") - 1)
                / (pl.col("requests") * pl.col("prompt_tokens"))
            ).alias("block_ideal_hit_rate"),
        )
        .sort([*STUDY_KEYS, "shared_fraction"], nulls_last=True)
    )


def engines_in(*frames: pl.DataFrame) -> list[str]:
    """The engines ``frames`` hold, in the order they first appear (what a stand-in note reads)."""
    return list(
        dict.fromkeys(
            e
            for f in frames
            if not f.is_empty() and "engine" in f.columns
            for e in f["engine"].unique(maintain_order=True).to_list()
        )
    )


# -- the cache-share claims, graded once for both reports ------------------------------------------------------------


def _off_row(sharing: pl.DataFrame, engine: str, fraction: float) -> dict | None:
    o = sharing.filter(
        (pl.col("engine") == engine)
        & ~pl.col("prefix_caching")
        & (pl.col("shared_fraction") == fraction)
        & pl.col("cache_hit_rate").is_not_null()
    )
    return o.row(0, named=True) if o.height else None


def hits_on(sharing: pl.DataFrame) -> pl.DataFrame:
    """The rows with the prefix cache on that carry a hit count."""
    if sharing.is_empty():
        return sharing
    return sharing.filter(pl.col("prefix_caching") & pl.col("cache_hit_rate").is_not_null())


def claimed_engine(claim: dict, sharing: pl.DataFrame) -> str | None:
    """The measured engine that stands for the claim's engine family: vLLM itself, or the first SGLang-family
    engine with its cache on and a hit count (PyTorch SGLang, else sglang-jax); None when none ran."""
    family = registry.family(claim["engine"]) or claim["engine"]
    present = hits_on(sharing)["engine"].unique(maintain_order=True).to_list() if sharing.height else []
    return next((e for e in present if (registry.family(e) or e) == family), None)


def top_row(sharing: pl.DataFrame, engine: str) -> dict:
    """``engine``'s row with its cache on at the highest shared fraction it was measured at."""
    return hits_on(sharing).filter(pl.col("engine") == engine).sort("shared_fraction").row(-1, named=True)


def _nothing(claim: str, claim_id: str, why: str) -> Verdict:
    return Verdict(
        claim,
        "cannot be tested here",
        "measured",
        why,
        claim_id=claim_id,
        kind="prefix_sharing",
        n=0,
        scope="nothing measured to test it",
        limit=NOTHING_MEASURED,
        reason=why,
    )


def cache_share_verdict(claim: dict, sharing: pl.DataFrame) -> Verdict:
    """A claim that an engine's prefix cache shares (direction "higher") or shares nothing ("none"): its hit share
    with the cache on against off at the highest shared fraction measured (:func:`kvlab.claims.prefix.cache_shares`,
    one engine's own runs), negated where the claim says it shares nothing."""
    cid, statement = claim["claim_id"], claim["statement"]
    engine = claimed_engine(claim, sharing)
    if engine is None:
        fam = engine_label(registry.family(claim["engine"]) or claim["engine"])
        return _nothing(f"“{statement}”", cid, f"no {fam}-family run with its prefix cache on reported a hit count")
    r = top_row(sharing, engine)
    off = _off_row(sharing, engine, r["shared_fraction"])
    grade = cache_shares(r, off)
    if claim.get("direction") == "none":
        grade = negated(grade)
    stand_in = ", SGLang's JAX runtime with the same radix cache" if registry.is_stand_in(engine) else ""
    cache = "paged cache, automatic prefix caching on (its default)" if engine == VLLM else "radix cache on"
    off_txt = f"; {off['cache_hit_rate']:.0%} with it off" if off else ""
    return grade.verdict(
        f"“{statement}” — {engine_label(engine)}{stand_in}, {cache}",
        f"{r['cache_hit_rate']:.0%} of prompt tokens served from {engine_label(engine)}'s cache at "
        f"{r['shared_fraction']:.0%} shared{off_txt}",
        claim_id=cid,
        kind="prefix_sharing",
    )


#: The article's cache-share claims this module grades (both reports quote them).
CACHE_SHARE_CLAIMS = ("vllm_no_prefix_sharing", "sglang_radix_sharing")


def cache_share_verdicts(claims: pl.DataFrame, sharing: pl.DataFrame) -> list[Verdict]:
    """:func:`cache_share_verdict` for each of :data:`CACHE_SHARE_CLAIMS` the claims table holds, in its order."""
    rows = [r for r in claims.iter_rows(named=True) if r["claim_id"] in CACHE_SHARE_CLAIMS]
    return [cache_share_verdict(r, sharing) for r in rows]


# -- the measured figure both reports draw ----------------------------------------------------------------------------

_PANELS = (
    ("cache_hit_rate", ("cache_hit_rate_min", "cache_hit_rate_max"), "prompt tokens served from the prefix cache"),
    ("ttft_mean_ms", ("ttft_min_ms", "ttft_max_ms"), "mean time to first token (ms)"),
    ("batch_time_s", ("batch_time_min_s", "batch_time_max_s"), "median batch time (s)"),
)


def _panel(ax, s: pl.DataFrame, engines: list[str], col: str, span, label: str, block_tokens: int) -> bool:
    """One panel of :func:`prefix_sharing_figure`; True where whiskers were drawn."""
    zero_off, repeats = [], False
    for e in engines:
        for caching in (True, False):
            g = s.filter((pl.col("engine") == e) & (pl.col("prefix_caching") == caching))
            if g.is_empty():
                continue
            if col == "cache_hit_rate" and not caching and all_zero(g[col].to_list()):
                zero_off.append(e)
                continue
            style = cache_style(e, caching)
            if col == "cache_hit_rate":  # wide, so the thin ideal lines drawn on top leave it visible
                style |= dict(linewidth=3, markersize=7)
            ax.plot(g["shared_fraction"], g[col], **style)
            repeats |= column_whiskers(ax, g, "shared_fraction", col, span, style["color"])
    if col == "cache_hit_rate":
        hit_rate_axis(ax, s, zero_off)
    else:
        study_y(ax, s[col].to_list(), label)
    return repeats


@styled
def prefix_sharing_figure(
    sharing: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD, block_tokens: int = VLLM_CPU_BLOCK_TOKENS
) -> Figure:
    """Cache-hit rate, mean TTFT and median batch time against the shared fraction, per engine and cache setting
    (engine = colour; cache on = solid, filled dots; off = dashed, open dots); log axes (said on the axis) where the
    values span more than 10×; whiskers from the least to the most over the repeats."""
    fig = Figure(figsize=(16, 5.0))
    axes = fig.subplots(1, 3)
    hw = ", ".join(sharing["hardware"].unique(maintain_order=True).to_list())
    engines = ordered_engines(sharing)
    settings = sharing["prefix_caching"].unique().to_list() if sharing.height else []
    s = sharing.sort("shared_fraction")
    repeats = False
    for ax, (col, span, label) in zip(axes, _PANELS):
        repeats |= _panel(ax, s, engines, col, span, label, block_tokens)
        ax.axvline(threshold, color=THRESHOLD_COLOR, linewidth=1.2, alpha=0.7)
        fraction_axis(ax, s)
        ax.set_title(f"measured: {label}", fontsize=10)
    handles = config_handles(engines, settings)
    handles += [*ideal_handles(block_tokens), threshold_handle(threshold)]
    fig.suptitle(f"measured on {hw}" + ("  (whiskers: least to most over the repeats)" if repeats else ""), fontsize=10)
    return legend_below(fig, handles, ncol=4)


__all__ = [
    "CACHE_SHARE_CLAIMS",
    "STUDY_KEYS",
    "cache_hit_rate",
    "cache_share_verdict",
    "cache_share_verdicts",
    "engines_in",
    "hit_source",
    "prefix_sharing",
    "prefix_sharing_figure",
]
