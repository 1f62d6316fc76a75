"""Fit the model's few free parameters to published and measured batch times; residuals and leave-one-out error.

Per hardware there are at most three free parameters (:class:`~kvlab.perfmodel.roofline.Params`):
prefill efficiency, decode bandwidth efficiency and the per-layer DCP latency. Never one per row.
The fit minimises squared log errors of batch time (a relative error, symmetric in over/under).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import polars as pl
from scipy.optimize import least_squares

from kvlab.engines import SGLANG, VLLM
from kvlab.paths import DATA_DIR
from kvlab.perfmodel.frames import row_config, row_context, row_workload, usable_rows
from kvlab.perfmodel.roofline import (
    Assumptions,
    Config,
    Params,
    Workload,
    batch_time,
    crossover_context,
)

#: What counts as physically sane on a GPU host (NVLink collectives take microseconds, not milliseconds).
SANE_RANGES: dict[str, tuple[float, float]] = {
    "prefill_efficiency": (0.05, 1.0),
    "bandwidth_efficiency": (0.05, 1.0),
    "dcp_layer_latency_s": (1e-6, 100e-6),
}


@dataclass(frozen=True)
class Fit:
    """Calibration of one hardware: parameters, per-point residuals and leave-one-out errors."""

    hardware: str  # catalog GPU key
    params: Params
    free: tuple[str, ...]  # parameters the data could identify (the rest stay at their defaults)
    residuals: pl.DataFrame  # one row per point: observed_s, modelled_s, residual_pct
    loo: pl.DataFrame  # one row per point: loo_modelled_s, loo_error_pct (fit without that point)
    warnings: tuple[str, ...] = field(default=())

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
        lines = [
            f"calibration on {self.hardware}: {self.residuals.height} points, free {list(self.free)}",
            f"  prefill_efficiency   = {p.prefill_efficiency:.3f}",
            f"  bandwidth_efficiency = {p.bandwidth_efficiency:.3f}",
            f"  dcp_layer_latency    = {p.dcp_layer_latency_s * 1e6:.1f} us per full-attention layer per step",
            f"  residuals: max |{self.max_abs_residual_pct:.1f}|%, rms {self.rms_residual_pct:.1f}%",
            f"  leave-one-out error: mean |{self.loo_mean_abs_pct:.1f}|%, max |{self.loo_max_abs_pct:.1f}|%",
        ]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _setup(rows: list[dict], w: Workload, a: Assumptions) -> list[tuple[Config, int, Workload, float]]:
    return [(row_config(r, a), row_context(r), row_workload(r, w), float(r["batch_time_s"])) for r in rows]


def _params(theta: np.ndarray, free: tuple[str, ...], base: Params) -> Params:
    values = base.as_dict()
    for name, t in zip(free, theta):
        # efficiencies in log space (positive, scale-free); latency in microseconds
        values[name] = float(np.exp(t)) if name != "dcp_layer_latency_s" else float(t) * 1e-6
    return Params(**values)


def _theta0(free: tuple[str, ...], base: Params) -> np.ndarray:
    return np.array(
        [np.log(getattr(base, n)) if n != "dcp_layer_latency_s" else getattr(base, n) * 1e6 for n in free]
    )


def _free(points: list[tuple[Config, int, Workload, float]]) -> tuple[str, ...]:
    free = ["prefill_efficiency", "bandwidth_efficiency"]
    if any(cfg.dcp > 1 for cfg, *_ in points):
        free.append("dcp_layer_latency_s")
    return tuple(free[: max(1, len(points))])


def _fit(points, a: Assumptions, base: Params = Params(), free: tuple[str, ...] | None = None) -> Params:
    free = free or _free(points)

    def resid(theta):
        p = _params(theta, free, base)
        return np.array([math.log(batch_time(c, x, w, p, a).batch_time_s / obs) for c, x, w, obs in points])

    lo = [np.log(1e-4) if n != "dcp_layer_latency_s" else 0.0 for n in free]
    hi = [np.log(10.0) if n != "dcp_layer_latency_s" else 1e5 for n in free]
    sol = least_squares(resid, _theta0(free, base), bounds=(lo, hi), method="trf", x_scale="jac")
    return _params(sol.x, free, base)


def _sanity(p: Params, hardware: str, free: tuple[str, ...]) -> tuple[str, ...]:
    if hardware == "CPU":
        return ("CPU figures in the catalog are nominal: efficiencies are relative to them, not to a datasheet",)
    out = []
    for name in free:
        lo, hi = SANE_RANGES[name]
        v = getattr(p, name)
        if not lo <= v <= hi:
            shown = f"{v * 1e6:.0f} us" if name == "dcp_layer_latency_s" else f"{v:.3f}"
            rng = f"{lo * 1e6:g}-{hi * 1e6:g} us" if name == "dcp_layer_latency_s" else f"{lo:g}-{hi:g}"
            out.append(f"{name} = {shown} is outside the physically sane range {rng}")
    return tuple(out)


def calibrate(
    runs: pl.DataFrame,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
    sources: tuple[str, ...] = ("published", "measured"),
) -> dict[str, Fit]:
    """Fit :class:`Params` per catalog hardware to every ok batch time of ``sources`` in ``runs``."""
    pts = usable_rows(runs, sources)
    by_hw: dict[str, list[dict]] = {}
    for r in pts.iter_rows(named=True):
        by_hw.setdefault(row_config(r, assumptions).gpu.gpu, []).append(r)
    fits = {}
    for hw, rows in by_hw.items():
        points = _setup(rows, workload, assumptions)
        free = _free(points)
        p = _fit(points, assumptions, free=free)
        res, loo = [], []
        for i, (r, (cfg, ctx, w, obs)) in enumerate(zip(rows, points)):
            mod = batch_time(cfg, ctx, w, p, assumptions).batch_time_s
            key = {"source": r["source"], "run_id": r["run_id"], "engine": cfg.engine, "dcp": cfg.dcp, "context_tokens": ctx}
            res.append(key | {"observed_s": obs, "modelled_s": mod, "residual_pct": 100 * (mod / obs - 1)})
            if len(points) > 1:
                rest = points[:i] + points[i + 1 :]
                free_i = tuple(n for n in free if n in _free(rest))
                p_i = _fit(rest, assumptions, free=free_i)
                mod_i = batch_time(cfg, ctx, w, p_i, assumptions).batch_time_s
                loo.append(key | {"observed_s": obs, "loo_modelled_s": mod_i, "loo_error_pct": 100 * (mod_i / obs - 1)})
        loo_schema = {"source": pl.String, "run_id": pl.String, "engine": pl.String, "dcp": pl.Int64,
                      "context_tokens": pl.Int64, "observed_s": pl.Float64, "loo_modelled_s": pl.Float64,
                      "loo_error_pct": pl.Float64}  # fmt: skip
        fits[hw] = Fit(hw, p, free, pl.DataFrame(res), pl.DataFrame(loo, schema=loo_schema), _sanity(p, hw, free))
    return fits


@lru_cache(maxsize=16)
def _published_fit(data_dir: str, workload: Workload, assumptions: Assumptions, experiment: str) -> Fit:
    from kvlab.store import load_runs

    runs = load_runs(data_dir, experiment=experiment)
    fits = calibrate(runs, workload, assumptions, sources=("published",))
    if len(fits) != 1:
        raise ValueError(f"{data_dir}: expected published rows of one hardware for '{experiment}', got {sorted(fits)}")
    return next(iter(fits.values()))


def published_fit(
    data_dir: str | Path = DATA_DIR,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
    experiment: str = "article_b300",
) -> Fit:
    """The calibration on the B300 article's four published batch times (cached)."""
    return _published_fit(str(Path(data_dir).resolve()), workload, assumptions, experiment)


