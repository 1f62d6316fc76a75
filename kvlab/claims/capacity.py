"""KV capacity beside its prediction: the physical model's concurrency ceiling (kvlab.perfmodel.memory) per DCP size,
memory target and context, on the definition the measured runs use (kvlab.analysis.concurrency_ceiling: pool //
tokens per request), so the two stand side by side (docs/design.md, "Load definitions", KV capacity)."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from kvlab import analysis
from kvlab.claims.grading import (
    CONFIGURED,
    NOTHING_MEASURED,
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
from kvlab.perfmodel.pools import concurrency_ceilings
from kvlab.perfmodel.roofline import Assumptions
from kvlab.tables import span
from kvlab.units import scaled_context, sig2, tokens_label
from kvlab.verdicts import Verdict


def modelled_ceilings(
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp_sizes: tuple[int, ...] = (1, 8),
    mem_utils: tuple[float, ...] = (0.92, 0.95),
    contexts: tuple[int, ...] = (65536, 131072, 204800),
    assumptions: Assumptions | None = None,
) -> pl.DataFrame:
    """The physical model's concurrency ceiling (kvlab.perfmodel.memory), source "modelled", per DCP size x memory
    target x context: ``kv_pool_tokens`` (the pool the model predicts, in tokens, the figure engines log),
    ``pool_ceiling`` = that // context (the definition :func:`kvlab.analysis.run_ceilings` gives measured runs,
    whose tiny model has no linear-attention state) and ``concurrency_ceiling`` = ``max_concurrent_seqs``, the
    model's own count, which also charges each sequence its linear-attention state (Kimi-K3's KDA layers): the one
    ceiling every page prints (report 03's headroom shows the same count), from each engine's own pools
    (:func:`kvlab.perfmodel.pools.concurrency_ceilings`, the function report 03's headroom reads too, so the two pages
    agree); ``limited_by`` says which pool sets it; ``fits`` and ``reason`` are the model's memory check. DCP 1 is
    modelled as vLLM, DCP > 1 as SGLang. The defaults are the GPU
    host's capacity question: Kimi-K3 on 8 x B300 at the contexts and memory targets of
    data/experiments/b300_capacity.yaml."""
    # the one function every modelled ceiling comes from (report 03's headroom too): per-engine pools
    t = concurrency_ceilings(gpu, model, mem_utils, dcp_sizes, contexts, assumptions or Assumptions(), tp)
    ceiling = [analysis.concurrency_ceiling(k, c) for k, c in zip(t["kv_capacity_tokens"], t["context_tokens"])]
    return t.select(
        "source",
        "gpu",
        "model",
        "engine",
        "tp",
        "dcp",
        "mem_util",
        "context_tokens",
        pl.col("kv_capacity_tokens").alias("kv_pool_tokens"),
        pl.Series("pool_ceiling", ceiling, dtype=pl.Int64),
        pl.col("max_concurrent_seqs").alias("concurrency_ceiling"),
        "max_concurrent_seqs",
        "limited_by",
        "fits",
        "reason",
    )


# --------------------------------------------------------------------------- report 07's verdicts

#: Report 07's questions, each a verdict row (no document states them: they are the capacity study's own).
CEILING_CLAIM = (
    "capacity_ceiling_memory",
    "A higher memory setting raises each engine's concurrency ceiling (its "
    "reported KV pool ÷ tokens per request), at every context measured",
)
QUEUE_CLAIM = (
    "capacity_queueing_past_ceiling",
    "Loaded past its concurrency ceiling, a server queues requests "
    "(its waiting queue, sampled during the run, rises above 0)",
)
MAP_CLAIM = (
    "capacity_goodput_map",
    "One engine carries more goodput within the SLO than the other at every context × memory setting (the map)",
)
MODELLED_CLAIM = (
    "capacity_modelled_ceiling",
    "The concurrency ceiling of Kimi-K3 on 8× B300 at the longest context, per engine configuration and memory setting",
)


def _where(r: dict) -> str:
    return f"{engine_label(r['engine'])} at {scaled_context(r['context_label'], r['context_tokens'])}"


def _per_repeat(g: pl.DataFrame) -> Repeats:
    """The ceilings of one engine x context x memory setting, one per repeat index (rule 2's n): the load steps of a
    repeat share one server start and so one reported pool; they are one repeat, not several."""
    reps = g["repeat"].to_list() if "repeat" in g.columns else [None] * g.height
    return Repeats.per_repeat(g["concurrency_ceiling"].to_list(), reps)


def _budgets_said(d: pl.DataFrame, budgets: pl.DataFrame) -> str:
    """Each memory setting's KV budget as the experiment file sets it, in MiB and in the tokens the engines' pools
    held (their reported KV pools, a range over the engines), and the ratio of the highest to the lowest: '0.92:
    12 MiB, 12,101–12,288 tokens; 0.95: 13.6 MiB, 13,740–13,952 tokens; 1.14× the lowest' (issue 39: what 0.92
    against 0.95 means on this host)."""
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
        pool = "" if lo is None else f", {span(lo, hi, '{:,}'.format)} tokens"
        parts.append(f"{r['mem_util']:g}: {mib}{pool}")
    least = [min(b) for b in budgets["kv_budget_bytes"].to_list()]
    ratio = f"; {least[-1] / least[0]:.2f}× the lowest" if len(least) > 1 and least[0] else ""
    return "; ".join(parts) + ratio


def ceiling_verdict(points: pl.DataFrame) -> Verdict:
    """Whether the measured ceiling moves with the memory setting, within each engine (rule 2): per engine x
    context measured at two or more memory settings, the ceilings at the highest setting against those at the
    lowest, one per repeat index (each run records its server's reported KV pool; the load steps of one repeat
    share a server start and count once), combined across engines and contexts (their signs must agree). No pair: *cannot be tested here*."""
    cid, claim = CEILING_CLAIM
    d = points.filter(pl.col("concurrency_ceiling").is_not_null()) if not points.is_empty() else points
    grades, parts = [], []
    for (engine, ctx, label), g in (
        d.group_by(["engine", "context_tokens", "context_label"], maintain_order=True) if not d.is_empty() else []
    ):
        mems = sorted(g["mem_util"].drop_nulls().unique().to_list())
        if len(mems) < 2:
            continue
        hi, lo = (g.filter(pl.col("mem_util") == m) for m in (mems[-1], mems[0]))
        where = _where({"engine": engine, "context_tokens": ctx, "context_label": label})
        cpu = on_cpu(g["device_kind"][0])
        grades.append(
            measured_difference(
                *(_per_repeat(s) for s in (hi, lo)),
                "higher",
                what=where,
                scope=("CPU: a stated KV budget per memory setting" if cpu else g["hardware"][0])
                + "; n counts repeats of each setting, not the load steps that share one server start",
            )
        )
        hi, lo = hi["concurrency_ceiling"].to_list(), lo["concurrency_ceiling"].to_list()
        parts.append((ctx, f"{where}: {min(lo)} → {min(hi)} requests ({mems[0]:g} → {mems[-1]:g})"))
    if not grades:
        return Verdict(
            claim,
            "cannot be tested here",
            "measured",
            "no engine measured at two memory settings with a reported KV pool",
            claim_id=cid,
            kind="capacity",
            n=0,
            scope="nothing measured to test it",
            limit=NOTHING_MEASURED,
            reason="no engine measured at two memory settings with a reported KV pool",
        )
    g = combined(grades)
    number = "; ".join(p for _, p in sorted(parts, key=lambda p: p[0]))
    budgets = (
        d.filter(pl.col("mem_util").is_not_null())
        .group_by("mem_util")
        .agg(pl.col("kv_budget_bytes").unique())
        .sort("mem_util")
        if "kv_budget_bytes" in d.columns
        else None
    )
    if budgets is not None and d["kv_budget_bytes"].null_count() == 0:
        # every run's KV pool is a budget the experiment file sets per memory setting: the ceiling follows it by
        # construction, so it is shown as configuration, not graded (more repeats cannot change it)
        said = _budgets_said(d, budgets)
        g = replace(
            g,
            outcome="configured",
            limit=CONFIGURED,
            reason=f"the experiment file sets each memory setting's KV budget ({said}), so the ceiling "
            "follows the configuration by construction: shown, not graded",
        )
    return g.verdict(claim, number, claim_id=cid, kind="capacity")


def queueing_verdict(points: pl.DataFrame) -> Verdict:
    """Whether the load points past their ceiling queued (telemetry ``requests_waiting`` > 0): a count the claim
    bounds, decided over at least MIN_REPEATS such points (:func:`kvlab.claims.grading.counted`); the points below
    the ceiling that queued are said beside it. No point past the ceiling with the queue sampled: *cannot be
    tested here*, saying which is missing."""
    cid, claim = QUEUE_CLAIM
    seen = points.filter(pl.col("queued").is_not_null()) if not points.is_empty() else points
    past = seen.filter(pl.col("past_ceiling").fill_null(False)) if not seen.is_empty() else seen
    if past.is_empty():
        why = (
            "no capacity run stored"
            if points.is_empty()
            else "no run sampled its server's waiting queue"
            if seen.is_empty()
            else "no load point past its concurrency ceiling had its waiting queue sampled"
        )
        return Verdict(
            claim,
            "cannot be tested here",
            "measured",
            why,
            claim_id=cid,
            kind="capacity",
            n=0,
            scope="nothing measured to test it",
            limit=NOTHING_MEASURED,
            reason=why,
        )
    queued = past.filter(pl.col("queued"))
    below = seen.filter(pl.col("past_ceiling") == False)  # noqa: E712 - a polars comparison
    below_q = below.filter(pl.col("queued")).height
    first = past.sort("context_tokens", "mem_util", "engine", "load_level").row(0, named=True)
    # n: distinct repeats behind the points past the ceiling, per engine, the fewer (load steps of one server start
    # are one repeat; engines are not summed)
    n = min(int(g["repeat"].n_unique()) if "repeat" in g.columns else g.height for _, g in past.group_by("engine"))
    grade = counted(
        queued.height == past.height,
        n,
        reason=f"{queued.height} of {past.height} load points past the ceiling queued, over n={n} repeats per engine",
        value=queued.height / past.height,
        unit="of the points past the ceiling",
        scope="CPU, tiny model" if on_cpu(first["device_kind"]) else first["hardware"],
    )
    number = (
        f"{queued.height} of {past.height} load points past the ceiling queued (e.g. {_where(first)}, "
        f"{first['load_level']:g} in flight against a ceiling of {first['concurrency_ceiling']}: "
        f"{'up to ' + format(first['waiting_peak'], 'g') + ' waiting' if first['queued'] else 'none waiting'}); "
        f"{below_q} of {below.height} below or at it"
    )
    return grade.verdict(claim, number, claim_id=cid, kind="capacity")


def _config(engine: str, tp: int | None, dcp: int | None) -> str:
    return f"{engine_label(engine)} TP{tp or 1}" + (f"+DCP{dcp}" if (dcp or 1) > 1 else "")


def probe_note(gmap: pl.DataFrame) -> tuple[str, bool]:
    """What the accuracy probe says of the map's winners (analysis.goodput_map's ``winner_probe``): the cells whose
    winner's greedy output differs clearly from its engine's reference configuration, each named (True: some did);
    else whether the winners were probed and matched."""
    cells = gmap.filter(pl.col("winner").is_not_null()) if "winner" in gmap.columns else gmap.clear()
    if cells.is_empty() or "winner_probe" not in cells.columns:
        return "", False
    flagged = [r for r in cells.iter_rows(named=True) if r["winner_differs"]]
    if flagged:
        return (
            "; ".join(
                f"the winner at {scaled_context(r['context_label'], r['context_tokens'])}, {r['mem_util']:g} "
                f"({_config(r['winner'], r['winner_tp'], r['winner_dcp'])}) {r['winner_probe']} in the "
                "accuracy probe against its engine's reference configuration"
                for r in flagged
            )
            + ": fast, but not computing what the reference computes, so the map does not stand on "
            + ("it" if len(flagged) == 1 else "them")
        ), True
    said = cells["winner_probe"].to_list()
    if all(p == analysis.NOT_PROBED for p in said):
        return "the winners' greedy outputs were not probed (probe: true in the experiment file compares them)", False
    unprobed = sum(p == analysis.NOT_PROBED for p in said)
    return (
        "no winner's greedy output differed clearly from its engine's reference configuration in the accuracy "
        "probe" + (f" ({unprobed} of {len(said)} winners not probed)" if unprobed else "")
    ), False


def map_verdict(curve: pl.DataFrame, gmap: pl.DataFrame) -> Verdict:
    """The map as a cross-engine claim (the engine with more goodput at most cells carries more at every one): CPU
    runs of two implementations never decide it (rule 1: quoted is the goodput ratio at the lowest load measured, at
    the first cell, where load plays no part); GPU runs by rule 2 per cell (goodput over the repeats at each engine's
    highest load within the SLO), combined across cells (mixed winners: inconclusive).

    A winner whose accuracy probe differs clearly from its engine's reference configuration (:func:`probe_note`)
    cannot win silently: the reason names it first, and a verdict that would stand (reproduced or contradicted)
    is inconclusive instead; otherwise the reason ends with what the probe said (or that it was not sent)."""
    v = _map_verdict(curve, gmap)
    note, flagged = probe_note(gmap)
    if flagged:
        return replace(
            v,
            outcome="inconclusive" if v.outcome in ("reproduced", "contradicted") else v.outcome,
            reason=f"{note}; {v.reason}",
        )
    return replace(v, reason=f"{v.reason}; {note}") if note else v


def _map_verdict(curve: pl.DataFrame, gmap: pl.DataFrame) -> Verdict:
    cid, claim = MAP_CLAIM
    cells = gmap.filter(pl.col("winner").is_not_null()) if not gmap.is_empty() else gmap
    if cells.is_empty():
        why = (
            "no context × memory setting measured with two engines within the SLO"
            if not curve.is_empty()
            else "no capacity run stored"
        )
        return Verdict(
            claim,
            "cannot be tested here",
            "measured",
            why,
            claim_id=cid,
            kind="capacity",
            n=0,
            scope="nothing measured to test it",
            limit=NOTHING_MEASURED,
            reason=why,
        )
    wins: dict[str, int] = {}
    for w in cells["winner"].to_list():
        wins[w] = wins.get(w, 0) + 1
    lead = max(sorted(wins), key=lambda e: wins[e])
    first = cells.row(0, named=True)
    other = first["runner_up"] if first["winner"] == lead else first["winner"]
    summary = f"{engine_label(lead)} ahead at {wins[lead]} of {cells.height} context × memory settings"
    claim_here = f"{claim} — here {engine_label(lead)} against {engine_label(other)}"
    base = curve.filter(
        pl.col("engine").is_in([lead, other])
        & (pl.col("context_tokens") == first["context_tokens"])
        & (pl.col("mem_util") == first["mem_util"])
    )
    low = base.filter(pl.col("load_level") == base["load_level"].min()) if not base.is_empty() else base
    ga = low.filter(pl.col("engine") == lead)["goodput_requests_per_s"].mean() if low.height else None
    gb = low.filter(pl.col("engine") == other)["goodput_requests_per_s"].mean() if low.height else None
    if ga and gb:
        at = (
            f"{low['load_level'][0]:g} in flight (the lowest load measured), "
            f"{scaled_context(first['context_label'], first['context_tokens'])}, {first['mem_util']:g}"
        )
        grade = cpu_cross_engine(
            lead,
            other,
            curve.filter(pl.col("engine").is_in([lead, other]))["device_kind"].to_list(),
            baseline=ga / gb,
            baseline_at=at,
            n=int(
                low.group_by("engine")
                .agg(pl.col("repeat").n_unique() if "repeat" in low.columns else pl.len())[:, 1]
                .min()
            ),
            scope=first["hardware"],
        )
        if grade is not None:
            return grade.verdict(
                claim_here,
                f"{engine_label(lead if ga >= gb else other)} already {sig2(grade.value)}× "
                f"the goodput at {at}; {summary}",
                claim_id=cid,
                kind="capacity",
            )
    grades = []
    for r in cells.iter_rows(named=True):
        if r["margin"] is None:
            continue
        sides = {r["winner"]: "winner", r["runner_up"]: "runner_up"}
        if lead not in sides or len(sides) < 2:
            continue
        a, b = sides[lead], sides[r["runner_up"] if r["winner"] == lead else r["winner"]]

        def reps(side: str, r: dict = r) -> Repeats:
            return Repeats.summary(
                r[f"{side}_goodput_requests_per_s"],
                r[f"{side}_goodput_min"],
                r[f"{side}_goodput_max"],
                r[f"{side}_repeats"],
            )

        grades.append(
            measured_difference(
                reps(a),
                reps(b),
                "higher",
                what=f"{scaled_context(r['context_label'], r['context_tokens'])}, {r['mem_util']:g}",
                scope=r["hardware"],
            )
        )
    if not grades:
        return Verdict(
            claim_here,
            "inconclusive",
            "measured",
            f"{summary}; only one engine met the SLO at each",
            claim_id=cid,
            kind="capacity",
            n=int(cells["n"].min()) if "n" in cells.columns else None,
            reason="only one engine met the SLO at each setting",
        )
    return combined(grades).verdict(claim_here, summary, claim_id=cid, kind="capacity")


def modelled_verdict(modelled: pl.DataFrame, fit=None) -> Verdict:
    """The model's ceiling at the longest context, per configuration and memory setting: the report's own answer for
    the GPU host (*found*, evidence modelled), with where the model's memory check fails. Like every modelled
    answer it stands only while the model passes its held-out test (``fit``: the calibration; default the published
    fit), else it is an illustration, *inconclusive* (:func:`kvlab.claims.grading.held_out_gate`)."""
    fit = fit if fit is not None else published_fit()
    contexts = sorted(fit.residuals["context_tokens"].unique().to_list())
    outcome, why, limit = held_out_gate(
        "found", *winners_held_out(fit), model_margin(fit, contexts) or 0.0, held_out_error(fit)
    )
    cid, claim = MODELLED_CLAIM
    ctx = modelled["context_tokens"].max()
    at = modelled.filter(pl.col("context_tokens") == ctx).sort("dcp", "mem_util")
    parts = [
        f"{engine_label(r['engine'])} TP{r['tp']}{'+DCP' + str(r['dcp']) if r['dcp'] > 1 else ''} at "
        f"{r['mem_util']:g}: {r['concurrency_ceiling']:,}" + ("" if r["fits"] else " (fails the memory check)")
        for r in at.iter_rows(named=True)
    ]
    first = at.row(0, named=True)
    return Verdict(
        f"{claim} ({tokens_label(ctx)})",
        outcome,
        "modelled",
        f"{'; '.join(parts)} requests at {tokens_label(ctx)}",
        claim_id=cid,
        kind="capacity",
        value=float(first["concurrency_ceiling"]),
        unit="requests",
        n=1,  # one assumption set
        scope=f"kvlab's physical model, {first['model']} on {first['tp']}× {first['gpu']}",
        limit=limit,
        family="own",
        reason=(f"{why}; " if why else "") + "modelled KV pool in tokens ÷ context (never measured here)",
    )


def capacity_verdicts(
    curve: pl.DataFrame, points: pl.DataFrame, gmap: pl.DataFrame, modelled: pl.DataFrame
) -> list[Verdict]:
    """Report 07's verdicts: the ceiling against the memory setting and queueing past it (within each engine: what
    CPU runs can decide), the map (cross-engine: rule 1 on a CPU) and the model's B300 ceiling (found, modelled)."""
    return [ceiling_verdict(points), queueing_verdict(points), map_verdict(curve, gmap), modelled_verdict(modelled)]
