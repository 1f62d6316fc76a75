"""Report 02's figures: a frame in, a matplotlib Figure out. The throughput-against-context figure both 01 and 02
draw is :func:`kvlab.studies.measured_frames.throughput_vs_context`."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import polars as pl
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvlab.studies.measured_frames import throughput_vs_context
from kvlab.style import styled

__all__ = ["claims_vs_table", "throughput_vs_context"]

#: Colours of the definitions a stated ratio is checked under (none of them an engine's colour).
DEFINITION_COLORS = {
    "time_ratio": "#029e73",
    "percent_less_time": "#cc78bc",
    "batch_time_ratio": "#7b3294",
    "prompt_tokens_per_s_ratio": "#8c6d31",
}


def _claim_bars(ax, part: pl.DataFrame, i: int, width: float) -> tuple[list[str], bool]:
    """One claim's stated bar and its implied bars (✓ / hatched ✗); the definitions drawn and whether any failed."""
    ax.bar(i, part["stated_value"][0], width, color="#444444")
    drawn, bad = [], False
    for j, r in enumerate(part.iter_rows(named=True)):
        ok = bool(r["consistent"])
        bad |= not ok
        d = r["definition"]
        color = DEFINITION_COLORS.get(d, "#999999")
        bar = ax.bar(
            i + (j + 1) * width, r["implied_value"], width, color=color, hatch="" if ok else "//", edgecolor="white"
        )
        ax.bar_label(bar, labels=["✓" if ok else "✗"], padding=2)
        drawn.append(d)
    return drawn, bad


@styled
def claims_vs_table(
    check: pl.DataFrame, names: Mapping[str, str] | None = None, definition_names: Mapping[str, str] | None = None
) -> Figure:
    """Each stated ratio (dark grey) beside the values the document's own table implies under each definition that
    applies to it (one colour per definition, never an engine's), ✓ where they agree, hatched ✗ where not. The words
    come from the caller: ``names`` (a short name per claim id) and ``definition_names``."""
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
        got, bad = _claim_bars(ax, part_all.filter(pl.col("claim_id") == cid), i, width)
        drawn += [d for d in got if d not in drawn]
        any_bad |= bad
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
