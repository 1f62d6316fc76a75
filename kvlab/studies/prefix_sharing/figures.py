"""Report 05's figures: a frame in, a matplotlib Figure out (house style from kvlab.style and kvlab.figures' helpers).

The measured hit-rate figure both reports draw is :func:`kvlab.studies.sharing_frames.prefix_sharing_figure`; here,
what only report 05 draws: each engine's cache off ÷ on beside its hit rate, what the cache buys, multi-turn reuse
and the modelled ideal.
"""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullLocator, PercentFormatter

from kvlab.engines import VLLM_CPU_BLOCK_TOKENS, engine_label
from kvlab.guide import FIXED_CONTEXT_THRESHOLD
from kvlab.figures import all_zero, legend_below, ordered_engines, repeat_whiskers, zero_note
from kvlab.studies.sharing_figures import (
    CACHE_STYLES,
    THRESHOLD_COLOR,
    cache_style,
    config_handles,
    fraction_axis,
    hit_rate_axis,
    ideal_handles,
    study_y,
    threshold_handle,
)
from kvlab.style import ENGINE_COLORS, styled


def _hit_panel(ax, s: pl.DataFrame, engines: list[str]) -> None:
    """The hit rate per engine and cache setting (all-zero cache-off lines said in the panel, not drawn)."""
    zero_off = []
    for e in engines:
        for caching in (True, False):
            g = s.filter((pl.col("engine") == e) & (pl.col("prefix_caching") == caching))
            if g.is_empty():
                continue
            if not caching and all_zero(g["cache_hit_rate"].to_list()):
                zero_off.append(e)
                continue
            ax.plot(
                g["shared_fraction"],
                g["cache_hit_rate"],
                **(cache_style(e, caching) | dict(linewidth=3, markersize=7)),
            )
            if {"cache_hit_rate_min", "cache_hit_rate_max", "n_runs"} <= set(g.columns):
                repeat_whiskers(
                    ax,
                    g["shared_fraction"].to_list(),
                    g["cache_hit_rate"].to_list(),
                    g["cache_hit_rate_min"].to_list(),
                    g["cache_hit_rate_max"].to_list(),
                    g["n_runs"].to_list(),
                    ENGINE_COLORS.get(e, "#777777"),
                )
    hit_rate_axis(ax, s, zero_off)
    ax.set_title("measured: prompt tokens served from the prefix cache", fontsize=10)


def _ratio_panel(ax, gain: pl.DataFrame, engines: list[str], col: str, what: str, min_gain: float) -> bool:
    """One engine-against-itself panel: ``col`` (off ÷ on) per engine, 1× and the saving that counts marked; True
    where whiskers were drawn."""
    values, spread = [1 / (1 - min_gain)], False
    for e in engines:
        g = gain.filter((pl.col("engine") == e) & pl.col(col).is_not_null())
        if g.is_empty():
            continue
        c = ENGINE_COLORS.get(e, "#777777")
        ax.plot(g["shared_fraction"], g[col], marker="o", color=c, markerfacecolor=c, linestyle="-")
        values += g[col].to_list()
        if {f"{col}_min", f"{col}_max", "n_runs"} <= set(g.columns) and repeat_whiskers(
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
    return spread


def _ratio_handles(engines, settings, block_tokens: int, min_gain: float, threshold: float, spread: bool) -> list:
    handles = config_handles(engines, settings)
    handles += ideal_handles(block_tokens)
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
        threshold_handle(threshold),
    ]
    if spread:
        handles.append(
            Line2D([], [], color="#555555", marker="|", ms=10, lw=1, label="whisker: least to most over the repeats")
        )
    return handles


@styled
def prefix_ratio_figure(
    sharing: pl.DataFrame,
    gain: pl.DataFrame,
    threshold: float = FIXED_CONTEXT_THRESHOLD,
    block_tokens: int = VLLM_CPU_BLOCK_TOKENS,
    min_gain: float = 0.10,
) -> Figure:
    """Report 05's measured figure: the hit rate per engine and cache setting, then each engine's mean TTFT and
    median batch time with its cache off ÷ on (above 1× its cache helps): what the cache does inside one engine,
    never one engine's time against another's."""
    fig = Figure(figsize=(16, 5.0))
    axes = fig.subplots(1, 3)
    hw = ", ".join(sharing["hardware"].unique(maintain_order=True).to_list())
    engines = ordered_engines(sharing)
    s = sharing.sort("shared_fraction")
    _hit_panel(axes[0], s, engines)
    g_all = gain.sort("shared_fraction")
    spread = _ratio_panel(axes[1], g_all, engines, "ttft_speedup", "mean TTFT", min_gain)
    spread |= _ratio_panel(axes[2], g_all, engines, "batch_speedup", "median batch time", min_gain)
    for ax in axes:
        ax.axvline(threshold, color=THRESHOLD_COLOR, linewidth=1.2, alpha=0.7)
        fraction_axis(ax, s)
    settings = sharing["prefix_caching"].unique().to_list() if sharing.height else []
    fig.suptitle(f"measured on {hw}; right: each engine against itself (above 1× its cache helps)", fontsize=10)
    return legend_below(fig, _ratio_handles(engines, settings, block_tokens, min_gain, threshold, spread), ncol=4)


@styled
def caching_gain_figure(
    gain: pl.DataFrame, threshold: float = FIXED_CONTEXT_THRESHOLD, min_gain: float = 0.10
) -> Figure:
    """Speed-up from the prefix cache (off ÷ on) against the shared fraction, per engine: batch time (solid,
    filled dots) and mean TTFT (dashed, open squares); 1× (no gain), the saving that counts and the tree's
    threshold marked; y from 0, the legend below the axes."""
    fig = Figure(figsize=(8, 4.6))
    ax = fig.subplots()
    engines = ordered_engines(gain)
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
    fraction_axis(ax, gain)
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
        threshold_handle(threshold),
    ]
    return legend_below(fig, handles, ncol=3)


@styled
def multi_turn_figure(by_turn: pl.DataFrame, requests: pl.DataFrame | None = None) -> Figure:
    """Per turn: prompt tokens served from the cache (mean per request) and mean TTFT, per engine with its prefix
    cache on (solid, filled dots) and off (dashed, open dots). Turns are whole numbers on the axis. With
    ``requests`` (:func:`kvlab.studies.prefix_sharing.frames.multi_turn_requests`) each request's TTFT is a small dot beside its
    turn's mean, so the spread over conversations shows."""
    fig = Figure(figsize=(12, 4.8))
    axes = fig.subplots(1, 2)
    engines = ordered_engines(by_turn)
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
        style = cache_style(engine, caching)
        if caching or not all_zero(g["cached_tokens"].to_list()):
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
    zero_note(axes[0], zero_off, "cached tokens")
    axes[0].set(ylabel="tokens per request (mean)", title="measured: prompt tokens served from the cache")
    ttft = [v for v in by_turn["ttft_mean_ms"].to_list() if v is not None] if by_turn.height else []
    if requests is not None and requests.height:
        ttft += [v for v in requests["ttft_ms"].to_list() if v is not None]
    study_y(axes[1], ttft, "TTFT (ms)")
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
    handles = config_handles(engines, settings)
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
    return legend_below(fig, handles, ncol=3)


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
    fraction_axis(ax, ideal)
    ax.set(
        ylabel="share of prompt tokens servable from cache",
        title="modelled: the most a prefix cache can reuse (no engine measured)",
    )
    ax.title.set_fontsize(10)
    return legend_below(fig, ax, ncol=1)
