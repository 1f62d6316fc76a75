"""The benchmarks' helpers: statistics, the table, child processes that never outlive their use."""

from __future__ import annotations

import importlib
import os
import random
import sys
import textwrap

import numpy as np
import psutil
import pytest

from benchmarks import bench_tools as bt
from benchmarks.drivers.kvlab_driver import FirstChunkStamps


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_percentile_and_median_match_numpy(n):
    rng = random.Random(n)
    xs = [rng.uniform(-5, 50) for _ in range(n)]
    for q in (0, 50, 90, 99, 100):
        assert bt.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert bt.median(xs) == pytest.approx(float(np.median(xs)))
    assert bt.percentile([], 50) is None and bt.median([None]) is None


def test_markdown_table_escapes_pipes_and_marks_targets():
    rows = [bt.Row("s", "a | b", 1234.5, "ms", "< 5", True), bt.Row("s", "c", None, met=False, note="x|y")]
    text = bt.markdown_table(rows)
    lines = text.strip().splitlines()
    assert lines[0].startswith("| benchmark | figure | value |") and len(lines) == 4
    assert "a \\| b" in lines[2] and "1,234" in lines[2] and "| yes |" in lines[2]
    assert "| n/a |" in lines[3] and "| NO |" in lines[3] and "x\\|y" in lines[3]


def test_result_round_trip(tmp_path):
    rows = [bt.Row("s", "f", 0.5, "s", "< 1 s", True, "n")]
    path = bt.write_result("x", rows, {"k": [1, 2]}, out_dir=tmp_path)
    assert bt.read_result(path) == (rows, {"k": [1, 2]})


@pytest.mark.parametrize("bulk", [False, True])
def test_fixture_runs_apart_and_leaves_no_process(bulk):
    with bt.Fixture({"server_timestamps": True, "bulk": bulk}) as fx:
        pid = fx.proc.pid
        assert bt.http_ok(fx.url + "/health")
        assert os.getpgid(pid) == pid != os.getpgid(0)  # its own process group
        assert all(t >= 0.0 for t in fx.cpu_times())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_driver_protocol_survives_code_that_prints():
    code = textwrap.dedent("""
        from benchmarks.bench_tools import driver_main

        def handle(job):
            print("chatter from the code under test")
            if job.get("fail"):
                raise ValueError("bad job")
            return {"double": job["x"] * 2}

        driver_main(handle)
    """)
    with bt.Driver(sys.executable, ["-c", code], "t") as d:  # run in the repository root, as the drivers are
        pid = d.proc.pid
        assert d.run({"x": 21}) == {"double": 42}
        with pytest.raises(RuntimeError, match="bad job"):
            d.run({"fail": True})
        assert d.run({"x": 1}) == {"double": 2}  # still serving after a failed job
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_realtime_is_restored_after_the_block():
    with bt.realtime([os.getpid()]) as allowed:
        inside = os.sched_getscheduler(0)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    if allowed:
        assert inside == os.SCHED_FIFO
    else:
        assert inside == os.SCHED_OTHER


def test_affinity_pins_every_thread_and_puts_back_what_it_had():
    import threading

    have = os.sched_getaffinity(0)
    # a CPU outside this process's set where it has one (make test pins the engine-free tests to the last core)
    others = sorted(set(range(os.cpu_count() or 1)) - have)
    one = {others[0]} if others else {min(have)}
    if one == have:
        pytest.skip("needs 2 CPUs to see an affinity change")
    started, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), done.wait(10)))
    worker.start()
    started.wait(10)
    try:
        with bt.affinity({os.getpid(): one}):
            assert os.sched_getaffinity(0) == one
            assert os.sched_getaffinity(worker.native_id) == one  # not only the calling thread
        assert os.sched_getaffinity(0) == have and os.sched_getaffinity(worker.native_id) == have
    finally:
        done.set()
        worker.join()
    with pytest.raises(OSError):  # a CPU this process may not use is an error, not a silent no-op
        with bt.affinity({os.getpid(): {max(have) + 1024}}):
            pass
    assert os.sched_getaffinity(0) == have


def test_migrations_reads_the_main_thread_and_none_for_a_missing_process():
    assert isinstance(bt.migrations(os.getpid()), int)  # /proc/<pid>/sched (Linux, CONFIG_SCHED_DEBUG)
    assert bt.migrations(2**22 + 12345) is None  # above pid_max: no such process


