"""Report 06's figures: the article's decision tree with one workload's path, and the measured concurrency study
(the measured prefix-sharing figure is :func:`kvlab.studies.sharing_frames.prefix_sharing_figure`)."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.guide import CONCURRENCY_THRESHOLD, FIXED_CONTEXT_THRESHOLD
from kvlab.perfmodel.figures import value_axis
from kvlab.figures import repeat_whiskers, repeat_span
from kvlab.style import ENGINE_COLORS, styled


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
        if (span := repeat_span(g, "requests_per_s")) is not None and "n_runs" in g.columns:
            repeat_whiskers(
                axes[0], g["in_flight"].to_list(), g["requests_per_s"].to_list(), *span, g["n_runs"].to_list(), c
            )
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


#: The tree's questions: (text, x, y).
_QUESTIONS = {
    "shared": ("Shared system prompt /\ndocument across requests?", 0.5, 0.9),
    "frac": (f"Fixed context\n≥ {FIXED_CONTEXT_THRESHOLD:.0%} of prompt?", 0.25, 0.68),
    "conc": (f"≥ {CONCURRENCY_THRESHOLD} concurrent\nrequests?", 0.75, 0.68),
    "ds": ("DeepSeek-family\nmodel?", 0.38, 0.46),
    "mixed": ("Mixed GPU/TPU or\nfrequent model changes?", 0.75, 0.46),
    "prio": ("Priority?", 0.75, 0.24),
}
#: Its leaves: (the engine family the document recommends, x, y), each drawn in its engine's colour.
_LEAVES = {
    "L_frac": (SGLANG, 0.1, 0.46),
    "L_ds": (SGLANG, 0.27, 0.24),
    "L_eq": (VLLM, 0.49, 0.24),
    "L_conc": (VLLM, 0.93, 0.46),
    "L_mixed": (VLLM, 0.93, 0.24),
    "L_tp": (SGLANG, 0.62, 0.04),
    "L_st": (VLLM, 0.88, 0.04),
}
#: (parent, child, answer).
_EDGES = (
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
)
_HOT = "#aa3333"


def _nodes() -> dict:
    leaves = {
        k: (f"≈ equal:\n{engine_label(e)} easier" if k == "L_eq" else engine_label(e), x, y)
        for k, (e, x, y) in _LEAVES.items()
    }
    return _QUESTIONS | leaves


def _walk(path: tuple[tuple[str, str], ...]) -> tuple[set, str]:
    """The edges a workload's answers take, and the node where they end."""
    taken, node = set(), "shared"
    for a in (a.split(" ")[0] for _, a in path):
        nxt = next((c for p, c, lab in _EDGES if p == node and lab == a), None)
        if nxt is None:
            break
        taken.add((node, nxt))
        node = nxt
    return taken, node


def _draw_edges(ax, nodes: dict, taken: set) -> None:
    for p, c, lab in _EDGES:
        (_, x0, y0), (_, x1, y1) = nodes[p], nodes[c]
        on = (p, c) in taken
        arrow = dict(arrowstyle="->", color=_HOT if on else "#999999", linewidth=2.2 if on else 1)
        ax.annotate("", (x1, y1 + 0.05), (x0, y0 - 0.05), arrowprops=arrow)
        box = dict(facecolor="white", edgecolor="none", pad=0.5)
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, lab, fontsize=8, color=_HOT if on else "#666666", ha="center", bbox=box)


def _draw_nodes(ax, nodes: dict, taken: set, end: str) -> None:
    for key, (text, x, y) in nodes.items():
        leaf = key.startswith("L_")
        on = key == end or any(key in e for e in taken)
        box = dict(
            boxstyle="round,pad=0.4",
            facecolor=ENGINE_COLORS[_LEAVES[key][0]] if leaf else "#f4f4f4",
            edgecolor=_HOT if on else "#bbbbbb",
            linewidth=2.5 if on else 1,
        )
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=8.5,
            color="white" if leaf else "#222222",
            fontweight="bold" if on else "normal",
            bbox=box,
        )


@styled
def decision_tree_figure(path: tuple[tuple[str, str], ...], engine: str) -> Figure:
    """Document 003's decision tree with the answers of one workload highlighted (the tree's own answer, the
    article's claim: no finding of this host)."""
    nodes = _nodes()
    taken, end = _walk(path)
    fig = Figure(figsize=(10, 5.2))
    ax = fig.subplots()
    ax.set_axis_off()
    _draw_edges(ax, nodes, taken)
    _draw_nodes(ax, nodes, taken, end)
    ax.set(xlim=(0, 1), ylim=(-0.04, 1.0))
    ax.set_title(
        f"the KV-cache design article's decision tree: this workload → {engine_label(engine)} (highlighted path)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
