"""Load as a dimension of a prompt-shape workload: closed-loop concurrency or open-loop arrivals, warm-up, the
steady-state window and the rule that stops a load point past saturation (docs/design.md, "Load definitions").

A workload with ``load`` set sends its prompts (batch_size of them, from its kind's generator) under this load
instead of all at once; without ``load`` nothing here applies and the run is what it always was (its key too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The telemetry series the queue rule reads (kvlab.engines telemetry_names' canonical name).
QUEUE_SERIES = "requests_waiting"


class LoadSpec(BaseModel):
    """How one load point offers its requests: closed loop (``concurrency`` requests in flight, each sent as one
    ends) or open loop (``rate_rps`` arrivals per second, gamma inter-arrival times with shape ``burstiness``),
    the first ``warmup_requests`` excluded, sending stopped at ``duration_s`` or past saturation."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    concurrency: int | None = Field(None, ge=1, description="closed loop: requests (conversations) in flight; with "
                                    "rate_rps, the most in flight (a cap on the open loop)")
    rate_rps: float | None = Field(None, gt=0, description="open loop: mean arrivals per second")
    burstiness: float = Field(1.0, gt=0, description="open loop: shape of the gamma inter-arrival times (mean "
                              "1/rate_rps); 1 is Poisson, below 1 burstier, above 1 more regular (vLLM bench's "
                              "--burstiness)")
    arrival_seed: int = Field(0, ge=0, description="seed of the arrival times (the same seed, the same schedule)")
    warmup_requests: int = Field(0, ge=0, description="the first requests sent, left out of every count")
    duration_s: float | None = Field(None, gt=0, description="send no request later than this many seconds after "
                                     "the first send (the request-count limit is batch_size)")
    stop_ttft_factor: float | None = Field(3.0, gt=0, description="stop sending once the p90 TTFT of the finished "
                                           "measured requests exceeds this times the SLO's ttft_ms (no SLO TTFT: "
                                           "rule off; null: off)")
    stop_min_requests: int = Field(8, ge=1, description="finished measured requests the TTFT rule waits for")
    stop_queue_rising: int | None = Field(5, ge=2, description="stop sending once the server's waiting queue "
                                          "rose over this many consecutive telemetry samples (null: off)")
    stop_climbing: bool = Field(True, description="on a ladder (the same run at several load levels), skip the "
                                "levels above one that stopped past saturation or whose goodput fell from the level "
                                "below")

    @model_validator(mode="after")
    def _some_load(self) -> LoadSpec:
        if self.concurrency is None and self.rate_rps is None:
            raise ValueError("a load states concurrency (closed loop) or rate_rps (open loop)")
        return self

    @property
    def mode(self) -> str:
        """``open`` when arrivals follow a rate, ``closed`` when a fixed number is kept in flight."""
        return "open" if self.rate_rps is not None else "closed"

    def label(self) -> str:
        """Short name of the load point, e.g. 'c=8' or '2 req/s (gamma 0.5)'."""
        if self.rate_rps is None:
            return f"c={self.concurrency}"
        gamma = "" if self.burstiness == 1.0 else f" (gamma {self.burstiness:g})"
        cap = "" if self.concurrency is None else f", c<={self.concurrency}"
        return f"{self.rate_rps:g} req/s{gamma}{cap}"


