"""Fit the model's few free parameters to published and measured batch times; residuals and leave-one-out error.

Per hardware there are at most three free parameters (:class:`~kvlab.perfmodel.roofline.Params`):
prefill efficiency, decode bandwidth efficiency and the per-layer DCP latency. Never one per row.
The fit minimises squared log errors of batch time (a relative error, symmetric in over/under).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import polars as pl
from scipy.optimize import least_squares

from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.engines.registry import FAMILY_OF
from kvlab.paths import DATA_DIR
from kvlab.perfmodel import fitcache
from kvlab.catalog import model as find_model
from kvlab.perfmodel.frames import row_config, row_context, row_workload, usable_rows
from kvlab.perfmodel.roofline import (
    Assumptions,
    Config,
    Params,
    Workload,
    batch_time,
    crossover_context,
)
from kvlab.store import load_runs
from kvlab.units import approx_tokens, k_label

OVERHEADS = {VLLM: "vllm_step_overhead_s", SGLANG: "sglang_step_overhead_s"}

#: Physical priors: the physics-only fit (:func:`calibrate` with ``physics=True``) keeps every parameter inside
#: them; a free fit outside them is labelled non-physical, with what it then predicts (:func:`predictions`).
#: - decode bandwidth 0.3-0.9 of HBM peak: "FlashMLA: Efficient MLA decoding kernels" (DeepSeek, GitHub, 2025)
#:   reaches up to 3,000 GB/s memory-bound on an H800 SXM5 (3.35 TB/s peak, 0.9); good decode kernels run at
#:   roughly 50-80% of peak, and 0.3 leaves room for a slower engine.
#: - DCP collective 1-100 us: one small-message collective over NVLink inside one host takes microseconds to
#:   tens of microseconds ("NCCL Tests", NVIDIA, GitHub; vLLM's custom all-reduce); 100 us is a generous cap.
#: - prefill 0.05-1.0 of dense peak: loose (no kernel result pins it on B300).
#: - c(engine) 0-5 ms per decode step, each engine's own scheduling, sampling and launch cost: "vLLM v0.6.0: 2.7x
#:   Throughput Improvement and 5x Latency Reduction" (vLLM Team, vLLM blog, 2024-09-05,
#:   https://blog.vllm.ai/2024/09/05/perf-update.html) profiled Llama 3 8B on one H100 generating a token every 13 ms
#:   with 29% of the time in scheduling and input preparation (about 3.8 ms per step, before that release overlapped
#:   it): the largest published per-step cost of either engine, rounded up to 5 ms; "SGLang v0.4: Zero-Overhead Batch
#:   Scheduler, Cache-Aware Load Balancer, Faster Structured Outputs" (LMSYS Org, 2024-12-04,
#:   https://lmsys.org/blog/2024-12-04-sglang-v0-4/) overlaps the CPU scheduling with the GPU ("no single idle time on
#:   the GPU" in its Nsight profile): the lower end, 0. Per-step cost beyond 5 ms is what no bounded term explains
#:   (:func:`step_costs`); runs on the host would pin it (data/experiments/b300_step_fit.yaml).
PRIORS: dict[str, tuple[float, float]] = {
    "prefill_efficiency": (0.05, 1.0),
    "bandwidth_efficiency": (0.3, 0.9),
    "dcp_layer_latency_s": (1e-6, 100e-6),
    "vllm_step_overhead_s": (0.0, 5e-3),
    "sglang_step_overhead_s": (0.0, 5e-3),
}
#: Where each prior comes from (title, publisher, date), printed beside the fits.
PRIOR_SOURCES: dict[str, str] = {
    "prefill_efficiency": "loose; no public kernel result pins it on B300",
    "bandwidth_efficiency": '"FlashMLA: Efficient MLA decoding kernels" (DeepSeek, GitHub, 2025): up to 3,000 GB/s '
    "memory-bound on H800 SXM5 (0.9 of 3.35 TB/s)",
    "dcp_layer_latency_s": '"NCCL Tests" (NVIDIA, GitHub): small-message NVLink collectives take microseconds to tens '
    "of microseconds",
    "vllm_step_overhead_s": '"vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction" (vLLM Team, vLLM blog, '
    "2024-09-05): scheduling 29% of a 13 ms Llama-3-8B step on H100 before it was overlapped, "
    "about 3.8 ms; rounded up to 5 ms",
    "sglang_step_overhead_s": '"SGLang v0.4: Zero-Overhead Batch Scheduler" (LMSYS Org, 2024-12-04): CPU scheduling '
    "overlapped with the GPU (0 at the low end); 5 ms, the vLLM figure, at the high end",
}
#: Bounds of the bounded ("physics-only") fit: every named term inside its prior, and each engine's per-step cost
#: unbounded above, so the fit can reproduce the table; what it needs beyond c(engine)'s prior is reported as the
#: engine's **unexplained per-step cost** (:func:`step_costs`), never hidden in a named term.
BOUNDED = PRIORS | {"vllm_step_overhead_s": (0.0, math.inf), "sglang_step_overhead_s": (0.0, math.inf)}
#: What counts as physically sane on a GPU host: the priors (the old name, kept for the reports).
SANE_RANGES = PRIORS
#: Hard physical limits, beside the priors: no fit can run prefill above the dense peak of its number format, nor
#: read memory above the peak bandwidth. A fit past either (a fraction above 1) is *over peak*: flagged in every table
#: (``over_peak``) and never counted consistent with the published totals (:func:`consistent_fits`).
PEAK_LIMITED = {"prefill_efficiency": "prefill", "bandwidth_efficiency": "decode bandwidth"}


def over_peak(prefill_efficiency: float, bandwidth_efficiency: float) -> str:
    """Where a fit exceeds its hardware's peak, in words ('prefill 1.47× peak'; '' within peak): the physical
    limits of :data:`PEAK_LIMITED`, whatever the priors say."""
    values = {"prefill_efficiency": prefill_efficiency, "bandwidth_efficiency": bandwidth_efficiency}
    return "; ".join(
        f"{words} {values[name]:.2f}× peak" for name, words in PEAK_LIMITED.items() if values[name] > 1 + 1e-9
    )


@dataclass(frozen=True)
class Fit:
    """Calibration of one hardware: parameters, per-point residuals and leave-one-out errors."""

    hardware: str  # catalog GPU key
    params: Params
    free: tuple[str, ...]  # parameters the data could identify (the rest stay at their defaults)
    residuals: pl.DataFrame  # one row per point: observed_s, modelled_s, residual_pct
    loo: pl.DataFrame  # one row per point: loo_modelled_s, loo_error_pct (fit without that point)
    warnings: tuple[str, ...] = field(default=())
    kind: str = "free"  # "free": bounds wide, priors only checked; "physics": every named term inside PRIORS
    model: str = ""  # the catalog model whose published or measured points were fitted (fitted terms stay with it)

    @property
    def physical(self) -> bool:
        """Every fitted parameter inside its prior (a CPU fit's warnings are notes about nominal figures)."""
        return self.hardware == "CPU" or not self.warnings

    @property
    def max_abs_residual_pct(self) -> float:
        return float(self.residuals["residual_pct"].abs().max())

    @property
    def rms_residual_pct(self) -> float:
        return float(np.sqrt((self.residuals["residual_pct"] ** 2).mean()))

    @property
    def loo_mean_abs_pct(self) -> float:
        return float(self.loo["loo_error_pct"].abs().mean()) if self.loo.height else math.nan

    @property
    def loo_max_abs_pct(self) -> float:
        return float(self.loo["loo_error_pct"].abs().max()) if self.loo.height else math.nan

    def summary(self) -> str:
        p = self.params
        what = (
            "physics-only fit (every named term inside its prior; what the table needs beyond them is the "
            "unexplained per-step cost)"
            if self.kind == "physics"
            else "free fit" + ("" if self.physical else " — NON-PHYSICAL (outside its priors)")
        )
        lines = [
            f"calibration on {self.hardware}, {what}: {self.residuals.height} points, free {list(self.free)}",
            f"  prefill_efficiency   = {p.prefill_efficiency:.3f}",
            f"  bandwidth_efficiency = {p.bandwidth_efficiency:.3f}",
            f"  dcp_layer_latency    = {p.dcp_layer_latency_s * 1e6:.1f} us per collective (one per full-attention "
            "layer per step)",
        ]
        if self.kind == "physics":
            lines += [
                f"  c({e:<6})            = {c.fitted_overhead_s * 1e3:.2f} ms per decode step (prior "
                f"0-{PRIORS[OVERHEADS[e]][1] * 1e3:g} ms) + unexplained per-step cost {c.unexplained_s * 1e3:.2f} ms"
                for e, c in step_costs(p).items()
                if OVERHEADS[e] in self.free
            ]
        else:
            lines += [
                f"  c({e:<6})            = {getattr(p, n) * 1e3:.2f} ms per decode step"
                for e, n in OVERHEADS.items()
                if n in self.free or getattr(p, n)
            ]
        lines += [
            f"  residuals: max |{self.max_abs_residual_pct:.1f}|%, rms {self.rms_residual_pct:.1f}%",
            f"  leave-one-out error: mean |{self.loo_mean_abs_pct:.1f}|%, max |{self.loo_max_abs_pct:.1f}|%",
        ]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def implausible(fit, short: bool = False) -> list[str]:
    """The fitted parameters outside their physically sane ranges, each in words with its value and (unless
    ``short``) the plausible range."""
    if fit.hardware == "CPU":
        return []
    p, out = fit.params, []
    for name in fit.free:
        lo, hi = SANE_RANGES[name]
        v = getattr(p, name)
        if lo <= v <= hi:
            continue
        how_far = f"{v / hi:.2g}× the plausible maximum" if v > hi else f"{lo / v:.2g}× below the plausible minimum"
        if name == "prefill_efficiency":
            text, rng = f"prefill at {v:.1%} of dense peak", f" ({how_far}; plausible: {lo:.0%}–{hi:.0%})"
        elif name == "bandwidth_efficiency":
            text, rng = f"decode at {v:.1%} of peak memory bandwidth", f" ({how_far}; plausible: {lo:.0%}–{hi:.0%})"
        else:
            text = f"DCP at {v * 1e6:,.0f} µs per layer and step"
            rng = f" ({how_far}; plausible for NVLink collectives: {lo * 1e6:g}–{hi * 1e6:g} µs)"
        out.append(text if short else text + rng)
    return out


def _setup(rows: list[dict], w: Workload, a: Assumptions) -> list[tuple[Config, int, Workload, float]]:
    return [(row_config(r, a), row_context(r), row_workload(r, w), float(r["batch_time_s"])) for r in rows]


def _to_theta(name: str, v: float) -> float:
    """Fitted coordinates: efficiencies in log space (positive, scale-free), DCP latency in us, overheads in ms."""
    if name.endswith("_efficiency"):
        return float(np.log(v)) if v > 0 else -np.inf
    if name == "dcp_layer_latency_s":
        return v * 1e6
    return v * 1e3 if math.isfinite(v) else v


def _from_theta(name: str, t: float) -> float:
    if name.endswith("_efficiency"):
        return float(np.exp(t))
    return float(t) * (1e-6 if name == "dcp_layer_latency_s" else 1e-3)


def _params(theta: np.ndarray, free: tuple[str, ...], base: Params) -> Params:
    values = base.as_dict()
    for name, t in zip(free, theta):
        values[name] = _from_theta(name, t)
    return Params(**values)


def _theta0(free: tuple[str, ...], base: Params) -> np.ndarray:
    return np.array([_to_theta(n, getattr(base, n)) for n in free])


def _free(points: list[tuple[Config, int, Workload, float]], physics: bool = False) -> tuple[str, ...]:
    """The free fit: prefill and bandwidth efficiency and, with DCP points, the DCP latency (at most one
    parameter per point; the engines' overheads stay 0, so with DCP only on SGLang the latency x full-attention
    layers is the same term in a batch total as c(SGLang)). The physics-only fit adds c(engine) of each engine
    present: more parameters than four points pin, so its split between the DCP latency and c(SGLang) is one of
    a family of equally good fits (only their sum per step is identified)."""
    free = ["prefill_efficiency", "bandwidth_efficiency"]
    if any(cfg.dcp > 1 for cfg, *_ in points):
        free.append("dcp_layer_latency_s")
    if physics:
        engines = {FAMILY_OF.get(cfg.engine, cfg.engine) for cfg, *_ in points}
        return tuple(free + [OVERHEADS[e] for e in (VLLM, SGLANG) if e in engines])
    return tuple(free[: max(1, len(points))])


#: Wide bounds of the free fit (natural units).
WIDE: dict[str, tuple[float, float]] = {
    "prefill_efficiency": (1e-4, 10.0),
    "bandwidth_efficiency": (1e-4, 10.0),
    "dcp_layer_latency_s": (0.0, 0.1),
    "vllm_step_overhead_s": (0.0, 10.0),
    "sglang_step_overhead_s": (0.0, 10.0),
}
#: Starting point of the physics-only fit (inside every prior).
PHYSICS_START = Params(
    prefill_efficiency=0.4,
    bandwidth_efficiency=0.6,
    dcp_layer_latency_s=30e-6,
    vllm_step_overhead_s=5e-3,
    sglang_step_overhead_s=5e-3,
)


def _fit(
    points, a: Assumptions, base: Params = Params(), free: tuple[str, ...] | None = None, physics: bool = False
) -> Params:
    """The least-squares fit of ``free`` to ``points`` (the physics-only fit with ``physics``), kept between processes
    by :mod:`kvlab.perfmodel.fitcache`: a fit this code has made for these inputs before is read, not refitted."""
    free = free or _free(points, physics)
    return fitcache.cached(_solve, points, a, PHYSICS_START if physics else base, free, physics)


def _solve(points, a: Assumptions, base: Params, free: tuple[str, ...], physics: bool) -> Params:
    bounds = BOUNDED if physics else WIDE

    def resid(theta):
        p = _params(theta, free, base)
        return np.array([math.log(batch_time(c, x, w, p, a).batch_time_s / obs) for c, x, w, obs in points])

    lo = [_to_theta(n, bounds[n][0]) for n in free]
    hi = [_to_theta(n, bounds[n][1]) for n in free]
    x0 = np.clip(
        _theta0(free, base),
        [v + 1e-9 if math.isfinite(v) else v for v in lo],
        [v - 1e-9 if math.isfinite(v) else v for v in hi],
    )
    sol = least_squares(resid, x0, bounds=(lo, hi), method="trf", x_scale="jac")
    p = _params(sol.x, free, base)
    return _dcp_at_its_bound(p, points, free) if physics else p


def _dcp_at_its_bound(p: Params, points, free: tuple[str, ...]) -> Params:
    """The bounded fit with as much of SGLang's per-step cost as the DCP latency's prior allows moved into the DCP
    term: where every SGLang point runs DCP over the same full-attention layers L, a batch total sees only
    c(SGLang) + L x DCP latency (the four totals pin the sum, not the split), so the DCP latency is raised towards its
    prior's maximum and c(SGLang) lowered by the same time per step. Every modelled time stays the same; what is left
    beyond c's prior is then the least per-step cost no bounded term explains."""
    if not {"dcp_layer_latency_s", "sglang_step_overhead_s"} <= set(free):
        return p
    sg = [cfg for cfg, *_ in points if FAMILY_OF.get(cfg.engine, cfg.engine) == SGLANG]
    layers = {cfg.model.full_attention_layers for cfg in sg}
    if (
        not sg
        or any(cfg.dcp < 2 for cfg in sg)
        or len(layers) != 1
        or any(cfg.dcp > 1 for cfg, *_ in points if FAMILY_OF.get(cfg.engine, cfg.engine) != SGLANG)
    ):
        return p
    n = layers.pop()
    room = n * max(0.0, PRIORS["dcp_layer_latency_s"][1] - p.dcp_layer_latency_s)
    moved = min(p.sglang_step_overhead_s, room)
    return replace(
        p,
        dcp_layer_latency_s=p.dcp_layer_latency_s + moved / n,
        sglang_step_overhead_s=p.sglang_step_overhead_s - moved,
    )


@dataclass(frozen=True)
class StepCost:
    """One engine's per-step cost in a fit: the fitted per-step overhead c(engine), inside its prior
    (:data:`PRIORS`), and the **unexplained per-step cost**: what the fit needs beyond that prior, which no bounded term
    of the model absorbs (seconds)."""

    engine: str
    fitted_overhead_s: float
    unexplained_s: float


def step_costs(p: Params) -> dict[str, StepCost]:
    """Each engine's per-step cost in a bounded fit's parameters, split at the prior's maximum: c(engine) =
    min(cost, 5 ms), the unexplained per-step cost = the rest (0 when the prior holds it all)."""
    out = {}
    for engine, name in OVERHEADS.items():
        total, cap = getattr(p, name), PRIORS[name][1]
        out[engine] = StepCost(engine, min(total, cap), max(0.0, total - cap))
    return out


def _sanity(p: Params, hardware: str, free: tuple[str, ...], physics: bool = False) -> tuple[str, ...]:
    """The fitted terms outside their priors. A bounded fit's per-step costs are not checked here: what they need
    beyond their prior is reported as the unexplained per-step cost (:func:`step_costs`), not as a term out of range."""
    if hardware == "CPU":
        return ("CPU figures in the catalog are nominal: efficiencies are relative to them, not to a datasheet",)
    out = []
    for name in free:
        if physics and name in OVERHEADS.values():
            continue
        lo, hi = PRIORS[name]
        v = getattr(p, name)
        if not lo * (1 - 1e-6) <= v <= hi * (1 + 1e-6):
            shown = f"{v * 1e6:.0f} us" if name == "dcp_layer_latency_s" else f"{v:.3f}"
            rng = f"{lo * 1e6:g}-{hi * 1e6:g} us" if name == "dcp_layer_latency_s" else f"{lo:g}-{hi:g}"
            out.append(f"{name} = {shown} is outside the physically sane range {rng}")
    return tuple(out)


def calibrate(
    runs: pl.DataFrame,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
    sources: tuple[str, ...] = ("published", "measured"),
    physics: bool = False,
    leave_one_out: bool = True,
) -> dict[str, Fit]:
    """Fit :class:`Params` per catalog hardware to every ok batch time of ``sources`` in ``runs``: the free fit,
    or with ``physics`` the physics-only fit (every parameter inside :data:`PRIORS`, the engines' overheads
    c(engine) free)."""
    pts = usable_rows(runs, sources)
    by_hw: dict[str, list[dict]] = {}
    for r in pts.iter_rows(named=True):
        by_hw.setdefault(row_config(r, assumptions).gpu.gpu, []).append(r)
    fits = {}
    for hw, rows in by_hw.items():
        points = _setup(rows, workload, assumptions)
        free = _free(points, physics)
        p = _fit(points, assumptions, free=free, physics=physics)
        res, loo = [], []
        for i, (r, (cfg, ctx, w, obs)) in enumerate(zip(rows, points)):
            mod = batch_time(cfg, ctx, w, p, assumptions).batch_time_s
            key = {
                "source": r["source"],
                "run_id": r["run_id"],
                "engine": cfg.engine,
                "dcp": cfg.dcp,
                "context_tokens": ctx,
            }
            res.append(key | {"observed_s": obs, "modelled_s": mod, "residual_pct": 100 * (mod / obs - 1)})
            if leave_one_out and len(points) > 1:
                rest = points[:i] + points[i + 1 :]
                free_i = tuple(n for n in free if n in _free(rest, physics))
                p_i = _fit(rest, assumptions, free=free_i, physics=physics)
                mod_i = batch_time(cfg, ctx, w, p_i, assumptions).batch_time_s
                loo.append(key | {"observed_s": obs, "loo_modelled_s": mod_i, "loo_error_pct": 100 * (mod_i / obs - 1)})
        loo_schema = {"source": pl.String, "run_id": pl.String, "engine": pl.String, "dcp": pl.Int64,
                      "context_tokens": pl.Int64, "observed_s": pl.Float64, "loo_modelled_s": pl.Float64,
                      "loo_error_pct": pl.Float64}  # fmt: skip
        models = {row_config(r, assumptions).model.model for r in rows}
        fits[hw] = Fit(
            hw,
            p,
            free,
            pl.DataFrame(res),
            pl.DataFrame(loo, schema=loo_schema),
            _sanity(p, hw, free, physics),
            "physics" if physics else "free",
            models.pop() if len(models) == 1 else "",
        )
    return fits


@lru_cache(maxsize=512)
def _published_fit(
    data_dir: str,
    workload: Workload,
    assumptions: Assumptions,
    experiment: str,
    physics: bool = False,
    loo: bool = True,
) -> Fit:
    runs = _published_runs(data_dir, experiment)
    fits = calibrate(runs, workload, assumptions, sources=("published",), physics=physics, leave_one_out=loo)
    if len(fits) != 1:
        raise ValueError(f"{data_dir}: expected published rows of one hardware for '{experiment}', got {sorted(fits)}")
    return next(iter(fits.values()))


@lru_cache(maxsize=8)
def _published_runs(data_dir: str, experiment: str) -> pl.DataFrame:
    return load_runs(data_dir, experiment=experiment)


def published_fit(
    data_dir: str | Path = DATA_DIR,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
    experiment: str = "article_b300",
    physics: bool = False,
    loo: bool = True,
) -> Fit:
    """The calibration on the B300 article's four published batch times (cached): the free fit, or with
    ``physics`` the physics-only fit (every parameter inside :data:`PRIORS`); ``loo=False`` skips the
    leave-one-out refits."""
    return _published_fit(str(Path(data_dir).resolve()), workload, assumptions, experiment, physics, loo)


@dataclass(frozen=True)
class Forecast:
    """What one fit predicts for vLLM TP (no DCP) against SGLang TP+DCP: the faster engine and vLLM's time over
    SGLang's at each context (above 1: SGLang faster), and the crossover (tokens; None when none up to 1M)."""

    contexts: tuple[int, ...]
    winners: tuple[str, ...]
    ratios: tuple[float, ...]  # T(vLLM) / T(SGLang)
    crossover: float | None

    def text(self) -> str:
        parts = [
            f"{w} wins at {k_label(c)} (vLLM/SGLang time {r:.2f})"
            for c, w, r in zip(self.contexts, self.winners, self.ratios)
        ]
        xo = f"crossover {approx_tokens(self.crossover)}" if self.crossover else "no crossover up to 1M tokens"
        return "; ".join(parts) + f"; {xo}"


def forecast(
    fit: Fit,
    contexts: tuple[int, ...] = (65536, 204800),
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
) -> Forecast:
    """Winner at each of ``contexts`` and the crossover under ``fit``'s parameters (vLLM TP ``tp`` against
    SGLang TP ``tp`` + DCP ``dcp``; for another model than the fit's, the uncalibrated roofline: :func:`fit_for_model`)."""
    fit = fit_for_model(fit, model)
    a = Config.of(gpu, model, VLLM, tp, 1, assumptions.default_mem_util)
    b = Config.of(gpu, model, SGLANG, tp, dcp, assumptions.default_mem_util)
    ratios = tuple(
        batch_time(a, c, workload, fit.params, assumptions).batch_time_s
        / batch_time(b, c, workload, fit.params, assumptions).batch_time_s
        for c in contexts
    )
    winners = tuple(engine_label(SGLANG) if r > 1 else engine_label(VLLM) for r in ratios)
    return Forecast(
        tuple(contexts), winners, ratios, crossover_from_fit(fit, gpu, model, dcp, tp, workload, assumptions)
    )


def fits_frame(
    free: Fit,
    phys: Fit,
    contexts: tuple[int, ...] = (65536, 204800),
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
) -> pl.DataFrame:
    """The free fit and the physics-only fit side by side: one row each with its parameters, residual, held-out
    error, whether every parameter is inside its prior, and what it predicts (winners at ``contexts``, crossover)."""
    rows = []
    for f in (free, phys):
        fc = forecast(f, contexts, workload=workload, assumptions=assumptions)
        p = f.params
        rows.append(
            {
                "fit": "physics-only" if f.kind == "physics" else "free",
                "physical": f.physical,
                "over_peak": over_peak(p.prefill_efficiency, p.bandwidth_efficiency),
                "prefill_efficiency": p.prefill_efficiency,
                "bandwidth_efficiency": p.bandwidth_efficiency,
                "dcp_layer_latency_us": p.dcp_layer_latency_s * 1e6,
                "vllm_overhead_ms": p.vllm_step_overhead_s * 1e3,
                "sglang_overhead_ms": p.sglang_step_overhead_s * 1e3,
                "max_abs_residual_pct": f.max_abs_residual_pct,
                "loo_mean_abs_pct": f.loo_mean_abs_pct,
                **{f"winner_{c // 1024}k": w for c, w in zip(fc.contexts, fc.winners)},
                "crossover_tokens": fc.crossover,
            }
        )
    return pl.DataFrame(rows)


def _attn_layers(model: str = "Kimi-K3") -> int:
    return find_model(model).full_attention_layers


def physics_check(
    free: Fit,
    phys: Fit,
    contexts: tuple[int, ...] = (65536, 204800),
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
) -> str:
    """The free fit beside the physics-only fit, each with what it predicts; a free fit outside its priors is
    labelled non-physical together with its consequence (what the model would say held to physics)."""
    f, p = (
        forecast(free, contexts, workload=workload, assumptions=assumptions),
        forecast(phys, contexts, workload=workload, assumptions=assumptions),
    )
    lines = [
        f"  free fit ({'physical' if free.physical else 'NON-PHYSICAL'}): {f.text()}; residuals max "
        f"|{free.max_abs_residual_pct:.1f}|%",
        f"  physics-only fit: {p.text()}; residuals max |{phys.max_abs_residual_pct:.1f}|%; "
        f"c(vLLM) {phys.params.vllm_step_overhead_s * 1e3:.1f} ms, c(SGLang) "
        f"{phys.params.sglang_step_overhead_s * 1e3:.1f} ms per step, DCP "
        f"{phys.params.dcp_layer_latency_s * 1e6:.0f} us per collective, bandwidth "
        f"{phys.params.bandwidth_efficiency:.2f} of peak",
        f"  (the four totals pin only c(SGLang) + {_attn_layers()} x DCP latency = "
        f"{(phys.params.sglang_step_overhead_s + _attn_layers() * phys.params.dcp_layer_latency_s) * 1e3:.1f} ms "
        "per step, not its split: any DCP latency inside 1-100 us with c(SGLang) taking the rest fits as well)",
    ]
    if not free.physical:
        bad = "; ".join(free.warnings)
        same = f.winners == p.winners
        lines.append(
            f"  non-physical: {bad}. Consequence: the free fit's winners ("
            + ", ".join(f"{w} at {c:,}" for c, w in zip(f.contexts, f.winners))
            + ") "
            + ("survive" if same else "do NOT survive")
            + " when every parameter is held to its prior ("
            + ", ".join(f"{w} at {c:,}" for c, w in zip(p.contexts, p.winners))
            + ")"
            + (
                f", and the crossover moves to {approx_tokens(p.crossover)}"
                if p.crossover
                else ", and no crossover remains"
            )
            + "."
        )
    return "\n".join(lines)


def crossover_from_fit(
    fit: Fit,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    dcp: int = 8,
    tp: int = 8,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
) -> float | None:
    """Context where vLLM TP (no DCP) and SGLang TP+DCP take equal time under the fitted parameters (for another model
    than the fit's: under the uncalibrated roofline, :func:`fit_for_model`)."""
    fit = fit_for_model(fit, model)
    a = Config.of(gpu, model, VLLM, tp, 1, assumptions.default_mem_util)
    b = Config.of(gpu, model, SGLANG, tp, dcp, assumptions.default_mem_util)
    return crossover_context(a, b, workload, fit.params, assumptions)


# --------------------------------------------------------------------------- fitted terms stay with their model


def _mid(name: str) -> float:
    lo, hi = PRIORS[name]
    return (lo + hi) / 2


#: The uncalibrated roofline: every term at the centre of its prior (:data:`PRIORS`), and its two ends (the fast end:
#: efficiencies at their maximum, latency and per-step costs at their minimum; the slow end the other way round).
#: What the reports use for a model no published or measured point was fitted on.
PRIOR_CENTRE = Params(**{n: _mid(n) for n in PRIORS})
PRIOR_FAST = Params(
    prefill_efficiency=PRIORS["prefill_efficiency"][1],
    bandwidth_efficiency=PRIORS["bandwidth_efficiency"][1],
    dcp_layer_latency_s=PRIORS["dcp_layer_latency_s"][0],
    vllm_step_overhead_s=0.0,
    sglang_step_overhead_s=0.0,
)
PRIOR_SLOW = Params(
    prefill_efficiency=PRIORS["prefill_efficiency"][0],
    bandwidth_efficiency=PRIORS["bandwidth_efficiency"][0],
    dcp_layer_latency_s=PRIORS["dcp_layer_latency_s"][1],
    vllm_step_overhead_s=PRIORS["vllm_step_overhead_s"][1],
    sglang_step_overhead_s=PRIORS["sglang_step_overhead_s"][1],
)
UNCALIBRATED_NOTE = (
    "uncalibrated roofline at the centre of its priors, with their range (no published or measured "
    "point of this model was fitted; a fit to another model's points is never applied to it)"
)


def same_model(a: str, b: str) -> bool:
    """Whether two model names are the same catalog model (by key or alias; unknown names compared as written)."""
    try:
        return find_model(a).model == find_model(b).model
    except KeyError:
        return a.strip().lower() == b.strip().lower()


def fit_for_model(fit: Fit, model: str) -> Fit:
    """``fit`` when it was fitted on ``model``'s own points (or records no model); otherwise the uncalibrated roofline
    at the centre of the priors (kind "uncalibrated", no residuals): a fit made on Kimi-K3's published points is never
    applied to another model. Every report that models another model goes through here."""
    if not fit.model or same_model(fit.model, model):
        return fit
    empty = pl.DataFrame(
        schema={
            "observed_s": pl.Float64,
            "modelled_s": pl.Float64,
            "residual_pct": pl.Float64,
            "engine": pl.String,
            "context_tokens": pl.Int64,
        }
    )
    loo = pl.DataFrame(
        schema={
            "engine": pl.String,
            "context_tokens": pl.Int64,
            "observed_s": pl.Float64,
            "loo_modelled_s": pl.Float64,
            "loo_error_pct": pl.Float64,
        }
    )
    return Fit(fit.hardware, PRIOR_CENTRE, (), empty, loo, (), "uncalibrated", find_model(model).model)


def uncalibrated_rows(
    w: Workload, a: Assumptions, gpu: str, model: str, tp: int, dcp: int, physics: bool = False
) -> list[dict]:
    """:func:`sensitivity`'s rows for a model no point was fitted on: the priors' centre, fast end and slow end
    (``fit``: "prior centre", "prior fast end", "prior slow end"), each with what it predicts, in the free fit's
    columns (and, with ``physics``, the same figures in the ``phys_*`` columns: there is no separate bounded fit)."""
    rows = []
    for label, p in (("prior centre", PRIOR_CENTRE), ("prior fast end", PRIOR_FAST), ("prior slow end", PRIOR_SLOW)):
        fc = forecast(
            Fit(gpu, p, (), pl.DataFrame(), pl.DataFrame(), (), "uncalibrated", model),
            gpu=gpu,
            model=model,
            tp=tp,
            dcp=dcp,
            workload=w,
            assumptions=a,
        )
        row = {
            "batch_size": w.batch_size,
            "output_tokens": w.output_tokens,
            "expert_reads": a.expert_reads,
            "mla_width": a.mla_width or 576,
            "kv_format": a.kv_format,
            "fit": label,
            "prefill_efficiency": p.prefill_efficiency,
            "bandwidth_efficiency": p.bandwidth_efficiency,
            "dcp_layer_latency_us": p.dcp_layer_latency_s * 1e6,
            "vllm_overhead_ms": p.vllm_step_overhead_s * 1e3,
            "sglang_overhead_ms": p.sglang_step_overhead_s * 1e3,
            "max_abs_residual_pct": None,
            "loo_mean_abs_pct": None,
            "loo_max_abs_pct": None,
            "crossover_tokens": fc.crossover,
            "physical": True,
            "implausible": "",
            "over_peak": "",
            "winner_64k": fc.winners[0],
            "winner_200k": fc.winners[1],
        }
        if physics:
            row |= {
                "phys_prefill_efficiency": p.prefill_efficiency,
                "phys_bandwidth_efficiency": p.bandwidth_efficiency,
                "phys_dcp_layer_latency_us": p.dcp_layer_latency_s * 1e6,
                "phys_vllm_overhead_ms": p.vllm_step_overhead_s * 1e3,
                "phys_sglang_overhead_ms": p.sglang_step_overhead_s * 1e3,
                "phys_max_abs_residual_pct": None,
                "phys_crossover_tokens": fc.crossover,
                "phys_winner_64k": fc.winners[0],
                "phys_winner_200k": fc.winners[1],
                "phys_vllm_unexplained_ms": 0.0,
                "phys_sglang_unexplained_ms": 0.0,
            }
        rows.append(row)
    return rows


def sensitivity(
    workloads: list[Workload],
    data_dir: str | Path = DATA_DIR,
    assumptions: Assumptions = Assumptions(),
    experiment: str = "article_b300",
    expert_reads: tuple[str, ...] | None = None,
    mla_widths: tuple[int | None, ...] | None = None,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
    kv_formats: tuple[str, ...] | None = None,
    physics: bool = False,
) -> pl.DataFrame:
    """How what the article does not state moves the fit and the crossover: one row per assumed (batch size,
    output tokens) × expert-read model (``expert_reads``: "uniform", "active") × cached MLA width (``mla_widths``:
    None = 576, or 512) × KV number format (``kv_formats``: "bf16", "fp8", "fp8_packed_mla"), each refitted to
    the four published points. Defaults: ``assumptions``' own. The crossover is that of vLLM TP ``tp`` against
    SGLang TP ``tp`` + DCP ``dcp`` serving ``model`` on ``gpu`` (the fit itself is always to the published runs'
    own hardware). With ``physics``, each row also holds the physics-only fit (``phys_*`` columns: its parameters,
    residual, crossover and the winners at 64K and 200K) beside the free fit's (``winner_64k``, ``winner_200k``)."""
    rows = []
    for w in workloads:
        for reads in expert_reads or (assumptions.expert_reads,):
            for width in mla_widths or (assumptions.mla_width,):
                for fmt in kv_formats or (assumptions.kv_format,):
                    a = replace(assumptions, expert_reads=reads, mla_width=width, kv_format=fmt)
                    f = fit_for_model(published_fit(data_dir, w, a, experiment), model)
                    if f.kind == "uncalibrated":  # a fit stays with its model: the priors' range instead
                        rows += uncalibrated_rows(w, a, gpu, model, tp, dcp, physics)
                        continue
                    fc = forecast(f, gpu=gpu, model=model, tp=tp, dcp=dcp, workload=w, assumptions=a)
                    row = {
                        "batch_size": w.batch_size, "output_tokens": w.output_tokens, "expert_reads": reads,
                        "mla_width": width or 576, "kv_format": fmt,
                        "prefill_efficiency": f.params.prefill_efficiency, "bandwidth_efficiency": f.params.bandwidth_efficiency,
                        "dcp_layer_latency_us": f.params.dcp_layer_latency_s * 1e6,
                        "max_abs_residual_pct": f.max_abs_residual_pct, "loo_mean_abs_pct": f.loo_mean_abs_pct,
                        "loo_max_abs_pct": f.loo_max_abs_pct, "crossover_tokens": fc.crossover, "physical": not f.warnings,
                        "implausible": "; ".join(f.warnings),
                        "over_peak": over_peak(f.params.prefill_efficiency, f.params.bandwidth_efficiency),
                        "winner_64k": fc.winners[0], "winner_200k": fc.winners[1],
                    }  # fmt: skip
                    if physics:
                        ph = published_fit(data_dir, w, a, experiment, physics=True, loo=False)
                        pc = forecast(ph, gpu=gpu, model=model, tp=tp, dcp=dcp, workload=w, assumptions=a)
                        row |= {
                            "phys_prefill_efficiency": ph.params.prefill_efficiency,
                            "phys_bandwidth_efficiency": ph.params.bandwidth_efficiency,
                            "phys_dcp_layer_latency_us": ph.params.dcp_layer_latency_s * 1e6,
                            "phys_vllm_overhead_ms": ph.params.vllm_step_overhead_s * 1e3,
                            "phys_sglang_overhead_ms": ph.params.sglang_step_overhead_s * 1e3,
                            "phys_max_abs_residual_pct": ph.max_abs_residual_pct, "phys_crossover_tokens": pc.crossover,
                            "phys_winner_64k": pc.winners[0], "phys_winner_200k": pc.winners[1],
                            **{f"phys_{e}_unexplained_ms": c.unexplained_s * 1e3
                               for e, c in step_costs(ph.params).items()},
                        }  # fmt: skip
                    rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)  # a crossover is a whole token, or a float where none is


