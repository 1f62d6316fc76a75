"""Memory-setting claims (report 03): the B300 article's claims about the memory-utilisation target (the higher
setting caused OOM retries; the lower one removed them and stabilised run time, at slightly higher latency), graded
against :func:`kvlab.analysis.memory_study` / :func:`kvlab.analysis.memory_comparison` and the physical model's
headroom, by the rules of :mod:`kvlab.claims.grading`."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from kvlab.claims.grading import (
    ASSUMED_FROM_CLAIM,
    FEW_REPEATS,
    MIN_REPEATS,
    NO_GPU_MEMORY,
    NOTHING_MEASURED,
    UNRECORDED_DEVICE,
    Repeats,
    combined,
    measured_difference,
)
from kvlab.engines import engine_label, registry
from kvlab.perfmodel.roofline import Assumptions
from kvlab.units import scaled_context, signed_pct
from kvlab.verdicts import Verdict


def _setting_of(row: dict) -> str | None:
    if row.get("kv_budget_bytes") is not None:
        return "kv_budget"
    kind = row.get("device_kind")
    if kind is None and "device_kind" not in row and "gpu_count" in row:  # a hand-built frame without the column
        kind = "gpu" if (row.get("gpu_count") or 0) > 0 else "cpu"
    return {"cpu": "host_reserve", "gpu": "gpu"}.get(kind)


def memory_setting(runs: pl.DataFrame) -> str | None:
    """What the measured runs' memory setting means, by how each run was configured (RUNS ``kv_budget_bytes`` and
    ``device_kind``, recorded per run; never guessed from a GPU count or a hardware label):

    - ``kv_budget``: an explicit KV-cache budget was configured (CPU runs: a simulated device), so a lower setting
      only means less KV room;
    - ``host_reserve``: a CPU run without one (data/experiments/host_memory_reserve.yaml): vLLM's CPU build reserves
      the setting's share of host memory and refuses to start when that much is not free;
    - ``gpu``: the engine's own memory-utilisation target on GPUs;
    - ``mixed``: the runs disagree (several experiments of different kinds);

    None without measured runs or where no run says how it was configured."""
    m = runs.filter(pl.col("source") == "measured") if "source" in runs.columns else runs
    kinds = {_setting_of(r) for r in m.iter_rows(named=True)} - {None}
    if not kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mixed"


def kv_budget_simulated(runs: pl.DataFrame) -> bool:
    """Whether the measured runs' memory setting is a simulated KV-cache budget: every run configured an explicit
    KV budget (RUNS ``kv_budget_bytes``; see data/experiments/cpu_long_context.yaml)."""
    return memory_setting(runs) == "kv_budget"


def short_outside_pool(row: dict) -> bool:
    """Whether a headroom row (:func:`kvlab.perfmodel.figures.headroom_table`) leaves less memory outside the target
    than the model's assumed need there (False where either is unknown)."""
    left, need = row.get("outside_pool_gib_per_gpu"), row.get("outside_need_gib_per_gpu")
    return left is not None and need is not None and left < need


def fails_outside_pool(row: dict) -> bool:
    """Whether a headroom row fails the model's memory check only for what it leaves outside the target: the
    weights fit and at least one sequence does (so the KV room is there), but less than the assumed need is left
    outside the pool — the roofline's own order of reasons (:func:`kvlab.perfmodel.roofline.memory`)."""
    return row.get("fits") is False and (row.get("max_concurrent_seqs") or 0) >= 1 and short_outside_pool(row)


def headroom_pairs(head: list[dict], by: str, first, second) -> list[dict]:
    """The modelled headroom (``head``: :func:`kvlab.perfmodel.figures.headroom_table`'s row dicts) at two values of
    ``by`` (``mem_util`` or ``dcp``) side by side: one row per matching configuration (the other of dcp / mem_util,
    and the context) with ``a`` (sequences at ``first``) and ``b`` (at ``second``), where ``a`` > 0."""
    other = "dcp" if by == "mem_util" else "mem_util"
    keys = (other, "context_tokens")
    return [
        {
            other: a[other],
            "context_tokens": a["context_tokens"],
            "a": a["max_concurrent_seqs"],
            "b": b["max_concurrent_seqs"],
        }
        for a in head
        if a[by] == first
        for b in head
        if b[by] == second and all(a[k] == b[k] for k in keys) and (a["max_concurrent_seqs"] or 0) > 0
    ]


