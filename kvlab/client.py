"""Async streaming OpenAI-compatible client: per-request timestamps, server usage and per-request errors;
the per-request metric definitions, and a batch's records as REQUESTS rows and a RUNS summary."""

from __future__ import annotations

import array
import asyncio
import fcntl
import functools
import gc
import json
import termios
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import aiohttp
import numpy as np
import polars as pl
from aiohttp.client_proto import ResponseHandler

from kvlab.schema import REQUEST_ERROR_KINDS, REQUESTS, percentiles_ms
from kvlab.workloads import Prompt

#: aiohttp's per-connection read buffer. Long-context streams must not go through a small
#: line buffer (a 64 KB one collapses above ~50K context, vLLM issue 39963).
READ_BUFSIZE = 4 * 1024 * 1024
#: How a request that got no byte from the server for ``stall_s`` seconds is recorded (its error starts so). A stall is
#: judged only once the socket is empty: a starved client whose stall timer fires while the server's bytes wait unread in
#: its socket reads them first (:class:`_StallJudged`).
STALLED = "stalled: no data from the server for"
#: How often the client's own event loop is timed during a batch (:class:`_LoopLag`): the batch records how late its
#: wake-ups came at most (``BatchResult.loop_lag_max_ms``), so a client too starved to read in time shows as such.
LOOP_LAG_INTERVAL_S = 0.05
ERROR_TEXT_CHARS = 2000  # how much of an error body or event a record keeps
#: The longest SSE line the client holds while it waits for the line's newline (16 MiB: a 200K-token
#: stream's lines are a few hundred bytes, a huge chat chunk a few MB); a longer one fails its request.
MAX_LINE_BYTES = 16 * 2**20
#: The most of a non-200 response body the client reads (64 KiB; a record keeps ERROR_TEXT_CHARS of it).
MAX_ERROR_BODY_BYTES = 64 * 2**10
#: Token-bearing chunks a stream may bring beyond its ``max_tokens`` (each carries at least one token, so a stream
#: of more than max_tokens cannot be right): past max_tokens the request is flagged (:func:`count_flag`), past
#: max_tokens + CHUNK_SLACK it fails (``TOO_MANY_CHUNKS``) and the rest of the stream is not read.
CHUNK_SLACK = 16
#: A stream's byte cap: STREAM_BYTES_BASE plus STREAM_BYTES_PER_TOKEN per token of max_tokens (64 MiB + 64 KiB per
#: token: a token chunk is a few hundred bytes, a huge one a few MB); a longer stream fails (``STREAM_TOO_LARGE``).
STREAM_BYTES_BASE = 64 * 2**20
STREAM_BYTES_PER_TOKEN = 64 * 2**10
#: A request's deadline, when the engine has a stall limit: stall_s x (max_tokens + DEADLINE_EVENTS), each of the
#: max_tokens token chunks, the first byte and the end (usage, [DONE]) allowed the stall limit at most, so a server
#: that drips a byte within each stall limit still ends within it. Never beyond ``timeout_s`` (3,600 s by default).
DEADLINE_EVENTS = 2
#: Error prefixes of the checks this module adds (type checks of every field read, the line cap, the stream's
#: chunk and byte caps, a last resort).
MALFORMED = "malformed response:"
LINE_TOO_LONG = "SSE line longer than"
TOO_MANY_CHUNKS = "more token-bearing chunks than"
STREAM_TOO_LARGE = "response larger than"
CLIENT_ERROR = "client error:"
#: How a failed request's error is classified (REQUESTS.error_kind): the prefix its error text starts with.
#: Every error the client records starts with one of these.
ERROR_KINDS: dict[str, str] = {
    "HTTP ": "http_status",  # a non-200 answer (redirects are not followed: a key stays with its host)
    "error event in stream": "error_event",
    "stream finished with finish_reason": "aborted",
    "stream ended without [DONE]": "incomplete",
    STALLED: "stalled",
    "timeout after": "timeout",
    "connection dropped mid-stream": "dropped",
    "connection failed": "connection",
    "unparseable stream data": "unparseable",
    "unexpected stream data": "malformed",
    MALFORMED: "malformed",
    LINE_TOO_LONG: "oversized",
    TOO_MANY_CHUNKS: "oversized",
    STREAM_TOO_LARGE: "oversized",
    CLIENT_ERROR: "client",
}
if set(ERROR_KINDS.values()) != set(REQUEST_ERROR_KINDS):  # "client": an exception the checks did not foresee
    raise ImportError(
        f"client error kinds {sorted(set(ERROR_KINDS.values()))} do not match the schema's "
        f"{sorted(REQUEST_ERROR_KINDS)}"
    )


def error_kind(error: str | None) -> str | None:
    """The class of a request's error text (see :data:`ERROR_KINDS`); None for no error."""
    if error is None:
        return None
    for prefix, kind in ERROR_KINDS.items():
        if error.startswith(prefix):
            return kind
    return "client"


#: The timing hook of :func:`run_requests`: (request index, bytes of one network read, perf_counter stamp).
OnRead = Callable[[int, bytes, float], None]

_DONE = b"[DONE]"
_TEXT_KEY = b'"text":"'  # compact JSON as vLLM (pydantic) and SGLang (orjson) write it
_EMPTY_TEXT = b'"text":""'


