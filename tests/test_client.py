"""The streaming client against the local SSE fixture: timestamps, counts, every failure kind, huge bodies and lines."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import json
import random

import pytest
from tests.support.sse_fixture import BulkSSEServer, FixtureConfig, SSEServer, serve_app

from kvlab import client, workloads
from kvlab.workloads import Prompt


@pytest.fixture
def server():
    with SSEServer() as srv:
        yield srv


def _run(url, prompts, **kw):
    return asyncio.run(client.run_requests(url, "fixture-model", prompts, **kw))


def _with(prompt: Prompt, **fixture) -> Prompt:
    return dataclasses.replace(prompt, extra_body={"fixture": fixture})


def _check_ok_record(r: client.RequestRecord, prompt_tokens: int, n: int, chunks: int | None = None):
    assert r.status == "ok", r.error
    assert r.error is None and r.http_status == 200
    assert r.prompt_tokens == prompt_tokens and r.output_tokens == n
    assert r.chunks == (n if chunks is None else chunks) == len(r.chunk_times)
    assert r.t_send <= r.t_first <= r.t_last <= r.t_end
    assert list(r.chunk_times) == sorted(r.chunk_times)
    assert r.ttft_ms == pytest.approx((r.t_first - r.t_send) * 1e3)
    assert r.e2e_ms == pytest.approx((r.t_last - r.t_send) * 1e3)
    if n >= 2:
        assert r.tpot_ms == pytest.approx((r.t_last - r.t_first) * 1e3 / (n - 1))


def test_fixed_batch_counts_and_timestamp_order(server):
    prompts = workloads.fixed_batch.prompts(8, 300, 20, vocab_size=512, seed=1)
    res = _run(server.url, prompts)
    assert [r.request_index for r in res.records] == list(range(8))
    for r in res.records:
        _check_ok_record(r, 300, 20)
        assert r.t_send_s >= 0.0 and r.t_first_s <= r.t_last_s
        assert r.requested_prompt_tokens == 300 and r.requested_output_tokens == 20
    assert min(r.t_send for r in res.records) == res.t0
    assert res.batch_time_s == pytest.approx(max(r.t_end for r in res.records) - res.t0)
    assert res.ok and res.started_at.endswith("+00:00")
    # the server saw exactly the token ids sent
    assert sorted(s.prompt_tokens for s in server.served) == [300] * 8
    # all at once: every request was sent before the first one completed
    assert max(r.t_send for r in res.records) < min(r.t_end for r in res.records)


def test_bulk_server_many_events_per_read_counted_exactly():
    """The benchmark's bulk server writes each stream at once: reads carry hundreds of SSE events
    (one HTTP chunk each), kept-alive connections serve several streams, and every count is exact."""

    async def go():
        srv = BulkSSEServer(FixtureConfig())
        await srv.start_async()
        try:
            res = await client.run_requests(
                srv.url, "m", workloads.fixed_batch.prompts(6, 10, 700, vocab_size=512), concurrency=2
            )
            return res, srv.requests_served
        finally:
            await srv.stop_async()

    res, served = asyncio.run(go())
    assert served == 6
    for r in res.records:
        _check_ok_record(r, 10, 700)
        assert len(set(r.chunk_times)) < 100  # many events per network read, each read stamped once


def test_timing_hook_sees_every_read_with_the_records_clock(server):
    """on_read gets each response's bytes, before parsing, stamped with the clock the records use."""
    reads: list[tuple[int, bytes, float]] = []
    prompts = [_with(p, delay_s=0.05) for p in workloads.fixed_batch.prompts(2, 10, 4, vocab_size=512)]
    recs = _run(server.url, prompts, on_read=lambda i, data, t: reads.append((i, data, t))).records
    for r in recs:
        _check_ok_record(r, 10, 4)
        mine = [(data, t) for i, data, t in reads if i == r.request_index]
        assert b"".join(d for d, _ in mine).count(b"data: ") == 4 + 2  # 4 token chunks, usage, [DONE]
        first_token_read = next(t for d, t in mine if b'"text":"' in d)
        assert r.t_first == first_token_read  # the same perf_counter stamp, not a second clock read
        assert mine[-1][1] <= r.t_end


