"""The guide's evidence: which engine each factor favours, by how much, and what decides, from fixed frames.

The frames (tests/prefix_frames.py) hold vLLM (paged blocks) against sglang-jax (radix tree); the sentences
that say these facts are tested in test_narrative.py.
"""

from __future__ import annotations

import polars as pl
import pytest
from prefix_frames import conc_runs, repeated, sharing_runs

from kvlab import guide
from kvlab.studies.engine_choice import frames as engine_choice_frames
from kvlab.studies import sharing_frames


def test_prefix_factor_keeps_the_margin_and_the_runs(sharing):
    f = guide.prefix_factor(guide.UserWorkload(shared_fraction=0.4), sharing)
    assert (f.favours, f.winner, round(f.margin, 4), f.n_engines) == (
        None,
        None,
        round(2.5 / (2 * (1 - 0.8 * 13440 / 32512)), 4),
        2,
    )
    assert [(r["engine"], r["shared_fraction"]) for r in f.rows] == [("vllm", 0.5), ("sglang-jax", 0.5)]
    assert f.zero_ratio == 4.0 / 2.0  # with nothing to share: sglang-jax's 4 s over vLLM's 2 s
    # CPU runs of two implementations (rule 1): the lead is a baseline, never a choice; its value the 0%-shared ratio
    assert (f.grade.outcome, f.grade.value, f.grade.n) == ("cannot be tested here", 2.0, 1)
    # the same lead on GPUs over 3 repeats with ranges apart (rule 2) favours vLLM
    g = guide.prefix_factor(guide.UserWorkload(shared_fraction=0.4), repeated(sharing, "batch_time_s"))
    assert (g.favours, g.winner, g.runner_up, g.experiment) == ("vllm", "vllm", "sglang-jax", "cpu_prefix_sharing")
    assert (g.grade.outcome, g.grade.n) == ("reproduced", 3)


def test_a_cpu_baseline_never_favours_an_engine_even_over_three_repeats(fit, sharing):
    """Rule 1 before rule 2: three CPU repeats a side with ranges far apart still cannot decide which engine is
    faster on a GPU host; the guide then follows the tree."""
    cpu3 = repeated(sharing, "batch_time_s", device_kind="cpu", hardware="CPU")
    conc3 = repeated(
        engine_choice_frames.concurrency_study(conc_runs()), "requests_per_s", device_kind="cpu", hardware="CPU"
    )
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(w, fit, cpu3, conc3)
    assert [f.favours for f in ev.factors] == [None, None, None]
    assert [f.grade.outcome for f in ev.factors[1:]] == ["cannot be tested here"] * 2
    assert [(f.grade.value, f.grade.n) for f in ev.factors[1:]] == [
        (2.0, 3),
        (None, 3),
    ]  # no load below 128: no baseline
    assert (ev.engine, ev.decided_by, ev.deciding) == ("sglang", "tree", None)  # the tree's answer for 40% shared


def test_sglang_jax_win_counts_for_the_sglang_family(fit):
    sh = repeated(
        sharing_frames.prefix_sharing(sharing_runs(vllm_time=4.0, jax_time=2.0)), "batch_time_s"
    )  # 2.14× at 0.5
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(
        w, fit, sh, repeated(engine_choice_frames.concurrency_study(conc_runs()), "requests_per_s")
    )
    assert ev.engine == "sglang"
    assert (ev.decided_by, ev.deciding.name, ev.split) == ("measured", "prefix", "")
    assert [(f.favours, f.winner) for f in ev.factors[1:]] == [("sglang", "sglang-jax"), ("sglang", "sglang-jax")]


def test_split_factors_the_trees_first_question_decides(fit, sharing):
    conc = repeated(
        engine_choice_frames.concurrency_study(conc_runs()), "requests_per_s"
    )  # sglang-jax 1.25× the requests/s
    sharing = repeated(sharing, "batch_time_s")  # vLLM wins the prefix factor
    shared = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(shared, fit, sharing, conc)
    assert (ev.engine, ev.deciding.name, ev.split) == ("vllm", "prefix", "first question")
    distinct = guide.UserWorkload(shared_fraction=0.0, concurrency=128)
    ev = guide.from_evidence(distinct, fit, sharing, conc)
    assert (ev.engine, ev.deciding.name, ev.split) == ("sglang", "concurrency", "first question")


