"""Prompt generators with exact token counts: token-ID prompts, deterministic from a seed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Default lowest token id drawn: keeps clear of the special tokens small tokenizers put first.
DEFAULT_LOW_ID = 16


@dataclass(frozen=True)
class Prompt:
    """One request of a workload.

    Exactly one of ``token_ids`` (sent to ``/v1/completions`` as a token-ID prompt, so the
    server's prompt length is exact), ``text`` (``/v1/completions``, tokenised by the server)
    or ``messages`` (``/v1/chat/completions``) is set. Prompts sharing a ``conversation``
    are sent one after another in ``turn`` order by :func:`kvlab.client.run_requests`.
    """

    index: int
    max_tokens: int
    token_ids: tuple[int, ...] | None = None
    text: str | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None
    workload: str = ""
    #: Leading tokens this prompt is built to share with other prompts (what a prefix
    #: cache could reuse at best); 0 for prompts meant to be distinct.
    shared_prefix_tokens: int = 0
    conversation: int | None = None
    turn: int | None = None
    #: Merged over the batch-wide ``extra_body`` of the request (per-request options).
    extra_body: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        given = sum(x is not None for x in (self.token_ids, self.text, self.messages))
        if given != 1:
            raise ValueError(f"prompt {self.index}: set exactly one of token_ids, text, messages (got {given})")
        if self.max_tokens < 1:
            raise ValueError(f"prompt {self.index}: max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def endpoint(self) -> str:
        """API path this prompt is sent to."""
        return "/v1/chat/completions" if self.messages is not None else "/v1/completions"

    @property
    def prompt_tokens(self) -> int | None:
        """Exact prompt length in tokens for token-ID prompts; None when the server tokenises."""
        return len(self.token_ids) if self.token_ids is not None else None


def _check(vocab_size: int, low_id: int, *counts: int) -> None:
    if not 0 <= low_id < vocab_size:
        raise ValueError(f"need 0 <= low_id < vocab_size, got low_id={low_id}, vocab_size={vocab_size}")
    for c in counts:
        if c < 0:
            raise ValueError(f"token counts must be >= 0, got {c}")


def _random_ids(rng: np.random.Generator, n: int, vocab_size: int, low_id: int) -> np.ndarray:
    return rng.integers(low_id, vocab_size, size=n, dtype=np.int64)


def _digits(n: int, radix: int) -> int:
    """Base-``radix`` digits needed to write every index below ``n`` (at least one)."""
    digits, span = 1, radix
    if radix < 2:
        return 1
    while span < n:
        digits, span = digits + 1, span * radix
    return digits


def _stamp(ids: np.ndarray, i: int, digits: int, vocab_size: int, low_id: int, offset: int) -> None:
    """Write ``i`` as ``digits`` base-(vocab_size - low_id) digits into the first tokens of ``ids``.

    Every prompt of a workload gets the same number of digits, so different ``i`` give
    different leading tokens: no two stamped prompts share even their first KV block and a
    prefix cache cannot reuse anything between them.
    """
    radix = vocab_size - low_id
    value = i
    for pos in range(min(digits, len(ids))):
        ids[pos] = low_id + (value + offset) % radix
        value //= radix


def _can_be_distinct(n: int, length: int, vocab_size: int, low_id: int) -> bool:
    """Whether ``n`` sequences of ``length`` ids from [low_id, vocab_size) can all differ."""
    radix = vocab_size - low_id
    return n <= 1 or (radix >= 2 and length >= _digits(n, radix))


def fixed_batch(
    n: int,
    prompt_tokens: int,
    output_tokens: int,
    vocab_size: int,
    seed: int = 0,
    *,
    distinct: bool = True,
    low_id: int = DEFAULT_LOW_ID,
) -> list[Prompt]:
    """``n`` token-ID prompts of exactly ``prompt_tokens`` tokens asking for ``output_tokens``.

    Token ids come from ``[low_id, vocab_size)``: pass the first special id as
    ``vocab_size`` when special tokens sit at the top of the vocabulary. With
    ``distinct=True`` the prompts differ from their first token on, so prefix caching
    cannot turn a long-context benchmark into a cache benchmark; ``distinct=False`` sends
    ``n`` copies of one prompt.
    """
    _check(vocab_size, low_id, n, prompt_tokens)
    if distinct and not _can_be_distinct(n, prompt_tokens, vocab_size, low_id):
        raise ValueError(f"cannot make {n} distinct prompts of {prompt_tokens} tokens from ids [{low_id}, {vocab_size})")
    rng = np.random.default_rng(seed)
    offset = int(rng.integers(0, vocab_size - low_id))
    digits = _digits(n, vocab_size - low_id)
    base = _random_ids(rng, prompt_tokens, vocab_size, low_id)
    prompts = []
    for i in range(n):
        if distinct:
            ids = _random_ids(rng, prompt_tokens, vocab_size, low_id)
            _stamp(ids, i, digits, vocab_size, low_id, offset)
        else:
            ids = base
        prompts.append(
            Prompt(
                index=i,
                max_tokens=output_tokens,
                token_ids=tuple(ids.tolist()),
                workload="fixed_batch",
                shared_prefix_tokens=0 if distinct else prompt_tokens,
            )
        )
    return prompts


def shared_prefix_length(prompt_tokens: int, shared_fraction: float) -> int:
    """Tokens of the common prefix: ``shared_fraction * prompt_tokens`` rounded half up."""
    if not 0.0 <= shared_fraction <= 1.0:
        raise ValueError(f"shared_fraction must be in [0, 1], got {shared_fraction}")
    return min(prompt_tokens, math.floor(shared_fraction * prompt_tokens + 0.5))


def shared_prefix(
    n: int,
    prompt_tokens: int,
    shared_fraction: float,
    output_tokens: int,
    vocab_size: int,
    seed: int = 0,
    *,
    low_id: int = DEFAULT_LOW_ID,
) -> list[Prompt]:
    """``n`` prompts of exactly ``prompt_tokens`` tokens: one common prefix, then distinct suffixes.

    The prefix has :func:`shared_prefix_length` tokens; each suffix starts with a token
    sequence unique to its request, so the prompts share exactly the prefix and no more.
    """
    _check(vocab_size, low_id, n, prompt_tokens)
    prefix_len = shared_prefix_length(prompt_tokens, shared_fraction)
    suffix_len = prompt_tokens - prefix_len
    if suffix_len and not _can_be_distinct(n, suffix_len, vocab_size, low_id):
        raise ValueError(f"a {suffix_len}-token suffix cannot make {n} prompts distinct")
    rng = np.random.default_rng(seed)
    offset = int(rng.integers(0, vocab_size - low_id))
    digits = _digits(n, vocab_size - low_id)
    prefix = _random_ids(rng, prefix_len, vocab_size, low_id)
    prompts = []
    for i in range(n):
        suffix = _random_ids(rng, suffix_len, vocab_size, low_id)
        _stamp(suffix, i, digits, vocab_size, low_id, offset)
        ids = np.concatenate([prefix, suffix])
        prompts.append(
            Prompt(
                index=i,
                max_tokens=output_tokens,
                token_ids=tuple(ids.tolist()),
                workload="shared_prefix",
                shared_prefix_tokens=prefix_len,
            )
        )
    return prompts


def multi_turn(
    n_conversations: int,
    turns: int,
    document_tokens: int,
    question_tokens: int,
    answer_tokens: int,
    vocab_size: int,
    seed: int = 0,
    *,
    shared_document: bool = True,
    low_id: int = DEFAULT_LOW_ID,
) -> list[Prompt]:
    """Multi-turn RAG: each conversation asks ``turns`` questions about one document.

    Turn 0 is ``document + question_0``; turn k is ``prompt_{k-1} + answer placeholder
    (answer_tokens ids) + question_k``, so its length is exactly
    ``document_tokens + (k + 1) * question_tokens + k * answer_tokens``. The placeholder
    stands in for the real answer so that lengths are exact and known before the run.
    With ``shared_document`` every conversation reads the same document (the prefix a
    cache can reuse across conversations); questions are distinct per conversation.
    Prompts are ordered conversation by conversation; ``index`` runs over all of them.
    """
    _check(vocab_size, low_id, n_conversations, turns, document_tokens, question_tokens, answer_tokens)
    if not _can_be_distinct(n_conversations, question_tokens, vocab_size, low_id):
        raise ValueError(f"{question_tokens}-token questions cannot keep {n_conversations} conversations distinct")
    rng = np.random.default_rng(seed)
    offset = int(rng.integers(0, vocab_size - low_id))
    digits = _digits(n_conversations, vocab_size - low_id)
    shared_doc = _random_ids(rng, document_tokens, vocab_size, low_id)
    prompts: list[Prompt] = []
    for c in range(n_conversations):
        doc = shared_doc if shared_document else _random_ids(rng, document_tokens, vocab_size, low_id)
        if not shared_document and document_tokens:
            _stamp(doc, c, digits, vocab_size, low_id, offset)
        history = doc
        for k in range(turns):
            question = _random_ids(rng, question_tokens, vocab_size, low_id)
            _stamp(question, c, digits, vocab_size, low_id, offset)
            if k:
                answer = _random_ids(rng, answer_tokens, vocab_size, low_id)
                history = np.concatenate([history, answer])
            history = np.concatenate([history, question])
            # Turn 0 shares the document with other conversations; later turns share the
            # previous turn's whole prompt (their own history) as well.
            shared = document_tokens if k == 0 else len(history) - question_tokens - answer_tokens
            prompts.append(
                Prompt(
                    index=len(prompts),
                    max_tokens=answer_tokens,
                    token_ids=tuple(history.tolist()),
                    workload="multi_turn",
                    shared_prefix_tokens=shared if (shared_document or k) else 0,
                    conversation=c,
                    turn=k,
                )
            )
    return prompts


def classification(
    n: int,
    vocab_size: int,
    seed: int = 0,
    *,
    prompt_tokens: int = 128,
    max_tokens: int = 10,
    low_id: int = DEFAULT_LOW_ID,
) -> list[Prompt]:
    """``n`` short distinct prompts asking for ``max_tokens`` (10) tokens each: a label-sized answer."""
    prompts = fixed_batch(n, prompt_tokens, max_tokens, vocab_size, seed, distinct=True, low_id=low_id)
    return [
        Prompt(index=p.index, max_tokens=p.max_tokens, token_ids=p.token_ids, workload="classification")
        for p in prompts
    ]