def test_itl_gaps_are_the_gaps_between_reads_that_brought_tokens(server):
    """ITL per network read: each gap is between two reads carrying token chunks, stamped as on_read saw them."""
    reads: list[tuple[int, bytes, float]] = []
    prompts = [_with(p, delay_s=0.03) for p in workloads.fixed_batch.prompts(2, 10, 6, vocab_size=512)]
    recs = _run(server.url, prompts, on_read=lambda i, data, t: reads.append((i, data, t))).records
    for r in recs:
        _check_ok_record(r, 10, 6)
        stamps = [t for i, d, t in reads if i == r.request_index and b'"text":" ' in d]
        assert client.itl_gaps_ms(r.chunk_times) == pytest.approx([(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])])
        assert r.itl_max_ms == pytest.approx(max(client.itl_gaps_ms(r.chunk_times)))


def test_no_gc_pass_while_requests_are_in_flight(server):
    seen: dict[int, set[bool]] = {}
    prompts = workloads.fixed_batch.prompts(3, 10, 5, vocab_size=512)
    assert gc.isenabled()
    _run(server.url, prompts, on_read=lambda i, data, t: seen.setdefault(i, set()).add(gc.isenabled()))
    assert seen == {0: {False}, 1: {False}, 2: {False}} and gc.isenabled()  # off during the batch, restored after
    gc.disable()
    try:
        _run(server.url, prompts)
        assert not gc.isenabled()  # a caller's own setting is left as it was
    finally:
        gc.enable()


def test_timestamps_follow_server_pacing():
    cfg = FixtureConfig(first_delay_s=0.2, delay_s=0.05)
    with SSEServer(cfg) as srv:
        res = _run(srv.url, workloads.fixed_batch.prompts(2, 10, 5, vocab_size=512))
    for r in res.records:
        _check_ok_record(r, 10, 5)
        assert 190 <= r.ttft_ms < 400
        assert 45 <= r.tpot_ms < 120
        assert r.itl_max_ms >= 45


def test_request_body_and_stream_format(server):
    p = workloads.fixed_batch.prompts(1, 5, 3, vocab_size=512)[0]
    body = client.build_body(p, "m", seed=4, extra_body={"top_k": 1})
    assert body["prompt"] == list(p.token_ids) and body["max_tokens"] == 3
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["temperature"] == 0.0 and body["seed"] == 4 and body["top_k"] == 1


def test_every_failure_kind_recorded_per_request(server):
    base = workloads.fixed_batch.prompts(8, 100, 10, vocab_size=512, seed=2)
    prompts = [
        base[0],
        _with(base[1], http_status=500),
        _with(base[2], http_status=400),
        _with(base[3], error_after=4),
        _with(base[4], drop_after=3),
        _with(base[5], no_done=True),
        _with(base[6], first_delay_s=5.0),  # times out
        base[7],
    ]
    res = _run(server.url, prompts, timeout_s=1.5)
    recs = res.records
    assert len(recs) == len(prompts)
    ok = [r for r in recs if r.status == "ok"]
    failed = [r for r in recs if r.status == "failed"]
    assert len(ok) + len(failed) == len(prompts)
    assert [r.request_index for r in ok] == [0, 7]
    assert recs[1].http_status == 500 and recs[1].error.startswith("HTTP 500") and "fixture error" in recs[1].error
    assert recs[2].http_status == 400 and recs[2].error.startswith("HTTP 400")
    assert recs[3].error.startswith("error event in stream") and recs[3].chunks == 4  # saw [DONE], still failed
    assert recs[4].error.startswith("connection dropped") and recs[4].chunks == 3
    assert recs[5].error == "stream ended without [DONE] (incomplete)" and recs[5].output_tokens == 10
    assert recs[6].error.startswith("timeout") and recs[6].chunks == 0
    assert 1.4 < recs[6].t_end - recs[6].t_send < 4.0  # its 1.5 s timeout, not the first token 5 s away
    assert [r.error_kind for r in recs] == [
        None,
        "http_status",
        "http_status",
        "error_event",
        "dropped",
        "incomplete",
        "timeout",
        None,
    ]
    s = client.summarize(recs, res.batch_time_s)
    assert (s["requests_ok"], s["requests_failed"]) == (2, 6)
    rows = client.request_rows(recs, "r")
    assert rows.filter(rows["status"] == "failed").height == 6


