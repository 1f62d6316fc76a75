"""Prometheus /metrics: parsing a vLLM-shaped page, counter deltas, and scraping a server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.support.sse_fixture import SSEServer, serve_app

from kvlab import metrics
from kvlab.engines.sglang_jax import SGLangJaxAdapter


# A /metrics page shaped like vLLM's (names from FACTS §1): two engines' label sets for one model,
# a histogram, a gauge, and prometheus_client's _created samples.
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="/tmp/tiny"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="/tmp/tiny"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="/tmp/tiny"} 8000.0
vllm:prefix_cache_queries_total{engine="1",model_name="/tmp/tiny"} 2000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="/tmp/tiny"} 1984.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="/tmp/tiny"} 0.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="/tmp/tiny"} 8000.0
vllm:prompt_tokens_total{engine="1",model_name="/tmp/tiny"} 2000.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="/tmp/tiny"} 1.7644956e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="/tmp/tiny"} 128.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="/tmp/tiny"} 4.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="/tmp/tiny"} 1.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="/tmp/tiny"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="/tmp/tiny"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="/tmp/tiny"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="/tmp/tiny"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="/tmp/tiny"} 2.75
"""

VLLM_NAMES = {
    "server_prompt_tokens": "vllm:prompt_tokens",
    "server_generation_tokens": "vllm:generation_tokens_total",
    "server_prefix_cache_queries": "vllm:prefix_cache_queries",
    "server_prefix_cache_hits": "vllm:prefix_cache_hits",
    "server_preemptions": "vllm:num_preemptions",
}


def test_parse_metrics_sums_label_sets_exactly():
    m = metrics.parse_metrics(VLLM_METRICS)
    assert m["vllm:prompt_tokens_total"] == 10000.0
    assert m["vllm:generation_tokens_total"] == 128.0
    assert m["vllm:prefix_cache_queries_total"] == 10000.0
    assert m["vllm:prefix_cache_hits_total"] == 1984.0
    assert m["vllm:num_preemptions_total"] == 0.0
    assert m["vllm:request_success_total"] == 5.0
    assert m["vllm:kv_cache_usage_perc"] == 0.25
    assert m['vllm:time_to_first_token_seconds_bucket{le="1.0"}'] == 4.0
    assert m["vllm:time_to_first_token_seconds_sum"] == 2.75
    assert m["vllm:time_to_first_token_seconds_count"] == 4.0


def test_counter_deltas_exact_and_none_when_absent():
    before = metrics.parse_metrics(VLLM_METRICS)
    after_text = VLLM_METRICS.replace("} 8000.0", "} 16000.0").replace(  # engine 0 prompt tokens and queries +8000
        'vllm:generation_tokens_total{engine="0",model_name="/tmp/tiny"} 128.0',
        'vllm:generation_tokens_total{engine="0",model_name="/tmp/tiny"} 256.0',
    )
    after = metrics.parse_metrics(after_text)
    d = metrics.counter_deltas(before, after, {**VLLM_NAMES, "server_unknown": "vllm:not_there", "server_none": None})
    assert d == {
        "server_prompt_tokens": 8000.0,
        "server_generation_tokens": 128.0,
        "server_prefix_cache_queries": 8000.0,
        "server_prefix_cache_hits": 0.0,
        "server_preemptions": 0.0,
        "server_unknown": None,  # not exposed: say so, never 0
        "server_none": None,  # engine has no such counter
    }
    # counter reset (server restarted) and missing baseline are unknown, not negative or total
    assert metrics.counter_deltas(after, before, {"p": "vllm:prompt_tokens"}) == {"p": None}
    assert metrics.counter_deltas({}, after, {"p": "vllm:prompt_tokens"}) == {"p": None}
    # a series that appears during the run started at 0
    assert metrics.counter_deltas({"x_total": 1.0}, {"x_total": 1.0, "y_total": 5.0}, {"y": "y"}) == {"y": 5.0}


