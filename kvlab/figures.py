"""The figures' shared ground: how a report shows a figure (:func:`show`, numbered, captioned, its data linked as
CSV), and the drawing helpers several studies' figures use (a whisker over the repeats, panels per source, a legend
below the axes, labels that do not overlap). Each study draws its own figures in ``kvlab/studies/<study>/figures.py``;
the house style and engine colours are :mod:`kvlab.style`.

Figures are plain ``matplotlib.figure.Figure`` objects, not registered with pyplot, so the library never leaks or shows
a figure; notebooks ``display()`` what they get. Every panel says whether its numbers are published, measured (and on
what) or modelled.
"""

from __future__ import annotations

import base64
import html
import io
import os
import struct

import polars as pl
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from kvlab.device import shown
from kvlab.engines import engine_label
from kvlab.markup import markdown_inline
from kvlab.store import neutralise
from kvlab.style import ENGINE_COLORS, number_label as _num, theme
from kvlab.tables import experiment_words


def log_if_wide(ax, values, ylabel: str, spread: float = 20.0) -> None:
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


def source_panels(df: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    out = []
    for (source, experiment, _), part in df.group_by(["source", "experiment", "hardware"], maintain_order=True):
        scale = part["scale_factor"].drop_nulls().first() if "scale_factor" in part.columns else None
        out.append((source_label(source, experiment, device_of(part), scale_factor=scale), part))
    return out


def panel_row(n: int, width: float = 5.5, height: float = 4.0) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * max(n, 1), height))
    axes = fig.subplots(1, max(n, 1), squeeze=False)
    return fig, list(axes[0])


def finish(fig: Figure, axes, legend_size: int | None = 8) -> Figure:
    """The common ending: 10-pt titles, a legend on every axis (none when ``legend_size`` is None), tight layout."""
    for ax in axes:
        ax.title.set_fontsize(10)
        if legend_size is not None:
            ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


#: A figure with at most this many points becomes a table (:func:`drawable`).
FEW_POINTS = 2


def drawable(frame: pl.DataFrame | None, y: str | None = None, few: int = FEW_POINTS) -> bool:
    """Whether ``frame`` holds more than ``few`` points (rows with a value in ``y``, when given): a one- or
    two-point figure becomes a table."""
    if frame is None:
        return False
    rows = frame.filter(pl.col(y).is_not_null()) if y else frame
    return rows.height > few


def repeat_whiskers(ax, x, values, lows, highs, counts, color: str, **kw) -> bool:
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


def repeat_span(g: pl.DataFrame, y: str, base: str | None = None) -> tuple[list, list] | None:
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


def is_wide(values, spread: float = 20.0) -> bool:
    v = [x for x in values if x is not None and x > 0]
    return bool(v) and max(v) / min(v) > spread


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
        return (
            f'<figure class="kvlab-figure" style="margin: .5rem 0 1rem;">{img}'
            f'<figcaption style="max-width: {max(width, 480)}px;">{self.caption_html()}</figcaption></figure>'
        )

    def caption_html(self) -> str:
        """What the figure's caption shows: its number, its sentence and the link to its data (the page's text; the
        image itself has none)."""
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
        number = f"<b>Figure {self.number}.</b> " if self.number is not None else ""
        return f"{number}{markdown_inline(self.caption)}{link}"

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


def ordered_engines(frame: pl.DataFrame) -> list[str]:
    present = frame["engine"].unique(maintain_order=True).to_list() if frame.height else []
    return [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]


def legend_below(fig: Figure, handles, ncol: int) -> Figure:
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


def zero_note(ax, engines: list[str], what: str) -> None:
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


def all_zero(values) -> bool:
    v = [x for x in values if x is not None]
    return bool(v) and all(x == 0 for x in v)


def column_whiskers(ax, g: pl.DataFrame, x: str, y: str, span: tuple[str, str], color: str) -> bool:
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


#: Where a point's label may go, in points from the point (x right, y up), in the order they are tried.
LABEL_OFFSETS = ((5, 4), (5, -12), (-11, 4), (-11, -12), (5, 14), (-11, -20))
#: A label's box and a marker's, in points (an 8-point digit or two; a 6-point marker and its edge).
_LABEL_BOX, _MARKER_BOX = (11.0, 9.0), 7.0


def place_labels(ax, wanted: list[tuple[str, float, float, str]]) -> None:
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


def unoverlapped_xticks(ax, first: set, pad_px: float = 3.0) -> None:
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
