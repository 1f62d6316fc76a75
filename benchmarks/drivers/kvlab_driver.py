"""kvlab's client as a benchmark driver process (workbook venv): JSON job lines in, result lines out.

Each job is timed inside this process only: wall seconds and this process's CPU seconds
(``time.process_time``: user + system of every thread) around ``asyncio.run(run_requests(...))``,
so the figures include session set-up and building the records, as a caller pays them.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import sys
import time

from benchmarks.bench_tools import cpu_usage as _usage, driver_main, percentile

from kvlab.client import chunk_gaps_ms, summarize
from kvlab.workloads import Prompt


def _load_client():
    """kvlab.client, or the file KVLAB_BENCH_CLIENT names (an earlier revision, for before/after figures)."""
    path = os.environ.get("KVLAB_BENCH_CLIENT")
    if not path:
        from kvlab import client as mod

        return mod
    import importlib.util

    spec = importlib.util.spec_from_file_location("kvlab_client_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while building the class
    spec.loader.exec_module(mod)
    return mod


client = _load_client()
#: Whether the client under test has the timing hook (a baseline revision from before it has none: no TTFT error).
_HAS_HOOK = "on_read" in inspect.signature(client.run_requests).parameters


def _prompts(job: dict) -> list[Prompt]:
    if "prompts" in job:
        return [
            Prompt(index=i, max_tokens=job["max_tokens"], token_ids=tuple(ids)) for i, ids in enumerate(job["prompts"])
        ]
    ids = tuple(range(16, 16 + job.get("prompt_tokens", 16)))
    return [Prompt(index=i, max_tokens=job["chunks"], token_ids=ids) for i in range(job["requests"])]


_T_SERVER = re.compile(rb'"t_server":([-+0-9.eE]+)[,}]')


class FirstChunkStamps:
    """The server's send time of each request's first chunk, read through the client's timing hook
    (``run_requests(on_read=...)``): one extra call per network read, after the client has taken the
    read's timestamp. Used only in TTFT-error jobs, never in the throughput jobs. A stamp split
    between two reads is read whole (the end of the earlier read is kept until the stamp is found).
    """

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self._tail: dict[int, bytes] = {}

    def __call__(self, index: int, data: bytes, t: float) -> None:
        if index in self.first:
            return
        seen = self._tail.pop(index, b"") + data
        m = _T_SERVER.search(seen)
        if m:
            self.first[index] = float(m.group(1))
        else:
            self._tail[index] = seen[-64:]


def handle(job: dict) -> dict:
    prompts = _prompts(job)
    spy = FirstChunkStamps() if job.get("spy") else None
    conc = job.get("concurrency")
    kw = {"extra_body": {"fixture": job["fixture"]}} if job.get("fixture") else {}
    if spy is not None and _HAS_HOOK:
        kw["on_read"] = spy
    call = client.run_requests(
        job["url"], job.get("model", "fixture"), prompts, concurrency=conc, ignore_eos=True, temperature=0.0, **kw
    )
    u0, w0 = _usage(), time.perf_counter()
    batch = asyncio.run(call)
    u1, w1 = _usage(), time.perf_counter()
    recs = batch.records
    out = {
        "client": "kvlab",
        "wall_s": w1 - w0,
        "cpu_s": u1[0] - u0[0],
        "involuntary_switches": u1[1] - u0[1],
        "chunks": sum(r.chunks + r.empty_chunks for r in recs),
        "token_chunks": sum(r.chunks for r in recs),
        "failed": sum(r.status != "ok" for r in recs),
        "errors": sorted({r.error for r in recs if r.error})[:3],
        "batch_time_s": batch.batch_time_s,
    }
    if spy:
        errs = []
        for r in recs:
            ts = spy.first.get(r.request_index)
            if ts is not None and r.t_first_chunk is not None:
                errs.append((r.t_first_chunk - ts) * 1e3)
        out["ttft_error_ms"] = errs
    if job.get("per_request"):
        summary = summarize(recs, batch.batch_time_s)
        out.update(summary)
        out["ttft_first_chunk_mean_ms"] = _mean([(r.t_first_chunk - r.t_send) * 1e3 for r in recs if r.t_first_chunk])
        # vLLM's definitions from kvlab's own timestamps: TTFT at the first chunk with a choice even
        # when its text is empty; TPOT from that chunk to the last chunk with a choice, for which
        # kvlab's stream end stands in (kvlab keeps no time for trailing empty-text chunks; the
        # usage chunk and [DONE] follow the last token chunk at once)
        out["tpot_vllm_def_mean_ms"] = _mean(
            [
                (r.t_end - r.t_first_chunk) * 1e3 / (r.output_tokens - 1)
                for r in recs
                if r.t_first_chunk and r.output_tokens and r.output_tokens > 1
            ]
        )
        gaps = [g for r in recs for g in chunk_gaps_ms(r.chunk_times)]
        out["itl_gaps_under_0_1_ms_share"] = sum(g < 0.1 for g in gaps) / len(gaps) if gaps else None
        out["first_text_after_first_chunk_ms"] = _mean(
            [(r.t_first - r.t_first_chunk) * 1e3 for r in recs if r.t_first and r.t_first_chunk]
        )
        out["empty_chunks"] = sum(r.empty_chunks for r in recs)
        out["send_spread_ms"] = (max(r.t_send for r in recs) - min(r.t_send for r in recs)) * 1e3
        out["output_tokens"] = [r.output_tokens for r in recs]
        out["itl_chunk_p50_ms"] = percentile(gaps, 50)
    return out


def _mean(values):
    return sum(values) / len(values) if values else None


if __name__ == "__main__":
    driver_main(handle)
