"""A sweep over a Ray cluster against the same experiment swept on this host: wall time, server starts, runs per
node, and whether both result stores hold the same runs, keys and files.

A local Ray cluster stands for the nodes (``bench_tools.ray_local_cluster``): a head that runs nothing and two
nodes with one CPU and one ``kvlab_node`` each, so one server group runs per node at a time. The experiment has
two server groups of real vLLM CPU servers serving the tiny model, each engine pinned to its own core
(``taskset``, where the machine has one to spare), so that each group has a core as it would a node, in both
sweeps: the local sweep runs the groups one after the other, the Ray sweep side by side. The runner and Ray's
own processes are not pinned. The cluster's own start is timed apart and not counted in the Ray sweep's time.

    .venv/bin/python -m benchmarks.cluster_sweep [--quick]

Needs Ray (``pip install 'kvlab[cluster]'``; ``make bench`` installs it); without it one row says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import yaml

from benchmarks.bench_tools import RAY_NODE_RESOURCE, Row, host_note, print_table, ray_local_cluster, write_result
from benchmarks.engine_agreement import engine_spec
from kvlab import runner, store
from kvlab.campaign import Campaign
from kvlab.experiment import ExperimentSpec
from kvlab.tinymodel import ensure_tiny_model

NAME = "cluster_sweep"
SECTION = "6 Ray cluster sweep"
EXPERIMENT = "ray_bench"
NODES = 2


def experiment(folder: Path, tag: str, repeats: int) -> Path:
    """Two server groups (each engine on its own core) of ``repeats`` runs each: 2 requests of 256 tokens, on the
    engine-agreement benchmark's vLLM spec."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    launches = [engine_spec(tag, {c}).launch for c in cores] if len(cores) == 2 and shutil.which("taskset") else None
    spec = {
        "name": EXPERIMENT,
        "hardware": "CPU (benchmark)",
        "device": "cpu",
        "scale_factor": 1,
        "engines": {"vllm": engine_spec(tag).model_dump(mode="json", exclude_defaults=True)},
        "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 256, "output_tokens": 32},
        "matrix": {"engine.launch": launches} if launches else {"engine.prefix_caching": [True, False]},
        "repeats": repeats,
        "warmup": True,
        "retry": {"max_attempts": 1, "retry_on": []},
    }
    path = folder / f"{EXPERIMENT}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def folders(data_dir: Path) -> dict[str, list[str]]:
    """Run key -> the file names in its folder."""
    exp = data_dir / "runs" / EXPERIMENT
    return {k: sorted(f.name for f in (exp / k).iterdir()) for k in sorted(store.finished_run_keys(exp))}


def engines_left(tag: str) -> int:
    n = 0
    for p in psutil.process_iter(["cmdline"]):
        try:
            n += tag in " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            pass
    return n


def measure(repeats: int) -> dict:
    from kvlab import cluster

    ensure_tiny_model()
    tag = f"kvlab-bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="kvlab-bench-ray-") as tmp:
        tmp = Path(tmp)
        spec = ExperimentSpec.load(experiment(tmp, tag, repeats))
        # one group after the other, as the docstring says (a local sweep's default overlaps the next start)
        local = Campaign(spec, tmp / "local").execute(runner.LocalExecutor(overlap_starts=False))
        print(
            f"  local sweep: {local.ok} runs ok, {local.server_starts} server starts, {local.wall_s:.0f} s", flush=True
        )
        t = time.perf_counter()
        with ray_local_cluster(NODES, RAY_NODE_RESOURCE) as c:
            cluster_start_s = time.perf_counter() - t
            ray = Campaign(spec, tmp / "ray").execute(cluster.RayExecutor(c.address, RAY_NODE_RESOURCE))
        print(
            f"  Ray sweep over {NODES} nodes: {ray.ok} runs ok, {ray.server_starts} server starts, "
            f"{ray.wall_s:.0f} s (cluster start {cluster_start_s:.0f} s)",
            flush=True,
        )
        manifest = json.loads((tmp / "ray" / "runs" / EXPERIMENT / store.MANIFEST_FILE).read_text())
        nodes = manifest["sweeps"][-1]["ray"]["nodes"]
        cols = ["run_id", "status", "attempts", "served_prompt_tokens", "served_output_tokens"]
        same_rows = (
            store.load_runs(tmp / "ray")
            .sort("run_id")
            .select(cols)
            .equals(store.load_runs(tmp / "local").sort("run_id").select(cols))
        )
        return {
            "host": host_note(),
            "repeats": repeats,
            "runs": len(folders(tmp / "local")),
            "pinning": (
                "each engine on its own core"
                if "engine.launch" in spec.matrix
                else "engines not pinned (no taskset or fewer than 2 cores)"
            ),
            "local": {
                "wall_s": local.wall_s,
                "ok": local.ok,
                "failed": local.failed,
                "server_starts": local.server_starts,
            },
            "ray": {
                "wall_s": ray.wall_s,
                "ok": ray.ok,
                "failed": ray.failed,
                "server_starts": ray.server_starts,
                "cluster_start_s": cluster_start_s,
                "nodes": [{"runs": len(n["runs"]), "server_starts": n["server_starts"]} for n in nodes],
            },
            "same_keys_and_files": folders(tmp / "ray") == folders(tmp / "local"),
            "same_rows": same_rows,
            "engines_left": engines_left(tag),
        }


def summarise(raw: dict) -> list[Row]:
    if "missing" in raw:
        return [Row(SECTION, "sweep over a local Ray cluster", "not run", note=raw["missing"])]
    local, ray = raw["local"], raw["ray"]
    where = (
        f"{raw['runs']} runs in 2 server groups (vLLM CPU, tiny model, 2 × 256-token requests, 32 output "
        f"tokens), {raw['pinning']}; {raw['host']}"
    )
    per_node = "; ".join(
        f"node {i + 1}: {n['runs']} runs, {n['server_starts']} start(s)" for i, n in enumerate(ray["nodes"])
    )
    return [
        Row(
            SECTION,
            "local sweep (sequential starts): wall time",
            local["wall_s"],
            "s",
            note=f"{local['server_starts']} server starts, {local['ok']} ok / {local['failed']} failed; {where}",
        ),
        Row(
            SECTION,
            f"Ray sweep over {len(ray['nodes'])} nodes: wall time",
            ray["wall_s"],
            "s",
            note=f"{ray['server_starts']} server starts, {ray['ok']} ok / {ray['failed']} failed; {per_node}; "
            f"the cluster's start ({ray['cluster_start_s']:.0f} s) not included",
        ),
        Row(
            SECTION,
            "local / Ray wall time",
            local["wall_s"] / ray["wall_s"],
            "×",
            note="2 groups side by side against one after the other; the runner, Ray and the OS share the cores",
        ),
        Row(
            SECTION,
            "same run keys, files and token counts as the local sweep",
            "yes" if raw["same_keys_and_files"] and raw["same_rows"] else "no",
            "",
            target="yes",
            met=raw["same_keys_and_files"] and raw["same_rows"],
            note=f"engine processes left after both sweeps: {raw['engines_left']}",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per server group (default: two)")
    args = parser.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        raw = {"missing": "Ray is not installed: pip install 'kvlab[cluster]' (make bench installs it)"}
    else:
        raw = measure(1 if args.quick else 2)
    rows = summarise(raw)
    print_table(rows, title="Sweep over a local Ray cluster against the same sweep on this host")
    print(f"wrote {write_result(NAME, rows, raw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
