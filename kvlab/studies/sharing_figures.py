"""The prefix-sharing figures' shared helpers (reports 05 and 06): the cache-on/off line styles, the shared-fraction
and hit-rate axes, the ideal-reuse and threshold legend handles."""

from __future__ import annotations

import math

import polars as pl
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullLocator, PercentFormatter

from kvlab.engines import engine_label
from kvlab.style import ENGINE_COLORS, number_label as _num
from kvlab.figures import log_if_wide, zero_note


CACHE_STYLES = {True: "-", False: (0, (4, 2))}  # line style by prefix caching on / off (off: long dashes)


#: The decision tree's fixed-context threshold as every study figure draws it (not an engine colour).
THRESHOLD_COLOR = "#aa3333"


def config_label(engine: str, caching) -> str:
    return f"{engine_label(engine)}, prefix cache {'on' if caching else 'off'}"


def cache_style(engine: str, caching) -> dict:
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
        label=config_label(engine, on),
    )


def config_handles(engines: list[str], settings) -> list:
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


def threshold_handle(threshold: float):
    return Line2D(
        [],
        [],
        color=THRESHOLD_COLOR,
        linewidth=1.2,
        alpha=0.7,
        label=f"the article's threshold: {threshold:.0%} of the prompt shared",
    )


def fraction_axis(ax, frame: pl.DataFrame) -> None:
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


def study_y(ax, values, ylabel: str, spread: float = 10.0) -> None:
    """y from 0, or a log axis (said in the label) when the values span more than ``spread``×; on a log axis
    spanning under two decades the 2s and 5s are labelled too, with plain numbers (0.2, 5), never 2×10⁻¹."""
    log_if_wide(ax, values, ylabel, spread)
    if ax.get_yscale() == "log":
        v = [x for x in values if x is not None and x > 0]
        ax.set_ylim(min(v) / 1.3, max(v) * 1.3)
        if max(v) / min(v) < 1000:
            lead = lambda y: round(y / 10 ** math.floor(math.log10(y)))  # noqa: E731
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: _num(y) if lead(y) in (2, 5) else ""))
            ax.tick_params(axis="y", which="minor", labelsize=ax.yaxis.get_major_ticks()[0].label1.get_fontsize())


def hit_rate_axis(ax, s: pl.DataFrame, zero_off: list[str]) -> None:
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
    zero_note(ax, zero_off, "hit rate")


def ideal_handles(block_tokens: int) -> list:
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
