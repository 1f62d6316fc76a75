"""The checks of report 07's own questions: one small function per question, dispatched by claim id through
:data:`CHECKS`; each returns a :class:`~kvlab.verdicts.Verdict` built by the grading rules' constructors
(kvlab.claims.grading) and, where the page quotes a count, a typed value beside it (:class:`QueueCount`).
No document states these questions: they are the capacity study's own (family *own*)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from kvlab.claims.grading import (
    CONFIGURED,
    MIN_REPEATS,
    NOTHING_MEASURED,
    Grade,
    Repeats,
    combined,
    counted,
    cpu_cross_engine,
    held_out_gate,
    measured_difference,
    on_cpu,
)
from kvlab.claims.held_out import held_out_error, model_margin, winners_held_out
from kvlab.engines import engine_label
from kvlab.perfmodel.calibrate import published_fit
from kvlab.studies.capacity.frames import NOT_PROBED
from kvlab.studies.measured_frames import context_name
from kvlab.tables import span
from kvlab.units import sig2, tokens_label
from kvlab.verdicts import Verdict

#: Report 07's questions (claim id -> the question, as its verdict row states it).
CLAIMS = {
    "capacity_ceiling_memory": "A higher memory setting raises each engine's concurrency ceiling at every context",
    "capacity_queueing_past_ceiling": "Loaded past its concurrency ceiling, a server queues requests",
    "capacity_goodput_map": "One engine carries more goodput within the SLO at every context × memory setting",
    "capacity_modelled_ceiling": "The concurrency ceiling of Kimi-K3 on 8× B300 at the longest context",
}
KIND = "capacity"


@dataclass(frozen=True)
class Evidence:
    """What the checks read: the load points (``curve``), each against its ceiling (``points``), the map and the
    model's ceilings (:mod:`kvlab.studies.capacity.frames`)."""

    curve: pl.DataFrame
    points: pl.DataFrame
    gmap: pl.DataFrame
    modelled: pl.DataFrame


@dataclass(frozen=True)
class QueueCount:
    """The load points (each one stored run) past their concurrency ceiling whose waiting queue was sampled:
    ``past`` of them, ``queued`` of which queued; ``below`` / ``below_queued`` the same at or under the ceiling;
    ``repeats``: distinct repeats per engine behind the points past it (the fewer); ``engines``: how many."""

    past: int
    queued: int
    below: int
    below_queued: int
    repeats: int
    engines: int


def config_label(engine: str, tp: int | None, dcp: int | None) -> str:
    """'vLLM TP1', 'SGLang TP8+DCP8': an engine configuration."""
    return f"{engine_label(engine)} TP{tp or 1}" + (f"+DCP{dcp}" if (dcp or 1) > 1 else "")


def _where(r: dict) -> str:
    return f"{engine_label(r['engine'])} at {context_name(r['context_label'], r['context_tokens'])}"


def _untestable(cid: str, why: str) -> Verdict:
    """Nothing measured can test question ``cid``: *cannot be tested here*, saying ``why``."""
    return Verdict(
        CLAIMS[cid],
        "cannot be tested here",
        "measured",
        why,
        claim_id=cid,
        kind=KIND,
        n=0,
        scope="nothing measured to test it",
        limit=NOTHING_MEASURED,
        reason=why,
    )


# --------------------------------------------------------------------------- the ceiling against the memory setting


def _per_repeat(g: pl.DataFrame) -> Repeats:
    """The ceilings of one engine x context x memory setting, one per repeat index (rule 2's n): the load steps of a
    repeat share one server start and so one reported pool; they are one repeat, not several."""
    reps = g["repeat"].to_list() if "repeat" in g.columns else [None] * g.height
    return Repeats.per_repeat(g["concurrency_ceiling"].to_list(), reps)


