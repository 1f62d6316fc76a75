"""Agreement of kvlab's trace replay with the peers' (issue 54, item 7): the shipped Mooncake slice
(data/traces/mooncake_conversation_40.scaled64.jsonl: lengths and 512-token blocks divided by 64) replayed on its own
timestamps against one vLLM CPU server, by kvlab (``workload.kind: trace``, 8-token blocks, token ids) and by
`vllm bench serve --dataset-name timed_trace` (the same file, ``--timed-trace-chunk-hash-size 8``, timestamps in ms
times ``--timed-trace-sec-multiplier 0.001``, token-id prompts, ``--ignore-eos``): output throughput, TTFT and TPOT
percentiles and prompt tokens, each side's median over the repeats and their ratio. Both replay the same schedule,
lengths and shared blocks; the blocks' token ids differ (each side draws its own), which a prefix cache cannot see
(the server runs with it off).

Then the length difference SGLang's `mooncake` loader introduces, from its own code in the SGLang environment
(sglang.benchmark.datasets.mooncake.get_mooncake_request_over_time, one round, no wait): each hash id becomes the
text "{id}" + 128 x "hi", so its prompt length follows the number of ids and the tokenizer, not input_length;
counted with kvlab's tiny model's tokenizer on the unscaled slice.

    .venv/bin/python -m benchmarks.trace_agreement [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.bench_tools import OUT_DIR, ROOT, Row, host_note, print_table, write_result
from benchmarks.peer_agreement import MODEL, PEER_ENV, kvlab_experiment, peer_program
from benchmarks.telemetry_overhead import engine_spec

NAME = "trace_agreement"
SECTION = "trace agreement"
SLICE = "data/traces/mooncake_conversation_40.jsonl"
SCALED = "data/traces/mooncake_conversation_40.scaled64.jsonl"
#: figure -> (label, unit, `vllm bench serve`'s result field)
FIGURES = {
    "output_tokens_per_s": ("output throughput", "tok/s", "output_throughput"),
    "ttft_p50_ms": ("TTFT p50", "ms", "median_ttft_ms"),
    "ttft_p90_ms": ("TTFT p90", "ms", "p90_ttft_ms"),
    "ttft_p99_ms": ("TTFT p99", "ms", "p99_ttft_ms"),
    "tpot_p50_ms": ("TPOT p50", "ms", "median_tpot_ms"),
    "tpot_p90_ms": ("TPOT p90", "ms", "p90_tpot_ms"),
    "input_tokens": ("prompt tokens served", "tokens", "total_input_tokens"),
}
#: kvlab's replay: the scaled file as it stands (block 512 / 64 = 8, no further scaling), on its timestamps
WORKLOAD = {"kind": "trace", "trace_file": SCALED, "block_size": 8, "batch_size": 40, "ignore_eos": True}


def kvlab_side(url: str, tag: str, seed: int) -> dict:
    """kvlab's replay of the slice against the running server, as a user sweeps it: a one-run experiment
    (benchmarks.peer_agreement.kvlab_experiment) swept by kvlab.runner, its stored RUNS row's figures."""
    import yaml

    from kvlab import runner, store
    from kvlab.campaign import Campaign
    from kvlab.experiment import ExperimentSpec
    from kvlab.schema import run_rates

    workload = WORKLOAD | {"seed": seed, "temperature": 0.0}
    with tempfile.TemporaryDirectory(prefix="kvlab-trace-") as tmp:
        path = Path(tmp) / "agreement.yaml"
        path.write_text(yaml.safe_dump(kvlab_experiment("vllm", url, tag, workload, telemetry=False)))
        res = Campaign(ExperimentSpec.load(path), Path(tmp) / "data").execute(runner.LocalExecutor())
        row = run_rates(store.load_runs(Path(tmp) / "data")).row(0, named=True)
    keys = {k: k for k in FIGURES} | {"input_tokens": "served_prompt_tokens"}
    return {k: row.get(col) for k, col in keys.items()} | {"completed": row.get("requests_ok"), "ok": res.ok == 1}


