"""What every workload kind shares: the Prompt a request is built from, token sampling, and the common
workload fields (:class:`WorkloadArgs`) each kind's ``Args`` extends."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvlab.load import LoadSpec

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
    #: cache could reuse at best); 0 for prompts meant to be distinct; None where the
    #: server tokenises and the count is not known.
    shared_prefix_tokens: int | None = 0
    conversation: int | None = None
    turn: int | None = None
    #: Merged over the batch-wide ``extra_body`` of the request (per-request options).
    extra_body: Mapping[str, Any] | None = None
    #: kind trace: the 1-based line of the trace file this request replays (REQUESTS.trace_line); None otherwise.
    trace_line: int | None = None
    #: kind trace: leading prompt tokens whose blocks an earlier request of the replay already sent (what a prefix
    #: cache could serve, REQUESTS.reusable_tokens); None for other kinds.
    reusable_tokens: int | None = None

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


def shared_tokens(prompts: list[Prompt]) -> int | None:
    """Prompt tokens every request of a run shares by construction (RUNS.shared_prefix_tokens): the
    least ``shared_prefix_tokens`` of its prompts; None when any prompt's count is unknown."""
    counts = [p.shared_prefix_tokens for p in prompts]
    return None if not counts or None in counts else min(counts)


def check_counts(vocab_size: int, low_id: int, *counts: int) -> None:
    """ValueError unless ``0 <= low_id < vocab_size`` and every token count is >= 0."""
    if not 0 <= low_id < vocab_size:
        raise ValueError(f"need 0 <= low_id < vocab_size, got low_id={low_id}, vocab_size={vocab_size}")
    for c in counts:
        if c < 0:
            raise ValueError(f"token counts must be >= 0, got {c}")


def sampler(seed: int, n: int, vocab_size: int, low_id: int) -> tuple[np.random.Generator, int, int]:
    """A workload's random source from ``seed``, the offset its stamps start from, and the digits a stamp
    of each of ``n`` indices takes (see :func:`stamp`)."""
    rng = np.random.default_rng(seed)
    return rng, int(rng.integers(0, vocab_size - low_id)), digits(n, vocab_size - low_id)


def random_ids(rng: np.random.Generator, n: int, vocab_size: int, low_id: int) -> np.ndarray:
    """``n`` token ids drawn uniformly from ``[low_id, vocab_size)``."""
    return rng.integers(low_id, vocab_size, size=n, dtype=np.int64)


def digits(n: int, radix: int) -> int:
    """Base-``radix`` digits needed to write every index below ``n`` (at least one)."""
    count, span = 1, radix
    if radix < 2:
        return 1
    while span < n:
        count, span = count + 1, span * radix
    return count


def stamp(ids: np.ndarray, i: int, n_digits: int, vocab_size: int, low_id: int, offset: int) -> None:
    """Write ``i`` as ``n_digits`` base-(vocab_size - low_id) digits into the first tokens of ``ids``.

    Every prompt of a workload gets the same number of digits, so different ``i`` give
    different leading tokens: no two stamped prompts share even their first KV block and a
    prefix cache cannot reuse anything between them.
    """
    radix = vocab_size - low_id
    value = i
    for pos in range(min(n_digits, len(ids))):
        ids[pos] = low_id + (value + offset) % radix
        value //= radix


def can_be_distinct(n: int, length: int, vocab_size: int, low_id: int) -> bool:
    """Whether ``n`` sequences of ``length`` ids from [low_id, vocab_size) can all differ."""
    radix = vocab_size - low_id
    return n <= 1 or (radix >= 2 and length >= digits(n, radix))


