"""Per-step fits from measured runs: decode step time (TPOT) against context, per engine, with a proper line fit.

Where runs give TTFT and TPOT at three or more contexts of one configuration (engine, memory setting, batch size,
output length), the slope of step time against context is the KV bytes a step reads per token of context over the
achieved bandwidth, so the achieved bandwidth comes from the measured slope, not from batch totals:

    TPOT(C) = a + b x C,   b = n_seqs x KV bytes per token per GPU / (bandwidth_efficiency x peak bandwidth)

C is each run's mean context over its decode (prompt + (output - 1) / 2). The intercept ``a`` holds c(engine), the
weights and the fixed state over the same bandwidth. The line is an ordinary least-squares fit with a 95%
t-interval on slope and intercept; with four or more contexts a quadratic term says whether the line is linear.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy import stats

from kvlab.engines import engine_label
from kvlab.tables import experiment_words
from kvlab.perfmodel.frames import row_config
from kvlab.units import sig2
from kvlab.perfmodel.roofline import Assumptions, kv_bytes_per_token_per_gpu

GROUP = (
    "experiment",
    "hardware",
    "engine",
    "model",
    "tp",
    "dcp",
    "mem_util",
    "kv_budget_bytes",
    "batch_size",
    "output_tokens",
)


def line_fit(x: np.ndarray, y: np.ndarray, level: float = 0.95) -> dict:
    """OLS of y on x: slope, intercept, their ``level`` t-intervals (NaN with two points: no residual degree of
    freedom), residuals, R², and (four points or more) the quadratic coefficient's t-statistic (curvature)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if n < 2 or np.ptp(x) == 0:
        raise ValueError("a line needs two or more distinct x values")
    X = np.column_stack([np.ones(n), x])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    fitted = X @ coef
    resid = y - fitted
    dof = n - 2
    if dof > 0:
        s2 = float(resid @ resid) / dof
        cov = s2 * np.linalg.inv(X.T @ X)
        t = float(stats.t.ppf(0.5 + level / 2, dof))
        half = t * np.sqrt(np.diag(cov))
    else:
        half = np.array([math.nan, math.nan])
    ss_tot = float(((y - y.mean()) ** 2).sum())
    curvature_t = math.nan
    if n >= 4:
        Q = np.column_stack([np.ones(n), x, x**2])
        qc, *_ = np.linalg.lstsq(Q, y, rcond=None)
        qr = y - Q @ qc
        qs2 = float(qr @ qr) / (n - 3) if n > 3 else math.nan
        qcov = qs2 * np.linalg.pinv(Q.T @ Q)
        se = math.sqrt(qcov[2, 2]) if qcov[2, 2] > 0 else math.nan
        curvature_t = float(qc[2] / se) if se and se > 0 else math.inf
    return {
        "intercept": float(coef[0]),
        "slope": float(coef[1]),
        "intercept_ci": (float(coef[0] - half[0]), float(coef[0] + half[0])),
        "slope_ci": (float(coef[1] - half[1]), float(coef[1] + half[1])),
        "r2": 1 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0,
        "residuals": resid.tolist(),
        "fitted": fitted.tolist(),
        "curvature_t": curvature_t,
        "dof": dof,
    }


