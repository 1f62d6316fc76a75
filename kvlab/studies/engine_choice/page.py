"""Report 06's sections (06_engine_choice.ipynb): one function per code cell, each returning what the cell shows,
read from the typed result (``r.<field>``) and worded by :mod:`kvlab.studies.engine_choice.words`."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import tables
from kvlab.engines import engine_label
from kvlab.words import citation_note, model_title, no_runs_note, stand_in_note
from kvlab.studies.engine_choice import explore
from kvlab.studies.section import Section
from kvlab.perfmodel import published_fit
from kvlab.perfmodel.figures import plot_curves
from kvlab.figures import drawable
from kvlab.studies.engine_choice import words
from kvlab.studies.engine_choice.figures import concurrency_figure, decision_tree_figure
from kvlab.studies.engine_choice.result import EngineChoiceResult
from kvlab.studies.sharing_frames import prefix_sharing_figure

_SHARING_COLUMNS = {
    "engine": None,
    "prefix_caching": None,
    "shared_fraction": None,
    "cache_hit_rate": None,
    "ideal_hit_rate": None,
    "block_ideal_hit_rate": None,
    "ttft_mean_ms": "mean TTFT (ms)",
    "batch_time_s": "median batch time (s)",
    "n_runs": None,
}
_CONCURRENCY_COLUMNS = {
    "engine": None,
    "in_flight": None,
    "n_runs": None,
    "requests_sent": None,
    "requests_ok": None,
    "requests_failed": None,
    "requests_per_s": None,
    "ttft_mean_ms": "mean TTFT (ms)",
    "ttft_p99_ms": "p99 TTFT (ms)",
}


def opening(r: EngineChoiceResult, wb) -> Section:
    """The answer (the workload asked and the article's three examples), then how the report weighs its evidence."""
    out = Section([r.answer, Markdown(words.evidence_rule())])
    if note := stand_in_note(r.engines):
        out.add(Markdown(note))
    return out


def decision_tree(r: EngineChoiceResult, wb) -> Section:
    """The article's decision tree, with the path of the workload asked."""
    fig = decision_tree_figure(r.tree.path, r.tree.engine)
    return Section([wb.show(fig, words.tree_caption(r.tree)), Markdown(citation_note(r.tree_claims.to_dicts()))])


def examples(r: EngineChoiceResult, wb) -> Section:
    """The workload asked beside the article's three examples."""
    cols = {
        "example": None,
        "tree": "the tree says",
        "article": "the article says",
        "path": None,
    }
    return Section([tables.table(r.examples, cols)])


def context_length(r: EngineChoiceResult, wb) -> Section:
    """Context length (modelled): the curves with their bands, and the model at each context asked."""
    w = r.workload
    fig = plot_curves(r.curves, None, title=model_title(w.model, w.gpu, w.tp), band=r.x_range)
    contexts = [f.workload.context_tokens for f in r.context_factors]
    caption = words.curves_caption(
        w.model, w.gpu, w.tp, contexts, r.x_model, r.x_range, [f.favours for f in r.context_factors]
    )
    points = r.question_points.to_dicts()
    lines = "\n".join(words.context_line(f, points, r.x_model, r.x_range) for f in r.context_factors)
    if reason := words.model_reason(r.context_factors[-1]):
        lines += "\n\n" + reason
    return Section([wb.show(fig, caption, data=r.curves), Markdown(lines)])


def _no_runs(what: str, experiment: str, wb) -> Markdown:
    return Markdown(no_runs_note(what, wb.data, f"kvlab sweep data/experiments/{experiment}.yaml"))


def shared_prefix(r: EngineChoiceResult, wb) -> Section:
    """Shared prefix (measured)."""
    factor = words.factor_line(r.evidence.factors[1])
    if r.sharing.is_empty():
        return Section([_no_runs("prefix-sharing runs", "cpu_prefix_sharing", wb), Markdown(factor)])
    caption = words.prefix_caption(r.sharing.to_dicts(), r.verdict("shared_prefix_threshold"))
    measured = f"measured: {', '.join(r.sharing_experiments)}"
    return Section(
        [
            tables.table(r.sharing_by_engine, _SHARING_COLUMNS, caption=measured),
            wb.show(prefix_sharing_figure(r.sharing), caption, data=r.sharing),
            Markdown(factor),
        ]
    )


def concurrency(r: EngineChoiceResult, wb) -> Section:
    """Concurrency (measured)."""
    conc = r.concurrency
    if conc.is_empty():
        return Section([_no_runs("classification runs", "cpu_classification", wb)])
    caption = words.concurrency_caption(conc.to_dicts(), r.verdict("high_concurrency"))
    out = Section(
        [
            tables.table(
                r.concurrency_by_in_flight,
                _CONCURRENCY_COLUMNS,
                caption=f"measured: {', '.join(r.concurrency_experiments)}",
            )
        ]
    )
    # one or two points: the table above says it all
    out.add(
        wb.show(concurrency_figure(conc), caption, data=conc) if drawable(conc, "requests_per_s") else Markdown(caption)
    )
    out.add(Markdown(words.concurrency_lines(conc.to_dicts())))
    return out


def recommendation(r: EngineChoiceResult, wb) -> Section:
    """Recommendation: the tree against the data (each factor once, above; here only what decides)."""
    ev = r.evidence
    basis = (
        f"- from the data: nothing decides, so the guide follows the tree ({words.undecided_basis(ev)})."
        if ev.decided_by == "tree"
        else f"- from the data: **{engine_label(ev.engine)}**, on {ev.decided_by} evidence."
    )
    share = r.verdict("vllm_no_prefix_sharing")
    out = Section(
        [
            Markdown(words.tree_sentence(r.tree) + "\n" + basis),
            Markdown(words.recommendation_sentence(r.workload, r.tree, ev, r.sharing.to_dicts(), share)),
        ]
    )
    if gap := words.gap_sentence(ev):
        out.add(Markdown(gap))
    return out


def interactive(r: EngineChoiceResult, wb) -> Section:
    """Explore (JupyterLab)."""
    fit = published_fit(wb.data, experiment=r.published_experiment)
    controls = explore.engine_choice(r.workload, fit, r.sharing, r.concurrency)
    return Section([controls] if controls is not None else [])
