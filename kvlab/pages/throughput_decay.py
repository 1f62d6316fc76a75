"""Report 02's sections (02_throughput_decay.ipynb): one function per code cell, each returning what the cell shows."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import narrative, plots, tables
from kvlab.pages.common import measured_opening
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


def published(r: StudyResult, wb) -> Section:
    """Throughput against context (published)."""
    out = Section()
    tp_pub = r["throughput_published"]
    out.add(tables.table(tp_pub, ["context_label", "engine", "batch_time_s", "batches_per_s"]))
    out.add(Markdown(narrative.citation_note(r["published"].to_dicts())))
    out.add(
        wb.show(
            plots.throughput_vs_context(tp_pub, "batches_per_s", "batches per second", relative=True),
            narrative.decay_caption(r["decay_published"].to_dicts(), "published", "batches per second"),
            data=tp_pub,
        )
    )
    return out


def decay_factors(r: StudyResult, wb) -> Section:
    """Decay factors the table implies."""
    out = Section()
    out.add(narrative.decay_table(r["decay_published"].to_dicts()))
    out.add(Markdown(narrative.decay_sentences(r["decay_published"].to_dicts(), "published")))
    return out


def claims_beside_table(r: StudyResult, wb) -> Section:
    """The article's claims beside its own table."""
    out = Section()
    check, rows, claims, verdicts = (
        r["check"],
        r["check"].to_dicts(),
        r["claims"].to_dicts(),
        r["check_verdicts"].to_dicts(),
    )
    out.add(narrative.consistency_table(rows, claims))
    out.add(
        wb.show(
            plots.claims_vs_table(check, narrative.claim_labels(rows, claims), narrative.DEFINITION_NAMES),
            narrative.claims_caption(rows, verdicts, claims),
            data=check,
        )
    )
    out.add(Markdown(narrative.consistency_sentences(verdicts, rows)))
    return out


def measured(r: StudyResult, wb) -> Section:
    """Measured here."""
    mem_util = r.parameters["mem_util"]
    out = Section()
    if not measured_opening(r, wb, out):
        return out
    tp_m, decay_m = r["throughput_measured"], r["decay_measured"]
    out.add(
        tables.table(
            tp_m,
            tables.non_empty(
                tp_m,
                [
                    "context_label",
                    "context_tokens",
                    "engine",
                    "batch_time_s",
                    "batch_time_std_s",
                    "requests_per_s",
                    "output_tokens_per_s",
                    "prompt_tokens_per_s",
                    "n_runs",
                ],
            ),
            caption=narrative.measured_table_caption(r["scaled_pairs"], mem_util),
        )
    )
    out.add(
        wb.show(
            plots.throughput_vs_context(tp_m, "output_tokens_per_s", "output tokens per second", relative=True),
            narrative.decay_caption(decay_m.to_dicts(), "measured", "output tokens per second"),
            data=tp_m,
        )
    )
    out.add(narrative.decay_table(decay_m.to_dicts()))
    out.add(Markdown(narrative.decay_sentences(decay_m.to_dicts(), "measured")))
    out.add(Markdown(narrative.decay_comparison(r["decay_extremes"], "measured")))
    return out
