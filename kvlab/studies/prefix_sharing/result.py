"""Report 05's typed result: every frame and value its page shows, declared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from kvlab.studies.prefix_sharing.frames import Threshold
from kvlab.studies.result import StudyResult

REPORT = "05_prefix_sharing"


@dataclass(frozen=True, kw_only=True)
class PrefixSharingResult(StudyResult):
    """Report 05: prefix sharing, radix tree (SGLang) against paged blocks (vLLM)."""

    report: ClassVar[str] = REPORT
    #: The design article's claims (every row of its claims table) and the ones this report tests.
    claims: pl.DataFrame
    prefix_claims: pl.DataFrame
    #: Per engine, cache setting and shared fraction: hit rate, TTFT, batch time (sharing_frames.prefix_sharing).
    sharing: pl.DataFrame
    #: Per engine, cache setting and fraction: which requests found the prefix cached (and among the first wave).
    reuse: pl.DataFrame
    #: Per engine and fraction: cache off ÷ on (TTFT, batch time) and the time saved.
    gain: pl.DataFrame
    #: Per engine, cache setting and turn of the multi-turn runs; every request behind it.
    by_turn: pl.DataFrame
    turn_requests: pl.DataFrame
    #: Modelled: the most a token-exact and a whole-block cache can reuse, by shared fraction.
    ideal: pl.DataFrame
    #: The measured figure's data; each engine's hit rate at the most shared fraction.
    sharing_figure: pl.DataFrame
    hits: pl.DataFrame
    #: The tables' rows: cache on beside off per point, what the cache buys per point, per turn.
    sharing_points: pl.DataFrame
    gain_points: pl.DataFrame
    turn_points: pl.DataFrame
    #: Cache on, vLLM's paged cache beside the radix engine (``radix_engine``) at each fraction both ran.
    radix_engine: str | None
    radix_pairs: pl.DataFrame
    #: Each engine's threshold test on its own saving curve.
    thresholds: dict[str, Threshold]
    engines: list[str]
    threshold: float
    min_gain: float
    block_tokens: int
    ideal_prompt_tokens: int
    ideal_requests: int
    sharing_experiment: str
    multi_turn_experiment: str

    def verdict(self, claim_id: str):
        """The verdict of ``claim_id`` (None where the report has none)."""
        return next((v for v in self.verdicts if v.claim_id == claim_id), None)
