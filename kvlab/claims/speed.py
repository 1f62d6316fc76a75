"""Relative-speed and crossover claims (report 01): each stated speed-up against the document's own table and,
where measured runs exist at the same (scaled) context, graded by :mod:`kvlab.claims.grading`; where the winner
changes — in the table, in the calibrated model (rule 3, with its held-out test as a row of its own) and in the
measured runs."""

from __future__ import annotations

import polars as pl

from kvlab.analysis import stated_tolerance
from dataclasses import replace

from kvlab.claims.grading import FAILS_HELD_OUT, NO_TABLE_ROW, Repeats, cpu_cross_engine, finding, measured_difference
from kvlab.claims.held_out import consistent_phrase, grade_model_claim, held_out_error, model_margin, winners_held_out
from kvlab.engines import engine_label
from kvlab.units import k_label, sig2
from kvlab.verdicts import Verdict


def _claim_row(rel: pl.DataFrame, context_label: str) -> dict | None:
    hit = rel.filter(pl.col("context_label") == context_label)
    return hit.row(0, named=True) if hit.height else None


def _ratio_spread(r: dict) -> tuple[float, float] | None:
    """engine_b's time over engine_a's, lowest to highest over the repeats of a relative-speed row."""
    a_lo, a_hi = r.get("batch_time_min_s"), r.get("batch_time_max_s")
    b_lo, b_hi = r.get("other_batch_time_min_s"), r.get("other_batch_time_max_s")
    if None in (a_lo, a_hi, b_lo, b_hi) or not (a_lo and a_hi):
        return None
    return b_lo / a_hi, b_hi / a_lo


def _repeats(r: dict, prefix: str = ""):
    return Repeats.summary(
        r[f"{prefix}batch_time_s"],
        r.get(f"{prefix}batch_time_min_s"),
        r.get(f"{prefix}batch_time_max_s"),
        r.get(f"{prefix}n_runs") or 1,
    )


