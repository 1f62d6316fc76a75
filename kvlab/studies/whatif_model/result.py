"""Report 04's typed result: every frame and value its page shows, one declared field each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from kvlab.perfmodel.calibrate import Fit
from kvlab.perfmodel.ranges import EngineStepCost, HeldOutBySet, Span, UnexplainedShare
from kvlab.perfmodel.roofline import Assumptions, Workload
from kvlab.studies.result import StudyResult

REPORT = "04_whatif_model"


@dataclass(frozen=True)
class Consistent:
    """What the fits consistent with the published totals share (:func:`kvlab.perfmodel.report.consistent_summary`,
    typed): candidates, how many the rule keeps, its tolerance, their batch sizes, per context the winners and how
    many fits name each, their crossover range (None: none crosses) and the candidates over peak (excluded)."""

    candidates: int
    kept: int
    tolerance_pct: float
    batches: str
    winners: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]
    crossover: tuple[float, float] | None
    #: candidates that need prefill or bandwidth above 100% of peak: never kept
    over_peak: int = 0

    def as_dict(self) -> dict:
        """The summary as :mod:`kvlab.claims.held_out` reads it (``consistent_phrase``)."""
        return {
            "candidates": self.candidates,
            "kept": self.kept,
            "tolerance_pct": self.tolerance_pct,
            "batches": self.batches,
            "winners": [(c, list(w)) for c, w in self.winners],
            "crossover": self.crossover,
            "over_peak": self.over_peak,
        }


@dataclass(frozen=True, kw_only=True)
class WhatifModelResult(StudyResult):
    """The physical model of long-context serving: its calibration on the article's table, its held-out test, the
    crossover over every assumption set the article leaves open, KV headroom and the bound each run reached."""

    report: ClassVar[str] = REPORT
    #: the article's published rows (the points fitted) and its claims
    published: pl.DataFrame
    claims: pl.DataFrame
    #: one row per published point: published, fitted and held-out times with their errors (frames.calibration)
    calibration: pl.DataFrame
    #: the free fit and the physics-only fit side by side (kvlab.perfmodel.calibrate.fits_frame)
    fits: pl.DataFrame
    #: one refit per assumption set (kvlab.perfmodel.calibrate.crossover_range), as computed and as tabled
    sensitivity: pl.DataFrame
    sensitivity_shown: pl.DataFrame
    #: the sets grouped by batch size: crossover range, winners at 200K, held-out error range (frames.by_batch)
    sensitivity_by_batch: pl.DataFrame
    #: every candidate fit with ``consistent`` (kvlab.perfmodel.calibrate.consistent_fits), and the kept ones tabled
    consistent_fits: pl.DataFrame
    consistent_fits_shown: pl.DataFrame
    #: modelled batch time per configuration x context, each with its ``_lo``/``_hi`` over the sets
    curves: pl.DataFrame
    #: the curves at the largest context drawn
    at_max: pl.DataFrame
    #: crossover by GPU and DCP size, with its range over the sets; and as tabled (whole K)
    crossovers: pl.DataFrame
    crossovers_shown: pl.DataFrame
    #: KV headroom per memory target x DCP size x context, with ranges; its summary table
    headroom: pl.DataFrame
    headroom_summary: pl.DataFrame
    #: each run's share of the model's bound, and its summary by source and engine
    fraction: pl.DataFrame
    bound_summary: pl.DataFrame
    #: per-step fits from measured runs and their points (empty where no configuration has three contexts)
    step: pl.DataFrame
    step_points: pl.DataFrame
    #: the free fit at the default assumptions, and the physics-only fit
    fit: Fit
    phys: Fit
    workload: Workload
    assumptions: Assumptions
    #: the free fit's crossover at the default assumptions (tokens; None: no crossing) and its range over the sets
    crossover: float | None
    x_range: tuple[float, float] | None
    #: vLLM's batch time over SGLang's at the largest context, lowest and highest over the sets
    at_max_range: tuple[float, float] | None
    consistent: Consistent
    held_out: HeldOutBySet
    #: the mean absolute held-out error (percent) at the default assumptions: the one value every "40%" prints
    held_out_error_pct: float
    #: (right, held out) winners of the leave-one-out fits at the default assumptions
    held_out_winners: tuple[int, int]
    #: per engine, the per-step overhead and the unexplained per-step cost over the sets (ms)
    step_costs: dict[str, EngineStepCost]
    #: per engine, the unexplained per-step cost as a share of the modelled batch time (bounded fits), and the bounded
    #: fits' largest residual against the table (%), over the sets
    unexplained: dict[str, UnexplainedShare]
    bounded_miss: Span | None
    #: capacity-limited throughput per configuration and TPOT target (kvlab.perfmodel.throughput.capacity_limited)
    capacity_limited: pl.DataFrame
    #: the memory constants the ceilings rest on, each value with its source and the ceiling under it
    memory_constants: pl.DataFrame
    #: per curve, the published contexts the fit rests on
    calibrated: dict[str, tuple[int, int]]
    gpu: str
    model: str
    tp: int
    dcp: int
    #: what the model's catalog lacks, said on the page ('' where nothing is)
    not_catalogued: str = ""
    #: the kinds of cross the headroom figure draws (kvlab.perfmodel.figures.flag_kinds)
    headroom_flags: tuple[str, ...] = ()
    published_contexts: tuple[int, ...] = ()
