"""The highest load within the SLO, found by search (``workload.load.search``): an exponential bracket, then
bisection to a stated precision, at most a stated number of probes; a load passes when the Wilson lower bound at 95%
confidence of its SLO attainment reaches a stated share (issue 54).

The rule follows guidellm's goodput profile (a level passes when at least 95% of requests meet every objective,
judged by a Wilson 95% interval; it doubles, then bisects) and AIPerf's max-concurrency-under-sla recipe (an
exponential bracket, then bisection to a precision). Every probe is a run of its own, stored with its load (its key is
the run's with the probe's level); the search's result is stored as the search run's row (RUNS ``search_*``) with
each probe's level, run, count and bound, and the mechanism that broke the first failing load (:func:`mechanism`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The standard normal quantile of a two-sided 95% interval.
Z95 = 1.959963984540054
#: How far a probe's TPOT p90 must exceed the passing load's to read as decode slowing with batch size.
TPOT_RISE = 0.10
#: KV pool usage (a fraction) from which queueing is queueing on a full pool.
KV_FULL = 0.95


class SearchSpec(BaseModel):
    """How ``load.search`` probes: levels of the load's own kind (``concurrency``: closed loop, whole requests in
    flight; ``rate_rps``: open loop), from ``start`` times ``factor`` up to ``limit``, then bisection."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    share: float = Field(0.95, gt=0, lt=1, description="SLO attainment the Wilson 95% lower bound must reach")
    start: float = Field(1, gt=0, description="the first level probed")
    factor: float = Field(2, gt=1, description="the bracket's growth from one passing level to the next")
    limit: float = Field(64, gt=0, description="the highest level probed (passing it ends the search)")
    precision: float = Field(
        0.1, gt=0, description="stop once first failing - highest passing <= this share of the highest passing"
    )
    max_probes: int = Field(10, ge=1, le=64, description="probes at most")

    @model_validator(mode="after")
    def _bounds(self) -> SearchSpec:
        if self.start > self.limit:
            raise ValueError(f"search.start ({self.start:g}) is above search.limit ({self.limit:g})")
        return self


def wilson_lower(k: int, n: int, z: float = Z95) -> float:
    """Lower end of the Wilson score interval of ``k`` successes in ``n`` trials (Wilson, "Probable inference, the
    law of succession, and statistical inference", JASA 22(158), 1927): 0 for n = 0."""
    if n <= 0:
        return 0.0
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def wilson_upper(k: int, n: int, z: float = Z95) -> float:
    """Upper end of the same Wilson score interval as :func:`wilson_lower`: 1 for n = 0."""
    if n <= 0:
        return 1.0
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


@dataclass(frozen=True)
class Probe:
    """One probe: its level, its run, requests within the SLO of those it counted (failed requests count against),
    the Wilson lower bound, whether it passed and why not."""

    level: float
    run_id: str
    within: int
    n: int
    lower: float
    passed: bool
    why: str | None = None
    goodput_requests_per_s: float | None = None
    output_tokens_per_s: float | None = None


def judge(level: float, row: dict[str, Any], share: float) -> Probe:
    """A stored probe's RUNS row judged: it passes when it ran (status ok), did not stop past saturation
    (``load_stop``: its queue still rising, or its TTFT past the stop factor) and the Wilson lower bound of
    requests_within_slo / (requests_ok + requests_failed) reaches ``share``."""
    within = int(row.get("requests_within_slo") or 0)
    n = int(row.get("requests_ok") or 0) + int(row.get("requests_failed") or 0)
    lower = wilson_lower(within, n)
    if row.get("status") != "ok":
        why = f"the run failed ({row.get('failure_cause') or 'no cause recorded'})"
    elif row.get("load_stop"):
        why = f"saturated: {row['load_stop']}"
    elif lower < share:
        why = f"{within} of {n} within the SLO: Wilson 95% lower bound {lower:.3f} < {share:g}"
    else:
        why = None
    return Probe(
        level,
        str(row.get("run_id")),
        within,
        n,
        lower,
        why is None,
        why,
        row.get("goodput_requests_per_s"),
        row.get("output_tokens_per_s"),
    )


