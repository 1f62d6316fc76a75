"""Report 05: prefix sharing — radix tree (SGLang) against paged blocks (vLLM), cache-hit rate, TTFT and batch time
by shared fraction with each engine's prefix cache on and off, the article's 30% threshold, and multi-turn RAG."""

from __future__ import annotations

import polars as pl

from kvlab import analysis, narrative
from kvlab.claims.sharing import gain_points, radix_paged_pairs, sharing_points, turn_points, with_turn_runs
from kvlab.engines import VLLM_CPU_BLOCK_TOKENS
from kvlab.studies import Answer, StudyResult, sourced

REPORT = "05_prefix_sharing"
#: The shared fractions of the modelled ideal-reuse curve.
IDEAL_FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9)


def hits_at_most_shared(sharing: pl.DataFrame) -> pl.DataFrame:
    """Per engine with its prefix cache on: the cache-hit rate (its min–max over the repeats) and runs at the
    highest shared fraction measured."""
    on = sharing.filter(pl.col("prefix_caching"))
    if on.is_empty():
        return on.select(
            "engine", "shared_fraction", "cache_hit_rate", "cache_hit_rate_min", "cache_hit_rate_max", "n_runs"
        )
    top = on["shared_fraction"].max()
    return (
        on.filter(pl.col("shared_fraction") == top)
        .select("engine", "shared_fraction", "cache_hit_rate", "cache_hit_rate_min", "cache_hit_rate_max", "n_runs")
        .sort("engine", descending=True)
    )


def compute(
    wb,
    *,
    data_dir: str = "",
    sharing_experiment: str = "cpu_prefix_sharing",
    multi_turn_experiment: str = "cpu_multi_turn",
    claims_experiment: str = "article_kv_design",
    threshold: float = 0.3,
    min_gain: float = 0.1,
    ideal_prompt_tokens: int = 1008,
    ideal_requests: int = 8,
    block_tokens: int = VLLM_CPU_BLOCK_TOKENS,
) -> StudyResult:
    runs, requests = wb.runs, wb.requests
    claims = wb.claims(claims_experiment)
    sharing_runs = runs.filter(pl.col("experiment") == sharing_experiment)
    turn_runs = runs.filter(pl.col("experiment") == multi_turn_experiment)
    wb.measured([sharing_experiment, multi_turn_experiment])  # read by name: recorded for the provenance panel
    sharing = analysis.prefix_sharing(sharing_runs, block_tokens)
    reuse = analysis.prefix_reuse_by_request(sharing_runs, requests)
    gain = analysis.caching_gain(sharing)
    thresholds = analysis.sharing_thresholds(gain, threshold, min_gain)
    by_turn = with_turn_runs(analysis.multi_turn_by_turn(turn_runs, requests), turn_runs)
    ideal = analysis.ideal_sharing(ideal_prompt_tokens, ideal_requests, list(IDEAL_FRACTIONS), block_tokens)
    figure = (
        sharing.drop("hardware").join(
            gain.select("engine", "shared_fraction", "ttft_speedup", "batch_speedup"),
            on=["engine", "shared_fraction"],
            how="left",
        )
        if not sharing.is_empty() and gain.height
        else sharing
    )
    hits = hits_at_most_shared(sharing)
    frames = {
        "claims": claims,
        "sharing": sharing,
        "reuse": reuse,
        "gain": gain,
        "by_turn": by_turn,
        "turn_requests": analysis.multi_turn_requests(turn_runs, requests),
        "ideal": ideal,
        "sharing_figure": figure,
        "hits": hits,
        "prefix_claims": claims.filter(pl.col("claim_id").is_in(list(narrative.PREFIX_CLAIMS))),
    }
    if by_turn.height:
        frames["turn_points"] = turn_points(by_turn)
    if sharing.height:  # the table's rows: the cache on beside off per point
        frames["sharing_points"] = sharing_points(sharing)
    if gain.height:  # what the cache buys, per point
        frames["gain_points"] = gain_points(gain)
    radix_pairs = radix_paged_pairs(sharing) if sharing.height else None
    found = narrative.prefix_verdicts(claims, sharing, gain, thresholds, by_turn, reuse, threshold)
    answer = Answer(narrative.prefix_answer(hits.to_dicts(), found, threshold))
    values = {
        "thresholds": thresholds,
        "threshold": threshold,
        "min_gain": min_gain,
        "block_tokens": block_tokens,
        "ideal_prompt_tokens": ideal_prompt_tokens,
        "ideal_requests": ideal_requests,
        "sharing_experiment": sharing_experiment,
        "multi_turn_experiment": multi_turn_experiment,
        "engines": analysis.engines_in(sharing, by_turn),
        "radix_pairs": radix_pairs,
        "gain_by_engine": {e: gain.filter(pl.col("engine") == e).to_dicts() for e in thresholds},
        "conclusions": narrative.prefix_conclusions(
            sharing.to_dicts(), thresholds, by_turn.to_dicts(), threshold, min_gain, radix_pairs
        ),
    }
    return sourced(REPORT, wb, answer, found, frames, values)
