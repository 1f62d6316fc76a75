"""The model in the common results schema: modelled rows (source = modelled) and the fraction of the bound each run achieved."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import polars as pl

from kvlab.schema import ok_batch_times
from kvlab.engines import SGLANG, VLLM
from kvlab.catalog import model as find_model, row_gpu
from kvlab.perfmodel.roofline import (
    BOUND,
    Assumptions,
    Config,
    Params,
    Prediction,
    Workload,
    batch_time,
    prefill_time_s,
)
from kvlab.schema import RUNS
from kvlab.units import context_label

CITATION = "kvlab.perfmodel (roofline model; data/catalog)"


def usable_rows(runs: pl.DataFrame, sources) -> pl.DataFrame:
    """Finished rows with a batch time from the given sources: what the model is fitted to and compared with."""
    return ok_batch_times(runs).filter(pl.col("source").is_in(list(sources)))


def row_config(row: Mapping, a: Assumptions = Assumptions()) -> Config:
    """The configuration a results row describes (its catalog entry from its typed device: ``device_kind``,
    ``accelerator``); unstated TP and memory target come from ``a``."""
    g = row_gpu(row)
    m = find_model(row["model"])
    is_cpu = g.gpu == "CPU"
    tp = row.get("tp") or (1 if is_cpu else (row.get("gpu_count") or a.published_tp))
    mem_util = None if is_cpu else (row.get("mem_util") or a.default_mem_util)
    return Config(g, m, row["engine"], int(tp), int(row.get("dcp") or 1), mem_util)


def row_workload(row: Mapping, w: Workload = Workload()) -> Workload:
    """The row's batch size and output length where it states them, else the assumed ones."""
    return Workload(int(row.get("batch_size") or w.batch_size), int(row.get("output_tokens") or w.output_tokens))


def row_context(row: Mapping) -> int:
    """A row's context: prompt + output tokens (kvlab's one definition, :class:`~kvlab.perfmodel.roofline.Workload`)."""
    return int(row["context_tokens"])


def _notes(pred: Prediction, p: Params, a: Assumptions, extra: str = "") -> str:
    w = pred.workload
    parts = [
        f"assumed batch_size={w.batch_size} output_tokens={w.output_tokens}",
        "params " + ", ".join(f"{k}={v:.4g}" for k, v in p.as_dict().items()),
        f"tp_allreduce_latency_s={a.tp_allreduce_latency_s:g}",
        f"waves={pred.waves}",
        f"memory: {pred.memory.reason}",
    ]
    if a.kv_layers is not None:
        parts.append(f"kv_layers={a.kv_layers}")
    if extra:
        parts.append(extra)
    return "; ".join(parts)


def prediction_row(
    pred: Prediction, experiment: str, p: Params, a: Assumptions, run_id: str | None = None, notes: str = ""
) -> dict:
    cfg = pred.config
    is_cpu = cfg.gpu.gpu == "CPU"
    label = context_label(pred.context_tokens)
    util = "" if cfg.mem_util is None else f"-u{cfg.mem_util:g}"
    return {
        "source": "modelled",
        "experiment": experiment,
        "run_id": run_id or f"{experiment}-{label}-{cfg.engine}-tp{cfg.tp}-dcp{cfg.dcp}{util}",
        "hardware": cfg.gpu.name,
        "gpu_count": None if is_cpu else cfg.tp,
        "device_kind": "cpu" if is_cpu else "gpu",
        "accelerator": None if is_cpu else cfg.gpu.name,
        "model": cfg.model.model,
        "engine": cfg.engine,
        "tp": cfg.tp,
        "dcp": cfg.dcp,
        "mem_util": cfg.mem_util,
        "context_label": label,
        "context_tokens": pred.context_tokens,
        "scale_factor": 1.0,
        "mode": "fixed_batch",
        "batch_size": pred.workload.batch_size,
        "prompt_tokens": pred.context_tokens - pred.workload.output_tokens,
        "output_tokens": pred.workload.output_tokens,
        "repeat": 0,
        "attempts": 1,
        "status": "ok" if pred.fits else "failed",
        "failure_cause": None if pred.fits else f"modelled: {pred.memory.reason}",
        "batch_time_s": pred.batch_time_s,
        "prefill_time_s": pred.prefill_s,
        "decode_time_s": pred.decode_s,
        "citation": CITATION,
        "notes": _notes(pred, p, a, notes),
    }


def predict_frame(
    gpu: str = "B300",
    model: str = "Kimi-K3",
    configs: Iterable[tuple[str, int, int]] = ((VLLM, 8, 1), (SGLANG, 8, 8)),
    contexts: Iterable[int] = (65536, 204800),
    workload: Workload = Workload(),
    params: Params = Params(),
    assumptions: Assumptions = Assumptions(),
    mem_util: float | None = 0.92,
    experiment: str = "model_b300",
) -> pl.DataFrame:
    """Modelled rows (RUNS schema, source = modelled) for every (engine, tp, dcp) x context."""
    rows = []
    for engine, tp, dcp in configs:
        cfg = Config.of(gpu, model, engine, tp, dcp, mem_util)
        for c in contexts:
            rows.append(
                prediction_row(batch_time(cfg, int(c), workload, params, assumptions), experiment, params, assumptions)
            )
    return RUNS.conform(pl.DataFrame(rows, infer_schema_length=None), origin=f"modelled {experiment}")