@dataclass
class Bracket:
    """The search's state: :meth:`next` gives the next level to probe (None: done, :attr:`stop` says why),
    :meth:`record` takes its outcome. ``whole``: levels are whole numbers (requests in flight)."""

    spec: SearchSpec
    whole: bool = True
    passing: float | None = None
    failing: float | None = None
    probes: list[Probe] = field(default_factory=list)
    stop: str | None = None

    def _up(self, level: float) -> float:
        up = min(level * self.spec.factor, self.spec.limit)
        return max(level + 1, math.floor(up)) if self.whole else up

    def next(self) -> float | None:
        level = self._next() if self.stop is None else None
        if level is not None and len(self.probes) >= self.spec.max_probes:
            self.stop, level = f"max_probes ({self.spec.max_probes}) reached", None
        return level

    def _next(self) -> float | None:
        if not self.probes:
            return math.ceil(self.spec.start) if self.whole else self.spec.start
        if self.failing is None:  # still bracketing: every probe so far passed
            last = self.probes[-1].level
            if last >= self.spec.limit:
                self.stop = f"passes at the limit ({self.spec.limit:g})"
                return None
            return min(self._up(last), self.spec.limit)
        if self.passing is None:
            self.stop = "no level passes: the first probe failed"
            return None
        gap = self.failing - self.passing
        if gap <= self.spec.precision * self.passing or (self.whole and gap <= 1):
            self.stop = f"bracket [{self.passing:g}, {self.failing:g}] within the precision"
            return None
        mid = (self.passing + self.failing) / 2
        return math.floor(mid) if self.whole else mid

    def record(self, probe: Probe) -> None:
        self.probes.append(probe)
        if probe.passed:
            self.passing = probe.level if self.passing is None else max(self.passing, probe.level)
        else:
            self.failing = probe.level if self.failing is None else min(self.failing, probe.level)


def search(
    spec: SearchSpec,
    measure: Callable[[float], dict[str, Any]],
    whole: bool = True,
    on_probe: Callable[[Bracket], None] | None = None,
) -> Bracket:
    """Run the search: probe each level :class:`Bracket` gives with ``measure`` (level -> the probe's stored RUNS
    row), judged by :func:`judge`, ``on_probe`` told after each; the finished bracket."""
    b = Bracket(spec, whole)
    while (level := b.next()) is not None:
        b.record(judge(level, measure(level), spec.share))
        if on_probe is not None:
            on_probe(b)
    return b


def probe_workload(workload: Any, level: float) -> Any:
    """The workload of one probe: ``workload`` with its load at ``level`` (concurrency for a closed loop, rate_rps
    for an open one) and no search of its own; everything else, request count included, as stated."""
    load = workload.load
    at = {"rate_rps": float(level)} if load.rate_rps is not None else {"concurrency": int(level)}
    dump = workload.model_dump(mode="json")
    dump["load"] = {**dump["load"], **at, "search": None}
    return type(workload).model_validate(dump)


# ----------------------------------------------------------------------------- why the SLO broke


def _series(telemetry: pl.DataFrame | None, name: str) -> list[float]:
    if telemetry is None or name not in telemetry.columns:
        return []
    return [float(v) for v in telemetry[name].drop_nulls().to_list()]