#: The assumptions the four published points cannot pin, each at the ends the sources allow: batch size (1 to
#: 32) and output length (the article states neither), expert reads (correlated vs uniform routing), cached MLA
#: width and the KV cache's number format (InferenceX's recipes default to FP8 KV; the article does not say).
UNPINNED_WORKLOADS = tuple(Workload(b, n) for b in (1, 4, 8, 32) for n in (1024, 4096))
UNPINNED_EXPERT_READS = ("uniform", "active")
UNPINNED_MLA_WIDTHS = (None, 512)
UNPINNED_KV_FORMATS = ("bf16", "fp8", "fp8_packed_mla")
#: The axes of the range in words (for the CLI and the reports).
UNPINNED_AXES = (
    "batch 1/4/8/32 x output 1,024/4,096 x expert reads uniform/active x MLA width 576/512 x KV format "
    "BF16/FP8/packed FP8 MLA"
)


def crossover_range(
    data_dir: str | Path = DATA_DIR,
    assumptions: Assumptions = Assumptions(),
    experiment: str = "article_b300",
    workloads: list[Workload] | None = None,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
    physics: bool = False,
) -> tuple[pl.DataFrame, tuple[float, float] | None]:
    """The crossover over every combination of ``workloads`` (default :data:`UNPINNED_WORKLOADS`),
    :data:`UNPINNED_EXPERT_READS`, :data:`UNPINNED_MLA_WIDTHS` and :data:`UNPINNED_KV_FORMATS` (96 refits by
    default): the table, and (lowest, highest) crossover over the fits that cross (None when none does).
    Non-physical fits are kept in the range and flagged in the table's ``physical``; with ``physics`` the table
    also holds each set's physics-only fit (:func:`sensitivity`).
    ``gpu``/``model``/``tp``/``dcp``: the configuration whose crossover is sought (see :func:`sensitivity`)."""
    sens = sensitivity(
        list(workloads or UNPINNED_WORKLOADS),
        data_dir,
        assumptions,
        experiment,
        UNPINNED_EXPERT_READS,
        UNPINNED_MLA_WIDTHS,
        gpu,
        model,
        tp,
        dcp,
        UNPINNED_KV_FORMATS,
        physics,
    )
    xs = sens["crossover_tokens"].drop_nulls()
    return sens, ((float(xs.min()), float(xs.max())) if len(xs) else None)


