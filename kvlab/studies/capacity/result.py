"""Report 07's typed result: every frame and value its page shows, one declared field each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from kvlab.studies.capacity.checks import QueueCount
from kvlab.studies.result import StudyResult

REPORT = "07_capacity"


@dataclass(frozen=True, kw_only=True)
class CapacityResult(StudyResult):
    """Capacity under load: per engine x context x memory setting the load points and their Pareto front, the
    highest load within the SLO, each point against its concurrency ceiling with what telemetry saw, the goodput
    map, the accuracy probe, and the model's ceilings on the GPU host with their ranges."""

    report: ClassVar[str] = REPORT
    #: the measured experiment's runs (kvlab.workbook.Workbook.measured)
    runs: pl.DataFrame
    #: one row per load point: rates, SLO attainment, ``within_slo``, ``on_front`` (frames.load_curve, pareto_front)
    curve: pl.DataFrame
    #: per configuration: the highest load within the SLO and the goodput there (frames.highest_load_within_slo)
    best: pl.DataFrame
    #: each load point against its concurrency ceiling, with what telemetry saw (frames.capacity_points)
    points: pl.DataFrame
    #: per configuration: where queueing, KV saturation and preemption begin (frames.saturation_onset)
    onset: pl.DataFrame
    #: the accuracy probe per configuration (kvlab.probe.probe_summary)
    probe: pl.DataFrame
    #: per context x memory setting: both engines' goodput at their highest load within the SLO (frames.goodput_map)
    goodput_map: pl.DataFrame
    #: the model's ceilings on the GPU host, each with ``_lo``/``_hi`` over the assumption sets
    modelled: pl.DataFrame
    #: every telemetry sample of each load point (frames.telemetry_over_time) and one row per drawn series
    telemetry: pl.DataFrame
    telemetry_series: pl.DataFrame
    #: real traffic (issue 54), from the trace experiment: per load search its highest passing and first failing
    #: load, attainment there with its Wilson interval and n, goodput, cost and energy per output token, mechanism
    #: (frames.search_results); one row per probe in order (frames.search_path); the replayed trace's records
    #: (frames.trace_shape) and per trace its sums (frames.trace_summary); per engine and memory setting reusable
    #: against cached tokens (frames.trace_reuse). Empty where no search or trace run is stored.
    search: pl.DataFrame
    search_path: pl.DataFrame
    trace_shape: pl.DataFrame
    trace_summary: pl.DataFrame
    trace_reuse: pl.DataFrame
    #: the model's capacity-limited throughput on the GPU host at the longest context and its TPOT target, per DCP size
    #: and memory setting, each with ``_lo``/``_hi`` (frames.modelled_throughput; None in a result written before it)
    modelled_throughput: pl.DataFrame | None = None
    #: the CSVs beside the Pareto and ceiling figures (None: nothing measured)
    pareto_figure: pl.DataFrame | None = None
    ceiling_figure: pl.DataFrame | None = None
    #: the runs past their ceiling and how many queued (None: none had its queue sampled)
    queueing: QueueCount | None = None
    measured_experiment: str = "cpu_capacity"
    #: prompt form, loop phase and window of the TTFT shown (kvlab.load.conditions_label)
    load_conditions: str = ""
    min_line_samples: int = 3
    slo_share: float = 0.9
    trace_experiment: str = "cpu_trace"
    #: a trace replayed that cannot be read back as it ran (its file gone or changed)
    trace_notes: tuple[str, ...] = ()
    #: $ per device-hour the cost per token is priced at (0: none stated, no cost shown)
    price_per_device_hour: float = 0.0
