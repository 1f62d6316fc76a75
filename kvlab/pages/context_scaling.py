"""Report 01's sections (01_context_scaling.ipynb): one function per code cell, each returning what the cell shows."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import narrative, plots, tables
from kvlab.engines import engine_label
from kvlab.pages.common import measured_opening
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


def published_table(r: StudyResult, wb) -> Section:
    """The published table."""
    out = Section()
    out.add(
        tables.table(
            r["published"], ["context_label", "engine", "dcp", "batch_time_s", "gpu_count", "hardware", "model"]
        )
    )
    out.add(Markdown(narrative.citation_note(r["published"].to_dicts())))
    out.add(
        wb.show(
            plots.batch_time_bars(r["published_means"]),
            narrative.speed_caption(r["relative"].to_dicts(), "published"),
            data=r["published_means"],
        )
    )
    return out


def relative_speed(r: StudyResult, wb) -> Section:
    """Relative speed and who wins where."""
    engine_a = r.parameters["engine_a"]
    engine_b = r.parameters["engine_b"]
    out = Section()
    out.add(
        tables.table(
            r["relative"],
            {
                "context_label": None,
                "batch_time_s": f"{engine_label(engine_a)} (s)",
                "other_batch_time_s": f"{engine_label(engine_b)} (s)",
                "faster": None,
                "speedup": None,
            },
        )
    )
    out.add(Markdown(narrative.relative_speed_sentences(r["relative"].to_dicts(), "published")))
    return out


def crossover(r: StudyResult, wb) -> Section:
    """Where the winner changes."""
    out = Section()
    out.add(Markdown("\n".join(narrative.crossover_sentence(x, "published") for x in r["estimates"])))
    return out


def model_crossover(r: StudyResult, wb) -> Section:
    """Where the winner changes."""
    out = Section()
    out.add(Markdown(narrative.model_crossover_sentence(r["x_model"], r["fit"], r["x_model_range"])))
    return out


def measured(r: StudyResult, wb) -> Section:
    """Measured here."""
    mem_util = r.parameters["mem_util"]
    out = Section()
    if not measured_opening(r, wb, out):
        return out
    mt = r["measured_means"]
    out.add(
        tables.table(
            mt,
            ["context_label", "context_tokens", "engine", "batch_time_s", "batch_time_std_s", "n_runs"],
            caption=f"memory utilisation {mem_util}; contexts scaled ÷{mt['scale_factor'].max():g}",
        )
    )
    out.add(
        wb.show(
            plots.batch_time_bars(mt), narrative.speed_caption(r["measured_relative"].to_dicts(), "measured"), data=mt
        )
    )
    out.add(
        wb.show(
            plots.throughput_vs_context(mt, "batch_time_s", "batch time (s)"),
            narrative.growth_caption(r["growth"].to_dicts(), "measured"),
            data=mt,
        )
    )
    return out


def growth(r: StudyResult, wb) -> Section:
    """Growth of batch time with context, per engine."""
    out = Section()
    if "measured" in r.frames:
        out.add(Markdown(narrative.growth_comparison(r["decay_measured"].to_dicts(), r["decay_published"].to_dicts())))
        if (r["growth"]["n_contexts"].max() or 0) > 2:  # more contexts than two: growth over the whole measured range
            out.add(Markdown(narrative.growth_sentences(r["growth"].to_dicts(), "measured")))
    return out


def measured_relative(r: StudyResult, wb) -> Section:
    """Measured relative speed and crossover."""
    measured_engine_a = r.parameters["measured_engine_a"]
    out = Section()
    if "measured" in r.frames:
        b = r["measured_engine_b"]
        out.add(
            tables.table(
                r["measured_relative"],
                {
                    "context_label": None,
                    "context_tokens": None,
                    "batch_time_s": f"{engine_label(measured_engine_a)} (s)",
                    "other_batch_time_s": f"{engine_label(b)} (s)",
                    "faster": None,
                    "speedup": None,
                },
            )
        )
        out.add(Markdown(narrative.relative_speed_sentences(r["measured_relative"].to_dicts(), "measured")))
        out.add(Markdown("\n".join(narrative.crossover_sentence(x, "measured") for x in r["x_measured"])))
    return out
