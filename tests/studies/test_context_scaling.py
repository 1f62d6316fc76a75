"""Report 01 in its folder (kvlab/studies/context_scaling/): its verdicts on fixed frames (the article's table, fixed
measured runs), its typed result's JSON round trip, and the words and figures drawn from its verdicts (issue 53: no
winner where the verdict does not decide, CPU contexts by their real tokens, a batch over its KV pool said beside
the growth, the set-up's DCP sizes from the article's prose, the model's crossover always with its range, and the
page within the prose limits)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kvlab import reports, store, studies, verdicts
from kvlab.studies.context_scaling import ContextScalingResult, checks, page, words
from kvlab.studies.context_scaling.figures import batch_time_bars
from kvlab.studies.context_scaling.frames import ModelCrossover, batch_time_growth
from kvlab.studies.measured_frames import (
    POOL_UNKNOWN,
    context_name,
    decay_factors,
    pool_excesses,
    pool_fit,
    pool_note,
    with_context_names,
)
from kvlab.studies import measured_frames

RUNS = store.load_runs()
PUB = RUNS.filter((pl.col("source") == "published") & (pl.col("experiment") == "article_b300"))
CLAIMS = store.load_claims().filter(pl.col("experiment") == "article_b300")
NOTEBOOK = Path(__file__).parents[2] / "notebooks" / "01_context_scaling.ipynb"
#: A verdict the evidence here cannot decide (CPU runs of two engine implementations).
UNDECIDED = verdicts.Verdict("x", "cannot be tested here", "measured", "", limit="CPU runs", family="document")


def measured_runs(times, pool=(None, None, None, None)):
    """Measured runs (vllm, sglang-jax) at 64K/200K scaled to 1,024/3,200 tokens, batch 4, with the given batch
    times and KV pools (tokens; None: not recorded)."""
    keys = [("vllm", "64K", 1024), ("sglang-jax", "64K", 1024), ("vllm", "200K", 3200), ("sglang-jax", "200K", 3200)]
    return pl.DataFrame(
        {
            "source": "measured",
            "experiment": "cpu_long_context",
            "hardware": "CPU",
            "engine": [k[0] for k in keys],
            "context_label": [k[1] for k in keys],
            "context_tokens": [k[2] for k in keys],
            "batch_time_s": list(times),
            "status": "ok",
            "batch_size": 4,
            "output_tokens": 64,
            "scale_factor": 64.0,
            "prompt_tokens": [k[2] - 64 for k in keys],
            "kv_pool_tokens": pl.Series(list(pool), dtype=pl.Int64),
        }
    )


@pytest.fixture(scope="module")
def result(fixture_data) -> ContextScalingResult:
    return studies.compute_report("01", fixture_data, reports._defaults(NOTEBOOK))


def test_the_result_is_typed_and_its_json_reads_back_to_the_same_result(result):
    assert isinstance(result, ContextScalingResult) and result.report == "01_context_scaling"
    data = json.loads(json.dumps(result.to_json()))
    back = ContextScalingResult.from_json(data)
    assert back.to_json() == result.to_json()
    assert back.measured_means.equals(result.measured_means) and back.relative.equals(result.relative)
    assert back.model == result.model and back.estimates == result.estimates
    assert result.speed_claims == {"64K": "speedup_64K", "200K": "speedup_200K"}
    assert (result.model.lo, result.model.hi) == (pytest.approx(110224.0, abs=0.01), pytest.approx(764133.0, abs=0.01))


def test_speed_claims_against_the_table_and_on_this_host():
    rel = measured_frames.relative_speed(PUB)
    rel_m = measured_frames.relative_speed(measured_runs([1.0, 2.0, 4.0, 3.0]), "vllm", "sglang-jax")
    got = checks.speed_verdicts(CLAIMS, rel, rel_m, {"sglang": "sglang-jax"})
    assert [(v.claim_id, v.outcome, v.evidence, round(v.value, 2), v.n) for v in got] == [
        ("speedup_64K", "consistent", "published", 1.5, 2),
        ("speedup_64K", "cannot be tested here", "measured", 2.0, 1),  # sglang-jax 2 s ÷ vLLM 1 s at 64K
        ("speedup_200K", "consistent", "published", 1.31, 2),
        ("speedup_200K", "cannot be tested here", "measured", 1.33, 1),  # vLLM 4 s ÷ sglang-jax 3 s at 200K
    ]
    slow = measured_frames.relative_speed(measured_runs([1.0, 2.0, 1.0, 14.0]), "vllm", "sglang-jax")
    last = checks.speed_verdicts(CLAIMS, rel, slow, {"sglang": "sglang-jax"})[-1]
    assert (last.outcome, last.value, last.unit) == ("cannot be tested here", 1 / 14, "×")
    assert last.number.startswith("vLLM already 2.0× faster at 1,024 tokens (stands in for 64K)")


def test_the_interpolated_crossover_carries_the_models_range_and_the_measured_one_is_own():
    pub = [measured_frames.crossover(PUB, method=m) for m in ("linear", "power")]
    (v,) = checks.crossover_published(pub, (110224.0, 764133.0))
    assert v.number == (
        "121K–127K tokens by two-point interpolation (linear, power); not pinned: 108K–746K over the model's "
        "assumption sets"
    )
    assert (v.outcome, v.spread) == ("found", (pytest.approx(123813.7, abs=0.1), pytest.approx(129875.28, abs=0.1)))
    meas = [measured_frames.crossover(measured_runs([1.0, 2.0, 4.0, 3.0]), "vllm", "sglang-jax", method="linear")]
    (m,) = checks.crossover_measured(meas)
    assert (m.number, m.outcome, m.family) == ("yes, at ≈2,112 tokens (linear)", "cannot be tested here", "own")


def test_no_caption_or_sentence_names_a_winner_its_verdict_does_not_allow():
    """Issue 53 item 1: 01's Figure 2 said 'vLLM wins at every context' under a verdict 'cannot be tested here'."""
    rel_m = with_context_names(
        measured_frames.relative_speed(measured_runs([0.43, 2.1, 1.0, 14.0]), "vllm", "sglang-jax")
    )
    rows = rel_m.to_dicts()
    cap = words.speed_caption(rows, "measured", lambda _: UNDECIDED, UNDECIDED)
    assert cap == (
        "Measured: at 1,024 tokens (stands in for 64K): vLLM 0.43 s, sglang-jax (CPU) 2.1 s (not decidable on this "
        "host). At 3,200 tokens (stands in for 200K): vLLM 1.0 s, sglang-jax (CPU) 14 s (not decidable on this host)."
    )
    said = words.relative_speed_sentences(rows, "measured", lambda _: UNDECIDED, UNDECIDED)
    x = measured_frames.crossover(measured_runs([0.43, 2.1, 1.0, 14.0]), "vllm", "sglang-jax")
    said += words.crossover_sentence(x, "measured", UNDECIDED)
    for text in (cap, said):
        assert not any(w in text for w in ("faster", "wins", "winner")), text
    # where the verdicts decide (the published table, consistent; the interpolation, found), the winner is named
    rel = measured_frames.relative_speed(PUB).to_dicts()
    decided = verdicts.Verdict("x", "consistent", "published", "", family="consistency")
    found = verdicts.Verdict("x", "found", "published", "")
    assert words.speed_caption(rel, "published", lambda _: decided, found) == (
        "Published: vLLM is 1.50× faster at 64K. SGLang is 1.31× faster at 200K. The winner changes with context."
    )
    assert "the winner changes" not in words.speed_caption(rel, "published", lambda _: decided, UNDECIDED)


