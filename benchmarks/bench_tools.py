"""Shared helpers for kvlab's benchmarks: child processes in their own group, stats, result rows and tables.

Benchmarks print figures; they never assert. Each script writes ``reports/bench/<name>.json``
(a list of rows plus its raw measurements) so ``run_all.py`` can merge them into one table.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "benchmarks"
OUT_DIR = ROOT / "reports" / "bench"
WORKBOOK_PYTHON = ROOT / ".venv" / "bin" / "python"
ENGINE_PYTHON = ROOT / ".engines" / "vllm" / "bin" / "python"
FIXTURE = "tests.support.sse_fixture"  # the SSE fixture server, run as python -m


# ----------------------------------------------------------------------------- stats


def median(values: Iterable[float]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default), without numpy so drivers in any venv can use it."""
    vals = sorted(values)
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0]
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def cpu_usage() -> tuple[float, int]:
    """(CPU seconds, involuntary context switches) of this process so far: getrusage(RUSAGE_SELF).

    CPU is user + system time of every thread of the process (what ``time.process_time`` gives);
    involuntary switches count how often the kernel took the CPU away (contention from others).
    """
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_nivcsw


def tcp_segments() -> int | None:
    """Host-wide TCP segments sent so far (/proc/net/snmp OutSegs; on loopback every segment is also received)."""
    try:
        lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines() if ln.startswith("Tcp:")]
        return int(dict(zip(lines[0][1:], lines[1][1:]))["OutSegs"])
    except (OSError, KeyError, IndexError, ValueError):
        return None


def rel_diff(a: float | None, b: float | None) -> float | None:
    """(a - b) / b, None when undefined."""
    if a is None or b is None or b == 0:
        return None
    return (a - b) / b


# ----------------------------------------------------------------------------- rows and tables


@dataclass
class Row:
    """One figure of the summary table."""

    section: str  # which benchmark
    figure: str  # what is measured, with its condition
    value: float | str | None
    unit: str = ""
    target: str = ""  # the goal in words, '' when the figure is informative only
    met: bool | None = None  # None: no target, or not decidable
    note: str = ""

    def cells(self) -> list[str]:
        return [self.section, self.figure, fmt(self.value), self.unit, self.target, verdict(self.met), self.note]


HEADERS = ["benchmark", "figure", "value", "unit", "target", "met", "note"]


def fmt(value: float | str | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    if a >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def verdict(met: bool | None) -> str:
    return "" if met is None else ("yes" if met else "NO")


def markdown_table(rows: Sequence[Row]) -> str:
    """A GitHub-flavoured markdown table of the rows ('|' in cells escaped)."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |")
    return "\n".join(lines) + "\n"


def print_table(rows: Sequence[Row], title: str = "") -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text where rich is missing
        if title:
            print(title)
        print(markdown_table(rows))
        return
    table = Table(title=title or None, show_lines=False)
    for h in HEADERS:
        table.add_column(h, justify="right" if h == "value" else "left", overflow="fold")
    for r in rows:
        table.add_row(*r.cells())
    console = Console()
    Console(width=max(200 if not console.is_terminal else 0, console.width)).print(table)


def write_result(name: str, rows: Sequence[Row], raw: dict, out_dir: Path = OUT_DIR) -> Path:
    """Write ``<out_dir>/<name>.json`` with the rows and raw measurements (atomic replace)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"name": name, "rows": [asdict(r) for r in rows], "raw": raw}, indent=2, default=str))
    os.replace(tmp, path)
    return path


def read_result(path: Path) -> tuple[list[Row], dict]:
    data = json.loads(Path(path).read_text())
    return [Row(**r) for r in data["rows"]], data.get("raw", {})


# ----------------------------------------------------------------------------- a local Ray cluster

RAY_NODE_RESOURCE = "kvlab_node"  # one unit per node: one server group per node at a time


def _ray_node_args(**kwargs) -> dict:
    return {
        "object_store_memory": 80 * 2**20,
        "metrics_agent_port": free_port(),
        "metrics_export_port": free_port(),
        "dashboard_agent_listen_port": free_port(),
        "runtime_env_agent_port": free_port(),
        **kwargs,
    }


