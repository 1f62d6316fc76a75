"""Report 05's checks: one function per kind of claim it tests (by the claim row's ``metric``), then its own two
questions (does the saving jump at the threshold; how much of a multi-turn prompt the cache serves).

The cache-share claims (vLLM shares nothing, SGLang's radix cache shares) are graded once, in
:mod:`kvlab.studies.sharing_frames`, which report 06 reads too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from kvlab.claims.grading import (
    NOT_REUSABLE,
    Repeats,
    combined,
    counted,
    cpu_cross_engine,
    speed_gap,
    finding,
    measured_difference,
)
from kvlab.engines import SGLANG, engine_label, registry
from kvlab.studies.prefix_sharing.frames import Threshold, _prefix_bracket, engine_order, saving_trend, turn_n
from kvlab.studies.sharing_frames import _nothing, cache_share_verdict, claimed_engine, hits_on, top_row
from kvlab.units import apart, ratio, sig2, signed_pct
from kvlab.verdicts import Verdict

#: The article's claims report 05 tests (the article's other claims are report 06's).
PREFIX_CLAIM_IDS = ("vllm_no_prefix_sharing", "sglang_radix_sharing", "sglang_radix_suffix", "shared_prefix_threshold")


@dataclass(frozen=True)
class Inputs:
    """What the checks read: the study's frames and the threshold it tests."""

    sharing: pl.DataFrame
    gain: pl.DataFrame
    thresholds: dict[str, Threshold]
    by_turn: pl.DataFrame
    reuse: pl.DataFrame
    threshold: float


def _times(x: float, n: int | None = None) -> str:
    """A ratio off ÷ on as measured: 'off ÷ on 1.37×' (two significant figures where it rests on one run a side)."""
    return f"off ÷ on {ratio(x, n)}×"


# -- the article's claims, one checker per metric ---------------------------------------------------------------------


def _reuse_row(reuse: pl.DataFrame, engine: str, fraction: float) -> dict | None:
    if reuse is None or not reuse.height:
        return None
    q = reuse.filter((pl.col("engine") == engine) & pl.col("prefix_caching") & (pl.col("shared_fraction") == fraction))
    return q.row(0, named=True) if q.height and q["requests_hit"][0] is not None else None


def _suffix_grade(r: dict, rr: dict | None, label: str):
    """The suffix claim's grade and its number: by request where per-request counts exist (a request of a run's
    first wave arrives before the prefix is cached: only the later ones can reuse it), else by hit share."""
    if rr is not None:
        possible, reused = rr["requests"] - rr["first_wave"], rr["requests_hit"] - rr["first_wave_hit"]
        ok = reused >= possible
        first = "none" if rr["first_wave_hit"] == 0 else f"{rr['first_wave_hit']}"
        number = (
            f"{reused} of the {possible} requests sent after each run's first wave reused the "
            f"{rr['shared_prefix_tokens']:,}-token prefix at {r['shared_fraction']:.0%} shared; "
            f"{first} of the {rr['first_wave']} sent together first (before it could be cached)"
        )
        share, unit = (reused / possible if possible else None), "fraction of the requests that could reuse the prefix"
    else:
        possible, ok = None, r["cache_hit_rate"] >= 0.95 * r["ideal_hit_rate"]
        number = (
            f"{r['cache_hit_rate']:.0%} of prompt tokens from the cache at {r['shared_fraction']:.0%} "
            f"shared against {r['ideal_hit_rate']:.0%} if every request after the first reused it"
        )
        share, unit = r["cache_hit_rate"], "fraction of prompt tokens from the cache"
    grade = counted(
        ok,
        (rr or r).get("n_runs") or 1,
        reason="every request that could reuse the prefix did"
        if ok
        else "requests that could reuse the prefix computed it again",
        value=share if share is not None else r["cache_hit_rate"],
        unit=unit,
        scope=f"{r.get('hardware') or 'this host'}, {label}'s own cache",
    )
    if rr is not None and not possible:
        grade = replace(
            grade,
            outcome="cannot be tested here",
            value=None,
            unit="",
            limit=NOT_REUSABLE,
            reason="every request was sent in a run's first wave, before the prefix could be cached: none could reuse it",
        )
    return grade, number


def check_suffix(claim: dict, x: Inputs) -> Verdict:
    """SGLang's radix cache computes only each request's suffix: every request that could reuse the prefix did."""
    engine = claimed_engine(claim, x.sharing)
    if engine is None:
        why = "no SGLang-family run with its radix cache on reported a hit count"
        return _nothing(f"“{claim['statement']}”", claim["claim_id"], why)
    r = top_row(x.sharing, engine)
    rr = _reuse_row(x.reuse, engine, r["shared_fraction"])
    grade, number = _suffix_grade(r, rr, engine_label(engine))
    setting = f", requests arriving {rr['first_wave'] // rr['n_runs']} at a time" if rr is not None else ""
    return grade.verdict(
        f"“{claim['statement']}” — {engine_label(engine)}{setting}",
        number,
        claim_id=claim["claim_id"],
        kind="prefix_sharing",
    )