def test_the_fixture_pages_measured_captions_name_no_winner(result, fixture_data):
    wb, r = studies.notebook("01", {"data_dir": str(fixture_data)})
    shown = page.measured(r, wb)
    captions = [item.caption for item in shown if hasattr(item, "fig")]  # the figures' captions
    assert len(captions) == 2 and "not decidable on this host" in captions[0]
    assert not any(w in c for c in captions for w in ("faster", "wins", "winner")), captions


def test_cpu_runs_are_labelled_by_their_real_tokens():
    """Issue 53 item 2: the CPU runs at 1,024 and 3,200 tokens were labelled '64K' and '200K'."""
    assert context_name("64K", 1024) == "1,024 tokens (stands in for 64K)"
    assert context_name("64K", 65536) == "64K"  # a full-scale run keeps its label
    assert context_name("3000", 3000) == "3,000 tokens"  # a bare count, as a reader reads it
    means = with_context_names(
        measured_frames.relative_speed(measured_runs([1.0, 2.0, 4.0, 3.0]), "vllm", "sglang-jax")
    )
    assert means["context"].to_list() == ["1,024 tokens (stands in for 64K)", "3,200 tokens (stands in for 200K)"]
    from kvlab.studies.measured_frames import mean_batch_times

    ax = batch_time_bars(mean_batch_times(measured_runs([1.0, 2.0, 4.0, 3.0]))).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "1,024 tokens\n(stands in for 64K)",
        "3,200 tokens\n(stands in for 200K)",
    ]


def test_a_growth_where_the_batch_exceeds_the_kv_pool_says_so():
    """Issue 53 item 4: at 0.92 a batch of 4 × 3,200 tokens exceeds both KV pools (12,101 and 12,288 tokens), so
    the 4th request waits a whole wave; the growth is then not the engine's scaling."""
    runs = measured_runs([0.5, 1.0, 4.3, 8.6], pool=(12101, 12288, 12101, 12288))
    pool = pool_fit(runs)
    assert pool.select("engine", "context_tokens", "batch_tokens", "kv_pool_tokens", "fits_at_once", "fits").rows() == [
        ("sglang-jax", 1024, 4096, 12288, 12, True),
        ("sglang-jax", 3200, 12800, 12288, 3, False),
        ("vllm", 1024, 4096, 12101, 11, True),
        ("vllm", 3200, 12800, 12101, 3, False),
    ]
    over = pool_excesses(pool)
    assert [(x.engine, x.context, x.fits_at_once, x.batch_size) for x in over] == [
        ("sglang-jax", "3,200 tokens (stands in for 200K)", 3, 4),
        ("vllm", "3,200 tokens (stands in for 200K)", 3, 4),
    ]
    decay = decay_factors(runs).to_dicts()
    text = words.growth_comparison(decay, decay_factors(PUB).to_dicts(), over)
    assert text.splitlines()[1] == (
        "- measured: vLLM batch time grows **8.6×** from 1,024 tokens (stands in for 64K) to 3,200 tokens (stands in "
        "for 200K). vLLM's batch exceeded its KV pool at 3,200 tokens (stands in for 200K), so this growth is not "
        "vLLM's scaling."
    )
    assert text.count("KV pool at 3,200 tokens (stands in for 200K), so this growth is not") == 2
    assert "the article's" not in text  # not compared with the article as if it were the engine's scaling
    g = batch_time_growth(runs).to_dicts()
    assert "T ∝" not in words.growth_sentences(g, "measured", over)
    # a span the comparison above already gave, with no exponent to add, is not said again
    said = frozenset((d["engine"], d["context_from"], d["context_to"]) for d in decay)
    assert words.growth_sentences(g, "measured", over, said) == ""
    assert words.growth_caption(g, "measured", over).count("batch over its KV pool") == 2
    assert pool_note(over) == (
        "The batch exceeded the KV pool, so the growth there is the pool's waiting, not the engine's scaling with "
        "context. At 3,200 tokens (stands in for 200K), the KV pools of sglang-jax (CPU), 12,288 tokens, and vLLM, "
        "12,101 tokens, each hold 3 of the batch's 4 requests (12,800 tokens), so the rest wait for a wave."
    )
    # every batch fits at 0.95 (a larger pool): nothing to say, and the growth is compared with the article
    fits = pool_excesses(pool_fit(measured_runs([0.5, 1.0, 0.9, 1.8], pool=(20480,) * 4)))
    assert fits == () and pool_note(fits) == ""
    assert "the article's vLLM grew 2.94×" in words.growth_comparison(decay, decay_factors(PUB).to_dicts(), fits)


def test_the_fixture_runs_recorded_no_pool_and_the_page_says_so(result, fixture_data):
    assert result.pool["fits"].null_count() == result.pool.height and result.pool_excesses == ()
    wb, r = studies.notebook("01", {"data_dir": str(fixture_data)})
    assert any(getattr(m, "data", None) == POOL_UNKNOWN for m in page.growth(r, wb))


def test_the_set_up_check_quotes_the_articles_prose_not_its_table(result):
    """Issue 53 item 5: the DCP sizes are in the article's prose, not its table."""
    v = result.verdict("only_engine_changed")
    assert (v.outcome, v.value, v.number) == ("inconsistent", 8.0, "its prose: vLLM DCP 1; SGLang DCP 8")
    assert "own table" not in v.claim and "stated set-up" in v.claim


def test_the_models_crossover_is_never_printed_without_its_range(result):
    """Issue 53 item 6: the model crossover always with its range (108K–746K), never alone."""
    line = words.model_crossover_sentence(result.model)
    assert "**108K–746K**" in line and line.index("108K–746K") < line.index("≈173K")
    assert "108K–746K" in result.answer.sentences[1]
    v = result.verdict("crossover_modelled")
    assert v.number.startswith("108K–746K over the assumptions the article leaves open (≈173K under the defaults)")
    none = ModelCrossover(None, None, None, 4, 1.0, 2.0)
    assert words.model_crossover_sentence(none).startswith("- modelled: no crossover within the modelled range.")
