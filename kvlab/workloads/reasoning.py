"""reasoning: chat questions whose answers are split into reasoning and answer tokens (kvlab.reasoning_tokens)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from kvlab.workloads.base import Prompt, WorkloadArgs

_OPS = ["plus", "minus", "times"]


class Reasoning(WorkloadArgs):
    """Chat questions the server tokenises; prompt_tokens is their budget."""

    description = (
        "chat questions whose answer the server (reasoning parser) or kvlab (<think> tags) splits "
        "into reasoning and answer"
    )
    example = {"kind": "reasoning", "batch_size": 2, "prompt_tokens": 64, "output_tokens": 16}
    splits_reasoning = True

    kind: Literal["reasoning"]
    reasoning_questions: list[str] | None = Field(
        None,
        min_length=1,
        description="reasoning: the questions asked (cycled over batch_size); None = kvlab's built-in "
        "arithmetic questions. prompt_tokens is their budget (checked against max_model_len), the server's "
        "usage gives the exact count",
    )

    def check(self) -> None:
        if self.prompt_tokens is None:
            raise ValueError("kind 'reasoning' needs prompt_tokens: the budget for the server-tokenised question")

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return prompts(self.batch_size, self.output_tokens, self.reasoning_questions, seed=seed)


Args = Reasoning


def builtin_questions(n: int, seed: int = 0) -> list[str]:
    """``n`` deterministic arithmetic word questions (a reasoning model thinks before answering each)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b, c = (int(x) for x in rng.integers(12, 99, size=3))
        n1, n2 = _OPS[int(rng.integers(0, 3))], _OPS[int(rng.integers(0, 3))]
        out.append(
            f"Compute ({a} {n1} {b}) {n2} {c} and say whether the result is prime. "
            "Answer with the number and yes or no."
        )
    return out


def prompts(n: int, max_tokens: int, questions: Sequence[str] | None = None, seed: int = 0) -> list[Prompt]:
    """``n`` chat prompts, one question each (``questions`` cycled; None = :func:`builtin_questions`).
    The server tokenises them: their shared tokens are not known (None)."""
    qs = list(questions) if questions else builtin_questions(n, seed)
    return [
        Prompt(
            index=i,
            max_tokens=max_tokens,
            messages=({"role": "user", "content": qs[i % len(qs)]},),
            workload="reasoning",
            shared_prefix_tokens=None,
        )
        for i in range(n)
    ]
