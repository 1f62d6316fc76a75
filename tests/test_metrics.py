"""Prometheus /metrics: parsing a vLLM-shaped page, counter deltas, and scraping a server."""

from __future__ import annotations

import asyncio

from kvlab.testing.sse_fixture import SSEServer, serve_app

from kvlab import metrics


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


def test_sample_during_keeps_every_sample_and_the_error_of_a_failed_one():
    """The telemetry sampler reads only the wanted series, on a fixed interval, until cancelled; a failed answer
    is a sample with its error (never a silent 0); a series the server lacks is None."""
    from kvlab.testing.sse_fixture import FixtureConfig

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
    gaps = [b[0] - a[0] for a, b in zip(ok, ok[1:])]
    assert all(0.05 < g < 0.2 for g in gaps)  # on the interval's grid
    with SSEServer(FixtureConfig(metrics_fault_rate=1.0)) as bad:
        failed = asyncio.run(go(bad.url))
    # HTTP 500: a sample with its error; garbage holding none of the wanted series: each of them None, never 0
    assert any(err == "RuntimeError: HTTP 500" for _, _, err in failed)
    assert all((v == {} and err) or (err is None and set(v.values()) == {None}) for _, v, err in failed)
