"""Report 07: capacity under load — per engine × context × memory setting the throughput–interactivity curve and
its Pareto front, the highest load within the SLO, where the KV pool fills and requests queue (telemetry sampled
during each run) against the ceiling the engine's KV pool implies, the goodput map, and the model's ceilings on the
reference host with their ranges. Its frames (``frames``), checks (``checks``), figures (``figures``), sentences
(``words``) and page sections (``page``) are this folder's own."""

from __future__ import annotations

from kvlab.probe import probe_summary
from kvlab.load import conditions_label
from kvlab.studies import AUTO, chosen_experiment
from kvlab.studies.capacity import checks, frames, words
from kvlab.studies.capacity.result import REPORT, CapacityResult
from kvlab.studies.result import Answer

__all__ = ["REPORT", "CapacityResult", "compute"]


def compute(
    wb,
    *,
    data_dir: str = "",
    measured_experiment: str = AUTO,
    slo_share: float = 0.9,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp_sizes: list = (1, 8),
    mem_utils: list = (0.92, 0.95),
    headroom_contexts: list = (65536, 131072, 204800),
    price_per_device_hour: float = 0.0,
) -> CapacityResult:
    measured_experiment = chosen_experiment(wb, measured_experiment, "cpu_capacity")
    trace_experiment = chosen_experiment(wb, AUTO, "cpu_trace")
    traffic = wb.measured(trace_experiment)
    workloads, trace_notes = frames.trace_workloads(wb.data, traffic)
    shape = frames.trace_shape(workloads)
    runs = wb.measured(measured_experiment)
    curve = frames.pareto_front(frames.load_curve(runs, slo_share))
    best = frames.highest_load_within_slo(curve)
    points = frames.capacity_points(curve, wb.telemetry, wb.telemetry_info)
    gmap = frames.goodput_map(best, probe := probe_summary(wb.probes(measured_experiment)))
    modelled = frames.modelled_ceilings(gpu, model, tp, tuple(dcp_sizes), tuple(mem_utils), tuple(headroom_contexts))
    throughput = frames.modelled_throughput(
        wb.data, gpu, model, tp, tuple(dcp_sizes), tuple(mem_utils), max(headroom_contexts)
    )
    telemetry = frames.telemetry_over_time(points, wb.telemetry)
    found = checks.capacity_verdicts(checks.Evidence(curve, points, gmap, modelled))
    queueing = checks.queue_count(points)
    src = wb.sources()
    return CapacityResult(
        answer=Answer(words.answer(found, queueing, modelled, curve.is_empty(), throughput)),
        verdicts=found,
        experiments=src.measured,
        documents=src.documents,
        runs=runs,
        curve=curve,
        best=best,
        points=points,
        onset=frames.saturation_onset(points),
        probe=probe,
        goodput_map=gmap,
        modelled=modelled,
        modelled_throughput=throughput,
        telemetry=telemetry,
        telemetry_series=frames.telemetry_series(telemetry),
        pareto_figure=None if curve.is_empty() else frames.pareto_figure_data(curve),
        ceiling_figure=None if curve.is_empty() else frames.ceiling_figure_data(points),
        queueing=queueing,
        measured_experiment=measured_experiment,
        load_conditions=conditions_label(runs),
        min_line_samples=frames.MIN_LINE_SAMPLES,
        slo_share=slo_share,
        search=frames.search_results(traffic, price_per_device_hour),
        search_path=frames.search_path(traffic),
        trace_shape=shape,
        trace_summary=frames.trace_summary(shape),
        trace_reuse=frames.trace_reuse(traffic, wb.requests if traffic.height else None, shape),
        trace_experiment=trace_experiment,
        trace_notes=tuple(trace_notes),
        price_per_device_hour=price_per_device_hour,
    )
