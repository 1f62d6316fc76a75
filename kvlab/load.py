"""Load as a dimension of a prompt-shape workload: closed-loop concurrency or open-loop arrivals, warm-up, the
steady-state window and the rule that stops a load point past saturation (docs/design.md, "Load definitions").

A workload with ``load`` set sends its prompts (batch_size of them, from its kind's generator) under this load
instead of all at once; without ``load`` nothing here applies and the run is what it always was (its key too).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvlab.search import SearchSpec

#: The telemetry series the queue rule reads (kvlab.engines telemetry_names' canonical name).
QUEUE_SERIES = "requests_waiting"


class LoadSpec(BaseModel):
    """How one load point offers its requests: closed loop (``concurrency`` requests in flight, each sent as one
    ends) or open loop (``rate_rps`` arrivals per second, gamma inter-arrival times with shape ``burstiness``),
    the first ``warmup_requests`` excluded, sending stopped at ``duration_s`` or past saturation."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    concurrency: int | None = Field(
        None,
        ge=1,
        description="closed loop: requests (conversations) in flight; with "
        "rate_rps, the most in flight (a cap on the open loop)",
    )
    rate_rps: float | None = Field(None, gt=0, description="open loop: mean arrivals per second")
    burstiness: float = Field(
        1.0,
        gt=0,
        description="open loop: shape of the gamma inter-arrival times (mean "
        "1/rate_rps); 1 is Poisson, below 1 burstier, above 1 more regular (vLLM bench's "
        "--burstiness)",
    )
    arrival_seed: int = Field(0, ge=0, description="seed of the arrival times (the same seed, the same schedule)")
    warmup_requests: int = Field(0, ge=0, description="the first requests sent, left out of every count")
    duration_s: float | None = Field(
        None,
        gt=0,
        description="send no request later than this many seconds after "
        "the first send (the request-count limit is batch_size)",
    )
    stop_ttft_factor: float | None = Field(
        3.0,
        gt=0,
        description="stop sending once the p90 TTFT of the finished "
        "measured requests exceeds this times the SLO's ttft_ms (no SLO TTFT: "
        "rule off; null: off)",
    )
    stop_min_requests: int = Field(8, ge=1, description="finished measured requests the TTFT rule waits for")
    stop_queue_rising: int | None = Field(
        5,
        ge=2,
        description="stop sending once the server's waiting queue "
        "rose over this many consecutive telemetry samples (null: off)",
    )
    stop_climbing: bool = Field(
        True,
        description="on a ladder (the same run at several load levels), skip the "
        "levels above one that stopped past saturation or whose goodput fell from the level "
        "below",
    )
    # How a figure is defined where kvlab and the peers' benchmarks (`vllm bench serve`, SGLang's
    # sglang.benchmark.serving) differ; the defaults are what kvlab always did, and leave the run key as it was
    # (kvlab.experiment.KEY_OMITTED_AT_DEFAULT). docs/design.md, "Load definitions"; docs/performance.md, agreement.
    prompt_form: Literal["token_ids", "text"] = Field(
        "token_ids",
        description="token_ids: send each prompt as token ids (the server's prompt length is exact, "
        "TTFT holds no tokenisation); text: send the ids decoded to text by the model's tokenizer.json, tokenised "
        "by the server inside TTFT (the peers' random datasets); chat prompts are text either way",
    )
    text_lengths: Literal["exact", "decoded"] = Field(
        "exact",
        description="prompt_form text: exact re-encodes the decoded text until the server counts the prompt's "
        "length (kvlab's, as `vllm bench serve`'s random dataset); decoded sends the ids decoded once, as SGLang's "
        "benchmark's random-ids does, so the server's counts vary around it (247-264 tokens for 256 on kvlab's "
        "tiny model) and prefills take token counts the engine may not have run before",
    )
    draws: Literal["kvlab", "random_ids"] = Field(
        "kvlab",
        description="whose random draws make the prompts (kind fixed_batch) and an open loop's gaps: kvlab's own "
        "generators, or SGLang's benchmark's random-ids (`sglang.benchmark.serving --dataset-name random-ids "
        "--random-range-ratio 1 --seed S`): numpy's legacy generator seeded with the workload's seed plus the repeat, "
        "each prompt a window of consecutive token ids from a random offset, then each exponential gap, in its order, "
        "so the same seed, lengths and vocabulary give its very prompts and schedule (arrival_seed is not used). "
        "With prompt_form text and text_lengths decoded, the very texts it sends. Its benchmark also sleeps the gap "
        "it draws after the last send before its run ends, so with window span an open loop's window lasts at "
        "least that gap past the last send, as its duration does",
    )
    phase: Literal["together", "staggered"] = Field(
        "together",
        description="closed loop: together sends the first `concurrency` requests at once and each "
        "later one as a slot frees (kvlab's loop and the peers' semaphore; equal requests then run in waves); "
        "staggered sends each of the first wave once the one before it has its first token, so the requests in "
        "flight are at different points of their decode",
    )
    arrivals: Literal["drawn", "scaled"] = Field(
        "drawn",
        description="open loop: drawn sends the first request at once and each later one after its drawn gap "
        "(kvlab's and SGLang's benchmark; the n sends span a random time, mean (n-1)/rate_rps); scaled draws a gap "
        "before the first send too and scales all n so the last send falls exactly n/rate_rps seconds after the "
        "load starts (`vllm bench serve`), and a `span` window then starts where the load starts",
    )
    connections: Literal["kept", "per_request"] = Field(
        "kept",
        description="kept: requests reuse the client's open HTTP connections (kvlab's, `vllm bench serve`'s); "
        "per_request: each request opens a new connection, inside its TTFT (SGLang's benchmark opens a new "
        "session per request)",
    )
    window: Literal["steady", "span"] = Field(
        "steady",
        description="steady: the counts and rates cover the requests sent and finished between the "
        "first measured send and the last send (no ramp-down); span: every measured request, over the first "
        "measured send to the last completion (the peers' benchmark duration; under draws random_ids an open "
        "loop's window ends no earlier than the gap drawn after the last send, as SGLang's benchmark's does)",
    )

    search: SearchSpec | None = Field(
        None,
        description="find the highest level of this load (concurrency, or rate_rps for an open loop) whose SLO "
        "attainment passes, by bracket and bisection (kvlab.search); each probe is a run of its own with its level; "
        "the stated level is not measured. Needs the experiment's slo",
    )

    @model_validator(mode="after")
    def _some_load(self) -> LoadSpec:
        if self.concurrency is None and self.rate_rps is None:
            raise ValueError("a load states concurrency (closed loop) or rate_rps (open loop)")
        if self.phase == "staggered" and self.rate_rps is not None:
            raise ValueError("phase 'staggered' applies to a closed loop (concurrency without rate_rps) only")
        if self.arrivals == "scaled" and self.rate_rps is None:
            raise ValueError("arrivals 'scaled' applies to an open loop (rate_rps) only")
        if self.text_lengths == "decoded" and self.prompt_form != "text":
            raise ValueError("text_lengths 'decoded' applies to prompt_form 'text' only (token ids are exact)")
        if self.draws == "random_ids" and self.burstiness != 1.0:
            raise ValueError(
                "draws 'random_ids' draws exponential gaps (SGLang's benchmark has no burstiness): burstiness 1"
            )
        if self.draws == "random_ids" and self.arrivals == "scaled":
            raise ValueError("draws 'random_ids' sends as SGLang's benchmark draws (arrivals 'drawn'), not scaled")
        return self

    @property
    def mode(self) -> str:
        """``open`` when arrivals follow a rate, ``closed`` when a fixed number is kept in flight."""
        return "open" if self.rate_rps is not None else "closed"

    def label(self) -> str:
        """Short name of the load point, e.g. 'c=8' or '2 req/s (gamma 0.5)'."""
        if self.rate_rps is None:
            return f"c={self.concurrency}"
        gamma = "" if self.burstiness == 1.0 else f" (gamma {self.burstiness:g})"
        cap = "" if self.concurrency is None else f", c<={self.concurrency}"
        return f"{self.rate_rps:g} req/s{gamma}{cap}"


