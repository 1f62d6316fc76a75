"""Sweep planning: server starts per shipped experiment (one per distinct server configuration) and the
start-up time that saves against starting a server for every run.

CPU experiments use a vLLM CPU start-up time measured on this machine (EngineServer start -> /health
200, tiny model, --enforce-eager); GPU experiments use an assumed start-up time, labelled as such.

    .venv/bin/python -m benchmarks.sweep_planning [--quick] [--startup-s SECONDS]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from benchmarks.bench_tools import OUT_DIR, Row, host_note, print_table, write_result

from kvlab import plan
from kvlab.paths import EXPERIMENTS_DIR
from kvlab.spec import ExperimentSpec, expand

NAME = "sweep_planning"
SECTION = "3 sweep planning"

#: Assumed GPU start-up (launch to ready), seconds. Not measured: no GPU here.
#: Kimi-K3 (2.8T parameters) on 8x B300: reading ~1.4-2.8 TB of weights at a few GB/s, then
#: compilation and CUDA-graph capture: 10-20 minutes; 15 taken. Other GPU experiments (8B-70B
#: class models, or R1 over 16 GPUs): 5 minutes taken.
ASSUMED_GPU_STARTUP_S = {"b300_long_context": 900.0}
ASSUMED_GPU_STARTUP_DEFAULT_S = 300.0

#: A Ray campaign's nodes (kvlab sweep --ray): GPUs per node and the node counts planned for.
GPUS_PER_NODE = 8
NODE_COUNTS = (1, 2, 4)


def startup_on_nodes(group_gpus: list[int], startup_s: float, nodes: int,
                     gpus_per_node: int = GPUS_PER_NODE) -> float | None:
    """Start-up share of a Ray campaign: every server group (``group_gpus``: the GPUs it asks for, tp × dp) is
    submitted at once, and whenever GPUs free up each waiting group that fits on one node starts there, in
    submission order (as Ray's scheduler places tasks that fit), holding its GPUs for one start-up. The measured
    batches add to this. None when a group needs more GPUs than one node has (kvlab refuses it)."""
    if any(g > gpus_per_node for g in group_gpus):
        return None
    free = [gpus_per_node] * nodes
    waiting, running, now = list(group_gpus), [], 0.0  # running: (ends at, node, GPUs)
    while waiting or running:
        for g in list(waiting):
            node = next((n for n in range(nodes) if free[n] >= g), None)
            if node is not None:
                free[node] -= g
                running.append((now + startup_s, node, g))
                waiting.remove(g)
        now = min(end for end, _, _ in running)  # the next start-up to finish frees its GPUs
        for item in [r for r in running if r[0] == now]:
            running.remove(item)
            free[item[1]] += item[2]
    return now


def measure_cpu_startup() -> float:
    """One vLLM CPU start -> ready with the engine-agreement benchmark's spec; the server is stopped after."""
    from benchmarks.engine_agreement import engine_spec

    from kvlab.server import EngineServer
    from kvlab.tinymodel import ensure_tiny_model

    ensure_tiny_model()
    server = EngineServer(engine_spec(f"kvlab-bench-{uuid.uuid4().hex[:8]}"), OUT_DIR / "sweep_planning-vllm.log")
    try:
        server.start()
        return server.wait_ready()
    finally:
        server.stop()


def plan_all(startup_s: float) -> list[dict]:
    out = []
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        spec = ExperimentSpec.load(path)
        runs = expand(spec)
        groups = plan.by_server(runs)
        cpu = runs[0].on_cpu
        per_start = startup_s if cpu else ASSUMED_GPU_STARTUP_S.get(spec.name, ASSUMED_GPU_STARTUP_DEFAULT_S)
        gpus = [g[0].engine.gpus for _, g in groups]
        out.append({
            "experiment": spec.name, "hardware": spec.hardware, "runs": len(runs), "server_starts": len(groups),
            "startup_s": per_start, "startup_source": "measured (vLLM CPU, this machine)" if cpu else "assumed",
            "saved_s": (len(runs) - len(groups)) * per_start,
            "group_gpus": gpus,
            "on_nodes_s": {} if cpu else {n: startup_on_nodes(gpus, per_start, n) for n in NODE_COUNTS},
        })
    return out


def summarise(raw: dict) -> list[Row]:
    rows = []
    for e in raw["plans"]:
        saved = e["saved_s"]
        rows.append(Row(
            SECTION, f"{e['experiment']}: {e['runs']} runs -> {e['server_starts']} server starts",
            saved / 60, "min saved",
            note=f"({e['runs']} - {e['server_starts']}) × {e['startup_s']:.0f} s start-up, {e['startup_source']}; "
                 f"{e['hardware']}",
        ))
    for e in raw["plans"]:
        if not e["on_nodes_s"]:
            continue
        times = {int(n): s for n, s in e["on_nodes_s"].items()}
        if all(s is None for s in times.values()):
            rows.append(Row(SECTION, f"{e['experiment']} over a Ray cluster", "refused", "",
                            note=f"a server group needs {max(e['group_gpus'])} GPUs, more than one "
                                 f"{GPUS_PER_NODE}-GPU node: kvlab sweep --ray refuses it before dispatch"))
            continue
        rows.append(Row(
            SECTION, f"{e['experiment']}: start-up share on {', '.join(str(n) for n in times)} "
                     f"{GPUS_PER_NODE}-GPU nodes", " / ".join(f"{s / 60:.0f}" for s in times.values()), "min",
            note=f"{len(e['group_gpus'])} server groups of {', '.join(sorted({str(g) for g in e['group_gpus']}))} "
                 f"GPUs, {e['startup_s'] / 60:.0f} min assumed per start, side by side where GPUs allow "
                 "(modelled; measured batches add to it)"))
    kinds = (("measured", "CPU experiments (measured start-up)"), ("assumed", "GPU experiments (assumed start-up)"))
    for kind, label in kinds:
        plans = [e for e in raw["plans"] if (e["startup_source"] == "assumed") == (kind == "assumed")]
        if not plans:
            continue
        runs, starts = sum(e["runs"] for e in plans), sum(e["server_starts"] for e in plans)
        rows.append(Row(SECTION, f"{label}: {runs} runs -> {starts} starts", sum(e["saved_s"] for e in plans) / 60,
                        "min saved",
                        note=(f"vLLM CPU start-up {raw['startup_s']:.1f} s ({raw['startup_from']})"
                              if kind == "measured" else "B300 Kimi-K3: 15 min assumed; others 5 min assumed")
                        + "; retries add starts either way"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="accepted for symmetry; planning is already fast")
    parser.add_argument("--startup-s", type=float, default=None,
                        help="vLLM CPU start-up already measured on this machine (otherwise measured now)")
    args = parser.parse_args(argv)
    t = time.perf_counter()
    if args.startup_s is None:
        startup, source = measure_cpu_startup(), "measured now"
        print(f"  vLLM CPU start -> ready: {startup:.1f} s", flush=True)
    else:
        startup, source = args.startup_s, "given with --startup-s"
    raw = {"host": host_note(), "startup_s": startup, "startup_from": source, "plans": plan_all(startup)}
    raw["wall_s"] = time.perf_counter() - t
    rows = summarise(raw)
    print_table(rows, title="Sweep planning: server starts and start-up time saved")
    print(f"wrote {write_result(NAME, rows, raw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