@contextlib.contextmanager
def _raylet_told_its_agent_port():
    """Every node's agent ports are fixed (``_ray_node_args``) and each raylet is told its dashboard agent's,
    which Ray's Python launcher leaves out: otherwise the raylet waits for the agent (a Python process importing
    Ray) to write it to a file and aborts after 15 s, which a loaded 2-core machine often exceeds."""
    import re

    from ray._private import services

    real = services.start_ray_process

    def start(command, process_type, *args, **kwargs):
        if process_type == "raylet":
            agent = next((c for c in command if c.startswith("--dashboard_agent_command=")), "")
            if m := re.search(r"--listen-port=(\d+)", agent):
                command = [*command, f"--dashboard_agent_listen_port={m.group(1)}"]
        return real(command, process_type, *args, **kwargs)

    services.start_ray_process = start
    try:
        yield
    finally:
        services.start_ray_process = real


@contextlib.contextmanager
def ray_local_cluster(nodes: int = 2, resource: str = RAY_NODE_RESOURCE):
    """A Ray cluster on this host standing for ``nodes`` machines: a head that runs nothing and ``nodes`` nodes
    with one CPU and one ``resource`` each; this process is connected to it. Yields Ray's ``Cluster``."""
    import ray  # kvlab[cluster]
    from ray.cluster_utils import Cluster

    with _raylet_told_its_agent_port():
        c = Cluster(initialize_head=True, head_node_args=_ray_node_args(num_cpus=0, include_dashboard=False))
        try:
            for _ in range(nodes):
                c.add_node(**_ray_node_args(num_cpus=1, resources={resource: 1}))
        except BaseException:
            c.shutdown()
            raise
    try:
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


# ----------------------------------------------------------------------------- processes


def _pin(cpus: set[int] | None):
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def split_cpus() -> tuple[set[int] | None, set[int] | None]:
    """(server CPUs, client CPUs): one core for the fixture server, the rest for the client; None on 1 core."""
    try:
        have = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None, None
    if len(have) < 2:
        return None, None
    return {have[0]}, set(have[1:])


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


@contextlib.contextmanager
def realtime(pids: Iterable[int], priority: int = 10):
    """Run ``pids`` (every thread of each) under SCHED_FIFO for the block; yields whether that was allowed.

    For short, mostly idle measurements of latency on a shared host: a real-time task is not
    preempted by ordinary ones, so what remains is the code's own delay. Needs CAP_SYS_NICE;
    without it nothing changes and the block runs at normal priority.
    """
    pids = list(pids)
    allowed = True
    try:
        for pid in pids:
            for tid in _threads(pid):
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError):
        allowed = False
    try:
        yield allowed
    finally:  # every thread now alive, including any started meanwhile (they inherit the policy)
        for pid in pids:
            for tid in _threads(pid):
                try:
                    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                except OSError:  # the thread has ended
                    pass


@contextlib.contextmanager
def affinity(placement: dict[int, set[int]]):
    """Run each process (every thread it has now) on the given CPUs for the block, then put back what it had.

    For latency jobs: two busy processes on a 2-core host can be put on the same core by the
    kernel; pinning each to its own core keeps one from waiting for the other. A thread started
    inside the block inherits the pinned set and keeps it after. A thread that ends meanwhile is
    skipped; any other failure (a CPU outside the allowed set) is raised, so a job is never
    labelled pinned while running unpinned.
    """
    before: dict[int, set[int]] = {}
    try:
        for pid, cpus in placement.items():
            for tid in _threads(pid):
                try:
                    before[tid] = os.sched_getaffinity(tid)
                    os.sched_setaffinity(tid, cpus)
                except ProcessLookupError:  # the thread has just ended
                    before.pop(tid, None)
        yield
    finally:
        for tid, cpus in before.items():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cpus)