def arrival_times(n: int, rate_rps: float, burstiness: float = 1.0, seed: int = 0, scaled: bool = False) -> list[float]:
    """Send offsets in seconds from the load's start of ``n`` open-loop arrivals: the first at 0, then cumulative
    gamma(shape=burstiness, scale=1/(rate_rps*burstiness)) gaps, mean 1/rate_rps (burstiness 1: exponential gaps,
    a Poisson process). Deterministic from ``seed`` (numpy's default_rng).

    ``scaled`` (``arrivals: scaled``, `vllm bench serve`'s schedule): n gaps, the first before the first send, their
    cumulative sums scaled so the last send falls exactly at n / rate_rps, so the offered rate is exact whatever the
    draw (vLLM 0.32 benchmarks/serve.py get_request; its own generator, so not its draw)."""
    if n <= 0:
        return []
    rng = np.random.default_rng(seed)
    if scaled:
        cum = np.cumsum(rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n))
        return (cum * ((n / rate_rps) / cum[-1])).tolist()
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


@dataclass(frozen=True)
class Schedule:
    """An open loop's send offsets drawn with its prompts (``draws: random_ids``, kvlab.rows.sending_for): seconds
    from the load's start, one per chain start in order, and ``tail_s``, the gap drawn after the last send. SGLang's
    benchmark sleeps that gap before its run ends (its request generator sleeps after every send, the last too), so
    its duration runs at least that long past the last send; a ``span`` window does the same (:meth:`until_s`)."""

    offsets: tuple[float, ...]
    tail_s: float = 0.0

    def until_s(self, records: Sequence[Any], stopped: str | None) -> float:
        """Where this schedule ends on the requests' clock (seconds from the first send): its last send offset plus
        the gap drawn after it, which a ``span`` window lasts at least until (:func:`span_window`); 0 (no such end)
        where sending stopped early (``stopped``: the saturation stop's reason, or fewer ``records`` sent than
        offsets drawn: the duration limit), since the gap follows a send that never happened. The scheduled time,
        not the last send's: SGLang's benchmark starts that sleep as it hands out its last request, on its
        schedule, before any limit on requests in flight holds the request back."""
        if stopped is not None or len(records) < len(self.offsets):
            return 0.0
        return self.offsets[-1] - self.offsets[0] + self.tail_s


