"""Report 07's sections (07_capacity.ipynb): one function per code cell, each returning what the cell shows."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import narrative, plots, tables
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


NOT_YET = "*Not measured yet: see the note at the top.*"


def opening(r: StudyResult, wb) -> Section:
    """The answer, then what the report says before its first section."""
    measured_experiment = r.parameters["measured_experiment"]
    curve = r["curve"]
    out = Section()
    out.add(r.answer)
    if curve.is_empty():
        out.add(Markdown(narrative.no_capacity_runs_note(measured_experiment, wb.data)))
    else:
        out.add(Markdown(narrative.measured_engines_note(r["runs"].to_dicts())))
        conditions = r["load_conditions"]
        out.add(
            Markdown(
                narrative.slo_note(curve.to_dicts())
                + (f" TTFT and rates under load were measured with {conditions}." if conditions else "")
            )
        )
    return out


def pareto(r: StudyResult, wb) -> Section:
    """Throughput against interactivity (measured)."""
    curve = r["curve"]
    out = Section()
    if curve.is_empty():
        out.add(Markdown(NOT_YET))
    else:
        out.add(
            wb.show(
                plots.capacity_pareto_figure(curve), narrative.pareto_caption(curve.to_dicts()), data=r["pareto_figure"]
            )
        )
    return out


def highest_load(r: StudyResult, wb) -> Section:
    """The highest load within the SLO, and the goodput there (measured)."""
    curve = r["curve"]
    out = Section()
    if curve.is_empty():
        out.add(Markdown(NOT_YET))
    else:
        best = r["best"].to_dicts()
        # each row is a bullet below: the table is one click away
        out.add(tables.folded(narrative.capacity_table(best), "The highest load within the SLO per configuration"))
        out.add(Markdown(narrative.capacity_sentences(best)))
    return out


def pool_fills(r: StudyResult, wb) -> Section:
    """Where the KV pool fills and requests queue, against the ceiling (measured telemetry)."""
    curve = r["curve"]
    points = r["points"]
    out = Section()
    if curve.is_empty():
        out.add(Markdown(NOT_YET))
    else:
        point_rows, onset = points.to_dicts(), r["onset"].to_dicts()
        note = narrative.telemetry_note(point_rows)
        if note:
            out.add(Markdown(note))
        out.add(narrative.onset_table(onset))
        out.add(
            wb.show(
                plots.capacity_ceiling_figure(points),
                narrative.ceiling_caption(point_rows, onset),
                data=r["ceiling_figure"],
            )
        )
        out.add(
            wb.show(
                plots.capacity_telemetry_figure(r["telemetry"]),
                narrative.telemetry_caption(r["telemetry_series"].to_dicts(), r["min_line_samples"]),
                data=r["telemetry"],
            )
        )
    return out


def engine_map(r: StudyResult, wb) -> Section:
    """The map: which engine carries more goodput, at each context × memory setting (measured)."""
    curve = r["curve"]
    gmap = r["map"]
    out = Section()
    if curve.is_empty():
        out.add(Markdown(NOT_YET))
    elif gmap.is_empty():
        out.add(Markdown("*No context × memory setting was measured with two engines: there is no map to draw.*"))
    else:
        out.add(tables.folded(narrative.map_table(gmap.to_dicts()), "The map's cells"))
        out.add(
            wb.show(plots.capacity_map_figure(gmap), narrative.map_caption(gmap.to_dicts()), data=gmap.drop("engines"))
        )
    return out


def probe(r: StudyResult, wb) -> Section:
    """The accuracy probe per configuration (measured)."""
    measured_experiment = r.parameters["measured_experiment"]
    out = Section()
    summary = r["probe"].to_dicts()
    out.add(Markdown(narrative.probe_intro(summary, measured_experiment)))
    if summary:
        out.add(tables.folded(narrative.probe_table(summary), "The accuracy probe per configuration"))
    return out


def modelled_ceiling(r: StudyResult, wb) -> Section:
    """The ceiling on the GPU host (modelled, not measured)."""
    modelled = r["modelled"]
    out = Section()
    out.add(
        wb.show(plots.modelled_ceiling_figure(modelled), narrative.modelled_caption(modelled.to_dicts()), data=modelled)
    )
    out.add(tables.folded(narrative.modelled_table(modelled.to_dicts()), "The modelled ceilings"))
    return out