def test_a_silent_server_is_a_stall_not_a_slow_request(server):
    base = workloads.fixed_batch.prompts(3, 50, 20, vocab_size=512, seed=3)
    prompts = [base[0], _with(base[1], first_delay_s=4.0), _with(base[2], delay_s=0.3)]
    res = _run(server.url, prompts, timeout_s=30, stall_s=1.0)
    recs = res.records
    assert recs[1].status == "failed" and recs[1].error == f"{client.STALLED} 1 s" and recs[1].chunks == 0
    # ended by the 1 s stall limit, not by the first token 4 s away (the upper bound leaves a loaded machine room)
    assert 0.9 < recs[1].t_end - recs[1].t_send < 3.0
    # a request slower in total than the stall limit, but never silent for that long, is fine
    assert recs[0].status == recs[2].status == "ok" and recs[2].t_end - recs[2].t_send > 1.0


@pytest.mark.parametrize("garbage", [b"\xff\xfe not json", b'{"usage":{"prompt_tokens":', b'["a", "list"]', b"42"])
def test_garbage_in_the_stream_fails_that_request_and_loses_nothing(garbage):
    base = workloads.fixed_batch.prompts(3, 50, 8, vocab_size=512, seed=4)
    with SSEServer(FixtureConfig(garbage=garbage)) as bad, SSEServer() as good:
        res = asyncio.run(_two_servers(good.url, bad.url, base))
    assert [r.status for r in res] == ["ok", "failed", "ok"]
    assert res[1].error.startswith(("unparseable stream data", "unexpected stream data")), res[1].error


async def _two_servers(good: str, bad: str, prompts):
    a = asyncio.create_task(client.run_requests(good, "m", [prompts[0], prompts[2]]))
    b = asyncio.create_task(client.run_requests(bad, "m", [prompts[1]]))
    ra, rb = await a, await b
    return [ra.records[0], rb.records[0], ra.records[1]]


def test_connection_refused_is_a_failed_request():
    prompts = workloads.fixed_batch.prompts(2, 10, 2, vocab_size=512)
    res = _run("http://127.0.0.1:9", prompts, timeout_s=5)
    assert [r.status for r in res.records] == ["failed", "failed"]
    assert all(r.http_status is None and "Connect" in r.error and r.error_kind == "connection" for r in res.records)


def test_two_megabyte_request_body(server):
    # 300K token ids of 6 digits: a bigger body than a 200K-token prompt (~1.5 MB)
    n = 300_000
    p = Prompt(index=0, max_tokens=4, token_ids=tuple(range(100_000, 100_000 + n)))
    assert len(json.dumps(client.build_body(p, "m"), separators=(",", ":"))) > 2_000_000
    res = _run(server.url, [p])
    _check_ok_record(res.records[0], n, 4)
    assert server.served[0].body_bytes > 2_000_000


def test_one_megabyte_sse_line():
    with SSEServer(FixtureConfig(line_bytes=1_000_000)) as srv:
        res = _run(srv.url, workloads.fixed_batch.prompts(2, 10, 6, vocab_size=512), keep_text=True)
        fast = _run(srv.url, workloads.fixed_batch.prompts(2, 10, 6, vocab_size=512))
    for r in res.records + fast.records:
        _check_ok_record(r, 10, 6)
    assert len(res.records[0].text) > 1_000_000


def test_empty_chunks_do_not_start_ttft_and_slow_path_agrees():
    # two empty-text chunks first (like a role chunk); non-compact JSON forces the parsing path
    for compact in (True, False):
        with SSEServer(FixtureConfig(empty_first=2, first_delay_s=0.0, delay_s=0.02, compact=compact)) as srv:
            res = _run(srv.url, workloads.fixed_batch.prompts(2, 10, 4, vocab_size=512))
        for r in res.records:
            _check_ok_record(r, 10, 4)
            assert r.chunks == 4 and r.empty_chunks == 2
            assert r.t_first_chunk < r.t_first  # the empty chunks came first and did not start TTFT