def refits(
    sens: pl.DataFrame,
    base: Assumptions = Assumptions(),
    physics: bool = False,
) -> list[tuple[Workload, Assumptions, Params]]:
    """The (workload, assumptions, fitted parameters) of every row of a :func:`sensitivity` table, so any
    modelled figure can be recomputed under each assumption set and given as a range (``base``: the assumptions
    the table did not vary; ``physics``: the rows' physics-only fits instead of their free fits)."""
    out = []
    for r in sens.iter_rows(named=True):
        a = replace(
            base,
            expert_reads=r.get("expert_reads") or "uniform",
            mla_width=None if r.get("mla_width") in (None, 576) else int(r["mla_width"]),
            kv_format=r.get("kv_format") or base.kv_format,
        )
        if physics:
            p = Params(
                prefill_efficiency=r["phys_prefill_efficiency"],
                bandwidth_efficiency=r["phys_bandwidth_efficiency"],
                dcp_layer_latency_s=r["phys_dcp_layer_latency_us"] * 1e-6,
                vllm_step_overhead_s=r["phys_vllm_overhead_ms"] * 1e-3,
                sglang_step_overhead_s=r["phys_sglang_overhead_ms"] * 1e-3,
            )
        else:  # a free fit has no per-step overheads; an uncalibrated row (another model) has its priors' ones
            p = Params(
                prefill_efficiency=r["prefill_efficiency"],
                bandwidth_efficiency=r["bandwidth_efficiency"],
                dcp_layer_latency_s=r["dcp_layer_latency_us"] * 1e-6,
                vllm_step_overhead_s=(r.get("vllm_overhead_ms") or 0.0) * 1e-3,
                sglang_step_overhead_s=(r.get("sglang_overhead_ms") or 0.0) * 1e-3,
            )
        out.append((Workload(int(r["batch_size"]), int(r["output_tokens"])), a, p))
    return out


