"""Report 07's sections (07_capacity.ipynb): one function per code cell, each returning what the cell shows, read
from the typed result (:class:`~kvlab.studies.capacity.CapacityResult`)."""

from __future__ import annotations

import polars as pl
from IPython.display import Markdown

from kvlab import tables
from kvlab.words import measured_engines_note
from kvlab.studies.section import Section
from kvlab.studies.capacity import figures, words
from kvlab.studies.capacity.checks import by_id
from kvlab.studies.capacity.result import CapacityResult


def _empty(r: CapacityResult, what: str) -> Section | None:
    """Where nothing was measured: a short note naming what this section would show (each note its own sentence)."""
    return Section([Markdown(words.not_yet(what))]) if r.curve.is_empty() else None


def opening(r: CapacityResult, wb) -> Section:
    """The answer, then what the report says before its first section."""
    out = Section()
    out.add(r.answer)
    if r.curve.is_empty():
        out.add(Markdown(words.no_capacity_runs_note(r.measured_experiment, wb.data)))
        return out
    out.add(Markdown(measured_engines_note(r.runs.to_dicts())))
    conditions = f" TTFT and rates under load were measured with {r.load_conditions}." if r.load_conditions else ""
    out.add(Markdown(words.slo_note(r.curve.to_dicts(), r.slo_share) + conditions))
    return out


def pareto(r: CapacityResult, wb) -> Section:
    """Throughput against interactivity (measured)."""
    if (empty := _empty(r, "no load point to draw")) is not None:
        return empty
    fig = figures.capacity_pareto_figure(r.curve)
    return Section([wb.show(fig, words.pareto_caption(r.curve.to_dicts()), data=r.pareto_figure)])


def highest_load(r: CapacityResult, wb) -> Section:
    """The highest load within the SLO, and the goodput there (measured)."""
    if (empty := _empty(r, "no ladder to read a highest load from")) is not None:
        return empty
    return Section([words.capacity_table(r.best.to_dicts())])


def pool_fills(r: CapacityResult, wb) -> Section:
    """Where the KV pool fills and requests queue, against the ceiling (measured telemetry): the onset table, the
    peak usage against the ceiling, and the gauges over time, one small figure per context x memory setting."""
    if (empty := _empty(r, "no telemetry to set against a ceiling")) is not None:
        return empty
    out = Section()
    point_rows = r.points.to_dicts()
    if note := words.telemetry_note(point_rows):
        out.add(Markdown(note))
    out.add(words.onset_table(r.onset.to_dicts()))
    caption = words.ceiling_caption(point_rows, r.onset.to_dicts(), r.queueing)
    out.add(wb.show(figures.capacity_ceiling_figure(r.points), caption, data=r.ceiling_figure))
    for i, (ctx, _label, mem) in enumerate(figures.telemetry_settings(r.telemetry)):
        at = (pl.col("context_tokens") == ctx) & pl.col("mem_util").eq_missing(mem)
        part, series = r.telemetry.filter(at), r.telemetry_series.filter(at)
        caption = words.telemetry_caption(series.to_dicts(), r.min_line_samples, first=i == 0)
        out.add(wb.show(figures.capacity_telemetry_figure(part), caption, data=part))
    return out


def engine_map(r: CapacityResult, wb) -> Section:
    """The map: each engine's goodput at each context x memory setting (measured), a leader named only where the
    map's verdict decides."""
    if (empty := _empty(r, "no goodput to map")) is not None:
        return empty
    gmap = r.goodput_map
    if gmap.is_empty():
        return Section([Markdown("*No context × memory setting was measured with two engines: no map to draw.*")])
    verdict = by_id(r.verdicts).get("capacity_goodput_map")
    rows = gmap.to_dicts()
    return Section(
        [
            tables.folded(words.map_table(rows, verdict), "The map's cells"),
            wb.show(
                figures.capacity_map_figure(gmap, verdict),
                words.map_caption(rows, verdict),
                data=gmap.drop("engines", strict=False),
            ),
        ]
    )


def probe(r: CapacityResult, wb) -> Section:
    """The accuracy probe per configuration (measured)."""
    summary = r.probe.to_dicts()
    out = Section([Markdown(words.probe_intro(summary, r.measured_experiment))])
    if summary:
        out.add(tables.folded(words.probe_table(summary), "The accuracy probe per configuration"))
    return out


def _rows(frame) -> list[dict]:
    return [] if frame is None else frame.to_dicts()


def modelled_ceiling(r: CapacityResult, wb) -> Section:
    """The ceiling on the GPU host (modelled, not measured), every number with its range."""
    rows = r.modelled.to_dicts()
    verdict = by_id(r.verdicts).get("capacity_modelled_ceiling")
    fig = figures.modelled_ceiling_figure(r.modelled)
    return Section(
        [
            wb.show(fig, words.modelled_caption(rows, verdict), data=r.modelled),
            tables.folded(words.modelled_table(rows, _rows(r.modelled_throughput)), "The modelled ceilings"),
        ]
    )


def real_traffic(r: CapacityResult, wb) -> Section:
    """On replayed traffic (measured): per engine and memory setting the highest load within the SLO found by
    search, the search path, cost and energy there and what broke the next load; the trace's shape; reusable
    against cached tokens. One line where no search or trace run is stored (the default build)."""
    if r.search.is_empty() and r.trace_shape.is_empty():
        return Section([Markdown(words.no_traffic_note(r.trace_experiment, r.trace_notes))])
    out = Section([Markdown("## On replayed traffic: the highest load within the SLO, found by search (measured)")])
    on_cpu = "gpu" not in r.search["device_kind"].to_list() if not r.search.is_empty() else True
    if not r.search.is_empty():
        rows = r.search.to_dicts()
        out.add(Markdown(words.search_intro(rows, on_cpu)))
        out.add(words.search_table(rows))
        out.add(wb.show(figures.search_path_figure(r.search_path), words.search_caption(rows, on_cpu), r.search_path))
    if not r.trace_shape.is_empty():
        caption = words.trace_caption(r.trace_summary.to_dicts())
        out.add(wb.show(figures.trace_shape_figure(r.trace_shape), caption, data=r.trace_shape))
    if r.trace_notes:
        out.add(Markdown(f"*{'; '.join(r.trace_notes)}.*"))
    if not r.trace_reuse.is_empty():
        out.add(Markdown(words.reuse_caption()))
        out.add(words.reuse_table(r.trace_reuse.to_dicts()))
    return out
