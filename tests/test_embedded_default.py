"""The README's main command on this machine: the embedded CPU experiment for real, then the reports
built from it (and a second sweep reuses every finished run)."""

import shutil
import subprocess
import sys

import polars as pl
import pytest

from kvlab import store
from kvlab.paths import DATA_DIR, EXPERIMENTS_DIR, ROOT

pytestmark = pytest.mark.engine
EXPERIMENT = EXPERIMENTS_DIR / "cpu_long_context.yaml"


def kvlab(*args, timeout=900):
    out = subprocess.run([sys.executable, "-m", "kvlab.cli", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def measured(tmp_path_factory, engine_python, tiny_model):
    data = tmp_path_factory.mktemp("data")
    for sub in ("reference", "catalog"):
        shutil.copytree(DATA_DIR / sub, data / sub)
    kvlab("sweep", str(EXPERIMENT), "--data-dir", str(data))
    return data


def test_every_run_of_the_embedded_experiment_succeeds(measured):
    runs = store.load_runs(measured).filter(pl.col("source") == "measured")
    assert runs.height == 12 and (runs["status"] == "ok").all()
    assert (runs["server_prompt_tokens"] == runs["served_prompt_tokens"]).all()
    assert (runs["server_generation_tokens"] == runs["batch_size"] * runs["output_tokens"]).all()
    mean = runs.group_by("context_label", "mem_util").agg(pl.col("batch_time_s").mean())
    t = {(c, u): v for c, u, v in mean.iter_rows()}
    assert t[("200K", 0.92)] > t[("64K", 0.92)] and t[("200K", 0.95)] > t[("64K", 0.95)]


def test_second_sweep_reuses_finished_runs(measured):
    out = kvlab("sweep", str(EXPERIMENT), "--data-dir", str(measured))
    assert "0 run(s) to do, 12 finished run(s) reused" in out


def test_reports_show_the_measured_runs(measured, tmp_path):
    kvlab("report", "--out", str(tmp_path), "--only", "01", "--only", "02", "--only", "03",
          "-p", f"data_dir={measured}")
    r1 = (tmp_path / "01_context_scaling.html").read_text()
    r2 = (tmp_path / "02_throughput_decay.html").read_text()
    r3 = (tmp_path / "03_memory_utilisation.html").read_text()
    assert "No measured runs" not in r1 + r2 + r3
    assert "measured (CPU" in r1 and "batch time grows" in r1
    assert "measured, vllm: from 64K to 200K batch time grows" in r2
    assert "vllm at <strong>0.92</strong>, 200K: 3/3 runs succeeded" in r3
    assert (tmp_path / "index.html").exists()