def _budgets_said(d: pl.DataFrame, budgets: pl.DataFrame) -> str:
    """Each memory setting's KV budget as the experiment file sets it, in MiB and in the tokens the engines' pools
    held (a range over the engines), and the ratio of the highest to the lowest: '0.92: 8 MiB, 8,192 tokens; 0.95:
    20 MiB, 20,480 tokens; 2.50× the lowest'."""
    pools = (
        d.group_by("mem_util").agg(
            pl.col("kv_pool_tokens").min().alias("lo"), pl.col("kv_pool_tokens").max().alias("hi")
        )
        if "kv_pool_tokens" in d.columns
        else pl.DataFrame(schema={"mem_util": pl.Float64, "lo": pl.Int64, "hi": pl.Int64})
    )
    tokens = {r["mem_util"]: (r["lo"], r["hi"]) for r in pools.iter_rows(named=True) if r["lo"] is not None}
    parts = []
    for r in budgets.iter_rows(named=True):
        mib = ", ".join(f"{b / 2**20:.3g} MiB" for b in sorted(r["kv_budget_bytes"]))
        lo, hi = tokens.get(r["mem_util"], (None, None))
        parts.append(f"{r['mem_util']:g}: {mib}" + ("" if lo is None else f", {span(lo, hi, '{:,}'.format)} tokens"))
    least = [min(b) for b in budgets["kv_budget_bytes"].to_list()]
    ratio = f"; {least[-1] / least[0]:.2f}× the lowest" if len(least) > 1 and least[0] else ""
    return "; ".join(parts) + ratio


def _ceiling_pairs(d: pl.DataFrame) -> tuple[list[Grade], list[tuple[int, str]]]:
    """Per engine x context measured at two or more memory settings: rule 2's grade of the highest setting's ceilings
    against the lowest's, and the pair as the verdict quotes it."""
    grades, parts = [], []
    for (engine, ctx, label), g in d.group_by(["engine", "context_tokens", "context_label"], maintain_order=True):
        mems = sorted(g["mem_util"].drop_nulls().unique().to_list())
        if len(mems) < 2:
            continue
        hi, lo = (g.filter(pl.col("mem_util") == m) for m in (mems[-1], mems[0]))
        where = _where({"engine": engine, "context_tokens": ctx, "context_label": label})
        scope = "CPU: a stated KV budget per memory setting" if on_cpu(g["device_kind"][0]) else g["hardware"][0]
        grades.append(
            measured_difference(
                _per_repeat(hi),
                _per_repeat(lo),
                "higher",
                what=where,
                scope=scope + "; n counts repeats of each setting, not the load steps that share one server start",
            )
        )
        a, b = lo["concurrency_ceiling"].min(), hi["concurrency_ceiling"].min()
        parts.append(
            (ctx, context_name(label, ctx), f"({mems[0]:g} → {mems[-1]:g})", f"{engine_label(engine)} {a} → {b}")
        )
    return grades, parts


def _ceiling_number(parts: list[tuple]) -> str:
    """The pairs a context at a time, its engines together: '1,024 tokens (scaled 64K): SGLang 12 → 13, vLLM 11 → 13
    requests (0.92 → 0.95); 3,200 tokens (scaled 200K): ...' (each engine's context said once, not per engine)."""
    said: dict[tuple, list[str]] = {}
    for ctx, where, mems, pair in sorted(parts, key=lambda p: p[0]):
        said.setdefault((ctx, where, mems), []).append(pair)
    return "; ".join(f"{where}: {', '.join(pairs)} requests {mems}" for (_, where, mems), pairs in said.items())


def ceiling_check(ev: Evidence) -> Verdict:
    """Whether the measured ceiling moves with the memory setting, within each engine (rule 2): per engine x context
    at two or more settings, the ceilings at the highest against the lowest, one per repeat index, combined across
    engines and contexts. Where every run's pool is a KV budget the experiment file sets, the ceiling follows the
    configuration by construction: *configured*, not graded. No pair: *cannot be tested here*."""
    cid = "capacity_ceiling_memory"
    d = ev.points.filter(pl.col("concurrency_ceiling").is_not_null()) if not ev.points.is_empty() else ev.points
    grades, parts = _ceiling_pairs(d) if not d.is_empty() else ([], [])
    if not grades:
        return _untestable(cid, "no engine measured at two memory settings with a reported KV pool")
    g = combined(grades)
    number = _ceiling_number(parts)
    if "kv_budget_bytes" in d.columns and d["kv_budget_bytes"].null_count() == 0:
        budgets = (
            d.filter(pl.col("mem_util").is_not_null())
            .group_by("mem_util")
            .agg(pl.col("kv_budget_bytes").unique())
            .sort("mem_util")
        )
        g = replace(
            g,
            outcome="configured",
            limit=CONFIGURED,
            reason=f"the experiment file sets each memory setting's KV budget ({_budgets_said(d, budgets)}), so the "
            "ceiling follows the configuration by construction: shown, not graded",
        )
    return g.verdict(CLAIMS[cid], number, claim_id=cid, kind=KIND)


# --------------------------------------------------------------------------- queueing past the ceiling


