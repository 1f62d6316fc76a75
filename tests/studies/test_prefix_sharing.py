"""Report 05 (kvlab/studies/prefix_sharing/): its typed result, its checks by claim kind, and words that name a
shape, a direction or a winner only where the verdict they speak to decides."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest
from prefix_frames import sharing_runs

from kvlab import reports, studies
from kvlab.studies.prefix_sharing import PrefixSharingResult, frames, words
from kvlab.studies.prefix_sharing.checks import Inputs, _shape, verdicts
from kvlab.studies.sharing_frames import cache_share_verdicts, prefix_sharing
from kvlab.verdicts import Verdict
from kvlab.studies.prefix_sharing import frames as prefix_sharing_frames
from kvlab.studies import sharing_frames

ENGINES = ("vLLM", "sglang-jax", "SGLang")


@pytest.fixture(scope="module")
def result(fixture_data):
    nb = reports.notebooks(["05"])[0]
    return studies.compute_report("05", fixture_data, reports._defaults(nb))


def _inputs(s, reuse="reuse"):
    return Inputs(s["sharing"], s["gain"], s["thresholds"], s["by_turn"], s.get(reuse), 0.3)


def _undecided(claim_id: str) -> Verdict:
    return Verdict("q", "inconclusive", "measured", "", claim_id=claim_id, limit="fewer than 3 repeats")


def _decided(claim_id: str) -> Verdict:
    return Verdict("q", "found", "measured", "", claim_id=claim_id)


def test_the_result_round_trips_through_its_json(result):
    assert isinstance(result, PrefixSharingResult)
    back = PrefixSharingResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back.to_json() == result.to_json()
    assert back.sharing.equals(result.sharing) and back.by_turn.equals(result.by_turn)
    assert back.thresholds == result.thresholds


def test_the_fixture_verdicts_and_answer(result):
    assert [(v.claim_id, v.outcome, v.n) for v in result.verdicts] == [
        ("vllm_no_prefix_sharing", "inconclusive", 1),
        ("sglang_radix_sharing", "inconclusive", 1),
        ("sglang_radix_suffix", "inconclusive", 1),
        ("shared_prefix_threshold", "cannot be tested here", 1),
        ("shared_prefix_threshold_jump", "inconclusive", 1),
        ("multi_turn_reuse", "inconclusive", 1),
    ]
    assert result.verdict("vllm_no_prefix_sharing").value == pytest.approx(7 / 9)
    assert result.verdict("shared_prefix_threshold").value == pytest.approx(18.506001, abs=1e-6)
    assert result.answer.sentences[1] == (
        'So the article\'s "vLLM shares no prefixes" is inconclusive here and its "SGLang shares a common prefix" '
        "is inconclusive."
    )


def test_checks_grade_each_claim_by_its_kind(study):
    found = verdicts(study["claims"], _inputs(study))
    assert [(v.claim_id, v.outcome, v.kind, v.family) for v in found] == [
        ("vllm_no_prefix_sharing", "inconclusive", "prefix_sharing", "document"),
        ("sglang_radix_sharing", "inconclusive", "prefix_sharing", "document"),
        ("sglang_radix_suffix", "inconclusive", "prefix_sharing", "document"),
        ("shared_prefix_threshold", "cannot be tested here", "engine_choice", "document"),
        ("shared_prefix_threshold_jump", "inconclusive", "prefix_sharing", "own"),
        ("multi_turn_reuse", "inconclusive", "prefix_sharing", "own"),
    ]
    assert found[2].value == 1.0 and found[2].unit == "fraction of the requests that could reuse the prefix"
    assert found[2].number == (
        "12 of the 12 requests sent after each run's first wave reused the 1,829-token prefix at 90% shared; none of "
        "the 4 sent together first (before it could be cached)"
    )
    assert (found[3].value, found[3].n) == (2.0, 1)
    assert found[5].number == "turn 2: vLLM 94%, TTFT off ÷ on 4.0×; sglang-jax (CPU) 97%, TTFT off ÷ on 4.0×"
    # without per-request counts the suffix claim rests on the hit rate against the token-exact ideal
    no_reuse = verdicts(study["claims"], _inputs(study, reuse="none"))
    assert no_reuse[2].number == (
        "84% of prompt tokens from the cache at 90% shared against 84% if every request after the first reused it"
    )
    # three runs a point: the hit shares decide (vLLM's cache serves 83% against 0% off in every run)
    runs3 = pl.concat([sharing_runs().with_columns(pl.col("run_id") + f"-{k}") for k in range(3)])
    three = cache_share_verdicts(study["claims"], prefix_sharing(runs3))
    assert [(v.claim_id, v.outcome, v.n) for v in three] == [
        ("vllm_no_prefix_sharing", "contradicted", 3),
        ("sglang_radix_sharing", "reproduced", 3),
    ]
    assert three[0].value == pytest.approx(26880 / 32512)
    empty = Inputs(study["sharing"].clear(), study["gain"].clear(), {}, pl.DataFrame(), None, 0.3)
    assert [v.outcome for v in verdicts(study["claims"], empty)] == ["cannot be tested here"] * 4


def test_the_cache_share_claim_is_graded_once_for_both_reports(study):
    """vllm_no_prefix_sharing: one checker (kvlab.studies.sharing_frames), the same verdict on both pages."""
    from kvlab.studies.engine_choice.checks import Inputs as ChoiceInputs
    from kvlab.studies.engine_choice.checks import claim_verdicts

    five = verdicts(study["claims"], _inputs(study))
    six = claim_verdicts(study["claims"], ChoiceInputs(study["sharing"], pl.DataFrame()))
    assert five[0] == six[0] and five[1] == six[1]


def test_a_threshold_whose_saving_falls_across_it_is_not_called_a_jump():
    gain = pl.DataFrame(
        {"engine": ["vllm"] * 4, "shared_fraction": [0.0, 0.2, 0.5, 0.9], "time_saved": [0.02, 0.11, -0.15, 0.40]}
    )
    th = frames.sharing_threshold(gain)
    assert th.verdict == "threshold"
    assert "it rises more steeply from 30% up than below" in _shape(gain, th)
    said = words.threshold_lines(th, gain.to_dicts(), _decided("shared_prefix_threshold_jump"))
    assert "jumps" not in said and "it falls between 20% and 50% shared (+11% → −15%)" in said
    caption = words.gain_caption(
        gain.with_columns(batch_speedup=pl.lit(1.0)).to_dicts(),
        {"vllm": th},
        _decided("shared_prefix_threshold_jump"),
    )
    assert "the saving falling from +11% at 20% to −15% at 50%" in caption and "jumping" not in caption


def test_two_engines_with_the_same_numbers_say_no_line_twice():
    """On a fresh clone's runs (2026-12-07) both engines' caches saved time from 0% shared up, and the page said
    "the cache saves time at every measured fraction from 0% shared up." twice: each engine's lines name it."""
    gain = pl.DataFrame({"shared_fraction": [0.0, 0.2, 0.5, 0.9], "time_saved": [0.01, 0.05, 0.12, 0.40]})
    jump = _decided("shared_prefix_threshold_jump")
    said = {
        e: words.threshold_lines(
            frames.sharing_threshold(gain.with_columns(engine=pl.lit(e))), gain.to_dicts(), jump, e
        )
        for e in ("vLLM", "SGLang")
    }
    assert "- vLLM's cache saves time at every measured fraction from **0% shared** up." in said["vLLM"]
    # the lines without a measured number in them (two runs rarely measure the same savings to the digit)
    plain = [line for text in said.values() for line in text.splitlines() if "→" not in line]
    assert len(plain) == 4 and len(set(plain)) == 4