def _both_engines(on: pl.DataFrame) -> dict[float, pl.DataFrame]:
    """Per shared fraction measured with two or more engines (cache on, every batch time present): its rows."""
    if not on.height:
        return {}
    return {
        f: g
        for (f,), g in on.group_by(["shared_fraction"])
        if g["engine"].n_unique() >= 2 and g["batch_time_s"].null_count() == 0
    }


def _gpu_threshold(claim: str, cid: str, above: dict, hardware: str, at: str) -> Verdict | None:
    """GPU runs: the engines' batch times decide by rule 2 at every fraction from the threshold up."""
    parts = []
    for f, g in sorted(above.items()):
        fam = pl.col("engine").replace_strict(registry.FAMILY_OF, default=None)
        sg, other = g.filter(fam == SGLANG), g.filter(fam != SGLANG)
        if sg.is_empty() or other.is_empty():
            continue
        a, b = sg.row(0, named=True), other.row(0, named=True)
        reps = [
            Repeats.summary(r["batch_time_s"], r.get("batch_time_min_s"), r.get("batch_time_max_s"), r["n_runs"])
            for r in (a, b)
        ]
        what = f"{engine_label(a['engine'])}'s batch time against {engine_label(b['engine'])}'s at {f:.0%}"
        parts.append(measured_difference(*reps, "lower", what=what, scope=hardware))
    if not parts:
        return None
    return combined(parts).verdict(claim, at, claim_id=cid, kind="engine_choice")


def check_threshold(claim: dict, x: Inputs) -> Verdict | None:
    """With a shared prefix ≥ the threshold choose SGLang: both engines' batch times, cache on, from the threshold up;
    on a CPU (two implementations) the ratio where nothing is shared is quoted and nothing is decided (rule 1)."""
    on = x.sharing.filter(pl.col("prefix_caching")) if x.sharing.height else x.sharing
    both = _both_engines(on)
    above = {f: g for f, g in both.items() if f >= x.threshold}
    engines = on.select("engine").unique().sort(engine_order())["engine"].to_list() if on.height else []
    text = f"“{claim['statement']}” — on this host: {' against '.join(engine_label(e) for e in engines)}, caches on"
    cid = claim["claim_id"]
    if not above:
        why = f"no shared fraction ≥ {x.threshold:.0%} measured with two engines"
        return replace(_nothing(text, cid, why), kind="engine_choice")
    wins = {f: g.sort("batch_time_s")["engine"][0] for f, g in above.items()}
    spans = {f: g["batch_time_s"].max() / g["batch_time_s"].min() for f, g in above.items()}
    at = "; ".join(f"{engine_label(wins[f])} {sig2(spans[f])}× sooner at {f:.0%}" for f in sorted(above))
    lo_f = min((f for f in both if f < x.threshold), default=None)
    z = (both[lo_f] if lo_f is not None else both[min(above)]).sort(engine_order())
    a, b = z.row(0, named=True), z.row(1, named=True)
    missing = f"no shared fraction below the claim's {x.threshold:.0%} measured with both engines"
    grade = cpu_cross_engine(
        a["engine"],
        b["engine"],
        z["device_kind"].to_list() if "device_kind" in z.columns else [],
        baseline=b["batch_time_s"] / a["batch_time_s"] if lo_f is not None else None,
        n=int(z["n_runs"].min()),
        baseline_at=f"{lo_f:.0%} shared" if lo_f is not None else missing,
        scope=f"{a['hardware']}, each engine's prefix cache on",
    )
    if grade is None:
        return _gpu_threshold(text, cid, above, a["hardware"], at)
    if lo_f is None:
        number = f"{at} ({missing}, so nothing shows the gap is the cache's)"
    else:
        fast, slow = (
            (a["engine"], b["engine"]) if b["batch_time_s"] >= a["batch_time_s"] else (b["engine"], a["engine"])
        )
        number = (
            f"{speed_gap(engine_label(fast), engine_label(slow), grade.value)} at {lo_f:.0%} shared; {at}. What "
            "the cache saves within each engine is the fair comparison (the threshold row below)"
        )
    return grade.verdict(text, number, claim_id=cid, kind="engine_choice")


#: One checker per kind of claim, by the claim row's metric.
CHECKERS = {
    "cache_hit_share": lambda claim, x: cache_share_verdict(claim, x.sharing),
    "requests_reusing_prefix": check_suffix,
    "batch_time": check_threshold,
}


# -- the report's own questions ---------------------------------------------------------------------------------------


def _shape(g: pl.DataFrame, th: Threshold) -> str:
    """What makes one engine's saving curve a threshold, with every measured point: a step across ``th.at`` or a
    slope above it more than twice the one below, never called a jump where the saving falls across it."""
    points = ", ".join(
        f"{signed_pct(r['time_saved'])} at {r['shared_fraction']:.0%}"
        for r in g.filter(pl.col("time_saved").is_not_null()).sort("shared_fraction").iter_rows(named=True)
    )
    steep = th.slope_above is not None and th.slope_below is not None and th.slope_above > 2 * max(th.slope_below, 1e-9)
    if th.step_at is not None and th.step_at > 0 and not steep:
        return f"saving {points} shared: a step of {signed_pct(th.step_at)} across {th.at:.0%}"
    return f"saving {points} shared: it rises more steeply from {th.at:.0%} up than below"