class WorkloadArgs(BaseModel):
    """What the client sends in one run: the fields every kind has. A kind's ``Args`` adds
    ``kind: Literal["<its module name>"]``, its own fields, :meth:`check` and :meth:`generate`."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    #: One line saying what the kind sends (the spec's ``kind`` field lists them).
    description: ClassVar[str] = ""
    #: The smallest valid workload of the kind, as YAML gives it (tests and docs build from it).
    example: ClassVar[dict[str, Any]] = {}
    #: Whether answers are chat text whose output tokens kvlab splits into reasoning and answer.
    splits_reasoning: ClassVar[bool] = False

    batch_size: int = Field(ge=1, description="requests per run")
    concurrency: int | None = Field(None, ge=1, description="requests in flight (kind concurrency only)")
    context_tokens: int | None = Field(
        None,
        ge=2,
        description="prompt + output tokens per request (the context the study names); give this or prompt_tokens",
    )
    prompt_tokens: int | None = Field(None, ge=1, description="prompt tokens per request (instead of context_tokens)")
    output_tokens: int = Field(ge=1, description="output tokens per request (max_tokens)")
    ignore_eos: bool = Field(True, description="generate exactly output_tokens")
    temperature: float = Field(0.0, ge=0, description="sampling temperature")
    seed: int = Field(0, ge=0, description="seed for prompt generation and sampling")
    distinct_prompts: bool = Field(True, description="every request gets different tokens (no shared prefix)")
    load: LoadSpec | None = Field(
        None,
        description="send the run's requests under this load (kvlab.load: closed-loop "
        "concurrency or open-loop rate, warm-up, duration, saturation stop); None: all at "
        "once, or `concurrency` in flight. Part of the run key only when set",
    )

    @model_validator(mode="after")
    def _check(self) -> WorkloadArgs:
        self.check_lengths()
        if self.context_tokens is not None and self.context_tokens <= self.output_tokens:
            raise ValueError(f"context_tokens ({self.context_tokens}) must exceed output_tokens ({self.output_tokens})")
        self.check()
        if self.load is not None and self.load.draws == "random_ids" and not self.distinct_prompts:
            raise ValueError(
                "load.draws 'random_ids' draws a window of ids per prompt: distinct_prompts false is not one"
            )
        if self.load is not None and self.load.draws == "random_ids" and self.kind != "fixed_batch":
            raise ValueError(
                f"load.draws 'random_ids' makes SGLang's random-ids prompts: kind fixed_batch, not {self.kind!r}"
            )
        if self.load is not None and self.load.warmup_requests >= self.n_requests:
            raise ValueError(
                f"load.warmup_requests ({self.load.warmup_requests}) leaves none of the "
                f"{self.n_requests} requests to measure"
            )
        return self

    def check_lengths(self) -> None:
        """ValueError unless the prompt length is given exactly one way."""
        if (self.context_tokens is None) == (self.prompt_tokens is None):
            raise ValueError("give exactly one of context_tokens and prompt_tokens")

    def check(self) -> None:
        """The kind's own rules (ValueError naming the field); the default allows ``concurrency`` or not
        (None: all requests at once)."""

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        """The run's prompts, deterministic from ``seed``, with ids below ``vocab_size``."""
        raise NotImplementedError(f"workload kind {type(self).__name__} has no prompt generator")

    def replay_schedule(self) -> Any:
        """Send offsets the kind's own data gives (a kvlab.load.Schedule: seconds from the first send, one per chain
        start in order), sent on without a ``load``; None (the default): no schedule of its own."""
        return None

    def detail(self) -> list[str]:
        """What the dry run says about this workload beyond length, batch and requests in flight."""
        return []

    @property
    def sharing(self) -> float:
        """Share of the (longest) prompt built to be shared between requests, as the decision tree reads
        it (kvlab.guide); 0 for prompts meant to be distinct."""
        return 0.0

    @property
    def prompt_len(self) -> int:
        """Prompt tokens per request."""
        return self.prompt_tokens if self.prompt_tokens is not None else self.context_tokens - self.output_tokens

    @property
    def n_requests(self) -> int:
        """Requests one run sends."""
        return self.batch_size

    @property
    def in_flight(self) -> int:
        """Most requests in flight at once (a conversation holds at most one); under an open-loop load without a
        cap, the batch size (the bound, not what the arrivals reach)."""
        if self.load is not None and self.load.concurrency is not None:
            return self.load.concurrency
        return self.concurrency if self.concurrency is not None else self.batch_size

    @property
    def total_tokens(self) -> int:
        """Prompt + output tokens per request: what must fit in max_model_len."""
        return self.prompt_len + self.output_tokens

    @classmethod
    def own_fields(cls) -> tuple[str, ...]:
        """The fields only this kind has (any other kind rejects them)."""
        return tuple(n for n in cls.model_fields if n not in WorkloadArgs.model_fields and n != "kind")
