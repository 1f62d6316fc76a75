"""The guide's evidence: which engine each factor favours, by how much, and what decides, from fixed frames.

The frames (tests/prefix_frames.py) hold vLLM (paged blocks) against sglang-jax (radix tree); the sentences
that say these facts are tested in test_narrative.py.
"""

from __future__ import annotations

import polars as pl
import pytest
from prefix_frames import conc_runs, sharing_runs

from kvlab import analysis, guide


def test_prefix_factor_keeps_the_margin_and_the_runs(sharing):
    f = guide.prefix_factor(guide.UserWorkload(shared_fraction=0.4), sharing)
    assert (f.favours, f.winner, round(f.margin, 4), f.n_engines) == ("vllm", "vllm", round(2.5 / (2 * (1 - 0.8 * 13440 / 32512)), 4), 2)
    assert (f.runner_up, f.experiment) == ("sglang-jax", "cpu_prefix_sharing")
    assert [(r["engine"], r["shared_fraction"]) for r in f.rows] == [("vllm", 0.5), ("sglang-jax", 0.5)]
    assert f.zero_ratio == 4.0 / 2.0  # with nothing to share: sglang-jax's 4 s over vLLM's 2 s


def test_sglang_jax_win_counts_for_the_sglang_family(fit):
    sh = analysis.prefix_sharing(sharing_runs(vllm_time=4.0, jax_time=2.0))  # 2.677 s vs 1.25 s at 0.5: 2.14×
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(w, fit, sh, analysis.concurrency_study(conc_runs()))
    assert ev.engine == "sglang"
    assert (ev.decided_by, ev.deciding.name, ev.split) == ("measured", "prefix", "")
    assert [(f.favours, f.winner) for f in ev.factors[1:]] == [("sglang", "sglang-jax"), ("sglang", "sglang-jax")]


def test_split_factors_the_trees_first_question_decides(fit, sharing):
    conc = analysis.concurrency_study(conc_runs())  # sglang-jax 1.25× the requests/s; vLLM wins the prefix factor
    shared = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(shared, fit, sharing, conc)
    assert (ev.engine, ev.deciding.name, ev.split) == ("vllm", "prefix", "first question")
    distinct = guide.UserWorkload(shared_fraction=0.0, concurrency=128)
    ev = guide.from_evidence(distinct, fit, sharing, conc)
    assert (ev.engine, ev.deciding.name, ev.split) == ("sglang", "concurrency", "first question")


def test_differences_under_the_margin_decide_nothing(fit):
    sh = analysis.prefix_sharing(sharing_runs(vllm_time=2.0, jax_time=2.0 * 1.03))  # 3% apart everywhere
    conc = analysis.concurrency_study(conc_runs(40.0, 41.0))
    ev = guide.from_evidence(guide.UserWorkload(shared_fraction=0.4, concurrency=128), fit, sh, conc)
    assert [f.favours for f in ev.factors] == [None, None, None]
    assert ev.engine == "vllm" and ev.decided_by == "tie-break"
    # at 0.5 sglang-jax's token-exact hits make it 1.339 / 1.2875 = 1.04× faster: still under the margin
    prefix = ev.factors[1]
    assert (prefix.winner, prefix.rows[0]["engine"], round(prefix.margin, 2)) == (None, "sglang-jax", 1.04)
    assert prefix.zero_ratio == pytest.approx(2.0 / 2.06)  # at 0 vLLM is the faster, 1.03×
    assert (ev.factors[2].winner, ev.factors[2].margin) == (None, pytest.approx(41 / 40))
    one = guide.from_evidence(guide.UserWorkload(), fit, sh.filter(pl.col("engine") == "vllm"), pl.DataFrame())
    assert [(f.source, f.n_engines) for f in one.factors] == [("modelled", 0), ("measured", 1), ("none", 0)]


def test_context_factor_times_both_engines_when_dcp_divides_nothing(fit):
    f = guide.context_factor(guide.UserWorkload(8192, model="Llama-3.1-8B"), fit)
    assert (f.favours, f.dcp_divides, f.crossover) == (None, False, None)
    assert f.times == (pytest.approx(5.53, abs=0.005), pytest.approx(72.9, abs=0.05))  # vLLM TP8, SGLang TP8+DCP8


def test_a_tie_break_is_called_a_tie_break(fit, sharing):
    empty_sh, empty_conc = sharing.head(0), analysis.concurrency_study(conc_runs()).head(0)
    ev = guide.from_evidence(guide.UserWorkload(shared_fraction=0.4, concurrency=128), fit, empty_sh, empty_conc)
    assert (ev.engine, ev.decided_by, ev.deciding) == ("vllm", "tie-break", None)


def test_measured_member_prefers_the_family_s_own_engine():
    """Report 01 compares vLLM with PyTorch SGLang where it ran, else with sglang-jax, else names SGLang."""
    assert guide.measured_member("sglang", ["vllm", "sglang", "sglang-jax"]) == "sglang"
    assert guide.measured_member("sglang", ["vllm", "sglang-jax"]) == "sglang-jax"
    assert guide.measured_member("sglang", []) == "sglang"
