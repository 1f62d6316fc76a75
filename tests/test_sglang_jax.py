"""sglang-jax (SGLang's JAX runtime) on CPU, for real: kvlab's one patch to it, exact token counts, token-exact
radix-cache hits beside vLLM's whole blocks, an engine killed mid-run, and no process (not even a zombie) left."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import uuid
from pathlib import Path

import polars as pl
import psutil
import pytest
import yaml
from test_runner import _kill_engine_when_streaming, engine_processes

from kvlab import runner, store
from kvlab.campaign import Campaign
from kvlab.paths import ROOT
from kvlab.experiment import ExperimentSpec

PATCH = ROOT / "kvlab" / "engines" / "envs" / "sglang-jax-cpu.patch"
PATCHED_FILE = "sgl_jax/srt/mem_cache/memory_pool.py"

SGLANG_JAX = {
    "name": "sglang-jax",
    "launch": [".engines/sglang-jax/bin/python"],
    "model": "data/models/tiny-llama",
    "max_model_len": 1024,
    "kv_cache_bytes": 16 * 2**20,
    "startup_timeout_s": 300,
    "extra_args": ["--device", "cpu", "--max-running-requests", "4"],
    "env": {"JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": ".engines/sglang-jax/jax-cache"},
}


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


# ----------------------------------------------------------------------------- the patch


@pytest.mark.engine_env
def test_the_patch_is_applied_and_still_needed(sglang_jax_python, tmp_path):
    """The installed file is the pinned wheel's file plus exactly kvlab's patch, and the wheel still lacks the fix.

    Reversing the patch must give back, byte for byte, the file the wheel shipped (its sha256 in the
    wheel's RECORD): so the patch applies to the pinned release. That original must still stack K and V
    without resharding (the bug): when a release fixes it, this test says the patch is no longer needed.
    """
    site = _site_packages(sglang_jax_python)
    installed = site / PATCHED_FILE
    copy = tmp_path / PATCHED_FILE
    copy.parent.mkdir(parents=True)
    copy.write_bytes(installed.read_bytes())
    rev = subprocess.run(
        ["patch", "-p1", "-R", "--batch", "--no-backup-if-mismatch", "-d", str(tmp_path)],
        stdin=PATCH.open("rb"),
        capture_output=True,
        text=True,
    )
    assert rev.returncode == 0, f"kvlab's patch is not applied to {installed}: {rev.stdout}{rev.stderr}"
    original = copy.read_bytes()

    record = next(site.glob("sglang_jax-*.dist-info/RECORD")).read_text()
    line = next(ln for ln in record.splitlines() if ln.startswith(PATCHED_FILE + ","))
    shipped = line.split(",")[1].removeprefix("sha256=")
    digest = base64.urlsafe_b64encode(hashlib.sha256(original).digest()).rstrip(b"=").decode()
    assert digest == shipped, "the installed file differs from the pinned wheel's by more than kvlab's patch"

    merge_kv = original.decode().split("def merge_kv", 1)[1].split("\ndef ", 1)[0]
    assert "jnp.stack([k, v], axis=2)" in merge_kv
    assert "reshard" not in merge_kv, "the pinned sglang-jax reshards K/V itself: drop kvlab's patch"
    assert "reshard" in installed.read_text().split("def merge_kv", 1)[1].split("\ndef ", 1)[0]


# ----------------------------------------------------------------------------- real engines


def _write(tmp_path: Path, name: str, engines: dict, workload: dict, matrix: dict) -> Path:
    spec = {
        "name": name,
        "hardware": "CPU (test)",
        "device": "cpu",
        "engines": engines,
        "workload": workload,
        "matrix": matrix,
        "warmup": True,
        "retry": {"max_attempts": 1, "retry_on": []},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _no_process_left(tag: str) -> None:
    """Nothing whose command line carries the test's tag, and no zombie child of this process."""
    assert not engine_processes(tag)
    assert not [c for c in psutil.Process().children(recursive=True) if c.status() == psutil.STATUS_ZOMBIE]


LONG = 900  # output tokens of the run that is killed at its first chunk; sglang-jax streams ~20-90 tokens/s here,
# so the kill lands with many seconds of the run still to come (prompt + output stay under max_model_len 1,024)


@pytest.mark.engine
@pytest.mark.full  # the opt-in JAX runtime; PyTorch SGLang's radix hits and killed scheduler run by default
def test_token_counts_radix_hits_against_vllm_blocks_and_a_killed_engine(
    tmp_path, monkeypatch, sglang_jax_python, tiny_model, real_vllm
):
    """Exact usage counts; one shared 500-token prefix: sglang-jax reuses all 500 tokens, vLLM 3 blocks of 128 (its
    side: the ``blocks`` experiment of the shared real-vLLM sweep, the same workload and steps on a server with
    prefix caching on: tests/real_vllm.py). Then sglang-jax is SIGKILLed at the first chunk of a 900-token run: a
    crash (not retried) with every request recorded, and the next run gets a new server; nothing of it is left, not
    even a zombie."""
    from real_vllm import BLOCKS_STEPS, BLOCKS_WORKLOAD

    tag = f"kvlab-test-{uuid.uuid4().hex[:8]}"
    engines = {
        # a decode line at every step: prefill lines count only the batch already running (0 when all 4 requests
        # are admitted in one prefill, as a CI run found), and every 40th step alone may never come in 12 tokens
        "sglang-jax": {
            **SGLANG_JAX,
            "served_model_name": f"{tag}-sgljax",
            "extra_args": [*SGLANG_JAX["extra_args"], "--decode-log-interval", "1"],
        },
    }
    batch, shared = BLOCKS_STEPS
    short = {**batch, "workload.batch_size": 2, "workload.prompt_tokens": 64}
    steps = [batch, shared, {**short, "workload.output_tokens": LONG}, {**short, "workload.output_tokens": 8}]
    path = _write(tmp_path, "sgljax", engines, BLOCKS_WORKLOAD, {"step": steps})
    killed = _kill_engine_when_streaming(monkeypatch, f"{tag}-sgljax", LONG)
    res = Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
    assert killed, "no request of the long run streamed a token"
    runs = store.load_runs(tmp_path)
    outcomes = runs.select("engine", "mode", "output_tokens", "status", "failure_cause", "notes").rows()
    assert (res.ok, res.failed, res.server_starts) == (3, 1, 2), outcomes  # twice: the kill
    by_tokens = {r["output_tokens"]: r for r in runs.iter_rows(named=True)}
    # the killed run: a crash, both requests recorded, at least one failed; the next run on a new server
    assert (by_tokens[LONG]["status"], by_tokens[LONG]["failure_cause"]) == ("failed", "crash")
    assert by_tokens[LONG]["requests_ok"] + by_tokens[LONG]["requests_failed"] == 2
    assert by_tokens[LONG]["requests_failed"] >= 1
    assert by_tokens[8]["status"] == "ok"

    vllm = store.load_runs(real_vllm.data).filter(pl.col("experiment") == "blocks")
    runs = pl.concat([runs.filter(pl.col("output_tokens") == 12), vllm], how="diagonal_relaxed")
    reqs = pl.concat([store.load_requests(tmp_path), store.load_requests(real_vllm.data)], how="diagonal_relaxed").join(
        runs.select("run_id", "engine", "mode"), on="run_id"
    )
    assert sorted(runs["engine"]) == ["sglang-jax", "sglang-jax", "vllm", "vllm"]
    assert reqs.height == 16 and (reqs["status"] == "ok").all()
    assert reqs["prompt_tokens"].to_list() == [1000] * 16 and reqs["output_tokens"].to_list() == [12] * 16
    # token-bearing chunks: at most one per token (an engine may put several tokens in one chunk)
    assert reqs["chunks"].is_between(1, 12).all()

    sgl = runs.filter(pl.col("engine") == "sglang-jax")
    assert sgl["engine_version"].to_list() == ["0.1.0rc0"] * 2
    # no /metrics: server counters are not available (null), never 0, and the run says why
    assert sgl["server_prompt_tokens"].null_count() == 2 and sgl["server_prefix_cache_hits"].null_count() == 2
    assert all("serves no /metrics" in n for n in sgl["notes"].to_list())
    # ... but its telemetry during the batch comes from the scheduler lines of the log kvlab keeps
    ids = sgl["run_id"].to_list()
    info = store.load_telemetry_info(tmp_path).filter(pl.col("run_id").is_in(ids))
    assert info.height == 2 and info["available"].all(), info.rows()
    tele = store.load_telemetry(tmp_path).filter(pl.col("run_id").is_in(ids) & pl.col("error").is_null())
    assert tele.height >= 2 and tele["requests_running"].null_count() == 0 and tele["kv_cache_usage"].null_count() == 0
    assert tele["requests_running"].max() >= 1

    def cached(engine: str, mode: str) -> list[int]:
        sel = reqs.filter((pl.col("engine") == engine) & (pl.col("mode") == mode)).sort("request_index")
        return sel["cached_tokens"].to_list()

    # distinct prompts: nothing cached (sglang-jax omits the 0; kvlab records it as 0 for successful requests)
    assert cached("sglang-jax", "fixed_batch") == [0, 0, 0, 0]
    assert cached("vllm", "fixed_batch") == [0, 0, 0, 0]
    # one request at a time, the first computes the prefix: radix tree token-exact, vLLM whole 128-token blocks
    assert cached("sglang-jax", "shared_prefix") == [0, 500, 500, 500]
    assert cached("vllm", "shared_prefix") == [0, 384, 384, 384]
    _no_process_left(tag)


@pytest.mark.engine_env
def test_the_sglang_jax_environment_is_separate(sglang_jax_python):
    """kvlab never imports an engine: sgl_jax lives only in its own venv (Python >= 3.12)."""
    out = subprocess.run(
        [str(sglang_jax_python), "-c", "import sys, sgl_jax; print(sys.version_info[:2] >= (3, 12))"],
        capture_output=True,
        text=True,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]
    here = subprocess.run([sys.executable, "-c", "import sgl_jax"], capture_output=True, text=True)
    assert here.returncode != 0
