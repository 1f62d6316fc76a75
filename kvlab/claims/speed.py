"""The model's held-out test as a verdict row (:func:`held_out_verdict`), which report 01's crossover check
(kvlab/studies/context_scaling/checks.py) and report 04's modelled claims (:mod:`kvlab.claims.modelled`) both show.
The relative-speed and crossover checks themselves moved to kvlab/studies/context_scaling/checks.py."""

from __future__ import annotations

from kvlab.claims.held_out import held_out_error, model_margin, winners_held_out


def held_out_verdict(grade, fit) -> object:
    """The model's held-out test as a verdict row of its own (red when it fails: rule 3 of kvlab.claims.grading)."""
    right, total = winners_held_out(fit)
    margin = model_margin(fit, sorted(fit.residuals["context_tokens"].unique().to_list())) or 0.0
    error = held_out_error(fit)
    return grade.verdict(
        f"Does kvlab's model pass its held-out test (each published point refitted from the other "
        f"{max(fit.loo.height - 1, 0)}: winner right in at least 3 of 4, margin above the mean held-out error)?",
        f"{right} of {total} winners right; margin {margin:.1%} against a {error:.1%} mean held-out error",
        claim_id="model_held_out",
        kind="model_held_out",
    )
