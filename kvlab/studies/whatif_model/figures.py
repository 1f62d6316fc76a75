"""Report 04's figures: the model's own figures (:mod:`kvlab.perfmodel.figures`), titled from the verdict they speak
to, so a title names a direction only where that verdict decides (:func:`kvlab.verdicts.decides`)."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from kvlab.words import config_name, model_title
from kvlab.perfmodel.figures import SERIES_COLORS, plot_crossover, plot_curves
from kvlab.verdicts import Verdict, decides, undecided_label


def batch_time(r, v: Verdict | None) -> Figure:
    """The modelled batch-time curves with their bands and the crossover's range shaded; the title says the model's
    label where ``v`` (the modelled crossover's verdict) does not decide."""
    title = model_title(r.model, r.gpu, r.tp)
    if not decides(v):
        title += f" (which is faster: {undecided_label(v)})"
    return plot_curves(r.curves, r.published, title=title, band=r.x_range)


def crossover(xo: pl.DataFrame, v: Verdict | None) -> Figure:
    """The crossover by GPU and DCP size, titled as where the curves cross (no engine named faster) unless ``v``
    decides."""
    fig = plot_crossover(xo)
    model = xo["model"][0] if xo.height else ""
    title = f"modelled: where vLLM TP and SGLang TP+DCP cross ({model})"
    if decides(v):
        title = f"modelled: context from which SGLang TP+DCP is faster than vLLM TP ({model})"
    fig.axes[0].set_title(title.replace(" ()", ""), fontsize=10)
    return fig


def capacity_limited(table: pl.DataFrame) -> Figure:
    """Modelled capacity-limited throughput: per TPOT target (x) one bar per configuration (the default set), its
    whisker the range over the sets (kvlab.perfmodel.throughput.capacity_limited)."""
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    targets = sorted(set(table["tpot_ms"].to_list()))
    configs = table["config"].unique(maintain_order=True).to_list()
    width = 0.8 / max(len(configs), 1)
    for k, c in enumerate(configs):
        d = table.filter(pl.col("config") == c).sort("tpot_ms")
        xs = [targets.index(t) + (k - (len(configs) - 1) / 2) * width for t in d["tpot_ms"].to_list()]
        y, lo, hi = (d[col].to_list() for col in ("tokens_per_s_per_gpu", "tokens_per_s_per_gpu_lo",
                                                  "tokens_per_s_per_gpu_hi"))  # fmt: skip
        ax.bar(xs, y, width, color=SERIES_COLORS[k % len(SERIES_COLORS)], label=config_name(c))
        ax.errorbar(xs, y, yerr=[[a - b for a, b in zip(y, lo)], [b - a for a, b in zip(y, hi)]], fmt="none",
                    ecolor="#333333", capsize=3, lw=1)  # fmt: skip
    ax.set_xticks(range(len(targets)), [f"{t:g} ms" for t in targets])
    ax.set_xlabel("TPOT target")
    ax.set_ylabel("output tokens/s per GPU")
    ctx = int(table["context_tokens"][0]) if table.height else 0
    ax.set_title(f"modelled: capacity-limited throughput at {ctx // 1024}K tokens", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig
