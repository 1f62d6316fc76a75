"""Report 02 in its folder (kvlab/studies/throughput_decay/): its verdicts on fixed frames, its typed result's JSON
round trip, and the words drawn from its verdicts (issue 53: 'holds up better' only where the shape verdict decides,
every count counting the list under it, CPU contexts by their real tokens, a batch over its KV pool said beside the
decay, and the page within the prose limits)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from kvlab import reports, store, studies, verdicts
from kvlab.studies.measured_frames import decay_factors, pool_excesses, pool_fit
from kvlab.studies.throughput_decay import ThroughputDecayResult, checks, frames, words
from kvlab.studies import measured_frames

RUNS = store.load_runs()
PUB = RUNS.filter((pl.col("source") == "published") & (pl.col("experiment") == "article_b300"))
CLAIMS = store.load_claims().filter(pl.col("experiment") == "article_b300")
NOTEBOOK = Path(__file__).parents[2] / "notebooks" / "02_throughput_decay.ipynb"
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
def result(fixture_data) -> ThroughputDecayResult:
    return studies.compute_report("02", fixture_data, reports._defaults(NOTEBOOK))


def test_the_result_is_typed_and_its_json_reads_back_to_the_same_result(result):
    assert isinstance(result, ThroughputDecayResult) and result.report == "02_throughput_decay"
    back = ThroughputDecayResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back.to_json() == result.to_json()
    assert back.decay_measured.equals(result.decay_measured) and back.stated == result.stated
    assert back.measured_contexts == ((("64K", 1024), ("200K", 3200)))


def test_decay_claims_against_the_table_and_the_measured_shape():
    check = measured_frames.consistency(PUB, CLAIMS)
    x = checks.Inputs(CLAIMS, check, decay_factors(PUB), decay_factors(measured_runs([1.0, 2.0, 4.0, 3.0])))
    got = checks.verdicts(x)
    assert [(v.claim_id, v.outcome, v.evidence, round(v.value, 2), v.n) for v in got] == [
        ("decay_vllm", "inconsistent", "published", 2.94, 2),
        ("decay_sglang", "inconsistent", "published", 1.49, 2),
        ("decay_vllm,decay_sglang", "consistent", "published", round(2.937 / 1.494, 2), 4),
        ("decay_vllm,decay_sglang", "cannot be tested here", "measured", 2.0, 1),  # vLLM 2× faster at 64K already
    ]
    assert got[0].number == "table: requests/s falls 2.94× from 64K to 200K (stated 3.29×)"
    assert got[-1].number == (
        "vLLM already 2.0× faster at 1,024 tokens (stands in for 64K); sglang-jax (CPU) falls 1.5×, vLLM 4.0× "
        "(1,024 → 3,200 tokens)"
    )


def test_every_count_counts_the_very_list_it_sits_above(result):
    """Issue 53 item 3: '2 claims: 2 inconsistent' sat above three rows, one consistent."""
    check = measured_frames.consistency(PUB, CLAIMS)
    stated = frames.stated_ratios(check)
    lines = words.consistency_sentences(stated).splitlines()
    ok = sum(line.startswith("- ✓") for line in lines)
    cap = words.claims_caption(stated, CLAIMS.to_dicts())
    assert cap.startswith(f"Published: {ok} of the article's {len(lines)} stated ratios match its own table")
    assert (ok, len(lines)) == (2, 4) and "2 ratios match under no definition checked" in cap
    # the verdict box's headline counts its rows: one consistent, two inconsistent (the shape row is its own)
    rows = [v for v in result.verdicts if v.family == "consistency"]
    head = verdicts.headline(list(result.verdicts))[1]
    assert [v.outcome for v in rows] == ["inconsistent", "inconsistent", "consistent"]
    assert "3 claims: 1 consistent and 2 inconsistent" in head
    assert result.answer.sentences[0].startswith("The article's own table does not give 2 decay factors it states")


def test_holds_up_better_only_where_the_shape_verdict_decides(result):
    """Issue 53 item 1: 02's Figure 3 said "vLLM's throughput holds up better" under 'cannot be tested here'."""
    m = decay_factors(measured_runs([0.43, 2.1, 1.0, 14.0])).to_dicts()
    for text in (
        words.decay_caption(m, "measured", "output tokens per second", UNDECIDED),
        words.decay_comparison(m, "measured", UNDECIDED),
    ):
        assert "not decidable on this host" in text
        assert not any(w in text for w in ("holds up", "ahead", "best", "most")), text
    shape = result.shape("published")
    assert verdicts.decides(shape)
    assert words.decay_caption(decay_factors(PUB).to_dicts(), "published", "batches per second", shape) == (
        "Published: from 64K to 200K, batches per second falls 2.94× for vLLM and 1.49× for SGLang — SGLang's "
        "throughput holds up better; the absolute lines cross (left): vLLM ahead at 64K, SGLang at 200K."
    )
    # the fixture's measured shape cannot be tested here: its page's measured caption names no engine as better
    assert not verdicts.decides(result.shape("measured"))


def test_cpu_contexts_by_their_real_tokens_and_the_kv_pool_beside_the_decay():
    """Issue 53 items 2 and 4."""
    runs = measured_runs([0.5, 1.0, 4.3, 8.6], pool=(12101, 12288, 12101, 12288))
    dec = decay_factors(runs).to_dicts()
    lines = words.decay_sentences(dec, "measured", pool_excesses(pool_fit(runs))).splitlines()
    assert lines[1].startswith(
        "- measured, vLLM: from 1,024 tokens (stands in for 64K) to 3,200 tokens (stands in for 200K) batch time "
        "grows **8.6×**"
    )
    # the pool's sentence follows each engine's own, after a full stop: no line reads as one long sentence
    assert lines[1].endswith(
        "falls 2.6×. At 3,200 tokens (stands in for 200K), vLLM's KV pool of 12,101 tokens holds 3 of the batch's 4 "
        "requests (12,800 tokens), so the rest wait for a wave."
    )
    assert all(". At 3,200 tokens (stands in for 200K), " in line for line in lines)
    assert words.decay_table(dec).rows[1][:2] == ["vLLM", "0.5"]
    assert words.measured_table_caption(0.92, 64.0, [("64K", 1024), ("200K", 3200)]) == (
        "memory utilisation 0.92; contexts scaled ÷64: 1,024 tokens (stands in for 64K), 3,200 tokens (stands in "
        "for 200K)"
    )


def test_consistency_table_states_each_decay_factor_with_its_direction():
    check = measured_frames.consistency(PUB, CLAIMS)
    rows = words.consistency_table(frames.stated_ratios(check), CLAIMS.to_dicts()).rows
    assert [r[3] for r in rows] == [
        "1.50",
        "1.33",
        "1.31",
        "1.24",
        "falls 2.94×",
        "rises 1.06×",
        "falls 1.49×",
        "rises 2.09×",
    ]
