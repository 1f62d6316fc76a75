"""Run every kvlab benchmark, each in its own process, and print one table of figures and ratios.

Writes the table to reports/bench/summary.md and summary.json (reports/ is not tracked); each
benchmark's raw measurements stay in reports/bench/<name>.json and what it printed to stderr in
reports/bench/<name>.log. Benchmarks print figures; a missed target is reported, not raised.

    .venv/bin/python -m benchmarks.run_all [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone

from benchmarks.bench_tools import OUT_DIR, ROOT, Row, markdown_table, print_table, read_result

BENCHMARKS = [
    "client_overhead",
    "engine_agreement",
    "peer_agreement",
    "trace_agreement",
    "sweep_planning",
    "report_build",
    "analysis_scale",
    "cluster_sweep",
    "avx2_cap",
    "fault_soak",
]


def run_one(name: str, quick: bool) -> tuple[int, float]:
    argv = [sys.executable, "-m", f"benchmarks.{name}", *(["--quick"] if quick else [])]
    log = OUT_DIR / f"{name}.log"
    print(f"\n== {name}: {' '.join(argv[1:])}", flush=True)
    t = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        for line in proc.stdout:  # progress lines only; the per-benchmark tables go to the log
            if line[:2] == "  " and line[2:3].strip():
                print(line, end="", flush=True)
        code = proc.wait()
    return code, time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast pass of every benchmark")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, help="run only these")
    args = parser.parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    chosen = [b for b in BENCHMARKS if not args.only or b in args.only]
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    rows: list[Row] = []
    failed: list[str] = []
    for name in chosen:
        result = OUT_DIR / f"{name}.json"
        result.unlink(missing_ok=True)  # never report an earlier run's figures as this one's
        code, wall = run_one(name, args.quick)
        if code != 0 or not result.exists():
            failed.append(name)
            rows.append(Row(name, "benchmark failed", f"exit {code}", note=f"see reports/bench/{name}.log"))
            continue
        got, _ = read_result(result)
        rows += got
        print(f"   {name} done in {wall:.0f} s", flush=True)
    wall = time.perf_counter() - t0
    host = (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    title = (
        f"kvlab benchmarks{' (quick)' if args.quick else ''}: {started:%Y-%m-%d %H:%M} UTC, {wall / 60:.1f} min, {host}"
    )
    print()
    print_table(rows, title=title)
    (OUT_DIR / "summary.md").write_text(f"# {title}\n\n{markdown_table(rows)}")
    (OUT_DIR / "summary.json").write_text(
        json.dumps(
            {
                "title": title,
                "started_at": started.isoformat(),
                "wall_s": wall,
                "quick": args.quick,
                "rows": [r.__dict__ for r in rows],
                "failed": failed,
            },
            indent=2,
            default=str,
        )
    )
    print(f"wrote {OUT_DIR / 'summary.md'} and summary.json")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
