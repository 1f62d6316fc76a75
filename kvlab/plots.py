"""Figures for the reports: each helper takes a frame and returns a matplotlib Figure.

Figures are plain ``matplotlib.figure.Figure`` objects, not registered with pyplot, so the
library never leaks or shows a figure; notebooks ``display()`` what they get. Every panel says
whether its numbers are published, measured (and on what) or modelled.
"""

from __future__ import annotations

import polars as pl
import seaborn as sns
from matplotlib.figure import Figure

from kvlab.guide import CONCURRENCY_THRESHOLD, FIXED_CONTEXT_THRESHOLD

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
        ax.set(title=title, xlabel="context", ylabel="batch time (s)")
    return _finish(fig, axes, legend_size=None)


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
    return _finish(fig, [ax])


def memory_study_figure(stats: pl.DataFrame, runs: pl.DataFrame) -> Figure:
    """Left: retries and failed runs per memory setting; right: batch time per setting (every run)."""
    fig = Figure(figsize=(11, 4))
    ax1, ax2 = fig.subplots(1, 2)
    several = stats["experiment"].n_unique() > 1
    label = (pl.format("{}\n{} @ {}", "experiment", "engine", "mem_util") if several
             else pl.format("{} @ {}", "engine", "mem_util"))
    s = stats.with_columns(label.alias("setting")).to_pandas()
    long = s.melt(id_vars=["setting", "context_label"], value_vars=["retries", "runs_failed"],
                  var_name="count", value_name="n")
    sns.barplot(long, x="setting", y="n", hue="count", ax=ax1, errorbar=None)
    for container in ax1.containers:
        ax1.bar_label(container, fmt="%d", padding=2)
    ax1.set(title="measured: retries and failed runs", xlabel="engine @ memory setting", ylabel="count",
            ylim=(0, max(1, int(long["n"].max() or 0)) * 1.2))
    ok = runs.filter((pl.col("source") == "measured") & (pl.col("status") == "ok")).with_columns(label.alias("setting"))
    if ok.height:
        sns.stripplot(ok.to_pandas(), x="setting", y="batch_time_s", hue="context_label", ax=ax2,
                      dodge=True, size=7, jitter=0.15)
    ax2.set(title="measured: batch time of every successful run", xlabel="engine @ memory setting",
            ylabel="batch time (s)")
    for ax in (ax1, ax2):
        ax.title.set_fontsize(10)
        ax.tick_params(axis="x", labelsize=8 if several else 10)
    fig.tight_layout()
    return fig


def setup_notebook(fig_format: str = "png", dpi: int = 110) -> None:
    """Make ``display(fig)`` render Figures inline (and so embed them in the HTML reports)."""
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats(fig_format, dpi=dpi)


# --------------------------------------------------------------------------- engine-choice studies (document 003)

CACHE_STYLES = {True: "-", False: "--"}  # line style by prefix caching on / off


def _config_label(engine: str, caching) -> str:
    return f"{engine}, prefix cache {'on' if caching else 'off'}"


def prefix_sharing_figure(sharing: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD) -> Figure:
    """Cache-hit rate, mean TTFT and prompt throughput against the shared fraction, per engine and cache setting."""
    fig = Figure(figsize=(15, 4.2))
    axes = fig.subplots(1, 3)
    panels = [("cache_hit_rate", "prompt tokens from the prefix cache (share)"), ("ttft_mean_ms", "mean TTFT (ms)"),
              ("prompt_tokens_per_s", "prompt tokens / s")]
    hw = ", ".join(sharing["hardware"].unique().to_list())
    for ax, (col, label) in zip(axes, panels):
        for (engine, caching), g in sharing.sort("shared_fraction").group_by(["engine", "prefix_caching"], maintain_order=True):
            ax.plot(g["shared_fraction"], g[col], marker="o", linestyle=CACHE_STYLES.get(caching, "-"),
                    color=ENGINE_COLORS.get(engine), label=_config_label(engine, caching))
        if col == "cache_hit_rate":
            ideal = sharing.select("shared_fraction", "ideal_hit_rate").unique().sort("shared_fraction")
            ax.plot(ideal["shared_fraction"], ideal["ideal_hit_rate"], color="#888888", linestyle=":",
                    label="ideal: whole prefix reused after the first request")
        ax.axvline(threshold, color="#aa3333", linewidth=1, alpha=0.6)
        ax.annotate(f"tree threshold {threshold:.0%}", (threshold, 0.98), xycoords=("data", "axes fraction"),
                    fontsize=8, color="#aa3333", ha="left", va="top", xytext=(3, 0), textcoords="offset points")
        ax.set(xlabel="shared fraction of each prompt", ylabel=label, title=f"measured: {label}")
        ax.title.set_fontsize(10)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"measured on {hw}", fontsize=10)
    fig.tight_layout()
    return fig


def caching_gain_figure(gain: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD, min_gain: float = 0.10) -> Figure:
    """Speed-up from the prefix cache (off / on) against the shared fraction, with the tree's threshold marked."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    for engine, g in gain.sort("shared_fraction").group_by("engine", maintain_order=True):
        c = ENGINE_COLORS.get(engine[0])
        ax.plot(g["shared_fraction"], g["batch_speedup"], marker="o", color=c, label=f"{engine[0]}: batch time off/on")
        ax.plot(g["shared_fraction"], g["ttft_speedup"], marker="s", linestyle="--", color=c, alpha=0.7,
                label=f"{engine[0]}: mean TTFT off/on")
    ax.axhline(1, color="#444444", linewidth=0.8)
    ax.axhline(1 / (1 - min_gain), color="#888888", linewidth=0.8, linestyle=":",
               label=f"{min_gain:.0%} of batch time saved")
    ax.axvline(threshold, color="#aa3333", linewidth=1, alpha=0.6, label=f"tree threshold {threshold:.0%}")
    ax.set(xlabel="shared fraction of each prompt", ylabel="speed-up from the prefix cache (×)",
           title="measured: what the prefix cache buys, by shared fraction")
    return _finish(fig, [ax])


def multi_turn_figure(by_turn: pl.DataFrame) -> Figure:
    """Per turn: prompt tokens served from the cache, and mean TTFT, with the prefix cache on and off."""
    fig = Figure(figsize=(11, 4))
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
    axes[1].set(xlabel="turn", ylabel="mean TTFT (ms)", title="measured: time to first token by turn")
    return _finish(fig, axes)


def concurrency_figure(conc: pl.DataFrame) -> Figure:
    """Requests/s and TTFT against requests in flight; each point labelled completed/sent."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for engine, g in conc.sort("in_flight").group_by("engine", maintain_order=True):
        c = ENGINE_COLORS.get(engine[0])
        axes[0].plot(g["in_flight"], g["requests_per_s"], marker="o", color=c, label=engine[0])
        for x, y, ok, sent in zip(g["in_flight"], g["requests_per_s"], g["requests_ok"], g["requests_sent"]):
            axes[0].annotate(f"{ok}/{sent}", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
        axes[1].plot(g["in_flight"], g["ttft_mean_ms"], marker="o", color=c, label=f"{engine[0]} mean")
        axes[1].plot(g["in_flight"], g["ttft_p99_ms"], marker="^", linestyle="--", color=c, label=f"{engine[0]} p99")
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