@dataclass(frozen=True)
class RequestRecord:
    """One request's outcome; :func:`request_rows` stores the fields the REQUESTS table names (by name).

    ``*_s`` fields are seconds from the batch's first send; the raw ``t_*`` and
    ``chunk_times`` are absolute ``time.perf_counter()`` values.
    """

    request_index: int
    status: str  # "ok" | "failed"
    error: str | None
    http_status: int | None
    prompt_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    cached_tokens: int | None
    chunks: int
    t_send_s: float
    t_first_s: float | None
    t_last_s: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    itl_max_ms: float | None
    # raw, not stored in REQUESTS
    t_send: float
    t_first: float | None
    t_last: float | None
    t_end: float  # stream finished, failed or timed out
    chunk_times: tuple[float, ...] = field(repr=False)  # thousands of floats: not in reprs
    reasoning_chunks: int  # chunks carrying reasoning text (chat with a reasoning parser)
    t_first_answer: float | None  # first chunk carrying answer (non-reasoning) text
    #: First chunk with a choice, even with empty text. A byte-level tokenizer's partial
    #: UTF-8 comes as empty-text chunks, so t_first - t_first_chunk shows how much later the
    #: first visible text came than the first streamed token (diagnostic, not TTFT).
    t_first_chunk: float | None
    empty_chunks: int  # chunks with a choice but no text (role chunk, held-back partial characters)
    requested_prompt_tokens: int | None  # exact length sent, for token-ID prompts
    requested_output_tokens: int
    text: str | None  # answer text, when kept (chat, or keep_text=True)
    reasoning_text: str | None
    conversation: int | None = None  # the prompt's (multi_turn; None for other kinds)
    turn: int | None = None
    #: Why the reported usage.completion_tokens cannot be right (see :func:`count_flag`); None when plausible.
    count_flag: str | None = None

    @property
    def error_kind(self) -> str | None:
        """The class of this request's error (:func:`error_kind`); None when it succeeded."""
        return error_kind(self.error)


@dataclass(frozen=True, repr=False)
class BatchResult:
    """All records of one batch, in prompt order, with the batch clock."""

    records: list[RequestRecord]
    t0: float  # perf_counter of the first send
    t_end: float  # perf_counter of the last completion (success or failure)
    batch_time_s: float  # first send to last completion
    started_at: str  # ISO-8601 UTC wall time of the first send
    #: The largest delay of the client's own event loop while the batch ran (:class:`_LoopLag`), in ms; None: not timed
    loop_lag_max_ms: float | None = None

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.records)

    def __repr__(self) -> str:
        # Short on purpose: Python 3.11's asyncio.run formats the main task's result (this object)
        # when it restores the SIGINT handler; a full repr of every chunk time cost ~5% of a big batch.
        failed = sum(r.status != "ok" for r in self.records)
        return (
            f"BatchResult(<{len(self.records)} records, {failed} failed>, t0={self.t0!r}, "
            f"t_end={self.t_end!r}, batch_time_s={self.batch_time_s!r}, started_at={self.started_at!r}, "
            f"loop_lag_max_ms={self.loop_lag_max_ms!r})"
        )


# ----------------------------------------------------------------- per-request definitions
# One set of metric definitions (docs/design.md, "Metric definitions"): every engine's numbers go through these.


def ttft_ms(t_send: float | None, t_first: float | None) -> float | None:
    """Time to first token: first chunk carrying non-empty text (content or reasoning) minus send."""
    if t_send is None or t_first is None:
        return None
    return (t_first - t_send) * 1e3


def e2e_ms(t_send: float | None, t_last: float | None) -> float | None:
    """Request latency: last token-bearing chunk minus send."""
    if t_send is None or t_last is None:
        return None
    return (t_last - t_send) * 1e3


def tpot_ms(t_first: float | None, t_last: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first: (t_last - t_first) / (n - 1), n = usage.completion_tokens.

    Undefined (None) when n < 2 or the server reported no usage: chunk counts are not token counts.
    """
    if t_first is None or t_last is None or output_tokens is None or output_tokens < 2:
        return None
    return (t_last - t_first) * 1e3 / (output_tokens - 1)


def chunk_gaps_ms(chunk_times: Sequence[float]) -> list[float]:
    """Inter-chunk latencies in ms (per chunk, not per token: a chunk may carry several tokens).

    Chunks that came in one network read share its timestamp, so their gaps are 0 here: not a latency the
    client saw. :func:`itl_gaps_ms` is the ITL the records report."""
    return [(b - a) * 1e3 for a, b in zip(chunk_times, chunk_times[1:])]


def itl_gaps_ms(chunk_times: Sequence[float]) -> list[float]:
    """Inter-token latency per network read, in ms: the gaps between successive network reads that brought
    token-bearing chunks (docs/design.md, "Metric definitions").

    Every chunk of one read is stamped with that read's clock (the client cannot see when the server wrote
    each of them), so the chunks of a read count as one arrival: the zero gaps inside a read are left out
    rather than averaged in. A gap is therefore per read, not per token or per SSE event."""
    gaps: list[float] = []
    prev: float | None = None
    for t in chunk_times:
        if prev is not None and t != prev:
            gaps.append((t - prev) * 1e3)
        prev = t
    return gaps


def itl_max_ms(chunk_times: Sequence[float]) -> float | None:
    """Largest ITL (:func:`itl_gaps_ms`, per network read); None when the tokens came in fewer than two reads."""
    gaps = itl_gaps_ms(chunk_times)
    return max(gaps) if gaps else None


class _Acc:
    """Mutable per-request state while the stream is read (kept small: touched per chunk)."""

    __slots__ = (
        "index",
        "t_send",
        "t_end",
        "http_status",
        "error",
        "done",
        "chunk_times",
        "usage",
        "reasoning_chunks",
        "t_first_answer",
        "text",
        "reasoning",
        "error_event_next",
        "t_first_chunk",
        "empty_chunks",
        "max_chunks",
        "max_bytes",
        "deadline",
        "deadline_s",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.t_send = 0.0
        self.t_end = 0.0
        self.http_status: int | None = None
        self.error: str | None = None
        self.done = False
        self.chunk_times: list[float] = []
        self.usage: dict | None = None
        self.reasoning_chunks = 0
        self.t_first_answer: float | None = None
        self.text: list[str] | None = None
        self.reasoning: list[str] | None = None
        self.error_event_next = False
        self.t_first_chunk: float | None = None
        self.empty_chunks = 0
        # The stream's bounds (run_requests sets them from the prompt: request_bounds; unbounded until then)
        self.max_chunks: float = float("inf")
        self.max_bytes: float = float("inf")
        self.deadline = float("inf")  # perf_counter (CLOCK_MONOTONIC) by which the request ends
        self.deadline_s = float("inf")


def build_body(
    prompt: Prompt,
    model: str,
    *,
    ignore_eos: bool = True,
    temperature: float = 0.0,
    seed: int | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON request for one prompt (streaming, usage requested)."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": prompt.max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }
    if prompt.messages is not None:
        body["messages"] = [dict(m) for m in prompt.messages]
    elif prompt.token_ids is not None:
        body["prompt"] = list(prompt.token_ids)
    else:
        body["prompt"] = prompt.text
    if seed is not None:
        body["seed"] = seed
    body.update(extra_body or {})
    body.update(prompt.extra_body or {})
    return body


def request_bounds(max_tokens: int, timeout_s: float, stall_s: float | None) -> tuple[int, int, float]:
    """A request's bounds from its workload: (token-bearing chunks, bytes, deadline in seconds from its send).

    Chunks: ``max_tokens`` + :data:`CHUNK_SLACK`; bytes: :data:`STREAM_BYTES_BASE` + :data:`STREAM_BYTES_PER_TOKEN`
    per token; deadline: ``stall_s`` x (``max_tokens`` + :data:`DEADLINE_EVENTS`), at most ``timeout_s`` (only
    ``timeout_s`` without a stall limit)."""
    deadline = timeout_s if stall_s is None else min(timeout_s, stall_s * (max_tokens + DEADLINE_EVENTS))
    return max_tokens + CHUNK_SLACK, STREAM_BYTES_BASE + STREAM_BYTES_PER_TOKEN * max_tokens, deadline


def _record_error(acc: _Acc, message: str) -> None:
    if acc.error is None:  # the first failure is the cause; later ones are consequences
        acc.error = message[:ERROR_TEXT_CHARS]


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _malformed(acc: _Acc, where: str, value: Any, expected: str) -> None:
    """Record that a field of the response has the wrong type (the request fails; the batch goes on)."""
    shown = json.dumps(value, default=str)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    _record_error(acc, f"{MALFORMED} {where} is {_type_name(value)} ({shown}), expected {expected}")


def _take_usage(acc: _Acc, usage: Any) -> None:
    """Keep a chunk's ``usage`` (an object; its fields are checked when the record is made)."""
    if usage is None:
        return
    if not isinstance(usage, dict):
        _malformed(acc, "usage", usage, "an object")
    elif usage:
        acc.usage = usage


