"""Telemetry overhead on a real engine: does sampling /metrics during a run change the run's batch time and TTFT by
more than their run-to-run spread? (issue 23: "A benchmark shows that sampling telemetry during a run changes the
run's batch time and TTFT by less than its run-to-run spread.")

A real CPU server of each engine asked for (kvlab.server.EngineServer, the tiny local model: vLLM's CPU build as
benchmarks/engine_agreement.py runs it, PyTorch SGLang as the shipped CPU experiments run it; prefix cache off, so
no run can hit another's cache and no development endpoint is needed) serves the same fixed batch (8 requests x
1,000-token prompts as token IDs x ``--output-tokens`` output tokens, ignore_eos, temperature 0, all sent at once)
N times with telemetry sampling (kvlab.metrics.sample_during, as the runner samples: the adapter's telemetry series
every ``--interval`` seconds in the requests' event loop) and N times without, the two alternating (with first on
even repeats). The default 512 output tokens make a batch last several sampling intervals, so the sampler is
measured at work, not only its first sample. Per engine and arm: the median and the min-max range of the batch
time and of the batch's mean TTFT. The difference of the medians is **inside the spread** when it is smaller than
the range (max - min) of the arm without telemetry; the verdict says which.

    .venv/bin/python -m benchmarks.telemetry_overhead [--quick] [--repeats N] [--engine vllm sglang]
                                                      [--output-tokens N] [--interval S] [--no-pin]

It needs the engine environments (`make engines`) and takes a few minutes per engine (a server start, then 2 x N
batches).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
import uuid

from benchmarks.bench_tools import OUT_DIR, Row, host_note, print_table, split_cpus, write_result

from kvlab import metrics
from kvlab.client import run_requests
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.paths import EXPERIMENTS_DIR
from kvlab.server import EngineServer
from kvlab.experiment import EngineSpec, ExperimentSpec
from kvlab.tinymodel import ensure_tiny_model
from kvlab.workloads import fixed_batch

NAME = "telemetry_overhead"
SECTION = "telemetry overhead"
BATCH, PROMPT_TOKENS, OUTPUT_TOKENS = 8, 1000, 512
ARMS = ("without telemetry", "with telemetry")


def engine_spec(engine: str, tag: str, cpus: set[int] | None = None) -> EngineSpec:
    """The engine under test, prefix cache off, 64 MiB of KV (65,536 tokens in bfloat16): vLLM's CPU build as
    benchmarks/engine_agreement.py runs it (eager), or PyTorch SGLang as the shipped CPU experiments run it (their
    engine entry: its CPU flags and kvlab's compatibility fix)."""
    pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
    common = {
        "served_model_name": tag,
        "max_model_len": 2048,
        "kv_cache_bytes": 64 * 2**20,
        "prefix_caching": False,
        "startup_timeout_s": 300,
    }
    if engine == VLLM:
        return EngineSpec(
            name=VLLM,
            launch=[*pin, ".engines/vllm/bin/python"],
            model="data/models/tiny-llama",
            enforce_eager=True,
            **common,
        )
    base = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_long_context.yaml").engines[SGLANG]
    return base.model_copy(update={**common, "launch": [*pin, *base.launch]})


async def one_batch(server: EngineServer, model: str, prompts, telemetry: bool, interval_s: float) -> dict:
    """One fixed batch, with or without the runner's telemetry sampler beside it: batch time, mean TTFT, samples."""
    samples: list = []
    names = server.adapter.telemetry_names
    sampler = (
        asyncio.create_task(
            metrics.sample_during(server.base_url, names, samples, server.api_key, interval_s=interval_s)
        )
        if telemetry
        else None
    )
    try:
        batch = await run_requests(
            server.base_url, model, prompts, api_key=server.api_key, ignore_eos=True, temperature=0.0
        )
    finally:
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
    ttfts = [r.ttft_ms for r in batch.records if r.ttft_ms is not None]
    return {
        "batch_time_s": batch.batch_time_s,
        "ttft_mean_ms": statistics.fmean(ttfts) if ttfts else None,
        "failed": sum(r.status != "ok" for r in batch.records),
        "samples": len(samples),
        "samples_ok": sum(err is None for _, _, err in samples),
    }


def measure(engine: str, repeats: int, interval_s: float, output_tokens: int, pin: bool = True) -> dict:
    ensure_tiny_model()
    tag = f"kvlab-bench-{uuid.uuid4().hex[:8]}"
    engine_cpus, _ = split_cpus() if pin and shutil.which("taskset") else (None, None)
    raw: dict = {
        "engine": engine,
        "host": host_note(),
        "repeats": repeats,
        "interval_s": interval_s,
        "batch": [BATCH, PROMPT_TOKENS, output_tokens],
        "engine_cpus": sorted(engine_cpus or []),
        "runs": [],
    }
    server = EngineServer(engine_spec(engine, tag, engine_cpus), OUT_DIR / f"{NAME}-{engine}.log")
    try:
        server.start()
        raw["startup_s"] = server.wait_ready()
        raw["engine_version"] = server.version()
        print(f"  {engine_label(engine)} ready after {raw['startup_s']:.1f} s", flush=True)
        warm = fixed_batch.prompts(2, 32, 4, 512, seed=999)
        asyncio.run(one_batch(server, tag, warm, False, interval_s))
        # the same batch every time; no prefix cache, so no run reuses another's KV
        prompts = fixed_batch.prompts(BATCH, PROMPT_TOKENS, output_tokens, 512, seed=0)
        for rep in range(repeats):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for telemetry in order:
                r = asyncio.run(one_batch(server, tag, prompts, telemetry, interval_s))
                r.update(arm=ARMS[telemetry], repeat=rep)
                raw["runs"].append(r)
                print(
                    f"  rep {rep} {r['arm']:<18} batch {r['batch_time_s']:.3f} s  TTFT {r['ttft_mean_ms']:.1f} ms  "
                    f"samples {r['samples_ok']}/{r['samples']}  failed {r['failed']}",
                    flush=True,
                )
    finally:
        server.stop()
    return raw


def arm_stats(runs: list[dict], key: str) -> tuple[float, float, float]:
    """(median, min, max) of ``key`` over ``runs``."""
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals), min(vals), max(vals)


