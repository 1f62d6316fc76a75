"""concurrency: the fixed batch's prompts, at most ``concurrency`` requests in flight."""

from __future__ import annotations

from typing import Literal

from kvlab.workloads import fixed_batch
from kvlab.workloads.base import Prompt, WorkloadArgs


class Concurrency(WorkloadArgs):
    """batch_size requests, at most ``concurrency`` in flight."""

    description = "batch_size requests, at most `concurrency` in flight"
    example = {"kind": "concurrency", "batch_size": 4, "concurrency": 2, "context_tokens": 64, "output_tokens": 4}

    kind: Literal["concurrency"]

    def check(self) -> None:
        if self.concurrency is None:
            raise ValueError("kind 'concurrency' needs a concurrency value")

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return fixed_batch.prompts(
            self.batch_size, self.prompt_len, self.output_tokens, vocab_size, seed=seed, distinct=self.distinct_prompts
        )


Args = Concurrency