def _sglang_body(
    prompt: float, generated: float, cached: dict[str, float] | None = None, retracted: float | None = None
) -> str:
    """A /metrics body shaped like SGLang 0.5.23's (srt/observability/metrics_collector.py): labelled counters, the
    prompt and generation ones split by is_streaming, cached tokens by cache_source; a counter never incremented has
    no sample at all (prometheus_client multiprocess mode)."""
    lab = 'model_name="tiny",engine_type="unified",tp_rank="0",pp_rank="0"'
    lines = [
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{{lab},is_streaming="false"}} 4.0',
        f'sglang:prompt_tokens_total{{{lab},is_streaming="true"}} {prompt - 4.0}',
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
        "# TYPE sglang:generation_tokens_total counter",
        f'sglang:generation_tokens_total{{{lab},is_streaming="false"}} 8.0',
        f'sglang:generation_tokens_total{{{lab},is_streaming="true"}} {generated - 8.0}',
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{lab}}} 0.0",
    ]
    if cached:
        lines += [
            "# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).",
            "# TYPE sglang:cached_tokens_total counter",
        ]
        lines += [f'sglang:cached_tokens_total{{{lab},cache_source="{src}"}} {v}' for src, v in cached.items()]
    if retracted is not None:
        lines += [
            "# HELP sglang:num_retracted_requests_total Total number of retracted requests.",
            "# TYPE sglang:num_retracted_requests_total counter",
            f"sglang:num_retracted_requests_total{{{lab}}} {retracted}",
        ]
    return "\n".join(lines) + "\n"


def test_sglangs_counters_exported_once_incremented_are_0_while_absent_beside_its_prompt_counter():
    """SGLang exports cached_tokens_total and num_retracted_requests_total only after their first increment: a run
    with no cache hit and no retraction reads 0 for them (not None) when /metrics serves the prompt counter; a body
    without it (or no baseline) leaves them unknown; once present they count as any counter."""
    from kvlab.engines.sglang import SGLangAdapter

    names, lazy = SGLangAdapter.metric_names, SGLangAdapter.counted_once_incremented
    assert lazy == ("prefix_cache_hits", "cached_tokens", "preemptions")
    before = metrics.parse_metrics(_sglang_body(36.0, 16.0))
    after = metrics.parse_metrics(_sglang_body(4036.0, 80.0))
    assert metrics.counter_deltas(before, after, names, lazy) == {
        "prompt_tokens": 4000.0,
        "generation_tokens": 64.0,
        "prefix_cache_queries": 4000.0,
        "prefix_cache_hits": 0.0,
        "preemptions": 0.0,
        "cached_tokens": 0.0,
    }
    # without the adapter's list (as before this fix) the absent counters were unknown
    plain = metrics.counter_deltas(before, after, names)
    assert (plain["prefix_cache_hits"], plain["preemptions"]) == (None, None)
    # hits and retractions during the run: the series appear, summed over cache_source, counted from 0
    hit = metrics.parse_metrics(_sglang_body(4036.0, 80.0, cached={"device": 1999.0, "host": 1.0}, retracted=3.0))
    d = metrics.counter_deltas(before, hit, names, lazy)
    assert (d["prefix_cache_hits"], d["cached_tokens"], d["preemptions"]) == (2000.0, 2000.0, 3.0)
    # after a first hit, the next run's delta is the difference
    more = metrics.parse_metrics(_sglang_body(8036.0, 144.0, cached={"device": 3999.0, "host": 1.0}, retracted=3.0))
    d = metrics.counter_deltas(hit, more, names, lazy)
    assert (d["prefix_cache_hits"], d["preemptions"]) == (2000.0, 0.0)
    # not counting: no baseline, or an after-body without the prompt counter (metrics off): unknown, never 0
    assert metrics.counter_deltas({}, after, names, lazy)["preemptions"] is None
    gauges_only = metrics.parse_metrics(
        _sglang_body(1.0, 1.0).split("# HELP sglang:num_running_reqs")[0].replace("prompt_tokens_total", "other_total")
    )
    assert metrics.counter_deltas(before, gauges_only, names, lazy)["preemptions"] is None
    # present before, gone after (a restarted server): unknown
    assert metrics.counter_deltas(hit, after, names, lazy)["prefix_cache_hits"] is None


