"""Figures for the reports: each helper takes a frame and returns a matplotlib Figure.

Figures are plain ``matplotlib.figure.Figure`` objects, not registered with pyplot, so the
library never leaks or shows a figure; notebooks ``display()`` what they get. Every panel says
whether its numbers are published, measured (and on what) or modelled.
"""

from __future__ import annotations

import polars as pl
import seaborn as sns
from matplotlib.figure import Figure

ENGINE_COLORS = {"vllm": "#3b75af", "sglang": "#e1812c"}
sns.set_theme(style="whitegrid", context="notebook")


def source_label(source: str, experiment: str, hardware: str, scale_factor: float | None = None) -> str:
    """A panel title that says where the numbers come from."""
    scale = f", contexts ÷{scale_factor:g}" if scale_factor and scale_factor != 1 else ""
    return f"{source}: {experiment} ({hardware}{scale})"


def _panels(df: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    out = []
    for key, part in df.group_by(["source", "experiment", "hardware"], maintain_order=True):
        scale = part["scale_factor"].drop_nulls().first() if "scale_factor" in part.columns else None
        out.append((source_label(*key, scale_factor=scale), part))
    return out


def _subplots(n: int, width: float = 5.5, height: float = 4.0) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * max(n, 1), height))
    axes = fig.subplots(1, max(n, 1), squeeze=False)
    return fig, list(axes[0])


def batch_time_bars(mean_times: pl.DataFrame) -> Figure:
    """Grouped bars of batch time per context and engine, one panel per source (values printed on bars)."""
    panels = _panels(mean_times.sort("context_tokens"))
    fig, axes = _subplots(len(panels))
    for ax, (title, part) in zip(axes, panels):
        pdf = part.select("context_label", "engine", "batch_time_s", "context_tokens").to_pandas()
        order = list(dict.fromkeys(pdf.sort_values("context_tokens")["context_label"]))
        hue_order = [e for e in ENGINE_COLORS if e in set(pdf["engine"])]
        sns.barplot(pdf, x="context_label", y="batch_time_s", hue="engine", order=order, hue_order=hue_order,
                    palette=ENGINE_COLORS, saturation=1, ax=ax)
        for container in ax.containers:
            ax.bar_label(container, fmt="%.3g", padding=2, fontsize=9)
        ax.set(title=title, xlabel="context", ylabel="batch time (s)")
        ax.title.set_fontsize(10)
    fig.tight_layout()
    return fig


def throughput_vs_context(tp: pl.DataFrame, y: str = "batches_per_s", ylabel: str | None = None) -> Figure:
    """Throughput against context per engine (log-log), one panel per source."""
    panels = _panels(tp.filter(pl.col(y).is_not_null()).sort("context_tokens"))
    fig, axes = _subplots(len(panels))
    for ax, (title, part) in zip(axes, panels):
        for engine, g in part.group_by("engine", maintain_order=True):
            e = engine[0]
            ax.plot(g["context_tokens"], g[y], marker="o", color=ENGINE_COLORS.get(e), label=e)
            for c, v, lab in zip(g["context_tokens"], g[y], g["context_label"]):
                ax.annotate(f"{lab}: {v:.3g}", (c, v), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(title=title, xlabel="context (tokens, log scale)", ylabel=ylabel or y)
        ax.title.set_fontsize(10)
        ax.legend()
    fig.tight_layout()
    return fig


def claims_vs_table(check: pl.DataFrame) -> Figure:
    """Each stated ratio beside the values the document's own table implies, per definition."""
    pdf = check.filter(pl.col("implied_value").is_not_null()).to_pandas()
    claims = list(dict.fromkeys(pdf["claim_id"]))
    fig = Figure(figsize=(max(6, 1.8 * len(claims)), 4))
    ax = fig.subplots()
    defs = list(dict.fromkeys(pdf["definition"]))
    width = 0.8 / (len(defs) + 1)
    for i, claim in enumerate(claims):
        part = pdf[pdf["claim_id"] == claim]
        ax.bar(i, part["stated_value"].iloc[0], width, color="#444444", label="stated" if i == 0 else None)
        for j, d in enumerate(defs):
            row = part[part["definition"] == d]
            if row.empty:
                continue
            ok = bool(row["consistent"].iloc[0])
            bar = ax.bar(i + (j + 1) * width, row["implied_value"].iloc[0], width,
                         color=sns.color_palette()[j + 2], label=f"implied: {d}" if i == 0 else None,
                         hatch="" if ok else "//", edgecolor="white")
            ax.bar_label(bar, labels=["✓" if ok else "✗"], padding=2)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(claims))], claims)
    ax.set(ylabel="ratio", title="published: stated ratios vs what the table implies (✓ consistent, ✗ not)")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def memory_study_figure(stats: pl.DataFrame, runs: pl.DataFrame) -> Figure:
    """Left: retries and failed runs per memory setting; right: batch time per setting (every run)."""
    fig = Figure(figsize=(11, 4))
    ax1, ax2 = fig.subplots(1, 2)
    s = stats.with_columns(pl.format("{} @ {}", "engine", "mem_util").alias("setting")).to_pandas()
    long = s.melt(id_vars=["setting", "context_label"], value_vars=["retries", "runs_failed"],
                  var_name="count", value_name="n")
    sns.barplot(long, x="setting", y="n", hue="count", ax=ax1, errorbar=None)
    for container in ax1.containers:
        ax1.bar_label(container, fmt="%d", padding=2)
    ax1.set(title="measured: retries and failed runs", xlabel="engine @ memory setting", ylabel="count",
            ylim=(0, max(1, int(long["n"].max() or 0)) * 1.2))
    ok = runs.filter((pl.col("source") == "measured") & (pl.col("status") == "ok")).with_columns(
        pl.format("{} @ {}", "engine", "mem_util").alias("setting")
    )
    if ok.height:
        sns.stripplot(ok.to_pandas(), x="setting", y="batch_time_s", hue="context_label", ax=ax2,
                      dodge=True, size=7, jitter=0.15)
    ax2.set(title="measured: batch time of every successful run", xlabel="engine @ memory setting",
            ylabel="batch time (s)")
    for ax in (ax1, ax2):
        ax.title.set_fontsize(10)
    fig.tight_layout()
    return fig


def setup_notebook(fig_format: str = "png", dpi: int = 110) -> None:
    """Make ``display(fig)`` render Figures inline (and so embed them in the HTML reports)."""
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats(fig_format, dpi=dpi)
