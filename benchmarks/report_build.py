"""Report build: wall time to execute every notebook with papermill and export HTML, parallel vs serial.

Runs ``kvlab.reports.build`` into a temp folder with the data in the tree (never into reports/),
with its default workers (one process per notebook, up to the core count) and with ``workers=1``,
alternating, and prints the medians and their ratio.

    .venv/bin/python -m benchmarks.report_build [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_tools import OUT_DIR, Row, host_note, median, print_table, write_result

from kvlab import reports

NAME = "report_build"
SECTION = "4 report build"
TARGET_S = 60.0


@contextlib.contextmanager
def _quiet_stderr(log: Path):
    """Send fd 2 (kernels' start/stop chatter from every worker process) to a log file."""
    log.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def build_once(workers: int | None, selected: list[str] | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="kvlab-bench-") as tmp:
        t = time.perf_counter()
        with _quiet_stderr(OUT_DIR / "report_build.log"):
            built = reports.build(out_dir=Path(tmp), selected=selected, workers=workers)
        wall = time.perf_counter() - t
    return {
        "workers": workers,
        "wall_s": wall,
        "notebooks": [r.notebook for r in built],
        "notebook_s": {r.notebook: r.seconds for r in built},
        "figures": sum(r.figures for r in built),
        "load1": os.getloadavg()[0],
    }


def measure(quick: bool, repeats: int) -> dict:
    selected = ["01", "02"] if quick else None
    raw: dict = {"host": host_note(), "selected": selected, "builds": []}
    for rep in range(repeats):
        for workers in (None, 1) if rep % 2 == 0 else (1, None):
            b = build_once(workers, selected)
            b["repeat"] = rep
            raw["builds"].append(b)
            print(
                f"  rep {rep} workers={workers or 'default'}: {b['wall_s']:.1f} s for {len(b['notebooks'])} "
                f"notebooks ({b['figures']} figures)",
                flush=True,
            )
    return raw


def summarise(raw: dict) -> list[Row]:
    par = [b for b in raw["builds"] if b["workers"] is None]
    ser = [b for b in raw["builds"] if b["workers"] == 1]
    p, s = median(b["wall_s"] for b in par), median(b["wall_s"] for b in ser)
    n = len(par[0]["notebooks"])
    default_workers = min(n, os.cpu_count() or 1)
    return [
        Row(
            SECTION,
            f"build {n} notebooks + HTML, default workers ({default_workers})",
            p,
            "s",
            f"< {TARGET_S:g} s on 2 cores",
            p < TARGET_S,
            f"papermill execution + nbconvert HTML into a temp dir; median of {len(par)}; {raw['host']}",
        ),
        Row(SECTION, "same, workers=1", s, "s", note=f"median of {len(ser)}"),
        Row(
            SECTION,
            "serial / parallel wall time",
            s / p,
            "×",
            note="per-notebook time is mostly kernel start and imports, which overlap across processes",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="notebooks 01-02 only, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    t = time.perf_counter()
    raw = measure(args.quick, args.repeats or (1 if args.quick else 2))
    raw["wall_s"] = time.perf_counter() - t
    rows = summarise(raw)
    print_table(rows, title=f"Report build ({raw['wall_s']:.0f} s)")
    print(f"wrote {write_result(NAME, rows, raw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
