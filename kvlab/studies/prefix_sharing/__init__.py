"""Report 05: prefix sharing — radix tree (SGLang) against paged blocks (vLLM): cache-hit rate, TTFT and batch time
by shared fraction with each engine's prefix cache on and off, the article's 30% threshold, and multi-turn RAG."""

from __future__ import annotations

import polars as pl

from kvlab.engines import VLLM_CPU_BLOCK_TOKENS
from kvlab.studies import AUTO, chosen_experiment
from kvlab.studies.prefix_sharing import frames as f
from kvlab.studies.prefix_sharing import words
from kvlab.studies.prefix_sharing.checks import PREFIX_CLAIM_IDS, Inputs, verdicts
from kvlab.studies.prefix_sharing.result import REPORT, PrefixSharingResult
from kvlab.studies.result import Answer
from kvlab.studies.sharing_frames import engines_in, prefix_sharing

__all__ = ["REPORT", "PrefixSharingResult", "compute"]

#: The shared fractions of the modelled ideal-reuse curve.
IDEAL_FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9)


def compute(
    wb,
    *,
    data_dir: str = "",
    sharing_experiment: str = AUTO,
    multi_turn_experiment: str = AUTO,
    claims_experiment: str = "article_kv_design",
    threshold: float = 0.3,
    min_gain: float = 0.1,
    ideal_prompt_tokens: int = 1008,
    ideal_requests: int = 8,
    block_tokens: int = VLLM_CPU_BLOCK_TOKENS,
) -> PrefixSharingResult:
    runs, requests = wb.runs, wb.requests
    sharing_experiment = chosen_experiment(wb, sharing_experiment, "cpu_prefix_sharing")
    multi_turn_experiment = chosen_experiment(wb, multi_turn_experiment, "cpu_multi_turn")
    claims = wb.claims(claims_experiment)
    sharing_runs = runs.filter(pl.col("experiment") == sharing_experiment)
    turn_runs = runs.filter(pl.col("experiment") == multi_turn_experiment)
    wb.measured([sharing_experiment, multi_turn_experiment])  # read by name: recorded for the provenance panel
    sharing = prefix_sharing(sharing_runs, block_tokens)
    reuse = f.prefix_reuse_by_request(sharing_runs, requests)
    gain = f.caching_gain(sharing)
    thresholds = f.sharing_thresholds(gain, threshold, min_gain)
    by_turn = f.with_turn_runs(f.multi_turn_by_turn(turn_runs, requests), turn_runs)
    hits = f.hits_at_most_shared(sharing)
    radix_engine, radix_pairs = f.radix_pairs_frame(sharing)
    found = verdicts(claims, Inputs(sharing, gain, thresholds, by_turn, reuse, threshold))
    src = wb.sources()
    return PrefixSharingResult(
        answer=Answer(words.answer(hits.to_dicts(), found, threshold)),
        verdicts=tuple(found),
        experiments=src.measured,
        documents=src.documents,
        claims=claims,
        prefix_claims=claims.filter(pl.col("claim_id").is_in(list(PREFIX_CLAIM_IDS))),
        sharing=sharing,
        reuse=reuse,
        gain=gain,
        by_turn=by_turn,
        turn_requests=f.multi_turn_requests(turn_runs, requests),
        ideal=f.ideal_sharing(ideal_prompt_tokens, ideal_requests, list(IDEAL_FRACTIONS), block_tokens),
        sharing_figure=f.sharing_figure_frame(sharing, gain),
        hits=hits,
        sharing_points=f.sharing_points(sharing) if sharing.height else pl.DataFrame(),
        gain_points=f.gain_points(gain) if gain.height else pl.DataFrame(),
        turn_points=f.turn_points(by_turn) if by_turn.height else pl.DataFrame(),
        radix_engine=radix_engine,
        radix_pairs=radix_pairs,
        thresholds=thresholds,
        engines=engines_in(sharing, by_turn),
        threshold=threshold,
        min_gain=min_gain,
        block_tokens=block_tokens,
        ideal_prompt_tokens=ideal_prompt_tokens,
        ideal_requests=ideal_requests,
        sharing_experiment=sharing_experiment,
        multi_turn_experiment=multi_turn_experiment,
    )
