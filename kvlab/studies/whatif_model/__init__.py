"""Report 04: the physical (roofline) model of long-context serving — its calibration on the article's table, its
held-out test, the crossover over every assumption set the article leaves open, KV headroom and the bound each run
reached. The model fails its held-out test at the default assumptions, so everything here illustrates. Its frames
(``frames``), checks (``checks``), figures (``figures``), sentences (``words``) and page sections (``page``) are
this folder's own."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from kvlab.claims.held_out import winners_held_out
from kvlab.engines import SGLANG, VLLM
from kvlab.perfmodel import Assumptions, Config, Workload, achieved_fraction, published_fit
from kvlab.perfmodel.calibrate import consistent_fits, crossover_from_fit, crossover_range, fits_frame
from kvlab.perfmodel.calibrate import speed_ratio_range
from kvlab.perfmodel.figures import (
    as_shown,
    bound_summary,
    calibrated_ranges,
    context_grid,
    crossover_table,
    curves,
    flag_kinds,
    headroom_summary,
    headroom_table,
    published_throughput,
)
from kvlab.perfmodel.ranges import bounded_miss, held_out_by_set, per_step_costs, unexplained_shares
from kvlab.perfmodel.throughput import capacity_limited, memory_constants
from kvlab.perfmodel.report import consistent_summary
from kvlab.perfmodel.stepfit import step_fits
from kvlab.studies.result import Answer
from kvlab.studies.whatif_model import checks, frames, words
from kvlab.studies.whatif_model.result import REPORT, Consistent, WhatifModelResult

__all__ = ["REPORT", "Consistent", "WhatifModelResult", "compute"]


#: Capacity-limited throughput (issue 55, item 5) on report 04: at the reference host's longest context, per TPOT
#: target; `kvlab model --context … --tpot-ms …` gives it at any other.
THROUGHPUT_CONTEXT = 204800
TPOT_TARGETS_MS = (50, 100, 200)


def _refits(data, assume, published_experiment, gpu, model, tp, dcp, batches, outputs):
    """The refit per assumption set (batch x output x the model's unpinned axes) and the crossover's range."""
    return crossover_range(
        data,
        assume,
        published_experiment,
        [Workload(b, n) for b in batches for n in outputs],
        gpu=gpu,
        model=model,
        tp=tp,
        dcp=dcp,
        physics=True,
    )


def compute(
    wb,
    *,
    data_dir: str = "",
    published_experiment: str = "article_b300",
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
    gpus: list = ("B300", "B200", "H200", "H100"),
    dcp_sizes: list = (2, 4, 8),
    max_context: int = 1048576,
    curve_points: int = 40,
    batch_size: int = 8,
    output_tokens: int = 1024,
    sensitivity_batches: list = (1, 4, 8, 32),
    sensitivity_outputs: list = (1024, 4096),
    mem_utils: list = (0.92, 0.95),
    headroom_contexts: list = (65536, 204800, 524288, 1048576),
    kv_layers: int = 0,
) -> WhatifModelResult:
    data = wb.data
    workload = Workload(batch_size=batch_size, output_tokens=output_tokens)
    assume = Assumptions(kv_layers=kv_layers or None)
    configs = [Config.of(gpu, model, e, tp, d, assume.default_mem_util) for e, d in ((VLLM, 1), (SGLANG, dcp))]
    published = published_throughput(wb.published(published_experiment), workload)
    claims = wb.claims(published_experiment)
    fit = published_fit(data, workload, assume, published_experiment)
    phys = published_fit(data, workload, assume, published_experiment, physics=True)
    sens, x_range = _refits(
        data, assume, published_experiment, gpu, model, tp, dcp, sensitivity_batches, sensitivity_outputs
    )
    cons = consistent_fits(sens, data, published_experiment, gpu=gpu, model=model, tp=tp, dcp=dcp, base=assume)
    model_df = curves(configs, context_grid(max_context, points=curve_points), workload, fit.params, assume, sens=sens)
    xo = crossover_table(
        list(gpus), model, list(dcp_sizes), workload, fit.params, assume, tp=tp, max_tokens=max_context, sens=sens
    )
    head = headroom_table(gpu, model, list(mem_utils), sorted({1, dcp}), list(headroom_contexts), assume, tp=tp)
    consistent = frames.consistent(consistent_summary(cons))
    top = int(model_df["context_tokens"].max())
    result = WhatifModelResult(
        answer=Answer(("…",)),  # replaced below: the answer's sentences read the typed result
        verdicts=_verdicts(fit, sens, claims, consistent, mem_utils, workload, assume, data),
        published=published,
        claims=claims,
        calibration=frames.calibration(fit),
        fits=fits_frame(fit, phys, workload=workload, assumptions=assume),
        sensitivity=sens,
        sensitivity_shown=as_shown(sens),
        sensitivity_by_batch=frames.by_batch(sens),
        consistent_fits=cons,
        consistent_fits_shown=as_shown(cons.filter(pl.col("consistent")).sort("max_abs_residual_pct")),
        curves=model_df,
        at_max=model_df.filter(pl.col("context_tokens") == top).sort("engine"),
        crossovers=xo,
        crossovers_shown=as_shown(xo),
        headroom=head,
        headroom_summary=headroom_summary(head),
        fit=fit,
        phys=phys,
        workload=workload,
        assumptions=assume,
        crossover=crossover_from_fit(fit, gpu=gpu, model=model, tp=tp, dcp=dcp, workload=workload, assumptions=assume),
        x_range=x_range,
        at_max_range=speed_ratio_range(sens, configs[0], configs[1], top),
        consistent=consistent,
        held_out=held_out_by_set(sens, data, published_experiment, assume),
        held_out_error_pct=fit.loo_mean_abs_pct if fit.loo.height else 0.0,
        held_out_winners=winners_held_out(fit),
        **_bounded(sens, gpu, model, tp, dcp, assume, THROUGHPUT_CONTEXT, TPOT_TARGETS_MS),
        calibrated=calibrated_ranges(model_df, published),
        **{"gpu": gpu, "model": model, "tp": tp, "dcp": dcp},
        headroom_flags=tuple(flag_kinds(head)),
        published_contexts=tuple(published["context_tokens"].to_list()),
        **_measured(wb, workload, assume),
    )
    return replace(result, answer=Answer(words.answer(result)))


def _bounded(sens, gpu, model, tp, dcp, assume, context, tpots) -> dict:
    """What the bounded fits say beside the free fit's curves: the per-step costs per engine, the unexplained per-step
    cost as a share of batch time,
    their residual miss, the capacity-limited throughput at ``context`` per TPOT target (``tpots``, ms), and the memory
    constants the ceilings rest on with their effect at ``context``."""
    bounded = "phys_sglang_unexplained_ms" in sens.columns
    return {
        "step_costs": per_step_costs(sens) if bounded else {},
        "unexplained": unexplained_shares(sens, gpu, model, tp, dcp, base=assume) if bounded else {},
        "bounded_miss": bounded_miss(sens) if bounded else None,
        "capacity_limited": capacity_limited(
            sens, gpu, model, context, tuple(tpots), assume.default_mem_util, ((VLLM, 1), (SGLANG, dcp)), tp, assume
        )
        if bounded
        else pl.DataFrame(),
        "memory_constants": memory_constants(gpu, model, context, assume.default_mem_util, tp, dcp, assume),
    }


def _verdicts(fit, sens, claims, consistent, mem_utils, workload: Workload, assume: Assumptions, data) -> tuple:
    """The checks' verdicts: about the article's own configuration (Kimi-K3 on the fit's GPU, its crossover and
    memory check at 200K without DCP), whatever configuration the page shows; the checks that can fail read the data
    folder's published runs and engine logs."""
    head = headroom_table(fit.hardware, "Kimi-K3", sorted(set(mem_utils)), [1], [204800], assume)
    crossover = crossover_from_fit(fit, gpu=fit.hardware, workload=workload, assumptions=assume)
    ev = checks.evidence(fit, sens, head, crossover, consistent, data_dir=data)
    return tuple(checks.verdicts(ev, claims))


def _measured(wb, workload: Workload, assume: Assumptions) -> dict:
    """What the runs give: each run's share of the model's bound (runs the catalog lacks said and skipped), the
    per-step fits, and what the page read (its measured experiments and documents)."""
    bound_runs, missing = frames.catalogued(wb.runs)
    frac = achieved_fraction(bound_runs, workload, assume, sources=("published", "measured"))
    step, step_points = step_fits(wb.runs)
    src = wb.sources(frac, step)
    return {
        "fraction": frac,
        "bound_summary": bound_summary(frac),
        "step": step,
        "step_points": step_points,
        "not_catalogued": words.not_catalogued(missing),
        "experiments": src.measured,
        "documents": src.documents,
    }
