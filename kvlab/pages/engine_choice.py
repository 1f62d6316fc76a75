"""Report 06's sections (06_engine_choice.ipynb): one function per code cell, each returning what the cell shows."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import explore, narrative, plots, tables
from kvlab.perfmodel.figures import plot_curves
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


def opening(r: StudyResult, wb) -> Section:
    """The answer, then what the report says before its first section."""
    out = Section()
    out.add(r.answer)
    out.add(Markdown(narrative.evidence_rule()))
    note = narrative.stand_in_note(r["engines"])
    if note:
        out.add(Markdown(note))
    return out


def decision_tree(r: StudyResult, wb) -> Section:
    """The article's decision tree."""
    tree = r["tree"]
    out = Section()
    out.add(wb.show(plots.decision_tree_figure(tree.path, tree.engine), narrative.tree_caption(tree)))
    out.add(Markdown(narrative.citation_note(r["tree_claims"].to_dicts())))
    return out


def examples(r: StudyResult, wb) -> Section:
    """The article's decision tree."""
    out = Section()
    out.add(
        tables.table(
            r["examples"], ["example", "model", "context_tokens", "shared_fraction", "in_flight", "tree", "path"]
        )
    )
    return out


def context_length(r: StudyResult, wb) -> Section:
    """Context length (modelled)."""
    model = r.parameters["model"]
    gpu = r.parameters["gpu"]
    tp = r.parameters["tp"]
    out = Section()
    # one refit per assumption set the four published totals cannot pin (report 04): each curve is a band over them
    out.add(
        wb.show(
            plot_curves(r["curves"], None, title=narrative.model_title(model, gpu, tp), band=r["x_range"]),
            narrative.curves_caption(r["curves"].to_dicts(), r["x_model"], r["calibrated"], xrange=r["x_range"])
            + " "
            + narrative.band_sentence(r["curves"].to_dicts()),
            data=r["curves"],
        )
    )
    out.add(Markdown(narrative.factor_line(r["context_factor"])))
    return out


def shared_prefix(r: StudyResult, wb) -> Section:
    """Shared prefix (measured)."""
    sharing = r["sharing"]
    out = Section()
    if sharing.is_empty():
        out.add(
            Markdown(
                narrative.no_runs_note(
                    "prefix-sharing runs", wb.data, "kvlab sweep data/experiments/cpu_prefix_sharing.yaml"
                )
            )
        )
    else:
        out.add(
            tables.table(
                r["sharing_by_engine"],
                {
                    "engine": None,
                    "prefix_caching": None,
                    "shared_fraction": None,
                    "cache_hit_rate": None,
                    "ideal_hit_rate": None,
                    "block_ideal_hit_rate": None,
                    "ttft_mean_ms": "mean TTFT (ms)",
                    "batch_time_s": "median batch time (s)",
                    "n_runs": None,
                },
                caption=f"measured: {', '.join(r['sharing_experiments'])}",
            )
        )
        out.add(
            wb.show(plots.prefix_sharing_figure(sharing), narrative.prefix_caption(sharing.to_dicts()), data=sharing)
        )
    out.add(Markdown(narrative.factor_line(r["prefix_factor"])))
    return out


def concurrency(r: StudyResult, wb) -> Section:
    """Concurrency (measured)."""
    conc = r["concurrency"]
    out = Section()
    if conc.is_empty():
        out.add(
            Markdown(
                narrative.no_runs_note(
                    "classification runs", wb.data, "kvlab sweep data/experiments/cpu_classification.yaml"
                )
            )
        )
    else:
        out.add(
            tables.table(
                r["concurrency_by_in_flight"],
                {
                    "engine": None,
                    "in_flight": None,
                    "n_runs": None,
                    "requests_sent": None,
                    "requests_ok": None,
                    "requests_failed": None,
                    "requests_per_s": None,
                    "ttft_mean_ms": "mean TTFT (ms)",
                    "ttft_p99_ms": "p99 TTFT (ms)",
                },
                caption=f"measured: {', '.join(r['concurrency_experiments'])}",
            )
        )
        if plots.drawable(conc, "requests_per_s"):  # one or two points: the table above says it all
            out.add(wb.show(plots.concurrency_figure(conc), narrative.concurrency_caption(conc.to_dicts()), data=conc))
        else:
            out.add(Markdown(narrative.concurrency_caption(conc.to_dicts())))
        out.add(Markdown(narrative.concurrency_sentence(conc.to_dicts())))
    return out


def recommendation(r: StudyResult, wb) -> Section:
    """Recommendation: tree vs data (computed)."""
    tree = r["tree"]
    out = Section()
    out.add(Markdown(narrative.tree_sentence(tree) + "\n" + narrative.evidence_sentences(r["evidence"])))
    out.add(Markdown(r["recommendation"]))
    if r["gap"]:
        out.add(Markdown(r["gap"]))
    return out


def interactive(r: StudyResult, wb) -> Section:
    """Explore (JupyterLab)."""
    sharing = r["sharing"]
    conc = r["concurrency"]
    out = Section()
    controls = explore.engine_choice(r["workload"], r["fit"], sharing, conc)
    if controls is not None:
        out.add(controls)
    return out