def verdict(without: tuple[float, float, float], with_: tuple[float, float, float]) -> tuple[float, bool]:
    """The difference of the medians (with - without) and whether it is inside the spread: smaller in size than the
    range (max - min) of the runs without telemetry."""
    diff = with_[0] - without[0]
    return diff, abs(diff) < without[2] - without[1]


def summarise(raw: dict) -> list[Row]:
    """One engine's rows: batch time and mean TTFT, with − without telemetry, and the conditions."""
    by_arm = {a: [r for r in raw["runs"] if r["arm"] == a] for a in ARMS}
    rows, name = [], engine_label(raw.get("engine", VLLM))
    for key, unit, what in (("batch_time_s", "s", "batch time"), ("ttft_mean_ms", "ms", "mean TTFT of the batch")):
        off, on = (arm_stats(by_arm[a], key) for a in ARMS)
        diff, inside = verdict(off, on)
        rows.append(
            Row(
                SECTION,
                f"{name}, {what}: with − without telemetry (medians)",
                diff,
                unit,
                "inside the run-to-run spread",
                inside,
                f"without: median {off[0]:.4g} (range {off[1]:.4g}–{off[2]:.4g}); with: median {on[0]:.4g} "
                f"(range {on[1]:.4g}–{on[2]:.4g}); spread = max − min of the runs without",
            )
        )
    samples = [r["samples_ok"] for r in by_arm[ARMS[1]]]
    failed = sum(r["failed"] for r in raw["runs"])
    batch, prompt, output = raw.get("batch", [BATCH, PROMPT_TOKENS, 64])
    rows.append(
        Row(
            SECTION,
            f"{name}, conditions",
            f"{batch} × {prompt}+{output} tokens",
            note=f"{name} {raw.get('engine_version')}, tiny model, prefix cache off; {raw['repeats']} "
            f"alternating repeats per arm; telemetry every {raw['interval_s']:g} s ({min(samples)}–"
            f"{max(samples)} samples answered per batch); failed requests {failed}; {raw['host']}",
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats per arm instead of 10")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--interval",
        type=float,
        default=metrics.TELEMETRY_INTERVAL_S,
        help=f"seconds between telemetry samples (the runner's: {metrics.TELEMETRY_INTERVAL_S:g})",
    )
    parser.add_argument("--no-pin", action="store_true", help="let the engine share every core with the client")
    parser.add_argument(
        "--engine",
        nargs="+",
        choices=[VLLM, SGLANG],
        default=[VLLM, SGLANG],
        help="the engines to measure, one server each (default: both)",
    )
    parser.add_argument(
        "--output-tokens",
        type=int,
        default=OUTPUT_TOKENS,
        help=f"output tokens per request (default {OUTPUT_TOKENS}: a batch of several sampling intervals)",
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 10)
    t = time.perf_counter()
    raws = [measure(e, repeats, args.interval, args.output_tokens, pin=not args.no_pin) for e in args.engine]
    wall = time.perf_counter() - t
    rows = [row for raw in raws for row in summarise(raw)]
    print_table(rows, title=f"Telemetry overhead on real engines ({wall:.0f} s)")
    print(f"wrote {write_result(NAME, rows, {'wall_s': wall, 'engines': raws})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