def speed_ratio_range(sens: pl.DataFrame, cfg_a: Config, cfg_b: Config, context_tokens: int) -> tuple[float, float]:
    """T(cfg_a) / T(cfg_b) at ``context_tokens`` under every assumption set of ``sens``: (lowest, highest);
    above 1 means ``cfg_b`` is faster."""
    ratios = [
        batch_time(cfg_a, context_tokens, w, p, a).batch_time_s
        / batch_time(cfg_b, context_tokens, w, p, a).batch_time_s
        for w, a, p in refits(sens)
    ]
    return min(ratios), max(ratios)


# --------------------------------------------------------------------------- the set of fits the four totals allow

#: The rule for "consistent with the published totals": a fit is consistent when its largest residual is within
#: :data:`CONSISTENT_TOLERANCE_PCT` percentage points of the best fit's in the whole family (every assumption set,
#: every bandwidth on :data:`BANDWIDTH_GRID`, the free and the physics-only fits) that stays within the hardware's
#: peak, and it is within peak itself (:func:`over_peak`: a fit needing prefill or bandwidth above 100% of peak
#: cannot happen, however well it matches the totals). The stricter reading, every
#: modelled total within the totals' stated precision (:data:`PUBLISHED_PRECISION_S`: they are given to 0.1 s),
#: is reported beside it (``within_precision``): with five parameters and four totals some fits meet it exactly,
#: which says the totals are interpolated, not that the model is right to 0.05%.
CONSISTENT_TOLERANCE_PCT = 5.0
#: Half the last digit of the published totals (100.5 s, 150.8 s, 295.2 s, 225.3 s).
PUBLISHED_PRECISION_S = 0.05
#: Decode bandwidth efficiencies held fixed in turn (the other free parameters refitted): from the free fit's
#: region (a few % of peak) to the top of the prior (0.9).
BANDWIDTH_GRID = (0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.9)


