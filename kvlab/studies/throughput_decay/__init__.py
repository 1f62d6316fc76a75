"""Report 02: how far each engine's throughput falls from 64K to 200K, the article's decay factors checked against
its own table (a consistency check, never a reproduction), and the same decay measured here."""

from __future__ import annotations

import polars as pl

from kvlab.studies import AUTO, chosen_experiment
from kvlab.studies.measured_frames import consistency, throughput
from kvlab.studies.measured_frames import decay_factors, measured_span, pool_excesses, pool_fit
from kvlab.studies.result import Answer
from kvlab.studies.throughput_decay import checks, words
from kvlab.studies.throughput_decay import frames as f
from kvlab.studies.throughput_decay.result import REPORT, ThroughputDecayResult

__all__ = ["REPORT", "ThroughputDecayResult", "compute"]


def _measured_part(measured: pl.DataFrame, context_from: str, context_to: str) -> dict:
    """The measured fields of the result (none where nothing was measured); the decay between ``context_from`` and
    ``context_to`` where the runs hold both, else between the experiment's own shortest and longest context."""
    if measured.is_empty():
        return {}
    pool = pool_fit(measured)
    scale = measured["scale_factor"].drop_nulls().max() if "scale_factor" in measured.columns else None
    contexts = measured.select("context_label", "context_tokens").unique().sort("context_tokens")
    return {
        "measured": measured,
        "throughput_measured": f.measured_throughput(throughput(measured)),
        "decay_measured": decay_factors(measured, *measured_span(measured, context_from, context_to)),
        "scale_factor": scale,
        "measured_contexts": tuple(contexts.iter_rows()),
        "pool": pool,
        "pool_excesses": pool_excesses(pool),
    }


def compute(
    wb,
    *,
    data_dir: str = "",
    published_experiment: str = "article_b300",
    measured_experiment: str = AUTO,
    mem_util: float = 0.92,
    context_from: str = "64K",
    context_to: str = "200K",
) -> ThroughputDecayResult:
    measured_experiment = chosen_experiment(wb, measured_experiment, "cpu_long_context")
    claims = wb.claims(published_experiment)
    published = wb.published(published_experiment)
    measured = wb.measured(measured_experiment, mem_util)
    tp_pub = f.relative_to_context(throughput(published), "batches_per_s", context_from)
    decay_pub = decay_factors(published, context_from, context_to)
    check = consistency(published, claims)
    m = _measured_part(measured, context_from, context_to)
    at_claims = decay_factors(measured, context_from, context_to) if m else None  # what the claims' contexts test
    found = checks.verdicts(checks.Inputs(claims, check, decay_pub, at_claims))
    decay_v = [v for v in found if v.kind == "throughput_decay" and "," not in v.claim_id]
    shape = next((v for v in found if "," in v.claim_id and v.evidence == "published"), None)
    on_host = next((v for v in found if "," in v.claim_id and v.evidence == "measured"), None)
    src = wb.sources()
    stated = f.stated_ratios(check)
    return ThroughputDecayResult(
        answer=Answer(
            words.decay_answer(
                decay_v,
                stated,
                shape,
                on_host if m else None,
                m["decay_measured"].to_dicts() if m else [],
                (context_from, context_to),
            )
        ),
        verdicts=tuple(found),
        experiments=src.measured,
        documents=src.documents,
        published=published,
        throughput_published=tp_pub.sort("context_tokens", "engine"),
        decay_published=decay_pub,
        check=check,
        stated=stated,
        claims=claims,
        measured_experiment=measured_experiment,
        mem_util=mem_util,
        context_from=context_from,
        context_to=context_to,
        **m,
    )
