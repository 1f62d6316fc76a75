"""Report 01: 64K vs 200K — which engine finishes a fixed batch first, published, modelled and measured.

Its answer carries the reference-host table the index opens with: per context (64K, 128K, 200K) the engine the
article's table names (published, where it has the context) and the model's verdict over every assumption set it
cannot pin (modelled, with its range and how many sets each engine wins)."""

from __future__ import annotations

import polars as pl

from kvlab import guide
from kvlab.studies import AUTO, chosen_experiment
from kvlab.studies.measured_frames import crossover, relative_speed
from kvlab.engines import SGLANG, VLLM
from kvlab.perfmodel import published_fit
from kvlab.perfmodel.calibrate import consistent_fits, crossover_from_fit, crossover_range
from kvlab.perfmodel.report import consistent_summary
from kvlab.studies.context_scaling import checks, words
from kvlab.studies.context_scaling import frames as f
from kvlab.studies.context_scaling.result import REPORT, ContextScalingResult
from kvlab.studies.measured_frames import (
    decay_factors,
    mean_batch_times,
    measured_span,
    pool_excesses,
    pool_fit,
    with_context_names,
)
from kvlab.studies.result import Answer

__all__ = ["REPORT", "ContextScalingResult", "compute"]


def _measured_part(measured: pl.DataFrame, a: str, b: str, context_from: str, context_to: str, methods) -> dict:
    """The measured fields of the result (none where nothing was measured)."""
    if measured.is_empty():
        return {}
    pair = measured.filter(pl.col("engine").is_in([a, b]))
    pool = pool_fit(pair)
    return {
        "measured": pair,
        "measured_means": f.measured_means(pair),
        "measured_relative": with_context_names(relative_speed(pair, a, b)),
        "growth": f.batch_time_growth(pair),
        "decay_measured": decay_factors(pair, *measured_span(pair, context_from, context_to)),
        "x_measured": tuple(crossover(pair, a, b, method=m) for m in methods),
        "scale_factor": pair["scale_factor"].drop_nulls().max() if "scale_factor" in pair.columns else None,
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
    engine_a: str = VLLM,
    engine_b: str = SGLANG,
    context_from: str = "64K",
    context_to: str = "200K",
    crossover_methods: list = ("linear", "power"),
    measured_engine_a: str = VLLM,
    measured_engine_b: str = "auto",
) -> ContextScalingResult:
    data = wb.data
    measured_experiment = chosen_experiment(wb, measured_experiment, "cpu_long_context")
    published = wb.published(published_experiment)
    measured = wb.measured(measured_experiment, mem_util)
    claims = wb.claims(published_experiment)
    rel = relative_speed(published, engine_a, engine_b)
    estimates = tuple(crossover(published, engine_a, engine_b, method=m) for m in crossover_methods)
    fit = published_fit(data)
    x_model = crossover_from_fit(fit)
    sens, x_range = crossover_range(data, physics=True)
    if measured_engine_b == "auto":  # PyTorch SGLang where it ran, else sglang-jax (opt-in on a CPU)
        measured_engine_b = guide.measured_member(SGLANG, [] if measured.is_empty() else measured["engine"].unique())
    m = _measured_part(measured, measured_engine_a, measured_engine_b, context_from, context_to, crossover_methods)
    if m:
        m["decay_published"] = decay_factors(published, context_from, context_to)
    inputs = checks.Inputs(
        claims, wb.all_claims(), published, rel, m.get("measured_relative"), {engine_b: measured_engine_b}
    )
    found = checks.claim_verdicts(inputs)
    documents = [v for v in found if v.kind != "relative_speed"]  # the article's mechanisms and set-up go last
    found = [v for v in found if v.kind == "relative_speed"]
    found += checks.crossover_published(estimates, x_range)
    found += checks.crossover_modelled(x_model, x_range, fit, consistent_summary(consistent_fits(sens, data)))
    found += checks.crossover_measured(list(m.get("x_measured", ())))
    found += documents
    ratios, spans = f.modelled_ratios(sens)
    table = f.answer_table(rel, spans, engine_a, engine_b)
    model = f.model_crossover(x_model, x_range, fit)
    held = next((v for v in found if v.claim_id == "model_held_out"), None)
    measured_speed = [v for v in found if v.kind == "relative_speed" and v.evidence == "measured"]
    sentences = words.context_answer(
        rel.sort("context_tokens").to_dicts(),
        table.filter(pl.col("evidence") == "modelled").to_dicts(),
        model,
        held,
        measured_speed,
        None if not m else m["measured_means"]["context"].unique(maintain_order=True).to_list(),
    )
    src = wb.sources()
    speed_rows = claims.filter(pl.col("kind") == "relative_speed")
    return ContextScalingResult(
        answer=Answer(sentences, table),
        verdicts=tuple(found),
        experiments=src.measured,
        documents=src.documents,
        published=published,
        published_means=mean_batch_times(published),
        relative=rel,
        modelled_ratios=ratios,
        sensitivity=sens,
        estimates=estimates,
        model=model,
        speed_claims=dict(zip(speed_rows["context_from"], speed_rows["claim_id"])),
        measured_experiment=measured_experiment,
        mem_util=mem_util,
        measured_engine_a=measured_engine_a,
        measured_engine_b=measured_engine_b,
        engine_a=engine_a,
        engine_b=engine_b,
        **m,
    )