def schedule_lead_s(offsets: Mapping[int, float] | None) -> float:
    """How long after the load's start its first request is sent: the earliest of the send offsets
    :func:`client_args` gave the client (0 for a drawn schedule or a closed loop; a scaled one draws a gap before
    its first send). The requests' clock starts at the first send, so a ``span`` window starts this much before it."""
    return min(offsets.values(), default=0.0) if offsets else 0.0


def p90(values: Sequence[float]) -> float:
    """numpy's linear-interpolation 90th percentile (as RUNS' percentiles)."""
    return float(np.percentile(np.asarray(values, dtype=float), 90))


def queue_rising(samples: Sequence[tuple[float, dict, str | None]], k: int) -> bool:
    """Whether the last ``k`` samples that carry the waiting-queue series rose strictly one after the other."""
    queue = [v[QUEUE_SERIES] for _, v, err in samples if err is None and v.get(QUEUE_SERIES) is not None]
    last = queue[-k:]
    return len(last) == k and all(b > a for a, b in zip(last, last[1:]))


class SaturationWatch:
    """The stop rule of one load point: :meth:`finished` is told each measured request's TTFT as it ends,
    :meth:`reason` (asked before each send) says why to stop sending, or None."""

    def __init__(
        self, load: LoadSpec, slo_ttft_ms: float | None, samples: list[tuple[float, dict, str | None]] | None = None
    ):
        self.load = load
        self.limit_ms = (
            load.stop_ttft_factor * slo_ttft_ms
            if load.stop_ttft_factor is not None and slo_ttft_ms is not None
            else None
        )
        self.samples = samples if samples is not None else []
        self.ttfts: list[float] = []
        self.stopped: str | None = None

    def finished(self, ttft_ms: float | None) -> None:
        if ttft_ms is not None:
            self.ttfts.append(ttft_ms)

    def reason(self) -> str | None:
        if self.stopped is None:
            self.stopped = self._check()
        return self.stopped

    def _check(self) -> str | None:
        if self.limit_ms is not None and len(self.ttfts) >= self.load.stop_min_requests:
            q = p90(self.ttfts)
            if q > self.limit_ms:
                return (
                    f"past saturation: p90 TTFT {q:.0f} ms of {len(self.ttfts)} finished requests > "
                    f"{self.load.stop_ttft_factor:g} x the SLO's {self.limit_ms / self.load.stop_ttft_factor:g} ms"
                )
        k = self.load.stop_queue_rising
        if k is not None and queue_rising(self.samples, k):
            return f"past saturation: the server's waiting queue rose over {k} consecutive telemetry samples"
        return None


