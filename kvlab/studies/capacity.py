"""Report 07: capacity under load — per engine × context × memory setting the throughput–interactivity curve and
its Pareto front, the highest load within the SLO, where the KV pool fills and requests queue (telemetry sampled
during each run) against the ceiling the engine's KV pool implies, the goodput map, and the model's ceilings on the
reference host."""

from __future__ import annotations

from kvlab import analysis, narrative
from kvlab.claims.capacity import modelled_ceilings
from kvlab.load import conditions_label
from kvlab.studies import Answer, StudyResult, sourced

REPORT = "07_capacity"


def compute(wb, *, data_dir: str = "", measured_experiment: str = "cpu_capacity", slo_share: float = 0.9,
            gpu: str = "B300", model: str = "Kimi-K3", tp: int = 8, dcp_sizes: list = (1, 8),
            mem_utils: list = (0.92, 0.95), headroom_contexts: list = (65536, 131072, 204800)) -> StudyResult:
    runs = wb.measured(measured_experiment)
    curve = analysis.pareto_front(analysis.load_curve(runs, slo_share))
    best = analysis.highest_load_within_slo(curve)
    points = analysis.capacity_points(curve, wb.telemetry, wb.telemetry_info)
    onset = analysis.saturation_onset(points)
    probe = analysis.probe_summary(wb.probes(measured_experiment))
    gmap = analysis.goodput_map(best, probe)
    modelled = modelled_ceilings(gpu, model, tp, tuple(dcp_sizes), tuple(mem_utils), tuple(headroom_contexts))
    frames = {"runs": runs, "curve": curve, "best": best, "points": points, "onset": onset, "probe": probe,
              "map": gmap, "modelled": modelled}
    if not curve.is_empty():
        frames |= {"pareto_figure": analysis.pareto_figure_data(curve),
                   "ceiling_figure": analysis.ceiling_figure_data(points)}
    found = narrative.capacity_verdicts(curve, points, gmap, modelled)
    answer = Answer(narrative.capacity_answer(found, curve.is_empty()))
    params = {"measured_experiment": measured_experiment, "slo_share": slo_share, "gpu": gpu, "model": model,
              "tp": tp, "dcp_sizes": list(dcp_sizes), "mem_utils": list(mem_utils)}
    values = {"measured_experiment": measured_experiment,
              "load_conditions": conditions_label(runs)}  # prompt form, loop phase, window of the TTFT shown
    return sourced(REPORT, wb, answer, found, frames, values, params)