def headroom_by_config(head: list[dict]) -> list[dict]:
    """The modelled headroom (row dicts) per DCP size and context, in the table's order: ``dcp``,
    ``context_tokens`` and ``settings``, the (mem_util, max_concurrent_seqs) pairs lowest setting first."""
    groups: dict[tuple, list[dict]] = {}
    for r in head:
        groups.setdefault((r["dcp"], r["context_tokens"]), []).append(r)
    return [
        {
            "dcp": dcp,
            "context_tokens": ctx,
            "settings": [(r["mem_util"], r["max_concurrent_seqs"]) for r in sorted(g, key=lambda r: r["mem_util"])],
        }
        for (dcp, ctx), g in groups.items()
    ]


def stats_row(stats: list[dict], r: dict, mem_util: float) -> dict | None:
    """The memory-study row (``stats``: :func:`kvlab.analysis.memory_study`'s row dicts) of ``r``'s engine and
    context at ``mem_util``."""
    return next(
        (
            s
            for s in stats
            if s["engine"] == r["engine"] and s["context_tokens"] == r["context_tokens"] and s["mem_util"] == mem_util
        ),
        None,
    )


def memory_claim_verdicts(
    claims: pl.DataFrame,
    stats: pl.DataFrame,
    cmp: pl.DataFrame,
    head: pl.DataFrame | None = None,
    simulated: bool | str = True,
) -> list:
    """The memory-setting claims (the B300 article's: at 0.95, OOM retries with either engine; lowering the target
    to 0.92 removed the retries, stabilised run time, and came at slightly higher latency) against the measured
    memory study and, for the retries claim, the physical model. Each claim row says what it is about in its
    structured fields — ``setting``, ``metric`` (oom_retries, batch_time_spread, e2e_latency) and ``direction``
    (some / none / lower / higher) — never in its statement. ``simulated``: the runs' setting is a simulated KV
    budget (no GPU), so the OOM-driven parts cannot be tested; the latency part compares each engine with itself at
    the two settings and is graded by rule 2 of :mod:`kvlab.claims.grading` (n ≥ 3 per side, ranges apart, one
    sign across engines and metrics). ``simulated`` may name the setting instead (:func:`memory_setting`): True is
    ``kv_budget``, False ``gpu``, None (runs that record neither) unknown; ``host_reserve`` (vLLM's CPU memory
    reserve), ``mixed`` and unknown cannot test the OOM parts either: only runs recorded as on GPUs can."""

    out = []
    stats_rows = stats.to_dicts()
    us = sorted(stats["mem_util"].unique().to_list()) if stats.height else []
    lo, hi = (us[0], us[-1]) if us else (None, None)
    setting = (
        simulated
        if isinstance(simulated, str)
        else "unknown"
        if simulated is None
        else "kv_budget"
        if simulated
        else "gpu"
    )  # None: runs that record neither budget nor device
    simulated = setting != "gpu"  # the OOM parts need GPU memory outside the KV pool
    what = {
        "kv_budget": "a simulated KV-cache budget",
        "host_reserve": "vLLM's CPU memory reserve, checked at start-up against this host's free memory",
        "mixed": "not one thing across these runs (KV budgets and host-memory reserves)",
        "unknown": "not recorded for these runs (neither a KV budget nor the device they ran on)",
    }.get(setting, "")
    host = (
        f"on this host the setting is {what}, so the GPU memory outside the KV pool, where those OOMs arise, is "
        "not exercised"
        if simulated
        else "measured on this host's GPUs"
    )
    scope = {
        "kv_budget": "CPU, simulated KV-cache budget",
        "host_reserve": "CPU, host-memory reserve",
        "mixed": "CPU, mixed memory settings",
        "unknown": "runs without a recorded device or KV budget",
    }.get(setting, "this host's GPUs")
    untestable = (
        f"the setting here is {what}: the GPU memory outside the KV pool, where the claimed OOMs arise, is "
        "not exercised"
    )
    less = {
        "kv_budget": "a smaller simulated KV budget, so fewer requests run at once",
        "host_reserve": "a smaller host-memory reserve",
        "mixed": "a lower setting",
        "unknown": "a lower setting",
    }.get(setting, "")
    none_here = {
        "kv_budget": "simulated KV budget",
        "host_reserve": "host-memory reserve",
        "mixed": "no GPU",
        "unknown": "device not recorded",
    }.get(setting, "")
    no_gpu = UNRECORDED_DEVICE if setting == "unknown" else NO_GPU_MEMORY  # the cause of an untestable OOM part

    def retries(u: float) -> tuple[int, int, list[str]]:
        s = stats.filter(pl.col("mem_util") == u)
        per = (
            s.group_by("engine")
            .agg(pl.col("retries").sum())
            .sort(pl.col("engine").map_elements(engine_rank, return_dtype=pl.Int64))
        )
        return (int(s["retries"].sum()), int(s["runs"].sum()), [f"{engine_label(e)} {n}" for e, n in per.iter_rows()])

    def two_settings() -> bool:
        return lo is not None and lo != hi

    for c in claims.filter(pl.col("kind") == "memory").iter_rows(named=True):
        cid, statement = c["claim_id"], c["statement"]
        u, metric, direction = c.get("setting"), c.get("metric"), c.get("direction")
        caused = metric == "oom_retries" and direction == "some"  # the setting causes retries
        lowered = (
            (metric == "oom_retries" and direction == "none")
            or metric == "batch_time_spread"
            or metric == "e2e_latency"
        )  # what lowering the target to ``setting`` does

        def V(claim, outcome, evidence, number, reason, **kw):  # noqa: N802 - a verdict of this claim
            kw.setdefault("scope", scope if evidence == "measured" else "model fitted to the published table")
            # n: the runs behind a measured row (0 where none was measured); for the model's memory check, the one
            # assumption set it is evaluated under
            kw.setdefault("n", 0 if evidence == "measured" else 1)
            return Verdict(claim, outcome, evidence, number, claim_id=cid, kind="memory_setting", reason=reason, **kw)

        if stats.is_empty() and (caused or lowered):
            out.append(
                V(
                    statement,
                    "cannot be tested here",
                    "measured",
                    "no measured run with a memory setting",
                    "no measured run with a memory setting",
                    limit=NOTHING_MEASURED,
                )
            )
            if lowered:
                continue
        if caused:
            u = u or hi
            if u not in us:
                if us:
                    out.append(
                        V(
                            statement,
                            "cannot be tested here",
                            "measured",
                            f"no measured run at {u:g}",
                            f"no measured run at {u:g}",
                            limit=NOTHING_MEASURED,
                        )
                    )
            else:
                n, runs, per = retries(u)
                every = stats.filter(pl.col("mem_util") == u).group_by("engine").agg(pl.col("retries").sum())
                fewest = int(
                    stats.filter(pl.col("mem_util") == u).group_by("engine").agg(pl.col("runs").sum())["runs"].min()
                )
                outcome = (
                    "cannot be tested here"
                    if simulated
                    else "inconclusive"
                    if fewest < MIN_REPEATS
                    else "reproduced"
                    if (every["retries"] > 0).all()
                    else "contradicted"
                )
                out.append(
                    V(
                        f"{statement} — {host}",
                        outcome,
                        "measured",
                        f"{n} retr{'y' if n == 1 else 'ies'} in {runs} run{'' if runs == 1 else 's'} at {u:g} "
                        f"({', '.join(per)})",
                        untestable
                        if simulated
                        else f"n={fewest} runs for one engine, fewer than the {MIN_REPEATS} repeats a measured "
                        "verdict needs"
                        if fewest < MIN_REPEATS
                        else "retries counted at the claimed setting on GPUs",
                        value=float(n),
                        unit="retries",
                        n=fewest,
                        limit=no_gpu if simulated else FEW_REPEATS if fewest < MIN_REPEATS else "",
                    )
                )
            if head is not None and head.height and u in head["mem_util"].to_list():
                h = head.filter(pl.col("mem_util") == u)
                bad = [r for r in h.iter_rows(named=True) if fails_outside_pool(r)]
                value = None
                if bad:
                    r = bad[0]
                    need = r.get("outside_need_gib_per_gpu") or Assumptions().outside_pool_fraction * r[
                        "outside_pool_gib_per_gpu"
                    ] / (1 - u)
                    value = r["outside_pool_gib_per_gpu"]
                    number = (
                        f"{r['outside_pool_gib_per_gpu']:.1f} GiB/GPU left outside the target at {u:g} < {need:.1f} "
                        "GiB assumed need — an assumption taken from this claim"
                    )
                elif h["fits"].all():
                    number = (
                        f"every configuration fits at {u:g}; the model's memory check rests on an assumed need "
                        "set from this claim"
                    )
                else:
                    number = f"at {u:g}: {h.filter(~pl.col('fits'))['reason'][0]}"
                out.append(
                    V(
                        f"{statement} — kvlab's physical model",
                        "cannot be tested here",
                        "modelled",
                        number,
                        "the model's memory check rests on a need outside the pool chosen from this very claim",
                        value=value,
                        unit="GiB/GPU" if value is not None else "",
                        limit=ASSUMED_FROM_CLAIM,
                    )
                )
        elif lowered and not two_settings():
            out.append(
                V(
                    statement,
                    "cannot be tested here",
                    "measured",
                    "no engine measured at two settings",
                    "no engine measured at two settings",
                    limit=NOTHING_MEASURED,
                )
            )
        elif metric == "oom_retries":  # lowering the target removed the retries
            n_lo, _, _ = retries(lo)
            n_hi, _, _ = retries(hi)
            number = f"retries: {n_lo} at {lo:g}, {n_hi} at {hi:g}"
            fewest = int(stats.filter(pl.col("mem_util").is_in([lo, hi]))["runs"].min())  # per engine, context, setting
            counts = dict(value=float(n_lo), unit="retries", n=fewest)
            if simulated:
                out.append(
                    V(
                        f"{statement} — on this host there is no GPU OOM to remove ({none_here})",
                        "cannot be tested here",
                        "measured",
                        number,
                        untestable,
                        limit=no_gpu,
                        **counts,
                    )
                )
            elif n_hi == 0:
                out.append(
                    V(
                        f"{statement} — measured on this host's GPUs",
                        "cannot be tested here",
                        "measured",
                        number + f" (no retry at {hi:g} to remove)",
                        f"no retry at {hi:g} to remove",
                        **counts,
                    )
                )
            elif fewest < MIN_REPEATS:
                out.append(
                    V(
                        f"{statement} — measured on this host's GPUs",
                        "inconclusive",
                        "measured",
                        number,
                        f"fewer than {MIN_REPEATS} runs per engine and setting",
                        limit=FEW_REPEATS,
                        **counts,
                    )
                )
            else:
                out.append(
                    V(
                        f"{statement} — measured on this host's GPUs",
                        "reproduced" if n_lo == 0 else "contradicted",
                        "measured",
                        number,
                        f"retries counted at {lo:g} and {hi:g}",
                        **counts,
                    )
                )
        elif metric == "batch_time_spread":  # lowering the target stabilised run time
            spreads = []
            for r in cmp.iter_rows(named=True):
                a, b = stats_row(stats_rows, r, lo), stats_row(stats_rows, r, hi)
                if a and b and (a["runs_ok"] or 0) > 1 and (b["runs_ok"] or 0) > 1:
                    spreads.append((r, a["batch_time_cv"], b["batch_time_cv"]))
            lower = sum(x < y for _, x, y in spreads)
            number = (
                "spread: one run per setting"
                if not spreads
                else f"spread (CV) {spreads[0][1]:.1%} at {lo:g} vs {spreads[0][2]:.1%} at {hi:g}"
                if len(spreads) == 1
                else f"spread (CV) lower at {lo:g} in {lower} of {len(spreads)} engine–context pairs"
            )
            fewest = int(stats.filter(pl.col("mem_util").is_in([lo, hi]))["runs"].min())
            counts = dict(
                value=float(lower) if spreads else None, unit="pairs with a lower CV" if spreads else "", n=fewest
            )
            no_value = "" if spreads else "; one run per setting, so no spread to compare (no value)"
            if simulated:
                out.append(
                    V(
                        f"{statement} — on this host there is no GPU OOM whose retries unsettle run time ({none_here})",
                        "cannot be tested here",
                        "measured",
                        number,
                        untestable + no_value,
                        limit=no_gpu,
                        **counts,
                    )
                )
            elif not spreads or fewest < MIN_REPEATS:
                out.append(
                    V(
                        f"{statement} — measured on this host's GPUs",
                        "inconclusive",
                        "measured",
                        number,
                        f"fewer than {MIN_REPEATS} runs per engine and setting",
                        limit=FEW_REPEATS,
                        **counts,
                    )
                )
            else:
                out.append(
                    V(
                        f"{statement} — measured on this host's GPUs",
                        "reproduced" if lower > len(spreads) / 2 else "contradicted",
                        "measured",
                        number,
                        f"run-time spread over repeats compared at {lo:g} and {hi:g}",
                        **counts,
                    )
                )
        elif metric == "e2e_latency":  # lowering the target came at higher latency
            lat, parts = [], []
            at = cmp.filter(pl.col("context_tokens") == cmp["context_tokens"].max()) if cmp.height else cmp
            for r in sorted(at.iter_rows(named=True), key=lambda r: engine_rank(r["engine"])):
                a, b = stats_row(stats_rows, r, lo), stats_row(stats_rows, r, hi)
                if not (a and b and a["e2e_mean_ms"] and b["e2e_mean_ms"]):
                    continue
                lat.append((r, a["e2e_mean_ms"] / b["e2e_mean_ms"]))
                for m, what in (("e2e", "mean request latency"), ("ttft", "mean TTFT")):
                    if a[f"{m}_mean_ms"] and b[f"{m}_mean_ms"]:
                        parts.append(
                            measured_difference(
                                *(
                                    Repeats.summary(
                                        x[f"{m}_mean_ms"], x.get(f"{m}_min_ms"), x.get(f"{m}_max_ms"), x["runs_ok"]
                                    )
                                    for x in (a, b)
                                ),
                                direction or "higher",
                                what=f"{engine_label(r['engine'])} {what}, {lo:g} against {hi:g}",
                                scope=scope,
                            )
                        )
            claim = f"{statement} — " + (
                f"on this host {lo:g} is {less}: each engine against itself"
                if simulated
                else "measured on this host's GPUs"
            )
            if not lat:
                out.append(
                    V(
                        claim,
                        "cannot be tested here",
                        "measured",
                        "no latency measured at both settings",
                        "no latency measured at both settings",
                        limit=NOTHING_MEASURED,
                    )
                )
                continue
            r0 = lat[0][0]
            grade = combined(parts)
            number = (
                f"mean request latency at {lo:g} against {hi:g}, "
                f"{scaled_context(r0['context_label'], r0.get('context_tokens'))}: "
                + ", ".join(
                    f"{engine_label(r['engine'])} {signed_pct(x - 1)}"
                    for r, x in sorted(lat, key=lambda t: engine_rank(t[0]["engine"]))
                )
                + (f" (n={grade.n} per setting)" if grade.n is not None else "")
            )
            out.append(replace(grade.verdict(claim, number, claim_id=cid, kind="memory_setting"), scope=scope))
        else:
            out.append(
                V(
                    statement,
                    "cannot be tested here",
                    "measured",
                    "no test of this claim in this report",
                    "no test of this claim in this report",
                )
            )
    return out


def engine_rank(engine: str) -> int:
    """Engines in the order every report lists them (vLLM, SGLang, sglang-jax), unknown ones last."""
    return registry.order(engine)
