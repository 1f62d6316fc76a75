"""classification: short distinct prompts, each asking for a label-sized answer."""

from __future__ import annotations

from typing import Literal

from kvlab.workloads import fixed_batch
from kvlab.workloads.base import DEFAULT_LOW_ID, Prompt, WorkloadArgs


class Classification(WorkloadArgs):
    """batch_size short distinct prompts with a label-sized answer."""

    description = "batch_size short distinct prompts with a label-sized answer"
    example = {"kind": "classification", "batch_size": 4, "concurrency": 2, "prompt_tokens": 32, "output_tokens": 4}

    kind: Literal["classification"]

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return prompts(
            self.batch_size, vocab_size, seed=seed, prompt_tokens=self.prompt_len, max_tokens=self.output_tokens
        )


Args = Classification


def prompts(
    n: int,
    vocab_size: int,
    seed: int = 0,
    *,
    prompt_tokens: int = 128,
    max_tokens: int = 10,
    low_id: int = DEFAULT_LOW_ID,
) -> list[Prompt]:
    """``n`` short distinct prompts asking for ``max_tokens`` (10) tokens each: a label-sized answer."""
    batch = fixed_batch.prompts(n, prompt_tokens, max_tokens, vocab_size, seed, distinct=True, low_id=low_id)
    return [
        Prompt(index=p.index, max_tokens=p.max_tokens, token_ids=p.token_ids, workload="classification") for p in batch
    ]
