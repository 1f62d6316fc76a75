"""Report 01's sections (01_context_scaling.ipynb): one function per notebook code cell, each returning what the
cell shows, read from the typed result (``r.<field>``) and worded by :mod:`kvlab.studies.context_scaling.words`."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import tables
from kvlab.engines import engine_label
from kvlab.words import citation_note
from kvlab.studies.section import Section
from kvlab.studies.context_scaling import words
from kvlab.studies.context_scaling.figures import batch_time_bars, throughput_vs_context
from kvlab.studies.context_scaling.result import ContextScalingResult
from kvlab.studies.measured_frames import POOL_UNKNOWN, measured_opening, pool_note, pool_recorded


def published_table(r: ContextScalingResult, wb) -> Section:
    """The published table."""
    out = Section()
    columns = ["context_label", "engine", "dcp", "batch_time_s", "gpu_count", "hardware", "model"]
    out.add(tables.table(r.published, columns))
    out.add(Markdown(citation_note(r.published.to_dicts())))
    caption = words.speed_caption(
        r.relative.to_dicts(), "published", r.speed_verdict("published"), r.verdict("crossover_published")
    )
    out.add(wb.show(batch_time_bars(r.published_means), caption, data=r.published_means))
    return out


def _relative_table(rel, a: str, b: str, context: str = "context_label"):
    names = {context: None} | {
        "batch_time_s": f"{engine_label(a)} (s)",
        "other_batch_time_s": f"{engine_label(b)} (s)",
        "faster": None,
        "speedup": None,
    }
    return tables.table(rel, names)


def relative_speed(r: ContextScalingResult, wb) -> Section:
    """Relative speed and who wins where."""
    text = words.relative_speed_sentences(
        r.relative.to_dicts(), "published", r.speed_verdict("published"), r.verdict("crossover_published")
    )
    return Section([_relative_table(r.relative, r.engine_a, r.engine_b), Markdown(text)])


def crossover(r: ContextScalingResult, wb) -> Section:
    """Where the winner changes (the table interpolated)."""
    change = r.verdict("crossover_published")
    return Section([Markdown("\n".join(words.crossover_sentence(x, "published", change) for x in r.estimates))])


def model_crossover(r: ContextScalingResult, wb) -> Section:
    """Where the winner changes (the physical model, always with its range)."""
    return Section([Markdown(words.model_crossover_sentence(r.model))])


def measured(r: ContextScalingResult, wb) -> Section:
    """Measured here."""
    out = Section()
    if not measured_opening(r.measured, r.measured_experiment, wb, out):
        return out
    mt = r.measured_means
    scale = f"; contexts scaled ÷{r.scale_factor:g}" if r.scale_factor and r.scale_factor != 1 else ""
    columns = ["context", "engine", "batch_time_s", "batch_time_std_s", "n_runs"]
    out.add(tables.table(mt, columns, caption=f"memory utilisation {r.mem_util:g}{scale}"))
    caption = words.speed_caption(
        r.measured_relative.to_dicts(), "measured", r.speed_verdict("measured"), r.verdict("crossover_measured")
    )
    out.add(wb.show(batch_time_bars(mt), caption, data=mt))
    growth_caption = words.growth_caption(r.growth.to_dicts(), "measured", r.pool_excesses)
    out.add(wb.show(throughput_vs_context(mt, "batch_time_s", "batch time (s)"), growth_caption, data=mt))
    return out


def growth(r: ContextScalingResult, wb) -> Section:
    """Growth of batch time with context, per engine (and whether each batch fitted its KV pool)."""
    out = Section()
    if r.measured is None:
        return out
    decay_m, decay_p = r.decay_measured.to_dicts(), r.decay_published.to_dicts()
    out.add(Markdown(words.growth_comparison(decay_m, decay_p, r.pool_excesses)))
    if note := pool_note(r.pool_excesses):
        out.add(Markdown(note))
    if (r.growth["n_contexts"].max() or 0) > 2:  # more contexts than two: growth over the whole measured range
        said = frozenset((d["engine"], d["context_from"], d["context_to"]) for d in decay_m)
        if lines := words.growth_sentences(r.growth.to_dicts(), "measured", r.pool_excesses, said):
            out.add(Markdown(lines))
    if not pool_recorded(r.pool):
        out.add(Markdown(POOL_UNKNOWN))
    return out


def measured_relative(r: ContextScalingResult, wb) -> Section:
    """Measured relative speed and crossover."""
    out = Section()
    if r.measured is None:
        return out
    rel = r.measured_relative
    out.add(_relative_table(rel, r.measured_engine_a, r.measured_engine_b, context="context"))
    change = r.verdict("crossover_measured")
    out.add(Markdown(words.relative_speed_sentences(rel.to_dicts(), "measured", r.speed_verdict("measured"), change)))
    if line := words.pool_wait_line(r.pool_excesses):
        out.add(Markdown(line))
    said = {e.method for e in r.estimates if e.context_tokens is not None}  # assumptions the published ones stated
    out.add(
        Markdown("\n".join(words.crossover_sentence(x, "measured", change, x.method not in said) for x in r.x_measured))
    )
    return out