def test_usage_fields_and_missing_usage():
    with SSEServer(FixtureConfig(cached_tokens=64, chunks=5, tokens_per_chunk=2)) as srv:
        res = _run(srv.url, workloads.fixed_batch.prompts(1, 100, 10, vocab_size=512))
    r = res.records[0]
    assert r.cached_tokens == 64 and r.output_tokens == 10 and r.chunks == 5 and r.count_flag is None
    assert r.tpot_ms == pytest.approx((r.t_last - r.t_first) * 1e3 / 9)  # tokens, not chunks
    with SSEServer(FixtureConfig(usage=False)) as srv:
        res = _run(srv.url, workloads.fixed_batch.prompts(1, 100, 5, vocab_size=512))
    r = res.records[0]
    assert r.status == "ok" and r.output_tokens is None and r.prompt_tokens is None and r.tpot_ms is None
    assert client.summarize(res.records, res.batch_time_s)["served_output_tokens"] is None


def test_concurrency_limit(server):
    cfg_delay = {"delay_s": 0.02}
    prompts = [_with(p, **cfg_delay) for p in workloads.fixed_batch.prompts(6, 10, 3, vocab_size=512)]
    res = _run(server.url, prompts, concurrency=2)
    assert all(r.status == "ok" for r in res.records)
    events = sorted([(r.t_send, 1) for r in res.records] + [(r.t_end, -1) for r in res.records])
    in_flight, peak = 0, 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    assert peak <= 2


def test_multi_turn_turns_run_in_order(server):
    prompts = [_with(p, delay_s=0.01) for p in workloads.multi_turn.prompts(3, 3, 100, 10, 5, vocab_size=512)]
    res = _run(server.url, prompts)
    assert all(r.status == "ok" for r in res.records)
    for r in res.records:
        assert r.prompt_tokens == 100 + (r.turn + 1) * 10 + r.turn * 5
        if r.turn:
            prev = res.records[r.request_index - 1]
            assert prev.conversation == r.conversation and prev.t_end <= r.t_send


def test_chat_reasoning_and_content_counted_separately():
    cfg = FixtureConfig(reasoning_chunks=3, empty_first=1)
    msgs = ({"role": "user", "content": "why is the sky blue"},)
    prompts = [Prompt(index=i, max_tokens=8, messages=msgs) for i in range(2)]
    with SSEServer(cfg) as srv:
        res = _run(srv.url, prompts)
        assert {s.endpoint for s in srv.served} == {"/v1/chat/completions"}
    for r in res.records:
        _check_ok_record(r, 5, 8)
        assert r.reasoning_chunks == 3
        assert r.t_first_answer == r.chunk_times[3]
        assert r.reasoning_text == " t0 t1 t2" and r.text == " t3 t4 t5 t6 t7"


