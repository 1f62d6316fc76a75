"""Report 04's interactive controls in JupyterLab (the what-if model over GPU, model, TP, DCP and context); None in a
static build (:func:`kvlab.explore.interactive_enabled`)."""

from __future__ import annotations


import polars as pl
from IPython.display import Markdown

from kvlab import figures
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.explore import _catalog_options, _context_options, _display_all, _with, interactive_enabled
from kvlab.perfmodel import Config, crossover_context
from kvlab.perfmodel.figures import calibrated_ranges, context_grid, curves, plot_curves
from kvlab.tables import number
from kvlab.units import tokens_label
from kvlab import words


def whatif_view(
    fit,
    published: pl.DataFrame | None,
    workload,
    assumptions,
    *,
    gpu: str,
    model: str,
    tp: int,
    dcp: int,
    context: int,
    max_context: int = 1 << 20,
    points: int = 24,
    sens: pl.DataFrame | None = None,
) -> list:
    """What 04's controls redraw: the modelled batch-time curves (vLLM TP without DCP against SGLang TP+DCP) with
    their caption, and one sentence on the chosen context (times, fit in memory, crossover).

    ``sens``: the report's :func:`~kvlab.perfmodel.calibrate.sensitivity` table (one refit per assumption set the
    published points cannot pin), computed once by the report: each curve is then drawn as a band over those sets'
    fitted parameters, re-evaluated for the chosen configuration (milliseconds; no refit per control change)."""
    if dcp < 1 or tp % dcp:
        return [Markdown(f"*DCP {dcp} must divide TP {tp}: choose another DCP size.*")]
    cfgs = [
        Config.of(gpu, model, VLLM, tp, 1, assumptions.default_mem_util),
        Config.of(gpu, model, SGLANG, tp, dcp, assumptions.default_mem_util),
    ]
    grid = sorted(set(context_grid(max(max_context, context), points=points)) | {context})
    df = curves(cfgs, grid, workload, fit.params, assumptions, sens=sens)
    x = crossover_context(cfgs[0], cfgs[1], workload, fit.params, assumptions, hi_tokens=max(grid))
    fig = plot_curves(df, published, title=f"modelled: {words.setup_phrase(model, gpu, tp)}")
    at = df.filter(pl.col("context_tokens") == context).sort("batch_time_s")
    fast, slow = at.row(0, named=True), at.row(-1, named=True)
    fits = "; ".join(
        f"{words.config_name(r['config'])} does not fit in memory" for r in at.iter_rows(named=True) if not r["fits"]
    )
    sentence = (
        f"At {tokens_label(context)} ({context:,} tokens), {words.config_name(fast['config'])} takes "
        f"{number(fast['batch_time_s'])} s per batch against {number(slow['batch_time_s'])} s for "
        f"{words.config_name(slow['config'])} ({slow['batch_time_s'] / fast['batch_time_s']:.2f}×)"
        + (f"; {fits}" if fits else "")
        + "."
    )
    caption = " ".join(
        filter(
            None,
            (
                words.curves_caption(df.to_dicts(), x, calibrated_ranges(df, published)),
                words.band_sentence(df.to_dicts(), context=context),
            ),
        )
    )
    return [figures.show(fig, caption, data=df), Markdown(sentence)]


def whatif(
    fit,
    published: pl.DataFrame | None,
    workload,
    assumptions,
    *,
    gpu: str,
    model: str,
    tp: int,
    dcp: int,
    context: int = 204800,
    max_context: int = 1 << 20,
    points: int = 24,
    sens: pl.DataFrame | None = None,
):
    """04's controls (GPU, model, TP, DCP, context) as an ``ipywidgets.interactive``; None in a static build.
    ``sens``: the report's sensitivity table, so every redraw shows the curves' bands (see :func:`whatif_view`)."""
    if not interactive_enabled():
        return None
    import ipywidgets as widgets  # here, not at the top: only a person's JupyterLab session draws widgets

    gpus, models = _catalog_options()

    def draw(gpu: str, model: str, tp: int, dcp: int, context: int) -> list:
        return _display_all(
            whatif_view(
                fit,
                published,
                workload,
                assumptions,
                gpu=gpu,
                model=model,
                tp=tp,
                dcp=dcp,
                context=context,
                max_context=max_context,
                points=points,
                sens=sens,
            )
        )

    return widgets.interactive(
        draw,
        gpu=widgets.Dropdown(options=_with(gpus, gpu), value=gpu, description="GPU"),
        model=widgets.Dropdown(options=_with(models, model), value=model, description="model"),
        tp=widgets.Dropdown(options=sorted({1, 2, 4, 8, tp}), value=tp, description="TP"),
        dcp=widgets.Dropdown(options=sorted({1, 2, 4, 8, dcp}), value=dcp, description=f"DCP ({engine_label(SGLANG)})"),
        context=widgets.Dropdown(options=_context_options(context), value=context, description="context"),
    )
