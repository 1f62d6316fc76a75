"""The plan step: validation writes nothing; planning a sweep makes kvlab's tiny model, then validates."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
import yaml

from kvlab import plan, tinymodel
from kvlab.engines import get_adapter
from kvlab.experiment import ExperimentSpec, SpecError
from kvlab.paths import EXPERIMENTS_DIR, ROOT


def _spec(tmp_path, model: str) -> str:
    data = {
        "name": "planned",
        "hardware": "CPU",
        "device": "cpu",
        "scale_factor": 1,
        "engines": {
            "vllm": {"name": "vllm", "launch": [".engines/vllm/bin/python"], "model": model, "max_model_len": 1024}
        },
        "workload": {"kind": "fixed_batch", "batch_size": 1, "context_tokens": 256, "output_tokens": 16},
    }
    path = tmp_path / "planned.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_validation_writes_nothing_and_the_plan_step_makes_the_tiny_model(tmp_path, monkeypatch):
    where = tmp_path / "models" / "tiny"
    monkeypatch.setattr(tinymodel, "DEFAULT_PATH", where)
    path = _spec(tmp_path, str(where))
    with pytest.raises(SpecError, match=f"engines.vllm.model: local model folder does not exist: {where}"):
        ExperimentSpec.load(path)
    assert not where.exists()  # validating did not make it
    spec = plan.load(path)
    assert (where / "config.json").is_file()
    assert spec == ExperimentSpec.load(path)  # once made, plain validation passes too
    assert plan.make_local_models(spec) == [where]


def test_the_plan_step_leaves_other_models_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(tinymodel, "DEFAULT_PATH", tmp_path / "tiny")
    spec = plan.load(_spec(tmp_path, "org/hub-model"))
    assert plan.make_local_models(spec) == []
    assert not (tmp_path / "tiny").exists()


def test_starts_overlap_only_on_cpu_with_explicit_kv_budgets():
    from kvlab.paths import EXPERIMENTS_DIR
    from kvlab.experiment import expand

    def groups(name):
        return [g[0] for _, g in plan.by_server(expand(ExperimentSpec.load(EXPERIMENTS_DIR / f"{name}.yaml")))]

    cpu = groups("cpu_classification")
    assert plan.starts_may_overlap(cpu[0], cpu[1])
    gpu = groups("gpu_classification_70b")  # the GPUs are the server's
    assert not plan.starts_may_overlap(gpu[0], gpu[1]) and not plan.starts_may_overlap(cpu[0], gpu[0])
    reserve = groups("host_memory_reserve")  # sizes its KV cache from host memory: never beside another server
    assert not plan.starts_may_overlap(reserve[0], reserve[1])
    text = plan.dry_run_text(ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_classification.yaml"))
    assert text.count("launched while the previous server starts, paused while its runs are measured") == 1
    assert "launched while" not in plan.dry_run_text(
        ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_classification.yaml"), overlap_starts=False
    )


def _keyed(engine: str, env: dict | None = None) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "keyed",
            "hardware": "CPU",
            "device": "cpu",
            "scale_factor": 1,
            "engines": {
                engine: {
                    "name": engine,
                    "launch": ["python"],
                    "model": "org/m",
                    "max_model_len": 1024,
                    "api_key_env": "KVLAB_KEY",
                    "env": {"JAX_PLATFORMS": "cpu", **(env or {})},
                }
            },
            "workload": {"kind": "fixed_batch", "batch_size": 1, "context_tokens": 256, "output_tokens": 16},
        }
    )


def test_the_dry_run_shows_how_each_engine_is_given_its_key():
    """vLLM reads VLLM_API_KEY, SGLang a private --config file; sglang-jax only --api-key, which `ps` shows: the
    dry run says so. The key itself appears only as a reference to the variable that holds it."""
    vllm = plan.dry_run_text(_keyed("vllm"))
    assert "VLLM_API_KEY=$KVLAB_KEY" in vllm and "--api-key" not in vllm and "warning" not in vllm
    sglang = plan.dry_run_text(_keyed("sglang"))
    assert "--config $KEYFILE" in sglang and "--api-key" not in sglang
    assert "# KEYFILE: a new file of mode 0600 holding 'api-key: $KVLAB_KEY', removed once the server is up" in sglang
    jax = plan.dry_run_text(_keyed("sglang-jax"))
    assert "--api-key $KVLAB_KEY" in jax
    assert (
        "# warning: sglang-jax reads its API key only from --api-key: while this server runs, `ps` shows the key "
        "to every user of this machine"
    ) in jax


def test_the_dry_run_redacts_secret_looking_env_values(monkeypatch):
    from kvlab.engines.vllm import VLLMAdapter

    monkeypatch.setattr(VLLMAdapter, "env_overrides", lambda self, spec: {"HF_TOKEN": "hf_x", "A": "b"})
    text = plan.dry_run_text(_keyed("vllm"))
    assert "HF_TOKEN='***'" in text and "hf_x" not in text and "A=b" in text


def test_the_dry_run_shows_what_keeps_each_engines_own_ports_on_its_host():
    """Every engine is told the interface of its host (127.0.0.1: the loopback's) for Gloo and NCCL; SGLang's workers
    meet through a file, not a TCP store on every interface, unless the spec makes it one node of several; vLLM gets
    VLLM_HOST_IP; a wildcard host names no interface; the spec's env wins (issue 40)."""
    from kvlab import host

    lo = host.interface_of("127.0.0.1")
    assert lo is not None  # every machine kvlab runs on has a loopback
    gloo, nccl = f"GLOO_SOCKET_IFNAME={lo} JAX_PLATFORMS=cpu", f"NCCL_SOCKET_IFNAME={shlex.quote('=' + lo)}"
    vllm, sglang, jax = (plan.dry_run_text(_keyed(e)) for e in ("vllm", "sglang", "sglang-jax"))
    assert (
        f"env {gloo} {nccl} TMPDIR=$ENGINE_TMPDIR VLLM_API_KEY=$KVLAB_KEY VLLM_HOST_IP=127.0.0.1 "
        "VLLM_RPC_BASE_PATH=$ENGINE_TMPDIR \\\n"
    ) in vllm
    assert (
        f"env {gloo} MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT {nccl} "
        "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE=file://$RENDEZVOUS TMPDIR=$ENGINE_TMPDIR \\\n"
    ) in sglang
    assert "# RENDEZVOUS: a new file name in kvlab's private state folder" in sglang
    assert f"env {gloo} {nccl} TMPDIR=$ENGINE_TMPDIR \\\n" in jax and "RENDEZVOUS" not in jax
    assert "# ENGINE_TMPDIR: a new folder of this start's own (mode 0700)" in jax  # issue 56, item 6
    spec = _keyed("sglang").engines["sglang"]
    adapter = get_adapter("sglang")
    several = spec.model_copy(update={"extra_args": ["--nnodes=2"]})
    assert "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE" not in adapter.bind_env(several, 30000, "/x")
    # a wildcard host: no interface to name; SGLang's workers still meet through the file (a port fewer)
    assert adapter.bind_env(spec.model_copy(update={"host": "0.0.0.0"}), 30000, "/x") == {
        "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE": "file:///x",
        "MASTER_ADDR": "0.0.0.0",
        "MASTER_PORT": "30000",
    }
    assert get_adapter("vllm").bind_env(spec.model_copy(update={"name": "vllm", "host": "0.0.0.0"}), 1, "/x") == {}
    own = plan.dry_run_text(_keyed("vllm", {"GLOO_SOCKET_IFNAME": "x"}))
    assert "GLOO_SOCKET_IFNAME=x " in own and f"GLOO_SOCKET_IFNAME={lo}" not in own


def _make_plan(tmp_path, *args: str) -> list[str]:
    """The commands `make -n <args>` would run, in order, as in a fresh clone: the engine environments' folders are
    new ones under ``tmp_path`` (nothing built), so every environment's build is among them."""
    envs = {
        "VLLM_ENV": tmp_path / "vllm",
        "SGLANG_ENV": tmp_path / "sglang",
        "VLLM_CUDA_ENV": tmp_path / "vllm-cuda",
        "SGLANG_CUDA_ENV": tmp_path / "sglang-cuda",
    }
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", *args, *(f"{k}={v}" for k, v in envs.items())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def _at(lines: list[str], *parts: str) -> int:
    """The first line that holds every one of ``parts``."""
    found = [i for i, line in enumerate(lines) if all(p in line for p in parts)]
    assert found, f"no command holds {parts}:\n" + "\n".join(lines)
    return found[0]


def test_make_report_gpu_builds_the_cuda_environments_sweeps_the_gpu_files_then_builds_the_reports(tmp_path):
    """`make report GPU=1`, the GPU host's one command: the two locked CUDA environments, then a sweep of the
    b300_*.yaml experiments (in the documented order: long context, step fit, capacity), then the reports; no CPU
    environment and no CPU experiment. Plain `make report` stays the embedded default: the CPU environments and
    every cpu_*.yaml (cpu_trace's quick form included)."""
    gpu = _make_plan(tmp_path, "report", "GPU=1")
    files = ["b300_long_context.yaml", "b300_step_fit.yaml", "b300_capacity.yaml"]
    assert sorted(files) == sorted(p.name for p in EXPERIMENTS_DIR.glob("b300_*.yaml"))
    sweep = _at(gpu, ".venv/bin/kvlab sweep")
    assert gpu[sweep].partition(" || ")[0] == ".venv/bin/kvlab sweep --quick " + " ".join(
        f"data/experiments/{f}" for f in files
    )
    built = [_at(gpu, "-r kvlab/engines/envs/vllm-cuda.lock"), _at(gpu, "-r kvlab/engines/envs/sglang-cuda.lock")]
    assert f"--python {tmp_path / 'vllm-cuda'}/bin/python" in gpu[built[0]]
    assert max(built) < sweep < _at(gpu, ".venv/bin/kvlab report")
    assert not any("cpu.lock" in line or "cpu_" in line for line in gpu)
    full = _make_plan(tmp_path, "report", "GPU=1", "FULL=1")
    assert full[_at(full, ".venv/bin/kvlab sweep")].partition(" || ")[0] == ".venv/bin/kvlab sweep " + " ".join(
        f"data/experiments/{f}" for f in files
    )

    cpu = _make_plan(tmp_path, "report")
    sweep = _at(cpu, ".venv/bin/kvlab sweep")
    cpu_files = sorted(f"data/experiments/{p.name}" for p in EXPERIMENTS_DIR.glob("cpu_*.yaml"))
    assert cpu[sweep].partition(" || ")[0] == ".venv/bin/kvlab sweep --quick " + " ".join(cpu_files)
    assert (
        max(_at(cpu, "-r kvlab/engines/envs/vllm-cpu.lock"), _at(cpu, "-r kvlab/engines/envs/sglang-cpu.lock")) < sweep
    )
    assert sweep < _at(cpu, ".venv/bin/kvlab report")
    assert not any("cuda" in line or "b300_" in line for line in cpu)