def test_error_event_with_sse_event_field():
    # "event: error" followed by a data line that has no "error" key is still a failure
    from aiohttp import web

    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n')
        await resp.write(b": keep-alive comment\r\n\r\n")
        await resp.write(b'event: error\ndata: {"message":"engine died"}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def go():
        async with serve_app({"POST /v1/completions": handler}) as url:
            return await client.run_requests(url, "m", workloads.fixed_batch.prompts(1, 4, 2, vocab_size=512))

    r = asyncio.run(go()).records[0]
    assert r.status == "failed" and "engine died" in r.error and r.chunks == 1


def test_empty_batch():
    res = _run("http://127.0.0.1:9", [])
    assert res.records == [] and res.batch_time_s == 0.0


def _stream_events(rng) -> list[bytes]:
    """A completions stream as vLLM writes it: token chunks (some with empty text), a comment, usage, [DONE]."""
    events = []
    for i in range(rng.randint(1, 40)):
        text = "" if rng.random() < 0.2 else rng.choice([f" t{i}", 'data: quoted \\"text\\":\\"', "é"])
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
        events.append(b"data: " + json.dumps({"id": "c", "choices": [choice]}, separators=(",", ":")).encode())
        if rng.random() < 0.1:
            events.append(b": keep-alive")
        if rng.random() < 0.05:
            events.append(b'data: {"id":"c","choices":[]}')  # a data line with no token in it
    usage = {"prompt_tokens": 3, "completion_tokens": 7}
    events.append(b"data: " + json.dumps({"id": "c", "choices": [], "usage": usage}, separators=(",", ":")).encode())
    events.append(b"data: [DONE]")
    return events


class _Content:
    def __init__(self, reads):
        self._reads = list(reads)

    async def readany(self):
        return self._reads.pop(0) if self._reads else b""

    async def iter_any(self):
        while data := await self.readany():
            yield data


class _Resp:
    def __init__(self, reads):
        self.content = _Content(reads)


@pytest.mark.parametrize("seed", range(40))
def test_whole_read_fast_path_matches_line_by_line_parsing(seed, monkeypatch):
    # The fast path accounts a read's complete lines together; with any split of the byte stream
    # into reads (mid-line included) it must give what parsing every line as JSON gives.
    rng = random.Random(seed)
    events = _stream_events(rng)
    if seed % 5 == 4:  # a mid-stream error event: both paths fail the request
        events.insert(len(events) // 2, b'data: {"error":{"message":"boom","code":500}}')
    sep = b"\r\n\r\n" if seed % 3 == 0 else b"\n\n"
    stream = b"".join(e + sep for e in events)
    bounds = list(itertools.accumulate(len(e + sep) for e in events))[:-1]
    if seed % 4 == 0:  # one read per event, as when the client keeps up with the server
        cuts = bounds
    elif seed % 4 == 1:  # reads of several whole events
        cuts = sorted(rng.sample(bounds, rng.randint(0, len(bounds))))
    else:  # anywhere, mid-line included
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 12))))
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]

    def run(fast: bool) -> client._Acc:
        clock = itertools.count()
        monkeypatch.setattr(client.time, "perf_counter", lambda: float(next(clock)))
        acc = client._Acc(0)
        asyncio.run(client._read_stream(_Resp(reads), acc, fast, False))
        return acc

    fast, parsed = run(True), run(False)
    fields = ("chunk_times", "empty_chunks", "t_first_chunk", "t_first_answer", "usage", "done", "error")
    assert {f: getattr(fast, f) for f in fields} == {f: getattr(parsed, f) for f in fields}
    assert parsed.done and parsed.usage == {"prompt_tokens": 3, "completion_tokens": 7}
    assert (parsed.error is not None) == (seed % 5 == 4)


# ----------------------------------------------------------------- one bad response fails one request


@pytest.mark.parametrize(
    "knobs, where",
    [
        ({"garbage": '{"choices":"abc"}'}, "choices is a string"),
        ({"garbage": '{"choices":[7]}'}, "choices[0] is a number"),
        ({"garbage": '{"choices":[{"text":5}]}'}, "choices[0].text is a number"),
        ({"garbage": '{"choices":[{"text":"a","finish_reason":["x"]}]}'}, "choices[0].finish_reason is a list"),
        ({"usage_json": "5"}, "usage is a number"),
        ({"usage_json": '"x"'}, "usage is a string"),
        ({"usage_json": '{"prompt_tokens":3,"completion_tokens":"3"}'}, "usage.completion_tokens is a string"),
        (
            {"usage_json": '{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":"x"}'},
            "usage.prompt_tokens_details is a string",
        ),
        (
            {"usage_json": '{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":-1}}'},
            "usage.prompt_tokens_details.cached_tokens is a number (-1), expected a non-negative integer",
        ),
        ({"usage_json": '{"prompt_tokens":true,"completion_tokens":4}'}, "usage.prompt_tokens is a boolean"),
        ({"usage_json": '{"prompt_tokens":3.5,"completion_tokens":4}'}, "usage.prompt_tokens is a number (3.5)"),
        (
            {"usage_json": '{"prompt_tokens":3,"completion_tokens":4,"completion_tokens_details":[1]}'},
            "usage.completion_tokens_details is a list",
        ),
    ],
)
@pytest.mark.parametrize("keep_text", [False, True])  # the fast path and the parsing path
def test_a_field_of_the_wrong_type_fails_that_request_only(server, knobs, where, keep_text):
    if "finish_reason" in where and not keep_text:
        pytest.skip("the fast path reads a compact token line's text key only, not its finish_reason (README)")
    base = workloads.fixed_batch.prompts(3, 20, 4, vocab_size=512, seed=5)
    res = _run(server.url, [base[0], _with(base[1], **knobs), base[2]], keep_text=keep_text)
    bad = res.records[1]
    assert [r.status for r in res.records] == ["ok", "failed", "ok"]
    assert bad.error_kind == "malformed" and bad.error.startswith(f"{client.MALFORMED} {where}"), bad.error
    if "usage_json" in knobs:  # nothing of a malformed usage is kept
        assert bad.prompt_tokens is bad.output_tokens is bad.cached_tokens is None
    rows = client.request_rows(res.records, "r")
    assert rows["error_kind"].to_list() == [None, "malformed", None]
    s = client.summarize(res.records, res.batch_time_s)
    assert (s["requests_ok"], s["requests_failed"]) == (2, 1)
    assert s["served_output_tokens"] == 8 + (0 if "usage_json" in knobs else 4)  # a failed request's valid usage counts


