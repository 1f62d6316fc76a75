"""fixed_batch: batch_size token-ID prompts of one exact length, sent all at once."""

from __future__ import annotations

from typing import Literal

import numpy as np

from kvlab.load import Schedule
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


def random_ids_draws(
    n: int, prompt_tokens: int, output_tokens: int, vocab_size: int, seed: int, rate_rps: float | None = None
) -> tuple[list[Prompt], Schedule | None]:
    """SGLang's benchmark's random-ids workload (``load.draws: random_ids``): its prompts as token ids and, at
    ``rate_rps``, its schedule (None without a rate): the send offsets in seconds and the gap it draws and sleeps
    after the last send (kvlab.load.Schedule), drawn as it draws them. SGLang 0.5.23
    (sglang/benchmark/serving.py and datasets/random.py, ``--dataset-name random-ids --random-range-ratio 1``) seeds
    numpy's legacy generator with ``--seed``, draws the input lengths, the output lengths and one offset per prompt
    below the tokenizer's vocabulary size, makes prompt ``i`` the ids ``(offset_i + i + j) % vocab_size``, and after
    each send draws an exponential gap of mean ``1 / rate``. The same ``seed``, lengths and ``vocab_size`` give its
    very ids (it decodes them less the one BOS the server adds, as :func:`kvlab.load.as_text` does with
    ``text_lengths: decoded``) and schedule. Prompts that start at the same id are the same prompt: their
    ``shared_prefix_tokens`` say so."""
    rs = np.random.RandomState(seed)
    rs.randint(prompt_tokens, prompt_tokens + 1, size=n)  # its input lengths: range ratio 1, all equal
    rs.randint(output_tokens, output_tokens + 1, size=n)  # its output lengths
    starts = [(int(o) + i) % vocab_size for i, o in enumerate(rs.randint(0, vocab_size, size=n))]
    out = [
        Prompt(
            index=i,
            max_tokens=output_tokens,
            token_ids=tuple((s + j) % vocab_size for j in range(prompt_tokens)),
            workload="fixed_batch",
            shared_prefix_tokens=prompt_tokens if starts.count(s) > 1 else 0,
        )
        for i, s in enumerate(starts)
    ]
    if rate_rps is None:
        return out, None
    gaps = [float(rs.exponential(1.0 / rate_rps)) for _ in range(n)]  # one after every send, the last one too
    return out, Schedule((0.0, *np.cumsum(gaps[: n - 1]).tolist()), tail_s=gaps[-1])