def speed_claim_verdicts(
    claims: pl.DataFrame,
    rel_published: pl.DataFrame,
    rel_measured: pl.DataFrame | None,
    engine_family: dict[str, str] | None = None,
) -> list:
    """Each relative-speed claim checked against the document's own table (winner and stated ratio, to the
    claim's last digit) and, where measured runs exist at the same (scaled) context, graded by
    :mod:`kvlab.claims.grading`: CPU runs of two different engines cannot decide it (rule 1, the shortest measured
    context's ratio quoted as the baseline); GPU runs decide by rule 2. ``engine_family`` maps a claim's engine to
    the measured engine that stands for it (e.g. sglang → sglang-jax)."""
    family = engine_family or {}
    out = []
    for c in claims.filter(pl.col("kind") == "relative_speed").iter_rows(named=True):
        ctx, claimed, cid = c["context_from"], c["engine"], c.get("claim_id") or ""
        r = _claim_row(rel_published, ctx)
        if r is None:
            out.append(
                Verdict(
                    c["statement"],
                    "cannot be tested here",
                    "published",
                    f"no table row at {ctx}",
                    claim_id=cid,
                    kind="relative_speed",
                    scope="published table",
                    n=0,
                    limit=NO_TABLE_ROW,
                    reason=f"the table has no row at {ctx}",
                    family="consistency",
                )
            )
        else:
            ok = r["faster"] == claimed and abs(r["speedup"] - c["stated_value"]) <= stated_tolerance(
                c["stated_value"], c.get("stated_precision")
            )
            out.append(
                Verdict(
                    f"{c['statement']} — against the article's own table",
                    "consistent" if ok else "inconsistent",
                    "published",
                    f"{engine_label(r['faster'])} {r['speedup']:.2f}× faster at {ctx}",
                    claim_id=cid,
                    kind="relative_speed",
                    value=r["speedup"],
                    unit="×",
                    n=2,
                    scope="published table",
                    family="consistency",  # two published times at ctx
                    reason=(
                        f"the table gives {engine_label(r['faster'])} {r['speedup']:.2f}× against the "
                        f"stated {c['stated_value']:g}× (to the claim's last digit)"
                    ),
                )
            )
        m = _claim_row(rel_measured, ctx) if rel_measured is not None and not rel_measured.is_empty() else None
        if m is None:
            continue
        stands_for = family.get(claimed, claimed)
        tokens = f"{m['context_tokens']:,} tokens"
        base = rel_measured.sort("context_tokens").row(0, named=True)
        n = min(base.get("n_runs") or 1, base.get("other_n_runs") or 1)
        grade = cpu_cross_engine(
            m["engine"],
            m["other_engine"],
            [m.get("device_kind"), m.get("other_device_kind")],
            baseline=base["other_batch_time_s"] / base["batch_time_s"],
            n=n,
            spread=_ratio_spread(base),
            baseline_at=f"the shortest measured context, {base['context_label']} ({base['context_tokens']:,} tokens)",
            scope=f"{m.get('hardware') or 'CPU'}, contexts scaled",
        )
        number = f"{engine_label(m['faster'])} {m['speedup']:.2f}× faster at {ctx} ({tokens})"
        if grade is not None:
            fast = m["engine"] if base["other_batch_time_s"] >= base["batch_time_s"] else m["other_engine"]
            number = (
                f"{engine_label(fast)} {sig2(grade.value)}× faster at {ctx} ({tokens}), the shortest context measured"
                if base["context_tokens"] == m["context_tokens"]
                else f"{engine_label(fast)} already {sig2(grade.value)}× faster at {base['context_label']} "
                f"({base['context_tokens']:,} tokens); at {ctx} ({tokens}): {engine_label(m['faster'])} "
                f"{sig2(m['speedup'])}×"
            )
        else:  # GPU runs: the other engine's time over the claimed one's, the speed-up the claim names
            first, second = ((m, "other_"), (m, "")) if m["engine"] == stands_for else ((m, ""), (m, "other_"))
            grade = measured_difference(
                _repeats(*first),
                _repeats(*second),
                "higher",
                what=f"the other engine's batch time against {engine_label(stands_for)}'s",
                scope=m.get("hardware") or "",
            )
        if grade.outcome == "cannot be tested here":
            # value: the figure the claim names, the claimed engine's speed-up at the claim's context (the other
            # engine's time ÷ its own, over the repeats there); the baseline ratio stays in the number and reason
            mine, theirs = ("", "other_") if m["engine"] == stands_for else ("other_", "")
            at = _repeats(m, theirs), _repeats(m, mine)
            spread = None if at[0].unranged or at[1].unranged else (at[0].lo / at[1].hi, at[0].hi / at[1].lo)
            grade = replace(
                grade,
                value=at[0].mid / at[1].mid,
                unit="×",
                spread=spread,
                n=min(m.get("n_runs") or 1, m.get("other_n_runs") or 1),
            )
        out.append(
            grade.verdict(
                f"{c['statement']} — on this host ({ctx} scaled to {tokens})",
                number,
                claim_id=cid,
                kind="relative_speed",
            )
        )
    return out


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