def step_fits(runs: pl.DataFrame, min_contexts: int = 3) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per configuration of measured ok runs with TPOT at ``min_contexts`` or more distinct contexts: the fit of
    TPOT (ms) against mean decode context (tokens), and the achieved decode bandwidth its slope implies
    (:func:`achieved_bandwidth`). Returns (fits: one row per configuration, points: one row per run with its fitted
    value and residual). Both are empty when no configuration has enough contexts."""
    need = {"tpot_mean_ms", "context_tokens", "output_tokens", "status", "source"}
    fit_rows, point_rows = [], []
    if runs.is_empty() or not need <= set(runs.columns):
        return pl.DataFrame(), pl.DataFrame()
    m = runs.filter(
        (pl.col("source") == "measured") & (pl.col("status") == "ok") & pl.col("tpot_mean_ms").is_not_null()
    )
    keys = [k for k in GROUP if k in m.columns]
    for key, g in m.group_by(keys, maintain_order=True):
        g = g.sort("context_tokens")
        if g["context_tokens"].n_unique() < min_contexts:
            continue
        x = (g["context_tokens"] - g["output_tokens"] + (g["output_tokens"] - 1) / 2).to_numpy().astype(float)
        y = g["tpot_mean_ms"].to_numpy().astype(float)
        f = line_fit(x, y)
        row = dict(zip(keys, key))
        # a slope its 95% interval cannot tell from zero implies no bandwidth: the runs do not show the KV read
        resolved = f["slope_ci"][0] > 0
        bw, lo_bw, hi_bw = (
            achieved_bandwidth(g.row(0, named=True), s / 1e3, row_config) if resolved else math.nan
            for s in (f["slope"], f["slope_ci"][1], f["slope_ci"][0])
        )
        linear = "linear" if not math.isfinite(f["curvature_t"]) or abs(f["curvature_t"]) < 2 else "curved"
        if math.isnan(f["curvature_t"]):
            linear = "untested (needs 4 contexts)"
        fit_rows.append(
            row
            | {
                "contexts": g["context_tokens"].n_unique(),
                "runs": g.height,
                # ms per token x 1,000 tokens x 1,000 us per ms
                "slope_us_per_1k_tokens": f["slope"] * 1e6,
                "slope_ci_low": f["slope_ci"][0] * 1e6,
                "slope_ci_high": f["slope_ci"][1] * 1e6,
                "intercept_ms": f["intercept"],
                "intercept_ci_low": f["intercept_ci"][0],
                "intercept_ci_high": f["intercept_ci"][1],
                "r2": f["r2"],
                "max_abs_residual_ms": float(np.max(np.abs(f["residuals"]))),
                "linearity": linear,
                "bandwidth_efficiency": bw,
                "bandwidth_efficiency_low": lo_bw,
                "bandwidth_efficiency_high": hi_bw,
            }
        )
        for r, xi, fi, ri in zip(g.iter_rows(named=True), x, f["fitted"], f["residuals"]):
            point_rows.append(
                row
                | {
                    "run_id": r.get("run_id"),
                    "context_tokens": r["context_tokens"],
                    "mean_decode_context": xi,
                    "tpot_ms": r["tpot_mean_ms"],
                    "fitted_ms": fi,
                    "residual_ms": ri,
                }
            )
    return pl.DataFrame(fit_rows), pl.DataFrame(point_rows)


def as_shown(frame: pl.DataFrame, keep: tuple[str, ...] = ("mean_decode_context",)) -> pl.DataFrame:
    """A :func:`step_fits` frame as its table shows it: every measured float (times, slopes, intervals, residuals,
    R², bandwidth) to two significant figures, as every number resting on one run per context is shown; ``keep``:
    float columns that are not measured (a run's mean decode context is a token count)."""
    floats = [c for c, t in frame.schema.items() if t.is_float() and c not in keep]
    return frame.with_columns(pl.col(c).round_sig_figs(2) for c in floats) if floats else frame


def achieved_bandwidth(row: dict, slope_s_per_token: float, row_config) -> float:
    """The achieved fraction of peak bandwidth a TPOT slope implies: b = n x KV bytes per token per GPU / (eff x
    peak), so eff = n x KV bytes per token per GPU / (b x peak). NaN when the slope is not positive or the row's
    hardware/model is not catalogued. On the CPU host the peak is the catalog's nominal figure."""
    if not slope_s_per_token or slope_s_per_token <= 0:
        return math.nan
    try:
        cfg = row_config(row, Assumptions())
    except (KeyError, ValueError):
        return math.nan
    n = max(1, int(row.get("batch_size") or 1))
    per_tok = kv_bytes_per_token_per_gpu(cfg, Assumptions())
    return n * per_tok / (slope_s_per_token * cfg.gpu.mem_bandwidth_bytes_per_s)


def step_fit_note(runs: pl.DataFrame, fits: pl.DataFrame, min_contexts: int = 3) -> str:
    """Markdown: what the per-step fits found, or why there are none (fewer than three contexts per engine)."""
    if fits.is_empty():
        m = runs.filter(pl.col("source") == "measured") if "source" in runs.columns else runs
        if m.is_empty():
            return f"*No measured runs: a per-step fit needs TPOT at {min_contexts} or more contexts per engine.*"
        keys = [k for k in GROUP if k in m.columns]
        ok = m.filter(pl.col("tpot_mean_ms").is_not_null()) if "tpot_mean_ms" in m.columns else m.clear()
        most = (
            ok.group_by(keys)
            .agg(pl.col("context_tokens").n_unique().alias("n"))
            .group_by("engine")
            .agg(pl.col("n").max())
            .sort("engine")
            if "engine" in keys and ok.height
            else pl.DataFrame()
        )
        have = ", ".join(f"{engine_label(r['engine'])} {r['n']}" for r in most.iter_rows(named=True)) or "none"
        return (
            f"*No per-step fit: it needs TPOT at {min_contexts} or more contexts of one configuration (engine, "
            f"memory setting, batch and output length) per engine; the most any one configuration has here: {have}. "
            "The long-context study's full form (or its quick form with a third context) gives them.*"
        )
    parts = []
    for r in fits.iter_rows(named=True):
        bw = r["bandwidth_efficiency"]
        ms = r["slope_us_per_1k_tokens"] / 1000  # µs per 1,000 tokens -> ms per 1,000 tokens
        lo, hi = r["slope_ci_low"] / 1000, r["slope_ci_high"] / 1000
        verb = "grows" if ms >= 0 else "falls"
        sign = "includes no change" if lo <= 0 <= hi else "excludes no change"
        parts.append(
            f"- **{engine_label(r['engine'])}** ({experiment_words(r['experiment'])}, batch {r['batch_size']}, {r['contexts']} contexts, "
            f"{r['runs']} runs): step time {verb} **{sig2(abs(ms))} ms per 1,000 tokens** of context (95% interval "
            f"{sig2(lo)} to {sig2(hi)} ms, which {sign}), from {sig2(r['intercept_ms'])} ms at no context; "
            f"R² {r['r2']:.2f}, largest residual {sig2(r['max_abs_residual_ms'])} ms, {r['linearity']}"
            + (f"; the slope implies {sig2(bw)}× the catalog's nominal bandwidth" if math.isfinite(bw) else "")
            + "."
        )
    return "\n".join(parts)


def step_fit_caption(fits: pl.DataFrame) -> str:
    """One sentence for the step-fit figure: per engine, whether its slope's 95% interval excludes no change, and
    how far the points stray from the line."""
    parts = []
    for r in fits.iter_rows(named=True):
        lo, hi = r["slope_ci_low"], r["slope_ci_high"]
        if not (math.isfinite(lo) and math.isfinite(hi)):
            verdict = "two contexts, so no interval"
        elif lo <= 0 <= hi:
            verdict = "its 95% interval includes zero, so these runs do not show step time changing with context" + (
                " (the fitted slope is negative)" if r["slope_us_per_1k_tokens"] < 0 else ""
            )
        else:
            verdict = "step time " + ("grows" if lo > 0 else "falls") + " with context, the 95% interval excluding zero"
        parts.append(
            f"{engine_label(r['engine'])}: {verdict}; residuals up to {sig2(r['max_abs_residual_ms'])} ms over "
            f"{r['runs']} runs at {r['contexts']} contexts"
        )
    return (
        "Measured on this host: mean decode step time (TPOT) of each run against its mean context, a least-squares "
        "line per engine (left) and what the line leaves (right). " + "; ".join(parts) + "."
    )
