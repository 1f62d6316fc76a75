"""Computed sentences and verdicts: what they say for fixed frames (the article's table, fixed measured runs)."""

import polars as pl

from kvlab import words, store
from kvlab.studies import sharing_frames


RUNS = store.load_runs()
PUB = RUNS.filter((pl.col("source") == "published") & (pl.col("experiment") == "article_b300"))
CLAIMS = store.load_claims().filter(pl.col("experiment") == "article_b300")


# reports 01 and 02 (context scaling, throughput decay): tests/studies/test_context_scaling.py and
# tests/studies/test_throughput_decay.py


# --------------------------------------------------------------------------- reports 05 and 06: two measured engines
# (tests/prefix_frames.py: vLLM's paged blocks against sglang-jax's radix tree)


def test_stand_in_note_only_with_sglang_jax_runs(sharing):
    note = words.stand_in_note(sharing_frames.engines_in(sharing))
    assert note.startswith("**sglang-jax (CPU) is not PyTorch SGLang.** It is SGLang's JAX runtime")
    assert "never as 0" in note
    assert (
        words.stand_in_note(sharing_frames.engines_in(sharing.filter(pl.col("engine") == "vllm"), pl.DataFrame()))
        is None
    )


def test_bound_sentence_gives_measured_shares_to_two_significant_figures():
    """Report 04's 'against the limit': each measured share rests on one run (two significant figures); the
    published ones keep their decimal."""
    frac = pl.DataFrame(
        {
            "source": ["published", "published", "measured", "measured", "measured"],
            "hardware": ["B300", "B300", "CPU", "CPU", "CPU"],
            "batch_fraction_of_bound": [0.0123, 0.0456, 0.01234, 0.2567, 0.0567],
            "bandwidth_fraction_of_peak": [0.088, 0.091, None, None, None],
        }
    )
    from kvlab.studies.whatif_model.words import bound

    assert bound(frac).splitlines() == [
        "- Published: the article's runs reached 1.2%–4.6% of the model's bound; decode read memory at 8.8%–9.1% of "
        "peak bandwidth.",
        "- Measured on this host (3 runs): 1.2%–26% of a bound from the catalog's nominal CPU figures. Compare these "
        "runs with each other, not with a GPU.",
    ]
