"""kvlab's claims layer: what evidence can decide a claim (:mod:`kvlab.claims.grading`, the rules) and the
model's held-out facts and verdict (:mod:`kvlab.claims.held_out`), the cache-share grading two studies read
(:mod:`kvlab.claims.prefix`) and the documents' mechanism, operations and set-up claims (:mod:`kvlab.claims.documents`).
Each study's own checks are in ``kvlab/studies/<study>/checks.py``, one checker per claim kind; its words module words
the verdicts; the outcomes, values, n, spread, scope and reason come from the grading rules here."""

from kvlab.claims.grading import (
    ILLUSTRATION_SCOPE,
    LOO_WINNERS_SHARE,
    MIN_REPEATS,
    MODEL_SCOPE,
    Grade,
    Repeats,
    combined,
    configured,
    cpu_cross_engine,
    engine_difference,
    finding,
    held_out_gate,
    held_out_grade,
    held_out_passes,
    implementations_differ,
    measured_difference,
    model_factor_decides,
    modelled_claim,
    negated,
    counted,
    on_cpu,
    winners_needed,
)
from kvlab.claims.documents import graded as document_claim_verdicts
from kvlab.claims.prefix import cache_shares
from kvlab.claims.held_out import grade_model_claim, held_out_error, model_margin, winners_held_out

__all__ = [
    "ILLUSTRATION_SCOPE",
    "cache_shares",
    "LOO_WINNERS_SHARE",
    "MIN_REPEATS",
    "MODEL_SCOPE",
    "Grade",
    "Repeats",
    "combined",
    "configured",
    "finding",
    "held_out_gate",
    "counted",
    "cpu_cross_engine",
    "document_claim_verdicts",
    "engine_difference",
    "grade_model_claim",
    "held_out_error",
    "held_out_grade",
    "held_out_passes",
    "implementations_differ",
    "measured_difference",
    "model_factor_decides",
    "model_margin",
    "modelled_claim",
    "negated",
    "on_cpu",
    "winners_held_out",
    "winners_needed",
]
