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
        cpu = "cpu" in spec.hardware.lower()
        per_start = startup_s if cpu else ASSUMED_GPU_STARTUP_S.get(spec.name, ASSUMED_GPU_STARTUP_DEFAULT_S)
        out.append({
            "experiment": spec.name, "hardware": spec.hardware, "runs": len(runs), "server_starts": len(groups),
            "startup_s": per_start, "startup_source": "measured (vLLM CPU, this machine)" if cpu else "assumed",
            "saved_s": (len(runs) - len(groups)) * per_start,
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
