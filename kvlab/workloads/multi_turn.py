"""multi_turn: conversations of ``turns`` questions about one document, each turn carrying the history."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from kvlab.workloads.base import (
    DEFAULT_LOW_ID,
    Prompt,
    WorkloadArgs,
    can_be_distinct,
    check_counts,
    random_ids,
    sampler,
    stamp,
)


class MultiTurn(WorkloadArgs):
    """batch_size conversations; prompt lengths follow from the document, questions and answers."""

    description = (
        "batch_size conversations of `turns` questions about one shared document, each turn carrying the history"
    )
    example = {
        "kind": "multi_turn",
        "batch_size": 2,
        "turns": 2,
        "document_tokens": 32,
        "question_tokens": 4,
        "output_tokens": 4,
    }

    kind: Literal["multi_turn"]
    turns: int | None = Field(None, ge=1, description="multi_turn: questions per conversation")
    document_tokens: int | None = Field(None, ge=0, description="multi_turn: tokens of the shared document")
    question_tokens: int | None = Field(None, ge=1, description="multi_turn: tokens of each question")

    def check_lengths(self) -> None:
        missing = [n for n in ("turns", "document_tokens", "question_tokens") if getattr(self, n) is None]
        if missing:
            raise ValueError(f"kind 'multi_turn' needs {missing} (output_tokens is each answer's length)")
        if self.context_tokens is not None or self.prompt_tokens is not None:
            raise ValueError(
                "kind 'multi_turn' derives its prompt lengths from document_tokens, question_tokens, "
                "turns and output_tokens: leave context_tokens and prompt_tokens out"
            )

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return prompts(
            self.batch_size,
            self.turns,
            self.document_tokens,
            self.question_tokens,
            self.output_tokens,
            vocab_size,
            seed=seed,
        )

    def detail(self) -> list[str]:
        return [f"{self.turns} turns over a {self.document_tokens}-token document, {self.n_requests} requests"]

    @property
    def sharing(self) -> float:
        """The document's share of the longest prompt (the history a turn carries is shared too, so this
        is the smallest share any turn has)."""
        return self.document_tokens / self.prompt_len

    @property
    def prompt_len(self) -> int:
        """Prompt tokens of the last, longest turn."""
        return self.document_tokens + self.turns * self.question_tokens + (self.turns - 1) * self.output_tokens

    @property
    def n_requests(self) -> int:
        """Conversations x turns."""
        return self.batch_size * self.turns


Args = MultiTurn


def prompts(
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
    check_counts(vocab_size, low_id, n_conversations, turns, document_tokens, question_tokens, answer_tokens)
    if not can_be_distinct(n_conversations, question_tokens, vocab_size, low_id):
        raise ValueError(f"{question_tokens}-token questions cannot keep {n_conversations} conversations distinct")
    rng, offset, n_digits = sampler(seed, n_conversations, vocab_size, low_id)
    shared_doc = random_ids(rng, document_tokens, vocab_size, low_id)
    out: list[Prompt] = []
    for c in range(n_conversations):
        doc = shared_doc if shared_document else random_ids(rng, document_tokens, vocab_size, low_id)
        if not shared_document and document_tokens:
            stamp(doc, c, n_digits, vocab_size, low_id, offset)
        history = doc
        for k in range(turns):
            question = random_ids(rng, question_tokens, vocab_size, low_id)
            stamp(question, c, n_digits, vocab_size, low_id, offset)
            if k:
                answer = random_ids(rng, answer_tokens, vocab_size, low_id)
                history = np.concatenate([history, answer])
            history = np.concatenate([history, question])
            # Turn 0 shares the document with other conversations; later turns share the
            # previous turn's whole prompt (their own history) as well.
            shared = document_tokens if k == 0 else len(history) - question_tokens - answer_tokens
            out.append(
                Prompt(
                    index=len(out),
                    max_tokens=answer_tokens,
                    token_ids=tuple(history.tolist()),
                    workload="multi_turn",
                    shared_prefix_tokens=shared if (shared_document or k) else 0,
                    conversation=c,
                    turn=k,
                )
            )
    return out
