"""What-if tables and figures of the model (curves, crossovers, KV headroom); figures are returned, never shown."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from kvlab.perfmodel.roofline import GIB, Assumptions, Config, Params, Workload, batch_time, crossover_context, memory
from kvlab.plots import ENGINE_COLORS


def _log2_axes(fig: Figure, ax, xlabel: str, ylabel: str, legend_size: int) -> Figure:
    """The what-if figures' common ending: log2 x and y axes, labels, light grid, legend, tight layout."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


def context_grid(max_tokens: int = 1 << 20, min_tokens: int = 4096, points: int = 48) -> list[int]:
    """Log-spaced contexts from ``min_tokens`` to ``max_tokens`` (inclusive), plus 64K and 200K."""
    grid = np.unique(np.geomspace(min_tokens, max_tokens, points).round().astype(int)).tolist()
    return sorted(set(grid) | {c for c in (65536, 204800) if min_tokens <= c <= max_tokens})


def curves(
    configs: Iterable[Config], contexts: Iterable[int], w: Workload, p: Params, a: Assumptions = Assumptions()
) -> pl.DataFrame:
    """Modelled batch time, its parts, throughput and memory fit for every configuration x context."""
    rows = []
    for cfg in configs:
        for c in contexts:
            pr = batch_time(cfg, int(c), w, p, a)
            rows.append(
                {
                    "source": "modelled",
                    "config": cfg.label(),
                    "engine": cfg.engine,
                    "gpu": cfg.gpu.gpu,
                    "tp": cfg.tp,
                    "dcp": cfg.dcp,
                    "context_tokens": int(c),
                    "prefill_time_s": pr.prefill_s,
                    "decode_time_s": pr.decode_s,
                    "batch_time_s": pr.batch_time_s,
                    "output_tokens_per_s": pr.output_tokens_per_s,
                    "concurrent_seqs": pr.concurrent_seqs,
                    "waves": pr.waves,
                    "fits": pr.fits,
                }
            )
    return pl.DataFrame(rows)


def plot_curves(model_df: pl.DataFrame, published: pl.DataFrame | None, y: str = "batch_time_s", ylabel: str = "batch time (s)") -> Figure:
    """Modelled curves (lines) against context, with published points (markers) where given."""
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.subplots()
    for cfg in model_df["config"].unique(maintain_order=True).to_list():
        d = model_df.filter(pl.col("config") == cfg).sort("context_tokens")
        eng = d["engine"][0]
        ax.plot(d["context_tokens"], d[y], color=ENGINE_COLORS.get(eng), lw=2, label=f"{cfg} (modelled)")
        bad = d.filter(~pl.col("fits"))
        if bad.height:
            ax.plot(bad["context_tokens"], bad[y], ls="none", marker="x", color=ENGINE_COLORS.get(eng), ms=5)
    if published is not None and published.height and y in published.columns:
        for eng in published["engine"].unique(maintain_order=True).to_list():
            d = published.filter(pl.col("engine") == eng)
            ax.scatter(d["context_tokens"], d[y], s=70, marker="o", facecolor="white", edgecolor=ENGINE_COLORS.get(eng),
                       linewidths=2, zorder=5, label=f"{eng} (published)")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens, log scale)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="x = does not fit in memory", title_fontsize=7)
    fig.tight_layout()
    return fig


def crossover_table(
    gpus: Iterable[str],
    model: str,
    dcp_sizes: Iterable[int],
    w: Workload,
    p: Params,
    a: Assumptions = Assumptions(),
    tp: int = 8,
    max_tokens: int = 1 << 20,
) -> pl.DataFrame:
    """Context at which SGLang TP+DCP overtakes vLLM TP (no DCP), per GPU and DCP size (null: no crossing)."""
    rows = []
    for g in gpus:
        base = Config.of(g, model, "vllm", tp, 1, a.default_mem_util)
        for d in dcp_sizes:
            if d <= 1:
                continue
            other = Config.of(g, model, "sglang", tp, d, a.default_mem_util)
            x = crossover_context(base, other, w, p, a, hi_tokens=max_tokens)
            weights_fit = memory(base, 1, a).weights_bytes_per_gpu < base.gpu.memory_bytes * a.default_mem_util
            rows.append({"source": "modelled", "gpu": g, "dcp": d, "crossover_tokens": x, "weights_fit": weights_fit})
    return pl.DataFrame(rows, schema={"source": pl.String, "gpu": pl.String, "dcp": pl.Int64,
                                      "crossover_tokens": pl.Float64, "weights_fit": pl.Boolean})  # fmt: skip


def plot_crossover(table: pl.DataFrame) -> Figure:
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    for g in table["gpu"].unique(maintain_order=True).to_list():
        d = table.filter(pl.col("gpu") == g).sort("dcp")
        ls = "-" if d["weights_fit"].all() else ":"
        ax.plot(d["dcp"], d["crossover_tokens"], marker="o", ls=ls, label=f"{g} (modelled{'' if ls == '-' else ', weights do not fit'})")
    return _log2_axes(fig, ax, "DCP size (SGLang, TP 8)", "crossover context (tokens)", legend_size=8)


def headroom_table(
    gpu: str, model: str, mem_utils: Iterable[float], dcp_sizes: Iterable[int], contexts: Iterable[int],
    a: Assumptions = Assumptions(), tp: int = 8,
) -> pl.DataFrame:  # fmt: skip
    """KV pool, KV capacity and sequences that fit, per memory target x DCP size x context."""
    rows = []
    for u in mem_utils:
        for d in dcp_sizes:
            cfg = Config.of(gpu, model, "sglang" if d > 1 else "vllm", tp, d, u)
            for c in contexts:
                m = memory(cfg, int(c), a)
                rows.append(
                    {
                        "source": "modelled", "mem_util": u, "dcp": d, "context_tokens": int(c),
                        "kv_pool_gib_per_gpu": m.kv_pool_bytes_per_gpu / GIB, "kv_capacity_tokens": m.kv_capacity_tokens,
                        "max_concurrent_seqs": m.max_concurrent_seqs,
                        "outside_pool_gib_per_gpu": m.outside_pool_bytes_per_gpu / GIB, "fits": m.fits, "reason": m.reason,
                    }
                )  # fmt: skip
    return pl.DataFrame(rows)


def plot_headroom(table: pl.DataFrame) -> Figure:
    """Concurrent sequences that fit, by context, for each memory target and DCP size."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for (u, d), grp in table.group_by(["mem_util", "dcp"], maintain_order=True):
        grp = grp.sort("context_tokens")
        ax.plot(grp["context_tokens"], grp["max_concurrent_seqs"].clip(lower_bound=0.5), marker="o",
                ls="-" if u < 0.94 else "--", label=f"mem {u:g}, DCP {d} (modelled)")  # fmt: skip
    return _log2_axes(fig, ax, "context (tokens)", "concurrent sequences that fit", legend_size=7)