def _engine_shape(engine: str, th: Threshold, g: pl.DataFrame) -> str | None:
    """One engine's part of the jump question's number: the curve's shape as the threshold test read it."""
    lab = engine_label(engine)
    if th.verdict == "no data":
        return None
    if th.verdict == "inconclusive":
        return f"{lab}: inconclusive (on vs off already {apart(th.gain_at_zero)} apart at 0%, where nothing is reused)"
    if th.verdict == "threshold":
        return f"{lab}: {_shape(g, th)}" if _prefix_bracket(g, th.at) else f"{lab}: a jump near {th.at:.0%}"
    return f"{lab}: no jump, a steady {saving_trend(g)} (R² {th.r2_linear:.2f})"


def jump_verdict(x: Inputs) -> Verdict | None:
    """The report's own question: does what the prefix cache saves (within each engine) jump at the threshold?"""
    parts = [
        p
        for e, th in x.thresholds.items()
        if (p := _engine_shape(e, th, x.gain.filter(pl.col("engine") == e))) is not None
    ]
    if not parts:
        return None
    n = int(x.sharing["n_runs"].min()) if x.sharing.height else 0
    outcome, why, limit = finding(n)  # within each engine; a shape from one run a point is noise
    return Verdict(
        f"Does what the prefix cache saves jump at {x.threshold:.0%} shared, as the article's threshold implies?",
        outcome,
        "measured",
        "; ".join(parts),
        claim_id="shared_prefix_threshold_jump",
        kind="prefix_sharing",
        n=n,
        limit=limit,
        scope="each engine's own cache on against off",
        family="own",
        reason=(f"{why} (run-to-run noise can make or hide a jump); " if why else "")
        + "the report's own question: what the cache saves within each engine, by fraction; its answer is a shape "
        "per engine (a jump or a steady rise), not one number, so the row has no value",
    )


def _last_turn(g: pl.DataFrame) -> tuple[dict, str, int | None] | None:
    """One engine's last turn with the cache on: (its row, its part of the number, the runs behind it)."""
    o = g.filter(pl.col("prefix_caching"))
    if o.is_empty() or o["cached_share"][-1] is None:
        return None
    last = o.row(-1, named=True)
    f = g.filter(~pl.col("prefix_caching") & (pl.col("turn") == last["turn"]))
    n = turn_n(last, f.row(0, named=True)) if f.height else turn_n(last)
    ttft = (
        f", TTFT {_times(f['ttft_mean_ms'][0] / last['ttft_mean_ms'], n)}" if f.height and last["ttft_mean_ms"] else ""
    )
    return last, f"{engine_label(last['engine'])} {last['cached_share']:.0%}{ttft}", n


def multi_turn_verdict(by_turn: pl.DataFrame) -> Verdict | None:
    """The report's own question about the article's example 1: the last turn's share served from the cache."""
    if by_turn is None or not by_turn.height:
        return None
    found = [
        t
        for _, g in by_turn.sort(engine_order(), "turn").group_by(["engine"], maintain_order=True)
        if (t := _last_turn(g)) is not None
    ]
    if not found:
        return None
    ns = [n for _, _, n in found]
    n_turn = None if None in ns else min(ns)
    outcome, why, limit = finding(n_turn)  # one engine's cache on against off, per turn
    return Verdict(
        "Multi-turn RAG (the article's example 1): how much of the last turn's prompt the cache serves, and its time "
        "to first token against the cache off",
        outcome,
        "measured",
        f"turn {found[-1][0]['turn']}: " + "; ".join(p for _, p, _ in found),
        claim_id="multi_turn_reuse",
        kind="prefix_sharing",
        scope="each engine's own cache on against off",
        value=found[0][0]["cached_share"],
        unit="fraction of the last turn's prompt from the cache (the first engine named)",
        spread=None,
        n=n_turn,
        limit=limit,
        family="own",
        reason=(f"{why}: one turn's time to first token from one run can be an outlier; " if why else "")
        + "the report's own question about the article's example 1",
    )


def verdicts(claims: pl.DataFrame, x: Inputs) -> list[Verdict]:
    """Report 05's verdicts: each of its article claims the claims table holds (in the table's order, each by the
    checker of its metric), the jump question where the threshold claim is there, then multi-turn reuse."""
    rows = [r for r in claims.iter_rows(named=True) if r["claim_id"] in PREFIX_CLAIM_IDS]
    out = [v for r in rows if (v := CHECKERS[r["metric"]](r, x)) is not None]
    if any(r["claim_id"] == "shared_prefix_threshold" for r in rows) and (j := jump_verdict(x)) is not None:
        out.append(j)
    if (m := multi_turn_verdict(x.by_turn)) is not None:
        out.append(m)
    return out


__all__ = ["CHECKERS", "Inputs", "PREFIX_CLAIM_IDS", "hits_on", "verdicts"]
