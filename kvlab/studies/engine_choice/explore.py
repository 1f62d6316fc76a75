"""Report 06's interactive controls in JupyterLab (the workload's answers to the decision tree); None in a static
build (:func:`kvlab.explore.interactive_enabled`)."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
from IPython.display import Markdown

from kvlab import figures, guide
from kvlab.explore import IN_FLIGHT, _catalog_options, _context_options, _display_all, _with, interactive_enabled
from kvlab.guide import PRIORITIES
from kvlab.studies.engine_choice.figures import decision_tree_figure
from kvlab.studies.engine_choice.words import evidence_sentences, recommendation_sentence, tree_caption, tree_sentence


def engine_choice_view(w, fit, sharing: pl.DataFrame, conc: pl.DataFrame) -> list:
    """What 06's controls redraw: the tree with this workload's path, the evidence, and the answer."""
    tree = w.tree()
    ev = guide.from_evidence(w, fit, sharing, conc)
    return [
        figures.show(decision_tree_figure(tree.path, tree.engine), tree_caption(tree)),
        Markdown(tree_sentence(tree) + "\n" + evidence_sentences(ev)),
        Markdown(recommendation_sentence(w, tree, ev, sharing.to_dicts())),
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
