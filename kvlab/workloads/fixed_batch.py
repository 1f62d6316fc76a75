"""fixed_batch: batch_size token-ID prompts of one exact length, sent all at once."""

from __future__ import annotations

from typing import Literal

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


class FixedBatch(WorkloadArgs):
    """batch_size requests sent at once."""

    description = "batch_size requests sent at once"
    example = {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 64, "output_tokens": 4}

    kind: Literal["fixed_batch"]

    def check(self) -> None:
        if self.concurrency is not None:
            raise ValueError("concurrency applies to kind 'concurrency' only (a fixed batch sends all at once)")

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return prompts(
            self.batch_size, self.prompt_len, self.output_tokens, vocab_size, seed=seed, distinct=self.distinct_prompts
        )


Args = FixedBatch


def prompts(
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
    check_counts(vocab_size, low_id, n, prompt_tokens)
    if distinct and not can_be_distinct(n, prompt_tokens, vocab_size, low_id):
        raise ValueError(
            f"cannot make {n} distinct prompts of {prompt_tokens} tokens from ids [{low_id}, {vocab_size})"
        )
    rng, offset, n_digits = sampler(seed, n, vocab_size, low_id)
    base = random_ids(rng, prompt_tokens, vocab_size, low_id)
    out = []
    for i in range(n):
        if distinct:
            ids = random_ids(rng, prompt_tokens, vocab_size, low_id)
            stamp(ids, i, n_digits, vocab_size, low_id, offset)
        else:
            ids = base
        out.append(
            Prompt(
                index=i,
                max_tokens=output_tokens,
                token_ids=tuple(ids.tolist()),
                workload="fixed_batch",
                shared_prefix_tokens=0 if distinct else prompt_tokens,
            )
        )
    return out
