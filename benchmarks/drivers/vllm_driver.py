"""vLLM's own benchmark client as a driver process (engine venv): JSON job lines in, result lines out.

Runs ``vllm.benchmarks.lib.endpoint_request_func.async_request_openai_completions`` (the request
function ``vllm bench serve`` uses for the completions API) with the session and concurrency
limit ``vllm.benchmarks.serve.benchmark`` sets up, and for engine jobs vLLM's own
``calculate_metrics``. Timed like the kvlab driver: wall and ``time.process_time`` around
``asyncio.run``. Must not import kvlab (the engine venv need not have it).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time

import aiohttp
from vllm.benchmarks.lib import endpoint_request_func as erf
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions

from benchmarks.bench_tools import cpu_usage as _usage, driver_main

_first_line: contextvars.ContextVar[dict | None] = contextvars.ContextVar("first_line", default=None)


class _JsonSpy:
    """Stands in for the module's ``json``: records the first parsed message of the current request.

    Used only in TTFT-error jobs: vLLM takes its token timestamp after ``json.loads`` of the message.
    """

    def __getattr__(self, name):
        return getattr(json, name)

    @staticmethod
    def loads(s, *a, **kw):
        obj = json.loads(s, *a, **kw)
        box = _first_line.get()
        if box is not None and "t_server" not in box and isinstance(obj, dict) and obj.get("choices"):
            box["t_server"] = obj.get("t_server")
        return obj


def _inputs(job: dict) -> list[RequestFuncInput]:
    url = job["url"].rstrip("/") + "/v1/completions"
    model = job.get("model", "fixture")
    if "prompts" in job:
        prompts, out_len = job["prompts"], job["max_tokens"]
    else:
        prompts, out_len = [list(range(16, 16 + job.get("prompt_tokens", 16)))] * job["requests"], job["chunks"]
    extra = {"temperature": 0.0, **({"fixture": job["fixture"]} if job.get("fixture") else {})}
    return [
        RequestFuncInput(
            prompt=list(p),
            api_url=url,
            prompt_len=len(p),
            output_len=out_len,
            model=model,
            ignore_eos=True,
            extra_body=extra,
        )
        for p in prompts
    ]


async def _bench(inputs: list[RequestFuncInput], concurrency: int | None, spy: bool, trust_env: bool = True):
    # as vllm.benchmarks.serve.benchmark builds them
    connector = aiohttp.TCPConnector(
        limit=concurrency or 0,
        limit_per_host=concurrency or 0,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
        ssl=False,
    )
    session = aiohttp.ClientSession(
        connector=connector, trust_env=trust_env, timeout=aiohttp.ClientTimeout(total=6 * 3600)
    )
    semaphore = asyncio.Semaphore(concurrency) if concurrency else None
    boxes: list[dict] = []

    async def limited(inp):
        if spy:
            box: dict = {}
            boxes.append(box)
            _first_line.set(box)
        if semaphore is None:
            out = await async_request_openai_completions(request_func_input=inp, session=session)
        else:
            async with semaphore:
                out = await async_request_openai_completions(request_func_input=inp, session=session)
        return out, (box if spy else None)

    start = time.perf_counter()
    tasks = [asyncio.create_task(limited(inp)) for inp in inputs]
    results = await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    await session.close()
    return results, duration


def handle(job: dict) -> dict:
    inputs = _inputs(job)
    spy = bool(job.get("spy"))
    saved = erf.json
    if spy:
        erf.json = _JsonSpy()
    try:
        u0, w0 = _usage(), time.perf_counter()
        results, duration = asyncio.run(_bench(inputs, job.get("concurrency"), spy, job.get("trust_env", True)))
        u1, w1 = _usage(), time.perf_counter()
    finally:
        erf.json = saved
    outs = [o for o, _ in results]
    ok = [o for o in outs if o.success]
    out = {
        "client": "vllm",
        "wall_s": w1 - w0,
        "cpu_s": u1[0] - u0[0],
        "involuntary_switches": u1[1] - u0[1],
        "chunks": sum(1 + len(o.itl) for o in ok),
        "failed": len(outs) - len(ok),
        "errors": sorted({o.error[-300:] for o in outs if o.error})[:3],
        "benchmark_duration_s": duration,
    }
    if ok:
        out["first_send_to_last_chunk_s"] = max(o.start_time + o.latency for o in ok) - min(o.start_time for o in ok)
    if spy:
        out["ttft_error_ms"] = [
            (o.start_time + o.ttft - box["t_server"]) * 1e3
            for o, box in results
            if o.success and box and box.get("t_server") is not None
        ]
    if job.get("per_request"):
        from vllm.benchmarks.serve import calculate_metrics

        m, _ = calculate_metrics(
            input_requests=[],
            outputs=outs,
            dur_s=duration,
            tokenizer=None,
            selected_percentiles=[50, 99],
            goodput_config_dict={},
        )
        out.update(
            {
                "ttft_mean_ms": m.mean_ttft_ms,
                "tpot_mean_ms": m.mean_tpot_ms,
                "itl_mean_ms": m.mean_itl_ms,
                "itl_median_ms": m.median_itl_ms,
                "e2el_mean_ms": m.mean_e2el_ms,
                "completed": m.completed,
                "total_output": m.total_output,
                "output_tokens": [o.output_tokens for o in outs],
                "send_spread_ms": (max(o.start_time for o in outs) - min(o.start_time for o in outs)) * 1e3,
            }
        )
    return out


if __name__ == "__main__":
    driver_main(handle)