def vllm_side(url: str, tag: str, seed: int) -> dict:
    """`vllm bench serve --dataset-name timed_trace` on the same file against the same server (its saved result)."""
    with tempfile.TemporaryDirectory(prefix="kvlab-trace-") as tmp:
        argv = [*peer_program("vllm"), "--backend", "vllm", "--base-url", url]  # `vllm bench serve`'s own main
        argv += ["--model", MODEL, "--served-model-name", tag, "--tokenizer", MODEL, "--seed", str(seed)]
        argv += ["--dataset-name", "timed_trace", "--dataset-path", SCALED, "--num-prompts", "40"]
        argv += ["--timed-trace-chunk-hash-size", "8", "--timed-trace-sec-multiplier", "0.001", "--temperature", "0"]
        argv += ["--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,90,99", "--disable-tqdm"]
        argv += ["--ignore-eos", "--save-result", "--result-dir", tmp, "--result-filename", "r.json"]
        env = {**__import__("os").environ, **PEER_ENV}
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"vllm bench serve exited {done.returncode}: {done.stderr[-2000:]}")
        result = json.loads((Path(tmp) / "r.json").read_text())
    return {k: result.get(field) for k, (_, _, field) in FIGURES.items()} | {"completed": result.get("completed")}


def sglang_lengths() -> list[int]:
    """Each record's prompt length as SGLang's `mooncake` loader builds it, by its own code in its environment,
    counted with kvlab's tiny model's tokenizer (its chat template applied, as the loader does)."""
    code = (
        "import asyncio, json, sys\n"
        "from transformers import AutoTokenizer\n"
        "from sglang.benchmark.datasets.mooncake import get_mooncake_request_over_time as g\n"
        f"tok = AutoTokenizer.from_pretrained({MODEL!r})\n"
        f"recs = [json.loads(x) for x in open({SLICE!r}) if x.strip()]\n"
        "async def go():\n"
        "    return [row.prompt_len async for row in g(recs, tok, 0.0, 1)]\n"
        "print(json.dumps(asyncio.run(go())))\n"
    )
    env = {**__import__("os").environ, **PEER_ENV}
    out = subprocess.run(
        [str(ROOT / ".engines/sglang/bin/python"), "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"SGLang's loader failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(repeats: int) -> dict:
    from kvlab.server import EngineServer
    from kvlab.tinymodel import ensure_tiny_model
    from kvlab.workloads import trace

    ensure_tiny_model()
    raw: dict = {"host": host_note(), "repeats": repeats, "started_at": time.strftime("%Y-%m-%d %H:%M"), "runs": []}
    tag = f"kvlab-bench-{uuid.uuid4().hex[:8]}"
    server = EngineServer(engine_spec("vllm", tag), OUT_DIR / f"{NAME}-vllm.log")
    try:
        server.start()
        raw["startup_s"] = server.wait_ready()
        raw["engine_version"] = server.version()
        for i in range(repeats):  # alternating, so a drift in the shared machine's load reaches both sides
            raw["runs"].append(
                {"kvlab": kvlab_side(server.base_url, tag, i), "vllm": vllm_side(server.base_url, tag, i)}
            )
    finally:
        server.stop()
    raw["trace_input_lengths"] = [r.input_length for r in trace.read_trace(SLICE)]
    raw["sglang_lengths"] = sglang_lengths()
    return raw


def summarise(raw: dict) -> list[Row]:
    rows = []
    for key, (label, unit, _) in FIGURES.items():
        mine = statistics.median(r["kvlab"][key] for r in raw["runs"])
        peer = statistics.median(r["vllm"][key] for r in raw["runs"])
        note = f"vllm bench serve {peer:.4g}; ratio {mine / peer:.3f}" if peer else "vllm bench serve: none"
        rows.append(Row(SECTION, f"{label}, kvlab (median of {raw['repeats']})", mine, unit, note=note))
    want, sg = raw["trace_input_lengths"], raw["sglang_lengths"]
    ratios = sorted(s / w for s, w in zip(sg, want, strict=True))
    note = f"{sum(sg):,} tokens for the trace's {sum(want):,}; per request {ratios[0]:.2f}-{ratios[-1]:.2f}x"
    rows.append(
        Row(SECTION, "SGLang mooncake loader: prompt tokens / input_length", sum(sg) / sum(want), "", note=note)
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one repeat (make bench QUICK=1)")
    args = p.parse_args(argv)
    raw = measure(1 if args.quick else args.repeats)
    write_result(NAME, [], raw)  # the measurements kept whatever the summary does
    rows = summarise(raw)
    print_table(rows, f"{SECTION} ({raw['host']})")
    write_result(NAME, rows, raw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
