"""Report 01: 64K vs 200K — which engine finishes a fixed batch first, published, modelled and measured.

Its answer carries the reference-host table the index opens with: per context (64K, 128K, 200K) the engine the
article's table names (published, where it has the context) and the model's verdict over every assumption set it
cannot pin (modelled, with its range and how many sets each engine wins)."""

from __future__ import annotations

import polars as pl

from kvlab import analysis, guide, narrative
from kvlab.claims import document_claim_verdicts
from kvlab.perfmodel import published_fit
from kvlab.perfmodel.calibrate import consistent_fits, crossover_from_fit, crossover_range
from kvlab.perfmodel.report import consistent_summary
from kvlab.perfmodel.ranges import model_ranges
from kvlab.studies import Answer, StudyResult, sourced
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.units import k_label

REPORT = "01_context_scaling"
#: The contexts of the reference-host answer table (tokens): the article's two and the one between them.
ANSWER_CONTEXTS = (65536, 131072, 204800)


def modelled_ratios(sens: pl.DataFrame, contexts=ANSWER_CONTEXTS) -> pl.DataFrame:
    """Per context: vLLM's batch time ÷ SGLang's (DCP 8) under every assumption set of ``sens`` (its free fits), the
    lowest and highest ratio, and in how many sets SGLang is the faster (:func:`kvlab.perfmodel.ranges.model_ranges`,
    which report 04's claims row reads too). Above 1: SGLang faster."""
    spans = model_ranges(sens, contexts=tuple(contexts)).ratios
    return pl.DataFrame(
        [
            {
                "context_tokens": r.context_tokens,
                "ratio_low": r.ratio.lo,
                "ratio_high": r.ratio.hi,
                "sets": r.ratio.sets,
                "sglang_faster_sets": r.sglang_faster,
                "span": r,
            }
            for r in spans
        ],
        schema={
            "context_tokens": pl.Int64,
            "ratio_low": pl.Float64,
            "ratio_high": pl.Float64,
            "sets": pl.Int64,
            "sglang_faster_sets": pl.Int64,
            "span": pl.Object,
        },
    )


def answer_table(rel: pl.DataFrame, ratios: pl.DataFrame, engine_a: str, engine_b: str) -> pl.DataFrame:
    """The reference host's answer, one row per context and kind of evidence: the engine, by how much, and the
    kind (published: the article's table; modelled: every assumption set, with the range)."""
    rows = []
    for r in ratios.iter_rows(named=True):
        ctx = r["context_tokens"]
        pub = rel.filter(pl.col("context_tokens") == ctx)
        if pub.height:
            p = pub.row(0, named=True)
            rows.append(
                {
                    "context": k_label(ctx),
                    "context_tokens": ctx,
                    "engine": p["faster"],
                    "margin": f"{p['speedup']:.2f}× faster",
                    "evidence": "published",
                    "basis": "the article's table, one run per cell",
                }
            )
        span, b = r["span"], engine_label(engine_b)
        rows.append(
            {
                "context": k_label(ctx),
                "context_tokens": ctx,
                "engine": span.winner or "either",
                "margin": span.margin(engine_label(engine_a), b),
                "evidence": "modelled",
                "basis": f"{b} faster in {r['sglang_faster_sets']} of {r['sets']} assumption sets; the model "
                "fails its held-out test",
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "context": pl.String,
            "context_tokens": pl.Int64,
            "engine": pl.String,
            "margin": pl.String,
            "evidence": pl.String,
            "basis": pl.String,
        },
    )


def compute(
    wb,
    *,
    data_dir: str = "",
    published_experiment: str = "article_b300",
    measured_experiment: str = "cpu_long_context",
    mem_util: float = 0.92,
    engine_a: str = VLLM,
    engine_b: str = SGLANG,
    context_from: str = "64K",
    context_to: str = "200K",
    crossover_methods: list = ("linear", "power"),
    measured_engine_a: str = VLLM,
    measured_engine_b: str = "auto",
) -> StudyResult:
    data = wb.data
    published = wb.published(published_experiment)
    measured = wb.measured(measured_experiment, mem_util)
    claims = wb.claims(published_experiment)
    means = analysis.mean_batch_times(published)
    rel = analysis.relative_speed(published, engine_a, engine_b)
    estimates = [analysis.crossover(published, engine_a, engine_b, method=m) for m in crossover_methods]
    fit = published_fit(data)
    x_model = crossover_from_fit(fit)
    sens, x_model_range = crossover_range(data, physics=True)
    consistent = consistent_summary(consistent_fits(sens, data))
    ratios = modelled_ratios(sens)
    frames = {
        "published": published,
        "published_means": means,
        "relative": rel,
        "modelled_ratios": ratios.drop("span"),
        "sensitivity": sens,
    }
    values = {
        "estimates": estimates,
        "fit": fit,
        "x_model": x_model,
        "x_model_range": x_model_range,
        "consistent": consistent,
        "x_measured": None,
        "measured_engine_b": measured_engine_b,
    }
    rel_m = None
    if measured_engine_b == "auto":  # PyTorch SGLang where it ran, else sglang-jax (opt-in on a CPU)
        measured_engine_b = guide.measured_member(SGLANG, [] if measured.is_empty() else measured["engine"].unique())
        values["measured_engine_b"] = measured_engine_b
    if not measured.is_empty():
        pair = measured.filter(pl.col("engine").is_in([measured_engine_a, measured_engine_b]))
        rel_m = analysis.relative_speed(pair, measured_engine_a, measured_engine_b)
        frames |= {
            "measured": pair,
            "measured_means": analysis.mean_batch_times(pair).sort("context_tokens", "engine"),
            "measured_relative": rel_m,
            "growth": analysis.batch_time_growth(pair),
            "decay_measured": analysis.decay_factors(pair, context_from, context_to),
            "decay_published": analysis.decay_factors(published, context_from, context_to),
        }
        values["x_measured"] = [
            analysis.crossover(pair, measured_engine_a, measured_engine_b, method=m) for m in crossover_methods
        ]
    found = narrative.speed_claim_verdicts(claims, rel, rel_m, {engine_b: measured_engine_b})
    found += narrative.crossover_verdicts(estimates, x_model, values["x_measured"], x_model_range, fit, consistent)
    found += document_claim_verdicts(claims, wb.all_claims(), published)  # the article's mechanisms and set-up
    table = answer_table(rel, ratios, engine_a, engine_b)
    answer = Answer(
        narrative.context_answer(
            rel.sort("context_tokens").to_dicts(),
            table.filter(pl.col("evidence") == "modelled").to_dicts(),
            x_model_range,
            measured.is_empty(),
        ),
        table,
    )
    return sourced(REPORT, wb, answer, found, frames, values)