def test_standalone_fixture_collects_garbage_only_between_streams():
    """The benchmarks' fixture process runs Python's collector only while no stream is open, so a
    collection never falls between a chunk's ``t_server`` stamp and its write; it keeps no request log."""
    import asyncio
    import gc

    from kvlab import client, workloads
    from tests.support.sse_fixture import FixtureConfig, SSEServer

    open_at_collection: list[int] = []

    def watch(phase, info):
        if phase == "start":
            open_at_collection.append(srv.open_streams)

    was_enabled = gc.isenabled()
    gc.disable()  # as the standalone process runs: only the server's own collections
    gc.callbacks.append(watch)
    try:
        with SSEServer(FixtureConfig(chunks=100), keep_log=False, collect_when_idle=True) as srv:
            for _ in range(3):
                prompts = workloads.fixed_batch.prompts(8, 10, 100, vocab_size=512)
                batch = asyncio.run(client.run_requests(srv.url, "fixture", prompts, concurrency=4))
                assert batch.ok and sum(r.chunks for r in batch.records) == 800
    finally:
        gc.callbacks.remove(watch)
        if was_enabled:
            gc.enable()
    assert open_at_collection and set(open_at_collection) == {0}
    assert srv.served == [] and srv.open_streams == 0


def test_first_chunk_stamps_read_the_fixture_stamp_through_the_client_hook():
    """The TTFT-error driver's stamps: the first chunk's t_server per request, whole when a read splits it."""
    stamps = FirstChunkStamps()
    stamps(0, b'data: {"t_server":12.5,"choices":[]}\n\ndata: {"t_server":13.0}', 0.0)
    stamps(1, b'data: {"t_server":7.2', 0.0)  # cut inside the number
    stamps(1, b'5,"choices":[]}\n\n', 0.0)
    stamps(0, b'data: {"t_server":99.0,', 0.0)  # later chunks never replace the first
    assert stamps.first == {0: 12.5, 1: 7.25}


def test_driver_measures_ttft_error_through_the_timing_hook():
    from benchmarks.drivers import kvlab_driver

    with bt.Fixture({"server_timestamps": True}) as fx:
        out = kvlab_driver.handle({"url": fx.url, "requests": 4, "chunks": 5, "spy": True})
    assert out["failed"] == 0 and out["token_chunks"] == 20
    assert len(out["ttft_error_ms"]) == 4 and all(0 <= e < 1000 for e in out["ttft_error_ms"])


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in bt.BENCH_DIR.glob("*.py") if p.stem != "__init__") + ["drivers.kvlab_driver"]
)
def test_every_benchmark_imports_as_a_module_of_the_package(name):
    module = importlib.import_module(f"benchmarks.{name}")
    assert module.__name__ == f"benchmarks.{name}"