def _handle_obj(acc: _Acc, obj: Any, now: float, chat: bool) -> None:
    if not isinstance(obj, dict):  # every OpenAI stream event is an object ([DONE] is handled before)
        _record_error(acc, f"unexpected stream data (not a JSON object): {json.dumps(obj)[:200]}")
        return
    if obj.get("error") is not None or acc.error_event_next:
        acc.error_event_next = False
        _record_error(acc, "error event in stream: " + json.dumps(obj.get("error", obj)))
        return
    _take_usage(acc, obj.get("usage"))
    choices = obj.get("choices")
    if choices is None or choices == []:
        return
    if not isinstance(choices, list):
        _malformed(acc, "choices", choices, "a list")
        return
    choice = choices[0]
    if not isinstance(choice, dict):
        _malformed(acc, "choices[0]", choice, "an object")
        return
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        _malformed(acc, "choices[0].finish_reason", finish, "a string or null")
        return
    if finish in ("abort", "error"):
        _record_error(acc, f"stream finished with finish_reason={finish!r}")
    if chat:
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        elif not isinstance(delta, dict):
            _malformed(acc, "choices[0].delta", delta, "an object")
            return
        fields = (
            ("delta.content", delta.get("content")),
            ("delta.reasoning_content", delta.get("reasoning_content")),
            ("delta.reasoning", delta.get("reasoning")),
        )
    else:
        fields = (("text", choice.get("text")),)
    for name, value in fields:
        if value is not None and not isinstance(value, str):
            _malformed(acc, f"choices[0].{name}", value, "a string or null")
            return
    content = fields[0][1]
    reasoning = (fields[1][1] or fields[2][1]) if chat else None
    if acc.t_first_chunk is None:
        acc.t_first_chunk = now
    if content or reasoning:
        acc.chunk_times.append(now)
    else:
        acc.empty_chunks += 1
    if reasoning:
        acc.reasoning_chunks += 1
        if acc.reasoning is not None:
            acc.reasoning.append(reasoning)
    if content:
        if acc.t_first_answer is None:
            acc.t_first_answer = now
        if acc.text is not None:
            acc.text.append(content)


def _count_chunks(acc: _Acc, now: float, n_text: int, n_empty: int) -> None:
    """Account ``n_text`` completions chunks that arrived at ``now``, ``n_empty`` of them with empty text."""
    if acc.t_first_chunk is None:
        acc.t_first_chunk = now
    acc.empty_chunks += n_empty
    if n_text > n_empty:
        if acc.t_first_answer is None:
            acc.t_first_answer = now
        if n_text - n_empty == 1:
            acc.chunk_times.append(now)
        else:
            acc.chunk_times.extend([now] * (n_text - n_empty))


def _handle_line(acc: _Acc, line: bytes, now: float, fast: bool, chat: bool) -> None:
    if line[-1:] == b"\r":
        line = line[:-1]
    if not line.startswith(b"data:"):
        # blank separators, ": keep-alive" comments, id:/retry: fields; "event: error" marks the next data
        if line.startswith(b"event:") and b"error" in line:
            acc.error_event_next = True
        return
    payload = line[6:] if line[5:6] == b" " else line[5:]
    if payload == _DONE:
        acc.done = True
        return
    if fast and not acc.error_event_next and b'"error"' not in payload and b'"abort"' not in payload:
        # Fast path for compact completions chunks: no JSON parse unless usage is in it.
        i = payload.find(_TEXT_KEY)
        if i >= 0:
            _count_chunks(acc, now, 1, int(payload.startswith(_EMPTY_TEXT, i)))
            if b'"usage":{' in payload:
                try:
                    obj = json.loads(payload)
                except ValueError:
                    _record_error(acc, f"unparseable stream data: {payload[:200]!r}")
                    return
                if not isinstance(obj, dict):
                    _record_error(acc, f"unexpected stream data (not a JSON object): {payload[:200]!r}")
                    return
                _take_usage(acc, obj.get("usage"))
            return
    try:
        obj = json.loads(payload)
    except ValueError:
        _record_error(acc, f"unparseable stream data: {payload[:200]!r}")
        return
    _handle_obj(acc, obj, now, chat)


