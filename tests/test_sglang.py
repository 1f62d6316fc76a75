"""PyTorch SGLang 0.5.23 on CPU, for real, through the same ``sglang`` adapter a GPU host uses: kvlab's
compatibility fix still applies and is still needed, the client's token counts equal SGLang's own /metrics
deltas, radix-cache hits are token-exact (page size 1) and flushed between runs, and a scheduler killed
mid-run is a crash retried on a new server, with no process left."""

from __future__ import annotations

import subprocess
from pathlib import Path
import uuid

import polars as pl
import psutil
import pytest
import yaml
from test_runner import _kill_engine_when_streaming, assert_listens_on_loopback_only, engine_processes, server_records
from test_server import _post

from kvlab import runner, store
from kvlab.campaign import Campaign
from kvlab.engines.spec import holds_secret, secret_forms
from kvlab.paths import ROOT
from kvlab.experiment import ExperimentSpec

COMPAT = "kvlab/engines/envs/sglang-cpu-compat"
#: The CPU launch: only experiment-file differences from a GPU host's (device, backend, env).
SGLANG = {
    "name": "sglang",
    "launch": [".engines/sglang/bin/python"],
    "model": "data/models/tiny-llama",
    "max_model_len": 1024,
    "kv_cache_bytes": 16 * 2**20,
    "dtype": "bfloat16",
    "startup_timeout_s": 300,
    "extra_args": [
        "--device",
        "cpu",
        "--attention-backend",
        "torch_native",
        "--disable-cuda-graph",
        "--disable-overlap-schedule",
        "--max-running-requests",
        "4",
    ],
    "env": {"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": COMPAT, "OMP_NUM_THREADS": "1"},
}


def _probe(python, code: str, pythonpath: str | None, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "SGLANG_USE_CPU_ENGINE": "1"}
    if pythonpath:
        base["PYTHONPATH"] = pythonpath
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=base | (env or {}), cwd=ROOT)


#: Run in the SGLang environment without kvlab's CPU fix: the versions the fix was written for, then the kernel
#: wheel's import, whose failure is printed (it is expected to fail on a machine without libcuda).
BARE = (
    "from importlib.metadata import version as v\n"
    "print(v('sglang'), v('sglang-kernel'))\n"
    "try:\n"
    "    import sgl_kernel\n"
    "    print('IMPORTED')\n"
    "except BaseException as exc:\n"
    "    print('FAILED', exc)\n"
)
#: With the CPU fix: the wheel imports, its CPU op does what SGLang's C++ kernel does, and SGLang's memory module
#: imports; then the port placeholder SGLang's data-parallel controller binds (its own import of bind_port).
FIXED = (
    "import torch, sgl_kernel\n"
    "assert sgl_kernel.common_ops is None\n"
    "rt = torch.zeros(3, 8, dtype=torch.int32)\n"
    "torch.ops.sgl_kernel.assign_req_to_token_pool_cpu(torch.tensor([2, 0]), rt, torch.tensor([1, 0]),"
    " torch.tensor([3, 1]), torch.tensor([7, 8, 9]), 8)\n"
    "print(rt.tolist())\n"
    "from sglang.srt.mem_cache import allocation\n"
)
BIND = (
    "from sglang.srt.managers import data_parallel_controller as d\n"
    "s = d.bind_port(0); print(s.getsockname()[0]); s.close()\n"
    "import sgl_kernel\n"
)


@pytest.fixture(scope="module")
def probes(sglang_python):
    """The three processes the two tests below read, each an SGLang import of its own (about 15 s each on the
    2-vCPU EPYC): the environment without the CPU fix, with it (the op, then the controller's placeholder), and
    with kvlab's bind-host fix first on the path and its host set."""
    from kvlab.engines.sglang import BIND_HOST_ENV, BIND_HOST_SHIM

    return {
        "bare": _probe(sglang_python, BARE, None),
        "fixed": _probe(sglang_python, FIXED + BIND, str(ROOT / COMPAT)),
        "bind": _probe(sglang_python, BIND, f"{BIND_HOST_SHIM}:{COMPAT}", {BIND_HOST_ENV: "127.0.0.1"}),
    }