def mechanism(failing: dict[str, Any], passing: dict[str, Any] | None, telemetry: pl.DataFrame | None) -> str:
    """What broke the SLO at the first failing load, from that run's own telemetry and counters (``failing``: its
    RUNS row; ``passing``: the highest passing probe's row or None; ``telemetry``: its telemetry.csv): preemptions
    (the server's preemption counter rose), queueing past the KV pool's concurrency ceiling (requests waited while
    the pool was at least 95% used, or, with no usage series, the level is past pool / context: where usage was
    sampled and stayed lower, the nominal ceiling is not taken as the cause), queueing under a scheduler limit (requests
    waited while the pool had room and fewer ran at once than the level sent: a cap on running requests or batched
    tokens), decode slowing with batch size (TPOT p90 more than 10% above the passing load's while nothing queued),
    else "not determined" with what was missing."""
    if failing.get("server_preemptions"):
        return f"preemptions: the server preempted {int(failing['server_preemptions'])} times"
    waiting, usage = _series(telemetry, "requests_waiting"), _series(telemetry, "kv_cache_usage")
    level = failing.get("load_concurrency") or failing.get("load_rate_rps")
    pool, context = failing.get("kv_pool_tokens"), failing.get("context_tokens")
    ceiling = pool // context if pool and context else None
    if waiting and max(waiting) > 0:
        full = usage and max(usage) >= KV_FULL
        past = ceiling is not None and failing.get("load_concurrency") and failing["load_concurrency"] > ceiling
        if full or (past and not usage):  # the pool's own usage, where sampled, outweighs the nominal ceiling
            at = f"KV pool {max(usage):.0%} used" if usage else f"ceiling {ceiling} = {pool:,} / {context:,} tokens"
            return f"queueing past the KV pool's concurrency ceiling: up to {max(waiting):g} requests waited ({at})"
        running = _series(telemetry, "requests_running")
        if usage and running and level and max(running) < level:  # the pool had room, yet fewer ran than were sent
            return (
                f"queueing under a scheduler limit, not the KV pool: at most {max(running):g} requests ran at once "
                f"while up to {max(waiting):g} waited (KV pool at most {max(usage):.0%} used)"
            )
        if past:  # requests of varied lengths (a trace): the ceiling from the longest one overstates what the pool held
            return (
                f"not determined: up to {max(waiting):g} requests waited past the nominal ceiling {ceiling} "
                f"({pool:,} / {context:,} tokens), but the KV pool was at most {max(usage):.0%} used"
            )
        return (
            f"not determined: up to {max(waiting):g} requests waited, but the KV pool was not full "
            f"({'no usage series' if not usage else f'{max(usage):.0%} at most'}) nor level {level:g} past its ceiling"
        )
    rise = _tpot_rise(failing, passing)
    if waiting and rise is not None and rise > TPOT_RISE:
        return f"decode slowing with batch size: TPOT p90 {rise:+.0%} on the passing load's while nothing queued"
    if not waiting:
        return "not determined: the run has no waiting-queue telemetry"
    return "not determined: nothing queued, no preemption, and TPOT did not rise past the passing load's by 10%"


def _tpot_rise(failing: dict[str, Any], passing: dict[str, Any] | None) -> float | None:
    a, b = failing.get("tpot_p90_ms"), (passing or {}).get("tpot_p90_ms")
    return a / b - 1 if a is not None and b else None


# ----------------------------------------------------------------------------- the stored result


def columns(spec: SearchSpec, bracket: Bracket, why: str | None) -> dict[str, Any]:
    """The search run's RUNS ``search_*`` columns."""
    best = next((p for p in bracket.probes if p.passed and p.level == bracket.passing), None)
    return {
        "search_share": spec.share,
        "search_highest_passing": bracket.passing,
        "search_first_failing": bracket.failing,
        "search_lower_bound": best.lower if best else None,
        "search_n": best.n if best else None,
        "search_goodput_requests_per_s": best.goodput_requests_per_s if best else None,
        "search_output_tokens_per_s": best.output_tokens_per_s if best else None,
        "search_probes": json.dumps([asdict(p) for p in bracket.probes]),
        "search_stop": bracket.stop,
        "search_mechanism": why if bracket.failing is not None else None,
    }


def probes_of(row: dict[str, Any]) -> list[Probe]:
    """A search row's probes, in the order probed."""
    text = row.get("search_probes")
    return [Probe(**p) for p in json.loads(text)] if text else []


PROGRESS_FILE = "search.json"


def write_progress(folder: Path, bracket: Bracket) -> None:
    """The probes so far, in the search run's folder: a sweep killed mid-search keeps its probes (kvlab.campaign
    counts the runs named here as defined) and the next one reuses them."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{PROGRESS_FILE}.tmp"
    tmp.write_text(json.dumps({"probes": [asdict(p) for p in bracket.probes]}))
    tmp.replace(folder / PROGRESS_FILE)


def probe_keys(exp_dir: Path, defined: set[str]) -> set[str]:
    """Run keys of the probes that the searches among ``defined`` (keys) stored under ``exp_dir`` name."""
    out: set[str] = set()
    for key in defined:
        path = exp_dir / key / PROGRESS_FILE
        if path.is_file():
            try:
                out |= {p["run_id"] for p in json.loads(path.read_text())["probes"]}
            except (ValueError, KeyError, TypeError):
                continue
    return out
