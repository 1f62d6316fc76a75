"""The calibrated model's held-out facts that the modelled grading rules read (:mod:`kvlab.claims.grading`,
rule 3): how many leave-one-out fits keep the published winner, the mean held-out error, and the model's margin
where a claim is decided."""

from __future__ import annotations

from kvlab.claims.grading import held_out_grade, modelled_claim
from kvlab.perfmodel.calibrate import held_out_winners
from kvlab.units import token_range


def winners_held_out(fit) -> tuple[int, int]:
    """Held-out fits that still name the published winner at their point's context: (right, held-out points
    that have another engine's published time at the same context); the model's own count
    (:func:`kvlab.perfmodel.calibrate.held_out_winners`, which the ranges per assumption set use too)."""
    return held_out_winners(fit)


def held_out_error(fit) -> float:
    """The model's mean absolute leave-one-out error, as a fraction (0.408 for 40.8%); 0 with nothing held out."""
    return fit.loo_mean_abs_pct / 100 if fit.loo.height else 0.0


def model_margin(fit, contexts) -> float | None:
    """The fitted model's smallest lead at ``contexts`` (tokens): min over them of slower ÷ faster modelled time
    − 1, from the fit's residual table (one modelled time per engine at each published context); None when no
    context holds two engines."""
    margins = []
    for c in contexts:
        times = sorted(r["modelled_s"] for r in fit.residuals.iter_rows(named=True) if r["context_tokens"] == c)
        if len(times) >= 2 and times[0] > 0:
            margins.append(times[-1] / times[0] - 1)
    return min(margins) if margins else None


def grade_model_claim(fit, agrees: bool, contexts, *, value: float | None = None, unit: str = ""):
    """Rule 3 on a fit: (the claim's grade, the held-out test's grade). ``agrees``: the fitted model says what the
    claim says; ``contexts``: where the claim is decided (its margin is the model's smallest lead there)."""
    right, total = winners_held_out(fit)
    margin, error = model_margin(fit, contexts) or 0.0, held_out_error(fit)
    return (
        modelled_claim(agrees, right, total, margin, error, value=value, unit=unit, n=fit.residuals.height),
        held_out_grade(right, total, margin, error),
    )


def consistent_phrase(consistent: dict | None) -> str:
    """The crossover range of the fits consistent with the published totals, for a verdict's number: '86,578–151,182
    tokens (85K–148K) over the 22 of 1,248 fits consistent with the published totals'; empty without them.
    ``consistent``: :func:`kvlab.perfmodel.report.consistent_summary`. Reports 01 and 04 both quote it, from the same
    summary, so the two pages give the same range."""
    if not consistent or not consistent.get("kept"):
        return ""
    kept, cands = consistent["kept"], consistent["candidates"]
    x = consistent.get("crossover")
    where = token_range(*x) if x else "no crossover"
    return f"{where} over the {kept:,} of {cands:,} fits consistent with the published totals"


def held_out_verdict(grade, fit) -> object:
    """The model's held-out test as a verdict row of its own (red when it fails: rule 3 of kvlab.claims.grading)."""
    right, total = winners_held_out(fit)
    margin = model_margin(fit, sorted(fit.residuals["context_tokens"].unique().to_list())) or 0.0
    error = held_out_error(fit)
    return grade.verdict(
        f"Does kvlab's model pass its held-out test (each published point refitted from the other "
        f"{max(fit.loo.height - 1, 0)}: winner right in at least 3 of 4, margin above the mean held-out error)?",
        f"{right} of {total} winners right; margin {margin:.0%} against a {error:.0%} mean held-out error",
        claim_id="model_held_out",
        kind="model_held_out",
    )
