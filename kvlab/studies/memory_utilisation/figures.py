"""Report 03's measured figure: each engine against itself at the two memory settings (a frame in, a Figure out).
The modelled headroom figure is report 04's too (:func:`kvlab.perfmodel.figures.plot_headroom`)."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullLocator

from kvlab.engines import engine_label
from kvlab.figures import legend_below, ordered_engines, repeat_whiskers
from kvlab.studies.measured_frames import context_name
from kvlab.style import ENGINE_COLORS, styled
from kvlab.verdicts import Verdict, decides, undecided_label


def _panel(ax, r: pl.DataFrame, col: str, what: str, engines: list[str], order: list[int]) -> bool:
    """One panel: each engine's ``col`` per context (dots, their value beside them, a whisker over the repeats where
    a side has several). True when any whisker was drawn."""
    width = 0.8 / max(len(engines), 1)
    values, spread = [1.0], False
    for j, e in enumerate(engines):
        g = r.filter((pl.col("engine") == e) & pl.col(col).is_not_null())
        if g.is_empty():
            continue
        c = ENGINE_COLORS.get(e, "#777777")
        x = [order.index(t) - 0.4 + (j + 0.5) * width for t in g["context_tokens"]]
        y = g[col].to_list()
        ax.plot(x, y, ls="none", marker="o", ms=8, color=c, zorder=3)
        lows, highs = g[f"{col}_min"].to_list(), g[f"{col}_max"].to_list()
        if repeat_whiskers(ax, x, y, lows, highs, g["n_runs"].to_list(), c, lw=1.2, zorder=2):
            spread = True
            values += [v for v in highs if v is not None]
        values += y
        for xi, yi in zip(x, y):
            ax.annotate(f"{yi:.2f}×", (xi, yi), textcoords="offset points", xytext=(7, -3), fontsize=8, color=c)
    ax.axhline(1, color="#222222", lw=0.9)
    ax.set_ylim(0, max(values) * 1.15)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    return spread


@styled
def memory_ratio_figure(ratios: pl.DataFrame, verdict: Verdict | None = None) -> Figure:
    """Within each engine, the lower memory setting against the higher (:func:`.frames.memory_ratios`): batch time
    and mean request latency at the lower ÷ at the higher, per context (x: its real tokens, the context it stands
    for beside them where it was scaled), one colour per engine, 1× (no change) marked. Never one engine against
    another. The title names no direction unless ``verdict`` (the latency claim's) decides; else it carries the
    verdict's label."""
    fig = Figure(figsize=(11, 4.6))
    axes = list(fig.subplots(1, 2))
    r = ratios.sort("context_tokens")
    ticks = r.select("context_tokens", "context_label").unique().sort("context_tokens")
    order = ticks["context_tokens"].to_list()
    engines = ordered_engines(r)
    lo = r["mem_low"][0] if r.height else None
    hi = r["mem_high"][0] if r.height else None
    spread = False
    for ax, col, what in ((axes[0], "batch_time_ratio", "batch time"), (axes[1], "e2e_ratio", "mean request latency")):
        spread = _panel(ax, r, col, what, engines, order) or spread
        labels = [context_name(lab, c).replace(" (", "\n(") for c, lab in ticks.iter_rows()]
        ax.set_xticks(range(len(order)), labels)
        ax.set_xlim(-0.6, len(order) - 0.4)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(axis="x", visible=False)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel(f"{what}, {lo:g} ÷ {hi:g}" if lo is not None else what)
        ax.set_title(f"measured: {what} at {lo:g} ÷ at {hi:g}" if lo is not None else f"measured: {what}", fontsize=10)
    handles = [
        Line2D([], [], ls="none", marker="o", ms=8, color=ENGINE_COLORS.get(e, "#777777"), label=engine_label(e))
        for e in engines
    ]
    handles.append(Line2D([], [], color="#222222", lw=0.9, label="1×: the setting changes nothing"))
    if spread:
        handles.append(
            Line2D([], [], color="#555555", marker="|", ms=10, lw=1.2, label="whisker: least to most over the repeats")
        )
    if lo is not None:
        said = f"latency claim {verdict.outcome}" if decides(verdict) else undecided_label(verdict)
        fig.suptitle(f"each engine against itself, never one against another; {said}", fontsize=10)
    return legend_below(fig, handles, ncol=len(handles))