def queue_count(points: pl.DataFrame) -> QueueCount | None:
    """:class:`QueueCount` of ``points`` (:func:`kvlab.studies.capacity.frames.capacity_points`); None where no load
    point past its ceiling had its waiting queue sampled."""
    seen = points.filter(pl.col("queued").is_not_null()) if not points.is_empty() else points
    past = seen.filter(pl.col("past_ceiling").fill_null(False)) if not seen.is_empty() else seen
    if past.is_empty():
        return None
    below = seen.filter(pl.col("past_ceiling") == False)  # noqa: E712 - a polars comparison
    per_engine = [
        int(g["repeat"].n_unique()) if "repeat" in g.columns else g.height for _, g in past.group_by("engine")
    ]
    return QueueCount(
        past=past.height,
        queued=past.filter(pl.col("queued")).height,
        below=below.height,
        below_queued=below.filter(pl.col("queued")).height,
        repeats=min(per_engine),
        engines=len(per_engine),
    )


def queue_reason(q: QueueCount) -> str:
    """The count behind the queueing verdict, as its reason states it: runs are counted, repeats per engine beside."""
    return (
        f"{q.queued} of {q.past} runs past the ceiling queued, over {q.engines} "
        f"engine{'s' if q.engines != 1 else ''} and {q.repeats} repeat{'s' if q.repeats != 1 else ''} per engine"
    )


def queueing_check(ev: Evidence) -> Verdict:
    """Whether the load points past their ceiling queued (telemetry ``requests_waiting`` > 0): a count the claim
    bounds, decided over at least MIN_REPEATS repeats per engine (:func:`kvlab.claims.grading.counted`); the
    reason counts the runs (:func:`queue_reason`), never the repeats as runs."""
    cid = "capacity_queueing_past_ceiling"
    points = ev.points
    q = queue_count(points)
    if q is None:
        seen = points.filter(pl.col("queued").is_not_null()) if not points.is_empty() else points
        why = (
            "no capacity run stored"
            if points.is_empty()
            else "no run sampled its server's waiting queue"
            if seen.is_empty()
            else "no load point past its concurrency ceiling had its waiting queue sampled"
        )
        return _untestable(cid, why)
    past = points.filter(pl.col("queued").is_not_null() & pl.col("past_ceiling").fill_null(False))
    first = past.sort("context_tokens", "mem_util", "engine", "load_level").row(0, named=True)
    grade = counted(
        q.queued == q.past,
        q.repeats,
        reason=queue_reason(q),
        value=q.queued / q.past,
        unit="of the points past the ceiling",
        scope="CPU, tiny model" if on_cpu(first["device_kind"]) else first["hardware"],
    )
    # counted() words n (repeats per engine) as runs; the reason counts the runs themselves
    few = f", fewer than the {MIN_REPEATS} repeats per engine a measured verdict needs"
    grade = replace(grade, reason=queue_reason(q) + (few if grade.outcome == "inconclusive" else ""))
    waited = f"up to {first['waiting_peak']:g} waiting" if first["queued"] else "none waiting"
    number = (
        f"{q.queued} of {q.past} runs past the ceiling queued (e.g. {_where(first)}, {first['load_level']:g} in "
        f"flight against a ceiling of {first['concurrency_ceiling']}: {waited}); {q.below_queued} of {q.below} "
        "at or under it"
    )
    return grade.verdict(CLAIMS[cid], number, claim_id=cid, kind=KIND)


# --------------------------------------------------------------------------- the goodput map


def probe_note(gmap: pl.DataFrame) -> tuple[str, bool]:
    """What the accuracy probe says of the map's leaders (the goodput map's ``winner_probe``): the cells whose
    leader's greedy output differs clearly from its engine's reference configuration, each named (True: some did);
    else whether they were probed and matched."""
    cells = gmap.filter(pl.col("winner").is_not_null()) if "winner" in gmap.columns else gmap.clear()
    if cells.is_empty() or "winner_probe" not in cells.columns:
        return "", False
    flagged = [r for r in cells.iter_rows(named=True) if r["winner_differs"]]
    if flagged:
        named = "; ".join(
            f"the configuration with more goodput at {context_name(r['context_label'], r['context_tokens'])}, {r['mem_util']:g} "
            f"({config_label(r['winner'], r['winner_tp'], r['winner_dcp'])}) {r['winner_probe']} in the accuracy "
            "probe against its engine's reference configuration"
            for r in flagged
        )
        them = "it" if len(flagged) == 1 else "them"
        return (
            f"{named}: fast, but not computing what the reference computes, so the map does not stand on {them}",
            True,
        )
    said = cells["winner_probe"].to_list()
    if all(p == NOT_PROBED for p in said):
        return (
            "the configurations' greedy outputs were not probed (probe: true in the experiment file compares them)",
            False,
        )
    unprobed = sum(p == NOT_PROBED for p in said)
    return (
        "no configuration's greedy output differed clearly from its engine's reference configuration in the accuracy probe"
        + (f" ({unprobed} of {len(said)} not probed)" if unprobed else "")
    ), False


