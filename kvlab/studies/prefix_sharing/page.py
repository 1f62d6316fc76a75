"""Report 05's sections (05_prefix_sharing.ipynb): one function per code cell, each returning what the cell shows,
read from the typed result (``r.<field>``) and worded by :mod:`kvlab.studies.prefix_sharing.words`."""

from __future__ import annotations

import polars as pl
from IPython.display import Markdown

from kvlab import tables
from kvlab.engines import engine_label
from kvlab.words import no_runs_note, stand_in_note
from kvlab.studies.section import Section
from kvlab.studies.prefix_sharing import words
from kvlab.studies.prefix_sharing.figures import ideal_reuse_figure, multi_turn_figure, prefix_ratio_figure
from kvlab.studies.prefix_sharing.result import PrefixSharingResult


def opening(r: PrefixSharingResult, wb) -> Section:
    """The answer, then what the report says before its first section."""
    out = Section([r.answer])
    if note := stand_in_note(r.engines, block_tokens=r.block_tokens):
        out.add(Markdown(note))
    return out


def article_claims(r: PrefixSharingResult, wb) -> Section:
    """What the article claims."""
    return Section([words.claims_table(r.claims.to_dicts()), Markdown(words.citation_note(r.prefix_claims.to_dicts()))])


def ideal_reuse(r: PrefixSharingResult, wb) -> Section:
    """The most a prefix cache can reuse (modelled)."""
    caption = words.ideal_reuse_caption(
        r.ideal.to_dicts(), r.ideal_prompt_tokens, r.ideal_requests, r.block_tokens, r.threshold
    )
    return Section([wb.show(ideal_reuse_figure(r.ideal, r.threshold, r.block_tokens), caption, data=r.ideal)])


def _no_runs(what: str, experiment: str, wb) -> Markdown:
    return Markdown(no_runs_note(what, wb.data, f"kvlab sweep data/experiments/{experiment}.yaml"))


def measured(r: PrefixSharingResult, wb) -> Section:
    """Measured: cache hits, TTFT and batch time by shared fraction."""
    if r.sharing.is_empty():
        return Section([_no_runs(f"runs of `{r.sharing_experiment}`", r.sharing_experiment, wb)])
    fig = prefix_ratio_figure(r.sharing, r.gain, r.threshold, r.block_tokens, min_gain=r.min_gain)
    caption = words.hit_rates_caption(r.sharing.to_dicts())
    if r.gain.height:
        caption += " " + words.gain_caption(r.gain.to_dicts(), r.thresholds, r.verdict("shared_prefix_threshold_jump"))
    return Section(
        [
            tables.folded(
                words.sharing_table(r.sharing_points.to_dicts(), r.block_tokens),
                "Cache-hit rate, TTFT and batch time per shared fraction",
            ),
            wb.show(fig, caption, data=r.sharing_figure),
            Markdown(words.hit_sources(r.sharing.to_dicts())),
        ]
    )


def radix_vs_paged(r: PrefixSharingResult, wb) -> Section:
    """Radix tree vs paged blocks (measured, cache on)."""
    if r.sharing.is_empty():
        return Section()
    pairs = r.radix_pairs.to_dicts()
    return Section(
        [
            Markdown(words.radix_vs_paged(r.radix_engine, pairs, r.block_tokens)),
            Markdown(words.reuse_sentences(r.reuse.to_dicts())),
        ]
    )


def vllm_sharing(r: PrefixSharingResult, wb) -> Section:
    """Does vLLM share prefixes?"""
    return Section([Markdown(words.vllm_sharing(r.verdict("vllm_no_prefix_sharing"), r.sharing.to_dicts()))])


def threshold(r: PrefixSharingResult, wb) -> Section:
    """What the cache buys, and the 30% threshold."""
    if r.gain.is_empty():
        return Section(
            [
                Markdown(
                    "*No shared fraction was measured with the prefix cache both on and off: the threshold cannot"
                    " be tested here.*"
                )
            ]
        )
    out = Section(
        [tables.folded(words.gain_table(r.gain_points.to_dicts()), "What the cache buys per shared fraction")]
    )
    jump = r.verdict("shared_prefix_threshold_jump")
    for engine, found in r.thresholds.items():
        rows = r.gain.filter(pl.col("engine") == engine).to_dicts()
        label = engine_label(engine)
        out.add(Markdown(f"**{label}**\n\n" + words.threshold_lines(found, rows, jump, label)))
    return out


def multi_turn(r: PrefixSharingResult, wb) -> Section:
    """Multi-turn RAG: each turn reuses the history."""
    if r.by_turn.is_empty():
        return Section([_no_runs(f"runs of `{r.multi_turn_experiment}`", r.multi_turn_experiment, wb)])
    rows = r.by_turn.to_dicts()
    return Section(
        [
            tables.folded(words.turns_table(r.turn_points.to_dicts()), "Per turn, cache on and off"),
            wb.show(
                multi_turn_figure(r.by_turn, r.turn_requests),
                words.multi_turn_caption(rows, r.verdict("multi_turn_reuse")),
                data=r.by_turn.drop("hardware"),
            ),
            Markdown(words.multi_turn_lines(rows)),
        ]
    )


def conclusions(r: PrefixSharingResult, wb) -> Section:
    """Conclusions (computed from the results above)."""
    return Section([Markdown(words.conclusions(r.verdicts, not r.sharing.is_empty()))])
