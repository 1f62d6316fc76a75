"""Report 01's typed result: every frame and value its page shows, declared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from kvlab.studies.measured_frames import Crossover
from kvlab.studies.context_scaling.frames import ModelCrossover
from kvlab.studies.measured_frames import PoolExcess
from kvlab.studies.result import StudyResult
from kvlab.verdicts import Verdict

REPORT = "01_context_scaling"


@dataclass(frozen=True, kw_only=True)
class ContextScalingResult(StudyResult):
    """Report 01: 64K vs 200K — which engine finishes a fixed batch first, published, modelled and measured."""

    report: ClassVar[str] = REPORT
    #: The article's table (RUNS rows), its mean batch times and its relative speed per context.
    published: pl.DataFrame
    published_means: pl.DataFrame
    relative: pl.DataFrame
    #: Per answer context: vLLM ÷ SGLang batch time over every assumption set of ``sensitivity``.
    modelled_ratios: pl.DataFrame
    sensitivity: pl.DataFrame
    #: Where the winner changes: the table interpolated (one per method) and the model (always with its range).
    estimates: tuple[Crossover, ...]
    model: ModelCrossover
    #: The relative-speed claim at each context label ({'64K': 'speedup_64K'}): which verdict a sentence asks.
    speed_claims: dict[str, str]
    #: Measured here (None where no run of ``measured_experiment`` exists): the two engines' runs, their means (each
    #: context named by its real tokens in ``context``), relative speed, growth and decay, and the crossovers.
    measured_experiment: str
    mem_util: float
    measured_engine_a: str
    measured_engine_b: str
    engine_a: str
    engine_b: str
    measured: pl.DataFrame | None = None
    measured_means: pl.DataFrame | None = None
    measured_relative: pl.DataFrame | None = None
    growth: pl.DataFrame | None = None
    decay_measured: pl.DataFrame | None = None
    decay_published: pl.DataFrame | None = None
    x_measured: tuple[Crossover, ...] = ()
    scale_factor: float | None = None
    #: Per engine and measured context: does the batch fit the KV pool at once (null: no pool recorded)?
    pool: pl.DataFrame | None = None
    #: Where it did not: the growth and speed-up there is the pool's waiting, not the engine's scaling.
    pool_excesses: tuple[PoolExcess, ...] = ()

    def verdict(self, claim_id: str, evidence: str | None = None) -> Verdict | None:
        """The first verdict of ``claim_id`` (of ``evidence``, when given); None where the report has none."""
        return next((v for v in self.verdicts if v.claim_id == claim_id and evidence in (None, v.evidence)), None)

    def speed_verdict(self, evidence: str):
        """A function: context label -> the verdict (of ``evidence``) of the speed claim at that context."""
        return lambda label: self.verdict(self.speed_claims.get(label, ""), evidence)
