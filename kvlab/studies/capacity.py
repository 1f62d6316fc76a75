"""Report 07: capacity under load — per engine × context × memory setting the throughput–interactivity curve and
its Pareto front, the highest load within the SLO, where the KV pool fills and requests queue (telemetry sampled
during each run) against the ceiling the engine's KV pool implies, the goodput map, and the model's ceilings on the
reference host."""

from __future__ import annotations

import polars as pl

from kvlab import analysis, narrative
from kvlab.claims.capacity import modelled_ceilings
from kvlab.load import conditions_label
from kvlab.studies import Answer, StudyResult, sourced

REPORT = "07_capacity"

#: The gauges the telemetry-over-time figure draws, in its panels' order.
TELEMETRY_SERIES = ("kv_cache_usage", "requests_running", "requests_waiting")
#: A run's series with fewer samples than this is drawn as dots, not as a line.
MIN_LINE_SAMPLES = 3


def telemetry_over_time(points: pl.DataFrame, samples: pl.DataFrame) -> pl.DataFrame:
    """Every answered telemetry sample of each load point of ``points`` (analysis.capacity_points), one row per
    sample on the requests' time origin: the configuration (analysis.CAPACITY_KEYS), ``load_level``, ``run_id``,
    ``t_s``, the gauges of :data:`TELEMETRY_SERIES` (null where the server did not export one), ``samples`` (the
    run's answered samples) and ``line`` (samples >= :data:`MIN_LINE_SAMPLES`: drawn as a line, else as dots).
    A load point without a sample adds no row."""
    keys = [*analysis.CAPACITY_KEYS, "load_level", "run_id"]
    ok = samples.filter(pl.col("error").is_null()) if "error" in samples.columns else samples
    ok = ok.with_columns(pl.lit(None, dtype=pl.Float64).alias(c) for c in TELEMETRY_SERIES if c not in ok.columns)
    out = (
        points.select(keys)
        .join(ok.select("run_id", "t_s", *TELEMETRY_SERIES), on="run_id", how="inner")
        .with_columns(pl.len().over("run_id").alias("samples"))
        .with_columns((pl.col("samples") >= MIN_LINE_SAMPLES).alias("line"))
    )
    return out.sort("context_tokens", "mem_util", "engine", "load_level", "run_id", "t_s", nulls_last=True)


def compute(
    wb,
    *,
    data_dir: str = "",
    measured_experiment: str = "cpu_capacity",
    slo_share: float = 0.9,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp_sizes: list = (1, 8),
    mem_utils: list = (0.92, 0.95),
    headroom_contexts: list = (65536, 131072, 204800),
) -> StudyResult:
    runs = wb.measured(measured_experiment)
    curve = analysis.pareto_front(analysis.load_curve(runs, slo_share))
    best = analysis.highest_load_within_slo(curve)
    points = analysis.capacity_points(curve, wb.telemetry, wb.telemetry_info)
    onset = analysis.saturation_onset(points)
    probe = analysis.probe_summary(wb.probes(measured_experiment))
    gmap = analysis.goodput_map(best, probe)
    modelled = modelled_ceilings(gpu, model, tp, tuple(dcp_sizes), tuple(mem_utils), tuple(headroom_contexts))
    telemetry = telemetry_over_time(points, wb.telemetry)
    frames = {
        "runs": runs,
        "curve": curve,
        "best": best,
        "points": points,
        "onset": onset,
        "probe": probe,
        "map": gmap,
        "modelled": modelled,
        "telemetry": telemetry,
        "telemetry_series": telemetry.unique("run_id", maintain_order=True).select(
            *analysis.CAPACITY_KEYS, "load_level", "run_id", "samples", "line"
        ),
    }
    if not curve.is_empty():
        frames |= {
            "pareto_figure": analysis.pareto_figure_data(curve),
            "ceiling_figure": analysis.ceiling_figure_data(points),
        }
    found = narrative.capacity_verdicts(curve, points, gmap, modelled)
    answer = Answer(narrative.capacity_answer(found, curve.is_empty()))
    values = {
        "measured_experiment": measured_experiment,
        "load_conditions": conditions_label(runs),  # prompt form, loop phase, window of the TTFT shown
        "min_line_samples": MIN_LINE_SAMPLES,
    }
    return sourced(REPORT, wb, answer, found, frames, values)