@pytest.mark.engine_env
def test_the_vllm_driver_imports_in_the_engine_venv(engine_python):
    """vLLM's driver imports vLLM's own request function, so it runs in the engine venv (which has no kvlab). It
    starts no server, so it runs with the engine-free tests (as the engines' parser checks do), not in the engine
    pass that make test's time waits on."""
    import subprocess

    from kvlab.paths import ROOT

    out = subprocess.run(
        [str(engine_python), "-c", "import benchmarks.drivers.vllm_driver as m; print(m.__name__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "benchmarks.drivers.vllm_driver"


def test_ray_campaign_startup_runs_groups_side_by_side_where_gpus_allow():
    from benchmarks.sweep_planning import startup_on_nodes

    assert [startup_on_nodes([8] * 4, 900, n) for n in (1, 2, 4, 8)] == [3600, 1800, 900, 900]
    assert startup_on_nodes([4, 4], 300, 1) == startup_on_nodes([1] * 8, 300, 1) == 300
    assert startup_on_nodes([8, 4, 4], 300, 1) == 600 and startup_on_nodes([4, 8, 4], 300, 1) == 600
    assert startup_on_nodes([1] * 9, 300, 1) == 600
    assert startup_on_nodes([16], 300, 4) is None  # no node holds it: kvlab refuses it


def test_sweep_planning_prices_each_server_group_at_its_own_engines_start():
    """Runs beyond the first on a server save that server's engine's start: 6 + 6 classification runs on one vLLM
    and one SGLang server save 5 x 10 + 5 x 1 s; a start-up must be given for every CPU engine."""
    from benchmarks.sweep_planning import parse_startups, plan_all

    plans = {e["experiment"]: e for e in plan_all({"vllm": 10.0, "sglang": 1.0, "sglang-jax": 1.0})}
    assert [plans[n]["saved_s"] for n in ("cpu_classification", "cpu_long_context", "cpu_prefix_sharing")] == [
        55.0,
        308.0,
        506.0,
    ]  # 2 x 5, 4 x 28 (two servers per engine) and 4 x 23 runs beyond the first
    assert plans["b300_long_context"]["saved_s"] == 20 * 900.0  # 24 runs on 4 servers, 15 min assumed per start
    assert parse_startups(["vllm=34", "sglang-jax=20.5"], {"vllm", "sglang-jax"}) == {"vllm": 34.0, "sglang-jax": 20.5}
    with pytest.raises(SystemExit, match="no start-up given for sglang-jax"):
        parse_startups(["vllm=34"], {"vllm", "sglang-jax"})
    with pytest.raises(SystemExit, match="'vllm=-3': expected ENGINE=SECONDS"):
        parse_startups(["vllm=-3"], {"vllm"})


def test_avx2_cap_summary_reads_its_medians_and_ratios():
    """Fixed raw figures in, exact medians and ratios out, per engine (old results without an engine are vLLM's);
    the sweep row meets its target only within 480 s."""
    from benchmarks import avx2_cap

    raw = {
        "batches": [
            {"capped": False, "dtype": "bfloat16", "batches_s": [0.8, 0.9, 1.0], "startup_s": 40.0},
            {"capped": False, "dtype": "float32", "batches_s": [1.2, 1.1, 1.3], "startup_s": 41.0},
            {"capped": True, "dtype": "bfloat16", "batches_s": [4.0, 3.6, 4.4], "startup_s": 35.0, "failed": 0},
            {"capped": True, "dtype": "float32", "batches_s": [1.6, 1.7, 1.5], "startup_s": 36.0},
            {"engine": "sglang", "capped": True, "dtype": "bfloat16", "batches_s": [9.0, 8.0, 10.0], "startup_s": 70.0},
            {"engine": "sglang", "capped": True, "dtype": "float32", "batches_s": [6.0, 6.4, 5.0], "startup_s": 71.0},
        ],
        "sweep": {"wall_s": 482.0, "exit": 0, "jax_cache_bytes_before": 4e6},
    }
    rows = {r.figure: r for r in avx2_cap.summarise(raw)}
    assert rows["vLLM batch time, bfloat16, ISA capped at AVX2"].value == pytest.approx(4.0)
    assert "4.1-4.3 s on a real AVX2-only EPYC" in rows["vLLM batch time, bfloat16, ISA capped at AVX2"].note
    ratio = rows["vLLM capped: bfloat16 / float32 batch time"]
    assert ratio.value == pytest.approx(4.0 / 1.6) and ratio.met is True
    assert rows["vLLM uncapped: float32 / bfloat16 batch time"].value == pytest.approx(1.2 / 0.9)
    assert rows["SGLang batch time, float32, ISA capped at AVX2"].value == pytest.approx(6.0)
    assert rows["SGLang capped: bfloat16 / float32 batch time"].value == pytest.approx(9.0 / 6.0)
    cross = rows["SGLang / vLLM batch time, float32, capped"]
    assert cross.value == pytest.approx(6.0 / 1.6) and "not a GPU speed claim" in cross.note
    sweep = rows["main job's sweeps (quick, 4 CPU experiments) under the cap"]
    assert sweep.value == 482.0 and sweep.met is False


def test_the_isa_shim_runs_the_next_sitecustomize_so_sglangs_fix_still_applies(tmp_path):
    """Python imports only the first sitecustomize on PYTHONPATH: the shim runs the next one (SGLang's CPU fix)."""
    import subprocess

    from benchmarks.avx2_cap import CAP_ENV, SHIM

    other = tmp_path / "next"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['KVLAB_NEXT_RAN'] = 'yes'\n")
    code = "import os, kvlab.host as h; print(h.native_bf16(), os.environ.get('KVLAB_NEXT_RAN'))"
    env = os.environ | CAP_ENV | {"PYTHONPATH": os.pathsep.join([str(SHIM), str(other)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "yes"], out.stderr


def test_the_isa_shim_makes_kvlab_see_no_native_bf16():
    """benchmarks/isa_shim answers for kvlab's host probe only when KVLAB_AVX2_CAP=1 (and loads nowhere else)."""
    import subprocess

    from benchmarks.avx2_cap import CAP_ENV

    code = "import kvlab.host as h; print(h.native_bf16())"
    capped = subprocess.run([sys.executable, "-c", code], env=os.environ | CAP_ENV, capture_output=True, text=True)
    assert capped.stdout.strip() == "False", capped.stderr
    off = subprocess.run(
        [sys.executable, "-c", code], env=os.environ | CAP_ENV | {"KVLAB_AVX2_CAP": "0"}, capture_output=True, text=True
    )
    from kvlab import host

    assert off.stdout.strip() == str(host.native_bf16())
