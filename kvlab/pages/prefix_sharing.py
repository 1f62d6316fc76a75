"""Report 05's sections (05_prefix_sharing.ipynb): one function per code cell, each returning what the cell shows."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import narrative, plots, tables
from kvlab.engines import engine_label
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


def opening(r: StudyResult, wb) -> Section:
    """The answer, then what the report says before its first section."""
    block_tokens = r.parameters["block_tokens"]
    out = Section()
    out.add(r.answer)
    note = narrative.stand_in_note(r["engines"], block_tokens=block_tokens)
    if note:
        out.add(Markdown(note))
    return out


def article_claims(r: StudyResult, wb) -> Section:
    """What the article claims."""
    out = Section()
    out.add(narrative.prefix_claims_table(r["claims"].to_dicts()))
    out.add(Markdown(narrative.prefix_citation_note(r["prefix_claims"].to_dicts())))
    return out


def ideal_reuse(r: StudyResult, wb) -> Section:
    """The most a prefix cache can reuse (modelled)."""
    threshold = r.parameters["threshold"]
    ideal_prompt_tokens = r.parameters["ideal_prompt_tokens"]
    ideal_requests = r.parameters["ideal_requests"]
    block_tokens = r.parameters["block_tokens"]
    out = Section()
    out.add(
        wb.show(
            plots.ideal_reuse_figure(r["ideal"], threshold, block_tokens),
            narrative.ideal_reuse_caption(
                r["ideal"].to_dicts(), ideal_prompt_tokens, ideal_requests, block_tokens, threshold
            ),
            data=r["ideal"],
        )
    )
    return out


def measured(r: StudyResult, wb) -> Section:
    """Measured: cache hits, TTFT and batch time by shared fraction."""
    sharing_experiment = r.parameters["sharing_experiment"]
    threshold = r.parameters["threshold"]
    min_gain = r.parameters["min_gain"]
    block_tokens = r.parameters["block_tokens"]
    sharing = r["sharing"]
    gain = r["gain"]
    out = Section()
    if sharing.is_empty():
        out.add(
            Markdown(
                narrative.no_runs_note(
                    f"runs of `{sharing_experiment}`",
                    wb.data,
                    f"kvlab sweep data/experiments/{sharing_experiment}.yaml",
                )
            )
        )
    else:
        # the bullets below and the figure give each point: the table is one click away
        out.add(
            tables.folded(
                narrative.sharing_table(r["sharing_points"].to_dicts(), block_tokens),
                "Cache-hit rate, TTFT and batch time per shared fraction",
            )
        )
        out.add(
            wb.show(
                plots.prefix_sharing_figure(sharing, threshold, block_tokens, gain=gain, min_gain=min_gain),
                narrative.prefix_sharing_caption(sharing.to_dicts(), compare_engines=False)
                + (" " + narrative.caching_gain_caption(gain.to_dicts(), r["thresholds"]) if gain.height else ""),
                data=r["sharing_figure"],
            )
        )
        out.add(Markdown(narrative.hit_rate_sentence(sharing.to_dicts())))
    return out


def radix_vs_paged(r: StudyResult, wb) -> Section:
    """Radix tree vs paged blocks (measured, cache on)."""
    block_tokens = r.parameters["block_tokens"]
    sharing = r["sharing"]
    out = Section()
    if not sharing.is_empty():
        out.add(Markdown(narrative.radix_vs_paged_sentence(r["radix_pairs"], block_tokens)))
        out.add(Markdown(narrative.reuse_sentences(r["reuse"].to_dicts())))
    return out


def vllm_sharing(r: StudyResult, wb) -> Section:
    """Does vLLM share prefixes?."""
    sharing = r["sharing"]
    out = Section()
    out.add(Markdown(narrative.prefix_claim_verdict(sharing.to_dicts())))
    return out


def threshold(r: StudyResult, wb) -> Section:
    """What the cache buys, and the 30% threshold."""
    gain = r["gain"]
    out = Section()
    if gain.is_empty():
        out.add(
            Markdown(
                "*No shared fraction was measured with the prefix cache both on and off: the threshold cannot"
                " be tested here.*"
            )
        )
    else:
        out.add(
            tables.folded(narrative.gain_table(r["gain_points"].to_dicts()), "What the cache buys per shared fraction")
        )
        for engine, threshold_found in r["thresholds"].items():
            out.add(
                Markdown(
                    f"**{engine_label(engine)}**\n\n"
                    + narrative.threshold_sentence(threshold_found, r["gain_by_engine"][engine])
                )
            )
    return out


def multi_turn(r: StudyResult, wb) -> Section:
    """Multi-turn RAG: each turn reuses the history."""
    multi_turn_experiment = r.parameters["multi_turn_experiment"]
    by_turn = r["by_turn"]
    out = Section()
    if by_turn.is_empty():
        out.add(
            Markdown(
                narrative.no_runs_note(
                    f"runs of `{multi_turn_experiment}`",
                    wb.data,
                    f"kvlab sweep data/experiments/{multi_turn_experiment}.yaml",
                )
            )
        )
    else:
        out.add(tables.folded(narrative.turns_table(r["turn_points"].to_dicts()), "Per turn, cache on and off"))
        out.add(
            wb.show(
                plots.multi_turn_figure(by_turn, r["turn_requests"]),
                narrative.multi_turn_caption(by_turn.to_dicts()),
                data=by_turn.drop("hardware"),
            )
        )
        out.add(Markdown(narrative.multi_turn_sentence(by_turn.to_dicts())))
    return out


def conclusions(r: StudyResult, wb) -> Section:
    """Conclusions (computed from the results above)."""
    out = Section()
    out.add(Markdown(r["conclusions"]))
    return out