@dataclass(frozen=True)
class Window:
    """A load point's steady-state window on the requests' clock (seconds from the first send): from the first
    send of a measured (not warm-up) request to the last send of the point; the requests counted are those sent
    and finished inside it."""

    start_s: float
    end_s: float
    counted: tuple[int, ...]  # request_index of the requests inside
    warmup: tuple[int, ...]  # request_index of the warm-up requests
    outside: tuple[int, ...]  # measured requests that started or finished outside the window
    #: a span window that ends where its drawn schedule ends, the gap after the last send, past the last completion
    #: (:meth:`Schedule.until_s`), not at the last completion
    ends_with_tail: bool = False

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


def steady_window(records: Sequence[Any], warmup_requests: int) -> Window:
    """The window of a load point's ``records`` (kvlab.client.RequestRecord: ``t_send_s``, ``t_end``/``t_send``
    give the finish): the first ``warmup_requests`` sent are warm-up; the window runs from the first measured send
    to the last send; a measured request counts when it finished (success or failure) by the window's end."""
    by_send = sorted(records, key=lambda r: (r.t_send_s, r.request_index))
    warm = by_send[:warmup_requests]
    measured = by_send[warmup_requests:]
    if not measured:
        return Window(0.0, 0.0, (), tuple(r.request_index for r in warm), ())
    start, end = measured[0].t_send_s, by_send[-1].t_send_s
    counted, outside = [], []
    for r in measured:
        finish_s = r.t_send_s + (r.t_end - r.t_send)
        (counted if start <= r.t_send_s and finish_s <= end else outside).append(r.request_index)
    return Window(
        start, end, tuple(sorted(counted)), tuple(sorted(r.request_index for r in warm)), tuple(sorted(outside))
    )


def span_window(records: Sequence[Any], warmup_requests: int, lead_s: float = 0.0, until_s: float = 0.0) -> Window:
    """The peers' window of a load point's ``records`` (``window: span``): from the first measured send to the last
    measured completion; every measured (not warm-up) request counts, the ramp-up and ramp-down included, as
    `vllm bench serve` and SGLang's benchmark divide by their whole duration. ``lead_s``: how long before the first
    send the load started (:func:`schedule_lead_s`; without warm-up requests the window starts there, as vLLM's
    duration does under its scaled schedule). ``until_s``: where the drawn schedule ends on the requests' clock, its
    last send plus the gap drawn after it (:meth:`Schedule.until_s`); the window ends no earlier, as SGLang's
    benchmark's duration does."""
    by_send = sorted(records, key=lambda r: (r.t_send_s, r.request_index))
    warm, measured = by_send[:warmup_requests], by_send[warmup_requests:]
    if not measured:
        return Window(0.0, 0.0, (), tuple(r.request_index for r in warm), ())
    last_done = max(r.t_send_s + (r.t_end - r.t_send) for r in measured)
    return Window(
        measured[0].t_send_s - (lead_s if not warm else 0.0),
        max(last_done, until_s),
        tuple(sorted(r.request_index for r in measured)),
        tuple(sorted(r.request_index for r in warm)),
        (),
        ends_with_tail=until_s > last_done,
    )