@pytest.mark.engine_env
@pytest.mark.full  # the fix applying is what every SGLang start here shows (no CPU start without it); this test's
# other half, that it is still needed, matters when the lock changes: three SGLang imports, about 40 s
def test_the_compat_fix_is_still_needed_and_still_applies(probes):
    """Without the fix the CUDA kernel wheel does not import (no libcuda) and the CPU op is missing; with it,
    the wheel imports, the op exists and does what SGLang's C++ kernel does. A release that imports on a CPU
    or ships the op makes the first half fail: then the fix is to be dropped."""
    bare = probes["bare"]
    assert bare.returncode == 0, bare.stderr[-3000:]
    versions, imported = bare.stdout.splitlines()[0], "\n".join(bare.stdout.splitlines()[1:])
    assert versions.split() == ["0.5.23", "0.4.10"], "the fix was written for sglang 0.5.23 / kernel 0.4.10"
    assert imported.startswith("FAILED") and "libcuda.so.1" in imported, "sgl_kernel imports on a CPU: drop the fix"
    fixed = probes["fixed"]
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert fixed.stdout.splitlines()[0] == str([[9, 0, 0, 0, 0, 0, 0, 0], [0] * 8, [0, 7, 8, 0, 0, 0, 0, 0]])


def test_data_parallel_sglang_gets_the_bind_host_fix_before_its_own_pythonpath(monkeypatch):
    """dp > 1 (or --dp-size in extra_args) on an address of this machine: kvlab's fix first on PYTHONPATH, the
    spec's path (the CPU fix) after it, and the host to bind; the launch keeps both (the one bind_env variable the
    spec's env extends, not replaces). dp 1, a wildcard host and a host name: nothing."""
    from kvlab.engines import get_adapter
    from kvlab.engines.sglang import BIND_HOST_ENV, BIND_HOST_SHIM, bind_host_env
    from kvlab.engines.spec import EngineSpec
    from kvlab.server import EngineServer

    monkeypatch.setenv("PYTHONPATH", "/inherited")
    spec = EngineSpec(**{**SGLANG, "dp": 2})
    env = bind_host_env(spec)
    assert env == {"PYTHONPATH": f"{BIND_HOST_SHIM}:{COMPAT}", BIND_HOST_ENV: "127.0.0.1"}
    assert get_adapter("sglang").bind_env(spec, 30000, "/tmp/r")["PYTHONPATH"] == env["PYTHONPATH"]
    flag = EngineSpec(**{**SGLANG, "env": {}, "extra_args": [*SGLANG["extra_args"], "--dp-size=2"]})
    assert bind_host_env(flag)["PYTHONPATH"] == f"{BIND_HOST_SHIM}:/inherited"
    for other in ({}, {"dp": 2, "host": "0.0.0.0"}, {"dp": 2, "host": "::"}, {"dp": 2, "host": "example.org"}):
        assert bind_host_env(EngineSpec(**{**SGLANG, **other})) == {}
    server = EngineServer(spec, Path("/nonexistent/s.log"))
    server.port = 30000
    launched = server._env()
    assert (launched["PYTHONPATH"], launched[BIND_HOST_ENV]) == (env["PYTHONPATH"], "127.0.0.1")


@pytest.mark.engine_env
@pytest.mark.full  # kvlab's side (the fix first on the path, its host set) is the default test above; this one, in
# SGLang's own environment, matters when the lock changes
def test_the_bind_host_fix_binds_the_dp_controller_s_port_placeholder_on_the_served_host(probes):
    """In the SGLang environment, the bind_port the data-parallel controller calls (its own import of it) binds
    every interface without kvlab's fix and the served host with it, and the CPU fix after it on the path still
    applies (sgl_kernel imports on a machine without libcuda)."""
    fixed = probes["bind"]
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert fixed.stdout.split()[-1] == "127.0.0.1"
    bare = probes["fixed"]  # the CPU fix alone: SGLang's own placeholder
    assert bare.returncode == 0, bare.stderr[-3000:]
    assert bare.stdout.split()[-1] in ("0.0.0.0", "::"), "SGLang binds its placeholder on one host now: drop the fix"