def test_sglangs_sampled_retraction_counter_is_0_while_absent_beside_its_generation_counter():
    """Telemetry samples SGLang's retraction counter (preemptions_total): absent before its first retraction, it is 0
    in a sample whose body serves the generation-token counter, and None (not sampled) where that is absent too; a
    gauge the body lacks stays None."""
    from kvlab.engines.sglang import SGLangAdapter

    names, lazy = SGLangAdapter.telemetry_names, SGLangAdapter.telemetry_counted_once_incremented
    assert lazy == ("preemptions_total",) and names["preemptions_total"] == "sglang:num_retracted_requests_total"
    none_yet = metrics.parse_metrics(_sglang_body(4036.0, 80.0))
    assert metrics.telemetry_values(none_yet, names, lazy) == {
        "kv_cache_usage": None,
        "requests_running": 0.0,
        "requests_waiting": None,
        "preemptions_total": 0.0,
        "generation_tokens_total": 80.0,
    }
    assert metrics.telemetry_values(none_yet, names)["preemptions_total"] is None  # without the adapter's list
    retracted = metrics.parse_metrics(_sglang_body(4036.0, 80.0, retracted=2.0))
    assert metrics.telemetry_values(retracted, names, lazy)["preemptions_total"] == 2.0
    assert metrics.telemetry_values({}, names, lazy) == dict.fromkeys(names)


def test_scrape_live_fixture_and_404():
    from kvlab import client, workloads

    async def go(url):
        before = await metrics.scrape(url)
        prompts = workloads.fixed_batch.prompts(3, 50, 4, vocab_size=512)
        await client.run_requests(url, "m", prompts)
        after = await metrics.scrape(url)
        return metrics.counter_deltas(before, after, VLLM_NAMES)

    with SSEServer() as srv:
        d = asyncio.run(go(srv.url))
    assert d["server_prompt_tokens"] == 150.0 and d["server_generation_tokens"] == 12.0
    assert d["server_prefix_cache_hits"] is None

    async def no_metrics():
        async with serve_app({}) as url:
            return await metrics.scrape(url)

    assert asyncio.run(no_metrics()) == {}


def grid_lateness(stamps: list[float], interval_s: float) -> list[float]:
    """How late each sample (a time.perf_counter() stamp) came against the sampler's grid, sorted: sample k is due at
    the grid's origin + k x ``interval_s``, never before it. One wake-up may come late on a busy core, and the grid's
    next sample then comes sooner, so a test bounds the median, not each gap; a sampler on another interval drifts
    off the grid and fails that bound."""
    origin = min(t - k * interval_s for k, t in enumerate(stamps))
    return sorted(t - k * interval_s - origin for k, t in enumerate(stamps))