def _lead(cells: pl.DataFrame) -> tuple[str, str, str]:
    """The engine ahead at most cells, the other engine of the first cell, and the count as the verdict says it."""
    wins: dict[str, int] = {}
    for w in cells["winner"].to_list():
        wins[w] = wins.get(w, 0) + 1
    lead = max(sorted(wins), key=lambda e: wins[e])
    first = cells.row(0, named=True)
    other = first["runner_up"] if first["winner"] == lead else first["winner"]
    return lead, other, f"{engine_label(lead)} ahead at {wins[lead]} of {cells.height} context × memory settings"


def _cpu_map(ev: Evidence, cells: pl.DataFrame, lead: str, other: str, claim: str) -> Verdict | None:
    """Rule 1 on the map: two implementations on a CPU never decide it; quoted is the goodput ratio at the lowest
    load measured at the first cell, where load plays no part. None where the rule does not apply."""
    first = cells.row(0, named=True)
    curve = ev.curve
    base = curve.filter(
        pl.col("engine").is_in([lead, other])
        & (pl.col("context_tokens") == first["context_tokens"])
        & (pl.col("mem_util") == first["mem_util"])
    )
    low = base.filter(pl.col("load_level") == base["load_level"].min()) if not base.is_empty() else base
    ga = low.filter(pl.col("engine") == lead)["goodput_requests_per_s"].mean() if low.height else None
    gb = low.filter(pl.col("engine") == other)["goodput_requests_per_s"].mean() if low.height else None
    if not (ga and gb):
        return None
    at = (
        f"{low['load_level'][0]:g} in flight (the lowest load measured), "
        f"{context_name(first['context_label'], first['context_tokens'])}, {first['mem_util']:g}"
    )
    count = pl.col("repeat").n_unique() if "repeat" in low.columns else pl.len()
    grade = cpu_cross_engine(
        lead,
        other,
        curve.filter(pl.col("engine").is_in([lead, other]))["device_kind"].to_list(),
        baseline=ga / gb,
        baseline_at=at,
        n=int(low.group_by("engine").agg(count)[:, 1].min()),
        scope=first["hardware"],
    )
    if grade is None:
        return None
    # the lowest load's ratio, where load plays no part: no leader is named under a verdict that cannot decide
    number = f"goodput ratio {sig2(grade.value)}× at {at}"
    return grade.verdict(claim, number, claim_id="capacity_goodput_map", kind=KIND)


def _cell_grades(cells: pl.DataFrame, lead: str) -> list[Grade]:
    """Rule 2 per cell: the lead engine's goodput over its repeats against the other's."""
    grades = []
    for r in cells.iter_rows(named=True):
        sides = {r["winner"]: "winner", r["runner_up"]: "runner_up"}
        if r["margin"] is None or lead not in sides or len(sides) < 2:
            continue
        a, b = sides[lead], sides[r["runner_up"] if r["winner"] == lead else r["winner"]]

        def reps(side: str, r: dict = r) -> Repeats:
            return Repeats.summary(
                r[f"{side}_goodput_requests_per_s"], r[f"{side}_goodput_min"], r[f"{side}_goodput_max"],
                r[f"{side}_repeats"],
            )  # fmt: skip

        what = f"{context_name(r['context_label'], r['context_tokens'])}, {r['mem_util']:g}"
        grades.append(measured_difference(reps(a), reps(b), "higher", what=what, scope=r["hardware"]))
    return grades


def _map_grade(ev: Evidence) -> Verdict:
    cid = "capacity_goodput_map"
    cells = ev.gmap.filter(pl.col("winner").is_not_null()) if not ev.gmap.is_empty() else ev.gmap
    if cells.is_empty():
        return _untestable(
            cid,
            "no context × memory setting measured with two engines within the SLO"
            if not ev.curve.is_empty()
            else "no capacity run stored",
        )
    lead, other, summary = _lead(cells)
    claim = f"{CLAIMS[cid]} (here {engine_label(lead)} against {engine_label(other)})"
    if (cpu := _cpu_map(ev, cells, lead, other, claim)) is not None:
        return cpu
    grades = _cell_grades(cells, lead)
    if not grades:
        return Verdict(
            claim,
            "inconclusive",
            "measured",
            f"{summary}; only one engine met the SLO at each",
            claim_id=cid,
            kind=KIND,
            n=int(cells["n"].min()) if "n" in cells.columns else None,
            reason="only one engine met the SLO at each setting",
        )
    return combined(grades).verdict(claim, summary, claim_id=cid, kind=KIND)


