"""Report 02: how far each engine's throughput falls from 64K to 200K, the article's decay factors checked against
its own table (a consistency check, never a reproduction), and the same decay measured here."""

from __future__ import annotations

import polars as pl

from kvlab import analysis, narrative
from kvlab.claims.decay import extremes, scaled_pairs
from kvlab.studies import Answer, StudyResult, sourced

REPORT = "02_throughput_decay"


def compute(
    wb,
    *,
    data_dir: str = "",
    published_experiment: str = "article_b300",
    measured_experiment: str = "cpu_long_context",
    mem_util: float = 0.92,
    context_from: str = "64K",
    context_to: str = "200K",
) -> StudyResult:
    claims = wb.claims(published_experiment)
    published = wb.published(published_experiment)
    measured = wb.measured(measured_experiment, mem_util)
    tp_pub = analysis.relative_to_context(analysis.throughput(published), "batches_per_s", context_from).sort(
        "context_tokens", "engine"
    )
    decay_pub = analysis.decay_factors(published, context_from, context_to)
    check = analysis.consistency(published, claims)
    frames = {
        "published": published,
        "throughput_published": tp_pub,
        "decay_published": decay_pub,
        "check": check,
        "check_verdicts": analysis.consistency_verdicts(check),
        "claims": claims,
    }
    decay_m = None
    values = {"mem_util": mem_util}
    if not measured.is_empty():
        frames["measured"] = measured
        frames["throughput_measured"] = analysis.relative_to_context(
            analysis.throughput(measured), "output_tokens_per_s"
        ).sort("context_tokens", "engine")
        decay_m = frames["decay_measured"] = analysis.decay_factors(measured, context_from, context_to)
        values["scaled_pairs"] = scaled_pairs(frames["throughput_measured"])
        # which engine holds up best: said only where two or more engines have runs at both contexts
        values["decay_extremes"] = extremes(decay_m) if decay_m["engine"].n_unique() >= 2 else []
    found = narrative.decay_claim_verdicts(claims, check, decay_pub, decay_m)
    stated = (
        claims.filter((pl.col("kind") == "throughput_decay") & pl.col("stated_value").is_not_null())
        .select("engine", "stated_value")
        .join(decay_pub.select("engine", "batch_time_ratio"), on="engine")
        .join(
            frames["check_verdicts"]
            .filter(pl.col("kind") == "throughput_decay")
            .select("engine", "consistent_under_any"),
            on="engine",
            how="left",
        )
    )
    answer = Answer(
        narrative.decay_answer(stated.sort("engine").to_dicts(), context_from, context_to, measured.is_empty())
    )
    return sourced(REPORT, wb, answer, found, frames, values)