def held_out_winners(fit: Fit) -> tuple[int, int]:
    """Held-out fits that still name the published winner at their point's context: (right, held-out points that
    have another engine's published time at the same context). The rule the verdicts grade by
    (:func:`kvlab.claims.held_out.winners_held_out`)."""
    obs = {(r["engine"], r["context_tokens"]): r["observed_s"] for r in fit.residuals.iter_rows(named=True)}
    right = total = 0
    for r in fit.loo.iter_rows(named=True):
        others = [t for (e, c), t in obs.items() if c == r["context_tokens"] and e != r["engine"]]
        if not others:
            continue
        total += 1
        right += (r["loo_modelled_s"] < min(others)) == (r["observed_s"] < min(others))
    return right, total


def _consistent_threshold(candidates: list[dict], tolerance_pct: float) -> float:
    """The largest residual a consistent fit may have: ``tolerance_pct`` points above the best candidate's among those
    within peak (a fit over peak cannot happen, so it sets no bar: :func:`over_peak`); inf when every one is over."""
    possible = [o["max_abs_residual_pct"] for o in candidates if not o["over_peak"]]
    return min(possible) + tolerance_pct if possible else math.inf


def _within_priors(p: Params, names: tuple[str, ...]) -> bool:
    return all(PRIORS[n][0] * (1 - 1e-6) <= getattr(p, n) <= PRIORS[n][1] * (1 + 1e-6) for n in names)


