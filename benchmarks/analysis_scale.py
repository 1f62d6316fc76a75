"""Analysis scale: 10 million per-chunk records in parquet, loaded and aggregated lazily with polars.

Generates ``run_id, request_index, chunk_index, t_s`` (100 runs x 1,000 requests x 100 chunks, chunk
gaps drawn from an exponential) with numpy into a temp parquet file, then, in a fresh process so its
peak memory is the analysis alone, scans it lazily and computes per-request ITL p50/p99 and per-run
chunks/s. Reports the wall time of load + aggregate, that process's peak RSS (getrusage ru_maxrss)
and the in-memory size of the full frame (polars ``estimated_size``).

    .venv/bin/python -m benchmarks.analysis_scale [--quick]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_tools import ROOT, Row, host_note, median, print_table, write_result

NAME = "analysis_scale"
SECTION = "5 analysis scale"
TARGET_S = 5.0
FULL = (100, 1000, 100)  # runs, requests per run, chunks per request: 10,000,000 rows
QUICK = (10, 1000, 100)  # 1,000,000 rows


def generate(path: Path, runs: int, requests: int, chunks: int, seed: int = 0) -> dict:
    import numpy as np
    import polars as pl

    t = time.perf_counter()
    rng = np.random.default_rng(seed)
    n_req = runs * requests
    # each request starts somewhere in its run's first 10 s; chunks ~20 ms apart (exponential gaps)
    start = rng.uniform(0.0, 10.0, n_req)
    gaps = rng.exponential(0.02, (n_req, chunks))
    gaps[:, 0] = rng.uniform(0.05, 0.5, n_req)  # first chunk: a TTFT
    t_s = (start[:, None] + np.cumsum(gaps, axis=1)).ravel()
    run_idx = np.repeat(np.arange(runs, dtype=np.int32), requests * chunks)
    labels = pl.Series("run_id", [f"run-{i:04d}" for i in range(runs)], dtype=pl.String)
    df = pl.DataFrame(
        {
            "run_id": labels.gather(run_idx),
            "request_index": np.tile(np.repeat(np.arange(requests, dtype=np.int32), chunks), runs),
            "chunk_index": np.tile(np.arange(chunks, dtype=np.int32), n_req),
            "t_s": t_s,
        }
    )
    size = df.estimated_size()
    df.write_parquet(path)
    return {
        "rows": df.height,
        "estimated_size_bytes": size,
        "parquet_bytes": path.stat().st_size,
        "generate_and_write_s": time.perf_counter() - t,
    }


def aggregate(path: Path) -> dict:
    """The timed part, meant to run in its own process."""
    import polars as pl

    t = time.perf_counter()
    lf = pl.scan_parquet(path)
    itl_ms = pl.col("t_s").sort_by("chunk_index").diff() * 1e3  # per chunk, within each request
    per_request = lf.group_by("run_id", "request_index").agg(
        itl_p50_ms=itl_ms.quantile(0.5),
        itl_p99_ms=itl_ms.quantile(0.99),
        chunks=pl.len(),
        t_first=pl.col("t_s").min(),
        t_last=pl.col("t_s").max(),
    )
    per_run = (
        per_request.group_by("run_id")
        .agg(chunks=pl.col("chunks").sum(), t_first=pl.col("t_first").min(), t_last=pl.col("t_last").max())
        .with_columns(chunks_per_s=pl.col("chunks") / (pl.col("t_last") - pl.col("t_first")))
        .sort("run_id")
    )
    req_df, run_df = pl.collect_all([per_request, per_run])
    wall = time.perf_counter() - t
    return {
        "load_aggregate_s": wall,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux: KiB
        "per_request_rows": req_df.height,
        "per_run_rows": run_df.height,
        "result_bytes": req_df.estimated_size() + run_df.estimated_size(),
        "itl_p50_ms_median": float(req_df["itl_p50_ms"].median()),
        "itl_p99_ms_median": float(req_df["itl_p99_ms"].median()),
        "chunks_per_s_median": float(run_df["chunks_per_s"].median()),
        "polars": pl.__version__,
        "threads": pl.thread_pool_size(),
    }


def measure(quick: bool, repeats: int) -> dict:
    runs, requests, chunks = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="kvlab-bench-") as tmp:
        path = Path(tmp) / "chunks.parquet"
        gen = generate(path, runs, requests, chunks)
        print(
            f"  generated {gen['rows']:,} rows in {gen['generate_and_write_s']:.1f} s "
            f"({gen['parquet_bytes'] / 2**20:.0f} MiB parquet)",
            flush=True,
        )
        results = []
        for rep in range(repeats):
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.analysis_scale", "--worker", str(path)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(r)
            print(
                f"  rep {rep} load+aggregate {r['load_aggregate_s']:.2f} s, peak RSS "
                f"{r['peak_rss_bytes'] / 2**20:.0f} MiB",
                flush=True,
            )
    return {"host": host_note(), "shape": [runs, requests, chunks], "generate": gen, "runs": results}


def summarise(raw: dict) -> list[Row]:
    gen, res = raw["generate"], raw["runs"]
    wall = median(r["load_aggregate_s"] for r in res)
    rss = median(r["peak_rss_bytes"] for r in res)
    r0 = res[0]
    rows_ = gen["rows"]
    return [
        Row(
            SECTION,
            f"load + aggregate {rows_:,} chunk rows (lazy polars)",
            wall,
            "s",
            f"< {TARGET_S:g} s",
            wall < TARGET_S,
            f"per-request ITL p50/p99 ({r0['per_request_rows']:,} requests) and per-run chunks/s "
            f"({r0['per_run_rows']} runs); median of {len(res)}; polars {r0['polars']}, "
            f"{r0['threads']} threads",
        ),
        Row(
            SECTION,
            "peak RSS of the analysis process",
            rss / 2**20,
            "MiB",
            note=f"getrusage ru_maxrss of a fresh process; results {r0['result_bytes'] / 2**20:.1f} MiB",
        ),
        Row(
            SECTION,
            "full frame in memory (estimated_size)",
            gen["estimated_size_bytes"] / 2**20,
            "MiB",
            note=f"parquet on disk {gen['parquet_bytes'] / 2**20:.0f} MiB; generated and written in "
            f"{gen['generate_and_write_s']:.1f} s (numpy + polars, not timed against the target)",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 million rows, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(aggregate(args.worker)))
        return 0
    t = time.perf_counter()
    raw = measure(args.quick, args.repeats or (1 if args.quick else 3))
    raw["wall_s"] = time.perf_counter() - t
    rows = summarise(raw)
    print_table(rows, title=f"Analysis scale ({raw['wall_s']:.0f} s)")
    print(f"wrote {write_result(NAME, rows, raw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
