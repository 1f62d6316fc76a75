"""Report 04: the physical (roofline) model of long-context serving — its calibration on the article's table, its
held-out test, the crossover over every assumption set the article leaves open, KV headroom and the bound each run
reached. The model fails its held-out test at the default assumptions, so everything here illustrates."""

from __future__ import annotations

import polars as pl

from kvlab import narrative
from kvlab.perfmodel import Assumptions, Config, Workload, achieved_fraction, published_fit
from kvlab.perfmodel.catalog import model as find_model
from kvlab.perfmodel.catalog import row_gpu
from kvlab.perfmodel.calibrate import (
    consistent_fits,
    crossover_from_fit,
    crossover_range,
    fits_frame,
    speed_ratio_range,
)
from kvlab.perfmodel.figures import (
    bound_summary,
    calibrated_ranges,
    context_grid,
    flag_kinds,
    crossover_table,
    as_shown,
    curves,
    headroom_summary,
    headroom_table,
    published_throughput,
)
from kvlab.perfmodel.report import consistent_summary
from kvlab.perfmodel.ranges import held_out_by_set
from kvlab.perfmodel.stepfit import step_fits
from kvlab.engines import SGLANG, VLLM
from kvlab.studies import Answer, StudyResult, sourced

REPORT = "04_whatif_model"


def catalogued(
    runs: pl.DataFrame, sources: tuple[str, ...] = ("published", "measured")
) -> tuple[pl.DataFrame, dict[str, set[str]]]:
    """The rows of ``runs`` whose model and hardware the catalog has (``data/catalog``: what the model's bound needs),
    and what it lacks -> the experiments that lack it (empty where nothing is missing): the report shows their
    measured parts and says their modelled part is skipped (:func:`kvlab.narrative.not_catalogued_note`), instead of
    failing on the catalog's KeyError."""
    known: dict[tuple, str | None] = {}  # (what, name, device) -> None where catalogued, else what is missing
    keep, missing = [], {}
    device = [c for c in ("device_kind", "accelerator") if c in runs.columns]
    for r in runs.select("source", "experiment", "model", "hardware", *device).iter_rows(named=True):
        why = None
        if r["source"] in sources:
            # the hardware by its typed device (kvlab.device), named by its label for the reader
            for what, name, find in (
                ("model", r["model"], find_model),
                ("hardware", r["hardware"], lambda _, row=r: row_gpu(row)),
            ):
                if name is None:
                    continue
                seen = (what, name, r.get("device_kind"), r.get("accelerator"))
                if seen not in known:
                    try:
                        find(name)
                        known[seen] = None
                    except KeyError:
                        known[seen] = f"{what} `{name}`"
                why = why or known[seen]
        keep.append(why is None)
        if why is not None:
            missing.setdefault(why, set()).add(r["experiment"])
    return (runs.filter(keep) if missing else runs), missing


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
) -> StudyResult:
    data, runs = wb.data, wb.runs
    workload = Workload(batch_size=batch_size, output_tokens=output_tokens)
    assume = Assumptions(kv_layers=kv_layers or None)
    contexts = context_grid(max_context, points=curve_points)
    configs = [
        Config.of(gpu, model, VLLM, tp, 1, assume.default_mem_util),
        Config.of(gpu, model, SGLANG, tp, dcp, assume.default_mem_util),
    ]
    published = published_throughput(wb.published(published_experiment), workload)
    claims = wb.claims(published_experiment)
    fit = published_fit(data, workload, assume, published_experiment)
    phys = published_fit(data, workload, assume, published_experiment, physics=True)
    sens, x_range = crossover_range(
        data,
        assume,
        published_experiment,
        [Workload(b, n) for b in sensitivity_batches for n in sensitivity_outputs],
        gpu=gpu,
        model=model,
        tp=tp,
        dcp=dcp,
        physics=True,
    )
    cons = consistent_fits(sens, data, published_experiment, gpu=gpu, model=model, tp=tp, dcp=dcp, base=assume)
    model_df = curves(configs, contexts, workload, fit.params, assume, sens=sens)
    crossover = crossover_from_fit(fit, gpu=gpu, model=model, tp=tp, dcp=dcp, workload=workload, assumptions=assume)
    at_max = model_df.filter(pl.col("context_tokens") == max(contexts)).sort("engine")
    at_max_range = speed_ratio_range(sens, configs[0], configs[1], max(contexts))
    xo = crossover_table(
        list(gpus), model, list(dcp_sizes), workload, fit.params, assume, tp=tp, max_tokens=max_context, sens=sens
    )
    head = headroom_table(gpu, model, list(mem_utils), sorted({1, dcp}), list(headroom_contexts), assume, tp=tp)
    bound_runs, missing = catalogued(runs)  # a model or GPU the catalog lacks: said, skipped
    frac = achieved_fraction(bound_runs, workload, assume, sources=("published", "measured"))
    step, step_points = step_fits(runs)
    frames = {
        "published": published,
        "claims": claims,
        "residuals": fit.residuals.sort("context_tokens", "engine"),
        "loo": fit.loo.sort("context_tokens", "engine"),
        "fits": fits_frame(fit, phys, workload=workload, assumptions=assume),
        "sensitivity": sens,
        # the tables' frames: each modelled crossover in whole K, as every sentence gives it (issue 39)
        "sensitivity_shown": as_shown(sens),
        "consistent_fits": cons,
        "curves": model_df,
        "consistent_fits_shown": as_shown(cons.filter(pl.col("consistent")).sort("max_abs_residual_pct")),
        "published_throughput": published_throughput(published, workload, sens),
        "at_max": at_max,
        "crossovers": xo,
        "crossovers_shown": as_shown(xo),
        "headroom": head,
        "headroom_summary": headroom_summary(head),
        "fraction": frac,
        "bound_summary": bound_summary(frac),
        "step": step,
        "step_points": step_points,
    }
    consistent = consistent_summary(cons)
    values = {
        "fit": fit,
        "phys": phys,
        "workload": workload,
        "assumptions": assume,
        "contexts": contexts,
        "configs": configs,
        "x_range": x_range,
        "calibrated": calibrated_ranges(model_df, published),
        "crossover": crossover,
        "at_max_range": at_max_range,
        "consistent": consistent,
        "held_out": held_out_by_set(sens, data, published_experiment, assume),
        "tokens_per_batch": (
            int((sens["batch_size"] * sens["output_tokens"]).min()),
            int((sens["batch_size"] * sens["output_tokens"]).max()),
        ),
        "gpu": gpu,
        "model": model,
        "tp": tp,
        "dcp": dcp,
        "not_catalogued": narrative.not_catalogued_note(missing),
        "headroom_flags": flag_kinds(head),
        "published_contexts": published["context_tokens"].to_list(),
        "crossovers_found": bool(xo["crossover_tokens"].is_not_null().any()),
    }
    found = narrative.model_verdicts(fit, sens, head, claims, workload, assume, consistent=consistent)
    answer = Answer(narrative.model_answer(fit, x_range, sens.height, model, gpu, tp, values["held_out"]))
    return sourced(REPORT, wb, answer, found, frames, values, read=(frac, step))