def window_of(records: Sequence[Any], load: LoadSpec, lead_s: float = 0.0, until_s: float = 0.0) -> Window:
    """The window ``load.window`` names: :func:`steady_window` or :func:`span_window` (``lead_s``, ``until_s``: see
    there)."""
    if load.window == "span":
        return span_window(records, load.warmup_requests, lead_s, until_s)
    return steady_window(records, load.warmup_requests)


#: Rounds of decode and re-encode :func:`as_text` tries to reach a prompt's length in tokens.
TEXT_ROUNDS = 10


def tokenizer_of(path: str | Path) -> Any:
    """The Hugging Face tokenizer in ``path`` (a tokenizer.json), parsed once per file and version: every run of a
    sweep that sends text (:func:`as_text`) or draws below its vocabulary (``draws: random_ids``) reads the same
    file, a real model's of several MB."""
    path = Path(path)
    return _parsed_tokenizer(str(path.resolve()), path.stat().st_mtime_ns)


@lru_cache(maxsize=4)
def _parsed_tokenizer(path: str, mtime_ns: int) -> Any:
    from tokenizers import Tokenizer  # only text prompts and random_ids draws need it: the client's import stays light

    return Tokenizer.from_file(path)


def as_text(prompts: Sequence[Any], tokenizer_file: str | Path, exact: bool = True) -> list[Any]:
    """``prompts`` with each token-id prompt replaced by text from ``tokenizer_file`` (a Hugging Face
    tokenizer.json, the model's), for ``prompt_form: text``: the server tokenises it again, inside TTFT, as for the
    peers' random datasets. The ids less the special tokens the server adds (a BOS) are decoded; ``exact``
    (``text_lengths: exact``, as `vllm bench serve`'s random dataset) then re-encodes the text and cuts or tops it up
    from the ids until it encodes to that many tokens, at most :data:`TEXT_ROUNDS` rounds; otherwise
    (``text_lengths: decoded``, as SGLang's benchmark's random-ids) the decoded text goes as it is and the server's
    count varies around the length. The server's count (usage.prompt_tokens) is what the run records. Shared-prefix
    counts become unknown (None). Text and chat prompts are returned as they are."""
    path = Path(tokenizer_file)
    if not path.is_file():
        raise ValueError(
            f"load.prompt_form 'text' decodes the prompts with the model's tokenizer.json: {path} does "
            "not exist (a local model folder has one)"
        )
    tok = tokenizer_of(path)
    special = len(tok.encode("", add_special_tokens=True).ids) - len(tok.encode("", add_special_tokens=False).ids)

    def text_of(ids: list[int]) -> str:
        target = max(1, len(ids) - special)
        cur = ids[:target]
        text = tok.decode(cur, skip_special_tokens=False)
        for _ in range(TEXT_ROUNDS if exact else 0):
            enc = tok.encode(text, add_special_tokens=False).ids
            if len(enc) == target:
                break
            cur = enc[:target] if len(enc) > target else enc + ids[len(enc) : target]
            text = tok.decode(cur, skip_special_tokens=False)
        return text

    return [
        replace(p, token_ids=None, text=text_of(list(p.token_ids)), shared_prefix_tokens=None)
        if p.token_ids is not None
        else p
        for p in prompts
    ]


def prompt_form(prompts: Sequence[Any]) -> str | None:
    """What a run sent (RUNS.prompt_form): token_ids, text or chat, from its prompts; None for none."""
    forms = {"chat" if p.messages is not None else "token_ids" if p.token_ids is not None else "text" for p in prompts}
    return forms.pop() if len(forms) == 1 else ("+".join(sorted(forms)) if forms else None)


