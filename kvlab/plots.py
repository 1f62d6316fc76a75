"""Figures for the reports: each helper takes a frame and returns a matplotlib Figure.

Figures are plain ``matplotlib.figure.Figure`` objects, not registered with pyplot, so the
library never leaks or shows a figure; notebooks ``display()`` what they get. Every panel says
whether its numbers are published, measured (and on what) or modelled.
"""

from __future__ import annotations

import polars as pl
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from kvlab.guide import CONCURRENCY_THRESHOLD, FIXED_CONTEXT_THRESHOLD, engine_label

#: One colour per engine in every report; sglang-jax (SGLang's JAX runtime) is SGLang's family, a darker shade.
ENGINE_COLORS = {"vllm": "#3b75af", "sglang": "#e1812c", "sglang-jax": "#a0461a"}
sns.set_theme(style="whitegrid", context="notebook")


def _num(v: float) -> str:
    """A value for a label: 3 significant digits, but whole numbers from 1,000 up (1,260 rather than 1.26e+03)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


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


def _relabel_engine_legend(ax) -> None:
    """Replace engine names in a seaborn legend by :func:`engine_label`."""
    legend = ax.get_legend()
    if legend is not None:
        for text in legend.get_texts():
            text.set_text(engine_label(text.get_text()))


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


def _finish(fig: Figure, axes, legend_size: int | None = 8) -> Figure:
    """The common ending: 10-pt titles, a legend on every axis (none when ``legend_size`` is None), tight layout."""
    for ax in axes:
        ax.title.set_fontsize(10)
        if legend_size is not None:
            ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


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
        ax.set(title=title, xlabel="context")
        _log_if_wide(ax, pdf["batch_time_s"].tolist(), "batch time (s)")
        _relabel_engine_legend(ax)
    return _finish(fig, axes, legend_size=None)


def throughput_vs_context(tp: pl.DataFrame, y: str = "batches_per_s", ylabel: str | None = None) -> Figure:
    """Throughput against context per engine (log-log), one panel per source."""
    panels = _panels(tp.filter(pl.col(y).is_not_null()).sort("context_tokens"))
    fig, axes = _subplots(len(panels))
    for ax, (title, part) in zip(axes, panels):
        present = part["engine"].unique(maintain_order=True).to_list()
        ordered = [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]
        for i, e in enumerate(ordered):
            g = part.filter(pl.col("engine") == e)
            color = ENGINE_COLORS.get(e)
            ax.plot(g["context_tokens"], g[y], marker="o", color=color, label=engine_label(e))
            for c, v, lab in zip(g["context_tokens"], g[y], g["context_label"]):  # 1st engine above, 2nd below
                ax.annotate(f"{lab}: {_num(v)}", (c, v), textcoords="offset points",
                            xytext=(4, 4 if i % 2 == 0 else -12), fontsize=8, color=color)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        contexts = sorted(part["context_tokens"].unique().to_list())
        ax.set_xticks(contexts, [f"{c:,}" for c in contexts], minor=False)
        ax.tick_params(axis="x", labelrotation=30 if len(contexts) > 3 else 0)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _num(v)))
        lo, hi = ax.get_ylim()
        if hi / lo < 10:  # less than a decade: label the minor ticks too, else there is at most one label
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: _num(v)))
            ax.tick_params(axis="y", which="minor", labelsize=7)
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
    return _finish(fig, [ax])


def memory_study_figure(stats: pl.DataFrame, runs: pl.DataFrame) -> Figure:
    """Per context @ memory setting, one colour per engine: left, retries (solid) and failed runs (hatched);
    right, the batch time of every successful run."""
    from matplotlib.patches import Patch

    several = stats["experiment"].n_unique() > 1
    label = (pl.format("{}\n{} @ {}", "experiment", "context_label", "mem_util") if several
             else pl.format("{}\n@ {}", "context_label", "mem_util"))
    n_settings = stats.select("experiment", "context_label", "mem_util").n_unique()
    fig = Figure(figsize=(max(12.0, 1.6 * n_settings), 4.6))
    ax1, ax2 = fig.subplots(1, 2)
    if "context_tokens" not in stats.columns:
        tokens = runs.select("experiment", "context_label", "context_tokens").unique(["experiment", "context_label"])
        stats = stats.join(tokens, on=["experiment", "context_label"], how="left")
    s = stats.with_columns(label.alias("setting")).sort("experiment", "context_tokens", "mem_util", nulls_last=True)
    order = s["setting"].unique(maintain_order=True).to_list()
    present = s["engine"].unique(maintain_order=True).to_list()
    engines = [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]
    width = 0.8 / (2 * len(engines))
    for j, engine in enumerate(engines):
        g = s.filter(pl.col("engine") == engine)
        x = [order.index(v) - 0.4 + 2 * j * width for v in g["setting"]]
        color = ENGINE_COLORS.get(engine, "#777777")
        for k, (col, hatch) in enumerate((("retries", ""), ("runs_failed", "//"))):
            bars = ax1.bar([v + (k + 0.5) * width for v in x], g[col].to_list(), width, color=color,
                           hatch=hatch, edgecolor="white", alpha=1 if k == 0 else 0.6)
            ax1.bar_label(bars, labels=[f"{int(v)}" if v else "" for v in g[col]], padding=2, fontsize=8, color=color)
    top = max(1, int(s.select(pl.max_horizontal(pl.col("retries").max(), pl.col("runs_failed").max())).item() or 0))
    ax1.set_xticks(range(len(order)), order)
    ax1.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax1.set(title="measured: retries (solid) and failed runs (hatched); no bar = 0", xlabel="context @ memory setting",
            ylabel="count", ylim=(0, top * 1.25))
    handles = [Patch(color=ENGINE_COLORS.get(e, "#777777"), label=engine_label(e)) for e in engines]
    handles.append(Patch(facecolor="white", hatch="//", edgecolor="#555555", label="failed runs"))
    ax1.legend(handles=handles, fontsize=8)
    ok = (runs.filter((pl.col("source") == "measured") & (pl.col("status") == "ok"))
          .with_columns(label.alias("setting")))
    if ok.height:
        sns.stripplot(ok.to_pandas(), x="setting", y="batch_time_s", hue="engine", order=order,
                      hue_order=[e for e in engines if e in set(ok["engine"])], palette=ENGINE_COLORS, ax=ax2,
                      dodge=True, size=7, jitter=0.15)
        _relabel_engine_legend(ax2)
    ax2.set(title="measured: batch time of every successful run", xlabel="context @ memory setting")
    _log_if_wide(ax2, ok["batch_time_s"].to_list(), "batch time (s)")
    for ax in (ax1, ax2):
        ax.title.set_fontsize(10)
        ax.tick_params(axis="x", labelsize=8 if several else 10)
    fig.tight_layout()
    return fig


def setup_notebook(fig_format: str = "png", dpi: int = 110) -> None:
    """Make ``display(fig)`` render Figures inline (and so embed them in the HTML reports); number the
    figures :func:`show` displays from 1 again."""
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    global _figure_no
    _figure_no = 0
    set_matplotlib_formats(fig_format, dpi=dpi)


_figure_no = 0
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
    """A figure as the reports show it: a 2×-density PNG with alt text, its number, the one computed sentence
    that says what to see in it, and (with ``data``) a link to the numbers behind it as CSV."""

    def __init__(self, fig: Figure, caption: str, data: pl.DataFrame | None = None, alt: str | None = None):
        global _figure_no
        if not caption or not caption.strip():
            raise ValueError("show(): every figure needs a caption, the sentence that says what to see in it")
        _figure_no += 1
        self.number, self.fig, self.caption, self.data = _figure_no, fig, caption.strip(), data
        self.alt = alt or alt_text(fig)

    def png(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=SHOW_DPI, bbox_inches="tight")
        return buf.getvalue()

    def _repr_html_(self) -> str:
        import base64
        import html
        import struct

        from kvlab.narrative import markdown_inline

        png = self.png()
        width = struct.unpack(">I", png[16:20])[0] * SCREEN_DPI // SHOW_DPI  # PNG IHDR width in pixels
        img = (f'<img alt="{html.escape(self.alt)}" style="width: {width}px; max-width: 100%; height: auto;" '
               f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')
        link = ""
        if self.data is not None:
            csv = base64.b64encode(self.data.write_csv().encode()).decode()
            link = (f' <a class="kvlab-figure-data" download="figure{self.number}.csv" '
                    f'href="data:text/csv;base64,{csv}">data (CSV)</a>')
        return (f'<figure class="kvlab-figure" style="margin: .5rem 0 1rem;">{img}'
                f'<figcaption style="max-width: {max(width, 480)}px;"><b>Figure {self.number}.</b> '
                f"{markdown_inline(self.caption)}{link}</figcaption></figure>")


def show(fig: Figure, caption: str, data: pl.DataFrame | None = None, alt: str | None = None) -> FigureView:
    """``display(show(fig, caption, data))``: the report's way to show a figure (see :class:`FigureView`)."""
    return FigureView(fig, caption, data, alt)


