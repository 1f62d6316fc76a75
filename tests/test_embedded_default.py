"""The README's main command on this machine: the embedded CPU experiment's quick form (what `make report`
sweeps) for real with both engines, vLLM's CPU build and PyTorch SGLang on CPU, then the reports built from it (and a
second sweep reuses every finished run).

By default the sweep holds the quick form's three 0.92 points (64K, 128K and 200K stand-ins, two server starts). Its
0.95 point, the memory study's second setting, is two more starts (about 45 s of make test's engine pass, and 80 s of
CPU, on the 2-vCPU EPYC) that show no other mechanism: a start with a larger explicit KV budget, whose mapping from
the setting tests/test_memory_mirror.py and the engines' own parsers check. `make test FULL=1` sweeps it into the same
folder, reusing the six runs, and reads report 03 from both settings; `make report` always measures it."""

import shutil
import subprocess
import sys

import polars as pl
import pytest
import yaml

from kvlab import host, store
from kvlab.paths import DATA_DIR, EXPERIMENTS_DIR, ROOT

pytestmark = pytest.mark.engine
EXPERIMENT = EXPERIMENTS_DIR / "cpu_long_context.yaml"
#: The memory study's setting that only FULL=1 sweeps here
SECOND_SETTING = 0.95


def kvlab(*args, timeout=900):
    out = subprocess.run(
        [sys.executable, "-m", "kvlab.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + out.stderr


def first_setting(folder) -> str:
    """Write into ``folder`` the embedded experiment as shipped but its quick form without the second setting's point:
    the same runs, under the same keys (a run's key is its engine, workload and repeat, not the file's other points)."""
    spec = yaml.safe_load(EXPERIMENT.read_text())
    points = spec["quick"]["matrix"]["point"]
    spec["quick"]["matrix"]["point"] = [p for p in points if p["engine.mem_util"] != SECOND_SETTING]
    assert len(spec["quick"]["matrix"]["point"]) == len(points) - 1 == 3
    path = folder / EXPERIMENT.name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, engine_python, sglang_python, tiny_model):
    data = tmp_path_factory.mktemp("data")
    for sub in ("reference", "catalog"):
        shutil.copytree(DATA_DIR / sub, data / sub)
    kvlab("sweep", "--quick", first_setting(data), "--data-dir", str(data))
    return data


def test_every_run_of_the_embedded_experiment_succeeds(measured):
    runs = store.load_runs(measured).filter(pl.col("source") == "measured")
    assert runs.height == 6 and (runs["status"] == "ok").all()  # 64K, 128K, 200K at 0.92, per engine
    assert sorted(runs["engine"].unique()) == ["sglang", "vllm"]
    # every prompt and output token accounted for by the server's usage
    assert (runs["served_prompt_tokens"] == runs["batch_size"] * runs["prompt_tokens"]).all()
    vllm, sgl = runs.filter(pl.col("engine") == "vllm"), runs.filter(pl.col("engine") == "sglang")
    assert (vllm["server_prompt_tokens"] == vllm["served_prompt_tokens"]).all()
    assert (vllm["server_generation_tokens"] == vllm["batch_size"] * vllm["output_tokens"]).all()
    # SGLang's own /metrics deltas equal what the client counted, exactly (prompt and generated tokens)
    assert (sgl["server_prompt_tokens"] == sgl["served_prompt_tokens"]).all()
    assert (sgl["server_generation_tokens"] == sgl["batch_size"] * sgl["output_tokens"]).all()
    assert sgl["engine_version"].to_list() == ["0.5.23"] * sgl.height
    # the whole batch's usage (warm-up included) is what the server's counter deltas cover, exactly, both engines
    assert (runs["batch_prompt_tokens"] == runs["server_prompt_tokens"]).all()
    assert (runs["batch_output_tokens"] == runs["server_generation_tokens"]).all()
    # SGLang's counters exported only once incremented (cached tokens, retractions) read 0, never null, when absent
    assert sgl["server_prefix_cache_hits"].null_count() == 0 and sgl["server_preemptions"].null_count() == 0
    assert (sgl["server_preemptions"] == 0).all()  # 4 requests far inside the KV budget: nothing retracted
    # the run's rates: its requests over the batch time, the output tokens over the same time
    assert (runs["requests_ok"] == runs["batch_size"]).all()
    assert runs["requests_per_s"].to_list() == pytest.approx(
        (runs["batch_size"] / runs["batch_time_s"]).to_list(), rel=1e-9
    )
    assert runs["output_tokens_per_s"].to_list() == pytest.approx(
        (runs["batch_size"] * runs["output_tokens"] / runs["batch_time_s"]).to_list(), rel=1e-9
    )
    # both compute in bfloat16 only where this CPU does so natively (dtype: bfloat16-if-native)
    native = {"bfloat16" if host.native_bf16() else "float32"}
    assert set(vllm["dtype"]) == native and set(sgl["dtype"]) == native
    # Not asserted: that a longer context is slower to its first token. One run a side beside the other pass cannot
    # carry a direction (kvlab's own verdict rule): under make test on 2026-12-06 vLLM's 64K run (4 x 960 prompt
    # tokens) took 248 ms to its first token and its 200K run (4 x 3,136) 198 ms, against 50 and 202 ms alone, as
    # SGLang's once took 847 against 415 ms. The growth is what `make report` measures alone (report 01); here each
    # run's prompt and generated tokens are checked exactly above, and every time is positive:
    assert (runs["ttft_mean_ms"] > 0).all() and (runs["batch_time_s"] > 0).all()


def test_second_sweep_reuses_finished_runs(measured):
    out = kvlab("sweep", "--quick", str(measured / EXPERIMENT.name), "--data-dir", str(measured))
    assert "0 runs to do, 6 finished runs reused" in out


def test_reports_show_the_measured_runs(measured, tmp_path):
    """`kvlab report` builds from the measured folder (one report, 02, and the index), and the studies of the
    article's speed questions answer from the measured runs, as typed results (what the pages show: test_notebooks);
    the memory study, one setting measured, says it has no comparison rather than drawing one."""
    from typer.testing import CliRunner

    from kvlab import cli, reports, studies

    built = CliRunner().invoke(
        cli.app, ["report", "--out", str(tmp_path), "--only", "02", "-p", f"data_dir={measured}"]
    )
    assert built.exit_code == 0, built.output[-3000:]  # in this process: the console script is test_report_parameters'

    listed = {r["notebook"]: r for r in reports.read_index(tmp_path / "index.json")}
    assert listed["02_throughput_decay.ipynb"]["answer"]["sentences"] and (tmp_path / "index.html").exists()
    result = {p: studies.compute_report(p, measured) for p in ("01", "02", "03")}  # the notebooks' defaults
    for p in ("01", "02"):  # answered from the runs, not the no-runs sentence
        said = " ".join(result[p].answer.sentences)
        assert "No run was measured" not in said and "No run on this host" not in said, p
    # both engines' measured growth from 64K to 200K (02): one run a side
    decay = result["02"].frames["decay_measured"]
    assert sorted(decay["engine"]) == ["sglang", "vllm"] and set(decay["n_from"]) == set(decay["n_to"]) == {1}
    assert "No run on this host compares two memory settings" in " ".join(result["03"].answer.sentences)
    # the provenance says what ran, and sglang-jax's note appears only where sglang-jax ran
    prov = reports.provenance(measured, reports.notebooks(["01"])[0], None)
    assert any(e.startswith("SGLang 0.5.23 (CPU, torch-native kernels") for e in prov["engines"]), prov["engines"]
    assert not any("sglang-jax" in e for e in prov["engines"])


@pytest.mark.full  # two more starts that show no other mechanism (the module's docstring)
def test_the_second_setting_is_swept_beside_the_first_and_report_03_compares_them(measured):
    """The shipped file's quick form on the same folder: its 0.95 point measured with both engines, the six 0.92
    runs reused, and report 03 reads each engine's run at each setting (one run a side)."""
    out = kvlab("sweep", "--quick", str(EXPERIMENT), "--data-dir", str(measured))
    assert "2 runs to do, 6 finished runs reused" in out
    runs = store.load_runs(measured).filter(pl.col("source") == "measured")
    assert runs.height == 8 and (runs["status"] == "ok").all()
    assert (runs["served_prompt_tokens"] == runs["batch_size"] * runs["prompt_tokens"]).all()
    assert (runs["batch_prompt_tokens"] == runs["server_prompt_tokens"]).all()
    from kvlab import studies

    memory = studies.compute_report("03", measured)
    assert not any("No run on this host" in t for t in memory.answer.sentences), memory.answer.sentences
    mem = memory.frames["stats"].filter(pl.col("context_tokens") == 3200)
    assert sorted(mem.select("engine", "mem_util", "runs", "runs_ok").rows()) == [
        ("sglang", 0.92, 1, 1),
        ("sglang", 0.95, 1, 1),
        ("vllm", 0.92, 1, 1),
        ("vllm", 0.95, 1, 1),
    ]