def crossover_from_fit(
    fit: Fit,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    dcp: int = 8,
    tp: int = 8,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
) -> float | None:
    """Context where vLLM TP (no DCP) and SGLang TP+DCP take equal time under the fitted parameters."""
    a = Config.of(gpu, model, VLLM, tp, 1, assumptions.default_mem_util)
    b = Config.of(gpu, model, SGLANG, tp, dcp, assumptions.default_mem_util)
    return crossover_context(a, b, workload, fit.params, assumptions)


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
) -> pl.DataFrame:
    """How what the article does not state moves the fit and the crossover: one row per assumed (batch size,
    output tokens) × expert-read model (``expert_reads``: "uniform", "active") × cached MLA width (``mla_widths``:
    None = 576, or 512), each refitted to the four published points. Defaults: ``assumptions``' own. The
    crossover is that of vLLM TP ``tp`` against SGLang TP ``tp`` + DCP ``dcp`` serving ``model`` on ``gpu``
    (the fit itself is always to the published runs' own hardware)."""
    from dataclasses import replace

    rows = []
    for w in workloads:
        for reads in expert_reads or (assumptions.expert_reads,):
            for width in mla_widths or (assumptions.mla_width,):
                a = replace(assumptions, expert_reads=reads, mla_width=width)
                f = published_fit(data_dir, w, a, experiment)
                x = crossover_from_fit(f, gpu, model, dcp, tp, workload=w, assumptions=a)
                rows.append(
                    {
                        "batch_size": w.batch_size, "output_tokens": w.output_tokens, "expert_reads": reads,
                        "mla_width": width or 576,
                        "prefill_efficiency": f.params.prefill_efficiency, "bandwidth_efficiency": f.params.bandwidth_efficiency,
                        "dcp_layer_latency_us": f.params.dcp_layer_latency_s * 1e6,
                        "max_abs_residual_pct": f.max_abs_residual_pct, "loo_mean_abs_pct": f.loo_mean_abs_pct,
                        "loo_max_abs_pct": f.loo_max_abs_pct, "crossover_tokens": x, "physical": not f.warnings,
                        "implausible": "; ".join(f.warnings),
                    }
                )  # fmt: skip
    return pl.DataFrame(rows)