def test_a_falling_saving_is_never_called_a_rise():
    falls = pl.DataFrame(
        {
            "engine": ["sglang"] * 4,
            "shared_fraction": [0.0, 0.2, 0.5, 0.9],
            "time_saved": [0.066, -0.032, 0.039, -2.05],
            "batch_speedup": [1.07, 0.97, 1.04, 0.33],
        }
    )
    th = frames.sharing_threshold(falls)
    assert th.verdict == "smooth" and frames.saving_trend(falls) == "fall"
    jump = _decided("shared_prefix_threshold_jump")
    assert "falling with no jump" in words.gain_caption(falls.to_dicts(), {"sglang": th}, jump)
    assert "the saving falls as the shared fraction grows" in words.threshold_lines(th, falls.to_dicts(), jump)


def test_an_undecided_jump_question_names_no_shape(study):
    """Drift item: a caption or sentence naming the 30% threshold's shape as a finding asks the jump verdict; where
    it is inconclusive the words give the measurement and the verdict's label, never 'no jump' or 'jumps'."""
    jump = _undecided("shared_prefix_threshold_jump")
    caption = words.gain_caption(study["gain"].to_dicts(), study["thresholds"], jump)
    lines = [
        words.threshold_lines(th, study["gain"].filter(pl.col("engine") == e).to_dicts(), jump)
        for e, th in study["thresholds"].items()
    ]
    for text in (caption, *lines):
        assert "jump at the threshold: inconclusive: fewer than 3 repeats" in text or "inconclusive" in text
        assert "no jump" not in text.replace("Whether the saving jumps", "") and "**The saving jumps" not in text
    assert caption.endswith("Whether the saving jumps at the threshold: inconclusive: fewer than 3 repeats.")


