"""Report 02's typed result: every frame and value its page shows, declared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from kvlab.studies.measured_frames import PoolExcess
from kvlab.studies.result import StudyResult
from kvlab.studies.throughput_decay.frames import StatedRatio
from kvlab.verdicts import Verdict

REPORT = "02_throughput_decay"


@dataclass(frozen=True, kw_only=True)
class ThroughputDecayResult(StudyResult):
    """Report 02: how far each engine's throughput falls from 64K to 200K, the article's stated factors against its
    own table, and the same decay measured here."""

    report: ClassVar[str] = REPORT
    #: The article's table, its throughput relative to ``context_from`` and its decay factors.
    published: pl.DataFrame
    throughput_published: pl.DataFrame
    decay_published: pl.DataFrame
    #: Every stated ratio under every definition (analysis.consistency), one typed row per stated ratio (the list
    #: under Figure 2, which its caption counts), and the document's claims.
    check: pl.DataFrame
    stated: tuple[StatedRatio, ...]
    claims: pl.DataFrame
    measured_experiment: str
    mem_util: float
    context_from: str
    context_to: str
    #: Measured here (None where no run of ``measured_experiment`` exists): runs, throughput (each context named by
    #: its real tokens in ``context``), decay, the context scale and its contexts (label, tokens).
    measured: pl.DataFrame | None = None
    throughput_measured: pl.DataFrame | None = None
    decay_measured: pl.DataFrame | None = None
    scale_factor: float | None = None
    measured_contexts: tuple[tuple[str, int], ...] = ()
    #: Per engine and measured context: does the batch fit the KV pool at once (null: no pool recorded)?
    pool: pl.DataFrame | None = None
    pool_excesses: tuple[PoolExcess, ...] = ()

    def verdict(self, claim_id: str, evidence: str | None = None) -> Verdict | None:
        """The first verdict of ``claim_id`` (of ``evidence``, when given); None where the report has none."""
        return next((v for v in self.verdicts if v.claim_id == claim_id and evidence in (None, v.evidence)), None)

    def shape(self, evidence: str) -> Verdict | None:
        """The verdict of the claims' shared shape (a compound claim id) on ``evidence``."""
        return next((v for v in self.verdicts if "," in v.claim_id and v.evidence == evidence), None)