#: The assumptions the four published points cannot pin, each at the two ends the sources allow: batch size and
#: output length (the article states neither), expert reads (correlated vs uniform routing), cached MLA width.
UNPINNED_WORKLOADS = (Workload(8, 1024), Workload(8, 4096), Workload(32, 1024), Workload(32, 4096))
UNPINNED_EXPERT_READS = ("uniform", "active")
UNPINNED_MLA_WIDTHS = (None, 512)


def crossover_range(data_dir: str | Path = DATA_DIR, assumptions: Assumptions = Assumptions(),
                    experiment: str = "article_b300", workloads: list[Workload] | None = None,
                    gpu: str = "B300", model: str = "Kimi-K3", tp: int = 8, dcp: int = 8,
                    ) -> tuple[pl.DataFrame, tuple[float, float] | None]:
    """The crossover over every combination of ``workloads`` (default :data:`UNPINNED_WORKLOADS`),
    :data:`UNPINNED_EXPERT_READS` and :data:`UNPINNED_MLA_WIDTHS` (16 refits by default): the table, and (lowest, highest) crossover over the fits that cross
    (None when none does). Non-physical fits are kept in the range and flagged in the table's ``physical``.
    ``gpu``/``model``/``tp``/``dcp``: the configuration whose crossover is sought (see :func:`sensitivity`)."""
    sens = sensitivity(list(workloads or UNPINNED_WORKLOADS), data_dir, assumptions, experiment,
                       UNPINNED_EXPERT_READS, UNPINNED_MLA_WIDTHS, gpu, model, tp, dcp)
    xs = sens["crossover_tokens"].drop_nulls()
    return sens, ((float(xs.min()), float(xs.max())) if len(xs) else None)


def refits(sens: pl.DataFrame, base: Assumptions = Assumptions()) -> list[tuple[Workload, Assumptions, Params]]:
    """The (workload, assumptions, fitted parameters) of every row of a :func:`sensitivity` table, so any
    modelled figure can be recomputed under each assumption set and given as a range (``base``: the assumptions
    the table did not vary)."""
    from dataclasses import replace

    out = []
    for r in sens.iter_rows(named=True):
        a = replace(base, expert_reads=r.get("expert_reads") or "uniform",
                    mla_width=None if r.get("mla_width") in (None, 576) else int(r["mla_width"]))
        p = Params(prefill_efficiency=r["prefill_efficiency"], bandwidth_efficiency=r["bandwidth_efficiency"],
                   dcp_layer_latency_s=r["dcp_layer_latency_us"] * 1e-6)
        out.append((Workload(int(r["batch_size"]), int(r["output_tokens"])), a, p))
    return out


def speed_ratio_range(sens: pl.DataFrame, cfg_a: Config, cfg_b: Config, context_tokens: int) -> tuple[float, float]:
    """T(cfg_a) / T(cfg_b) at ``context_tokens`` under every assumption set of ``sens``: (lowest, highest);
    above 1 means ``cfg_b`` is faster."""
    ratios = [batch_time(cfg_a, context_tokens, w, p, a).batch_time_s / batch_time(cfg_b, context_tokens, w, p, a).batch_time_s
              for w, a, p in refits(sens)]
    return min(ratios), max(ratios)