def test_sample_during_keeps_every_sample_and_the_error_of_a_failed_one():
    """The telemetry sampler reads only the wanted series, on a fixed interval, until cancelled; a failed answer
    is a sample with its error (never a silent 0); a series the server lacks is None."""
    from tests.support.sse_fixture import FixtureConfig

    names = {"generation_tokens_total": "vllm:generation_tokens_total", "kv_cache_usage": "vllm:kv_cache_usage_perc"}

    async def go(url):
        samples: list = []
        task = asyncio.create_task(metrics.sample_during(url, names, samples, interval_s=0.1))
        await asyncio.sleep(0.55)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return samples

    with SSEServer() as srv:
        ok = asyncio.run(go(srv.url))
    assert 4 <= len(ok) <= 7 and all(err is None for _, _, err in ok)
    assert all(v == {"generation_tokens_total": 0.0, "kv_cache_usage": None} for _, v, _ in ok)
    # on the interval's grid, mostly on time (make test's pinned pass, 2026-12-07: one gap past 0.2 s)
    late = grid_lateness([t for t, _, _ in ok], 0.1)
    assert late[len(late) // 2] < 0.1, late
    with SSEServer(FixtureConfig(metrics_fault_rate=1.0)) as bad:
        failed = asyncio.run(go(bad.url))
    # HTTP 500: a sample with its error; garbage holding none of the wanted series: each of them None, never 0
    assert any(err == "RuntimeError: HTTP 500" for _, _, err in failed)
    assert all((v == {} and err) or (err is None and set(v.values()) == {None}) for _, v, err in failed)


# ----------------------------------------------------------------- telemetry from the server log (sglang-jax)

#: A real sglang-jax server log (kvlab test run, 2026-12-03; tests/fixtures/README.md): start-up, warm-up, then
#: the scheduler's "Prefill batch." / "Decode batch." lines of two runs.
SGLANG_JAX_LOG = Path(__file__).parent / "fixtures" / "logs" / "sglang-jax-server.log"


#: The grammar kvlab reads sglang-jax's log with: its adapter's (kvlab.metrics knows none).
parse_line = SGLangJaxAdapter().telemetry_from_log


def _log_lines() -> list[bytes]:
    return [line + b"\n" for line in SGLANG_JAX_LOG.read_bytes().split(b"\n")[:-1]]  # tqdm's \r stay inside lines


def test_the_scheduler_lines_of_a_real_sglang_jax_log_parse_to_exact_values():
    """Each scheduler line gives requests running and waiting and the KV pool's used share (and, on decode lines,
    the tokens it holds); every other line of the log (start-up, HTTP access, progress bars) gives nothing."""
    parsed = [v for v in (parse_line(line.decode()) for line in _log_lines()) if v is not None]
    rows = [(v["requests_running"], v["requests_waiting"], v["kv_cache_usage"], v["kv_tokens_used"]) for v in parsed]
    assert rows == [
        (0, 0, 0.00, None),  # the warm-up's 16-token prefill
        (0, 0, 0.00, None),
        (0, 0, 0.00, None),  # a 1,000-token prefill, nothing else running
        (1, 0, 0.06, None),  # "#new-seq: 2, #new-token: 2000, ... token usage: 0.06, #running-req: 1"
        (3, 0, 0.18, None),
        (0, 0, 0.00, None),
        (0, 0, 0.03, None),  # "#cached-token: 500, token usage: 0.03"
        (0, 0, 0.03, None),
        (0, 0, 0.03, None),
        (1, 0, 0.06, 1005),  # "Decode batch. #running-req: 1, #token: 1005, token usage: 0.06, ..."
    ]
    # a hybrid (sliding-window) model's decode line, built from sglang-jax's format string: the larger usage, as its
    # scheduler itself takes, and "#running-req per DP" is not the running count
    hybrid = parse_line(
        "[2026-12-03 12:00:00] Decode batch. #running-req: 4, #full token: 900, full token usage: 0.05, #swa token: "
        "2000, swa token usage: 0.12, #running-req per DP: [4], gen throughput (token/s): 9.00, #queue-req: 2, "
    )
    assert hybrid == {"requests_running": 4, "requests_waiting": 2, "kv_cache_usage": 0.12, "kv_tokens_used": 2000}


def test_the_log_tail_reads_only_lines_written_after_its_start_and_says_when_none_came(tmp_path):
    """The sampler reads what another writer appends to the log after byte ``start`` (the lines before it, an
    earlier run's, are never read), keeps the newest scheduler line's values per read, records a read that found
    no new scheduler line as a gap (never a repeated or made-up value) and waits for a line still being written."""
    lines = _log_lines()
    sched = [i for i, line in enumerate(lines) if b" batch. " in line]
    assert len(sched) == 10
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(lines[: sched[3] + 1]))  # up to "#running-req: 1": before the run, never read
    start = metrics.log_size(log)
    decode = lines[sched[9]]
    steps = [  # (samples taken before it, bytes appended)
        (1, b"".join(lines[sched[3] + 1 : sched[4] + 1])),  # an access line, then "#running-req: 3 ... usage 0.18"
        (3, b"".join(lines[sched[4] + 1 : sched[9]]) + decode[:40]),  # prefills; the decode line cut mid-way
        (4, decode[40:]),
    ]

    class Samples(list):
        """The sampler's list: the other writer appends its next bytes as soon as the sample it waits for is taken
        (in the sampler's turn, so a loaded machine cannot make a write miss the read it is meant for)."""

        def append(self, item) -> None:
            super().append(item)
            for wait_for, data in steps:
                if len(self) == wait_for:
                    with open(log, "ab") as f:
                        f.write(data)

    samples = Samples()

    async def go():
        task = asyncio.create_task(metrics.tail_log_during(log, start, samples, parse_line, interval_s=0.2))
        while len(samples) < 6:
            await asyncio.sleep(0.01)
        with open(log, "ab") as f:  # the batch's last line, written after the grid's last read
            f.write(lines[sched[3]])
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())
    gap = ({}, metrics.NO_NEW_LOG_LINE)
    values = [(v, err) for _, v, err in samples[:6]]
    assert values == [
        gap,  # the pre-start lines ("#running-req: 1") are not read
        ({"requests_running": 3, "requests_waiting": 0, "kv_cache_usage": 0.18, "kv_tokens_used": None}, None),
        gap,
        # the newest whole line is the last 500-token prefill; the decode line is not finished yet
        ({"requests_running": 0, "requests_waiting": 0, "kv_cache_usage": 0.03, "kv_tokens_used": None}, None),
        ({"requests_running": 1, "requests_waiting": 0, "kv_cache_usage": 0.06, "kv_tokens_used": 1005}, None),
        gap,
    ]
    # on the interval's grid, mostly on time (a fresh clone's make test, 2026-12-07: one gap past 0.4 s)
    late = grid_lateness([t for t, _, _ in samples[:6]], 0.2)
    assert late[len(late) // 2] < 0.1, late
    # the cancellation (the batch has ended) reads once more: the line written since the last grid read is kept
    assert len(samples) == 7 and samples[6][1:] == ({**parse_line(lines[sched[3]].decode())}, None)
    assert samples[6][0] > samples[5][0]


def test_a_cancel_during_the_gpu_read_keeps_the_engine_reading_it_took(tmp_path):
    """The batch ends while a sample's GPU reading is under way: the log line that sample read (the tail has moved
    past it) is kept without the GPU values, not lost, and the last read finds nothing newer."""
    lines = _log_lines()
    decode = next(line for line in lines if b"Decode batch." in line)

    class SlowGpus:
        available = True

        def sample(self):
            time.sleep(0.4)
            return {"gpu0_memory_used_bytes": 1.0}

    log = tmp_path / "server.log"
    log.write_bytes(decode)
    samples: list = []

    async def go():
        task = asyncio.create_task(
            metrics.tail_log_during(log, 0, samples, parse_line, interval_s=0.2, gpus=SlowGpus())
        )
        await asyncio.sleep(0.2)  # the first read at 0.1 s has taken the line; its GPU reading runs until 0.5 s
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())
    assert [(v, err) for _, v, err in samples] == [(parse_line(decode.decode()), None)]


def test_a_log_read_that_fails_is_a_sample_with_its_error(tmp_path):
    async def go():
        samples: list = []
        task = asyncio.create_task(
            metrics.tail_log_during(tmp_path / "absent.log", 0, samples, parse_line, interval_s=0.05)
        )
        while not samples:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return samples

    (_, values, err), *_ = asyncio.run(go())
    assert values == {} and err.startswith("FileNotFoundError: ")
