"""Figures for the reports: each helper takes a frame and returns a matplotlib Figure.

Figures are plain ``matplotlib.figure.Figure`` objects, not registered with pyplot, so the
library never leaks or shows a figure; notebooks ``display()`` what they get. Every panel says
whether its numbers are published, measured (and on what) or modelled.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import struct
import textwrap
from collections.abc import Mapping

import polars as pl
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullLocator, PercentFormatter

from kvlab.device import shown
from kvlab.engines import SGLANG, VLLM, VLLM_CPU_BLOCK_TOKENS, engine_label
from kvlab.guide import CONCURRENCY_THRESHOLD, FIXED_CONTEXT_THRESHOLD
from kvlab.markup import markdown_inline
from kvlab.perfmodel.figures import value_axis  # log axes labelled at 1, 2 and 5 per decade
from kvlab.store import neutralise
from kvlab.style import ENGINE_COLORS, number_label as _num, styled, theme
from kvlab.tables import experiment_words
from kvlab.units import scaled_context


def _log_if_wide(ax, values, ylabel: str, spread: float = 20.0) -> None:
    """Log y axis (and say so in the label) when positive ``values`` span more than ``spread``×, so a small
    engine's bars or points stay visible beside a slow one's; linear from 0 otherwise."""
    v = [x for x in values if x is not None and x > 0]
    if v and max(v) / min(v) > spread:
        ax.set_yscale("log")
        ax.set_ylim(min(v) / 1.5, max(v) * 2)  # room for the labels above the tallest bar
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _num(y)))
        ax.set_ylabel(f"{ylabel} (log scale)")
    else:
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)


def source_label(source: str, experiment: str, device: str, scale_factor: float | None = None) -> str:
    """A panel title that says where the numbers come from, the experiment in words, on what ``device`` (its short
    name, :func:`device_of`)."""
    scale = f", contexts ÷{scale_factor:g}" if scale_factor and scale_factor != 1 else ""
    # the details (the experiment's file, the host's flags) are in the provenance panel
    return f"{source}: {experiment_words(experiment)} ({device}{scale})"


def device_of(frame: pl.DataFrame) -> str:
    """The short name of the device a frame's rows ran on, from their typed device (kvlab.device.shown: each column's
    first value given); "" for an empty frame."""
    if frame.is_empty():
        return ""
    cols = ("device_kind", "accelerator", "gpu_count", "hardware")
    return shown({c: frame[c].drop_nulls().first() for c in cols if c in frame.columns})


def _panels(df: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    out = []
    for (source, experiment, _), part in df.group_by(["source", "experiment", "hardware"], maintain_order=True):
        scale = part["scale_factor"].drop_nulls().first() if "scale_factor" in part.columns else None
        out.append((source_label(source, experiment, device_of(part), scale_factor=scale), part))
    return out


def _subplots(n: int, width: float = 5.5, height: float = 4.0) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * max(n, 1), height))
    axes = fig.subplots(1, max(n, 1), squeeze=False)
    return fig, list(axes[0])


def _finish(fig: Figure, axes, legend_size: int | None = 8) -> Figure:
    """The common ending: 10-pt titles, a legend on every axis (none when ``legend_size`` is None), tight layout."""
    for ax in axes:
        ax.title.set_fontsize(10)
        if legend_size is not None:
            ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


#: Up to this many points, a figure says less than a table: the reports show the table instead (:func:`drawable`).
FEW_POINTS = 2


def drawable(frame: pl.DataFrame | None, y: str | None = None, few: int = FEW_POINTS) -> bool:
    """Whether ``frame`` holds more than ``few`` points (rows with a value in ``y``, when given): a one- or
    two-point figure becomes a table."""
    if frame is None:
        return False
    rows = frame.filter(pl.col(y).is_not_null()) if y else frame
    return rows.height > few


def _ranges(ax, x, values, lows, highs, counts, color: str, **kw) -> bool:
    """A whisker from the least to the most of the repeats at each point that has repeats (count > 1) and a
    range; nothing at a point of one run. True when any was drawn."""
    pts = [
        (xi, v, lo, hi)
        for xi, v, lo, hi, n in zip(x, values, lows, highs, counts)
        if (n or 0) > 1 and v is not None and lo is not None and hi is not None
    ]
    if pts:
        ax.errorbar(
            [p[0] for p in pts],
            [p[1] for p in pts],
            yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
            fmt="none",
            ecolor=color,
            capsize=3,
            **({"lw": 1} | kw),
        )
    return bool(pts)


def _span(g: pl.DataFrame, y: str, base: str | None = None) -> tuple[list, list] | None:
    """The least and the most of ``y`` over each row's repeats: its own ``{y}_min``/``{y}_max`` (batch time's
    ``batch_time_min_s``/``_max_s``), else, for a rate (``*_per_s``, or ``base``'s rate relative to a reference:
    a constant over T), the rate at the slowest and the fastest repeat, ``y`` × T̄ ÷ T_max to ``y`` × T̄ ÷ T_min.
    None where the frame holds no range."""
    name = base or y
    cols = {"batch_time_s": ("batch_time_min_s", "batch_time_max_s")}.get(name, (f"{name}_min", f"{name}_max"))
    if base is None and set(cols) <= set(g.columns):
        return g[cols[0]].to_list(), g[cols[1]].to_list()
    t = ("batch_time_s", "batch_time_min_s", "batch_time_max_s")
    if name.endswith("_per_s") and set(t) <= set(g.columns):
        lo = [None if None in (v, m, hi) else v * m / hi for v, m, hi in zip(g[y], g[t[0]], g[t[2]])]
        hi = [None if None in (v, m, lo_) else v * m / lo_ for v, m, lo_ in zip(g[y], g[t[0]], g[t[1]])]
        return lo, hi
    return None


def _is_wide(values, spread: float = 20.0) -> bool:
    v = [x for x in values if x is not None and x > 0]
    return bool(v) and max(v) / min(v) > spread


@styled
def batch_time_bars(mean_times: pl.DataFrame) -> Figure:
    """Batch time per context and engine, one panel per source, each value printed beside its mark. Bars from 0
    on a linear axis; where the engines are more than 20× apart the axis is logarithmic (said in its label) and
    the values are points, never bars (a bar's length means nothing on a log axis). Where a configuration has
    repeats, a whisker spans the least to the most of them."""
    panels = _panels(mean_times.sort("context_tokens"))
    fig, axes = _subplots(len(panels))
    for ax, (title, part) in zip(axes, panels):
        ticks = part.select("context_tokens", "context_label").unique().sort("context_tokens")
        order = ticks["context_tokens"].to_list()
        present = part["engine"].unique(maintain_order=True).to_list()
        engines = [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]
        width = 0.8 / max(len(engines), 1)
        wide = _is_wide(part["batch_time_s"].to_list())
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
            spread |= _ranges(ax, x, y, lo, hi, n, "#222222", zorder=4)
            for xi, yi in zip(x, y):
                ax.annotate(
                    f"{yi:.3g}",
                    (xi, yi),
                    textcoords="offset points",
                    xytext=(0, 4 if not wide else 7),
                    ha="center",
                    fontsize=9,
                    color="#222222",
                )
        ax.set_xticks(range(len(order)), [scaled_context(lab, c, "\n") for c, lab in ticks.iter_rows()])
        ax.set_xlim(-0.6, len(order) - 0.4)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(axis="x", visible=False)
        ax.set(title=title, xlabel="context" + ("  (whiskers: least to most of the repeats)" if spread else ""))
        _log_if_wide(ax, part["batch_time_s"].to_list(), "batch time (s)")
        ax.legend(fontsize=8)
    return _finish(fig, axes, legend_size=None)


@styled
def throughput_vs_context(
    tp: pl.DataFrame, y: str = "batches_per_s", ylabel: str | None = None, relative: bool = False
) -> Figure:
    """Throughput against context per engine (log-log), one panel per source. With ``relative``, two panels per
    source: the absolute throughput (left; where the engines' lines cross, one overtakes the other) beside each
    engine's ``{y}_rel`` (right; :func:`kvlab.analysis.relative_to_context`: its own value at the reference
    context = 1, on a linear axis from 0, the reference named on the axis: a within-engine change, not one engine
    against another; these lines start together and so never cross)."""
    col = f"{y}_rel"
    keep = pl.col(y).is_not_null() & (pl.col(col).is_not_null() if relative else True)
    panels = _panels(tp.filter(keep).sort("context_tokens"))
    fig, axes = _subplots(len(panels) * (2 if relative else 1), width=5.5 if not relative else 4.8)
    for i, (title, part) in enumerate(panels):
        if relative:
            _absolute_axis(axes[2 * i], f"{title}\nabsolute", part, y, ylabel)
            _relative_axis(axes[2 * i + 1], f"{title}\nrelative, each engine its own", part, y, ylabel)
        else:
            _absolute_axis(axes[i], title, part, y, ylabel)
    fig.tight_layout()
    return fig


def _absolute_axis(ax, title: str, part: pl.DataFrame, y: str, ylabel: str | None) -> None:
    ordered = _engines_in_colour_order(part)
    spread = False
    for i, e in enumerate(ordered):
        g = part.filter(pl.col("engine") == e)
        color = ENGINE_COLORS.get(e)
        ax.plot(g["context_tokens"], g[y], marker="o", color=color, label=engine_label(e))
        if (span := _span(g, y)) is not None and "n_runs" in g.columns:
            spread |= _ranges(
                ax, g["context_tokens"].to_list(), g[y].to_list(), *span, g["n_runs"].to_list(), color or "#777777"
            )
        for c, v, lab in zip(g["context_tokens"], g[y], g["context_label"]):  # 1st engine above, 2nd below
            ax.annotate(
                _num(v),
                (c, v),
                textcoords="offset points",
                xytext=(4, 4 if i % 2 == 0 else -12),
                fontsize=8,
                color=color,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = part.select("context_tokens", "context_label").unique().sort("context_tokens")
    contexts = ticks["context_tokens"].to_list()
    ax.set_xticks(contexts, [scaled_context(lab, c, "\n") for c, lab in ticks.iter_rows()], minor=False)
    ax.tick_params(axis="x", labelrotation=30 if len(contexts) > 3 else 0)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _num(v)))
    lo, hi = ax.get_ylim()
    few = hi / lo < 10  # less than a decade: label every minor tick, else only 2s and 5s (never "6×10²")
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _, few=few: _num(v) if few or f"{v:e}"[0] in "25" else ""))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set(
        title=title,
        xlabel="context (log scale)" + ("  (whiskers: least to most of the repeats)" if spread else ""),
        ylabel=ylabel or y,
    )
    ax.title.set_fontsize(10)
    ax.legend()


def _engines_in_colour_order(part: pl.DataFrame) -> list[str]:
    """The engines of ``part``: those with an engine colour in its order, then any other as it first appears."""
    present = part["engine"].unique(maintain_order=True).to_list()
    return [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]


def _relative_axis(ax, title: str, part: pl.DataFrame, y: str, ylabel: str | None) -> None:
    col = f"{y}_rel"
    ordered = _engines_in_colour_order(part)
    spread = False
    for i, e in enumerate(ordered):
        g = part.filter(pl.col("engine") == e).sort("context_tokens")
        color = ENGINE_COLORS.get(e, "#777777")
        ax.plot(g["context_tokens"], g[col], marker="o", color=color, label=engine_label(e))
        if (span := _span(g, col, base=y)) is not None and "n_runs" in g.columns:
            spread |= _ranges(ax, g["context_tokens"].to_list(), g[col].to_list(), *span, g["n_runs"].to_list(), color)
        for c, v in zip(g["context_tokens"], g[col]):  # 1st engine above, 2nd below
            if v == 1.0:  # the reference point, where every engine's line starts: the line at 1 says it
                continue
            ax.annotate(
                f"{v:.2f}",
                (c, v),
                textcoords="offset points",
                xytext=(4, 4 if i % 2 == 0 else -12),
                fontsize=8,
                color=color,
            )
    ax.axhline(1, color="#222222", lw=0.9)
    ax.set_xscale("log", base=2)
    ticks = part.select("context_tokens", "context_label").unique().sort("context_tokens")
    ax.set_xticks(ticks["context_tokens"].to_list(), [scaled_context(lab, c, "\n") for c, lab in ticks.iter_rows()])
    ax.tick_params(axis="x", labelrotation=30 if ticks.height > 3 else 0)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylim(0, max(1.0, part[col].max() or 1.0) * 1.15)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    refs = part.select("reference_context", "reference_tokens").unique()
    ref = (
        scaled_context(refs["reference_context"][0], refs["reference_tokens"][0])
        if refs.height == 1
        else "each engine's shortest context"
    )
    ax.set(
        title=title,
        xlabel="context (log scale)" + ("  (whiskers: least to most of the repeats)" if spread else ""),
        ylabel=f"{ylabel or y}\nrelative to {ref} = 1 (each engine its own)",
    )
    ax.title.set_fontsize(10)
    ax.yaxis.label.set_fontsize(10)
    ax.legend()


#: Colours of the definitions a stated ratio is checked under (none of them an engine's colour).
DEFINITION_COLORS = {
    "time_ratio": "#029e73",
    "percent_less_time": "#cc78bc",
    "batch_time_ratio": "#7b3294",
    "prompt_tokens_per_s_ratio": "#8c6d31",
}


@styled
def claims_vs_table(
    check: pl.DataFrame, names: Mapping[str, str] | None = None, definition_names: Mapping[str, str] | None = None
) -> Figure:
    """Each stated ratio (dark grey) beside the values the document's own table implies under each definition that
    applies to it (one colour per definition, never an engine's), ✓ where they agree, hatched ✗ where not; the
    legend names every definition drawn. The words come from the caller, so figures do not depend on prose:
    ``names``, a short name per claim id (:func:`kvlab.narrative.claim_labels`; else the id), and
    ``definition_names``, each definition as a reader names it (:data:`kvlab.narrative.DEFINITION_NAMES`; else its
    key)."""
    part_all = check.filter(pl.col("implied_value").is_not_null())
    names, definition_names = names or {}, definition_names or {}
    ids = part_all["claim_id"].unique(maintain_order=True).to_list()
    fig = Figure(figsize=(max(7.0, 2.0 * len(ids)), 4.4))
    ax = fig.subplots()
    most = max((part_all.filter(pl.col("claim_id") == c).height for c in ids), default=1)
    width = 0.8 / (most + 1)
    drawn: list[str] = []
    any_bad = False
    for i, cid in enumerate(ids):
        part = part_all.filter(pl.col("claim_id") == cid)
        ax.bar(i, part["stated_value"][0], width, color="#444444")
        for j, r in enumerate(part.iter_rows(named=True)):
            ok = bool(r["consistent"])
            any_bad |= not ok
            d = r["definition"]
            bar = ax.bar(
                i + (j + 1) * width,
                r["implied_value"],
                width,
                color=DEFINITION_COLORS.get(d, "#999999"),
                hatch="" if ok else "//",
                edgecolor="white",
            )
            ax.bar_label(bar, labels=["✓" if ok else "✗"], padding=2)
            if d not in drawn:
                drawn.append(d)
    ax.set_xticks(
        [i + width * (part_all.filter(pl.col("claim_id") == c).height) / 2 for i, c in enumerate(ids)],
        [textwrap.fill(names.get(c, c), 13) for c in ids],
        fontsize=9,
    )
    handles = [Patch(color="#444444", label="stated by the article")]
    handles += [
        Patch(color=DEFINITION_COLORS.get(d, "#999999"), label=f"table implies: {definition_names.get(d, d)}")
        for d in drawn
    ]
    if any_bad:
        handles.append(Patch(facecolor="white", hatch="//", edgecolor="#555555", label="✗ hatched: does not match"))
    top = max([*part_all["stated_value"].to_list(), *part_all["implied_value"].to_list(), 1.0])
    ax.set_ylim(min(0.0, part_all["implied_value"].min() or 0.0), top * 1.15)
    ax.set(
        ylabel="ratio (×)", title="published: stated ratios vs what the article's own table implies (✓ match, ✗ not)"
    )
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    ax.title.set_fontsize(10)
    fig.tight_layout()
    return fig


@styled
def memory_ratio_figure(ratios: pl.DataFrame) -> Figure:
    """Within each engine, the lower memory setting against the higher (:func:`kvlab.analysis.memory_ratios`):
    batch time and mean request latency at the lower ÷ at the higher, per context (x, its real tokens where it was
    scaled), one colour per engine, on a linear axis from 0 with 1× (no change) marked. Never one engine against
    another. Where a side has repeats, a whisker spans the least to the most the ratio takes over them."""
    fig = Figure(figsize=(11, 4.6))
    axes = list(fig.subplots(1, 2))
    r = ratios.sort("context_tokens")
    ticks = r.select("context_tokens", "context_label").unique().sort("context_tokens")
    order = ticks["context_tokens"].to_list()
    engines = _ordered_engines(r)
    width = 0.8 / max(len(engines), 1)
    lo = r["mem_low"][0] if r.height else None
    hi = r["mem_high"][0] if r.height else None
    spread = False
    for ax, col, what in ((axes[0], "batch_time_ratio", "batch time"), (axes[1], "e2e_ratio", "mean request latency")):
        values = [1.0]
        for j, e in enumerate(engines):
            g = r.filter((pl.col("engine") == e) & pl.col(col).is_not_null())
            if g.is_empty():
                continue
            c = ENGINE_COLORS.get(e, "#777777")
            x = [order.index(t) - 0.4 + (j + 0.5) * width for t in g["context_tokens"]]
            y = g[col].to_list()
            ax.plot(x, y, ls="none", marker="o", ms=8, color=c, zorder=3)
            if _ranges(
                ax,
                x,
                y,
                g[f"{col}_min"].to_list(),
                g[f"{col}_max"].to_list(),
                g["n_runs"].to_list(),
                c,
                lw=1.2,
                zorder=2,
            ):
                spread = True
                values += [v for v in g[f"{col}_max"].to_list() if v is not None]
            values += y
            for xi, yi in zip(x, y):
                ax.annotate(f"{yi:.2f}×", (xi, yi), textcoords="offset points", xytext=(7, -3), fontsize=8, color=c)
        ax.axhline(1, color="#222222", lw=0.9)
        ax.set_ylim(0, max(values) * 1.15)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.set_xticks(range(len(order)), [scaled_context(lab, c, "\n") for c, lab in ticks.iter_rows()])
        ax.set_xlim(-0.6, len(order) - 0.4)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(axis="x", visible=False)
        ax.set_xlabel("context")
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
        fig.suptitle(
            f"each engine against itself, never one engine against another; above 1×: slower at {lo:g}", fontsize=10
        )
    return _legend_below(fig, handles, ncol=len(handles))


def setup_notebook(fig_format: str = "png", dpi: int = 110) -> None:
    """Make ``display(fig)`` render Figures inline (and so embed them in the HTML reports)."""
    # here, not at the top: it imports IPython, which only a notebook kernel needs
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats(fig_format, dpi=dpi)


class FigureNumbers:
    """Numbers the figures one notebook shows, from 1: each :class:`kvlab.workbook.Workbook` holds one
    (``wb.show``), so no number lives in a module and two notebooks in one process never share a count."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


#: The MIME type under which a figure's output carries its data as typed JSON (number, caption, file, columns,
#: the CSV text); the report build writes it out as files beside the executed notebook (:mod:`kvlab.reports`).
FIGURE_MIME = "application/vnd.kvlab.figure+json"
#: Set by the report build in the kernel's environment: the folder, relative to the report's HTML, that its
#: figure data files go to (``<report>.figures``), so a figure links its file there instead of embedding it.
FIGURE_DIR_ENV = "KVLAB_FIGURE_DIR"
#: Pixel density of report figures: drawn at 2× and shown at their natural size, so they stay sharp when zoomed.
SHOW_DPI, SCREEN_DPI = 200, 100


def alt_text(fig: Figure) -> str:
    """What a figure shows, for readers who cannot see it: each panel's title, axes and series."""
    parts = []
    for ax in fig.axes:
        if not ax.get_visible() or not (ax.has_data() or ax.get_title()):
            continue
        legend = ax.get_legend()
        series = [t.get_text() for t in legend.get_texts()] if legend else []
        desc = ax.get_title() or "chart"
        axes = ", ".join(f"{k}: {v}" for k, v in (("y", ax.get_ylabel()), ("x", ax.get_xlabel())) if v)
        parts.append(desc + (f" ({axes})" if axes else "") + (f"; series: {', '.join(series)}" if series else ""))
    return " | ".join(parts) or "figure"


class FigureView:
    """A figure as the reports show it: a 2×-density PNG with alt text, its number (None: unnumbered), the one
    computed sentence that says what to see in it, and (with ``data``) a link to the numbers behind it as CSV."""

    def __init__(
        self,
        fig: Figure,
        caption: str,
        data: pl.DataFrame | None = None,
        alt: str | None = None,
        number: int | None = None,
    ):
        if not caption or not caption.strip():
            raise ValueError("show(): every figure needs a caption, the sentence that says what to see in it")
        self.number, self.fig, self.caption, self.data = number, fig, caption.strip(), data
        self.alt = alt or alt_text(fig)

    def png(self) -> bytes:
        buf = io.BytesIO()
        with theme():
            self.fig.savefig(buf, format="png", dpi=SHOW_DPI, bbox_inches="tight")
        return buf.getvalue()

    def _repr_html_(self) -> str:
        png = self.png()
        width = struct.unpack(">I", png[16:20])[0] * SCREEN_DPI // SHOW_DPI  # PNG IHDR width in pixels
        img = (
            f'<img alt="{html.escape(self.alt)}" style="width: {width}px; max-width: 100%; height: auto;" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        )
        link = ""
        if self.data is not None:
            folder = os.environ.get(FIGURE_DIR_ENV)
            href = (
                f"{folder}/{self.data_file}"
                if folder
                else f"data:text/csv;base64,{base64.b64encode(self.csv().encode()).decode()}"
            )
            link = (
                f' <a class="kvlab-figure-data" download="{self.data_file}" href="{html.escape(href)}">data (CSV)</a>'
            )
        return (
            f'<figure class="kvlab-figure" style="margin: .5rem 0 1rem;">{img}'
            f'<figcaption style="max-width: {max(width, 480)}px;">'
            + (f"<b>Figure {self.number}.</b> " if self.number is not None else "")
            + f"{markdown_inline(self.caption)}{link}</figcaption></figure>"
        )

    @property
    def data_file(self) -> str:
        return f"figure{self.number or ''}.csv"

    def csv(self) -> str:
        """The figure's data as CSV text, formula-like text cells neutralised (:func:`kvlab.store.neutralise`)."""
        return neutralise(self.data).write_csv()

    def payload(self) -> dict | None:
        """The figure's data as typed JSON (None without data): what the report build writes beside the notebook."""
        if self.data is None:
            return None
        return {
            "number": self.number,
            "caption": self.caption,
            "file": self.data_file,
            "columns": self.data.columns,
            "rows": self.data.height,
            "csv": self.csv(),
        }

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/html": self._repr_html_()}
        if (data := self.payload()) is not None:
            bundle[FIGURE_MIME] = data
        return bundle


def show(
    fig: Figure,
    caption: str,
    data: pl.DataFrame | None = None,
    alt: str | None = None,
    numbers: FigureNumbers | None = None,
) -> FigureView:
    """``display(show(fig, caption, data))``: the report's way to show a figure (see :class:`FigureView`), numbered
    by ``numbers`` (a notebook's: ``wb.show``), else unnumbered."""
    view = FigureView(fig, caption, data, alt)  # refuses a figure without a caption before it takes a number
    if numbers is not None:
        view.number = numbers.next()
    return view


# --------------------------------------------------------------------------- engine-choice studies (document 003)

CACHE_STYLES = {True: "-", False: (0, (4, 2))}  # line style by prefix caching on / off (off: long dashes)
#: The decision tree's fixed-context threshold as every study figure draws it (not an engine colour).
THRESHOLD_COLOR = "#aa3333"


def _config_label(engine: str, caching) -> str:
    return f"{engine_label(engine)}, prefix cache {'on' if caching else 'off'}"


def _cache_style(engine: str, caching) -> dict:
    """How one engine configuration is drawn: the engine's colour; prefix cache on = solid line, filled marker;
    off = dashed line, hollow marker (so the two read apart even where the lines are short)."""
    c = ENGINE_COLORS.get(engine, "#777777")
    on = caching is None or bool(caching)
    return dict(
        color=c,
        linestyle=CACHE_STYLES[on],
        marker="o",
        markersize=6,
        markeredgecolor=c,
        markerfacecolor=c if on else "white",
        label=_config_label(engine, on),
    )


def _ordered_engines(frame: pl.DataFrame) -> list[str]:
    present = frame["engine"].unique(maintain_order=True).to_list() if frame.height else []
    return [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]


def _config_handles(engines: list[str], settings) -> list:
    """Legend handles in two groups: one colour per engine, then one line style per cache setting (grey), so
    'on' and 'off' differ in the handle itself (solid with a filled dot against dashed with a hollow one)."""
    handles = [
        Line2D([], [], color=ENGINE_COLORS.get(e, "#777777"), linewidth=5, label=engine_label(e)) for e in engines
    ]
    for on in sorted({bool(s) for s in settings}, reverse=True):
        handles.append(
            Line2D(
                [],
                [],
                color="#555555",
                linestyle=CACHE_STYLES[on],
                marker="o",
                markersize=6,
                markeredgecolor="#555555",
                markerfacecolor="#555555" if on else "white",
                label=f"prefix cache {'on: solid line, filled dot' if on else 'off: dashed line, open dot'}",
            )
        )
    return handles


def _threshold_handle(threshold: float):
    return Line2D(
        [],
        [],
        color=THRESHOLD_COLOR,
        linewidth=1.2,
        alpha=0.7,
        label=f"the article's threshold: {threshold:.0%} of the prompt shared",
    )


def _fraction_axis(ax, frame: pl.DataFrame) -> None:
    """x ticks at the measured shared fractions, as percentages; the prompt length in the label when unique."""
    fracs = sorted(frame["shared_fraction"].unique().to_list()) if frame.height else []
    ax.set_xticks(fracs, [f"{f:.0%}" for f in fracs])
    ax.xaxis.set_minor_locator(NullLocator())
    prompt = frame["prompt_tokens"].unique().to_list() if "prompt_tokens" in frame.columns else []
    ax.set_xlabel(
        f"shared prefix, share of each {prompt[0]:,}-token prompt"
        if len(prompt) == 1
        else "shared prefix, share of each prompt"
    )
    if fracs:
        ax.set_xlim(min(fracs) - 0.04, max(fracs) + 0.04)


def _study_y(ax, values, ylabel: str, spread: float = 10.0) -> None:
    """y from 0, or a log axis (said in the label) when the values span more than ``spread``×; on a log axis
    spanning under two decades the 2s and 5s are labelled too, with plain numbers (0.2, 5), never 2×10⁻¹."""
    _log_if_wide(ax, values, ylabel, spread)
    if ax.get_yscale() == "log":
        v = [x for x in values if x is not None and x > 0]
        ax.set_ylim(min(v) / 1.3, max(v) * 1.3)
        if max(v) / min(v) < 1000:
            lead = lambda y: round(y / 10 ** math.floor(math.log10(y)))  # noqa: E731
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: _num(y) if lead(y) in (2, 5) else ""))
            ax.tick_params(axis="y", which="minor", labelsize=ax.yaxis.get_major_ticks()[0].label1.get_fontsize())


def _legend_below(fig: Figure, handles, ncol: int) -> Figure:
    """One legend for every panel, under the panels and their axis labels, so nothing drawn is hidden behind it.

    ``handles``: the legend's handles, or an axis whose labelled lines to use. The legend belongs to the middle
    axis (so the figure's alt text lists it) but sits below every axis label of the figure."""
    axes = [a for a in fig.axes if a.get_visible()]
    if not isinstance(handles, list):
        handles = handles.get_legend_handles_labels()[0]
    fig.tight_layout()
    renderer = fig._get_renderer()
    bottom = min(a.get_tightbbox(renderer).y0 for a in axes)  # display units
    anchor = axes[len(axes) // 2]
    x, _ = anchor.transAxes.inverted().transform(fig.transFigure.transform((0.5, 0)))
    _, y = anchor.transAxes.inverted().transform((0, bottom))
    anchor.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(x, y - 0.02),
        ncol=ncol,
        fontsize=9,
        frameon=False,
        handlelength=3.5,
    )
    return fig


def _zero_note(ax, engines: list[str], what: str) -> None:
    """Say in the panel, instead of drawing lines on top of each other at 0, which cache-off lines are all 0."""
    if engines:
        ax.text(
            0.98,
            0.03,
            f"cache off: {what} 0 at every point ({', '.join(engine_label(e) for e in engines)})",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
            color="#444444",
            bbox=dict(facecolor="white", edgecolor="#cccccc", pad=2),
        )


def _all_zero(values) -> bool:
    v = [x for x in values if x is not None]
    return bool(v) and all(x == 0 for x in v)


def _whiskers(ax, g: pl.DataFrame, x: str, y: str, span: tuple[str, str], color: str) -> bool:
    """A whisker from the least to the most over the repeats (``span``: those two columns) where a point has more
    than one run; True when any was drawn."""
    lo, hi = span
    if lo not in g.columns or hi not in g.columns or "n_runs" not in g.columns:
        return False
    rep = g.filter((pl.col("n_runs") > 1) & pl.col(lo).is_not_null() & pl.col(hi).is_not_null())
    if rep.height:
        ax.errorbar(
            rep[x],
            rep[y],
            yerr=[(rep[y] - rep[lo]).to_list(), (rep[hi] - rep[y]).to_list()],
            fmt="none",
            ecolor=color,
            capsize=3,
            lw=1,
        )
    return rep.height > 0


def _hit_rate_axis(ax, s: pl.DataFrame, zero_off: list[str]) -> None:
    """The ideal hit rates on the hit-rate panel, its percent axis and the note on all-zero cache-off lines."""
    col = "cache_hit_rate"
    ideal = s.group_by("shared_fraction", maintain_order=True).agg(
        pl.col("ideal_hit_rate", "block_ideal_hit_rate").first()
    )
    ax.plot(ideal["shared_fraction"], ideal["ideal_hit_rate"], color="#222222", linestyle=":", linewidth=1.4, zorder=5)
    ax.plot(
        ideal["shared_fraction"],
        ideal["block_ideal_hit_rate"],
        color="#8c6bb1",
        linestyle="-.",
        linewidth=1.2,
        marker="s",
        markersize=12,
        markerfacecolor="none",
        markeredgewidth=1.5,
        zorder=5,
    )
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_ylim(
        0, max([v for v in s[col].to_list() + ideal["ideal_hit_rate"].to_list() if v is not None], default=1) * 1.1 or 1
    )
    ax.set_ylabel("share of prompt tokens")
    _zero_note(ax, zero_off, "hit rate")


def _ideal_handles(block_tokens: int) -> list:
    return [
        Line2D(
            [],
            [],
            color="#222222",
            linestyle=":",
            linewidth=1.4,
            label="ideal, token-exact: the whole prefix reused by every request after the first",
        ),
        Line2D(
            [],
            [],
            color="#8c6bb1",
            linestyle="-.",
            linewidth=1.2,
            marker="s",
            markersize=9,
            markerfacecolor="none",
            markeredgewidth=1.5,
            label=f"ideal in whole {block_tokens}-token blocks (vLLM's granularity)",
        ),
    ]


def _prefix_ratio_figure(
    sharing: pl.DataFrame, gain: pl.DataFrame, threshold: float, block_tokens: int, min_gain: float
) -> Figure:
    """Report 05's measured figure: the hit rate per engine and cache setting, then each engine's TTFT and batch
    time with its cache off ÷ on (see :func:`prefix_sharing_figure`)."""
    fig = Figure(figsize=(16, 5.0))
    axes = fig.subplots(1, 3)
    hw = ", ".join(sharing["hardware"].unique(maintain_order=True).to_list())
    engines = _ordered_engines(sharing)
    s = sharing.sort("shared_fraction")
    zero_off = []
    for e in engines:
        for caching in (True, False):
            g = s.filter((pl.col("engine") == e) & (pl.col("prefix_caching") == caching))
            if g.is_empty():
                continue
            if not caching and _all_zero(g["cache_hit_rate"].to_list()):
                zero_off.append(e)
                continue
            axes[0].plot(
                g["shared_fraction"],
                g["cache_hit_rate"],
                **(_cache_style(e, caching) | dict(linewidth=3, markersize=7)),
            )
            if {"cache_hit_rate_min", "cache_hit_rate_max", "n_runs"} <= set(g.columns):
                _ranges(
                    axes[0],
                    g["shared_fraction"].to_list(),
                    g["cache_hit_rate"].to_list(),
                    g["cache_hit_rate_min"].to_list(),
                    g["cache_hit_rate_max"].to_list(),
                    g["n_runs"].to_list(),
                    ENGINE_COLORS.get(e, "#777777"),
                )
    _hit_rate_axis(axes[0], s, zero_off)
    axes[0].set_title("measured: prompt tokens served from the prefix cache", fontsize=10)
    spread = False
    g_all = gain.sort("shared_fraction")
    for ax, col, what in ((axes[1], "ttft_speedup", "mean TTFT"), (axes[2], "batch_speedup", "median batch time")):
        values = [1 / (1 - min_gain)]
        for e in engines:
            g = g_all.filter((pl.col("engine") == e) & pl.col(col).is_not_null())
            if g.is_empty():
                continue
            c = ENGINE_COLORS.get(e, "#777777")
            ax.plot(g["shared_fraction"], g[col], marker="o", color=c, markerfacecolor=c, linestyle="-")
            values += g[col].to_list()
            if {f"{col}_min", f"{col}_max", "n_runs"} <= set(g.columns) and _ranges(
                ax,
                g["shared_fraction"].to_list(),
                g[col].to_list(),
                g[f"{col}_min"].to_list(),
                g[f"{col}_max"].to_list(),
                g["n_runs"].to_list(),
                c,
            ):
                spread = True
                values += [v for v in g[f"{col}_max"].to_list() if v is not None]
        ax.axhline(1, color="#222222", linewidth=0.9)
        if col == "batch_speedup":
            ax.axhline(1 / (1 - min_gain), color="#777777", linewidth=1, linestyle=":")
        ax.set_ylim(0, max(values) * 1.12)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.set_ylabel(f"{what}, cache off ÷ on")
        ax.set_title(f"measured: {what}, cache off ÷ on", fontsize=10)
    for ax in axes:
        ax.axvline(threshold, color=THRESHOLD_COLOR, linewidth=1.2, alpha=0.7)
        _fraction_axis(ax, s)
    handles = _config_handles(engines, sharing["prefix_caching"].unique().to_list() if sharing.height else [])
    handles += _ideal_handles(block_tokens)
    handles += [
        Line2D([], [], color="#222222", linewidth=0.9, label="1×: the cache changes nothing (right panels)"),
        Line2D(
            [],
            [],
            color="#777777",
            linewidth=1,
            linestyle=":",
            label=f"{min_gain:.0%} of batch time saved ({1 / (1 - min_gain):.2f}×)",
        ),
        _threshold_handle(threshold),
    ]
    if spread:
        handles.append(
            Line2D([], [], color="#555555", marker="|", ms=10, lw=1, label="whisker: least to most over the repeats")
        )
    fig.suptitle(f"measured on {hw}; right: each engine against itself (above 1× its cache helps)", fontsize=10)
    return _legend_below(fig, handles, ncol=4)


@styled
def prefix_sharing_figure(
    sharing: pl.DataFrame,
    threshold: float = FIXED_CONTEXT_THRESHOLD,
    block_tokens: int = VLLM_CPU_BLOCK_TOKENS,
    gain: pl.DataFrame | None = None,
    min_gain: float = 0.10,
) -> Figure:
    """Cache-hit rate, mean TTFT and median batch time against the shared fraction, per engine and cache setting.

    Engine = colour; prefix cache on = solid line and filled dots, off = dashed line and open dots. A configuration
    whose hit count is not available draws no hit-rate line (never a line at 0); cache-off hit rates that are 0
    everywhere are said in the panel instead of drawn on top of each other. TTFT and batch time are on log axes
    (said on the axis) when the engines differ by more than 10×; whiskers from the least to the most of the repeats
    where points have them.

    With ``gain`` (:func:`kvlab.analysis.caching_gain`) the TTFT and batch-time panels are within-engine ratios
    instead: each engine's cache off ÷ cache on (above 1× the cache helps), on a linear axis from 0, with the saving
    that counts (``min_gain``) marked and a whisker from the least to the most over the repeats: what the cache
    does inside one engine, never one engine's time against another's.
    """
    if gain is not None:
        return _prefix_ratio_figure(sharing, gain, threshold, block_tokens, min_gain)
    fig = Figure(figsize=(16, 5.0))
    axes = fig.subplots(1, 3)
    panels = [
        ("cache_hit_rate", ("cache_hit_rate_min", "cache_hit_rate_max"), "prompt tokens served from the prefix cache"),
        ("ttft_mean_ms", ("ttft_min_ms", "ttft_max_ms"), "mean time to first token (ms)"),
        ("batch_time_s", ("batch_time_min_s", "batch_time_max_s"), "median batch time (s)"),
    ]
    hw = ", ".join(sharing["hardware"].unique(maintain_order=True).to_list())
    engines = _ordered_engines(sharing)
    settings = sharing["prefix_caching"].unique().to_list() if sharing.height else []
    s = sharing.sort("shared_fraction")
    repeats = False
    for ax, (col, std, label) in zip(axes, panels):
        zero_off = []
        for e in engines:
            for caching in (True, False):
                g = s.filter((pl.col("engine") == e) & (pl.col("prefix_caching") == caching))
                if g.is_empty():
                    continue
                if col == "cache_hit_rate" and not caching and _all_zero(g[col].to_list()):
                    zero_off.append(e)
                    continue
                style = _cache_style(e, caching)
                if col == "cache_hit_rate":  # wide, so the thin ideal lines drawn on top leave it visible
                    style |= dict(linewidth=3, markersize=7)
                ax.plot(g["shared_fraction"], g[col], **style)
                if std:
                    repeats |= _whiskers(ax, g, "shared_fraction", col, std, style["color"])
        if col == "cache_hit_rate":
            _hit_rate_axis(ax, s, zero_off)
        else:
            _study_y(ax, s[col].to_list(), label)
        ax.axvline(threshold, color=THRESHOLD_COLOR, linewidth=1.2, alpha=0.7)
        _fraction_axis(ax, s)
        ax.set_title(f"measured: {label}", fontsize=10)
    handles = _config_handles(engines, settings)
    handles += [*_ideal_handles(block_tokens), _threshold_handle(threshold)]
    fig.suptitle(f"measured on {hw}" + ("  (whiskers: least to most over the repeats)" if repeats else ""), fontsize=10)
    return _legend_below(fig, handles, ncol=4)


@styled
def caching_gain_figure(
    gain: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD, min_gain: float = 0.10
) -> Figure:
    """Speed-up from the prefix cache (off ÷ on) against the shared fraction, per engine: batch time (solid,
    filled dots) and mean TTFT (dashed, open squares); 1× (no gain), the saving that counts and the tree's
    threshold marked; y from 0, the legend below the axes."""
    fig = Figure(figsize=(8, 4.6))
    ax = fig.subplots()
    engines = _ordered_engines(gain)
    for e in engines:
        g = gain.filter(pl.col("engine") == e).sort("shared_fraction")
        c = ENGINE_COLORS.get(e, "#777777")
        ax.plot(g["shared_fraction"], g["batch_speedup"], marker="o", color=c, markerfacecolor=c, linestyle="-")
        ax.plot(
            g["shared_fraction"],
            g["ttft_speedup"],
            marker="s",
            color=c,
            markerfacecolor="white",
            markeredgecolor=c,
            linestyle=CACHE_STYLES[False],
        )
    ax.axhline(1, color="#222222", linewidth=0.9)
    ax.axhline(1 / (1 - min_gain), color="#777777", linewidth=1, linestyle=":")
    ax.axvline(threshold, color=THRESHOLD_COLOR, linewidth=1.2, alpha=0.7)
    top = max([v for c in ("batch_speedup", "ttft_speedup") for v in gain[c].to_list() if v is not None], default=2)
    ax.set_ylim(0, max(top, 1 / (1 - min_gain)) * 1.12)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    _fraction_axis(ax, gain)
    ax.set(
        ylabel="speed-up from the prefix cache, off ÷ on",
        title="measured: what the prefix cache buys, by shared fraction (above 1× it helps)",
    )
    ax.title.set_fontsize(10)
    handles = [
        Line2D([], [], color=ENGINE_COLORS.get(e, "#777777"), linewidth=5, label=engine_label(e)) for e in engines
    ]
    handles += [
        Line2D([], [], color="#555555", marker="o", linestyle="-", label="batch time, off ÷ on"),
        Line2D(
            [],
            [],
            color="#555555",
            marker="s",
            markerfacecolor="white",
            linestyle=CACHE_STYLES[False],
            label="mean TTFT, off ÷ on",
        ),
        Line2D([], [], color="#222222", linewidth=0.9, label="1×: the cache changes nothing"),
        Line2D(
            [],
            [],
            color="#777777",
            linewidth=1,
            linestyle=":",
            label=f"{min_gain:.0%} of batch time saved ({1 / (1 - min_gain):.2f}×)",
        ),
        _threshold_handle(threshold),
    ]
    return _legend_below(fig, handles, ncol=3)


@styled
def multi_turn_figure(by_turn: pl.DataFrame, requests: pl.DataFrame | None = None) -> Figure:
    """Per turn: prompt tokens served from the cache (mean per request) and mean TTFT, per engine with its prefix
    cache on (solid, filled dots) and off (dashed, open dots). Turns are whole numbers on the axis. With
    ``requests`` (:func:`kvlab.analysis.multi_turn_requests`) each request's TTFT is a small dot beside its
    turn's mean, so the spread over conversations shows."""
    fig = Figure(figsize=(12, 4.8))
    axes = fig.subplots(1, 2)
    engines = _ordered_engines(by_turn)
    settings = by_turn["prefix_caching"].unique().to_list() if by_turn.height else []
    configs = [
        (e, c)
        for e in engines
        for c in (True, False)
        if by_turn.filter((pl.col("engine") == e) & (pl.col("prefix_caching") == c)).height
    ]
    zero_off = []
    for i, (engine, caching) in enumerate(configs):
        g = by_turn.filter((pl.col("engine") == engine) & (pl.col("prefix_caching") == caching)).sort("turn")
        style = _cache_style(engine, caching)
        if caching or not _all_zero(g["cached_tokens"].to_list()):
            axes[0].plot(g["turn"], g["cached_tokens"], **style)
        elif not caching:
            zero_off.append(engine)
        axes[1].plot(g["turn"], g["ttft_mean_ms"], **style)
        if requests is not None and requests.height:
            r = requests.filter((pl.col("engine") == engine) & (pl.col("prefix_caching") == caching))
            dx = (i - (len(configs) - 1) / 2) * 0.05  # each configuration's dots a little apart
            axes[1].scatter(
                r["turn"] + dx,
                r["ttft_ms"],
                s=12,
                color=style["color"],
                alpha=0.45,
                linewidths=0.8,
                facecolors=style["color"] if caching else "white",
                edgecolors=style["color"],
                zorder=3,
            )
    if by_turn.height:
        lengths = by_turn.group_by("turn").agg(pl.col("prompt_tokens").mean()).sort("turn")
        axes[0].plot(lengths["turn"], lengths["prompt_tokens"], color="#222222", linestyle=":", linewidth=1.6)
        axes[0].set_ylim(0, lengths["prompt_tokens"].max() * 1.1)
    _zero_note(axes[0], zero_off, "cached tokens")
    axes[0].set(ylabel="tokens per request (mean)", title="measured: prompt tokens served from the cache")
    ttft = [v for v in by_turn["ttft_mean_ms"].to_list() if v is not None] if by_turn.height else []
    if requests is not None and requests.height:
        ttft += [v for v in requests["ttft_ms"].to_list() if v is not None]
    _study_y(axes[1], ttft, "TTFT (ms)")
    axes[1].set_title(
        "measured: time to first token by turn (line: mean"
        + ("; dots: each conversation)" if requests is not None and requests.height else ")")
    )
    turns = sorted(by_turn["turn"].unique().to_list()) if by_turn.height else []
    for ax in axes:
        ax.set_xticks(turns, [str(int(t)) for t in turns])  # turns are whole numbers: no 0.5 ticks
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("turn (0 = the first question about the document)")
        ax.title.set_fontsize(10)
    handles = _config_handles(engines, settings)
    handles.append(Line2D([], [], color="#222222", linestyle=":", linewidth=1.6, label="prompt length (tokens)"))
    if requests is not None and requests.height:
        handles.append(
            Line2D(
                [],
                [],
                color="#555555",
                marker="o",
                markersize=4,
                alpha=0.6,
                linestyle="none",
                label="small dots: one request each (TTFT)",
            )
        )
    return _legend_below(fig, handles, ncol=3)


@styled
def concurrency_figure(conc: pl.DataFrame, threshold: int = CONCURRENCY_THRESHOLD) -> Figure:
    """Completed requests/s and TTFT (mean: solid, circles; p99: dashed, triangles) against requests in flight, one
    colour per engine; each throughput point labelled completed/sent; the tree's threshold marked; a log axis (said
    so) where the engines are more than 20× apart; one legend under the panels, so nothing hides a point."""
    fig = Figure(figsize=(11, 4.8))
    axes = fig.subplots(1, 2)
    present = conc["engine"].unique(maintain_order=True).to_list() if conc.height else []
    engines = [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]
    for engine in engines:
        g = conc.filter(pl.col("engine") == engine).sort("in_flight")
        c = ENGINE_COLORS.get(engine, "#777777")
        axes[0].plot(g["in_flight"], g["requests_per_s"], marker="o", color=c)
        if (span := _span(g, "requests_per_s")) is not None and "n_runs" in g.columns:
            _ranges(axes[0], g["in_flight"].to_list(), g["requests_per_s"].to_list(), *span, g["n_runs"].to_list(), c)
        for x, y, ok, sent in zip(g["in_flight"], g["requests_per_s"], g["requests_ok"], g["requests_sent"]):
            axes[0].annotate(f"{ok}/{sent}", (x, y), textcoords="offset points", xytext=(6, -4), fontsize=8, color=c)
        axes[1].plot(g["in_flight"], g["ttft_mean_ms"], marker="o", color=c)
        axes[1].plot(g["in_flight"], g["ttft_p99_ms"], marker="^", linestyle="--", color=c)
    flights = sorted(conc["in_flight"].unique().to_list()) if conc.height else []
    ticks = sorted(set(flights) | {threshold})
    for ax in axes:
        ax.axvline(threshold, color="#aa3333", linewidth=1, alpha=0.7)
        if ticks and max(ticks) / min(ticks) > 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        lo, hi = min(ticks), max(ticks)
        pad = (hi - lo) * 0.15 or lo * 0.1
        if ax.get_xscale() == "linear":
            ax.set_xlim(lo - pad, hi + pad)
        ax.set_xlabel("requests in flight")
        ax.title.set_fontsize(10)
    value_axis(axes[0], conc["requests_per_s"].to_list() if conc.height else [], "completed requests/s")
    value_axis(
        axes[1], (conc["ttft_mean_ms"].to_list() + conc["ttft_p99_ms"].to_list()) if conc.height else [], "TTFT (ms)"
    )
    axes[0].set_title("measured: throughput (labels: completed/sent requests)")
    axes[1].set_title("measured: time to first token")
    handles = [
        Line2D([], [], color=ENGINE_COLORS.get(e, "#777777"), marker="o", label=engine_label(e)) for e in engines
    ]
    handles += [
        Line2D([], [], color="#555555", marker="o", label="mean TTFT (right)"),
        Line2D([], [], color="#555555", marker="^", linestyle="--", label="p99 TTFT (right)"),
        Line2D([], [], color="#aa3333", alpha=0.7, label=f"tree threshold: ≥ {threshold} in flight → vLLM"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


@styled
def decision_tree_figure(path: tuple[tuple[str, str], ...], engine: str) -> Figure:
    """Document 003's decision tree with the answers of one workload highlighted."""
    # (question or leaf, x, y); edges (parent, child, answer)
    nodes = {
        "shared": ("Shared system prompt /\ndocument across requests?", 0.5, 0.9),
        "frac": (f"Fixed context\n≥ {FIXED_CONTEXT_THRESHOLD:.0%} of prompt?", 0.25, 0.68),
        "conc": (f"≥ {CONCURRENCY_THRESHOLD} concurrent\nrequests?", 0.75, 0.68),
        "ds": ("DeepSeek-family\nmodel?", 0.38, 0.46),
        "mixed": ("Mixed GPU/TPU or\nfrequent model changes?", 0.75, 0.46),
        "prio": ("Priority?", 0.75, 0.24),
    }
    # leaves: (the engine family the document recommends, x, y), each drawn in its engine's colour
    leaves = {
        "L_frac": (SGLANG, 0.1, 0.46),
        "L_ds": (SGLANG, 0.27, 0.24),
        "L_eq": (VLLM, 0.49, 0.24),
        "L_conc": (VLLM, 0.93, 0.46),
        "L_mixed": (VLLM, 0.93, 0.24),
        "L_tp": (SGLANG, 0.62, 0.04),
        "L_st": (VLLM, 0.88, 0.04),
    }
    nodes |= {
        k: (f"≈ equal:\n{engine_label(e)} easier" if k == "L_eq" else engine_label(e), x, y)
        for k, (e, x, y) in leaves.items()
    }
    edges = [
        ("shared", "frac", "yes"),
        ("shared", "conc", "no"),
        ("frac", "L_frac", "yes"),
        ("frac", "ds", "no"),
        ("ds", "L_ds", "yes"),
        ("ds", "L_eq", "no"),
        ("conc", "L_conc", "yes"),
        ("conc", "mixed", "no"),
        ("mixed", "L_mixed", "yes"),
        ("mixed", "prio", "no"),
        ("prio", "L_tp", "throughput"),
        ("prio", "L_st", "stability"),
    ]
    # Walk the tree with the given answers to find the highlighted edges.
    answers = [a.split(" ")[0] for _, a in path]
    taken, node = set(), "shared"
    for a in answers:
        nxt = next((c for p, c, lab in edges if p == node and lab == a), None)
        if nxt is None:
            break
        taken.add((node, nxt))
        node = nxt
    fig = Figure(figsize=(10, 5.2))
    ax = fig.subplots()
    ax.set_axis_off()
    hot = "#aa3333"
    for p, c, lab in edges:
        (_, x0, y0), (_, x1, y1) = nodes[p], nodes[c]
        on = (p, c) in taken
        ax.annotate(
            "",
            (x1, y1 + 0.05),
            (x0, y0 - 0.05),
            arrowprops=dict(arrowstyle="->", color=hot if on else "#999999", linewidth=2.2 if on else 1),
        )
        ax.text(
            (x0 + x1) / 2,
            (y0 + y1) / 2,
            lab,
            fontsize=8,
            color=hot if on else "#666666",
            ha="center",
            bbox=dict(facecolor="white", edgecolor="none", pad=0.5),
        )
    for key, (text, x, y) in nodes.items():
        leaf = key.startswith("L_")
        on = key == node or any(key in e for e in taken)
        colour = ENGINE_COLORS[leaves[key][0]] if leaf else "#f4f4f4"
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=8.5,
            color="white" if leaf else "#222222",
            fontweight="bold" if on else "normal",
            bbox=dict(
                boxstyle="round,pad=0.4",
                facecolor=colour,
                edgecolor=hot if on else "#bbbbbb",
                linewidth=2.5 if on else 1,
            ),
        )
    ax.set(xlim=(0, 1), ylim=(-0.04, 1.0))
    ax.set_title(
        f"the KV-cache design article's decision tree: this workload → {engine_label(engine)} (highlighted path)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


@styled
def ideal_reuse_figure(
    ideal: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD, block_tokens: int | None = None
) -> Figure:
    """Modelled: the share of prompt tokens a perfect prefix cache could serve, against the shared fraction,
    token-exact and in whole KV blocks (no engine colour: nothing here is an engine's measurement)."""
    fig = Figure(figsize=(7, 4.4))
    ax = fig.subplots()
    ax.plot(
        ideal["shared_fraction"],
        ideal["ideal_hit_rate"],
        marker="o",
        color="#222222",
        label="token-exact: the whole prefix reused by every request after the first",
    )
    ax.plot(
        ideal["shared_fraction"],
        ideal["block_hit_rate"],
        marker="s",
        markerfacecolor="white",
        linestyle="-.",
        color="#8c6bb1",
        label=f"in whole {block_tokens}-token KV blocks" if block_tokens else "in whole KV blocks",
    )
    ax.axvline(
        threshold,
        color=THRESHOLD_COLOR,
        linewidth=1.2,
        alpha=0.7,
        label=f"the article's threshold: {threshold:.0%} of the prompt shared",
    )
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_ylim(0, max(ideal["ideal_hit_rate"].max() or 1, 0.1) * 1.1)
    _fraction_axis(ax, ideal)
    ax.set(
        ylabel="share of prompt tokens servable from cache",
        title="modelled: the most a prefix cache can reuse (no engine measured)",
    )
    ax.title.set_fontsize(10)
    return _legend_below(fig, ax, ncol=1)


# --------------------------------------------------------------------------- report 07: capacity under load


def _capacity_config(engine: str, tp, dcp) -> str:
    """'vLLM TP8', 'SGLang TP8+DCP8': an engine configuration as the capacity figures name it."""
    return f"{engine_label(engine)} TP{tp or 1}" + (f"+DCP{dcp}" if (dcp or 1) > 1 else "")


def _capacity_grid(frame: pl.DataFrame, width: float = 4.6, height: float = 3.6):
    """One panel per context (rows, shortest first) x memory setting (columns): (fig, {(context, mem): ax},
    contexts, settings)."""
    contexts = frame.select("context_tokens", "context_label").unique().sort("context_tokens").rows()
    mems = sorted(frame["mem_util"].unique().to_list(), key=lambda m: (m is None, m))
    fig = Figure(figsize=(width * max(len(mems), 1), height * max(len(contexts), 1)))
    axes = fig.subplots(max(len(contexts), 1), max(len(mems), 1), squeeze=False)
    grid = {(c, m): axes[i][j] for i, (c, _) in enumerate(contexts) for j, m in enumerate(mems)}
    return fig, grid, contexts, mems


def _setting(mem) -> str:
    return "memory setting –" if mem is None else f"memory setting {mem:g}"


#: Where a point's label may go, in points from the point (x right, y up), in the order they are tried.
LABEL_OFFSETS = ((5, 4), (5, -12), (-11, 4), (-11, -12), (5, 14), (-11, -20))
#: A label's box and a marker's, in points (an 8-point digit or two; a 6-point marker and its edge).
_LABEL_BOX, _MARKER_BOX = (11.0, 9.0), 7.0


def _place_labels(ax, wanted: list[tuple[str, float, float, str]]) -> None:
    """Annotate each (text, x, y, colour) at the first of :data:`LABEL_OFFSETS` whose box overlaps no marker of the
    axis and no label placed before it (the first offset where every one overlaps): labels beside their points,
    never over another engine's points or labels (issue 39). Call it once the axis's scales and size are final."""
    to_pt = 72.0 / ax.figure.dpi
    markers = [
        (px * to_pt, py * to_pt)
        for line in ax.get_lines()
        if line.get_marker() not in (None, "None", "")
        for px, py in ax.transData.transform(list(zip(line.get_xdata(), line.get_ydata())))
    ]
    w, h = _LABEL_BOX
    half = _MARKER_BOX / 2
    placed: list[tuple[float, float, float, float]] = []

    def free(box: tuple[float, float, float, float]) -> bool:
        x0, y0, x1, y1 = box
        hits_marker = any(x0 < mx + half and mx - half < x1 and y0 < my + half and my - half < y1 for mx, my in markers)
        return not hits_marker and not any(x0 < b[2] and b[0] < x1 and y0 < b[3] and b[1] < y1 for b in placed)

    for text, x, y, colour in wanted:
        px, py = (v * to_pt for v in ax.transData.transform((x, y)))
        boxes = [((px + dx, py + dy, px + dx + w, py + dy + h), (dx, dy)) for dx, dy in LABEL_OFFSETS]
        box, offset = next(((b, o) for b, o in boxes if free(b)), boxes[0])
        placed.append(box)
        ax.annotate(
            text,
            (x, y),
            textcoords="offset points",
            xytext=offset,
            fontsize=8,
            color=colour,
            annotation_clip=False,
        )


@styled
def capacity_pareto_figure(curve: pl.DataFrame) -> Figure:
    """Measured: per context x memory setting, each engine's load points as output tokens/s per device (y,
    throughput) against output tokens/s per user (x, interactivity), each load labelled once at its median; each
    run is a dot of its own, so the repeats of a load show their spread;
    filled dots met the SLO, hollow ones did not; the line is each configuration's Pareto front (:func:`kvlab.
    analysis.pareto_front`'s ``on_front``); a dashed line marks the SLO's TPOT bound (x = 1,000 ÷ the bound in ms)
    where the runs share one; every panel has the same scales, so panels compare at a glance."""
    fig, grid, contexts, mems = _capacity_grid(curve)
    hw = device_of(curve)
    labels: dict = {}  # per axis: (text, x, y, colour) of each load's label, placed once the scales are final
    slo = curve["slo_tpot_ms"].drop_nulls().unique().to_list() if "slo_tpot_ms" in curve.columns else []
    slo_x = 1000 / slo[0] if len(slo) == 1 and slo[0] else None  # one TPOT bound: tokens/s per user at it
    for ctx, label in contexts:
        for mem in mems:
            ax = grid[(ctx, mem)]
            part = curve.filter((pl.col("context_tokens") == ctx) & (pl.col("mem_util") == mem))
            for key, g in part.group_by(["engine", "tp", "dcp"], maintain_order=True):
                g = g.sort("load_level")
                colour = ENGINE_COLORS.get(key[0], "#777777")
                # the line is the configuration's Pareto front (its points by interactivity); every run is a dot
                front = (
                    g.filter(pl.col("on_front")).sort("output_tokens_per_s_per_user")
                    if "on_front" in g.columns
                    else g.clear()
                )
                ax.plot(
                    front["output_tokens_per_s_per_user"],
                    front["output_tokens_per_s_per_device"],
                    color=colour,
                    linewidth=1.6,
                    label=_capacity_config(*key),
                )
                for r in g.iter_rows(named=True):
                    within = bool(r["within_slo"])
                    ax.plot(
                        r["output_tokens_per_s_per_user"],
                        r["output_tokens_per_s_per_device"],
                        marker="o",
                        markersize=6,
                        color=colour,
                        markerfacecolor=colour if within else "white",
                        markeredgecolor=colour,
                        linestyle="none",
                    )
                mid = (
                    g.group_by("load_level")
                    .agg(pl.col("output_tokens_per_s_per_user", "output_tokens_per_s_per_device").median())
                    .sort("load_level")
                )
                for r in mid.iter_rows(named=True):  # each load labelled once, at its median
                    labels.setdefault(ax, []).append(
                        (
                            f"{r['load_level']:g}",
                            r["output_tokens_per_s_per_user"],
                            r["output_tokens_per_s_per_device"],
                            colour,
                        )
                    )
            if slo_x is not None:  # left of it a run's TPOT is past the SLO's bound
                ax.axvline(slo_x, color="#555555", linestyle="--", linewidth=1.0)
            ax.set(
                title=f"measured: {scaled_context(label, ctx)}, {_setting(mem)}",
                xlabel="output tokens/s per user (interactivity)",
                ylabel="output tokens/s per device",
            )
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
            ax.title.set_fontsize(10)
    handles = [
        Line2D([], [], color=ENGINE_COLORS.get(e, "#777777"), marker="o", label=_capacity_config(e, t, d))
        for e, t, d in curve.select("engine", "tp", "dcp").unique().sort("engine").rows()
    ]
    handles += [
        Line2D(
            [],
            [],
            color="#555555",
            marker="o",
            linestyle="none",
            markerfacecolor="white",
            label="hollow: missed the SLO",
        ),
        Line2D([], [], color="#555555", linewidth=1.6, label="line: the Pareto front"),
    ]
    if slo_x is not None:
        handles.append(
            Line2D(
                [],
                [],
                color="#555555",
                linestyle="--",
                linewidth=1.0,
                label=f"dashed: SLO's TPOT ≤ {slo[0]:g} ms ({slo_x:g} tokens/s per user)",
            )
        )
    axes = list(grid.values())
    top = max((a.get_ylim()[1] for a in axes), default=1)
    right = max((a.get_xlim()[1] for a in axes), default=1)
    for a in axes:  # panels compared side by side share their scales
        a.set_ylim(0, top)
        a.set_xlim(0, max(right, (slo_x or 0) * 1.05))
    fig.suptitle(f"measured on {hw}: throughput against interactivity (labels: requests in flight)", fontsize=11)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    for ax, wanted in labels.items():  # on the final scales, so a label's place is known in points
        _place_labels(ax, wanted)
    return fig


@styled
def capacity_ceiling_figure(points: pl.DataFrame) -> Figure:
    """Measured: per context x memory setting, the highest KV-pool usage each engine's telemetry sampled at each
    load (a line per engine, none where nothing was sampled), a cross where requests waited (the queue above 0), and
    each engine's concurrency ceiling (reported KV pool ÷ tokens per request) as a dashed line in its colour. The x
    axis is labelled at the loads measured and the ceilings, as many as fit without two labels overlapping
    (:func:`_unoverlapped_xticks`: the ladder's levels first; a ceiling its dashed line and legend name anyway)."""
    fig, grid, contexts, mems = _capacity_grid(points)
    ladders: dict = {}
    for ctx, label in contexts:
        for mem in mems:
            ax = grid[(ctx, mem)]
            part = points.filter((pl.col("context_tokens") == ctx) & (pl.col("mem_util") == mem))
            levels = part["load_level"].drop_nulls().to_list()
            for i, (engine, g) in enumerate(part.group_by("engine", maintain_order=True)):
                engine = engine[0]
                g = g.sort("load_level")
                colour = ENGINE_COLORS.get(engine, "#777777")
                seen = g.filter(pl.col("kv_usage_peak").is_not_null())
                if seen.height:
                    ax.plot(
                        seen["load_level"],
                        seen["kv_usage_peak"],
                        marker="o",
                        color=colour,
                        label=f"{engine_label(engine)}: peak KV usage",
                    )
                q = g.filter(pl.col("queued").fill_null(False))
                if q.height:
                    ax.plot(
                        q["load_level"],
                        q["kv_usage_peak"].fill_null(0.0),
                        marker="X",
                        markersize=11,
                        linestyle="none",
                        color="#aa3333",
                        label="requests waited (queue > 0)",
                    )
                ceiling = g["concurrency_ceiling"].drop_nulls().min()
                if ceiling is not None:
                    ax.axvline(
                        ceiling,
                        color=colour,
                        linestyle=(0, (4, 2)),
                        linewidth=1.3,
                        label=f"{engine_label(engine)} ceiling: {ceiling}",
                    )
                    levels.append(float(ceiling))
            ax.set_xscale("log", base=2)
            ticks = sorted({v for v in levels if v and v > 0})
            ax.set_xticks(ticks, [_num(t) for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
            ladders[ax] = set(part["load_level"].drop_nulls().to_list())
            ax.set_ylim(0, 1.1)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            ax.set(
                title=f"measured: {scaled_context(label, ctx)}, {_setting(mem)}",
                xlabel="requests in flight (log scale)",
                ylabel="peak KV-pool usage (telemetry)",
            )
            ax.title.set_fontsize(10)
            handles, labels = ax.get_legend_handles_labels()
            keep = dict(zip(labels, handles))  # one entry per label
            ax.legend(keep.values(), keep.keys(), fontsize=7, loc="upper left")
    fig.tight_layout()
    for ax, first in ladders.items():
        _unoverlapped_xticks(ax, first)
    return fig


def _unoverlapped_xticks(ax, first: set, pad_px: float = 3.0) -> None:
    """Keep only the x ticks whose labels overlap no kept label (with ``pad_px`` between them), as drawn: the values in
    ``first`` (a load ladder's levels) in order, then the rest (e.g. a concurrency ceiling at 19 beside a level of 20,
    which its own dashed line and legend already name). Call after the figure's layout is final."""
    renderer = ax.figure._get_renderer()
    ticks = [(v, lab) for v, lab in zip(ax.get_xticks(), ax.get_xticklabels()) if lab.get_text()]
    lo, hi = ax.get_xlim()
    ticks = [(v, lab) for v, lab in ticks if lo <= v <= hi]
    kept: list[tuple[float, str, object]] = []
    for v, lab in sorted(ticks, key=lambda t: (t[0] not in first, t[0])):
        box = lab.get_window_extent(renderer).padded(pad_px / 2)
        if not any(box.overlaps(k) for _, _, k in kept):
            kept.append((v, lab.get_text(), box))
    if len(kept) < len(ticks):
        kept.sort(key=lambda k: k[0])
        ax.set_xticks([k[0] for k in kept], [k[1] for k in kept])


#: The telemetry-over-time figure's gauges: (column of kvlab.studies.capacity.telemetry_over_time, y label).
_TELEMETRY_GAUGES = (
    ("kv_cache_usage", "KV-pool usage"),
    ("requests_running", "requests running"),
    ("requests_waiting", "requests waiting"),
)


@styled
def capacity_telemetry_figure(telemetry: pl.DataFrame) -> Figure:
    """Measured: per engine x context x memory setting (rows), the server's KV-pool usage, requests running and
    requests waiting (columns) against seconds into the run, one series per load point (its load level in flight,
    darker the higher), its answered sample count in the legend. A series with ``line`` false (fewer samples than
    kvlab.studies.capacity.MIN_LINE_SAMPLES) is drawn as dots only, never joined into a line."""
    configs = (
        telemetry.select("engine", "context_tokens", "context_label", "mem_util").unique(maintain_order=True).rows()
        if telemetry.height
        else []
    )
    fig = Figure(figsize=(11.0, 2.3 * max(len(configs), 1)))
    axes = fig.subplots(max(len(configs), 1), len(_TELEMETRY_GAUGES), squeeze=False)
    levels = sorted(telemetry["load_level"].drop_nulls().unique().to_list()) if telemetry.height else []
    cmap = colormaps["viridis"]
    shade = {lv: cmap(0.85 - 0.75 * i / max(len(levels) - 1, 1)) for i, lv in enumerate(levels)}
    for row, (engine, ctx, label, mem) in enumerate(configs):
        part = telemetry.filter(
            (pl.col("engine") == engine) & (pl.col("context_tokens") == ctx) & (pl.col("mem_util").eq_missing(mem))
        )
        for col, (series, ylabel) in enumerate(_TELEMETRY_GAUGES):
            ax = axes[row][col]
            for (level, _rid), g in part.group_by("load_level", "run_id", maintain_order=True):
                g = g.filter(pl.col(series).is_not_null())
                if not g.height:
                    continue
                n = g["samples"][0]
                kw = {
                    "color": shade.get(level, "#777777"),
                    "marker": "o",
                    "markersize": 3,
                    "label": f"{_num(level)} in flight ({n} sample{'s' if n != 1 else ''})",
                }
                if g["line"][0]:
                    ax.plot(g["t_s"], g[series], linewidth=1.2, **kw)
                else:
                    ax.plot(g["t_s"], g[series], linestyle="none", **kw)
            ax.set_xlim(0, max(part["t_s"].max() or 0.0, 0.5) * 1.05)  # one time axis per row, from the first send
            if series == "kv_cache_usage":
                ax.set_ylim(0, 1.05)
                ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            else:
                ax.set_ylim(bottom=0)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
            if row == len(configs) - 1:
                ax.set_xlabel("seconds into the run", fontsize=8)
            ax.set_title(
                f"measured: {engine_label(engine)}, {scaled_context(label, ctx)}, {_setting(mem)}"
                if col == 0
                else ylabel,
                fontsize=8,
                loc="left",
            )
        handles, labels = axes[row][0].get_legend_handles_labels()
        if handles:
            axes[row][0].legend(handles, labels, fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


@styled
def capacity_map_figure(gmap: pl.DataFrame) -> Figure:
    """Measured: the capacity map, one cell per context (rows) x memory setting (columns), coloured by the engine
    with the higher goodput at its highest load within the SLO, with the margin over the runner-up, its range over
    the repeats and n; grey where no engine met the SLO."""
    contexts = gmap.select("context_tokens", "context_label").unique().sort("context_tokens").rows()
    mems = sorted(gmap["mem_util"].unique().to_list())
    fig = Figure(figsize=(2.6 * len(mems) + 1.6, 1.3 * len(contexts) + 1.2))
    ax = fig.subplots()
    for r in gmap.iter_rows(named=True):
        i = [c for c, _ in contexts].index(r["context_tokens"])
        j = mems.index(r["mem_util"])
        w = r.get("winner")
        colour = ENGINE_COLORS.get(w, "#bbbbbb") if w else "#dddddd"
        ax.fill_between([j, j + 1], i, i + 1, color=colour, alpha=0.35 if w else 1.0, linewidth=0)
        if not w:
            text = "no engine\nwithin the SLO"
        elif r.get("margin") is None:
            text = f"{engine_label(w)}\nonly one within the SLO"
        else:
            spread = "" if r["margin_lo"] == r["margin_hi"] else f"\n({_num(r['margin_lo'])}–{_num(r['margin_hi'])}×)"
            text = f"{engine_label(w)}\n{_num(r['margin'])}× goodput{spread}\nn={r['n']}"
        if w and r.get("winner_differs"):  # fast but wrong: the accuracy probe's difference, on the cell itself
            text += f"\noutput differs (probe,\nfrom token {r['winner_probe_first_diff']})"
            ax.fill_between([j, j + 1], i, i + 1, facecolor="none", hatch="//", edgecolor="#cf222e", linewidth=0)
        ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=9)
    ax.set_xlim(0, len(mems))
    ax.set_ylim(0, len(contexts))
    ax.set_xticks([j + 0.5 for j in range(len(mems))], [f"{m:g}" for m in mems])
    ax.set_yticks([i + 0.5 for i in range(len(contexts))], [scaled_context(lab, c, "\n") for c, lab in contexts])
    ax.grid(False)
    ax.set(
        xlabel="memory setting", ylabel="context", title="measured: the engine with the higher goodput within the SLO"
    )
    ax.title.set_fontsize(10)
    fig.tight_layout()
    return fig


@styled
def modelled_ceiling_figure(modelled: pl.DataFrame) -> Figure:
    """Modelled (kvlab's physical model, no run): the concurrency ceiling (the sequences the modelled KV pool holds at the context, each with its linear-attention state) per context,
    a bar per engine configuration and memory setting (lighter: the lower setting), hatched where the model's memory
    check fails; log scale."""
    ctxs = sorted(modelled["context_tokens"].unique().to_list())
    configs = modelled.select("engine", "tp", "dcp", "mem_util").unique().sort("dcp", "mem_util").rows()
    fig = Figure(figsize=(9.5, 4.4))
    ax = fig.subplots()
    width = 0.8 / max(len(configs), 1)
    lowest = min(m for *_, m in configs)
    for k, (engine, tp, dcp, mem) in enumerate(configs):
        part = modelled.filter((pl.col("engine") == engine) & (pl.col("dcp") == dcp) & (pl.col("mem_util") == mem))
        for i, c in enumerate(ctxs):
            row = part.filter(pl.col("context_tokens") == c)
            if row.is_empty():
                continue
            r = row.row(0, named=True)
            bar = ax.bar(
                i + (k - (len(configs) - 1) / 2) * width,
                r["concurrency_ceiling"],
                width,
                color=ENGINE_COLORS.get(engine, "#777777"),
                alpha=0.55 if mem == lowest else 1.0,
                hatch="" if r["fits"] else "//",
                edgecolor="white",
                label=f"{_capacity_config(engine, tp, dcp)} at {mem:g}" if i == 0 else None,
            )
            ax.bar_label(bar, labels=[f"{r['concurrency_ceiling']:,}"], padding=2, fontsize=7)
    ax.set_xticks(range(len(ctxs)), [f"{c // 1024}K" for c in ctxs])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _num(v)))
    first = modelled.row(0, named=True)
    ax.set(
        xlabel="context (tokens per request)",
        ylabel="requests that fit at once (log scale)",
        title=f"modelled: {first['model']} on {first['tp']}× {first['gpu']}, concurrency ceiling "
        "(sequences the KV pool holds)",
    )
    ax.title.set_fontsize(10)
    handles = ax.get_legend_handles_labels()[0]
    if not modelled["fits"].all():
        handles.append(
            Patch(facecolor="white", hatch="//", edgecolor="#555555", label="hatched: fails the model's memory check")
        )
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.tight_layout()
    return fig