def _write(tmp_path, name: str, engines: dict, workload: dict, matrix: dict, retry: dict | None = None):
    spec = {
        "name": name,
        "hardware": "CPU (test)",
        "device": "cpu",
        "engines": engines,
        "workload": workload,
        "matrix": matrix,
        "warmup": True,
        "retry": retry or {"max_attempts": 1, "retry_on": []},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _keyed_server_checks(tag: str, key: str) -> None:
    """While this test's keyed SGLang server runs: no process on this machine shows the key on its command line,
    the private key file is gone, and a request without the key is refused while one with it is served."""
    import tempfile
    from pathlib import Path

    shown = [p.pid for p in engine_processes(key)]  # any process whose command line holds the key
    assert not shown, f"the key is on the command line of {shown}"
    left = [f for f in Path(tempfile.gettempdir()).glob("kvlab-key-*") if holds_secret(f.read_text(), key)]
    assert not left, left  # the key file is removed once the server is up
    (port,) = [rec["port"] for rec in server_records(tag)]
    url, body = f"http://127.0.0.1:{port}/v1/completions", {"model": tag, "prompt": [1, 2, 3], "max_tokens": 2}
    assert (_post(url, body)[0], _post(url, body, {"Authorization": f"Bearer {key}"})[0]) == (401, 200)


def _assert_no_form_of(key: str, data_dir) -> None:
    """No form of ``key`` (kvlab.engines.spec.secret_forms) in any file under ``data_dir``: its bytes, and every text
    cell of a Parquet file (compressed, so its bytes alone prove nothing)."""
    assert len(secret_forms(key)) >= 5  # raw, repr (backslash doubled, twice), JSON, URL-encoded
    files = [f for f in data_dir.rglob("*") if f.is_file()]
    assert any(f.suffix == ".parquet" for f in files) and any(f.suffix == ".log" for f in files)
    for f in files:
        assert not holds_secret(f.read_bytes().decode("utf-8", errors="replace"), key), f
        if f.suffix == ".parquet":
            frame = pl.read_parquet(f)
            for col in (c for c, t in frame.schema.items() if t == pl.String):
                assert not any(holds_secret(v, key) for v in frame[col].drop_nulls()), (f, col)


LONG = 600  # output tokens of the run whose scheduler is killed at its first chunk (64 + 600 fit max_model_len
# 1,024): ~600 steps remain when the kill is sent from the client at that chunk. 600, not 300: vLLM's engine once finished 900 steps (about 3 s) before a client starved
# by the other pass read its first chunk; PyTorch SGLang takes about 1.5 times vLLM's time per step here (TPOT 4.2
# against 2.8 ms, docs/performance.md), so 600 of its steps last about as long


@pytest.mark.engine
def test_counters_equal_client_counts_radix_hits_are_token_exact_and_a_killed_scheduler_is_a_crash(
    tmp_path, monkeypatch, sglang_python, tiny_model
):
    """Per run, SGLang's /metrics deltas equal the client's token counts exactly; with a 500-token shared prefix
    sent one request at a time, every request after the first reuses exactly 500 tokens (client and server
    agree); the distinct-prompt run that follows hits nothing, so the cache was flushed in between. The server is
    keyed: SGLang reads the key from kvlab's private --config file, never from argv (checked while it runs, between
    the first two runs: the extra request then is flushed with the rest and counted in no run's deltas).
    Then SGLang's scheduler is SIGKILLed at the first chunk of a 600-token run, the sweep's last: a crash with both
    its requests recorded, and no process (not even a zombie) is left. Not retried: the retry of a crash on a new
    server is the runner's, the same for every engine, and tested on vLLM (tests/test_runner.py); retrying here cost a
    second SGLang start, about 35 s of make test's engine pass (until 2026-12-06). The key holds a backslash, a
    quote and a slash (issue 40): SGLang logs its arguments as a dict, so the key's repr() with the backslash doubled,
    and no form of it (raw, repr, JSON, URL-encoded) is in any file under the data folder."""
    tag = f"kvlab-test-{uuid.uuid4().hex[:8]}"
    key = f'sk-kvlab-{uuid.uuid4().hex}\\path"q/x'
    monkeypatch.setenv("KVLAB_TEST_SGLANG_KEY", key)
    batch = {"workload.kind": "fixed_batch", "workload.shared_fraction": None, "workload.concurrency": None}
    study = [
        {"workload.kind": "shared_prefix", "workload.shared_fraction": 0.5, "workload.concurrency": 1},
        batch,
        {**batch, "workload.batch_size": 2, "workload.prompt_tokens": 64, "workload.output_tokens": LONG},
    ]
    path = _write(
        tmp_path,
        "sgl",
        {"sglang": {**SGLANG, "served_model_name": tag, "api_key_env": "KVLAB_TEST_SGLANG_KEY"}},
        {"kind": "fixed_batch", "batch_size": 4, "prompt_tokens": 1000, "output_tokens": 12},
        {"study": study},
    )
    checked: list[str] = []

    def on_run(run, status):
        if not checked:
            _keyed_server_checks(tag, key)
            assert_listens_on_loopback_only(tag)  # the scheduler's own ports too (issue 40)
            checked.append(status)

    killed = _kill_engine_when_streaming(monkeypatch, tag, LONG, only="scheduler")
    res = Campaign(ExperimentSpec.load(path), tmp_path, on_run=on_run).execute(runner.LocalExecutor())
    assert checked == ["ok"]
    assert killed, "no request of the long run streamed a token"
    assert (res.ok, res.failed, res.server_starts) == (2, 1, 1)
    logs = [log.read_text() for d in store.run_dirs(tmp_path) for log in d.glob("server-attempt*.log")]
    assert any("'api_key': '***'" in text for text in logs)  # SGLang logged the repr() form, and it was redacted
    _assert_no_form_of(key, tmp_path)

    runs = store.load_runs(tmp_path)
    long = runs.filter(pl.col("output_tokens") == LONG).row(0, named=True)
    assert (long["status"], long["failure_cause"], long["attempts"]) == ("failed", "crash", 1), (killed, long)
    assert long["requests_ok"] + long["requests_failed"] == 2 and long["requests_failed"] >= 1  # none vanishes

    runs = runs.filter(pl.col("output_tokens") == 12)
    reqs = store.load_requests(tmp_path).join(runs.select("run_id", "mode"), on="run_id")
    assert reqs.height == 8 and (reqs["status"] == "ok").all()
    assert reqs["prompt_tokens"].to_list() == [1000] * 8 and reqs["output_tokens"].to_list() == [12] * 8
    assert runs["engine_version"].to_list() == ["0.5.23"] * 2
    assert runs["kv_budget_bytes"].to_list() == [16 * 2**20] * 2
    for r in runs.iter_rows(named=True):
        assert r["server_prompt_tokens"] == 4000 and r["server_generation_tokens"] == 48, r
    cached = {
        m: reqs.filter(pl.col("mode") == m).sort("request_index")["cached_tokens"].to_list()
        for m in ("shared_prefix", "fixed_batch")
    }
    assert cached["shared_prefix"] == [0, 500, 500, 500]
    assert cached["fixed_batch"] == [0, 0, 0, 0]  # flushed: nothing left from the shared-prefix run
    by_mode = {r["mode"]: r for r in runs.iter_rows(named=True)}
    assert by_mode["shared_prefix"]["server_prefix_cache_hits"] == 1500  # the server counts the same hits
    assert by_mode["fixed_batch"]["server_prefix_cache_hits"] == 0
    assert not engine_processes(tag)
    assert not [c for c in psutil.Process().children(recursive=True) if c.status() == psutil.STATUS_ZOMBIE]