def consistent_fits(
    sens: pl.DataFrame,
    data_dir: str | Path = DATA_DIR,
    experiment: str = "article_b300",
    tolerance_pct: float = CONSISTENT_TOLERANCE_PCT,
    bandwidths: tuple[float, ...] = BANDWIDTH_GRID,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
    contexts: tuple[int, ...] = (65536, 204800),
    base: Assumptions = Assumptions(),
) -> pl.DataFrame:
    """Where the published totals are under-determined: the family of fits they allow, not one fit.

    For every assumption set of ``sens`` (a :func:`sensitivity` table with ``physics=True``), the candidates are
    its free fit, its physics-only fit, and one fit per decode bandwidth efficiency in ``bandwidths`` (held fixed,
    the prefill efficiency and DCP latency refitted). Each row: the set, the kind of fit, its parameters, its largest
    residual (% and s), whether every parameter is inside its prior (``physical``), where it exceeds the hardware's
    peak (``over_peak``, :func:`over_peak`: '' within it), whether every total is met within the published precision
    (``within_precision``) and whether it is ``consistent`` with the totals (within peak, and its largest residual
    within ``tolerance_pct`` points of the best fit within peak: the rule of :data:`CONSISTENT_TOLERANCE_PCT`); for
    consistent fits also what they predict (crossover, winners at ``contexts``). ``threshold_pct`` holds the
    cut-off.

    Each table is computed once per process for its inputs (the sensitivity table by its rows): a notebook re-run in
    one kernel (JupyterLab, or papermill's parameter variants) with the same published data refits nothing. Like
    :func:`_published_runs`, this assumes a reference table does not change under a running kernel."""
    return _consistent_fits(
        tuple(sens.rows()),
        tuple(sens.schema.items()),
        str(Path(data_dir).resolve()),
        experiment,
        tolerance_pct,
        tuple(bandwidths),
        gpu,
        model,
        tp,
        dcp,
        tuple(contexts),
        base,
    ).clone()