def chain_starts(prompts: Sequence[Any]) -> list[int]:
    """The index of each chain's first prompt (a conversation is one chain, any other prompt its own), in the order
    kvlab.client.run_requests starts them."""
    seen: set[Any] = set()
    firsts = []
    for p in sorted(prompts, key=lambda p: p.index):
        key = ("conversation", p.conversation) if p.conversation is not None else ("prompt", p.index)
        if key not in seen:
            seen.add(key)
            firsts.append(p.index)
    return firsts


def client_args(
    load: LoadSpec, prompts: Sequence[Any], watch: SaturationWatch, schedule: Schedule | None = None
) -> dict[str, Any]:
    """The keyword arguments of kvlab.client.run_requests (besides ``concurrency``) that send ``prompts`` under
    ``load``: open-loop send offsets (``schedule``'s, one per chain start in order, where the run's draws gave them:
    ``draws: random_ids``; else :func:`arrival_times`), the duration limit, and the saturation watch (the TTFT rule
    reads the requests that finish after the first ``warmup_requests`` finishes)."""
    firsts = chain_starts(prompts)
    offsets = None
    if load.rate_rps is not None:
        times = (
            schedule.offsets
            if schedule is not None
            else arrival_times(
                len(firsts), load.rate_rps, load.burstiness, load.arrival_seed, scaled=load.arrivals == "scaled"
            )
        )
        offsets = dict(zip(firsts, times, strict=True))
    finished = [0]
    stagger = (
        Stagger(firsts, load.concurrency, watch.reason, load.duration_s)
        if load.phase == "staggered" and load.concurrency is not None
        else None
    )

    def on_finish(index: int, ttft_ms: float | None) -> None:
        finished[0] += 1
        if stagger is not None:
            stagger.started(index)
        if finished[0] > load.warmup_requests:
            watch.finished(ttft_ms)

    args: dict[str, Any] = {
        "new_connection_per_request": load.connections == "per_request",
        "start_offsets": offsets,
        "send_until_s": load.duration_s,
        "stop": watch.reason,
        "on_finish": on_finish,
    }
    if stagger is not None:
        args |= {"before_send": stagger.wait, "on_read": stagger.on_read}
    return args


class Stagger:
    """``phase: staggered``: the k-th chain of the first wave (``concurrency`` chains, in the order
    kvlab.client.run_requests starts them) is sent once the (k-1)-th has its first response bytes (or has ended);
    every later chain waits for the last of the first wave, then for a free slot as usual. A chain whose
    predecessor was never sent (sending stopped: ``stop`` gave a reason, or ``send_until_s`` passed) is let go at
    once, and the client then sends nothing for it either."""

    POLL_S = 0.05  # how often a waiting chain checks that sending has not stopped meanwhile

    def __init__(
        self, firsts: Sequence[int], concurrency: int, stop: Callable[[], str | None], send_until_s: float | None
    ):
        self.after: dict[int, int] = {}
        for k, index in enumerate(firsts):
            if k:
                self.after[index] = firsts[min(k, concurrency) - 1]
        self.events: dict[int, asyncio.Event] = {}
        self.stop, self.send_until_s = stop, send_until_s
        self.t0: float | None = None

    def _event(self, index: int) -> asyncio.Event:
        return self.events.setdefault(index, asyncio.Event())

    def started(self, index: int) -> None:
        self._event(index).set()

    def on_read(self, index: int, data: bytes, t: float) -> None:
        ev = self.events.get(index)
        if ev is None or not ev.is_set():
            self._event(index).set()

    async def wait(self, index: int) -> None:
        if self.t0 is None:
            self.t0 = time.perf_counter()
        before = self.after.get(index)
        if before is None:
            return
        ev = self._event(before)
        while not ev.is_set():
            if self.stop() is not None or (
                self.send_until_s is not None and time.perf_counter() - self.t0 > self.send_until_s
            ):
                return
            try:
                await asyncio.wait_for(ev.wait(), self.POLL_S)
            except TimeoutError:
                pass


