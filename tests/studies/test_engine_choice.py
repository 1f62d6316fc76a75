"""Report 06 (kvlab/studies/engine_choice/): its typed result, its answer about the workbook's own question beside
the article's three examples, and captions that name a faster engine only where the verdict allows it."""

from __future__ import annotations

import json

import polars as pl
import pytest
from prefix_frames import conc_runs

from kvlab import guide, reports, studies
from kvlab.studies.engine_choice import EngineChoiceResult, words
from kvlab.studies.engine_choice.checks import Inputs, claim_verdicts, recommendation_verdict
from kvlab.studies.engine_choice.frames import concurrency_study
from kvlab.verdicts import Verdict

ENGINE_NAMES = ("vLLM", "SGLang", "sglang-jax")


@pytest.fixture(scope="module")
def result(fixture_data):
    nb = reports.notebooks(["06"])[0]
    return studies.compute_report("06", fixture_data, reports._defaults(nb) | {"curve_points": 8})


def _undecided(claim_id: str) -> Verdict:
    return Verdict("q", "cannot be tested here", "measured", "", claim_id=claim_id)


def test_the_result_round_trips_through_its_json(result):
    assert isinstance(result, EngineChoiceResult)
    back = EngineChoiceResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back.to_json() == result.to_json()
    assert back.curves.equals(result.curves) and back.evidence == result.evidence


def test_the_notebook_asks_the_reference_hosts_question():
    """Drift item: the defaults are the workbook's question (Kimi-K3 on 8× B300 at 64K–200K), not a template's."""
    defaults = reports._defaults(reports.notebooks(["06"])[0])
    assert {k: defaults[k] for k in ("model", "gpu", "tp", "dcp", "context_low_tokens", "context_tokens")} == {
        "model": "Kimi-K3",
        "gpu": "B300",
        "tp": 8,
        "dcp": 8,
        "context_low_tokens": 65536,
        "context_tokens": 204800,
    }
    assert (defaults["shared_fraction"], defaults["concurrency"]) == (0.0, 8)


def test_the_answer_opens_with_the_question_and_the_three_examples(result):
    first, second, third = result.answer.sentences
    assert first == (
        "For the reference host's question (Kimi-K3 on 8× B300, 64K–200K tokens, distinct prompts, 8 in flight) the "
        "article's decision tree says vLLM; for its three examples it gives SGLang (multi-turn RAG), vLLM (batch "
        "classification) and vLLM (reasoning, where the article says SGLang)."
    ) or first.startswith("For the reference host's question (Kimi-K3 on 8× B300, 64K–200K tokens")
    assert "64K–200K" in first and all(w in first for w in ("multi-turn RAG", "batch classification", "reasoning"))
    # the modelled crossover with its range over the assumption sets, never a point alone
    lo, hi = result.x_range
    assert f"{lo / 1024:.0f}K–{hi / 1024:.0f}K tokens" in second and "picks no engine at 64K or 200K" in second
    assert third == "Whether the data here agree with the tree: not decidable on this host."
    table = result.answer.table
    assert table["workload"].to_list()[0] == "the reference host's question"
    assert table["the tree says"].to_list() == ["vLLM", "SGLang", "vLLM", "vLLM"]
    assert set(table["evidence"]) == {"published"}


def test_the_verdicts_on_the_fixture(result):
    assert [(v.claim_id, v.outcome, v.value, v.n) for v in result.verdicts[:5]] == [
        ("vllm_no_prefix_sharing", "inconclusive", pytest.approx(7 / 9), 1),
        ("sglang_radix_sharing", "inconclusive", pytest.approx(0.449901, abs=1e-6), 1),
        ("shared_prefix_threshold", "cannot be tested here", pytest.approx(18.506001, abs=1e-6), 1),
        ("high_concurrency", "cannot be tested here", None, 1),
        # distinct prompts, 8 in flight: the concurrency comparison speaks to it, 128 in flight only (no baseline)
        ("engine_choice_recommendation", "cannot be tested here", None, 1),
    ]
    assert result.verdicts[4].claim.startswith("For Kimi-K3 on 8× B300, 64K–200K tokens, distinct prompts")