def test_differences_the_grading_rules_do_not_pass_decide_nothing(fit):
    """On GPUs: one run a side (n=1), or three whose ranges overlap, favour no engine; the guide follows the tree."""
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    sh = sharing_frames.prefix_sharing(sharing_runs(vllm_time=2.0, jax_time=2.0 * 1.03))  # 3% apart everywhere
    conc = engine_choice_frames.concurrency_study(conc_runs(40.0, 41.0))
    once = guide.from_evidence(
        w, fit, repeated(sh, "batch_time_s", n=1, spread=0.0), repeated(conc, "requests_per_s", n=1, spread=0.0)
    )
    assert [f.favours for f in once.factors] == [None, None, None]
    assert [(f.grade.outcome, f.grade.n) for f in once.factors[1:]] == [("inconclusive", 1)] * 2
    assert (once.engine, once.decided_by) == ("sglang", "tree")
    overlap = guide.from_evidence(
        w, fit, repeated(sh, "batch_time_s", spread=0.05), repeated(conc, "requests_per_s", spread=0.05)
    )
    assert [f.favours for f in overlap.factors] == [None, None, None]
    assert all("overlap" in f.grade.reason for f in overlap.factors[1:])
    # at 0.5 sglang-jax's token-exact hits make it 1.339 / 1.2875 = 1.04× faster
    prefix = overlap.factors[1]
    assert (prefix.winner, prefix.rows[0]["engine"], round(prefix.margin, 2)) == (None, "sglang-jax", 1.04)
    assert prefix.zero_ratio == pytest.approx(2.0 / 2.06)  # at 0 vLLM is the faster, 1.03×
    assert (overlap.factors[2].winner, overlap.factors[2].margin) == (None, pytest.approx(41 / 40))
    one = guide.from_evidence(guide.UserWorkload(), fit, sh.filter(pl.col("engine") == "vllm"), pl.DataFrame())
    assert [(f.source, f.n_engines) for f in one.factors] == [("modelled", 0), ("measured", 1), ("none", 0)]


def test_context_factor_times_both_engines_when_dcp_divides_nothing(fit):
    f = guide.context_factor(guide.UserWorkload(8192, model="Llama-3.1-8B"), fit)
    assert (f.favours, f.dcp_divides, f.crossover) == (None, False, None)
    # vLLM TP8, SGLang TP8+DCP8 under the uncalibrated roofline at its priors' centre: a Kimi-K3 fit is never applied
    # to Llama-3.1-8B (it gave 5.53 s against 72.9 s, 67.4 s of it the fitted DCP term)
    assert f.times == (pytest.approx(3.98, abs=0.005), pytest.approx(5.63, abs=0.005))


def test_with_nothing_that_decides_the_guide_follows_the_tree(fit, sharing):
    empty_sh, empty_conc = sharing.head(0), engine_choice_frames.concurrency_study(conc_runs()).head(0)
    ev = guide.from_evidence(guide.UserWorkload(shared_fraction=0.4, concurrency=128), fit, empty_sh, empty_conc)
    assert (ev.engine, ev.decided_by, ev.deciding) == ("sglang", "tree", None)
    ev = guide.from_evidence(guide.UserWorkload(shared_fraction=0.0, concurrency=16), fit, empty_sh, empty_conc)
    assert (ev.engine, ev.decided_by, ev.deciding) == ("vllm", "tree", None)


def test_measured_member_prefers_the_family_s_own_engine():
    """Report 01 compares vLLM with PyTorch SGLang where it ran, else with sglang-jax, else names SGLang."""
    assert guide.measured_member("sglang", ["vllm", "sglang", "sglang-jax"]) == "sglang"
    assert guide.measured_member("sglang", ["vllm", "sglang-jax"]) == "sglang-jax"
    assert guide.measured_member("sglang", []) == "sglang"