@dataclass(frozen=True)
class LoadOutcome:
    """What a load point did: its load, steady-state window and why it stopped early (None: it ran to its limit)."""

    load: LoadSpec
    window: Window
    stopped: str | None

    def note(self, n_prompts: int) -> str:
        """The run's note on it (RUNS.notes)."""
        w = self.window
        sent = len(w.counted) + len(w.warmup) + len(w.outside)
        end = f"stopped early, {self.stopped}" if self.stopped else "ran to its limit"
        window = (
            "steady-state window"
            if self.load.window == "steady"
            else "window from first send to the end of the gap drawn after the last send (past the last completion)"
            if w.ends_with_tail
            else "window from first send to last completion"
        )
        how = f"{self.load.phase} phase, " if self.load.mode == "closed" else ""
        return (
            f"load {self.load.label()}: {sent} of {n_prompts} requests sent, {len(w.warmup)} warm-up, "
            f"{len(w.counted)} inside the {w.length_s:.3g} s {window}, {len(w.outside)} outside; {end}; "
            f"{how}prompts as {self.load.prompt_form.replace('_', ' ')}"
            + (
                " as decoded (lengths vary)"
                if self.load.prompt_form == "text" and self.load.text_lengths == "decoded"
                else ""
            )
            + (f"; {DRAW_WORDS['random_ids']}" if self.load.draws == "random_ids" else "")
        )

    def columns(self) -> dict[str, Any]:
        """The RUNS columns of a load point (kvlab.schema RUNS, 'load_*', 'requests_warmup', ...)."""
        return {
            "load_mode": self.load.mode,
            "load_concurrency": self.load.concurrency,
            "load_rate_rps": self.load.rate_rps,
            "load_burstiness": self.load.burstiness if self.load.rate_rps is not None else None,
            "requests_warmup": len(self.window.warmup),
            "requests_outside_window": len(self.window.outside),
            "window_s": self.window.length_s or None,
            "load_stop": self.stopped,
            "load_phase": self.load.phase if self.load.mode == "closed" else None,
            "load_window": self.load.window,
            "load_arrivals": self.load.arrivals if self.load.mode == "open" else None,
            "load_connections": self.load.connections,
            "load_text_lengths": self.load.text_lengths if self.load.prompt_form == "text" else None,
            "load_draws": self.load.draws,
        }


# ----------------------------------------------------------------------------- what a figure under load means

#: How each definition reads in a label (RUNS.prompt_form, load_phase, load_window values).
FORM_WORDS = {"token_ids": "token-id prompts", "text": "text prompts (tokenised by the server)", "chat": "chat prompts"}
PHASE_WORDS = {"together": "first wave sent together", "staggered": "first wave staggered"}
WINDOW_WORDS = {"steady": "steady-state window", "span": "first send to last completion"}
ARRIVAL_WORDS = {"drawn": "arrival gaps as drawn", "scaled": "arrivals scaled to the exact rate"}
CONNECTION_WORDS = {"kept": "connections kept open", "per_request": "a new connection per request"}
LENGTH_WORDS = {"exact": "text re-encoded to exact length", "decoded": "text as decoded (the server's lengths vary)"}
DRAW_WORDS = {
    "kvlab": "kvlab's draws",
    "random_ids": "prompts and gaps drawn as a peer's random-ids dataset draws them",
}