def test_count_flag_rules():
    assert client.count_flag(16, 16, 16, True) is None
    assert client.count_flag(10, 10, 16, False) is None  # stopped early without ignore_eos: fine
    assert client.count_flag(None, 3, 16, True) is None  # no usage: nothing to judge
    assert client.count_flag(-50, 3, 16, True) == "completion_tokens -50 is negative"
    assert client.count_flag(1000, 3, 16, False) == "completion_tokens 1000 is above max_tokens 16"
    assert client.count_flag(2, 3, 16, False) == "completion_tokens 2 is below the 3 token-bearing chunks received"
    assert client.count_flag(2, 3, 16, True) == (
        "completion_tokens 2 is below the 3 token-bearing chunks received; "
        "completion_tokens 2 is not max_tokens 16 under ignore_eos"
    )
    assert client.count_flag(12, 3, 16, True) == "completion_tokens 12 is not max_tokens 16 under ignore_eos"


def test_implausible_counts_are_flagged_kept_and_left_out_of_the_token_sum(server):
    base = workloads.fixed_batch.prompts(5, 20, 8, vocab_size=512, seed=6)
    prompts = [
        base[0],
        _with(base[1], completion_tokens=-50),
        _with(base[2], completion_tokens=1000),
        _with(base[3], chunks=3, completion_tokens=1000),
        _with(base[4], completion_tokens=2),
    ]
    res = _run(server.url, prompts)
    recs = res.records
    assert all(r.status == "ok" for r in recs)  # the requests completed; their counts are what is wrong
    assert [r.output_tokens for r in recs] == [8, -50, 1000, 1000, 2]  # kept as reported
    assert recs[0].count_flag is None and recs[0].tpot_ms is not None
    assert recs[1].count_flag == "completion_tokens -50 is negative"
    assert recs[2].count_flag == "completion_tokens 1000 is above max_tokens 8"
    assert recs[3].chunks == 3 and recs[3].count_flag == "completion_tokens 1000 is above max_tokens 8"
    assert recs[4].count_flag.startswith("completion_tokens 2 is below the 8 token-bearing chunks")
    assert all(r.tpot_ms is None for r in recs[1:])
    s = client.summarize(recs, res.batch_time_s)
    assert (s["served_output_tokens"], s["requests_miscounted"], s["requests_ok"]) == (8, 4, 5)
    assert s["tpot_mean_ms"] == pytest.approx(recs[0].tpot_ms)
    rows = client.request_rows(recs, "r")
    assert rows["count_flag"].null_count() == 1 and rows["output_tokens"].to_list() == [8, -50, 1000, 1000, 2]


