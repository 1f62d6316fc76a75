"""Report 02's sections (02_throughput_decay.ipynb): one function per notebook code cell, each returning what the
cell shows, read from the typed result (``r.<field>``) and worded by :mod:`kvlab.studies.throughput_decay.words`."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import tables
from kvlab.words import citation_note
from kvlab.studies.section import Section
from kvlab.studies.measured_frames import POOL_UNKNOWN, measured_opening, pool_recorded
from kvlab.studies.throughput_decay import words
from kvlab.studies.throughput_decay.figures import claims_vs_table, throughput_vs_context
from kvlab.studies.throughput_decay.result import ThroughputDecayResult


def published(r: ThroughputDecayResult, wb) -> Section:
    """Throughput against context (published)."""
    tp = r.throughput_published
    caption = words.decay_caption(r.decay_published.to_dicts(), "published", "batches per second", r.shape("published"))
    figure = throughput_vs_context(tp, "batches_per_s", "batches per second", relative=True)
    return Section(
        [
            tables.table(tp, ["context_label", "engine", "batch_time_s", "batches_per_s"]),
            Markdown(citation_note(r.published.to_dicts())),
            wb.show(figure, caption, data=tp),
        ]
    )


def decay_factors(r: ThroughputDecayResult, wb) -> Section:
    """Decay factors the table implies."""
    rows = r.decay_published.to_dicts()
    return Section([words.decay_table(rows), Markdown(words.decay_sentences(rows, "published"))])


def claims_beside_table(r: ThroughputDecayResult, wb) -> Section:
    """The article's claims beside its own table."""
    claims = r.claims.to_dicts()
    names = words.claim_labels(r.stated, claims)
    figure = claims_vs_table(r.check, names, words.DEFINITION_NAMES)
    return Section(
        [
            words.consistency_table(r.stated, claims),
            wb.show(figure, words.claims_caption(r.stated, claims), data=r.check),
            Markdown(words.consistency_sentences(r.stated)),
        ]
    )


MEASURED_COLUMNS = [
    "context",
    "engine",
    "batch_time_s",
    "batch_time_std_s",
    "requests_per_s",
    "output_tokens_per_s",
    "prompt_tokens_per_s",
    "n_runs",
]


def measured(r: ThroughputDecayResult, wb) -> Section:
    """Measured here."""
    out = Section()
    if not measured_opening(r.measured, r.measured_experiment, wb, out):
        return out
    tp, decay = r.throughput_measured, r.decay_measured.to_dicts()
    caption = words.measured_table_caption(r.mem_util, r.scale_factor, list(r.measured_contexts))
    out.add(tables.table(tp, tables.non_empty(tp, MEASURED_COLUMNS), caption=caption))
    shape = r.shape("measured")
    figure = throughput_vs_context(tp, "output_tokens_per_s", "output tokens per second", relative=True)
    out.add(wb.show(figure, words.decay_caption(decay, "measured", "output tokens per second", shape), data=tp))
    out.add(words.decay_table(decay))
    out.add(Markdown(words.decay_sentences(decay, "measured", r.pool_excesses)))
    if text := words.decay_comparison(decay, "measured", shape):
        out.add(Markdown(text))
    if not pool_recorded(r.pool):
        out.add(Markdown(POOL_UNKNOWN))
    return out
