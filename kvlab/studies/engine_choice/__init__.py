"""Report 06: the KV-design article's decision tree for the workload asked — by default the workbook's own question,
Kimi-K3 on 8× B300 at 64K–200K tokens — beside its three examples and what the measured and modelled results can
decide (by the rules every verdict uses); where nothing decides, the guide follows the tree and says so."""

from __future__ import annotations

import polars as pl

from kvlab import guide
from kvlab.claims import document_claim_verdicts
from kvlab.perfmodel import Workload, published_fit
from kvlab.perfmodel.calibrate import crossover_from_fit, crossover_range, fit_for_model
from kvlab.perfmodel.figures import context_grid, curves
from kvlab.studies.engine_choice import words
from kvlab.studies.engine_choice.checks import Inputs, claim_verdicts, recommendation_verdict, workload_phrase
from kvlab.studies.engine_choice.frames import concurrency_study, experiments_in
from kvlab.studies.engine_choice.result import REPORT, EngineChoiceResult
from kvlab.studies.result import Answer
from kvlab.studies.sharing_frames import engines_in, prefix_sharing

__all__ = ["REPORT", "EngineChoiceResult", "compute"]

#: The workbook's own question (the reference host, data/experiments/b300_long_context.yaml): what the notebook's
#: defaults ask, named so on the page.
REFERENCE = dict(model="Kimi-K3", gpu="B300", tp=8, dcp=8, context_low_tokens=65536, context_tokens=204800)


def _who(w: guide.UserWorkload, low: int) -> str:
    """How the page names the workload asked: the reference host's question, or the workload a user gave."""
    given = dict(model=w.model, gpu=w.gpu, tp=w.tp, dcp=w.dcp, context_low_tokens=low, context_tokens=w.context_tokens)
    return "the reference host's question" if given == REFERENCE else "the workload asked"


def _answer_table(rows: list[dict]) -> pl.DataFrame:
    return (
        pl.DataFrame(rows)
        .select(
            pl.col("example").alias("workload"),
            "model",
            "context",
            pl.col("shared_fraction").alias("shared prefix"),
            pl.col("in_flight").alias("in flight"),
            pl.col("tree").alias("the tree says"),
        )
        .with_columns(pl.lit("published").alias("evidence"))
    )


def _context_factors(w: guide.UserWorkload, fit, low: int) -> list:
    """The modelled context factor at each context asked: the low end, then the workload's own context."""
    return [
        guide.context_factor(guide.UserWorkload(**{**w.__dict__, "context_tokens": c}), fit)
        for c in sorted({low, w.context_tokens})
    ]


def _modelled(data, published_experiment: str, w: guide.UserWorkload, fit, low: int, max_context: int, points: int):
    """The model's side of the question: each engine's curve to ``max_context``, its values at the two contexts asked,
    and the crossover with its range over the assumption sets."""
    sens, x_range = crossover_range(data, experiment=published_experiment, gpu=w.gpu, model=w.model, tp=w.tp, dcp=w.dcp)
    configs = list(guide.engine_configs(w))
    model_df = curves(configs, context_grid(max_context, points=points), Workload(), fit.params, sens=sens)
    at = curves(configs, sorted({low, w.context_tokens}), Workload(), fit.params, sens=sens)
    return model_df, at, crossover_from_fit(fit, gpu=w.gpu, model=w.model, dcp=w.dcp, tp=w.tp), x_range


def compute(
    wb,
    *,
    data_dir: str = "",
    claims_experiment: str = "article_kv_design",
    published_experiment: str = "article_b300",
    context_low_tokens: int = 65536,
    context_tokens: int = 204800,
    shared_fraction: float = 0.0,
    concurrency: int = 8,
    model: str = "Kimi-K3",
    gpu: str = "B300",
    tp: int = 8,
    dcp: int = 8,
    mixed_hardware_or_frequent_model_changes: bool = False,
    priority: str = "stability",
    max_context: int = 1048576,
    curve_points: int = 24,
) -> EngineChoiceResult:
    data, runs = wb.data, wb.runs
    sharing, conc = prefix_sharing(runs), concurrency_study(runs)
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
    low = min(context_low_tokens, context_tokens)
    tree = w.tree()
    model_df, points, x_model, x_range = _modelled(data, published_experiment, w, fit, low, max_context, curve_points)
    ev = guide.from_evidence(w, fit, sharing, conc)
    ctx = _context_factors(w, fit, low)
    rec = recommendation_verdict(w, tree, ev, low)
    found = [*claim_verdicts(claims, Inputs(sharing, conc)), rec]
    found += document_claim_verdicts(claims, wb.all_claims())  # the tree's branches and claims no study measures
    who = _who(w, low)
    asked = f"{who} ({workload_phrase(w, low)})"
    examples = words.example_rows(guide.document_examples(), w, low, who)
    answer = words.answer(asked, tree, examples[1:], ctx, x_model, x_range, rec)
    src = wb.sources(sharing, conc, published_experiment)
    return EngineChoiceResult(
        answer=Answer(answer, _answer_table(examples)),
        verdicts=tuple(found),
        experiments=src.measured,
        documents=src.documents,
        claims=claims,
        tree_claims=claims.filter(pl.col("citation").str.ends_with("decision tree")),
        sharing=sharing,
        concurrency=conc,
        sharing_by_engine=sharing.sort("engine", "prefix_caching", "shared_fraction", descending=[True, True, False]),
        concurrency_by_in_flight=conc.sort("in_flight", "engine"),
        curves=model_df,
        question_points=points,
        examples=pl.DataFrame(examples),
        workload=w,
        tree=tree,
        evidence=ev,
        context_factors=ctx,
        x_model=x_model,
        x_range=x_range,
        fit_kind=fit.kind,
        fit_model=fit.model,
        engines=engines_in(sharing, conc),
        sharing_experiments=experiments_in(sharing),
        concurrency_experiments=experiments_in(conc),
        published_experiment=published_experiment,
        context_low_tokens=low,
        asked=asked,
    )
