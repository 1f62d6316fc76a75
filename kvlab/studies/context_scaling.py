"""Report 01: 64K vs 200K — which engine finishes a fixed batch first, published, modelled and measured.

Its answer carries the reference-host table the index opens with: per context (64K, 128K, 200K) the engine the
article's table names (published, where it has the context) and the model's verdict over every assumption set it
cannot pin (modelled, with its range and how many sets each engine wins)."""

from __future__ import annotations

import polars as pl

from kvlab import analysis, guide, narrative
from kvlab.claims import document_claim_verdicts
from kvlab.perfmodel import published_fit
from kvlab.perfmodel.calibrate import consistent_fits, crossover_from_fit, crossover_range, refits
from kvlab.perfmodel.report import consistent_summary
from kvlab.perfmodel.roofline import Config, batch_time
from kvlab.studies import Answer, StudyResult, sourced
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.units import k_label

REPORT = "01_context_scaling"
#: The contexts of the reference-host answer table (tokens): the article's two and the one between them.
ANSWER_CONTEXTS = (65536, 131072, 204800)


def modelled_ratios(sens: pl.DataFrame, contexts=ANSWER_CONTEXTS, gpu: str = "B300", model: str = "Kimi-K3",
                    tp: int = 8, dcp: int = 8) -> pl.DataFrame:
    """Per context: vLLM's batch time ÷ SGLang's (DCP ``dcp``) under every assumption set of ``sens`` (its free
    fits): the lowest and highest ratio, and in how many sets each engine is the faster. Above 1: SGLang faster."""
    sets = refits(sens)
    rows = []
    for ctx in contexts:
        ratios = []
        for w, a, p in sets:
            va = batch_time(Config.of(gpu, model, VLLM, tp, 1, a.default_mem_util), ctx, w, p, a).batch_time_s
            sg = batch_time(Config.of(gpu, model, SGLANG, tp, dcp, a.default_mem_util), ctx, w, p, a).batch_time_s
            ratios.append(va / sg)
        rows.append({"context_tokens": ctx, "ratio_low": min(ratios), "ratio_high": max(ratios),
                     "sets": len(ratios), "sglang_faster_sets": sum(r > 1 for r in ratios)})
    return pl.DataFrame(rows, schema={"context_tokens": pl.Int64, "ratio_low": pl.Float64, "ratio_high": pl.Float64,
                                      "sets": pl.Int64, "sglang_faster_sets": pl.Int64})


def answer_table(rel: pl.DataFrame, ratios: pl.DataFrame, engine_a: str, engine_b: str) -> pl.DataFrame:
    """The reference host's answer, one row per context and kind of evidence: the engine, by how much, and the
    kind (published: the article's table; modelled: every assumption set, with the range)."""
    rows = []
    for r in ratios.iter_rows(named=True):
        ctx = r["context_tokens"]
        pub = rel.filter(pl.col("context_tokens") == ctx)
        if pub.height:
            p = pub.row(0, named=True)
            rows.append({"context": k_label(ctx), "context_tokens": ctx, "engine": p["faster"],
                         "margin": f"{p['speedup']:.2f}× faster", "evidence": "published",
                         "basis": "the article's table, one run per cell"})
        lo, hi, n, s = r["ratio_low"], r["ratio_high"], r["sets"], r["sglang_faster_sets"]
        a, b = engine_label(engine_a), engine_label(engine_b)
        if s == 0:
            engine, margin = engine_a, f"{1 / hi:.2f}–{1 / lo:.2f}× faster"
        elif s == n:
            engine, margin = engine_b, f"{lo:.2f}–{hi:.2f}× faster"
        else:
            engine, margin = "either", f"{a} up to {1 / lo:.2f}× faster, {b} up to {hi:.2f}× faster"
        rows.append({"context": k_label(ctx), "context_tokens": ctx, "engine": engine, "margin": margin,
                     "evidence": "modelled",
                     "basis": f"{b} faster in {s} of {n} assumption sets; the model fails its held-out test"})
    return pl.DataFrame(rows, schema={"context": pl.String, "context_tokens": pl.Int64, "engine": pl.String,
                                      "margin": pl.String, "evidence": pl.String, "basis": pl.String})


def compute(wb, *, data_dir: str = "", published_experiment: str = "article_b300",
            measured_experiment: str = "cpu_long_context", mem_util: float = 0.92, engine_a: str = VLLM,
            engine_b: str = SGLANG, context_from: str = "64K", context_to: str = "200K",
            crossover_methods: list = ("linear", "power"), measured_engine_a: str = VLLM,
            measured_engine_b: str = "auto") -> StudyResult:
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
    frames = {"published": published, "published_means": means, "relative": rel, "modelled_ratios": ratios,
              "sensitivity": sens}
    values = {"estimates": estimates, "fit": fit, "x_model": x_model, "x_model_range": x_model_range,
              "consistent": consistent, "x_measured": None, "measured_engine_b": measured_engine_b}
    rel_m = None
    if measured_engine_b == "auto":  # PyTorch SGLang where it ran, else sglang-jax (opt-in on a CPU)
        measured_engine_b = guide.measured_member(SGLANG, [] if measured.is_empty() else measured["engine"].unique())
        values["measured_engine_b"] = measured_engine_b
    if not measured.is_empty():
        pair = measured.filter(pl.col("engine").is_in([measured_engine_a, measured_engine_b]))
        rel_m = analysis.relative_speed(pair, measured_engine_a, measured_engine_b)
        frames |= {"measured": pair, "measured_means": analysis.mean_batch_times(pair).sort("context_tokens", "engine"), "measured_relative": rel_m,
                   "growth": analysis.batch_time_growth(pair),
                   "decay_measured": analysis.decay_factors(pair, context_from, context_to),
                   "decay_published": analysis.decay_factors(published, context_from, context_to)}
        values["x_measured"] = [analysis.crossover(pair, measured_engine_a, measured_engine_b, method=m)
                                for m in crossover_methods]
    found = narrative.speed_claim_verdicts(claims, rel, rel_m, {engine_b: measured_engine_b})
    found += narrative.crossover_verdicts(estimates, x_model, values["x_measured"], x_model_range, fit, consistent)
    found += document_claim_verdicts(claims, wb.all_claims(), published)  # the article's mechanisms and set-up
    table = answer_table(rel, ratios, engine_a, engine_b)
    answer = Answer(narrative.context_answer(rel.sort("context_tokens").to_dicts(),
                                             table.filter(pl.col("evidence") == "modelled").to_dicts(),
                                             x_model_range, measured.is_empty()), table)
    params = {"published_experiment": published_experiment, "measured_experiment": measured_experiment,
              "mem_util": mem_util, "engine_a": engine_a, "engine_b": engine_b}
    return sourced(REPORT, wb, answer, found, frames, values, params)
