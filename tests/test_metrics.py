"""Metric definitions on hand-made records, the REQUESTS table, and Prometheus parsing."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sse_server import SSEServer, serve_app

from kvlab import metrics
from kvlab.client import RequestRecord
from kvlab.schema import REQUESTS, RUNS


def _record(index, t_send, chunk_times, n_out, *, status="ok", prompt=1000, cached=None, t0=0.0):
    t_first = chunk_times[0] if chunk_times else None
    t_last = chunk_times[-1] if chunk_times else None
    return RequestRecord(
        request_index=index, status=status, error=None if status == "ok" else "HTTP 500: boom",
        http_status=200 if status == "ok" else 500, prompt_tokens=prompt if status == "ok" else None,
        output_tokens=n_out, reasoning_tokens=None, cached_tokens=cached, chunks=len(chunk_times),
        t_send_s=t_send - t0, t_first_s=None if t_first is None else t_first - t0,
        t_last_s=None if t_last is None else t_last - t0,
        ttft_ms=metrics.ttft_ms(t_send, t_first), tpot_ms=metrics.tpot_ms(t_first, t_last, n_out),
        e2e_ms=metrics.e2e_ms(t_send, t_last), itl_max_ms=metrics.itl_max_ms(chunk_times),
        t_send=t_send, t_first=t_first, t_last=t_last, t_end=t_last or t_send, chunk_times=tuple(chunk_times),
        reasoning_chunks=0, t_first_answer=t_first, t_first_chunk=t_first, empty_chunks=0, requested_prompt_tokens=prompt, requested_output_tokens=n_out or 0,
        text=None, reasoning_text=None,
    )


def test_per_request_definitions_exact():
    # sent at 10.0, first text at 10.5, then 4 more chunks; server says 9 tokens (chunks carry 2 tokens)
    r = _record(0, 10.0, [10.5, 10.7, 10.9, 11.1, 11.3], 9)
    assert r.ttft_ms == pytest.approx(500.0)
    assert r.e2e_ms == pytest.approx(1300.0)
    assert r.tpot_ms == pytest.approx(800.0 / 8)  # tokens from usage, not chunks
    assert r.itl_max_ms == pytest.approx(200.0)
    assert metrics.chunk_gaps_ms([1.0, 1.5, 1.75]) == pytest.approx([500.0, 250.0])


def test_tpot_undefined_below_two_tokens_or_without_usage():
    assert metrics.tpot_ms(1.0, 1.0, 1) is None
    assert metrics.tpot_ms(1.0, 2.0, None) is None
    assert metrics.tpot_ms(None, 2.0, 5) is None
    assert metrics.tpot_ms(1.0, 2.0, 2) == pytest.approx(1000.0)
    assert metrics.itl_max_ms([1.0]) is None
    assert metrics.ttft_ms(1.0, None) is None and metrics.e2e_ms(None, 2.0) is None


def test_summarize_excludes_failures_from_latency_but_counts_them():
    recs = [
        _record(0, 0.0, [0.1, 0.2, 0.3], 3, cached=16),  # ttft 100, tpot 100, e2e 300
        _record(1, 0.0, [0.3, 0.4, 0.7], 3, cached=0),  # ttft 300, tpot 200, e2e 700
        _record(2, 0.0, [0.2], 1),  # ttft 200, tpot undefined, e2e 200
        _record(3, 0.0, [9.0, 9.5], 2, status="failed"),  # would skew every mean
    ]
    s = metrics.summarize(recs, batch_time_s=9.5)
    assert set(s) <= set(RUNS.names)
    assert s["ttft_mean_ms"] == pytest.approx(200.0)
    assert s["ttft_p99_ms"] == pytest.approx(200.0 + 0.98 * 100.0)  # numpy linear: 300 - (1-0.98)*100
    assert s["tpot_mean_ms"] == pytest.approx(150.0)
    assert s["e2e_mean_ms"] == pytest.approx(400.0)
    assert (s["requests_ok"], s["requests_failed"]) == (3, 1)
    assert s["served_prompt_tokens"] == 3000
    assert s["served_output_tokens"] == 3 + 3 + 1 + 2
    assert s["cached_prompt_tokens"] == 16
    assert s["batch_time_s"] == 9.5


def test_summarize_all_failed_and_no_usage_gives_nulls_not_zeros():
    recs = [dataclasses.replace(_record(i, 0.0, [], None, status="failed"), prompt_tokens=None) for i in range(3)]
    s = metrics.summarize(recs, batch_time_s=1.0)
    assert s["requests_ok"] == 0 and s["requests_failed"] == 3
    for k in ("ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "e2e_mean_ms",
              "served_prompt_tokens", "served_output_tokens", "cached_prompt_tokens"):
        assert s[k] is None, k


def test_request_rows_fit_schema():
    recs = [_record(0, 1.0, [1.5, 2.0], 2, t0=1.0), _record(1, 1.2, [], None, status="failed", t0=1.0)]
    df = metrics.request_rows(recs, "run-1")
    assert df.columns == REQUESTS.names
    assert df.height == 2
    row = df.row(0, named=True)
    assert row["run_id"] == "run-1" and row["t_send_s"] == 0.0 and row["t_first_s"] == pytest.approx(0.5)
    assert row["ttft_ms"] == pytest.approx(500.0) and row["tpot_ms"] == pytest.approx(500.0)
    assert df.row(1, named=True)["status"] == "failed"
    assert metrics.request_rows([], "r").columns == REQUESTS.names


def test_split_think():
    assert metrics.split_think("<think>plan it</think>The answer") == ("plan it", "The answer")
    assert metrics.split_think("plan it</think>answer") == ("plan it", "answer")  # template opened the tag
    assert metrics.split_think("  <think>still thinking") == ("still thinking", "")
    assert metrics.split_think("no tags here") == ("", "no tags here")


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
    after_text = (VLLM_METRICS.replace("} 8000.0", "} 16000.0")  # engine 0 prompt tokens and queries +8000
                  .replace("vllm:generation_tokens_total{engine=\"0\",model_name=\"/tmp/tiny\"} 128.0",
                           "vllm:generation_tokens_total{engine=\"0\",model_name=\"/tmp/tiny\"} 256.0"))
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
