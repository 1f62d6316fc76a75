"""Report 06: the KV-design article's decision tree applied to your workload, beside what the measured and modelled
results can decide (by the rules every verdict uses); where no factor decides, the guide follows the tree and says
so."""

from __future__ import annotations

import polars as pl

from kvlab import analysis, guide, narrative
from kvlab.claims import document_claim_verdicts
from kvlab.perfmodel import Workload, published_fit
from kvlab.perfmodel.calibrate import crossover_from_fit, crossover_range, fit_for_model
from kvlab.perfmodel.figures import calibrated_ranges, context_grid, curves
from kvlab.studies import Answer, StudyResult, sourced

REPORT = "06_engine_choice"


def compute(
    wb,
    *,
    data_dir: str = "",
    claims_experiment: str = "article_kv_design",
    published_experiment: str = "article_b300",
    context_tokens: int = 8192,
    shared_fraction: float = 0.4,
    concurrency: int = 128,
    model: str = "Llama-3.1-8B",
    gpu: str = "B300",
    tp: int = 8,
    dcp: int = 8,
    mixed_hardware_or_frequent_model_changes: bool = False,
    priority: str = "stability",
    max_context: int = 1048576,
    curve_points: int = 24,
) -> StudyResult:
    data, runs = wb.data, wb.runs
    sharing = analysis.prefix_sharing(runs)
    conc = analysis.concurrency_study(runs)
    # a fit to Kimi-K3's published points stays with Kimi-K3: any other model gets the uncalibrated roofline
    fit = fit_for_model(published_fit(data, experiment=published_experiment), model)
    claims = wb.claims(claims_experiment)
    w = guide.UserWorkload(
        context_tokens,
        shared_fraction,
        concurrency,
        model,
        gpu,
        tp,
        dcp,
        mixed_hardware_or_frequent_model_changes,
        priority,
    )
    tree = w.tree()
    sens, x_range = crossover_range(data, experiment=published_experiment, gpu=gpu, model=model, tp=tp, dcp=dcp)
    model_df = curves(
        list(guide.engine_configs(w)), context_grid(max_context, points=curve_points), Workload(), fit.params, sens=sens
    )
    x_model = crossover_from_fit(fit, gpu=gpu, model=model, dcp=dcp, tp=tp)
    ev = guide.from_evidence(w, fit, sharing, conc)
    found = narrative.engine_choice_verdicts(claims, sharing, conc, w, tree, ev)
    found += document_claim_verdicts(claims, wb.all_claims())  # the tree's branches and claims no study measures
    frames = {
        "claims": claims,
        "sharing": sharing,
        "concurrency": conc,
        "curves": model_df,
        "sharing_by_engine": sharing.sort(
            "engine", "prefix_caching", "shared_fraction", descending=[True, True, False]
        ),
        "concurrency_by_in_flight": conc.sort("in_flight", "engine"),
        "tree_claims": claims.filter(pl.col("citation").str.ends_with("decision tree")),
    }
    values = {
        "examples": narrative.examples_frame(guide.document_examples()),
        "workload": w,
        "tree": tree,
        "fit": fit,
        "x_range": x_range,
        "x_model": x_model,
        "evidence": ev,
        "calibrated": calibrated_ranges(model_df, None),
        "engines": analysis.engines_in(sharing, conc),
        "context_factor": guide.context_factor(w, fit),
        "prefix_factor": guide.prefix_factor(w, sharing),
        "recommendation": narrative.recommendation_sentence(w, tree, ev, sharing.to_dicts()),
        "sharing_experiments": analysis.experiments_in(sharing),
        "concurrency_experiments": analysis.experiments_in(conc),
        "gap": narrative.evidence_gap_sentence(ev),
    }
    answer = Answer(narrative.choice_answer(w, tree, ev))
    return sourced(REPORT, wb, answer, found, frames, values, read=(sharing, conc, published_experiment))