def predict_like(
    runs: pl.DataFrame,
    params: Params | Mapping[str, Params] = Params(),
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
    experiment: str | None = None,
) -> pl.DataFrame:
    """One modelled row mirroring each row of ``runs`` (same configuration, context and stated workload).

    ``params`` may map a catalog GPU key to its fitted :class:`Params`. ``run_id`` is kept, so a join on it
    pairs each observation with its prediction; ``experiment`` defaults to ``model_<experiment>``.
    """
    rows = []
    for r in runs.iter_rows(named=True):
        cfg = row_config(r, assumptions)
        p = params.get(cfg.gpu.gpu, Params()) if isinstance(params, Mapping) else params
        pred = batch_time(cfg, row_context(r), row_workload(r, workload), p, assumptions)
        exp = experiment or f"model_{r['experiment']}"
        rows.append(prediction_row(pred, exp, p, assumptions, run_id=r["run_id"], notes=f"mirrors {r['source']} row"))
    if not rows:
        return RUNS.empty()
    return RUNS.conform(pl.DataFrame(rows, infer_schema_length=None), origin="modelled (predict_like)")


def achieved_fraction(
    runs: pl.DataFrame,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
    sources: tuple[str, ...] = ("measured",),
) -> pl.DataFrame:
    """How close each run came to the model's bound (peak compute, peak bandwidth, no latency).

    Columns: ``bound_batch_time_s`` and ``batch_fraction_of_bound`` (bound / observed batch time);
    ``decode_read_bytes_per_gpu`` (weights + KV + state read per GPU over a decode step at the mean
    context); ``effective_read_bytes_per_s`` — from the mean TPOT when the row has it (basis 'tpot'),
    else from the batch time less the bound prefill, spread over the output steps (basis 'batch_time',
    an upper bound on the decode time, so a lower bound on bandwidth); ``peak_bandwidth_bytes_per_s``
    and ``bandwidth_fraction_of_peak``. Rows without a batch time, or failed, are skipped.
    """
    rows = []
    for r in usable_rows(runs, sources).iter_rows(named=True):
        cfg = row_config(r, assumptions)
        w = row_workload(r, workload)
        ctx = row_context(r)
        bound = batch_time(cfg, ctx, w, BOUND, replace(assumptions, tp_allreduce_latency_s=0.0))
        step = bound.step_first
        steps = w.output_tokens * bound.waves
        if r.get("tpot_mean_ms"):
            basis, decode_step_s = "tpot", r["tpot_mean_ms"] / 1000
        else:
            decode_s = r["batch_time_s"] - prefill_time_s(cfg, ctx, w.batch_size, BOUND)
            basis, decode_step_s = "batch_time", (decode_s / steps if decode_s > 0 else None)
        eff = step.read_bytes / decode_step_s if decode_step_s else None
        peak = cfg.gpu.mem_bandwidth_bytes_per_s
        rows.append(
            {
                "source": r["source"],
                "experiment": r["experiment"],
                "run_id": r["run_id"],
                "hardware": r["hardware"],
                "engine": r["engine"],
                "tp": cfg.tp,
                "dcp": cfg.dcp,
                "context_tokens": r["context_tokens"],
                "batch_size": w.batch_size,
                "output_tokens": w.output_tokens,
                "batch_time_s": r["batch_time_s"],
                "bound_batch_time_s": bound.batch_time_s,
                "batch_fraction_of_bound": bound.batch_time_s / r["batch_time_s"],
                "decode_read_bytes_per_gpu": step.read_bytes,
                "basis": basis,
                "effective_read_bytes_per_s": eff,
                "peak_bandwidth_bytes_per_s": peak,
                "bandwidth_fraction_of_peak": eff / peak if eff else None,
            }
        )
    schema = {
        "source": pl.String, "experiment": pl.String, "run_id": pl.String, "hardware": pl.String,
        "engine": pl.String, "tp": pl.Int64, "dcp": pl.Int64, "context_tokens": pl.Int64,
        "batch_size": pl.Int64, "output_tokens": pl.Int64, "batch_time_s": pl.Float64,
        "bound_batch_time_s": pl.Float64, "batch_fraction_of_bound": pl.Float64,
        "decode_read_bytes_per_gpu": pl.Float64, "basis": pl.String, "effective_read_bytes_per_s": pl.Float64,
        "peak_bandwidth_bytes_per_s": pl.Float64, "bandwidth_fraction_of_peak": pl.Float64,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)