# --------------------------------------------------------------------------- engine-choice studies (document 003)

CACHE_STYLES = {True: "-", False: "--"}  # line style by prefix caching on / off


def _config_label(engine: str, caching) -> str:
    return f"{engine_label(engine)}, prefix cache {'on' if caching else 'off'}"


def prefix_sharing_figure(sharing: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD,
                          block_tokens: int = 128) -> Figure:
    """Cache-hit rate, mean TTFT and median batch time against the shared fraction, per engine and cache setting.

    Solid lines: prefix cache on; dashed: off. A configuration whose hit count is not available draws no hit-rate
    line (never a line at 0). TTFT and batch time are on log axes when the engines differ by more than 10×.
    """
    fig = Figure(figsize=(16, 5.4))
    axes = fig.subplots(1, 3)
    panels = [("cache_hit_rate", "prompt tokens from the prefix cache (share)"), ("ttft_mean_ms", "mean TTFT (ms)"),
              ("batch_time_s", "median batch time (s)")]
    hw = ", ".join(sharing["hardware"].unique().to_list())
    for ax, (col, label) in zip(axes, panels):
        for (engine, caching), g in sharing.sort("shared_fraction").group_by(["engine", "prefix_caching"], maintain_order=True):
            ax.plot(g["shared_fraction"], g[col], marker="o", linestyle=CACHE_STYLES.get(caching, "-"),
                    color=ENGINE_COLORS.get(engine), label=_config_label(engine, caching))
        if col == "cache_hit_rate":
            ideal = sharing.group_by("shared_fraction").agg(pl.col("ideal_hit_rate", "block_ideal_hit_rate").first()
                                                            if "block_ideal_hit_rate" in sharing.columns else
                                                            pl.col("ideal_hit_rate").first()).sort("shared_fraction")
            ax.plot(ideal["shared_fraction"], ideal["ideal_hit_rate"], color="#888888", linestyle=":",
                    label="ideal, token-exact: whole prefix reused after the first request")
            if "block_ideal_hit_rate" in ideal.columns:
                ax.plot(ideal["shared_fraction"], ideal["block_ideal_hit_rate"], color="#bbbbbb", linestyle="-.",
                        label=f"ideal in whole {block_tokens}-token blocks (vLLM)")
        elif sharing[col].drop_nulls().len() and sharing[col].max() > 10 * sharing[col].min():
            ax.set_yscale("log")
        ax.axvline(threshold, color="#aa3333", linewidth=1, alpha=0.6)
        ax.annotate(f"tree threshold {threshold:.0%}", (threshold, 0.98), xycoords=("data", "axes fraction"),
                    fontsize=8, color="#aa3333", ha="left", va="top", xytext=(3, 0), textcoords="offset points")
        ax.set(xlabel="shared fraction of each prompt", ylabel=label, title=f"measured: {label}")
        ax.title.set_fontsize(10)
    fig.suptitle(f"measured on {hw}", fontsize=10)
    return _legend_below(fig, axes[0], ncol=3)


