"""shared_prefix: prompts of one length whose first ``shared_fraction`` is one common prefix."""

from __future__ import annotations

import math
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


class SharedPrefix(WorkloadArgs):
    """batch_size prompts sharing a common prefix (system prompt + document), distinct after it."""

    description = "batch_size prompts whose first shared_fraction is one common prefix (system prompt + document)"
    example = {
        "kind": "shared_prefix",
        "batch_size": 2,
        "context_tokens": 64,
        "output_tokens": 4,
        "shared_fraction": 0.5,
    }

    kind: Literal["shared_prefix"]
    shared_fraction: float | None = Field(
        None, description="shared_prefix: fraction of each prompt that is the common prefix, in [0, 1)"
    )

    def check(self) -> None:
        if self.shared_fraction is None:
            raise ValueError("kind 'shared_prefix' needs shared_fraction (fraction of each prompt shared, in [0, 1))")
        if not 0.0 <= self.shared_fraction < 1.0:
            # 1.0 would leave no suffix to tell the prompts apart: the run would be n copies of one prompt.
            raise ValueError(f"shared_fraction must be in [0, 1), got {self.shared_fraction}")

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return prompts(
            self.batch_size, self.prompt_len, self.shared_fraction, self.output_tokens, vocab_size, seed=seed
        )

    def detail(self) -> list[str]:
        return [
            f"shared {self.shared_fraction:g} = {shared_prefix_length(self.prompt_len, self.shared_fraction)} tokens"
        ]

    @property
    def sharing(self) -> float:
        return self.shared_fraction


Args = SharedPrefix


def shared_prefix_length(prompt_tokens: int, shared_fraction: float) -> int:
    """Tokens of the common prefix: ``shared_fraction * prompt_tokens`` rounded half up."""
    if not 0.0 <= shared_fraction <= 1.0:
        raise ValueError(f"shared_fraction must be in [0, 1], got {shared_fraction}")
    return min(prompt_tokens, math.floor(shared_fraction * prompt_tokens + 0.5))


def prompts(
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
    check_counts(vocab_size, low_id, n, prompt_tokens)
    prefix_len = shared_prefix_length(prompt_tokens, shared_fraction)
    suffix_len = prompt_tokens - prefix_len
    if suffix_len and not can_be_distinct(n, suffix_len, vocab_size, low_id):
        raise ValueError(f"a {suffix_len}-token suffix cannot make {n} prompts distinct")
    rng, offset, n_digits = sampler(seed, n, vocab_size, low_id)
    prefix = random_ids(rng, prefix_len, vocab_size, low_id)
    out = []
    for i in range(n):
        suffix = random_ids(rng, suffix_len, vocab_size, low_id)
        stamp(suffix, i, n_digits, vocab_size, low_id, offset)
        ids = np.concatenate([prefix, suffix])
        out.append(
            Prompt(
                index=i,
                max_tokens=output_tokens,
                token_ids=tuple(ids.tolist()),
                workload="shared_prefix",
                shared_prefix_tokens=prefix_len,
            )
        )
    return out