def arrival_times(n: int, rate_rps: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Send offsets in seconds from the first send of ``n`` open-loop arrivals: the first at 0, then cumulative
    gamma(shape=burstiness, scale=1/(rate_rps*burstiness)) gaps, mean 1/rate_rps (burstiness 1: exponential gaps,
    a Poisson process). Deterministic from ``seed`` (numpy's default_rng)."""
    if n <= 0:
        return []
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def p90(values: Sequence[float]) -> float:
    """numpy's linear-interpolation 90th percentile (as RUNS' percentiles)."""
    return float(np.percentile(np.asarray(values, dtype=float), 90))


def queue_rising(samples: Sequence[tuple[float, dict, str | None]], k: int) -> bool:
    """Whether the last ``k`` samples that carry the waiting-queue series rose strictly one after the other."""
    queue = [v[QUEUE_SERIES] for _, v, err in samples if err is None and v.get(QUEUE_SERIES) is not None]
    last = queue[-k:]
    return len(last) == k and all(b > a for a, b in zip(last, last[1:]))


class SaturationWatch:
    """The stop rule of one load point: :meth:`finished` is told each measured request's TTFT as it ends,
    :meth:`reason` (asked before each send) says why to stop sending, or None."""

    def __init__(self, load: LoadSpec, slo_ttft_ms: float | None,
                 samples: list[tuple[float, dict, str | None]] | None = None):
        self.load = load
        self.limit_ms = (load.stop_ttft_factor * slo_ttft_ms
                         if load.stop_ttft_factor is not None and slo_ttft_ms is not None else None)
        self.samples = samples if samples is not None else []
        self.ttfts: list[float] = []
        self.stopped: str | None = None

    def finished(self, ttft_ms: float | None) -> None:
        if ttft_ms is not None:
            self.ttfts.append(ttft_ms)

    def reason(self) -> str | None:
        if self.stopped is None:
            self.stopped = self._check()
        return self.stopped

    def _check(self) -> str | None:
        if self.limit_ms is not None and len(self.ttfts) >= self.load.stop_min_requests:
            q = p90(self.ttfts)
            if q > self.limit_ms:
                return (f"past saturation: p90 TTFT {q:.0f} ms of {len(self.ttfts)} finished requests > "
                        f"{self.load.stop_ttft_factor:g} x the SLO's {self.limit_ms / self.load.stop_ttft_factor:g} ms")
        k = self.load.stop_queue_rising
        if k is not None and queue_rising(self.samples, k):
            return f"past saturation: the server's waiting queue rose over {k} consecutive telemetry samples"
        return None


@dataclass(frozen=True)
class Window:
    """A load point's steady-state window on the requests' clock (seconds from the first send): from the first
    send of a measured (not warm-up) request to the last send of the point; the requests counted are those sent
    and finished inside it."""

    start_s: float
    end_s: float
    counted: tuple[int, ...]  # request_index of the requests inside
    warmup: tuple[int, ...]  # request_index of the warm-up requests
    outside: tuple[int, ...]  # measured requests that started or finished outside the window

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


def steady_window(records: Sequence[Any], warmup_requests: int) -> Window:
    """The window of a load point's ``records`` (kvlab.client.RequestRecord: ``t_send_s``, ``t_end``/``t_send``
    give the finish): the first ``warmup_requests`` sent are warm-up; the window runs from the first measured send
    to the last send; a measured request counts when it finished (success or failure) by the window's end."""
    by_send = sorted(records, key=lambda r: (r.t_send_s, r.request_index))
    warm = by_send[:warmup_requests]
    measured = by_send[warmup_requests:]
    if not measured:
        return Window(0.0, 0.0, (), tuple(r.request_index for r in warm), ())
    start, end = measured[0].t_send_s, by_send[-1].t_send_s
    counted, outside = [], []
    for r in measured:
        finish_s = r.t_send_s + (r.t_end - r.t_send)
        (counted if start <= r.t_send_s and finish_s <= end else outside).append(r.request_index)
    return Window(start, end, tuple(sorted(counted)), tuple(sorted(r.request_index for r in warm)),
                  tuple(sorted(outside)))


def chain_starts(prompts: Sequence[Any]) -> list[int]:
    """The index of each chain's first prompt (a conversation is one chain, any other prompt its own), in the order
    kvlab.client.run_requests starts them."""
    seen: set[Any] = set()
    firsts = []
    for p in sorted(prompts, key=lambda p: p.index):
        key = ("conversation", p.conversation) if p.conversation is not None else ("prompt", p.index)
        if key not in seen:
            seen.add(key)
            firsts.append(p.index)
    return firsts


def client_args(load: LoadSpec, prompts: Sequence[Any], watch: SaturationWatch) -> dict[str, Any]:
    """The keyword arguments of kvlab.client.run_requests (besides ``concurrency``) that send ``prompts`` under
    ``load``: open-loop send offsets, the duration limit, and the saturation watch (the TTFT rule reads the
    requests that finish after the first ``warmup_requests`` finishes)."""
    firsts = chain_starts(prompts)
    offsets = (dict(zip(firsts, arrival_times(len(firsts), load.rate_rps, load.burstiness, load.arrival_seed)))
               if load.rate_rps is not None else None)
    finished = [0]

    def on_finish(index: int, ttft_ms: float | None) -> None:
        finished[0] += 1
        if finished[0] > load.warmup_requests:
            watch.finished(ttft_ms)

    return {"start_offsets": offsets, "send_until_s": load.duration_s, "stop": watch.reason, "on_finish": on_finish}


@dataclass(frozen=True)
class LoadOutcome:
    """What a load point did: its load, steady-state window and why it stopped early (None: it ran to its limit)."""

    load: LoadSpec
    window: Window
    stopped: str | None

    def note(self, n_prompts: int) -> str:
        """The run's note on it (RUNS.notes)."""
        w = self.window
        sent = len(w.counted) + len(w.warmup) + len(w.outside)
        end = f"stopped early, {self.stopped}" if self.stopped else "ran to its limit"
        return (f"load {self.load.label()}: {sent} of {n_prompts} requests sent, {len(w.warmup)} warm-up, "
                f"{len(w.counted)} inside the {w.length_s:.3g} s steady-state window, {len(w.outside)} outside; "
                f"{end}")

    def columns(self) -> dict[str, Any]:
        """The RUNS columns of a load point (kvlab.schema RUNS, 'load_*', 'requests_warmup', ...)."""
        return {"load_mode": self.load.mode, "load_concurrency": self.load.concurrency,
                "load_rate_rps": self.load.rate_rps,
                "load_burstiness": self.load.burstiness if self.load.rate_rps is not None else None,
                "requests_warmup": len(self.window.warmup), "requests_outside_window": len(self.window.outside),
                "window_s": self.window.length_s or None, "load_stop": self.stopped}


# ----------------------------------------------------------------------------- the ladder

#: How far goodput must fall from one rung to the next to stop the climb (a share of the lower rung's): a smaller
#: dip is within one run's noise at n = 1.
GOODPUT_FALL = 0.10
#: The load fields that make one rung of a ladder differ from the next (with the workload's batch_size).
RUNG_FIELDS = ("concurrency", "rate_rps", "warmup_requests", "duration_s")


def level(load: LoadSpec) -> float:
    """A load point's place on its ladder: arrivals per second (open loop) or requests in flight (closed)."""
    return float(load.rate_rps if load.rate_rps is not None else load.concurrency)


def ladder_key(run: Any) -> str | None:
    """What the rungs of one ladder share (kvlab.spec.RunSpec ``run``): everything but the load level and the request
    count and warm-up that come with it, per experiment, engine and repeat; None for a run without a load."""
    w = run.workload.model_dump(mode="json")
    load = w.pop("load")
    if load is None:
        return None
    w.pop("batch_size")
    rest = {k: v for k, v in load.items() if k not in RUNG_FIELDS} | {"mode": run.workload.load.mode}
    payload = {"experiment": run.experiment, "engine_label": run.engine_label,
               "engine": run.engine.model_dump(mode="json"), "workload": w, "load": rest, "repeat": run.repeat,
               "slo": run.slo.model_dump(mode="json") if run.slo else None}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass
class Rung:
    """What a measured rung tells the climb: its level, its goodput (None without an SLO) and its early stop."""

    level: float
    goodput: float | None
    stopped: str | None


def rung_of(row: dict[str, Any]) -> Rung | None:
    """A stored RUNS row of a load point as a :class:`Rung`; None when the row is no measured load point."""
    if row.get("load_mode") is None or row.get("status") != "ok":
        return None
    lvl = row["load_rate_rps"] if row["load_mode"] == "open" else row["load_concurrency"]
    t, within = row.get("window_s"), row.get("requests_within_slo")
    goodput = within / t if within is not None and t else None
    return Rung(float(lvl), goodput, row.get("load_stop"))


def not_climbed(rungs: Sequence[Rung], at: float) -> str | None:
    """Why a ladder does not climb to level ``at``, from its measured ``rungs`` below it, or None: a lower rung
    stopped past saturation, or the goodput fell by more than :data:`GOODPUT_FALL` from one rung to the next
    (docs/design.md, "Load definitions")."""
    below = sorted((r for r in rungs if r.level < at), key=lambda r: r.level)
    for r in below:
        if r.stopped:
            return f"not climbed: the rung at {r.level:g} stopped past saturation"
    for lo, hi in zip(below, below[1:]):
        if lo.goodput is not None and hi.goodput is not None and hi.goodput < lo.goodput * (1 - GOODPUT_FALL):
            return (f"not climbed: goodput fell from {lo.goodput:.3g} req/s at {lo.level:g} to {hi.goodput:.3g} "
                    f"at {hi.level:g}")
    return None
