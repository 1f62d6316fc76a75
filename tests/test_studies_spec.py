"""Workload kinds of the engine-choice studies: each validates, names its bad field, and keeps old run keys."""

from __future__ import annotations

import pytest

from kvlab import plan, runner
from kvlab.experiment import ExperimentSpec, SpecError, expand, workload_spec

from test_spec import BASE, _load_error, _with, _write


def test_shared_prefix_needs_a_fraction_in_0_1():
    with pytest.raises(ValueError, match="needs shared_fraction"):
        workload_spec(kind="shared_prefix", batch_size=4, context_tokens=1024, output_tokens=8)
    for bad in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"shared_fraction must be in \[0, 1\)"):
            workload_spec(kind="shared_prefix", batch_size=4, context_tokens=1024, output_tokens=8, shared_fraction=bad)
    w = workload_spec(kind="shared_prefix", batch_size=4, context_tokens=1024, output_tokens=8, shared_fraction=0.3)
    assert (w.prompt_len, w.in_flight, w.n_requests) == (1016, 4, 4)


def test_bad_shared_fraction_in_matrix_names_field_point_and_value(tmp_path):
    data = _with(
        "workload",
        {"kind": "shared_prefix", "batch_size": 4, "context_tokens": 2048, "output_tokens": 64, "shared_fraction": 0.0},
    )
    data["matrix"] = {"workload.shared_fraction": [0.5, 1.2]}
    msg = _load_error(tmp_path, data)
    assert "workload.shared_fraction=1.2" in msg and "shared_fraction must be in [0, 1)" in msg and "1.2" in msg


def test_multi_turn_derives_lengths_and_rejects_context():
    w = workload_spec(
        kind="multi_turn", batch_size=3, turns=4, document_tokens=1000, question_tokens=10, output_tokens=20
    )
    assert w.prompt_len == 1000 + 4 * 10 + 3 * 20 and w.total_tokens == w.prompt_len + 20
    assert w.n_requests == 12 and w.in_flight == 3
    with pytest.raises(ValueError, match="needs \\['turns'\\]"):
        workload_spec(kind="multi_turn", batch_size=3, document_tokens=1000, question_tokens=10, output_tokens=20)
    with pytest.raises(ValueError, match="leave context_tokens and prompt_tokens out"):
        workload_spec(
            kind="multi_turn",
            batch_size=3,
            turns=2,
            document_tokens=1000,
            question_tokens=10,
            output_tokens=20,
            prompt_tokens=100,
        )


def test_kind_specific_fields_rejected_elsewhere():
    with pytest.raises(ValueError, match="shared_fraction applies to kind\\(s\\) \\['shared_prefix'\\] only"):
        workload_spec(kind="fixed_batch", batch_size=4, context_tokens=1024, output_tokens=8, shared_fraction=0.5)
    with pytest.raises(ValueError, match="turns applies"):
        workload_spec(kind="classification", batch_size=4, prompt_tokens=64, output_tokens=8, turns=2)
    with pytest.raises(ValueError, match="concurrency applies to kind 'concurrency' only"):
        workload_spec(kind="fixed_batch", batch_size=4, context_tokens=1024, output_tokens=8, concurrency=2)


def test_classification_and_reasoning():
    c = workload_spec(kind="classification", batch_size=256, concurrency=128, prompt_tokens=64, output_tokens=10)
    assert c.in_flight == 128 and c.n_requests == 256
    with pytest.raises(ValueError, match="kind 'reasoning' needs prompt_tokens"):
        workload_spec(kind="reasoning", batch_size=4, context_tokens=300, output_tokens=100)


def test_runs_of_old_specs_keep_their_keys(tmp_path):
    """Fields added for these studies are left out of the key at their default: stored runs still resume."""
    runs = expand(ExperimentSpec.load(_write(tmp_path, BASE)))
    payload_fields = {"report_cached_tokens", "reasoning_parser", "shared_fraction", "turns", "dp", "dtype"}
    from kvlab.experiment import _omit_defaults

    dumped = _omit_defaults(runs[0].engine.model_dump(mode="json"), "engine") | _omit_defaults(
        runs[0].workload.model_dump(mode="json"), "workload"
    )
    assert not payload_fields & set(dumped)
    for field, value in (
        ("report_cached_tokens", False),
        ("dp", 2),
        ("dtype", "float32"),
    ):  # any other value is another run
        other = expand(ExperimentSpec.load(_write(tmp_path, _with(f"engines.vllm.{field}", value), "off.yaml")))
        assert {r.key for r in runs if r.engine_label == "vllm"}.isdisjoint(
            {r.key for r in other if r.engine_label == "vllm"}
        )