def _legend_below(fig: Figure, ax, ncol: int) -> Figure:
    """One legend for every panel, under the panels, so no line is hidden behind it."""
    handles, labels = ax.get_legend_handles_labels()
    rows = -(-len(labels) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    return fig


def caching_gain_figure(gain: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD, min_gain: float = 0.10) -> Figure:
    """Speed-up from the prefix cache (off / on) against the shared fraction, with the tree's threshold marked."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    for engine, g in gain.sort("shared_fraction").group_by("engine", maintain_order=True):
        c, name = ENGINE_COLORS.get(engine[0]), engine_label(engine[0])
        ax.plot(g["shared_fraction"], g["batch_speedup"], marker="o", color=c, label=f"{name}: batch time off/on")
        ax.plot(g["shared_fraction"], g["ttft_speedup"], marker="s", linestyle="--", color=c, alpha=0.7,
                label=f"{name}: mean TTFT off/on")
    ax.axhline(1, color="#444444", linewidth=0.8)
    ax.axhline(1 / (1 - min_gain), color="#888888", linewidth=0.8, linestyle=":",
               label=f"{min_gain:.0%} of batch time saved")
    ax.axvline(threshold, color="#aa3333", linewidth=1, alpha=0.6, label=f"tree threshold {threshold:.0%}")
    ax.set(xlabel="shared fraction of each prompt", ylabel="speed-up from the prefix cache (×)",
           title="measured: what the prefix cache buys, by shared fraction")
    return _finish(fig, [ax])


def multi_turn_figure(by_turn: pl.DataFrame) -> Figure:
    """Per turn: prompt tokens served from the cache, and mean TTFT, with the prefix cache on and off."""
    fig = Figure(figsize=(11, 4.8))
    axes = fig.subplots(1, 2)
    for (engine, caching), g in by_turn.sort("turn").group_by(["engine", "prefix_caching"], maintain_order=True):
        style = dict(marker="o", linestyle=CACHE_STYLES.get(caching, "-"), color=ENGINE_COLORS.get(engine),
                     label=_config_label(engine, caching))
        axes[0].plot(g["turn"], g["cached_tokens"], **style)
        axes[1].plot(g["turn"], g["ttft_mean_ms"], **style)
    if by_turn.height:
        lengths = by_turn.group_by("turn").agg(pl.col("prompt_tokens").mean()).sort("turn")
        axes[0].plot(lengths["turn"], lengths["prompt_tokens"], color="#888888", linestyle=":", label="prompt length")
    axes[0].set(xlabel="turn", ylabel="tokens per request", title="measured: prompt tokens served from the cache")
    ttft = by_turn["ttft_mean_ms"].drop_nulls() if by_turn.height else by_turn
    if len(ttft) and ttft.min() > 0 and ttft.max() > 10 * ttft.min():  # engines an order of magnitude apart
        axes[1].set_yscale("log")
    axes[1].set(xlabel="turn", ylabel="mean TTFT (ms)", title="measured: time to first token by turn")
    for ax in axes:
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.title.set_fontsize(10)
    return _legend_below(fig, axes[0], ncol=3)


def concurrency_figure(conc: pl.DataFrame) -> Figure:
    """Requests/s and TTFT against requests in flight; each point labelled completed/sent."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for engine, g in conc.sort("in_flight").group_by("engine", maintain_order=True):
        c, name = ENGINE_COLORS.get(engine[0]), engine_label(engine[0])
        axes[0].plot(g["in_flight"], g["requests_per_s"], marker="o", color=c, label=name)
        for x, y, ok, sent in zip(g["in_flight"], g["requests_per_s"], g["requests_ok"], g["requests_sent"]):
            axes[0].annotate(f"{ok}/{sent}", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
        axes[1].plot(g["in_flight"], g["ttft_mean_ms"], marker="o", color=c, label=f"{name} mean")
        axes[1].plot(g["in_flight"], g["ttft_p99_ms"], marker="^", linestyle="--", color=c, label=f"{name} p99")
    for ax, cols in zip(axes, (["requests_per_s"], ["ttft_mean_ms", "ttft_p99_ms"])):
        vals = conc.select(pl.min_horizontal(*[pl.col(c).min() for c in cols]).alias("lo"),
                           pl.max_horizontal(*[pl.col(c).max() for c in cols]).alias("hi")).row(0) if conc.height else (None, None)
        if vals[0] and vals[1] and vals[1] > 10 * vals[0]:  # engines an order of magnitude apart: log scale
            ax.set_yscale("log")
    if conc.height:
        for ax in axes:
            ax.set_xticks(sorted(conc["in_flight"].unique().to_list()))
    axes[0].set(xlabel="requests in flight", ylabel="completed requests / s",
                title="measured: throughput (labels: completed/sent)")
    axes[1].set(xlabel="requests in flight", ylabel="TTFT (ms)", title="measured: time to first token")
    return _finish(fig, axes)


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
        "L_frac": ("SGLang", 0.1, 0.46), "L_ds": ("SGLang", 0.27, 0.24), "L_eq": ("≈ equal:\nvLLM easier", 0.49, 0.24),
        "L_conc": ("vLLM", 0.93, 0.46), "L_mixed": ("vLLM", 0.93, 0.24),
        "L_tp": ("SGLang", 0.62, 0.04), "L_st": ("vLLM", 0.88, 0.04),
    }
    edges = [("shared", "frac", "yes"), ("shared", "conc", "no"), ("frac", "L_frac", "yes"), ("frac", "ds", "no"),
             ("ds", "L_ds", "yes"), ("ds", "L_eq", "no"), ("conc", "L_conc", "yes"), ("conc", "mixed", "no"),
             ("mixed", "L_mixed", "yes"), ("mixed", "prio", "no"), ("prio", "L_tp", "throughput"),
             ("prio", "L_st", "stability")]
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
        ax.annotate("", (x1, y1 + 0.05), (x0, y0 - 0.05), arrowprops=dict(arrowstyle="->", color=hot if on else "#999999",
                                                                          linewidth=2.2 if on else 1))
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, lab, fontsize=8, color=hot if on else "#666666", ha="center",
                bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    for key, (text, x, y) in nodes.items():
        leaf = key.startswith("L_")
        on = key == node or any(key in e for e in taken)
        colour = ENGINE_COLORS.get("sglang" if "SGLang" in text else "vllm") if leaf else "#f4f4f4"
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5, color="white" if leaf else "#222222",
                fontweight="bold" if on else "normal",
                bbox=dict(boxstyle="round,pad=0.4", facecolor=colour, edgecolor=hot if on else "#bbbbbb",
                          linewidth=2.5 if on else 1))
    ax.set(xlim=(0, 1), ylim=(-0.04, 1.0))
    ax.set_title(f"document 003's decision tree: this workload → {engine} (highlighted path)", fontsize=10)
    fig.tight_layout()
    return fig


def ideal_reuse_figure(ideal: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD) -> Figure:
    """Modelled: the share of prompt tokens a perfect prefix cache could serve, against the shared fraction."""
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    ax.plot(ideal["shared_fraction"], ideal["ideal_hit_rate"], marker="o", color="#555555", label="whole prefix reused")
    ax.plot(ideal["shared_fraction"], ideal["block_hit_rate"], marker=".", linestyle="--", color="#999999",
            label="reused in whole KV blocks")
    ax.axvline(threshold, color="#aa3333", linewidth=1, alpha=0.6, label=f"tree threshold {threshold:.0%}")
    ax.set(xlabel="shared fraction of each prompt", ylabel="prompt tokens servable from cache (share)",
           title="modelled: the most a prefix cache can reuse (no engine measured)")
    return _finish(fig, [ax])