#: Markers of lines the block fast path leaves to the line path (usage, end of stream, errors, SSE fields).
_LINE_PATH_MARKERS = (b'"usage":{', b"[DONE]", b'"error"', b'"abort"', b"event:")


def _handle_block_fast(acc: _Acc, block: bytes, now: float) -> bytes:
    """Account the leading lines of ``block`` (complete lines of one read) at once; return what is left.

    For compact completions streams (vLLM, SGLang) without keep_text. Every token chunk of
    a read gets the read's timestamp in either path, so counting the ``"text":"`` keys (which
    cannot occur inside a JSON string, where quotes are escaped) is the same as handling each
    line. The block is counted up to the first line holding anything else (usage, [DONE],
    errors, event fields); that line and the rest are returned for the line path, so a stream's
    last read (tokens, then usage and [DONE]) still counts its tokens in one go.
    """
    if acc.error_event_next:
        return block
    cut = len(block)
    for marker in _LINE_PATH_MARKERS:
        i = block.find(marker, 0, cut)
        if i != -1:
            cut = i
    if cut < len(block):
        cut = block.rfind(b"\n", 0, cut) + 1  # start of the line holding the marker
    head = block[:cut]
    n_text = head.count(_TEXT_KEY)
    if n_text != head.count(b"\ndata:") + head.startswith(b"data:"):
        return block  # a data line without text (e.g. a role chunk): all of it by line
    if n_text:
        _count_chunks(acc, now, n_text, head.count(_EMPTY_TEXT))
    return block[cut:]


async def _read_stream(
    resp: aiohttp.ClientResponse, acc: _Acc, fast: bool, chat: bool, on_read: OnRead | None = None
) -> None:
    # Split SSE lines ourselves from raw reads: no line-length limit, one clock read per network read.
    # A read's complete lines are handled together; an unfinished line waits for the next read.
    perf = time.perf_counter
    readany = resp.content.readany
    pending: list[bytes] = []  # pieces of a line still without its newline
    held = 0  # their bytes: at most MAX_LINE_BYTES
    total = 0  # the stream's bytes: at most acc.max_bytes
    while True:
        data = await readany()
        if not data:
            break
        now = perf()
        if on_read is not None:
            on_read(acc.index, data, now)
        # The stream's bounds, checked at every read (aiohttp's total timeout holds the deadline too, between reads)
        total += len(data)
        if len(acc.chunk_times) > acc.max_chunks:
            _record_error(
                acc,
                f"{TOO_MANY_CHUNKS} max_tokens + {CHUNK_SLACK} ({acc.max_chunks}): "
                f"{len(acc.chunk_times)} received, the rest of the stream was not read",
            )
            return
        if total > acc.max_bytes:
            _record_error(
                acc,
                f"{STREAM_TOO_LARGE} {acc.max_bytes / 2**20:g} MiB (the cap for its max_tokens): the "
                "rest of the stream was not read",
            )
            return
        if now > acc.deadline:
            _record_error(acc, f"timeout after {acc.deadline_s:g} s (the request's deadline)")
            return
        cut = data.rfind(b"\n") + 1
        if not cut:
            pending.append(data)
            held += len(data)
            if held > MAX_LINE_BYTES:
                _record_error(
                    acc, f"{LINE_TOO_LONG} {MAX_LINE_BYTES // 2**20} MiB: the rest of the stream was not read"
                )
                return
            continue
        if pending and held + data.find(b"\n") > MAX_LINE_BYTES:
            _record_error(acc, f"{LINE_TOO_LONG} {MAX_LINE_BYTES // 2**20} MiB: the rest of the stream was not read")
            return
        block = data if cut == len(data) else data[:cut]
        if pending:
            pending.append(block)
            block = b"".join(pending)
            pending = []
        held = 0
        if cut < len(data):
            pending.append(data[cut:])
            held = len(data) - cut
        if fast:
            block = _handle_block_fast(acc, block, now)
            if not block:
                continue
        for line in block.split(b"\n"):
            if line:
                _handle_line(acc, line, now, fast, chat)
    rest = b"".join(pending)
    if rest.strip():
        _handle_line(acc, rest, perf(), fast, chat)
    if len(acc.chunk_times) > acc.max_chunks:  # the last read's chunks
        _record_error(
            acc, f"{TOO_MANY_CHUNKS} max_tokens + {CHUNK_SLACK} ({acc.max_chunks}): {len(acc.chunk_times)} received"
        )