def _run(tmp_path, workload: dict):
    data = _with("workload", workload)
    data["matrix"] = {}
    return expand(ExperimentSpec.load(_write(tmp_path, data)))[0]


def test_prompts_for_dispatches_on_kind(tmp_path):
    vocab = 512
    sp = runner.prompts_for(
        _run(
            tmp_path,
            {
                "kind": "shared_prefix",
                "batch_size": 4,
                "context_tokens": 1024,
                "output_tokens": 24,
                "shared_fraction": 0.5,
            },
        ),
        vocab,
    )
    assert len(sp) == 4 and {len(p.token_ids) for p in sp} == {1000} and {p.shared_prefix_tokens for p in sp} == {500}
    assert len({p.token_ids[:500] for p in sp}) == 1 and len({p.token_ids[500] for p in sp}) == 4
    mt_run = _run(
        tmp_path,
        {
            "kind": "multi_turn",
            "batch_size": 2,
            "turns": 3,
            "document_tokens": 100,
            "question_tokens": 10,
            "output_tokens": 5,
        },
    )
    mt = runner.prompts_for(mt_run, vocab)
    assert len(mt) == 6 and max(len(p.token_ids) for p in mt) == mt_run.workload.prompt_len
    assert [(p.conversation, p.turn) for p in mt] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    cl = runner.prompts_for(
        _run(
            tmp_path,
            {"kind": "classification", "batch_size": 128, "concurrency": 100, "prompt_tokens": 32, "output_tokens": 10},
        ),
        vocab,
    )
    assert len(cl) == 128 and {p.max_tokens for p in cl} == {10} and len({p.token_ids for p in cl}) == 128
    rs = runner.prompts_for(
        _run(tmp_path, {"kind": "reasoning", "batch_size": 3, "prompt_tokens": 200, "output_tokens": 100}), vocab
    )
    assert all(p.messages and p.endpoint == "/v1/chat/completions" for p in rs)


def test_dry_run_describes_the_new_kinds(tmp_path):
    data = _with(
        "workload",
        {
            "kind": "shared_prefix",
            "batch_size": 4,
            "concurrency": 2,
            "context_tokens": 2048,
            "output_tokens": 48,
            "shared_fraction": 0.3,
        },
    )
    data["matrix"] = {}
    text = plan.dry_run_text(ExperimentSpec.load(_write(tmp_path, data)))
    assert "shared 0.3 = 600 tokens; ≤2 in flight" in text


def test_unknown_kind_is_named(tmp_path):
    data = _with("workload.kind", "poisson")
    with pytest.raises(SpecError, match="workload.kind"):
        ExperimentSpec.load(_write(tmp_path, data))


def test_cached_token_report_and_reasoning_parser_flags():
    from kvlab.engines import get_adapter
    from kvlab.experiment import EngineSpec

    def argv(name, **kw):
        spec = EngineSpec(name=name, launch=["python"], model="org/m", max_model_len=4096, **kw)
        return " ".join(get_adapter(name).server_args(spec, 1))

    assert "--enable-prompt-tokens-details" in argv("vllm")
    assert "--enable-prompt-tokens-details" not in argv("vllm", report_cached_tokens=False)
    assert "--enable-cache-report" in argv("sglang")
    assert "--enable-cache-report" not in argv("sglang", report_cached_tokens=False)
    assert "--reasoning-parser deepseek_r1" in argv("vllm", reasoning_parser="deepseek_r1")
    assert "--reasoning-parser deepseek-r1" in argv("sglang", reasoning_parser="deepseek-r1")
    # SGLang's prefix-cache counters: prompt tokens looked up, cached tokens hit
    names = get_adapter("sglang").metric_names
    assert (names["prefix_cache_queries"], names["prefix_cache_hits"]) == (
        "sglang:prompt_tokens_total",
        "sglang:cached_tokens_total",
    )
