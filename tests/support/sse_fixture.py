"""A local OpenAI-style SSE server for tests and client benchmarks, with knobs for every failure kind.

Use in-process (``with SSEServer(FixtureConfig(...)) as srv: srv.url``; it runs in a
thread with its own event loop), in a process of its own (:class:`SSEProcess`, as the fault soak does) or
standalone: ``python -m tests.support.sse_fixture --port 8123``.
Each request may override any :class:`FixtureConfig` field with a ``"fixture": {...}``
object in its JSON body. Timestamps are ``time.perf_counter()``, which on Linux is
CLOCK_MONOTONIC and so comparable across processes on one host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import socket
import threading
import time
import random
from dataclasses import asdict, dataclass, field, fields, replace
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

MAX_BODY_BYTES = 1 << 30  # accept 200K-token prompts and far beyond
GC_IDLE_MIN_ALLOCATIONS = 700  # with collect_when_idle: collect once this many objects were allocated (gen-0 default)


@dataclass(frozen=True)
class FixtureConfig:
    chunks: int | None = None  # token chunks per request; None = the request's max_tokens
    tokens_per_chunk: int = 1  # usage.completion_tokens = chunks * tokens_per_chunk
    first_delay_s: float = 0.0  # wait before the first chunk (a stand-in for prefill)
    delay_s: float = 0.0  # wait between chunks
    empty_first: int = 0  # empty-text chunks before the first token (like a role chunk)
    error_after: int | None = None  # after this many token chunks send an error event, then [DONE]
    http_status: int = 200  # anything else: a JSON error body with this status, no stream
    drop_after: int | None = None  # close the connection after this many token chunks
    no_done: bool = False  # end the stream cleanly but without [DONE]
    garbage: bytes | str | None = None  # write these raw bytes as one SSE data line after the token chunks
    usage: bool = True  # send the usage chunk when stream_options.include_usage asks for it
    cached_tokens: int | None = None  # report usage.prompt_tokens_details.cached_tokens
    server_timestamps: bool = False  # put "t_server" (perf_counter at write) in every chunk
    line_bytes: int = 0  # pad the first token chunk's text to this many bytes: one huge SSE line
    reasoning_chunks: int = 0  # chat: the first k token chunks carry reasoning_content
    compact: bool = True  # compact JSON like vLLM; False writes ", " and ": " (client slow path)
    tag: Any = None  # echoed into the server's log of requests
    usage_json: str | None = None  # raw JSON sent as the usage chunk's "usage" value (wrong types)
    completion_tokens: int | None = None  # the usage chunk reports this count instead of the tokens sent
    fault_rate: float = 0.0  # SSEServer: this share of requests gets one fault drawn from FAULTS
    fault_seed: int = 0  # seeds the server's fault draws (set once, on the server's config)
    metrics_fault_rate: float = 0.0  # SSEServer: this share of GET /metrics answers garbage or HTTP 500
    #: SSEServer: serve at most this many requests at once, the rest wait in a queue (FIFO) before their first
    #: delay: a server that saturates. /metrics then exports vllm:num_requests_running and vllm:num_requests_waiting
    slots: int | None = None
    #: from this token on the text is " u{i}" instead of " t{i}": a configuration whose greedy output differs there
    #: (kvlab.probe's tests)
    diverge_at: int | None = None
    endless: bool = False  # token chunks without end (no finish_reason, no usage, no [DONE]) until the client leaves
    drip_s: float = 0.0  # write the response one byte at a time, this many seconds apart (headers go at once)
    redirect: str | None = None  # answer 307 with this Location instead of a stream
    served_model: str | None = None  # GET /v1/models lists this one model (None: no /v1/models, 404)
    #: SSEServer with fault_rate: draw only these faults (names of FAULTS; None: every one)
    fault_names: tuple[str, ...] | None = None


#: The faults a fault-injecting SSEServer draws from (``fault_rate``): name -> (knobs for this request, the
#: client's error kind it must produce, or None: the request succeeds, "flagged": it succeeds with a count_flag).
#: The stall fault holds the first token back 4 s: a client with ``stall_s`` below that records a stall (the fault
#: soak, benchmarks/fault_soak.py, uses 2 s; its fixture serves from a process of its own, so the client's work and
#: the fixture's do not take turns on one interpreter).
FAULTS: dict[str, tuple[Callable[[random.Random], dict[str, Any]], str | None]] = {
    "garbage_line": (
        lambda r: {"garbage": r.choice([b"\xff\xfe not json", b'{"usage":{"prompt_tokens":', b"42"])},
        None,
    ),  # kind depends on the bytes: see fault_kind
    "wrong_type": (
        lambda r: r.choice(
            [
                {"garbage": b'{"choices":"abc"}'},
                {"garbage": b'{"choices":[{"text":5}]}'},
                {"usage_json": "5"},
                {"usage_json": '{"prompt_tokens":3,"completion_tokens":"3"}'},
                {"usage_json": '{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":"x"}'},
                {"usage_json": '{"prompt_tokens":true,"completion_tokens":4}'},
            ]
        ),
        "malformed",
    ),
    "http_500": (lambda r: {"http_status": 500}, "http_status"),
    "error_mid_stream": (lambda r: {"error_after": r.randint(0, 3)}, "error_event"),
    "disconnect": (lambda r: {"drop_after": r.randint(0, 3)}, "dropped"),
    "no_done": (lambda r: {"no_done": True}, "incomplete"),
    "stall": (lambda r: {"first_delay_s": 4.0}, "stalled"),
    "huge_line_ok": (lambda r: {"line_bytes": r.randint(1, 3) * 2**20}, None),
    "huge_line_over_cap": (lambda r: {"line_bytes": 17 * 2**20}, "oversized"),
    "wrong_count": (lambda r: {"completion_tokens": r.choice([-50, 1000, 0])}, "flagged"),
    # hostile servers (issue 40): each ends within the client's bounds, with a named cause
    "endless": (lambda r: {"endless": True}, "oversized"),  # past max_tokens + CHUNK_SLACK chunks
    "drip": (lambda r: {"endless": True, "drip_s": 0.05}, "timeout"),  # a byte within every stall limit, forever
    "huge_chunk_count": (lambda r: {"chunks": 10**6, "usage": False}, "oversized"),
    "redirect": (lambda r: {"redirect": "http://127.0.0.2:9/v1/completions"}, "http_status"),  # not followed
}
#: The faults of a plain faulty server (the fault soak's first sweep); HOSTILE_FAULTS end by the client's bounds
#: (its deadline among them: a drip costs a whole deadline, so the soak serves them against a short one).
HOSTILE_FAULTS = ("endless", "drip", "huge_chunk_count", "redirect")


def fault_kind(fault: str, knobs: dict[str, Any]) -> str | None:
    """The error kind (kvlab.client) a request with this fault must end with; None: ok; "flagged": ok, flagged."""
    if fault == "garbage_line":
        return "malformed" if knobs["garbage"] == b"42" else "unparseable"
    return FAULTS[fault][1]


@dataclass
class Served:
    """What the server saw and did for one request."""

    t_recv: float
    body_bytes: int
    prompt_tokens: int
    endpoint: str
    tag: Any
    chunk_times: list[float] = field(default_factory=list)
    fault: str | None = None  # the fault drawn for it (fault_rate), with its knobs
    fault_knobs: dict[str, Any] | None = None
    cache_salt: Any = None  # the request's cache_salt (vLLM's per-run prefix-cache isolation), as sent


def _count_prompt(body: dict) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    prompt = body.get("prompt", "")
    return len(prompt) if isinstance(prompt, list) else len(str(prompt).split())


DONE = b"data: [DONE]\n\n"
_PAD_MARK = "<fixture-pad>"  # where Events.padded_token cuts a token chunk for its padding (JSON leaves it as it is)
PAD_PIECE_BYTES = 2**20  # a huge line goes out in writes of at most this many bytes of padding
#: A stream gives its event loop to the other streams after this many writes at most: a write waits only when the
#: socket is full, so an endless or 10^6-chunk stream whose client reads fast would otherwise hold the loop, and the
#: server's other streams would stall behind it (a real engine's streams interleave).
YIELD_EVERY_WRITES = 64


class Events:
    """The SSE events of one response, rendered as vLLM's OpenAI server writes them."""

    def __init__(self, cfg: FixtureConfig, chat: bool, model: str) -> None:
        self.cfg, self.chat, self.model = cfg, chat, model
        self.created = int(time.time())
        sep = (",", ":") if cfg.compact else (", ", ": ")
        self._encoder = json.JSONEncoder(separators=sep)

    def _event(self, obj: dict) -> bytes:
        return b"data: " + self._encoder.encode(obj).encode() + b"\n\n"

    def padded_token(
        self, text: str, i: int, pad_to: int, finish: str | None = None, reasoning: bool = False
    ) -> list[bytes]:
        """Token chunk ``i`` with its text padded with "x" to ``pad_to`` characters (one huge SSE line), in pieces of
        at most PAD_PIECE_BYTES to write one after another. Building the line whole (17 MiB of text JSON-encoded, then
        copied by each write) held the fixture's event loop, and every other stream with it, for over 2 s on a busy
        2-core machine."""
        pad = max(0, pad_to - len(text))
        head, tail = self.token(text + _PAD_MARK, i, finish, reasoning).split(_PAD_MARK.encode(), 1)
        piece = b"x" * min(pad, PAD_PIECE_BYTES)
        last = b"x" * (pad % PAD_PIECE_BYTES)
        return [head, *[piece] * (pad // PAD_PIECE_BYTES), *([last] if last else []), tail]

    def token(self, text: str, i: int, finish: str | None = None, reasoning: bool = False) -> bytes:
        """Token chunk ``i`` (``i < 0``: a chat stream's opening role chunk)."""
        if self.chat:
            delta = {"reasoning_content": text} if reasoning else {"content": text}
            if i < 0:
                delta = {"role": "assistant", "content": ""}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = {
                "id": "chatcmpl-fixture",
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [choice],
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            obj = {
                "id": "cmpl-fixture",
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [choice],
            }
        if self.cfg.server_timestamps:
            obj["t_server"] = time.perf_counter()
        return self._event(obj)

    def usage(self, n_prompt: int, n_out: int) -> bytes:
        if self.cfg.completion_tokens is not None:
            n_out = self.cfg.completion_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_out,
            "total_tokens": n_prompt + n_out,
        }
        if self.cfg.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cfg.cached_tokens}
        event = self._event(
            {
                "id": "cmpl-fixture",
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            }
        )
        if self.cfg.usage_json is None:
            return event
        return (
            b'data: {"id":"cmpl-fixture","object":"text_completion","choices":[],"usage":'
            + self.cfg.usage_json.encode()
            + b"}\n\n"
        )

    def error(self) -> bytes:
        return self._event(
            {
                "error": {
                    "object": "error",
                    "message": "fixture mid-stream error",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
        )


class SSEServer:
    """The fixture server; a context manager that serves from a background thread."""

    def __init__(
        self,
        config: FixtureConfig | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_log: bool = True,
        collect_when_idle: bool = False,
    ) -> None:
        self.config = config or FixtureConfig()
        self.host, self.port = host, port
        #: keep a :class:`Served` per request (tests read them); a long-running standalone server does not
        self.keep_log = keep_log
        #: run Python's garbage collector only while no stream is open (the caller disables automatic
        #: collection): a collection between a chunk's ``t_server`` stamp and its write would count
        #: as the client's TTFT error (gen-1 passes take about 1 ms here, gen-2 up to 13 ms)
        self.collect_when_idle = collect_when_idle
        self.open_streams = 0
        self.served: list[Served] = []
        #: when each completion request's body was read (perf_counter), kept whatever keep_log says; GET /arrivals
        #: answers them and starts a new list (benchmarks/peer_agreement.py: how spread a client's first wave arrives)
        self.arrivals: list[float] = []
        self.faults = random.Random(self.config.fault_seed)  # draws for fault_rate / metrics_fault_rate
        self.metrics_faults: list[str] = []  # what each faulty /metrics answer was
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.running = 0  # requests being served (config.slots)
        self.waiting = 0  # requests queued for a slot (config.slots)
        self.max_running = 0  # the most requests streaming at once (every request counts, slots or not)
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/completions", self._stream)
        app.router.add_post("/v1/chat/completions", self._stream)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/arrivals", self._arrivals)
        return app

    async def _arrivals(self, request: web.Request) -> web.Response:
        taken, self.arrivals = self.arrivals, []
        return web.json_response(taken)

    async def _models(self, request: web.Request) -> web.Response:
        if self.config.served_model is None:
            raise web.HTTPNotFound()
        return web.json_response({"object": "list", "data": [{"id": self.config.served_model, "object": "model"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.config.metrics_fault_rate and self.faults.random() < self.config.metrics_fault_rate:
            kind = self.faults.choice(["garbage", "http_500"])
            self.metrics_faults.append(kind)
            if kind == "http_500":
                return web.Response(status=500, text="fixture metrics failure")
            return web.Response(text="vllm:prompt_tokens_total{ not prometheus \x00\n", content_type="text/plain")
        lines = []
        for name, value in (
            ("prompt_tokens", self.prompt_tokens_total),
            ("generation_tokens", self.generation_tokens_total),
        ):
            lines += [
                f"# HELP vllm:{name}_total fixture counter",
                f"# TYPE vllm:{name}_total counter",
                f'vllm:{name}_total{{model_name="fixture"}} {float(value)}',
            ]
        if self.config.slots is not None:
            for name, value in (("num_requests_running", self.running), ("num_requests_waiting", self.waiting)):
                lines += [f"# TYPE vllm:{name} gauge", f'vllm:{name}{{model_name="fixture"}} {float(value)}']
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        self.open_streams += 1
        try:
            if self.config.slots is None:
                return await self._serve(request)
            if self._slots is None:
                self._slots = asyncio.Semaphore(self.config.slots)
            self.waiting += 1
            try:
                await self._slots.acquire()
            finally:
                self.waiting -= 1
            try:
                return await self._serve(request)
            finally:
                self._slots.release()
        finally:
            self.open_streams -= 1
            if self.collect_when_idle and not self.open_streams and gc.get_count()[0] >= GC_IDLE_MIN_ALLOCATIONS:
                gc.collect()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            return await self._respond(request)
        finally:
            self.running -= 1

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        t_recv = time.perf_counter()
        self.arrivals.append(t_recv)
        body = json.loads(raw)
        cfg = replace(self.config, **body.get("fixture", {}))
        chat = request.path.endswith("/chat/completions")
        n_prompt = _count_prompt(body)
        served = Served(t_recv, len(raw), n_prompt, request.path, cfg.tag, cache_salt=body.get("cache_salt"))
        if cfg.fault_rate and self.faults.random() < cfg.fault_rate:
            served.fault = self.faults.choice(sorted(cfg.fault_names or set(FAULTS) - set(HOSTILE_FAULTS)))
            served.fault_knobs = FAULTS[served.fault][0](self.faults)
            cfg = replace(cfg, **served.fault_knobs)
        if self.keep_log:
            self.served.append(served)
        if cfg.redirect is not None:
            return web.Response(status=307, headers={"Location": cfg.redirect})
        if cfg.http_status != 200:
            return web.json_response(
                {
                    "error": {
                        "message": f"fixture error {cfg.http_status}",
                        "type": "BadRequestError",
                        "code": cfg.http_status,
                    }
                },
                status=cfg.http_status,
            )
        n_chunks = cfg.chunks if cfg.chunks is not None else int(body.get("max_tokens", 16))
        events = Events(cfg, chat, body.get("model", "fixture"))
        chunk = events.token
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        writes = 0

        async def send(data: bytes) -> None:
            nonlocal writes
            if not cfg.drip_s:
                await resp.write(data)
                writes += 1
                if writes % YIELD_EVERY_WRITES == 0:  # one stream never holds the loop for long
                    await asyncio.sleep(0)
                return
            for i in range(len(data)):
                await resp.write(data[i : i + 1])
                await asyncio.sleep(cfg.drip_s)

        if cfg.first_delay_s:
            await asyncio.sleep(cfg.first_delay_s)
        for k in range(cfg.empty_first):
            await send(chunk("", -1 if chat and k == 0 else k))
        for i in itertools.count() if cfg.endless else range(n_chunks):
            if cfg.drop_after is not None and i == cfg.drop_after:
                request.transport.close()  # flushes what was written, then the chunked body just stops
                return resp
            if cfg.error_after is not None and i == cfg.error_after:
                await send(events.error())
                await send(DONE)
                await resp.write_eof()
                return resp
            if (i or cfg.empty_first) and cfg.delay_s:  # empty chunks are apart from the first token too
                await asyncio.sleep(cfg.delay_s)
            text = f" u{i}" if cfg.diverge_at is not None and i >= cfg.diverge_at else f" t{i}"
            finish = "length" if i == n_chunks - 1 and not cfg.endless else None
            served.chunk_times.append(time.perf_counter())
            reasoning = chat and i < cfg.reasoning_chunks
            if i == 0 and cfg.line_bytes:
                for piece in events.padded_token(text, i, cfg.line_bytes, finish, reasoning):
                    await send(piece)
                continue
            await send(chunk(text, i, finish, reasoning=reasoning))
        if cfg.garbage is not None:  # bytes, or text (a per-request override comes as JSON)
            garbage = cfg.garbage.encode() if isinstance(cfg.garbage, str) else cfg.garbage
            await send(b"data: " + garbage + b"\n\n")
        n_out = n_chunks * cfg.tokens_per_chunk
        self.prompt_tokens_total += n_prompt
        self.generation_tokens_total += n_out
        if cfg.usage and (body.get("stream_options") or {}).get("include_usage"):
            await send(events.usage(n_prompt, n_out))
        if not cfg.no_done:
            await send(DONE)
        await resp.write_eof()
        return resp

    # ------------------------------------------------------------------ lifecycle

    async def start_async(self) -> None:
        """Start serving on the running loop (port 0 picks a free port; see ``url``)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def stop_async(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def __enter__(self) -> SSEServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # surface bind errors to the caller
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=serve, name="sse-fixture", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)


def _serve_in_child(config: FixtureConfig, conn: Any) -> None:
    """SSEProcess's child: serve ``config`` on a free port, send the port, serve until told to stop, then send back
    what was served (the request log and the /metrics faults)."""
    import logging

    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # writes to connections the client dropped

    async def serve() -> None:
        server = SSEServer(config)
        await server.start_async()
        conn.send(server.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (conn.recv(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
        await stop.wait()
        await server.stop_async()
        conn.send((server.served, server.metrics_faults))

    asyncio.run(serve())


class SSEProcess:
    """:class:`SSEServer` in a process of its own, as an engine is: its event loop and the client's do not share one
    interpreter (in a thread of the client's process, a busy machine starved both at once, and the server's streams
    went silent while the client waited on them). ``served`` and ``metrics_faults`` are there once the ``with`` block
    has ended."""

    def __init__(self, config: FixtureConfig | None = None, host: str = "127.0.0.1") -> None:
        self.config, self.host = config or FixtureConfig(), host
        self.port = 0
        self.served: list[Served] = []
        self.metrics_faults: list[str] = []
        self._conn: Any = None
        self._process: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> SSEProcess:
        import multiprocessing

        # fork: a spawned interpreter took 43 s to import its way to serving on a loaded 2-core machine. The child
        # runs nothing but a new event loop of its own (no lock or thread of the parent's is used there)
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve_in_child, args=(self.config, child), daemon=True)
        self._process.start()
        child.close()
        try:
            if not self._conn.poll(120):
                raise EOFError
            self.port = self._conn.recv()
        except EOFError:
            self._process.kill()
            raise RuntimeError(
                f"the SSE fixture's process did not serve (exit code {self._process.exitcode})"
            ) from None
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._conn.send("stop")
            if self._conn.poll(60):
                self.served, self.metrics_faults = self._conn.recv()
        finally:
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
            self._conn.close()


class BulkSSEServer:
    """The fastest SSE server this machine can run: each completion's whole stream in one socket write.

    A plain asyncio protocol with keep-alive. The response is framed as a real engine frames it (chunked
    transfer encoding, one HTTP chunk per SSE event, usage chunk and ``[DONE]`` at the end), but every
    event is rendered up front (and reused for an identical request) and the lot goes out in one
    ``transport.write``, so the server spends well under a microsecond per event and never waits for
    the client. Whatever reads it is then the
    bottleneck: the benchmark's "bulk flood" measures a client's own cost per event. Honours the
    ``chunks``, ``compact``, ``usage``, ``cached_tokens`` and ``server_timestamps`` knobs; no delays,
    no failures (that is :class:`SSEServer`'s job).
    """

    def __init__(self, config: FixtureConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or FixtureConfig()
        self.host, self.port = host, port
        self.requests_served = 0
        self._server: asyncio.base_events.Server | None = None
        self._rendered: dict[tuple, bytes] = {}  # (path, request body) -> response, without server_timestamps

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def response(self, method: bytes, path: bytes, body: bytes) -> bytes:
        if method == b"GET":
            return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        self.requests_served += 1
        key = (path, body)
        if key in self._rendered:
            return self._rendered[key]
        req = json.loads(body)
        cfg = replace(self.config, **req.get("fixture", {}))
        chat = path.endswith(b"/chat/completions")
        n_chunks = cfg.chunks if cfg.chunks is not None else int(req.get("max_tokens", 16))
        n_prompt = _count_prompt(req)
        events = Events(cfg, chat, req.get("model", "fixture"))
        out = [events.token(f" t{i}", i, "length" if i == n_chunks - 1 else None) for i in range(n_chunks)]
        if cfg.usage and (req.get("stream_options") or {}).get("include_usage"):
            out.append(events.usage(n_prompt, n_chunks * cfg.tokens_per_chunk))
        out.append(DONE)
        framed = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in out)
        response = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"
        )
        if not cfg.server_timestamps:
            if len(self._rendered) >= 64:
                self._rendered.clear()
            self._rendered[key] = response
        return response

    async def start_async(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _BulkProtocol(self), self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop_async(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


class _BulkProtocol(asyncio.Protocol):
    """HTTP/1.1 requests with a Content-Length body, one after another on a kept-alive connection."""

    def __init__(self, server: BulkSSEServer) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].split(b"\r\n")
            headers = dict(line.split(b":", 1) for line in head[1:] if b":" in line)
            headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
            length = int(headers.get(b"content-length", b"0"))
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            method, path = head[0].split(b" ")[:2]
            self.transport.write(self.server.response(method, path, body))
            if headers.get(b"connection", b"").lower() == b"close":
                self.transport.close()
                return


@contextlib.asynccontextmanager
async def serve_app(routes: dict[str, Any]) -> AsyncIterator[str]:
    """Serve a one-off aiohttp app on the running loop at a free port; yields its base URL.

    ``routes`` maps ``"POST /path"`` (or ``"GET /path"``) to a handler: for a test that needs one
    hand-written response the fixture servers cannot give.
    """
    app = web.Application()
    for route, handler in routes.items():
        method, path = route.split(" ", 1)
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument(
        "--bulk",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve with BulkSSEServer: each stream in one write, as fast as the machine allows",
    )
    for f in fields(FixtureConfig):
        if f.name in ("tag", "fault_names"):
            continue
        default = getattr(FixtureConfig(), f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif f.name in (
            "chunks",
            "error_after",
            "drop_after",
            "cached_tokens",
            "completion_tokens",
            "slots",
            "diverge_at",
        ):
            parser.add_argument(flag, type=int, default=default)
        elif f.name in ("usage_json", "redirect", "served_model"):
            parser.add_argument(flag, type=str, default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    args = vars(parser.parse_args(argv))
    host, port, bulk = args.pop("host"), args.pop("port"), args.pop("bulk")
    config = FixtureConfig(**args)

    async def serve() -> None:
        if bulk:
            server: SSEServer | BulkSSEServer = BulkSSEServer(config, host, port)
        else:  # a process of its own: no request log, and no collection while a stream is open
            server = SSEServer(config, host, port, keep_log=False, collect_when_idle=True)
        await server.start_async()
        if not bulk:
            gc.freeze()  # what is alive now (modules, the app) is never traversed again
            gc.disable()
        print(f"serving {server.url} with {asdict(config)}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