def conditions_label(rows: Any) -> str | None:
    """What the TTFT and rates of load runs were measured under, for a page that prints them: e.g. 'token-id
    prompts, first wave sent together, steady-state window'. ``rows``: RUNS rows (a polars frame or dicts); only
    those under a load count; distinct conditions are joined with '; '. None when no row is under a load.

    Runs stored before kvlab recorded these (columns null) were measured with the only behaviour kvlab had then:
    first wave together and the steady-state window; their prompt form is 'not recorded'."""
    dicts = rows.to_dicts() if hasattr(rows, "to_dicts") else list(rows)
    labels: list[str] = []
    for r in dicts:
        mode = r.get("load_mode")
        if mode is None:
            continue
        parts = [FORM_WORDS.get(r.get("prompt_form") or "", "prompt form not recorded")]
        if r.get("load_text_lengths") == "decoded":  # exact, kvlab's only way before it was recorded, goes unsaid
            parts.append(LENGTH_WORDS["decoded"])
        if r.get("load_draws") == "random_ids":  # kvlab, its only draws before they were recorded, goes unsaid
            parts.append(DRAW_WORDS["random_ids"])
        if mode == "closed":
            parts.append(PHASE_WORDS[r.get("load_phase") or "together"])
        elif r.get("load_arrivals") == "scaled":  # drawn, kvlab's only schedule before it was recorded, goes unsaid
            parts.append(ARRIVAL_WORDS["scaled"])
        if r.get("load_connections") == "per_request":  # kept, kvlab's only way before it was recorded, goes unsaid
            parts.append(CONNECTION_WORDS["per_request"])
        parts.append(WINDOW_WORDS[r.get("load_window") or "steady"])
        label = ", ".join(parts)
        if label not in labels:
            labels.append(label)
    return "; ".join(labels) if labels else None


# ----------------------------------------------------------------------------- the ladder

#: How far goodput must fall from one rung to the next to stop the climb (a share of the lower rung's): a smaller
#: dip is within one run's noise at n = 1.
GOODPUT_FALL = 0.10
#: The load fields that make one rung of a ladder differ from the next (with the workload's batch_size).
RUNG_FIELDS = ("concurrency", "rate_rps", "warmup_requests", "duration_s")


def level(load: LoadSpec) -> float:
    """A load point's place on its ladder: arrivals per second (open loop) or requests in flight (closed)."""
    return float(load.rate_rps if load.rate_rps is not None else load.concurrency)


def ladder_key(run: Any) -> str | None:
    """What the rungs of one ladder share (kvlab.experiment.RunSpec ``run``): everything but the load level and the request
    count and warm-up that come with it, per experiment, engine and repeat; None for a run without a load."""
    w = run.workload.model_dump(mode="json")
    load = w.pop("load")
    if load is None:
        return None
    w.pop("batch_size")
    rest = {k: v for k, v in load.items() if k not in RUNG_FIELDS} | {"mode": run.workload.load.mode}
    payload = {
        "experiment": run.experiment,
        "engine_label": run.engine_label,
        "engine": run.engine.model_dump(mode="json"),
        "workload": w,
        "load": rest,
        "repeat": run.repeat,
        "slo": run.slo.model_dump(mode="json") if run.slo else None,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass
class Rung:
    """What a measured rung tells the climb: its level, its goodput (None without an SLO) and its early stop."""

    level: float
    goodput: float | None
    stopped: str | None


def rung_of(row: dict[str, Any]) -> Rung | None:
    """A stored RUNS row of a load point as a :class:`Rung`; None when the row is no measured load point."""
    if row.get("load_mode") is None or row.get("status") != "ok":
        return None
    lvl = row["load_rate_rps"] if row["load_mode"] == "open" else row["load_concurrency"]
    t, within = row.get("window_s"), row.get("requests_within_slo")
    goodput = within / t if within is not None and t else None
    return Rung(float(lvl), goodput, row.get("load_stop"))


def not_climbed(rungs: Sequence[Rung], at: float) -> str | None:
    """Why a ladder does not climb to level ``at``, from its measured ``rungs`` below it, or None: a lower rung
    stopped past saturation, or the goodput fell by more than :data:`GOODPUT_FALL` from one rung to the next
    (docs/design.md, "Load definitions")."""
    below = sorted((r for r in rungs if r.level < at), key=lambda r: r.level)
    for r in below:
        if r.stopped:
            return f"not climbed: the rung at {r.level:g} stopped past saturation"
    for lo, hi in zip(below, below[1:]):
        if lo.goodput is not None and hi.goodput is not None and hi.goodput < lo.goodput * (1 - GOODPUT_FALL):
            return (
                f"not climbed: goodput fell from {lo.goodput:.3g} req/s at {lo.level:g} to {hi.goodput:.3g} "
                f"at {hi.level:g}"
            )
    return None
