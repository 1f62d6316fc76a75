"""Report 01's figures: a frame in, a matplotlib Figure out (house style from kvlab.style and kvlab.figures' helpers).
The throughput-against-context figure both 01 and 02 draw is :func:`kvlab.studies.measured_frames.throughput_vs_context`."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from kvlab.engines import engine_label
from kvlab.figures import finish, is_wide, log_if_wide, source_panels, repeat_whiskers, panel_row
from kvlab.studies.measured_frames import context_name, throughput_vs_context
from kvlab.style import ENGINE_COLORS, styled

__all__ = ["batch_time_bars", "throughput_vs_context"]


def _bars(ax, part: pl.DataFrame, order: list[int], wide: bool) -> bool:
    """Each engine's bars (points on a log axis), its values printed beside them; True where whiskers were drawn."""
    present = part["engine"].unique(maintain_order=True).to_list()
    engines = [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]
    width = 0.8 / max(len(engines), 1)
    spread = False
    for j, e in enumerate(engines):
        g = part.filter(pl.col("engine") == e).sort("context_tokens")
        x = [order.index(c) - 0.4 + (j + 0.5) * width for c in g["context_tokens"]]
        y = g["batch_time_s"].to_list()
        color = ENGINE_COLORS.get(e, "#777777")
        n = g["n_runs"].to_list() if "n_runs" in g.columns else [1] * g.height
        lo = g["batch_time_min_s"].to_list() if "batch_time_min_s" in g.columns else [None] * g.height
        hi = g["batch_time_max_s"].to_list() if "batch_time_max_s" in g.columns else [None] * g.height
        if wide:
            ax.plot(x, y, ls="none", marker="o", ms=8, color=color, label=engine_label(e), zorder=3)
        else:
            ax.bar(x, y, width, color=color, label=engine_label(e))
        spread |= repeat_whiskers(ax, x, y, lo, hi, n, "#222222", zorder=4)
        for xi, yi in zip(x, y):
            ax.annotate(
                f"{yi:.3g}",
                (xi, yi),
                textcoords="offset points",
                xytext=(0, 7 if wide else 4),
                ha="center",
                fontsize=9,
                color="#222222",
            )
    return spread


@styled
def batch_time_bars(mean_times: pl.DataFrame) -> Figure:
    """Batch time per context and engine, one panel per source, each value printed beside its mark. Bars from 0
    on a linear axis; where the engines are more than 20× apart the axis is logarithmic (said in its label) and
    the values are points. Where a configuration has repeats, a whisker spans the least to the most of them. A
    scaled (CPU) context is labelled by its real tokens, the context it stands in for beside them."""
    panels = source_panels(mean_times.sort("context_tokens"))
    fig, axes = panel_row(len(panels))
    for ax, (title, part) in zip(axes, panels):
        ticks = part.select("context_tokens", "context_label").unique().sort("context_tokens")
        order = ticks["context_tokens"].to_list()
        spread = _bars(ax, part, order, is_wide(part["batch_time_s"].to_list()))
        ax.set_xticks(range(len(order)), [context_name(lab, c, "\n") for c, lab in ticks.iter_rows()])
        ax.set_xlim(-0.6, len(order) - 0.4)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(axis="x", visible=False)
        ax.set(title=title, xlabel="context" + ("  (whiskers: least to most of the repeats)" if spread else ""))
        log_if_wide(ax, part["batch_time_s"].to_list(), "batch time (s)")
        ax.legend(fontsize=8)
    return finish(fig, axes, legend_size=None)
