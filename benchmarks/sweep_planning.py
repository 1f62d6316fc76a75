"""Sweep planning: server starts per shipped experiment (one per distinct server configuration) and the
start-up time that saves against starting a server for every run.

CPU experiments use each engine's start-up time measured on this machine (EngineServer start -> ready, with
the first server configuration of the CPU experiments that uses that engine: vLLM's CPU build and sglang-jax,
the tiny model); each server group is priced at its own engine's start. GPU experiments use an assumed
start-up time, labelled as such.

    .venv/bin/python -m benchmarks.sweep_planning [--quick] [--startup-s ENGINE=SECONDS ...]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from benchmarks.bench_tools import OUT_DIR, Row, host_note, print_table, write_result

from kvlab import plan
from kvlab.paths import EXPERIMENTS_DIR
from kvlab.experiment import EngineSpec, ExperimentSpec, expand

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


def startup_on_nodes(
    group_gpus: list[int], startup_s: float, nodes: int, gpus_per_node: int = GPUS_PER_NODE
) -> float | None:
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


def parse_startups(given: list[str], engines: set[str]) -> dict[str, float]:
    """``--startup-s`` values (ENGINE=SECONDS) as seconds by engine; every engine in ``engines`` must be given."""
    out = {}
    for item in given:
        name, _, value = item.partition("=")
        try:
            out[name] = float(value)
        except ValueError:
            out[name] = 0.0
        if not out[name] > 0:  # also refuses nan
            raise SystemExit(f"--startup-s {item!r}: expected ENGINE=SECONDS with SECONDS > 0, e.g. vllm=32")
    if missing := engines - out.keys():
        raise SystemExit(
            f"--startup-s: no start-up given for {', '.join(sorted(missing))} "
            f"(the CPU experiments use {', '.join(sorted(engines))})"
        )
    return out


def cpu_engines() -> dict[str, EngineSpec]:
    """Each engine of the shipped CPU experiments, with the first server configuration that uses it."""
    first: dict[str, EngineSpec] = {}
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        for run in expand(ExperimentSpec.load(path)):
            if run.on_cpu:
                first.setdefault(run.engine.name, run.engine)
    return first


def measure_cpu_startups() -> dict[str, float]:
    """One start -> ready per CPU engine (``cpu_engines``), each server stopped after; seconds by engine."""
    from kvlab.server import EngineServer
    from kvlab.tinymodel import ensure_tiny_model

    ensure_tiny_model()
    out = {}
    for name, engine in cpu_engines().items():
        engine = engine.model_copy(update={"served_model_name": f"kvlab-bench-{uuid.uuid4().hex[:8]}"})
        server = EngineServer(engine, OUT_DIR / f"sweep_planning-{name}.log")
        try:
            server.start()
            out[name] = server.wait_ready()
        finally:
            server.stop()
        print(f"  {name} CPU start -> ready: {out[name]:.1f} s", flush=True)
    return out


def plan_all(startup_s: dict[str, float]) -> list[dict]:
    """Per shipped experiment: its runs, server starts and the start-up time saved; a CPU group is priced at its
    engine's start in ``startup_s`` (seconds by engine name), a GPU one at the assumed start."""
    out = []
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        spec = ExperimentSpec.load(path)
        runs = expand(spec)
        groups = plan.by_server(runs)
        cpu = runs[0].on_cpu
        gpu_start = ASSUMED_GPU_STARTUP_S.get(spec.name, ASSUMED_GPU_STARTUP_DEFAULT_S)
        starts = [startup_s[g[0].engine.name] if cpu else gpu_start for _, g in groups]
        gpus = [g[0].engine.gpus for _, g in groups]
        engines = sorted({g[0].engine.name for _, g in groups})
        out.append(
            {
                "experiment": spec.name,
                "hardware": spec.hardware,
                "runs": len(runs),
                "server_starts": len(groups),
                "startup_s": {e: startup_s[e] for e in engines} if cpu else {e: gpu_start for e in engines},
                "startup_source": "measured (CPU, this machine)" if cpu else "assumed",
                "saved_s": sum((len(g) - 1) * start for (_, g), start in zip(groups, starts)),
                "group_gpus": gpus,
                "on_nodes_s": {} if cpu else {n: startup_on_nodes(gpus, gpu_start, n) for n in NODE_COUNTS},
            }
        )
    return out


