"""Report 04's figures: the model's own figures (:mod:`kvlab.perfmodel.figures`), titled from the verdict they speak
to, so a title names a direction only where that verdict decides (:func:`kvlab.verdicts.decides`)."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure

from kvlab.words import model_title
from kvlab.perfmodel.figures import plot_crossover, plot_curves
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
