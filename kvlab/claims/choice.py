"""Engine-choice claims (report 06): the KV-design article's statements — vLLM shares no prefix, SGLang's radix
cache does, choose SGLang at ≥ 30% shared, choose vLLM at ≥ 100 in flight — against the measured prefix-sharing
and concurrency studies, graded by :mod:`kvlab.claims.grading` (CPU runs of two engines never decide a
cross-engine claim; the ratio where the claim's mechanism is absent is quoted)."""

from __future__ import annotations

import polars as pl

from kvlab.device import shown
from kvlab.analysis import nearest
from kvlab.claims.grading import NOTHING_MEASURED, Repeats, cpu_cross_engine, measured_difference, negated
from kvlab.claims.prefix import cache_shares
from kvlab.engines import SGLANG, VLLM, engine_label, registry
from kvlab.units import sig2
from kvlab.verdicts import Verdict


def _at_largest_fraction(on: pl.DataFrame, engines) -> dict | None:
    d = on.filter(pl.col("engine").is_in(list(engines)) & pl.col("cache_hit_rate").is_not_null())
    if d.is_empty():
        return None
    return d.sort("shared_fraction").row(-1, named=True)


def claim_verdicts(claims: pl.DataFrame, sharing: pl.DataFrame, conc: pl.DataFrame) -> list:
    """Report 06's verdicts on the KV-design article's claims, against the measured runs where kvlab has them (each a
    claim's shape on this host: vLLM's CPU build against PyTorch SGLang on CPU). The claims' thresholds are their
    ``threshold`` fields (:mod:`kvlab.schema` CLAIMS)."""
    on = sharing.filter(pl.col("prefix_caching").fill_null(True)) if not sharing.is_empty() else sharing
    by_id = {c["claim_id"]: c for c in claims.iter_rows(named=True)}
    out = []

    def off_row(r: dict) -> dict | None:
        o = sharing.filter(
            (pl.col("engine") == r["engine"])
            & ~pl.col("prefix_caching").fill_null(True)
            & (pl.col("shared_fraction") == r["shared_fraction"])
            & pl.col("cache_hit_rate").is_not_null()
        )
        return o.row(0, named=True) if o.height else None

    c = by_id.get("vllm_no_prefix_sharing")
    if c:
        r = _at_largest_fraction(on, [VLLM]) if not on.is_empty() else None
        out.append(
            Verdict(
                f"{c['statement']} — vLLM as measured here, prefix cache on (its default)",
                "cannot be tested here",
                "measured",
                "no measured vLLM prefix-sharing run",
                claim_id=c["claim_id"],
                kind="prefix_sharing",
                n=0,
                scope="nothing measured to test it",
                limit=NOTHING_MEASURED,
                reason="no measured vLLM prefix-sharing run",
            )
            if r is None
            else negated(cache_shares(r, off_row(r))).verdict(
                f"{c['statement']} — vLLM as measured here ({shown(r)}), prefix cache on (its default)",
                f"{r['cache_hit_rate']:.0%} of prompt tokens from vLLM's cache at {r['shared_fraction']:.0%} shared",
                claim_id=c["claim_id"],
                kind="prefix_sharing",
            )
        )
    c = by_id.get("sglang_radix_sharing")
    if c:
        radix = [
            e for e in (on["engine"].unique().to_list() if not on.is_empty() else []) if registry.family(e) == SGLANG
        ]
        r = _at_largest_fraction(on, radix) if radix else None
        out.append(
            Verdict(
                c["statement"],
                "cannot be tested here",
                "measured",
                "no measured SGLang-family run",
                claim_id=c["claim_id"],
                kind="prefix_sharing",
                n=0,
                scope="nothing measured to test it",
                limit=NOTHING_MEASURED,
                reason="no measured SGLang-family run",
            )
            if r is None
            else cache_shares(r, off_row(r)).verdict(
                f"{c['statement']} — does it share? Measured on {engine_label(r['engine'])}, its radix "
                "cache on; the gap to the ideal is what it recomputed",
                f"{r['cache_hit_rate']:.0%} of prompt tokens from its cache at {r['shared_fraction']:.0%} shared "
                f"(token-exact ideal {r['ideal_hit_rate']:.0%})",
                claim_id=c["claim_id"],
                kind="prefix_sharing",
            )
        )
    c = by_id.get("shared_prefix_threshold")
    if c:
        at = c["threshold"]
        pairs = []
        for f in (
            sorted(on.filter(pl.col("shared_fraction") >= at)["shared_fraction"].unique().to_list())
            if not on.is_empty()
            else []
        ):
            d = on.filter(pl.col("shared_fraction") == f).sort("batch_time_s")
            if d["engine"].n_unique() >= 2:
                pairs.append((f, d.row(0, named=True), d.row(1, named=True)))
        if not pairs:
            out.append(
                Verdict(
                    c["statement"],
                    "cannot be tested here",
                    "measured",
                    f"no shared fraction ≥ {at:.0%} measured with two engines",
                    claim_id=c["claim_id"],
                    kind="engine_choice",
                    n=0,
                    scope="nothing measured to test it",
                    limit=NOTHING_MEASURED,
                    reason=f"no shared fraction ≥ {at:.0%} measured with two engines",
                )
            )
        else:
            f, best, other = pairs[-1]
            m = other["batch_time_s"] / best["batch_time_s"]
            below = on.filter(
                pl.col("engine").is_in([best["engine"], other["engine"]]) & (pl.col("shared_fraction") < at)
            )
            zero = nearest(below, "shared_fraction", 0.0) if not below.is_empty() else below
            out.append(
                _measured_pair_verdict(
                    f"{c['statement']} — on this host: {engine_label(best['engine'])} against "
                    f"{engine_label(other['engine'])}, each with its prefix cache on",
                    c["claim_id"],
                    best,
                    other,
                    zero,
                    "shared_fraction",
                    lambda v: f"{v:.0%} shared",
                    "batch_time_s",
                    lower_is_better=True,
                    missing=f"no shared fraction below the claim's {at:.0%} measured with both engines",
                    at_claim=(f"{engine_label(best['engine'])} {sig2(m)}× shorter median batch time at {f:.0%} shared"),
                    claimed_family=SGLANG,
                )
            )
    c = by_id.get("high_concurrency")
    if c:
        at = c["threshold"]
        hi = conc.filter(pl.col("in_flight") >= at) if not conc.is_empty() else conc
        top = (
            hi.filter(pl.col("in_flight") == hi["in_flight"].max()).sort("requests_per_s", descending=True)
            if not hi.is_empty()
            else hi
        )
        if top.is_empty() or top["engine"].n_unique() < 2:
            out.append(
                Verdict(
                    c["statement"],
                    "cannot be tested here",
                    "measured",
                    f"no run with ≥ {at:g} requests in flight measured with two engines",
                    claim_id=c["claim_id"],
                    kind="concurrency_threshold",
                    n=0,
                    scope="nothing measured to test it",
                    limit=NOTHING_MEASURED,
                    reason=f"no run with ≥ {at:g} requests in flight measured with two engines",
                )
            )
        else:
            a, b = top.row(0, named=True), top.row(1, named=True)
            m = a["requests_per_s"] / b["requests_per_s"]
            pair = conc.filter(pl.col("engine").is_in([a["engine"], b["engine"]]))
            below = pair.filter(pl.col("in_flight") < at)  # a baseline must lie below the claim's threshold
            low = below.filter(pl.col("in_flight") == below["in_flight"].min()) if not below.is_empty() else below
            levels = pair["in_flight"].n_unique()
            out.append(
                _measured_pair_verdict(
                    f"{c['statement']} — on this host: {engine_label(a['engine'])} against {engine_label(b['engine'])}, "
                    f"distinct prompts ({levels} concurrency level{'' if levels == 1 else 's'} measured)",
                    c["claim_id"],
                    a,
                    b,
                    low,
                    "in_flight",
                    lambda v: f"{v} in flight (the lowest load measured)",
                    "requests_per_s",
                    lower_is_better=False,
                    claimed_family=VLLM,
                    kind="concurrency_threshold",
                    missing=f"no load below the claim's {at:g} in flight measured with both engines",
                    at_claim=f"{engine_label(a['engine'])} {sig2(m)}× the completed requests/s at {a['in_flight']} in flight",
                )
            )
    return out


def _measured_pair_verdict(
    claim: str,
    claim_id: str,
    best: dict,
    other: dict,
    base: pl.DataFrame,
    at_col: str,
    at_label,
    metric: str,
    *,
    lower_is_better: bool,
    at_claim: str,
    claimed_family: str,
    missing: str,
    kind: str = "engine_choice",
):
    """A claim that one engine family beats the other, graded by :mod:`kvlab.claims.grading`: CPU runs of two
    engines cannot decide it (rule 1; the ratio at ``base``, a setting below the claim's threshold where its
    mechanism is absent, quoted; with no such setting measured, ``missing`` says so and the value is null); GPU
    runs decide by rule 2 on ``metric`` (spread from its ``*_min*``/``*_max*`` columns where present)."""
    a, b = best["engine"], other["engine"]
    ra = base.filter(pl.col("engine") == a)
    rb = base.filter(pl.col("engine") == b)
    kinds = [r.get("device_kind") for r in (best, other)]
    ns = [best.get("n_runs") or 1, other.get("n_runs") or 1]
    ratio, where = None, missing
    if ra.height and rb.height:
        ta, tb = ra[metric][0], rb[metric][0]
        ratio = tb / ta if lower_is_better else ta / tb  # > 1: ``a`` ahead where the mechanism is absent
        where = at_label(ra[at_col][0])
        # n: the repeats behind the value quoted, the baseline rows' (report 05 quotes the same rows, the same n)
        ns = [
            (ra["n_runs"][0] if "n_runs" in ra.columns else None) or 1,
            (rb["n_runs"][0] if "n_runs" in rb.columns else None) or 1,
        ]
    grade = cpu_cross_engine(
        a, b, kinds, baseline=ratio, n=min(ns), baseline_at=where, scope=f"{best.get('hardware') or 'CPU'}"
    )
    if grade is not None:
        if ratio is None:
            number = f"{at_claim} ({missing}, so nothing shows the gap is the claim's mechanism)"
        else:
            fast = a if ratio >= 1 else b
            number = f"{engine_label(fast)} already {sig2(grade.value)}× ahead at {where}; {at_claim}"
        return grade.verdict(claim, number, claim_id=claim_id, kind=kind)

    def reps(r: dict) -> Repeats:
        return Repeats.of_row(r, metric)

    fam = (registry.family(a) or a) == claimed_family
    claimed_side, other_side = (best, other) if fam else (other, best)
    grade = measured_difference(
        reps(claimed_side),
        reps(other_side),
        "lower" if lower_is_better else "higher",
        what=f"{engine_label(claimed_side['engine'])} against {engine_label(other_side['engine'])}",
        scope=best.get("hardware") or "",
    )
    return grade.verdict(claim, at_claim, claim_id=claim_id, kind=kind)