def map_check(ev: Evidence) -> Verdict:
    """The map as a cross-engine claim: CPU runs of two implementations never decide it (rule 1); GPU runs by rule 2
    per cell, combined across cells (mixed leaders: inconclusive). A leader whose accuracy probe differs clearly
    from its engine's reference configuration (:func:`probe_note`) cannot win silently: the reason names it first,
    and a verdict that would stand is inconclusive instead."""
    v = _map_grade(ev)
    note, flagged = probe_note(ev.gmap)
    if flagged:
        outcome = "inconclusive" if v.outcome in ("reproduced", "contradicted") else v.outcome
        return replace(v, outcome=outcome, reason=f"{note}; {v.reason}")
    return replace(v, reason=f"{v.reason}; {note}") if note else v


# --------------------------------------------------------------------------- the model's ceiling on the GPU host


def ranged(value: int, lo: int | None, hi: int | None) -> str:
    """A modelled count with its range over the assumption sets: '11–25' where the default set gives the low end,
    '30 (25–40)' where it lies inside, '11' where the sets agree."""
    if lo is None or hi is None or lo == hi:
        return f"{value:,}"
    return f"{lo:,}–{hi:,}" if value == lo else f"{value:,} ({lo:,}–{hi:,})"


def modelled_check(ev: Evidence, fit=None) -> Verdict:
    """The model's ceiling at the longest context, per configuration and memory setting, each with its range over
    the KV format and MLA width: the report's own answer for the GPU host (*found*, evidence modelled). It stands
    only while the model passes its held-out test (``fit``: default the published fit), else it is an
    illustration, *inconclusive* (:func:`kvlab.claims.grading.held_out_gate`)."""
    cid = "capacity_modelled_ceiling"
    modelled = ev.modelled
    fit = fit if fit is not None else published_fit()
    contexts = sorted(fit.residuals["context_tokens"].unique().to_list())
    outcome, why, limit = held_out_gate(
        "found", *winners_held_out(fit), model_margin(fit, contexts) or 0.0, held_out_error(fit)
    )
    ctx = modelled["context_tokens"].max()
    at = modelled.filter(pl.col("context_tokens") == ctx).sort("dcp", "mem_util")
    parts = [
        f"{config_label(r['engine'], r['tp'], r['dcp'])} at {r['mem_util']:g}: "
        + ranged(r["concurrency_ceiling"], r.get("concurrency_ceiling_lo"), r.get("concurrency_ceiling_hi"))
        + ("" if r["fits"] else " (flagged by the memory check)")
        for r in at.iter_rows(named=True)
    ]
    first = at.row(0, named=True)
    over = f" (ranges over {first['assumption_sets']})" if "assumption_sets" in at.columns else ""
    return Verdict(
        f"{CLAIMS[cid]} ({tokens_label(ctx)})",
        outcome,
        "modelled",
        f"{'; '.join(parts)} requests at {tokens_label(ctx)}{over}",
        claim_id=cid,
        kind=KIND,
        value=float(first["concurrency_ceiling"]),
        unit="requests",
        n=1,  # one assumption set, the default; the ranges over the others are in the number
        scope=f"kvlab's physical model, {first['model']} on {first['tp']}× {first['gpu']}",
        limit=limit,
        family="own",
        reason=(f"{why}; " if why else "") + "modelled KV pool in tokens ÷ context (never measured here)",
    )


#: Each question's check, by claim id (the order the verdict table lists them in).
CHECKS = {
    "capacity_ceiling_memory": ceiling_check,
    "capacity_queueing_past_ceiling": queueing_check,
    "capacity_goodput_map": map_check,
    "capacity_modelled_ceiling": modelled_check,
}


def capacity_verdicts(ev: Evidence) -> tuple[Verdict, ...]:
    """Report 07's verdicts, one per question of :data:`CHECKS`."""
    return tuple(check(ev) for check in CHECKS.values())


def by_id(verdicts) -> dict[str, Verdict]:
    return {v.claim_id: v for v in verdicts}
