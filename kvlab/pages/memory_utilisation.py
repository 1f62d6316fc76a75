"""Report 03's sections (03_memory_utilisation.ipynb): one function per code cell, each returning what the cell
shows."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import narrative, plots, tables
from kvlab.perfmodel.figures import plot_headroom
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


def article(r: StudyResult, wb) -> Section:
    """What the article says (published, prose only)."""
    out = Section()
    out.add(
        Markdown(
            narrative.claims_list(r["claims"].to_dicts())
            + "\n\nThe article gives no retry counts, run times or latencies for this study, so none are"
            " shown as published."
        )
    )
    return out


def modelled_headroom(r: StudyResult, wb) -> Section:
    """What the physical model says (modelled)."""
    gpu = r.parameters["gpu"]
    model = r.parameters["model"]
    out = Section()
    head, head_rows = r["headroom"], r["headroom"].to_dicts()
    out.add(Markdown(narrative.headroom_intro(head_rows, gpu, model, r["article"].to_dicts())))
    out.add(wb.show(plot_headroom(head), narrative.headroom_caption(head_rows), data=head))
    out.add(
        tables.table(
            r["headroom_shown"],
            tables.non_empty(
                head,
                [
                    "mem_util",
                    "dcp",
                    "context_tokens",
                    "kv_pool_gib_per_gpu",
                    "kv_capacity_tokens",
                    "max_concurrent_seqs",
                    "outside_pool_gib_per_gpu",
                    "fits",
                ],
            ),
        )
    )
    out.add(Markdown(narrative.headroom_sentences(head_rows)))
    return out


def measured(r: StudyResult, wb) -> Section:
    """What kvlab measured."""
    out = Section()
    measured, stats, cmp = r["measured"], r["stats"].to_dicts(), r["comparison"].to_dicts()
    if measured.is_empty():
        out.add(Markdown(narrative.no_runs_note("runs with a memory setting", wb.data, "make report")))
    else:
        out.add(Markdown(narrative.measured_engines_note(measured.to_dicts())))
        out.add(Markdown(narrative.memory_scope(measured.to_dicts(), r["setting"])))
        out.add(narrative.memory_table(stats))
        if r["gpu_left"].height:  # NVML samples: GPU runs only
            out.add(Markdown("### GPU memory left outside the engine, per GPU (measured, NVML)"))
            out.add(
                tables.table(
                    r["gpu_left"],
                    ["engine", "mem_util", "context_tokens", "gpu", "left_gib", "left_fraction", "samples"],
                )
            )
        ratios = r["ratios"]  # each engine against itself: the lower setting ÷ the higher
        if plots.drawable(ratios, "batch_time_ratio"):
            out.add(wb.show(plots.memory_ratio_figure(ratios), narrative.memory_caption(stats, cmp), data=ratios))
        elif ratios.height:  # one or two points: a table says it better than a figure
            settings = f"{ratios['mem_low'][0]:g} ÷ {ratios['mem_high'][0]:g}"
            out.add(
                tables.table(
                    ratios,
                    {
                        "engine": None,
                        "context_label": None,
                        "context_tokens": None,
                        "batch_time_ratio": f"batch time, {settings} (×)",
                        "e2e_ratio": f"mean request latency, {settings} (×)",
                        "n_runs": "runs a side",
                    },
                    caption="each engine against itself: " + narrative.memory_caption(stats, cmp),
                )
            )
        causes = r["causes"]
        out.add(Markdown("### Causes of the failed attempts"))
        out.add(
            tables.table(causes, ["engine", "mem_util", "context_label", "failure_cause", "failed_attempts"])
            if causes.height
            else Markdown("*No attempt failed.*")
        )
        out.add(Markdown(narrative.memory_study_summary(stats, causes.to_dicts())))
        out.add(Markdown(narrative.counters_note(measured.to_dicts())))
        out.add(Markdown(narrative.memory_conclusion(cmp, stats)))
    return out