@lru_cache(maxsize=16)
def _consistent_fits(
    sens_rows: tuple,
    sens_schema: tuple,
    data_dir: str,
    experiment: str,
    tolerance_pct: float,
    bandwidths: tuple[float, ...],
    gpu: str,
    model: str,
    tp: int,
    dcp: int,
    contexts: tuple[int, ...],
    base: Assumptions,
) -> pl.DataFrame:
    sens = pl.DataFrame(list(sens_rows), schema=dict(sens_schema), orient="row")
    rows = usable_rows(_published_runs(str(Path(data_dir).resolve()), experiment), ("published",)).to_dicts()
    out = []
    keys = ("batch_size", "output_tokens", "expert_reads", "mla_width", "kv_format")
    for r, (w, a, p_free) in zip(sens.iter_rows(named=True), refits(sens, base)):
        s = {k: r[k] for k in keys}
        points = _setup(rows, w, a)
        cands = [("free", p_free)]
        if "phys_max_abs_residual_pct" in r:
            cands.append(("physics-only", refits(pl.DataFrame([r]), base, physics=True)[0][2]))
        for bw in bandwidths:
            cands.append(
                (
                    "free, bandwidth fixed",
                    _fit(
                        points,
                        a,
                        base=replace(Params(), bandwidth_efficiency=bw),
                        free=tuple(n for n in _free(points) if n != "bandwidth_efficiency"),
                    ),
                )
            )
        names = ("prefill_efficiency", "bandwidth_efficiency", "dcp_layer_latency_s")
        for kind, p in cands:
            mod = [(batch_time(c, x, wl, p, a).batch_time_s, obs) for c, x, wl, obs in points]
            res = max(abs(100 * (m / o - 1)) for m, o in mod)
            out.append(
                s
                | {
                    "fit": kind,
                    "prefill_efficiency": p.prefill_efficiency,
                    "bandwidth_efficiency": p.bandwidth_efficiency,
                    "dcp_layer_latency_us": p.dcp_layer_latency_s * 1e6,
                    "vllm_overhead_ms": p.vllm_step_overhead_s * 1e3,
                    "sglang_overhead_ms": p.sglang_step_overhead_s * 1e3,
                    "max_abs_residual_pct": float(res),
                    "max_abs_error_s": max(abs(m - o) for m, o in mod),
                    "within_precision": all(abs(m - o) <= PUBLISHED_PRECISION_S for m, o in mod),
                    "physical": _within_priors(p, names),
                    "over_peak": over_peak(p.prefill_efficiency, p.bandwidth_efficiency),
                    "_w": w,
                    "_a": a,
                    "_p": p,
                }
            )
    threshold = _consistent_threshold(out, tolerance_pct)
    final = []
    for o in out:
        w, a, p = o.pop("_w"), o.pop("_a"), o.pop("_p")
        o["consistent"] = o["max_abs_residual_pct"] <= threshold and not o["over_peak"]
        o["threshold_pct"] = threshold
        xo, wins = None, [None] * len(contexts)
        if o["consistent"]:
            fc = forecast(Fit(gpu, p, (), pl.DataFrame(), pl.DataFrame()), contexts, gpu, model, tp, dcp, w, a)
            xo, wins = fc.crossover, list(fc.winners)
        o["crossover_tokens"] = xo
        o |= {f"winner_{c // 1024}k": v for c, v in zip(contexts, wins)}
        final.append(o)
    return pl.DataFrame(final, infer_schema_length=None)