def migrations(pid: int) -> int | None:
    """How often the kernel has moved the process's main thread (where its event loop runs) between
    CPUs (``se.nr_migrations`` in ``/proc/<pid>/sched``); None where that is not readable."""
    try:
        with open(f"/proc/{pid}/sched") as f:
            return next(int(line.split()[-1]) for line in f if line.startswith("se.nr_migrations"))
    except (OSError, StopIteration, ValueError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


def stop_group(proc: subprocess.Popen, grace_s: float = 5.0) -> int | None:
    """SIGTERM the child's whole process group, SIGKILL after ``grace_s``; returns its exit code."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    else:  # the leader is gone; anything it left in its group goes too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return proc.returncode


@dataclass
class Fixture:
    """The SSE fixture server (tests/support/sse_fixture.py) as a separate process in its own group."""

    knobs: dict = field(default_factory=dict)
    cpus: set[int] | None = None  # pin the server to these CPUs (None: wherever the kernel puts it)
    proc: subprocess.Popen | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        argv = [str(WORKBOOK_PYTHON), "-m", FIXTURE, "--port", str(self.port)]
        for k, v in self.knobs.items():
            flag = "--" + k.replace("_", "-")
            if isinstance(v, bool):
                argv.append(flag if v else "--no-" + k.replace("_", "-"))
            else:
                argv += [flag, str(v)]
        return argv

    def __enter__(self) -> Fixture:
        self.port = free_port()
        self.proc = subprocess.Popen(
            self.argv(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=_pin(self.cpus),
        )
        deadline = time.monotonic() + 30
        while not http_ok(self.url + "/health"):
            if self.proc.poll() is not None:
                raise RuntimeError(f"fixture server exited: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                stop_group(self.proc)
                raise RuntimeError("fixture server not ready within 30 s")
            time.sleep(0.05)
        return self

    def cpu_times(self) -> tuple[float, float]:
        """(user, system) CPU seconds the server process has used so far."""
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user, t.system

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            if self.proc.stderr:
                self.proc.stderr.close()


class Driver:
    """A client driver process speaking JSON lines: one job per line in, one result per line out.

    Kept alive across jobs so a peer that takes seconds to import is timed only while it works.
    """

    def __init__(
        self,
        python: Path | str,
        args: list[str],
        name: str,
        cpus: set[int] | None = None,
        env: dict[str, str] | None = None,
    ):
        """``python args...`` run in the repository root, e.g. args ``["-m", "benchmarks.drivers.kvlab_driver"]``."""
        self.name = name
        self.proc = subprocess.Popen(
            [str(python), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            cwd=ROOT,
            start_new_session=True,
            text=True,
            bufsize=1,
            preexec_fn=_pin(cpus),
            env={**os.environ, **(env or {})},
        )
        ready = self.proc.stdout.readline()
        if not ready.strip():
            raise RuntimeError(f"driver {name} died at start (exit {self.proc.poll()})")
        self.info = json.loads(ready)

    def run(self, job: dict) -> dict:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"driver {self.name} exited (code {self.proc.poll()})")
        result = json.loads(line)
        if "error" in result and "traceback" in result:
            raise RuntimeError(f"driver {self.name} failed: {result['traceback']}")
        return result

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop_group(self.proc)

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: label -> (driver, extra job fields) of the clients compared. "vllm" is vLLM's request function with
#: the session `vllm bench serve` builds (trust_env=True: each request first looks up ~/.netrc in a
#: worker thread); "vllm-noenv" is the same request function with trust_env=False.
CLIENTS = {"kvlab": ("kvlab", {}), "vllm": ("vllm", {}), "vllm-noenv": ("vllm", {"trust_env": False})}


def kvlab_driver(cpus: set[int] | None = None, name: str = "kvlab", env: dict[str, str] | None = None) -> Driver:
    """kvlab's client as a driver process in the workbook venv."""
    return Driver(WORKBOOK_PYTHON, ["-m", "benchmarks.drivers.kvlab_driver"], name, cpus, env=env)


def vllm_driver(cpus: set[int] | None = None) -> Driver:
    """vLLM's benchmark request function as a driver process in the engine venv."""
    return Driver(ENGINE_PYTHON, ["-m", "benchmarks.drivers.vllm_driver"], "vllm", cpus)


def driver_main(handle) -> None:
    """The driver side of :class:`Driver`: announce, then answer each job line with ``handle(job)``.

    Whatever the code under test prints goes to stderr: stdout carries only the protocol.
    """
    out = sys.stdout
    sys.stdout = sys.stderr
    print(json.dumps({"python": sys.executable, "pid": os.getpid()}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            result = handle(job)
        except Exception as exc:  # report, keep serving: the orchestrator decides
            import traceback

            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
        print(json.dumps(result), file=out, flush=True)


def host_note() -> str:
    load = os.getloadavg()[0]
    return f"{os.cpu_count()} cores, load average {load:.2f} at start"