def crossover_verdicts(
    estimates: list,
    model_tokens: float | None,
    measured: list | None,
    model_range: tuple[float, float] | None = None,
    fit=None,
    consistent: dict | None = None,
    device_kinds=(),
) -> list:
    """Where the winner changes: the article's table interpolated (found: the article states no crossover), the
    calibrated model (graded by rule 3 of :mod:`kvlab.claims.grading` when ``fit`` is given: an illustration,
    with its failed held-out test as a red row of its own, unless it passes), and the measured contexts.

    ``consistent``: :func:`kvlab.perfmodel.report.consistent_summary` of the fits consistent with the published
    totals; with it the model's row also gives their (narrower) crossover range, worded as report 04's verdicts give
    it (:func:`kvlab.claims.held_out.consistent_phrase`). Words only: the grade, value and spread stay.

    The measured row compares two engines, so it passes :func:`kvlab.claims.grading.finding`: runs that count as
    CPU (``device_kinds`` of the compared runs; none recorded: CPU) cannot be tested
    here; otherwise fewer than 3 repeats a side are *inconclusive*, n shown."""
    out = []
    found = [x for x in estimates if x.context_tokens is not None]
    lo = hi = None
    if found:
        lo, hi = min(x.context_tokens for x in found), max(x.context_tokens for x in found)
        out.append(
            Verdict(
                "The winner changes between 64K and 200K (the article's table, interpolated)",
                "found",
                "published",
                f"{k_label(lo)}–{k_label(hi)} tokens ({', '.join(x.method for x in found)})",
                claim_id="crossover_published",
                kind="crossover",
                value=(lo + hi) / 2,
                unit="tokens",
                n=4,
                spread=(lo, hi),
                scope="published table",  # two engines at two contexts
                reason="interpolated between the table's two contexts; the article states no crossover",
            )
        )
    if model_tokens is not None:
        allowed = consistent_phrase(consistent)
        number = (
            f"≈{k_label(model_tokens)} tokens"
            + (
                f", {k_label(model_range[0])}–{k_label(model_range[1])} over the assumptions the article leaves open"
                if model_range
                else ""
            )
            + (f"; {allowed}" if allowed else "")
            + " (not an independent check)"
        )
        claim = "Where the winner changes, from kvlab's physical model calibrated on the same four points"
        if fit is None:
            out.append(
                Verdict(
                    claim,
                    "inconclusive",
                    "modelled",
                    number,
                    claim_id="crossover_modelled",
                    kind="crossover",
                    value=model_tokens,
                    unit="tokens",
                    spread=model_range,
                    scope="model fitted to the published table",
                    limit=FAILS_HELD_OUT,
                    reason="the model's own answer; its held-out test is not given, so it cannot stand (rule 3)",
                )
            )
        else:
            contexts = sorted(fit.residuals["context_tokens"].unique().to_list())
            inside = contexts[0] < model_tokens < contexts[-1]
            grade, held = grade_model_claim(fit, inside, contexts, value=model_tokens, unit="tokens")
            grade = replace(grade, spread=model_range)  # the value's range over the assumption sets, in tokens
            out.append(
                grade.verdict(
                    claim + " (does it cross between the published contexts?)",
                    number,
                    claim_id="crossover_modelled",
                    kind="crossover",
                )
            )
            out.append(held_out_verdict(held, fit))
    if measured:
        x = next((m for m in measured if m.context_tokens is not None), None)
        m = measured[0]
        none = (
            ""
            if x
            else "; the curves do not cross inside the measured contexts, so there is no crossover "
            "context to give (no value)"
        )
        engines = (
            (m.faster_below, m.faster_above)
            if m.faster_below and m.faster_above and m.faster_below != m.faster_above
            else None
        )
        outcome, why, limit = finding(m.n_runs, engines=engines, cross_engine=True, device_kinds=device_kinds)
        out.append(
            Verdict(
                "Do the measured curves cross inside the measured contexts?",
                outcome,
                "measured",
                f"yes, at ≈{x.context_tokens:,.0f} tokens ({x.method})"
                if x
                else f"no: {engine_label(m.faster_below)} faster at every measured context"
                if m.faster_below
                else f"no: {m.note}",
                claim_id="crossover_measured",
                kind="crossover",
                value=x.context_tokens if x else None,
                unit="tokens",
                n=m.n_runs,
                scope="measured runs of this host",
                limit=limit,
                family="own",
                reason=(f"{why}; " if why else "")
                + "the report's own question about its runs; decides no document claim"
                + none,
            )
        )
    return out