def test_a_line_over_the_cap_fails_its_request_and_the_cap_is_16_mib(server):
    assert client.MAX_LINE_BYTES == 16 * 2**20
    base = workloads.fixed_batch.prompts(3, 10, 4, vocab_size=512, seed=7)
    res = _run(server.url, [base[0], _with(base[1], line_bytes=17 * 2**20), _with(base[2], line_bytes=3 * 2**20)])
    assert [r.status for r in res.records] == ["ok", "failed", "ok"]
    assert res.records[1].error_kind == "oversized" and "16 MiB" in res.records[1].error


def test_an_endless_error_body_is_read_only_up_to_its_cap():
    from aiohttp import web

    sent = []

    async def endless(request):
        resp = web.StreamResponse(status=500)
        await resp.prepare(request)
        try:
            while True:  # never ends: a client that reads the whole body never returns
                await resp.write(b"x" * 2**20)
                sent.append(2**20)
        except (ConnectionError, RuntimeError):
            return resp

    async def go():
        async with serve_app({"POST /v1/completions": endless}) as url:
            return await client.run_requests(
                url, "m", workloads.fixed_batch.prompts(1, 4, 2, vocab_size=512), timeout_s=20
            )

    r = asyncio.run(go()).records[0]
    assert r.status == "failed" and r.error_kind == "http_status" and r.error.startswith("HTTP 500: xxx")
    assert len(r.error) == client.ERROR_TEXT_CHARS and r.t_end - r.t_send < 10
    assert client.MAX_ERROR_BODY_BYTES == 64 * 2**10


def test_a_redirect_is_not_followed_and_the_key_stays_with_its_host():
    from aiohttp import web

    seen = []

    async def elsewhere(request):
        seen.append(request.headers.get("Authorization"))
        return web.json_response({})

    async def go():
        async with serve_app({"POST /v1/completions": elsewhere}) as other:

            async def redirect(request):
                raise web.HTTPFound(other + "/v1/completions")

            async with serve_app({"POST /v1/completions": redirect}) as url:
                return await client.run_requests(
                    url, "m", workloads.fixed_batch.prompts(1, 4, 2, vocab_size=512), api_key="s3cret"
                )

    r = asyncio.run(go()).records[0]
    assert r.status == "failed" and r.http_status == 302 and "not followed" in r.error
    assert seen == []  # the other host never saw the request, let alone the key


@pytest.mark.parametrize("per_request", [False, True])
def test_connections_per_request_open_one_each_and_the_client_closes_them_as_sglangs_benchmark_does(per_request):
    """load.connections: per_request opens a new connection for every request and closes it from the client once
    the response is read, asking the server for keep-alive as SGLang's benchmark does (a session per request, no
    'Connection: close'), so the server does not close it inside the run; kept reuses the open connections."""
    from aiohttp import web

    seen: list[tuple[int, str | None]] = []

    async def handler(request):
        seen.append((request.transport.get_extra_info("peername")[1], request.headers.get("Connection")))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"index":0,"text":"a","finish_reason":"length"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def go():
        async with serve_app({"POST /v1/completions": handler}) as url:
            prompts = workloads.fixed_batch.prompts(6, 4, 1, vocab_size=512)
            return await client.run_requests(url, "m", prompts, concurrency=2, new_connection_per_request=per_request)

    res = asyncio.run(go())
    assert [r.status for r in res.records] == ["ok"] * 6 and len(seen) == 6
    ports = {port for port, _ in seen}
    if per_request:
        assert len(ports) == 6 and {header for _, header in seen} == {"keep-alive"}
    else:
        assert len(ports) == 2 and {header for _, header in seen} == {None}


class _SendWhenTold:
    """A loopback server for one request: it reads the request, tells the client's event loop so (``on_request``, run
    there), waits until ``release`` is set, then sends the whole response at once and idles with the connection open
    until ``done`` is set."""

    RESPONSE = b"".join(
        b"%x\r\n%b\r\n" % (len(event), event)
        for event in (
            b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n',
            b'data: {"choices":[{"index":0,"text":" b","finish_reason":"length"}]}\n\n',
            b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}\n\n',
            b"data: [DONE]\n\n",
        )
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, on_request) -> None:
        import socket
        import threading

        self.loop, self.on_request = loop, on_request
        self.release, self.sent, self.done = threading.Event(), threading.Event(), threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(65536)
            head, _, body = got.partition(b"\r\n\r\n")
            length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
            while len(body) < length:
                body += conn.recv(65536)
            self.loop.call_soon_threadsafe(self.on_request)
            self.release.wait(10)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + self.RESPONSE
                + b"0\r\n\r\n"
            )
            self.sent.set()
            self.done.wait(10)  # idle, the connection open, until the test ends


