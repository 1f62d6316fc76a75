"""Interactive controls for reports 04 and 06 when they are opened in JupyterLab.

Each function returns an ``ipywidgets.interactive`` widget over the report's main parameters; every change redraws
through the same library functions the static report uses (:mod:`kvlab.perfmodel.figures`, :mod:`kvlab.guide`,
:mod:`kvlab.narrative`, :func:`kvlab.plots.show`). A report build sets :data:`STATIC_ENV` in its
kernel's environment, and only a kernel Jupyter Server started for an open notebook gets widgets at all: otherwise
(or without ipywidgets) no widget is created and the functions return None, so the HTML shows the defaults only,
with nothing that needs a live kernel.
"""

from __future__ import annotations

import os
from dataclasses import replace

import polars as pl
from IPython.display import Markdown, display

from kvlab import guide, narrative, plots
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.guide import PRIORITIES
from kvlab.perfmodel import Config, crossover_context, load_gpus, load_models
from kvlab.perfmodel.figures import calibrated_ranges, context_grid, curves, plot_curves
from kvlab.tables import number
from kvlab.units import tokens_label

#: Contexts offered by the context controls (tokens), named as the figures name them.
CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072, 204800, 262144, 524288, 1048576)
#: Requests in flight offered by 06's concurrency control (100 is the tree's threshold).
IN_FLIGHT = (1, 8, 16, 32, 64, 99, 100, 128, 256, 512)


#: Set by Jupyter Server in the environment of a kernel it starts for a notebook (JupyterLab, Notebook 7); never by
#: papermill, nbconvert or nbclient.
SESSION_ENV = "JPY_SESSION_NAME"
#: Set in the environment of every kernel the report build starts (:mod:`kvlab.reports`): notebooks render their
#: defaults statically (no interactive widgets, whose views would need a live kernel or a CDN in the HTML).
STATIC_ENV = "KVLAB_STATIC_REPORT"


def interactive_enabled() -> bool:
    """True in a notebook a person has open in JupyterLab (:data:`SESSION_ENV` set) with ipywidgets; False in a report
    build (:data:`STATIC_ENV` set) and in every batch execution (papermill, nbconvert): a widget there
    has no one to use it, and executing ``interact`` headless can leave the kernel client waiting for ever (nbclient
    issue 312, papermill issue 723: seen here twice in 10 runs of report 04's test)."""
    if os.environ.get(STATIC_ENV) or not os.environ.get(SESSION_ENV):
        return False
    try:
        import ipywidgets  # noqa: F401  (here, not at the top: whether it imports is the question)
    except ImportError:
        return False
    return True


def _context_options(extra: int | None = None) -> list[tuple[str, int]]:
    values = sorted(set(CONTEXTS) | ({extra} if extra else set()))
    return [(f"{tokens_label(c)} ({c:,} tokens)", c) for c in values]


def _catalog_options() -> tuple[list[str], list[str]]:
    """GPUs (without the CPU host) and served models (without kvlab's tiny test model) of the catalog."""
    gpus = [k for k in load_gpus() if k != "CPU"]
    models = [k for k, m in load_models().items() if not k.startswith("kvlab-")]
    return gpus, models


def _with(options: list[str], value: str) -> list[str]:
    """The catalog's options in catalog order, with ``value`` added at the end when it is not one of them."""
    return options if value in options else [*options, value]


def _display_all(items: list) -> list:
    for item in items:
        display(item)
    return items


# --------------------------------------------------------------------------- report 04: the what-if model


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
    fig = plot_curves(df, published, title=f"modelled: {narrative.setup_phrase(model, gpu, tp)}")
    at = df.filter(pl.col("context_tokens") == context).sort("batch_time_s")
    fast, slow = at.row(0, named=True), at.row(-1, named=True)
    fits = "; ".join(
        f"{narrative.config_name(r['config'])} does not fit in memory"
        for r in at.iter_rows(named=True)
        if not r["fits"]
    )
    sentence = (
        f"At {tokens_label(context)} ({context:,} tokens), {narrative.config_name(fast['config'])} takes "
        f"{number(fast['batch_time_s'])} s per batch against {number(slow['batch_time_s'])} s for "
        f"{narrative.config_name(slow['config'])} ({slow['batch_time_s'] / fast['batch_time_s']:.2f}×)"
        + (f"; {fits}" if fits else "")
        + "."
    )
    caption = " ".join(
        filter(
            None,
            (
                narrative.curves_caption(df.to_dicts(), x, calibrated_ranges(df, published)),
                narrative.band_sentence(df.to_dicts(), context=context),
            ),
        )
    )
    return [plots.show(fig, caption, data=df), Markdown(sentence)]


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


# --------------------------------------------------------------------------- report 06: engine choice


def engine_choice_view(w, fit, sharing: pl.DataFrame, conc: pl.DataFrame) -> list:
    """What 06's controls redraw: the tree with this workload's path, the evidence, and the answer."""
    tree = w.tree()
    ev = guide.from_evidence(w, fit, sharing, conc)
    return [
        plots.show(plots.decision_tree_figure(tree.path, tree.engine), narrative.tree_caption(tree)),
        Markdown(narrative.tree_sentence(tree) + "\n" + narrative.evidence_sentences(ev)),
        Markdown(narrative.recommendation_sentence(w, tree, ev, sharing.to_dicts())),
    ]


def engine_choice(w, fit, sharing: pl.DataFrame, conc: pl.DataFrame):
    """06's controls (the workload's answers) as an ``ipywidgets.interactive``; None in a static build."""
    if not interactive_enabled():
        return None
    import ipywidgets as widgets  # here, not at the top: only a person's JupyterLab session draws widgets

    gpus, models = _catalog_options()

    def draw(
        context_tokens: int,
        shared_fraction: float,
        concurrency: int,
        model: str,
        gpu: str,
        mixed_hardware_or_frequent_model_changes: bool,
        priority: str,
    ) -> list:
        user = replace(
            w,
            context_tokens=context_tokens,
            shared_fraction=shared_fraction,
            concurrency=concurrency,
            model=model,
            gpu=gpu,
            mixed_hardware_or_frequent_model_changes=mixed_hardware_or_frequent_model_changes,
            priority=priority,
        )
        return _display_all(engine_choice_view(user, fit, sharing, conc))

    return widgets.interactive(
        draw,
        context_tokens=widgets.Dropdown(
            options=_context_options(w.context_tokens), value=w.context_tokens, description="context"
        ),
        shared_fraction=widgets.FloatSlider(value=w.shared_fraction, min=0.0, max=1.0, step=0.05, description="shared"),
        concurrency=widgets.Dropdown(
            options=sorted(set(IN_FLIGHT) | {w.concurrency}), value=w.concurrency, description="in flight"
        ),
        model=widgets.Dropdown(options=_with(models, w.model), value=w.model, description="model"),
        gpu=widgets.Dropdown(options=_with(gpus, w.gpu), value=w.gpu, description="GPU"),
        mixed_hardware_or_frequent_model_changes=widgets.Checkbox(
            value=w.mixed_hardware_or_frequent_model_changes, description="mixed hardware / model churn"
        ),
        priority=widgets.Dropdown(options=list(PRIORITIES), value=w.priority, description="priority"),
    )