def test_every_modelled_crossover_printed_carries_its_range(result):
    x, xr = result.x_model, result.x_range
    w = result.workload
    texts = [
        words.curves_caption(w.model, w.gpu, w.tp, [65536, 204800], x, xr, [None, None]),
        *(words.context_line(f, result.question_points.to_dicts(), x, xr) for f in result.context_factors),
        *result.answer.sentences,
    ]
    for t in texts:
        if "≈" in t:
            assert f"{xr[0] / 1024:.0f}K–{xr[1] / 1024:.0f}K" in t, t
    # the modelled batch times at the contexts asked, each with its band
    line = words.context_line(result.context_factors[1], result.question_points.to_dicts(), x, xr)
    assert line.count("–") >= 2 and "picks no engine" in line and "faster" not in line


def test_captions_name_no_winner_where_the_verdict_does_not_decide(sharing):
    """Drift item: with the threshold and concurrency claims 'cannot be tested here', the figures' captions and the
    factor lines give both engines' numbers and the undecided label, never a faster engine."""
    conc = concurrency_study(conc_runs())
    prefix = words.prefix_caption(sharing.to_dicts(), _undecided("shared_prefix_threshold"))
    conc_text = words.concurrency_caption(conc.to_dicts(), _undecided("high_concurrency"))
    assert prefix.endswith("Which engine finishes the batch first: not decidable on this host.")
    assert conc_text.endswith("Which engine serves more requests/s: not decidable on this host.")
    ev = guide.from_evidence(guide.UserWorkload(8192, 0.4, 128, "Llama-3.1-8B"), guide_fit(), sharing, conc)
    lines = [words.factor_line(f) for f in ev.factors]
    for text in (prefix, conc_text, *lines):
        assert not any(w in text for w in ("faster", "sooner", "× the throughput", "Favours")), text
    decided = Verdict("q", "reproduced", "measured", "", claim_id="high_concurrency")
    assert "× the throughput" in words.concurrency_caption(conc.to_dicts(), decided)


def guide_fit():
    from kvlab.perfmodel import published_fit

    return published_fit()


def test_the_recommendation_says_each_thing_once(result, sharing):
    """Drift item: the recommendation no longer re-pastes the factor lines; nothing in it is said twice."""
    from kvlab import prose
    from kvlab.markup import markdown_inline

    r = result
    parts = [
        *r.answer.sentences,
        words.evidence_rule(),
        words.tree_caption(r.tree),
        *(words.context_line(f, r.question_points.to_dicts(), r.x_model, r.x_range) for f in r.context_factors),
        words.model_reason(r.context_factors[-1]),
        *(words.factor_line(f) for f in r.evidence.factors[1:]),
        words.prefix_caption(r.sharing.to_dicts(), r.verdict("shared_prefix_threshold")),
        words.concurrency_caption(r.concurrency.to_dicts(), r.verdict("high_concurrency")),
        words.concurrency_lines(r.concurrency.to_dicts()),
        words.tree_sentence(r.tree),
        words.recommendation_sentence(r.workload, r.tree, r.evidence, r.sharing.to_dicts()),
        words.gap_sentence(r.evidence) or "",
    ]
    page = "".join(f"<p>{markdown_inline(line)}</p>" for p in parts for line in p.splitlines() if line.strip())
    found = prose.problems(page)
    assert not found.long_sentences and not found.repeated, str(found)


def test_the_checks_by_claim_kind(fit, sharing):
    from kvlab import store
    from kvlab.paths import DATA_DIR

    claims = store.load_claims(DATA_DIR).filter(pl.col("experiment") == "article_kv_design")
    conc = concurrency_study(conc_runs())
    got = claim_verdicts(claims, Inputs(sharing, conc))
    assert [(v.claim_id, v.outcome, v.value, v.n) for v in got] == [
        ("vllm_no_prefix_sharing", "inconclusive", pytest.approx(26880 / 32512), 1),
        ("sglang_radix_sharing", "inconclusive", got[1].value, 1),
        ("shared_prefix_threshold", "cannot be tested here", 2.0, 1),  # vLLM 2 s, sglang-jax 4 s at 0% shared
        ("high_concurrency", "cannot be tested here", None, 1),  # one load, 128: none below the 100
    ]
    w = guide.UserWorkload(8192, 0.4, 128, "Llama-3.1-8B")
    rec = recommendation_verdict(w, w.tree(), guide.from_evidence(w, fit, sharing, conc))
    assert (rec.outcome, rec.value, rec.n) == ("cannot be tested here", 2.0, 1)
    none = claim_verdicts(claims, Inputs(sharing.head(0), conc.head(0)))
    assert [v.outcome for v in none] == ["cannot be tested here"] * 4