@pytest.mark.parametrize("judged", [True, False], ids=["socket-drained-first", "aiohttp-alone"])
def test_a_starved_client_reads_what_its_socket_holds_before_calling_a_stall(judged, monkeypatch):
    """Issue 56: a client whose event loop wakes late must not call a stream stalled whose bytes already wait in its
    socket. Made deterministic: once the server has the request, the client's loop blocks for 1 s (past the 0.5 s
    stall limit); the pass that follows runs a second long callback, during which the server sends its whole response,
    before aiohttp's stall timer (due in that same pass). Judged after draining the socket the request is ok;
    aiohttp's own timer (``aiohttp-alone``) calls it stalled. The loop's recorded lag covers the block."""
    if not judged:  # aiohttp's own judgement: the race this test sets up is real
        monkeypatch.setattr(client._StallJudged, "_on_read_timeout", client.ResponseHandler._on_read_timeout)
    block_s, stall_s = 1.0, 0.5
    prompt = workloads.fixed_batch.prompts(1, 4, 2, vocab_size=512)[0]

    async def go():
        import time

        loop = asyncio.get_running_loop()

        def second_long_callback():  # collected with the overdue stall timer, and before it (it is due earlier)
            srv.release.set()
            srv.sent.wait(10)
            time.sleep(0.1)  # the bytes are in the client's socket now

        def starve():  # the server has the request: the stall timer runs (armed when it was written)
            loop.call_later(0.1, second_long_callback)
            time.sleep(block_s)

        srv = _SendWhenTold(loop, starve)
        try:
            return await client.run_requests(srv.url, "m", [prompt], stall_s=stall_s)
        finally:
            srv.release.set()
            srv.done.set()
            srv.sock.close()

    res = asyncio.run(go())
    r = res.records[0]
    if judged:
        assert r.status == "ok" and r.output_tokens == 2 and r.chunks == 2, r.error
    else:
        assert r.error == f"{client.STALLED} 0.5 s"
    # the loop's lag covers the block, less at most one interval of the lag timer (it may have been due just before)
    assert res.loop_lag_max_ms >= (block_s - client.LOOP_LAG_INTERVAL_S) * 1e3


def test_requests_due_at_the_same_moment_are_sent_in_their_given_order(server):
    """A replayed trace's records with one timestamp (the shipped slice has 16 at 3 s) leave in record order, as the
    peers' replays send them: each chain sleeping to its own offset woke in the event loop's timer order, and on
    2026-12-07 vLLM saw the 16 scrambled, so which of them shared decode steps with the slice's 1,363-token prefill
    changed between kvlab's replay and `vllm bench serve`'s (docs/performance.md)."""
    prompts = workloads.fixed_batch.prompts(24, 8, 2, vocab_size=512)
    offsets = {p.index: (0.0 if p.index < 4 else 0.05) for p in prompts}  # 4 at once, then 20 at once
    res = _run(server.url, prompts, start_offsets=offsets)
    sent = sorted(res.records, key=lambda r: r.t_send_s)
    assert [r.request_index for r in sent] == list(range(24))
    assert all(r.t_send_s >= 0.045 for r in res.records if r.request_index >= 4)
    assert all(r.status == "ok" for r in res.records)
    # the order given, not the index: a caller's reversed list goes reversed
    backwards = {p.index: 0.0 for p in prompts}
    chains = list(reversed(prompts))
    res = asyncio.run(client.run_requests(server.url, "fixture-model", chains, start_offsets=backwards))
    assert [r.request_index for r in sorted(res.records, key=lambda r: r.t_send_s)] == list(reversed(range(24)))
