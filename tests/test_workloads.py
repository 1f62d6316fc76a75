"""Workload generators: exact token counts, id bounds, distinctness and determinism."""

from __future__ import annotations

import pytest

from kvlab import workloads
from kvlab.workloads import Prompt


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_fixed_batch_exact_lengths_and_id_bounds():
    ps = workloads.fixed_batch.prompts(8, 2000, 32, vocab_size=512, seed=3, low_id=10)
    assert [p.index for p in ps] == list(range(8))
    for p in ps:
        assert len(p.token_ids) == 2000 == p.prompt_tokens
        assert p.max_tokens == 32
        assert min(p.token_ids) >= 10 and max(p.token_ids) < 512
        assert p.endpoint == "/v1/completions"
        assert p.shared_prefix_tokens == 0


def test_fixed_batch_distinct_from_first_token():
    ps = workloads.fixed_batch.prompts(50, 300, 4, vocab_size=512, seed=0)
    firsts = {p.token_ids[0] for p in ps}
    assert len(firsts) == 50  # no two share even the first KV block


def test_fixed_batch_distinct_needs_more_than_one_token_when_n_exceeds_radix():
    # 30 usable ids: 100 prompts need two stamped tokens; still pairwise distinct at the start
    ps = workloads.fixed_batch.prompts(100, 5, 1, vocab_size=40, seed=0, low_id=10)
    heads = {p.token_ids[:2] for p in ps}
    assert len(heads) == 100
    with pytest.raises(ValueError, match="distinct"):
        workloads.fixed_batch.prompts(100, 1, 1, vocab_size=40, seed=0, low_id=10)


def test_fixed_batch_not_distinct_is_identical():
    ps = workloads.fixed_batch.prompts(4, 64, 4, vocab_size=512, seed=0, distinct=False)
    assert len({p.token_ids for p in ps}) == 1
    assert all(p.shared_prefix_tokens == 64 for p in ps)


def test_deterministic_from_seed():
    a = workloads.fixed_batch.prompts(3, 100, 4, vocab_size=512, seed=7)
    b = workloads.fixed_batch.prompts(3, 100, 4, vocab_size=512, seed=7)
    c = workloads.fixed_batch.prompts(3, 100, 4, vocab_size=512, seed=8)
    assert a == b
    assert a != c


@pytest.mark.parametrize(
    ("fraction", "expected"), [(0.0, 0), (0.5, 500), (0.25, 250), (0.9995, 1000), (1.0, 1000), (0.0005, 1)]
)
def test_shared_prefix_exact_lengths(fraction, expected):
    assert workloads.shared_prefix.shared_prefix_length(1000, fraction) == expected
    ps = workloads.shared_prefix.prompts(6, 1000, fraction, 8, vocab_size=512, seed=1)
    for p in ps:
        assert len(p.token_ids) == 1000
        assert p.shared_prefix_tokens == expected
    for p in ps[1:]:
        common = _common_prefix(ps[0].token_ids, p.token_ids)
        if expected < 1000:
            assert common == expected  # share the prefix and not one token more
        else:
            assert common == 1000


def test_multi_turn_growing_history_exact_counts():
    doc, q, a, turns = 500, 20, 30, 4
    ps = workloads.multi_turn.prompts(3, turns, doc, q, a, vocab_size=512, seed=2)
    assert len(ps) == 3 * turns
    assert [p.index for p in ps] == list(range(3 * turns))
    for p in ps:
        k = p.turn
        assert len(p.token_ids) == doc + (k + 1) * q + k * a
        assert p.max_tokens == a
        if k:
            prev = ps[p.index - 1]
            assert prev.conversation == p.conversation and prev.turn == k - 1
            assert p.token_ids[: len(prev.token_ids)] == prev.token_ids  # history carried exactly
            assert p.shared_prefix_tokens == len(prev.token_ids)
        else:
            assert p.shared_prefix_tokens == doc
    first_turns = [p for p in ps if p.turn == 0]
    for p in first_turns[1:]:
        assert _common_prefix(first_turns[0].token_ids, p.token_ids) == doc  # one shared document


def test_multi_turn_private_documents():
    ps = workloads.multi_turn.prompts(3, 2, 100, 10, 10, vocab_size=512, seed=2, shared_document=False)
    firsts = [p for p in ps if p.turn == 0]
    assert len({p.token_ids[0] for p in firsts}) == 3
    assert all(p.shared_prefix_tokens == 0 for p in firsts)


def test_classification_short_prompts_ten_tokens():
    ps = workloads.classification.prompts(20, vocab_size=512, seed=0)
    assert all(p.max_tokens == 10 and len(p.token_ids) == 128 for p in ps)
    assert len({p.token_ids for p in ps}) == 20
    assert {p.workload for p in ps} == {"classification"}


def test_prompt_validation_and_chat_endpoint():
    with pytest.raises(ValueError, match="exactly one"):
        Prompt(index=0, max_tokens=4)
    with pytest.raises(ValueError, match="exactly one"):
        Prompt(index=0, max_tokens=4, text="a", token_ids=(1,))
    with pytest.raises(ValueError, match="max_tokens"):
        Prompt(index=0, max_tokens=0, text="a")
    chat = Prompt(index=0, max_tokens=4, messages=({"role": "user", "content": "hi"},))
    assert chat.endpoint == "/v1/chat/completions" and chat.prompt_tokens is None


def test_bad_bounds_raise():
    with pytest.raises(ValueError, match="low_id"):
        workloads.fixed_batch.prompts(1, 10, 1, vocab_size=10, low_id=10)