def test_the_vllm_section_says_the_claims_fate_only_where_its_verdict_decides(study):
    rows = study["sharing"].to_dicts()
    undecided = words.vllm_sharing(_undecided("vllm_no_prefix_sharing"), rows)
    assert "does not hold" not in undecided and "agree with the claim" not in undecided
    assert "**inconclusive: fewer than 3 repeats**" in undecided
    # vLLM's hit rate beside vLLM's own ideal (whole blocks), never SGLang's token-exact one
    top = max((r for r in rows if r["engine"] == "vllm" and r["prefix_caching"]), key=lambda r: r["shared_fraction"])
    assert f"(whole-block ideal {top['block_ideal_hit_rate']:.0%})" in undecided
    decided = dataclasses.replace(_decided("vllm_no_prefix_sharing"), outcome="contradicted")
    assert "**The claim does not hold for current vLLM**" in words.vllm_sharing(decided, rows)


def test_captions_name_no_engine_as_faster(study):
    """The radix-vs-paged lines and the hit-rate caption give both engines' numbers, never a winner."""
    engine, pairs = frames.radix_pairs_frame(study["sharing"])
    text = words.radix_vs_paged(engine, pairs.to_dicts()) + words.hit_rates_caption(study["sharing"].to_dicts())
    assert not any(w in text for w in ("faster", "sooner", " more of the prompt"))
    assert "The hit rates differ most at" in text


def test_ideal_caption_and_tables(study):
    ideal = frames.ideal_sharing(1008, 8, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9], 128)
    assert words.ideal_reuse_caption(ideal.to_dicts(), 1008, 8, 128, 0.3) == (
        "Modelled for 8 requests of 1,008 tokens: a token-exact cache serves at most 79% of prompt tokens at 90% "
        "shared, on a straight line (shared fraction × 7/8) with no step at the article's 30%. Whole 128-token blocks "
        "fall short of it by up to 10.4 percentage points (33% against 44% at 50% shared)."
    )
    t = words.sharing_table(frames.sharing_points(study["sharing"]).to_dicts())
    assert t.rows[3][:5] == ["vLLM", "90", "1,829", "82.7", "84.4"]
    g = words.gain_table(frames.gain_points(study["gain"]).to_dicts())
    assert [r[3:] for r in g.rows[:4]] == [
        ["1.0", "1.0", "0"],
        ["1.2", "1.2", "14"],
        ["1.5", "1.5", "33"],
        ["3.0", "3.0", "66"],
    ]
    assert len(words.claims_table(study["claims"].to_dicts()).rows) == 4


def test_the_frames_match_the_old_analysis_functions(study):
    """The copies in the study folder compute what kvlab.analysis computes (the originals go once all studies moved)."""
    assert frames.caching_gain(study["sharing"]).equals(prefix_sharing_frames.caching_gain(study["sharing"]))
    assert prefix_sharing(sharing_runs()).equals(sharing_frames.prefix_sharing(sharing_runs()))


def test_the_page_keeps_the_prose_limits(result):
    """No sentence over 45 words or said twice in what the study's own words produce on the fixture data."""
    from kvlab import prose
    from kvlab.markup import markdown_inline

    r = result
    jump = r.verdict("shared_prefix_threshold_jump")
    parts = [
        *r.answer.sentences,
        words.citation_note(r.prefix_claims.to_dicts()),
        words.ideal_reuse_caption(r.ideal.to_dicts(), r.ideal_prompt_tokens, r.ideal_requests, r.block_tokens, 0.3),
        words.hit_rates_caption(r.sharing.to_dicts()) + " " + words.gain_caption(r.gain.to_dicts(), r.thresholds, jump),
        words.hit_sources(r.sharing.to_dicts()),
        words.radix_vs_paged(r.radix_engine, r.radix_pairs.to_dicts()),
        words.reuse_sentences(r.reuse.to_dicts()),
        words.vllm_sharing(r.verdict("vllm_no_prefix_sharing"), r.sharing.to_dicts()),
        *[
            words.threshold_lines(t, r.gain.filter(pl.col("engine") == e).to_dicts(), jump)
            for e, t in r.thresholds.items()
        ],
        words.multi_turn_caption(r.by_turn.to_dicts(), r.verdict("multi_turn_reuse")),
        words.multi_turn_lines(r.by_turn.to_dicts()),
        words.conclusions(r.verdicts, True),
    ]
    page = "".join(f"<p>{markdown_inline(line)}</p>" for p in parts for line in p.splitlines() if line.strip())
    found = prose.problems(page)
    assert not found.long_sentences and not found.repeated, str(found)