async def _send_one(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    acc: _Acc,
    chat: bool,
    keep_text: bool,
    timeout: aiohttp.ClientTimeout,
    on_read: OnRead | None = None,
) -> None:
    """Send one request and read its stream into ``acc``, within ``timeout.total`` seconds (its deadline: see
    :func:`request_bounds`) and ``acc``'s chunk and byte caps; every failure is recorded, nothing raises."""
    if chat or keep_text:
        acc.text = []
        acc.reasoning = []
    fast = not chat and not keep_text
    acc.t_send = time.perf_counter()
    acc.deadline_s = timeout.total or float("inf")
    acc.deadline = acc.t_send + acc.deadline_s
    try:
        # No redirect is followed: a server that answers 3xx fails the request (its Authorization header
        # never goes to another host).
        async with session.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False) as resp:
            acc.http_status = resp.status
            if resp.status != 200:
                detail = (await _read_capped(resp.content, MAX_ERROR_BODY_BYTES)).decode(errors="replace")
                where = (
                    f" (redirect to {resp.headers.get('Location', '?')!r} not followed)"
                    if 300 <= resp.status < 400
                    else ""
                )
                _record_error(acc, f"HTTP {resp.status}{where}: {detail}")
                return
            await _read_stream(resp, acc, fast, chat, on_read)
            if not acc.done:
                _record_error(acc, "stream ended without [DONE] (incomplete)")
    except aiohttp.ServerTimeoutError:  # sock_read: no byte from the server for that long
        _record_error(acc, f"{STALLED} {timeout.sock_read:g} s")
    except asyncio.TimeoutError:
        _record_error(acc, f"timeout after {timeout.total:g} s (the request's deadline)")
    except aiohttp.ClientPayloadError as exc:
        _record_error(acc, f"connection dropped mid-stream: {exc}")
    except aiohttp.ClientError as exc:
        _record_error(acc, f"connection failed: {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - whatever a response does, it fails this request only
        _record_error(acc, f"{CLIENT_ERROR} {type(exc).__name__}: {exc}")
    finally:
        acc.t_end = time.perf_counter()


async def _read_capped(content: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to ``limit`` bytes of a response body (the rest is left unread and dropped with the connection)."""
    parts: list[bytes] = []
    got = 0
    while got < limit:
        part = await content.read(limit - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


#: usage fields the client reads: (path, where it sits, must be >= 0). completion_tokens may be any integer
#: (a negative one is flagged, not failed: see count_flag).
_USAGE_INTS = (
    ("prompt_tokens", (), True),
    ("completion_tokens", (), False),
    ("cached_tokens", ("prompt_tokens_details",), True),
    ("reasoning_tokens", ("completion_tokens_details",), True),
)


def _usage_counts(acc: _Acc) -> dict[str, int | None]:
    """The token counts of the request's usage, each an integer or None; a field of the wrong type fails the
    request (``MALFORMED``) and no count of that usage is kept."""
    usage = acc.usage or {}
    out: dict[str, int | None] = {}
    for name, parents, non_negative in _USAGE_INTS:
        node, where = usage, "usage"
        for parent in parents:
            node, where = node.get(parent), f"{where}.{parent}"
            if node is None:
                break
            if not isinstance(node, dict):
                _malformed(acc, where, node, "an object or null")
                return dict.fromkeys(n for n, _, _ in _USAGE_INTS)
        value = node.get(name) if isinstance(node, dict) else None
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or (non_negative and value < 0)
        ):
            _malformed(acc, f"{where}.{name}", value, "a non-negative integer" if non_negative else "an integer")
            return dict.fromkeys(n for n, _, _ in _USAGE_INTS)
        out[name] = value
    return out


def count_flag(completion_tokens: int | None, chunks: int, max_tokens: int, ignore_eos: bool) -> str | None:
    """Why a successful request's reported ``completion_tokens`` cannot be right, or None when it can.

    It cannot be negative, below the token-bearing chunks received (each carries at least one token),
    above ``max_tokens``, or, under ``ignore_eos``, other than ``max_tokens``. A flagged request is kept
    with its count and left out of the run's served_output_tokens and of TPOT. Without a count, a stream of more
    token-bearing chunks than ``max_tokens`` is flagged the same way (no count could match it).
    """
    n = completion_tokens
    if n is None:
        return (
            f"{chunks} token-bearing chunks received is above max_tokens {max_tokens}, with no completion_tokens"
            if chunks > max_tokens
            else None
        )
    why = []
    if n < 0:
        why.append(f"completion_tokens {n} is negative")
    elif n < chunks:
        why.append(f"completion_tokens {n} is below the {chunks} token-bearing chunks received")
    if n > max_tokens:
        why.append(f"completion_tokens {n} is above max_tokens {max_tokens}")
    elif ignore_eos and n != max_tokens and n >= 0:
        why.append(f"completion_tokens {n} is not max_tokens {max_tokens} under ignore_eos")
    return "; ".join(why) or None


def _finish(acc: _Acc, prompt: Prompt, t0: float, ignore_eos: bool = False) -> RequestRecord:
    counts = _usage_counts(acc)
    times = acc.chunk_times
    t_first = times[0] if times else None
    t_last = times[-1] if times else None
    n_out = counts["completion_tokens"]
    flag = count_flag(n_out, len(times), prompt.max_tokens, ignore_eos) if acc.error is None else None
    return RequestRecord(
        request_index=prompt.index,
        status="ok" if acc.error is None else "failed",
        error=acc.error,
        http_status=acc.http_status,
        prompt_tokens=counts["prompt_tokens"],
        output_tokens=n_out,
        reasoning_tokens=counts["reasoning_tokens"],
        cached_tokens=counts["cached_tokens"],
        chunks=len(times),
        t_send_s=acc.t_send - t0,
        t_first_s=None if t_first is None else t_first - t0,
        t_last_s=None if t_last is None else t_last - t0,
        ttft_ms=ttft_ms(acc.t_send, t_first),
        tpot_ms=None if flag else tpot_ms(t_first, t_last, n_out),
        e2e_ms=e2e_ms(acc.t_send, t_last),
        itl_max_ms=itl_max_ms(times),
        t_send=acc.t_send,
        t_first=t_first,
        t_last=t_last,
        t_end=acc.t_end,
        chunk_times=tuple(times),
        reasoning_chunks=acc.reasoning_chunks,
        t_first_answer=acc.t_first_answer,
        t_first_chunk=acc.t_first_chunk,
        empty_chunks=acc.empty_chunks,
        requested_prompt_tokens=prompt.prompt_tokens,
        requested_output_tokens=prompt.max_tokens,
        text="".join(acc.text) if acc.text is not None else None,
        reasoning_text="".join(acc.reasoning) if acc.reasoning else None,
        conversation=prompt.conversation,
        turn=prompt.turn,
        count_flag=flag,
    )


async def run_requests(
    base_url: str,
    model: str,
    prompts: Sequence[Prompt],
    *,
    concurrency: int | None = None,
    api_key: str | None = None,
    timeout_s: float = 3600.0,
    stall_s: float | None = None,
    ignore_eos: bool = True,
    temperature: float = 0.0,
    seed: int | None = None,
    extra_body: Mapping[str, Any] | None = None,
    keep_text: bool = False,
    on_read: OnRead | None = None,
    start_offsets: Mapping[int, float] | None = None,
    send_until_s: float | None = None,
    stop: Callable[[], str | None] | None = None,
    on_finish: Callable[[int, float | None], None] | None = None,
    before_send: Callable[[int], Awaitable[None]] | None = None,
    new_connection_per_request: bool = False,
) -> BatchResult:
    """Send ``prompts`` as streaming requests and record each one; never raises for a failed request.

    ``concurrency=None`` sends every prompt at once (a fixed batch); an integer keeps at
    most that many in flight. Prompts of one ``conversation`` go one after another in
    ``turn`` order (each turn holds a slot only while in flight). Each request is bounded
    (:func:`request_bounds`): token-bearing chunks (max_tokens + CHUNK_SLACK), bytes, and a deadline from send to
    end of stream of ``stall_s`` x (max_tokens + 2), never beyond ``timeout_s``; ``stall_s`` bounds the wait for any next byte of a
    response (a request that gets none for that long fails with an error starting with
    ``STALLED``: the engine is hung, or far slower than its spec allows). Bodies are serialised
    before the first send so a 200K-token prompt's JSON encoding is not timed. ``keep_text`` keeps completion
    text (chat text is always kept) at the cost of parsing every chunk. ``on_read``, the timing hook:
    called as ``on_read(request_index, data, t)`` with every network read of a response stream and the
    ``time.perf_counter()`` stamp the records use, before the bytes are parsed (it runs in the read loop:
    keep it cheap; the benchmarks read the SSE fixture's send stamps from it).

    Load (kvlab.load): ``start_offsets`` (prompt index -> seconds after the batch starts; a conversation starts at
    its first turn's) sends each chain no earlier than its offset (open-loop arrivals); ``send_until_s`` sends
    nothing later than that many seconds after the start; ``stop``, asked before every send, ends sending when it
    returns a reason; ``on_finish(index, ttft_ms)`` is called as each request ends (ttft_ms None when it failed).
    Prompts never sent have no record: the batch's records are the requests sent. ``before_send(index)``, awaited
    before a chain's first send (and its slot), lets kvlab.load stagger a closed loop's first wave.
    """
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 or None, got {concurrency}")
    base = base_url.rstrip("/")
    headers = _headers(api_key, new_connection_per_request)
    bodies, ignores = _bodies(prompts, model, ignore_eos, temperature, seed, extra_body)
    chains = _chains(prompts)
    accs = {p.index: _Acc(p.index) for p in prompts}
    sending = _Sending(
        base,
        headers,
        bodies,
        accs,
        _timeouts(prompts, accs, timeout_s, stall_s),
        asyncio.Semaphore(concurrency) if concurrency is not None else None,
        keep_text,
        on_read,
        start_offsets,
        send_until_s,
        stop,
        on_finish,
        before_send,
    )
    await sending.send_all(chains.values(), new_connection_per_request)
    batch = _batch_result([p for p in prompts if p.index in sending.sent], accs, ignores, sending.first_send_wall)
    return replace(batch, loop_lag_max_ms=sending.loop_lag_max_s * 1e3)


def _headers(api_key: str | None, new_connection_per_request: bool) -> dict[str, str]:
    """The headers every request of a batch carries."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if new_connection_per_request:
        # The client closes each connection once its response is read (force_close: _Sending.send_all); without
        # this header aiohttp would send 'Connection: close' and the server would close it, on the engine's side,
        # inside the run. SGLang's benchmark asks for keep-alive and closes its session from the client.
        headers["Connection"] = "keep-alive"
    return headers


def _bodies(
    prompts: Sequence[Prompt],
    model: str,
    ignore_eos: bool,
    temperature: float,
    seed: int | None,
    extra_body: Mapping[str, Any] | None,
) -> tuple[dict[int, bytes], dict[int, bool]]:
    """Each prompt's request body, serialised before the first send (prompt index -> bytes), and whether it asked
    to ignore EOS; ValueError when two prompts share an index."""
    built = {
        p.index: build_body(p, model, ignore_eos=ignore_eos, temperature=temperature, seed=seed, extra_body=extra_body)
        for p in prompts
    }
    bodies = {i: json.dumps(b, separators=(",", ":")).encode() for i, b in built.items()}
    ignores = {i: b.get("ignore_eos") is True for i, b in built.items()}  # what each request asked for
    if len(bodies) != len(prompts):
        raise ValueError("prompt indices must be unique within a batch")
    return bodies, ignores


def _chains(prompts: Sequence[Prompt]) -> dict[Any, list[Prompt]]:
    """The batch's chains: independent prompts run alone; a conversation's turns run as one chain, in turn order."""
    chains: dict[Any, list[Prompt]] = {}
    for p in prompts:
        key = ("conversation", p.conversation) if p.conversation is not None else ("prompt", p.index)
        chains.setdefault(key, []).append(p)
    for chain in chains.values():
        chain.sort(key=lambda p: (p.turn or 0, p.index))
    return chains


def _timeouts(
    prompts: Sequence[Prompt], accs: Mapping[int, _Acc], timeout_s: float, stall_s: float | None
) -> dict[int, aiohttp.ClientTimeout]:
    """Each request's timeout (prompt index -> deadline and stall limit), its chunk and byte caps set on its
    ``accs`` entry (:func:`request_bounds`)."""
    timeouts: dict[int, aiohttp.ClientTimeout] = {}
    for p in prompts:
        acc = accs[p.index]
        acc.max_chunks, acc.max_bytes, deadline_s = request_bounds(p.max_tokens, timeout_s, stall_s)
        timeouts[p.index] = aiohttp.ClientTimeout(total=deadline_s, sock_read=stall_s)
    return timeouts


@dataclass
class _Sending:
    """What a batch's chains share while :func:`run_requests` sends them, and what they sent."""

    base: str
    headers: dict[str, str]
    bodies: dict[int, bytes]
    accs: dict[int, _Acc]
    timeouts: dict[int, aiohttp.ClientTimeout]
    sem: asyncio.Semaphore | None
    keep_text: bool
    on_read: OnRead | None
    start_offsets: Mapping[int, float] | None
    send_until_s: float | None
    stop: Callable[[], str | None] | None
    on_finish: Callable[[int, float | None], None] | None
    before_send: Callable[[int], Awaitable[None]] | None
    sent: set[int] = field(default_factory=set)
    first_send_wall: list[float] = field(default_factory=list)
    t_start: float = 0.0  # perf_counter when the batch starts (set just before the first chain runs)
    gates: dict[int, asyncio.Event] = field(default_factory=dict)  # with start offsets: each chain's (_open_gates)
    loop_lag_max_s: float = 0.0  # the event loop's largest delay while the chains ran (:class:`_LoopLag`)

    async def send_all(self, chains: Iterable[list[Prompt]], new_connection_per_request: bool) -> None:
        """Run every chain at once, on one session, garbage collection paused (:func:`_gc_paused`)."""
        # new_connection_per_request: the client closes the connection after each response, so each request connects
        # anew (inside its TTFT), as SGLang's benchmark does with a session per request
        # (kvlab.load.LoadSpec.connections)
        connector = _Connector(limit=0, ttl_dns_cache=None, force_close=new_connection_per_request)
        with _gc_paused(), _LoopLag() as lag:
            async with aiohttp.ClientSession(
                connector=connector, read_bufsize=READ_BUFSIZE, timeout=aiohttp.ClientTimeout(total=None)
            ) as session:
                chains = list(chains)
                self.t_start = time.perf_counter()
                opener = self._open_gates(chains)
                try:
                    await asyncio.gather(*(self.run_chain(session, c) for c in chains))
                finally:
                    if opener is not None:
                        opener.cancel()
        self.loop_lag_max_s = lag.max_s

    def _open_gates(self, chains: list[list[Prompt]]) -> asyncio.Task | None:
        """With start offsets: one task opens each chain's gate at its offset, chains due at the same moment in the
        order given (a trace's record order), so requests with equal timestamps reach the server in that order, as
        the peers' replays send them. Each chain sleeping to its own offset woke in the event loop's timer order
        instead: a replay's 16 simultaneous records reached vLLM scrambled, and which of them shared decode steps
        with a long prefill changed from run to run (docs/performance.md, "Agreement on a replayed trace")."""
        if self.start_offsets is None:
            return None
        due = sorted((self.start_offsets.get(c[0].index, 0.0), k, c[0].index) for k, c in enumerate(chains))
        self.gates = {index: asyncio.Event() for *_, index in due}

        async def open_in_order() -> None:
            for offset, _, index in due:
                delay = self.t_start + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                self.gates[index].set()

        return asyncio.create_task(open_in_order())

    def may_send(self) -> bool:
        if self.send_until_s is not None and time.perf_counter() - self.t_start > self.send_until_s:
            return False
        return self.stop is None or self.stop() is None

    async def run_chain(self, session: aiohttp.ClientSession, chain: list[Prompt]) -> None:
        if self.before_send is not None:
            await self.before_send(chain[0].index)
        if self.start_offsets is not None:
            await self.gates[chain[0].index].wait()
        for p in chain:
            if self.sem is not None:
                await self.sem.acquire()
            try:
                if not self.may_send():
                    return
                await self._send(session, p)
            finally:
                if self.sem is not None:
                    self.sem.release()

    async def _send(self, session: aiohttp.ClientSession, p: Prompt) -> None:
        """Send ``p`` (its slot held) and read its stream; then tell ``on_finish``."""
        if not self.first_send_wall:
            self.first_send_wall.append(time.time())
        self.sent.add(p.index)
        acc = self.accs[p.index]
        await _send_one(
            session,
            self.base + p.endpoint,
            self.bodies[p.index],
            self.headers,
            acc,
            p.messages is not None,
            self.keep_text,
            self.timeouts[p.index],
            self.on_read,
        )
        if self.on_finish is not None:
            self.on_finish(
                p.index,
                ttft_ms(acc.t_send, acc.chunk_times[0]) if acc.error is None and acc.chunk_times else None,
            )


def _socket_holds_bytes(transport: asyncio.BaseTransport | None) -> bool:
    """Whether the connection's socket holds received bytes the event loop has not read yet (FIONREAD); False when
    that cannot be told (no socket, or the call fails)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    pending = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, pending)
    except (OSError, ValueError):  # a closed socket (fileno -1), or no FIONREAD here
        return False
    return pending[0] > 0


class _StallJudged(ResponseHandler):
    """aiohttp's connection protocol with its stall limit (``sock_read``) judged after the socket is drained.

    aiohttp arms a timer at every received byte; it fires ``sock_read`` seconds after the last one the event loop
    read. A loop that ran late (a busy machine, a long callback) may run that timer while the server's next bytes
    already wait in the socket: those bytes arrived, so the request has not stalled. The timer then waits another stall
    limit, and the loop's next pass reads them (each read re-arms it). Only an empty socket makes a stall."""

    def _on_read_timeout(self) -> None:
        if _socket_holds_bytes(self.transport):
            self._reschedule_timeout()
            return
        super()._on_read_timeout()


class _Connector(aiohttp.TCPConnector):
    """aiohttp's TCP connector, its connections judged by :class:`_StallJudged` (aiohttp is pinned:
    ``tests/test_client.py`` checks that the connector still makes them)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(_StallJudged, loop=self._loop)


class _LoopLag:
    """How late the running event loop wakes, at most, while the ``with`` block runs: a task sleeps
    :data:`LOOP_LAG_INTERVAL_S` again and again and keeps the largest overshoot (``max_s``, seconds; a wake-up still
    due when the block ends counts too). A loop whose wake-ups come seconds late cannot read its sockets in time
    either: beside a request called stalled it says the client, not only the server, was slow."""

    def __init__(self) -> None:
        self.max_s = 0.0
        self._due = 0.0
        self._task: asyncio.Task | None = None

    def _woke(self) -> None:
        self.max_s = max(self.max_s, time.perf_counter() - self._due)

    async def _watch(self) -> None:
        while True:
            self._due = time.perf_counter() + LOOP_LAG_INTERVAL_S
            await asyncio.sleep(LOOP_LAG_INTERVAL_S)
            self._woke()

    def __enter__(self) -> _LoopLag:
        self._due = time.perf_counter() + LOOP_LAG_INTERVAL_S
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    def __exit__(self, *exc: object) -> None:
        self._woke()  # a wake-up overdue now (the loop blocked at the end) counts as well
        if self._task is not None:
            self._task.cancel()  # it only sleeps: cancelled at its sleep, nothing to wait for


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No garbage-collection pass while requests are in flight, as timeit does: a pass over the
    process's objects (0.5-6 ms measured in benchmarks/client_overhead.py's driver) would land
    in whichever chunks arrive meanwhile and show up as TTFT/ITL tail. Restored afterwards. The cost
    is small: 4,000 requests left 1,024 objects of cyclic garbage (0.3 per request) for the next pass."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()


def _batch_result(
    sent: list[Prompt], accs: Mapping[int, _Acc], ignores: Mapping[int, bool], first_send_wall: list[float]
) -> BatchResult:
    """The batch of the prompts ``sent``: one record each, in index order, timed from the first send."""
    if not sent:
        now = time.perf_counter()
        return BatchResult([], now, now, 0.0, datetime.now(timezone.utc).isoformat())
    t0 = min(accs[p.index].t_send for p in sent)
    t_end = max(accs[p.index].t_end for p in sent)
    records = [_finish(accs[p.index], p, t0, ignores[p.index]) for p in sorted(sent, key=lambda p: p.index)]
    started = datetime.fromtimestamp(first_send_wall[0], timezone.utc).isoformat()
    return BatchResult(records=records, t0=t0, t_end=t_end, batch_time_s=t_end - t0, started_at=started)


# ----------------------------------------------------------------- records as table rows and run summary


def request_rows(records: Iterable[RequestRecord], run_id: str) -> pl.DataFrame:
    """One REQUESTS row per record (timestamps relative to the run's first send), conformed to the schema."""
    names = [n for n in REQUESTS.names if n != "run_id"]
    rows = [{"run_id": run_id, **{n: getattr(r, n, None) for n in names}} for r in records]  # prompt-side: runner
    if not rows:
        return REQUESTS.empty()
    return REQUESTS.conform(pl.DataFrame(rows, schema=REQUESTS.polars_schema), origin=f"requests of {run_id}")


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def sum_reported(values: list[int | None]) -> int | None:
    reported = [v for v in values if v is not None]
    return int(sum(reported)) if reported else None


def within_slo(r: RequestRecord, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    """Whether request ``r`` meets an SLO: it succeeded, its TTFT is at most ``ttft_ms`` and its TPOT at most
    ``tpot_ms`` (each bound None: not part of the SLO). A request with fewer than two output tokens has no TPOT and
    meets a TPOT bound; one whose TPOT cannot be known (no usage, or a count that cannot be right) does not."""
    if r.status != "ok" or r.ttft_ms is None:
        return False
    if ttft_ms is not None and r.ttft_ms > ttft_ms:
        return False
    if tpot_ms is not None:
        if r.tpot_ms is None:
            return r.count_flag is None and r.output_tokens is not None and r.output_tokens < 2
        if r.tpot_ms > tpot_ms:
            return False
    return True


def summarize(
    records: Sequence[RequestRecord], batch_time_s: float | None, slo: Mapping[str, float | None] | None = None
) -> dict:
    """The RUNS columns a batch of request records determines.

    Latency means and percentiles cover successful requests only (a failed request has no meaningful
    latency) but every failure is counted in ``requests_failed``. Percentiles (p50, p90, p99 of
    TTFT, TPOT, ITL and E2E) are numpy's linear-interpolation percentiles over the requests (ITL: over every
    gap of every successful request, per network read, :func:`itl_gaps_ms`). Token sums add the requests that
    reported usage and are None when none did (never an invented 0). A request whose completion_tokens
    cannot be right (``count_flag``) is counted in ``requests_miscounted`` and left out of
    ``served_output_tokens`` (and has no TPOT). ``slo`` (``{"ttft_ms": ..., "tpot_ms": ...}``, the experiment's)
    gives ``requests_within_slo`` (:func:`within_slo`; goodput is that over the batch time, or a load point's
    window, derived by :func:`kvlab.schema.run_rates`) and the bounds it was counted against; without one all three are None.
    """
    ok = [r for r in records if r.status == "ok"]
    miscounted = [r for r in ok if r.count_flag]
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    tpots = [r.tpot_ms for r in ok if r.tpot_ms is not None]
    e2es = [r.e2e_ms for r in ok if r.e2e_ms is not None]
    itls = [g for r in ok for g in itl_gaps_ms(r.chunk_times)]
    slo_ttft = slo.get("ttft_ms") if slo else None
    slo_tpot = slo.get("tpot_ms") if slo else None
    return {
        "ttft_mean_ms": _mean(ttfts),
        **percentiles_ms("ttft", ttfts),
        "tpot_mean_ms": _mean(tpots),
        **percentiles_ms("tpot", tpots),
        **percentiles_ms("itl", itls),
        "e2e_mean_ms": _mean(e2es),
        **percentiles_ms("e2e", e2es),
        "slo_ttft_ms": slo_ttft,
        "slo_tpot_ms": slo_tpot,
        "requests_within_slo": (
            sum(within_slo(r, slo_ttft, slo_tpot) for r in records)
            if slo_ttft is not None or slo_tpot is not None
            else None
        ),
        "requests_ok": len(ok),
        "requests_failed": len(records) - len(ok),
        "served_prompt_tokens": sum_reported([r.prompt_tokens for r in records]),
        "served_output_tokens": sum_reported([r.output_tokens for r in records if not r.count_flag]),
        "requests_miscounted": len(miscounted),
        "cached_prompt_tokens": sum_reported([r.cached_tokens for r in records]),
        "batch_time_s": batch_time_s,
    }