def _starts_note(startup_s: dict[str, float]) -> str:
    return ", ".join(f"{e} {s:.0f} s" for e, s in startup_s.items())


def summarise(raw: dict) -> list[Row]:
    rows = []
    for e in raw["plans"]:
        saved = e["saved_s"]
        rows.append(
            Row(
                SECTION,
                f"{e['experiment']}: {e['runs']} runs -> {e['server_starts']} server starts",
                saved / 60,
                "min saved",
                note=f"runs beyond the first on each server × its engine's start-up ({_starts_note(e['startup_s'])}), "
                f"{e['startup_source']}; {e['hardware']}",
            )
        )
    for e in raw["plans"]:
        if not e["on_nodes_s"]:
            continue
        times = {int(n): s for n, s in e["on_nodes_s"].items()}
        if all(s is None for s in times.values()):
            rows.append(
                Row(
                    SECTION,
                    f"{e['experiment']} over a Ray cluster",
                    "refused",
                    "",
                    note=f"a server group needs {max(e['group_gpus'])} GPUs, more than one "
                    f"{GPUS_PER_NODE}-GPU node: kvlab sweep --ray refuses it before dispatch",
                )
            )
            continue
        rows.append(
            Row(
                SECTION,
                f"{e['experiment']}: start-up share on {', '.join(str(n) for n in times)} {GPUS_PER_NODE}-GPU nodes",
                " / ".join(f"{s / 60:.0f}" for s in times.values()),
                "min",
                note=f"{len(e['group_gpus'])} server groups of {', '.join(sorted({str(g) for g in e['group_gpus']}))} "
                f"GPUs, {max(e['startup_s'].values()) / 60:.0f} min assumed per start, side by side where GPUs allow "
                "(modelled; measured batches add to it)",
            )
        )
    kinds = (("measured", "CPU experiments (measured start-up)"), ("assumed", "GPU experiments (assumed start-up)"))
    for kind, label in kinds:
        plans = [e for e in raw["plans"] if (e["startup_source"] == "assumed") == (kind == "assumed")]
        if not plans:
            continue
        runs, starts = sum(e["runs"] for e in plans), sum(e["server_starts"] for e in plans)
        rows.append(
            Row(
                SECTION,
                f"{label}: {runs} runs -> {starts} starts",
                sum(e["saved_s"] for e in plans) / 60,
                "min saved",
                note=(
                    f"CPU start-up {_starts_note(raw['startup_s'])} ({raw['startup_from']})"
                    if kind == "measured"
                    else "B300 Kimi-K3: 15 min assumed; others 5 min assumed"
                )
                + "; retries add starts either way",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="accepted for symmetry; planning is already fast")
    parser.add_argument(
        "--startup-s",
        action="append",
        default=[],
        metavar="ENGINE=SECONDS",
        help="a CPU engine's start-up already measured on this machine, e.g. vllm=32 (repeat for each "
        "engine of the CPU experiments; otherwise all are measured now)",
    )
    args = parser.parse_args(argv)
    t = time.perf_counter()
    if args.startup_s:
        startup, source = parse_startups(args.startup_s, set(cpu_engines())), "given with --startup-s"
    else:
        startup, source = measure_cpu_startups(), "measured now"
    raw = {"host": host_note(), "startup_s": startup, "startup_from": source, "plans": plan_all(startup)}
    raw["wall_s"] = time.perf_counter() - t
    rows = summarise(raw)
    print_table(rows, title="Sweep planning: server starts and start-up time saved")
    print(f"wrote {write_result(NAME, rows, raw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
