"""Report 06's typed result: every frame and value its page shows, declared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from kvlab.guide import Evidence, Factor, Recommendation, UserWorkload
from kvlab.studies.result import StudyResult

REPORT = "06_engine_choice"


@dataclass(frozen=True, kw_only=True)
class EngineChoiceResult(StudyResult):
    """Report 06: the article's decision tree for the workload asked (by default the reference host's question:
    Kimi-K3 on 8× B300 at 64K–200K tokens) and its three examples, beside what the data can decide."""

    report: ClassVar[str] = REPORT
    #: The design article's claims, and the rows citing its decision tree.
    claims: pl.DataFrame
    tree_claims: pl.DataFrame
    #: Measured: prefix sharing per engine, cache setting and fraction; concurrency per engine and load.
    sharing: pl.DataFrame
    concurrency: pl.DataFrame
    sharing_by_engine: pl.DataFrame
    concurrency_by_in_flight: pl.DataFrame
    #: Modelled: batch time of vLLM TP and SGLang TP+DCP against context (bands over the assumption sets), and at the
    #: contexts asked (``question_points``, with their bands).
    curves: pl.DataFrame
    question_points: pl.DataFrame
    #: The workload asked beside the article's three examples: tree inputs, the tree's answer, its path.
    examples: pl.DataFrame
    workload: UserWorkload
    tree: Recommendation
    evidence: Evidence
    #: The modelled context factor at each context asked (the low end, then ``workload.context_tokens``).
    context_factors: list[Factor]
    #: The modelled crossover under the default assumptions, and its range over the assumption sets (tokens).
    x_model: float | None
    x_range: tuple[float, float] | None
    #: the model fit the modelled factors rest on: its kind ('free', 'uncalibrated' for a model the article did not
    #: measure: the priors' centre) and the catalog model it is for
    fit_kind: str = ""
    fit_model: str = ""
    engines: list[str]
    sharing_experiments: list[str]
    concurrency_experiments: list[str]
    published_experiment: str
    context_low_tokens: int
    #: How the page names the workload asked ('Kimi-K3 on 8× B300, 64K–200K tokens, …').
    asked: str

    def verdict(self, claim_id: str):
        """The verdict of ``claim_id`` (None where the report has none)."""
        return next((v for v in self.verdicts if v.claim_id == claim_id), None)
