"""Report 03's checks: the memory-setting claims, one small function per claim kind, by the rules of
:mod:`kvlab.claims.grading`.

A claim is a row of the claims table; what it is about is in its structured fields (``kind``, ``setting``,
``metric``, ``direction``), never in its statement. :func:`claim_kind` names each row's kind and :data:`CHECKERS`
maps that kind to its checker:

- ``oom_caused`` (the B300 article: 0.95 caused OOM retries): retries counted at the setting, and the model's memory
  check, whose need outside the pool is an assumption taken from this very claim;
- ``oom_removed`` (lowering to 0.92 removed the retries), ``spread`` (it stabilised run time) and ``latency`` (it came
  at slightly higher latency): each engine against itself at the two settings;
- ``recommended`` (the KV-cache design article serves vLLM at 0.95): that document's advice graded on evidence
  independent of it, the other document's report — family *document*.

Only runs recorded as on GPUs exercise the OOM parts: on a CPU the setting is a simulated KV budget or vLLM's
host-memory reserve (:func:`memory_setting`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from kvlab.claims.documents import setting_against_documents
from kvlab.claims.grading import (
    ASSUMED_FROM_CLAIM,
    FEW_REPEATS,
    MIN_REPEATS,
    MODEL_SCOPE,
    NO_GPU_MEMORY,
    NOTHING_MEASURED,
    UNRECORDED_DEVICE,
    Repeats,
    combined,
    measured_difference,
)
from kvlab.perfmodel.figures import short_outside_pool
from kvlab.studies.measured_frames import context_name
from kvlab.engines import engine_label, registry
from kvlab.units import signed_pct
from kvlab.verdicts import Verdict

KIND = "memory_setting"  # the kind every memory-setting verdict is filed under


def engine_rank(engine: str) -> int:
    """Engines in the order every report lists them (vLLM, SGLang, sglang-jax), unknown ones last."""
    return registry.order(engine)


# -- what the setting means on the host that ran it ------------------------------------------------------------------


def _setting_of(row: dict) -> str | None:
    if row.get("kv_budget_bytes") is not None:
        return "kv_budget"
    kind = row.get("device_kind")
    if kind is None and "device_kind" not in row and "gpu_count" in row:  # a hand-built frame without the column
        kind = "gpu" if (row.get("gpu_count") or 0) > 0 else "cpu"
    return {"cpu": "host_reserve", "gpu": "gpu"}.get(kind)


def memory_setting(runs: pl.DataFrame) -> str | None:
    """What the measured runs' memory setting means, by how each run was configured (RUNS ``kv_budget_bytes`` and
    ``device_kind``, recorded per run; never guessed from a GPU count or a hardware label): ``kv_budget`` (an explicit
    KV-cache budget: CPU runs on a simulated device), ``host_reserve`` (a CPU run without one: vLLM's CPU build
    reserves the setting's share of host memory), ``gpu`` (the engine's own target on GPUs), ``mixed`` (the runs
    disagree); None without measured runs or where no run says how it was configured."""
    m = runs.filter(pl.col("source") == "measured") if "source" in runs.columns else runs
    kinds = {_setting_of(r) for r in m.iter_rows(named=True)} - {None}
    if not kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mixed"


def kv_budget_simulated(runs: pl.DataFrame) -> bool:
    """Whether every measured run configured an explicit KV budget (a simulated device, no GPU)."""
    return memory_setting(runs) == "kv_budget"


#: Per setting: (what it is on this host, the verdicts' scope, what the lower setting means, its short name).
_HOSTS = {
    "kv_budget": (
        "a simulated KV-cache budget",
        "CPU, simulated KV-cache budget",
        "a smaller simulated KV budget, so fewer requests run at once",
        "simulated KV budget",
    ),
    "host_reserve": (
        "vLLM's CPU memory reserve, checked at start-up against this host's free memory",
        "CPU, host-memory reserve",
        "a smaller host-memory reserve",
        "host-memory reserve",
    ),
    "mixed": (
        "not one thing across these runs (KV budgets and host-memory reserves)",
        "CPU, mixed memory settings",
        "a lower setting",
        "no GPU",
    ),
    "unknown": (
        "not recorded for these runs (neither a KV budget nor the device they ran on)",
        "runs without a recorded device or KV budget",
        "a lower setting",
        "device not recorded",
    ),
    "gpu": ("the engine's memory-utilisation target on GPUs", "this host's GPUs", "", ""),
}


@dataclass(frozen=True)
class Host:
    """What the memory setting is on the host that measured (:func:`memory_setting`'s value, or ``unknown``)."""

    setting: str

    @classmethod
    def of(cls, simulated: bool | str | None) -> Host:
        """From :func:`memory_setting`'s value, or a bool (True: ``kv_budget``, False: ``gpu``; None: unknown)."""
        if isinstance(simulated, str):
            return cls(simulated if simulated in _HOSTS else "unknown")
        return cls("unknown" if simulated is None else "kv_budget" if simulated else "gpu")

    @property
    def simulated(self) -> bool:
        """Whether the OOM parts cannot be exercised: only runs recorded as on GPUs carve memory outside a pool."""
        return self.setting != "gpu"

    what = property(lambda self: _HOSTS[self.setting][0])
    scope = property(lambda self: _HOSTS[self.setting][1])
    less = property(lambda self: _HOSTS[self.setting][2])
    short = property(lambda self: _HOSTS[self.setting][3])

    @property
    def untestable(self) -> str:
        return (
            f"the setting here is {self.what}: the GPU memory outside the memory target, where the claimed OOMs "
            "arise, is not exercised"
        )

    @property
    def limit(self) -> str:
        return UNRECORDED_DEVICE if self.setting == "unknown" else NO_GPU_MEMORY


# -- the evidence every checker reads --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the memory claims are checked against: the memory study (:func:`.frames.memory_study`), its comparison
    of the two settings (:func:`.frames.memory_comparison`), the modelled headroom (None: not modelled), the host's
    setting, and every document's claims (for a setting one document recommends)."""

    stats: pl.DataFrame
    cmp: pl.DataFrame
    head: pl.DataFrame | None
    host: Host
    all_claims: pl.DataFrame | None = None

    @property
    def settings(self) -> list[float]:
        return sorted(self.stats["mem_util"].unique().to_list()) if self.stats.height else []

    @property
    def lo(self) -> float | None:
        return self.settings[0] if self.settings else None

    @property
    def hi(self) -> float | None:
        return self.settings[-1] if self.settings else None

    @property
    def two_settings(self) -> bool:
        return len(self.settings) > 1

    def retries(self, u: float) -> tuple[int, int, list[str]]:
        """Retries and runs at ``u``, and each engine's retries in words ('vLLM 0')."""
        s = self.stats.filter(pl.col("mem_util") == u)
        per = s.group_by("engine").agg(pl.col("retries").sum())
        per = sorted(per.iter_rows(), key=lambda r: engine_rank(r[0]))
        return int(s["retries"].sum()), int(s["runs"].sum()), [f"{engine_label(e)} {n}" for e, n in per]

    def fewest(self, *us: float) -> int:
        """The fewest runs of any engine, context and setting among ``us``."""
        return int(self.stats.filter(pl.col("mem_util").is_in(list(us)))["runs"].min())

    def row(self, r: dict, u: float) -> dict | None:
        """The memory-study row of ``r``'s engine and context at ``u``."""
        s = self.stats.filter(
            (pl.col("engine") == r["engine"])
            & (pl.col("context_tokens") == r["context_tokens"])
            & (pl.col("mem_util") == u)
        )
        return s.row(0, named=True) if s.height else None


def _verdict(c: dict, ev: Evidence, claim: str, outcome: str, evidence: str, number: str, reason: str, **kw) -> Verdict:
    """A verdict of memory claim ``c``: family *document* (graded on evidence independent of the article); ``n``
    the runs behind a measured row (0 where none was measured), 1 for the model's one assumption set."""
    kw.setdefault("scope", ev.host.scope if evidence == "measured" else MODEL_SCOPE)
    kw.setdefault("n", 0 if evidence == "measured" else 1)
    return Verdict(
        claim, outcome, evidence, number, claim_id=c["claim_id"], kind=KIND, reason=reason, family="document", **kw
    )


def _nothing(c: dict, ev: Evidence, why: str, claim: str | None = None) -> Verdict:
    return _verdict(
        c, ev, claim or c["statement"], "cannot be tested here", "measured", why, why, limit=NOTHING_MEASURED
    )


# -- one checker per claim kind --------------------------------------------------------------------------------------


def _retries_at(c: dict, ev: Evidence, u: float) -> Verdict:
    """Retries counted at the claimed setting: on GPUs, reproduced where every engine retried (n ≥ 3 a side)."""
    n, runs, per = ev.retries(u)
    at = ev.stats.filter(pl.col("mem_util") == u)
    every = at.group_by("engine").agg(pl.col("retries").sum())
    fewest = int(at.group_by("engine").agg(pl.col("runs").sum())["runs"].min())
    few = fewest < MIN_REPEATS
    if ev.host.simulated:
        outcome, reason, limit = "cannot be tested here", ev.host.untestable, ev.host.limit
    elif few:
        outcome, limit = "inconclusive", FEW_REPEATS
        reason = f"n={fewest} runs for one engine, fewer than the {MIN_REPEATS} repeats a measured verdict needs"
    else:
        outcome = "reproduced" if (every["retries"] > 0).all() else "contradicted"
        reason, limit = "retries counted at the claimed setting on GPUs", ""
    where = (
        f"on this host the setting is {ev.host.what}, so the GPU memory outside the memory target, where those OOMs "
        "arise, is not exercised"
        if ev.host.simulated
        else "measured on this host's GPUs"
    )
    number = f"{n} retr{'y' if n == 1 else 'ies'} in {runs} run{'' if runs == 1 else 's'} at {u:g} ({', '.join(per)})"
    return _verdict(
        c, ev, f"{c['statement']} — {where}", outcome, "measured", number, reason,
        value=float(n), unit="retries", n=fewest, limit=limit,
    )  # fmt: skip


def _modelled_need(c: dict, ev: Evidence, u: float) -> Verdict | None:
    """The model's memory check at ``u``: it rests on a need outside the pool chosen from this very claim, so it
    restates the claim (an assumption, not a predicted OOM): *cannot be tested here*."""
    if ev.head is None or not ev.head.height or u not in ev.head["mem_util"].to_list():
        return None
    h = ev.head.filter(pl.col("mem_util") == u)
    bad = [r for r in h.iter_rows(named=True) if fails_outside_pool(r)]
    value = None
    if bad:
        r = bad[0]
        value = r["outside_pool_gib_per_gpu"]
        number = (
            f"{value:.1f} GiB/GPU left outside the target at {u:g} < {r['outside_need_gib_per_gpu']:.1f} GiB "
            "assumed need — an assumption taken from this claim"
        )
    elif h["fits"].all():
        number = (
            f"every configuration fits at {u:g}; the model's memory check rests on an assumed need set from this claim"
        )
    else:
        number = f"at {u:g}: {h.filter(~pl.col('fits'))['reason'][0]}"
    return _verdict(
        c, ev, f"{c['statement']} — kvlab's physical model", "cannot be tested here", "modelled", number,
        "the model's memory check rests on a need outside the pool chosen from this very claim",
        value=value, unit="GiB/GPU" if value is not None else "", limit=ASSUMED_FROM_CLAIM,
    )  # fmt: skip


def check_oom_caused(c: dict, ev: Evidence) -> list[Verdict]:
    """'0.95 caused OOM retries': the retries counted at the setting, then the model's memory check there."""
    u = c.get("setting") or ev.hi
    out = []
    if ev.stats.is_empty():
        out.append(_nothing(c, ev, "no measured run with a memory setting"))
    elif u not in ev.settings:
        out.append(_nothing(c, ev, f"no measured run at {u:g}"))
    else:
        out.append(_retries_at(c, ev, u))
    if u is not None and (modelled := _modelled_need(c, ev, u)):
        out.append(modelled)
    return out


def _two_settings_missing(c: dict, ev: Evidence) -> Verdict | None:
    if ev.stats.is_empty():
        return _nothing(c, ev, "no measured run with a memory setting")
    if not ev.two_settings:
        return _nothing(c, ev, "no engine measured at two settings")
    return None


def _on_gpus(c: dict, ev: Evidence, untested_here: str) -> str:
    if ev.host.simulated:
        return f"{c['statement']} — on this host there is {untested_here} ({ev.host.short})"
    return f"{c['statement']} — measured on this host's GPUs"


def check_oom_removed(c: dict, ev: Evidence) -> list[Verdict]:
    """'Lowering the target removed the retries': retries at the lower setting against the higher, on GPUs."""
    if missing := _two_settings_missing(c, ev):
        return [missing]
    lo, hi = ev.lo, ev.hi
    n_lo, n_hi = ev.retries(lo)[0], ev.retries(hi)[0]
    number = f"retries: {n_lo} at {lo:g}, {n_hi} at {hi:g}"
    fewest = ev.fewest(lo, hi)  # per engine, context and setting
    counts = dict(value=float(n_lo), unit="retries", n=fewest)
    claim = _on_gpus(c, ev, "no GPU OOM to remove")
    if ev.host.simulated:
        return [_verdict(c, ev, claim, "cannot be tested here", "measured", number, ev.host.untestable,
                         limit=ev.host.limit, **counts)]  # fmt: skip
    if n_hi == 0:
        why = f"no retry at {hi:g} to remove"
        return [_verdict(c, ev, claim, "cannot be tested here", "measured", f"{number} ({why})", why, **counts)]
    if fewest < MIN_REPEATS:
        why = f"fewer than {MIN_REPEATS} runs per engine and setting"
        return [_verdict(c, ev, claim, "inconclusive", "measured", number, why, limit=FEW_REPEATS, **counts)]
    outcome = "reproduced" if n_lo == 0 else "contradicted"
    return [_verdict(c, ev, claim, outcome, "measured", number, f"retries counted at {lo:g} and {hi:g}", **counts)]


def spreads(ev: Evidence) -> list[tuple[dict, float, float]]:
    """Per engine and context with more than one successful run at both settings: (comparison row, CV at the lower
    setting, CV at the higher)."""
    out = []
    for r in ev.cmp.iter_rows(named=True):
        a, b = ev.row(r, ev.lo), ev.row(r, ev.hi)
        if a and b and (a["runs_ok"] or 0) > 1 and (b["runs_ok"] or 0) > 1:
            out.append((r, a["batch_time_cv"], b["batch_time_cv"]))
    return out


def check_spread(c: dict, ev: Evidence) -> list[Verdict]:
    """'Lowering the target stabilised run time': the batch-time spread (CV) over repeats at the two settings."""
    if missing := _two_settings_missing(c, ev):
        return [missing]
    lo, hi = ev.lo, ev.hi
    pairs = spreads(ev)
    lower = sum(x < y for _, x, y in pairs)
    number = (
        "spread: one run per setting"
        if not pairs
        else f"spread (CV) {pairs[0][1]:.1%} at {lo:g} vs {pairs[0][2]:.1%} at {hi:g}"
        if len(pairs) == 1
        else f"spread (CV) lower at {lo:g} in {lower} of {len(pairs)} engine–context pairs"
    )
    fewest = ev.fewest(lo, hi)
    counts = dict(value=float(lower) if pairs else None, unit="pairs with a lower CV" if pairs else "", n=fewest)
    claim = _on_gpus(c, ev, "no GPU OOM whose retries unsettle run time")
    if ev.host.simulated:
        no_value = "" if pairs else "; one run per setting, so no spread to compare (no value)"
        return [_verdict(c, ev, claim, "cannot be tested here", "measured", number, ev.host.untestable + no_value,
                         limit=ev.host.limit, **counts)]  # fmt: skip
    if not pairs or fewest < MIN_REPEATS:
        why = f"fewer than {MIN_REPEATS} runs per engine and setting"
        return [_verdict(c, ev, claim, "inconclusive", "measured", number, why, limit=FEW_REPEATS, **counts)]
    outcome = "reproduced" if lower > len(pairs) / 2 else "contradicted"
    why = f"run-time spread over repeats compared at {lo:g} and {hi:g}"
    return [_verdict(c, ev, claim, outcome, "measured", number, why, **counts)]


def _latency_parts(ev: Evidence, direction: str) -> tuple[list[tuple[dict, float]], list]:
    """At the largest context measured at both settings, per engine: (row, mean request latency lower ÷ higher),
    and each engine's rule-2 grades of mean request latency and mean TTFT."""
    lo, hi, cmp = ev.lo, ev.hi, ev.cmp
    at = cmp.filter(pl.col("context_tokens") == cmp["context_tokens"].max()) if cmp.height else cmp
    lat, parts = [], []
    for r in sorted(at.iter_rows(named=True), key=lambda r: engine_rank(r["engine"])):
        a, b = ev.row(r, lo), ev.row(r, hi)
        if not (a and b and a["e2e_mean_ms"] and b["e2e_mean_ms"]):
            continue
        lat.append((r, a["e2e_mean_ms"] / b["e2e_mean_ms"]))
        for m, what in (("e2e", "mean request latency"), ("ttft", "mean TTFT")):
            if a[f"{m}_mean_ms"] and b[f"{m}_mean_ms"]:
                sides = (
                    Repeats.summary(x[f"{m}_mean_ms"], x.get(f"{m}_min_ms"), x.get(f"{m}_max_ms"), x["runs_ok"])
                    for x in (a, b)
                )
                what_ = f"{engine_label(r['engine'])} {what}, {lo:g} against {hi:g}"
                parts.append(measured_difference(*sides, direction, what=what_, scope=ev.host.scope))
    return lat, parts


def check_latency(c: dict, ev: Evidence) -> list[Verdict]:
    """'Lowering the target came at higher latency': each engine against itself at the two settings, graded by
    rule 2 (n ≥ 3 a side, ranges apart, one sign across engines and metrics)."""
    if missing := _two_settings_missing(c, ev):
        return [missing]
    lo, hi = ev.lo, ev.hi
    where = (
        f"on this host {lo:g} is {ev.host.less}: each engine against itself"
        if ev.host.simulated
        else ("measured on this host's GPUs")
    )
    claim = f"{c['statement']} — {where}"
    lat, parts = _latency_parts(ev, c.get("direction") or "higher")
    if not lat:
        return [_nothing(c, ev, "no latency measured at both settings", claim)]
    grade = combined(parts)
    r0 = lat[0][0]
    number = (
        f"mean request latency at {lo:g} against {hi:g}, {context_name(r0['context_label'], r0['context_tokens'])}: "
        + ", ".join(f"{engine_label(r['engine'])} {signed_pct(x - 1)}" for r, x in lat)
        + (f" (n={grade.n} per setting)" if grade.n is not None else "")
    )
    v = grade.verdict(claim, number, claim_id=c["claim_id"], kind=KIND)
    return [replace(v, scope=ev.host.scope, family="document")]


def check_recommended(c: dict, ev: Evidence) -> list[Verdict]:
    """A setting one document recommends against another that says it caused OOM retries: graded once, in
    :func:`kvlab.claims.documents.setting_against_documents` (report 06 shows the same verdict)."""
    found = setting_against_documents(c, ev.all_claims) if ev.all_claims is not None else None
    return [found] if found else []


def claim_kind(c: dict) -> str | None:
    """The kind of check a claim row takes, from its structured fields (never its statement)."""
    metric, direction = c.get("metric"), c.get("direction")
    if c.get("kind") == "memory":
        if metric == "oom_retries":
            return "oom_caused" if direction == "some" else "oom_removed"
        return {"batch_time_spread": "spread", "e2e_latency": "latency"}.get(metric, "untested")
    if metric == "oom_retries" and direction == "none" and c.get("setting") is not None:
        return "recommended"
    return None


def check_untested(c: dict, ev: Evidence) -> list[Verdict]:
    """A memory claim this report has no test for."""
    why = "no test of this claim in this report"
    return [_verdict(c, ev, c["statement"], "cannot be tested here", "measured", why, why)]


#: Each claim kind's checker.
CHECKERS = {
    "oom_caused": check_oom_caused,
    "oom_removed": check_oom_removed,
    "spread": check_spread,
    "latency": check_latency,
    "recommended": check_recommended,
    "untested": check_untested,
}


def verdicts(claims: pl.DataFrame, ev: Evidence, kinds: set[str] | None = None) -> list[Verdict]:
    """Every claim row of ``claims`` that a checker here takes (of ``kinds`` only, where given), graded in the
    table's order."""
    out = []
    for c in claims.iter_rows(named=True):
        kind = claim_kind(c)
        if kind is not None and (kinds is None or kind in kinds):
            out += CHECKERS[kind](c, ev)
    return out


def memory_claim_verdicts(
    claims: pl.DataFrame,
    stats: pl.DataFrame,
    cmp: pl.DataFrame,
    head: pl.DataFrame | None = None,
    simulated: bool | str | None = True,
    all_claims: pl.DataFrame | None = None,
) -> list[Verdict]:
    """The memory claims of ``claims`` (kind memory; with ``all_claims``, a setting another document recommends)
    against the memory study, its comparison and the modelled headroom. ``simulated``: :func:`memory_setting`'s
    value, or a bool (True: a simulated KV budget; False: GPUs; None: not recorded)."""
    return verdicts(claims, Evidence(stats, cmp, head, Host.of(simulated), all_claims))


def fails_outside_pool(row: dict) -> bool:
    """Whether a headroom row fails the model's memory check only for what it leaves outside the target: at least
    one sequence fits (so the KV room is there), but less than the assumed need is left outside the pool."""
    return row.get("fits") is False and (row.get("max_concurrent_seqs") or 0) >= 1 and short_outside_pool(row)


def verdict_of_kind(
    found: list[Verdict], claims: pl.DataFrame, kind: str, evidence: str = "measured"
) -> Verdict | None:
    """The first ``evidence`` verdict of ``found`` whose claim row (of ``claims``) is of check kind ``kind``: the
    latency claim's is what every 0.92-against-0.95 direction on the page asks."""
    ids = {c["claim_id"] for c in claims.iter_rows(named=True) if claim_kind(c) == kind}
    return next((v for v in found if v.claim_id in ids and v.evidence == evidence), None)
