"""The preflight: what a sweep of an experiment needs on this host, checked before any engine starts (`kvlab check`,
and the start of `kvlab sweep`). A GPU experiment needs its GPUs (count, model and memory, from NVML); every engine
kvlab launches needs its environment to exist and report the release kvlab's adapters were written against, its
model folder (or a local copy of a hub model) with a config the adapter reads, and its fixed port free; the data
folder needs room. Each problem names the experiment file, the field and the fix.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvlab import gpu
from kvlab.campaign import MIN_FREE_BYTES, free_near
from kvlab.engines import SGLANG_JAX, VLLM, get_adapter
from kvlab.engines.registry import RELEASES
from kvlab.engines.sglang import kv_bytes_per_token
from kvlab.engines.spec import EngineSpec, is_local_path
from kvlab.paths import DATA_DIR, ROOT
from kvlab.experiment import ExperimentSpec

#: The GPUs kvlab's catalog knows, as an experiment's ``device.accelerator`` names them ('NVIDIA B300', or its key
#: 'B300'): NVML's device name must hold the same word, and the memory is checked against the catalog's
#: (data/catalog/gpus.csv).
CATALOG = ROOT / "data" / "catalog" / "gpus.csv"
#: How much of the catalog's memory NVML may report below it (NVML counts GiB of what datasheets count in GB, less
#: what the driver reserves: a 288 GB B300 reports about 268 GiB = 288 GB).
MEMORY_SLACK = 0.9
VERSION_TIMEOUT_S = 120

_SCRIPT = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for d in sys.argv[1:]:\n"
    "    try:\n"
    "        out[d] = m.version(d)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print('KVLAB-VERSIONS ' + json.dumps(out))\n"
)


@dataclass(frozen=True)
class Problem:
    """One thing a sweep of ``file`` would fail on: the ``field`` of the file it comes from, what is wrong, the fix."""

    file: str
    field: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.what}. Fix: {self.fix}"


@dataclass
class Report:
    """A preflight of one experiment: its problems (none: ready) and what was found (one line each)."""

    file: str
    problems: list[Problem]
    found: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _catalog() -> dict[str, tuple[str, int]]:
    """{catalog GPU id (e.g. 'B300'): (its name, e.g. 'NVIDIA B300', memory bytes)}, GPUs only."""
    out = {}
    lines = CATALOG.read_text().splitlines()
    head = lines[0].split(",")
    for line in lines[1:]:
        cells = line.split(",")
        if cells and cells[0] != "CPU":
            out[cells[0]] = (cells[head.index("name")], int(float(cells[head.index("memory_bytes")])))
    return out


def gpu_model(accelerator: str | None) -> str | None:
    """The catalog GPU an experiment's ``device.accelerator`` names, by the catalog's name or id ('NVIDIA B300' or
    'B300' → 'B300'); None where it names none (any NVIDIA GPU) or one the catalog does not hold."""
    if not accelerator:
        return None
    low = accelerator.strip().lower()
    return next((k for k, (name, _) in _catalog().items() if low in (k.lower(), name.lower())), None)


def _versions(launch: list[str], distributions: tuple[str, ...]) -> tuple[dict[str, str] | None, str]:
    """{distribution: version} the engine's interpreter reports (importlib.metadata: nothing is imported), or None
    and why it could not answer."""
    try:
        proc = subprocess.run(
            [*launch, "-c", _SCRIPT, *distributions],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            cwd=ROOT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    for line in proc.stdout.splitlines():
        if line.startswith("KVLAB-VERSIONS "):
            return json.loads(line.removeprefix("KVLAB-VERSIONS ")), ""
    return None, f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:300]}"


def _env_fix(launch0: str) -> str:
    if "-cuda/" in launch0:
        return "build the locked CUDA environments: `make engines GPU=1` (docs/environments.md)"
    if SGLANG_JAX in launch0:
        return "build it: `make engines-sglang-jax`"
    return "build the engine environments: `make engines` (docs/environments.md)"


def hub_snapshot(model: str) -> Path | None:
    """A local copy of hub model ``org/name`` in the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or
    ~/.cache/huggingface/hub) holding a config.json; None when there is none."""
    cache = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub"
    )
    found = sorted((cache / f"models--{model.replace('/', '--')}" / "snapshots").glob("*/config.json"))
    return found[-1].parent if found else None


def _model_problem(file: str, key: str, e: EngineSpec) -> tuple[Problem | None, str]:
    field = f"engines.{key}.model"
    if is_local_path(e.model):
        folder = Path(e.model_arg)
    else:
        folder = hub_snapshot(e.model)
        if folder is None:
            return Problem(
                file,
                field,
                f"{e.model!r} is a hub id with no local copy here: the engine would "
                "download it after its start, and a wrong id or a missing token fails there",
                f"download it first (`huggingface-cli download {e.model}`) or give the local folder that holds it",
            ), ""
    cfg = folder / "config.json"
    if not cfg.is_file():
        return Problem(
            file,
            field,
            f"{folder} holds no config.json" if folder.exists() else f"the model folder {folder} does not exist",
            "give the folder that holds the model's config.json and weights",
        ), ""
    try:
        config = json.loads(cfg.read_text())
        if not isinstance(config, dict) or not (config.get("model_type") or config.get("architectures")):
            raise ValueError("it names no model_type and no architectures")
        if e.kv_cache_bytes is not None and e.name != VLLM:  # SGLang's budget is in tokens: kvlab needs the shape
            kv_bytes_per_token(config)
    except (ValueError, KeyError, TypeError) as exc:
        return Problem(
            file,
            field,
            f"{cfg} is not a config the {e.name} adapter can read ({exc})",
            "give the model folder as the model's publisher ships it",
        ), ""
    return None, f"model {folder} ({config.get('model_type') or config['architectures'][0]})"


def _port_problem(file: str, key: str, e: EngineSpec) -> Problem | None:
    if e.port is None:
        return None
    with socket.socket(socket.AF_INET6 if ":" in e.host else socket.AF_INET) as s:
        try:
            s.bind((e.host, e.port))
        except OSError as exc:
            return Problem(
                file,
                f"engines.{key}.port",
                f"port {e.port} on {e.host} cannot be bound ({exc.strerror})",
                "stop what holds it, or leave port out: kvlab then takes a free port",
            )
    return None


def check(
    path: str | Path, spec: ExperimentSpec, data_dir: Path = DATA_DIR, sampler: gpu.GpuSampler | None = None
) -> Report:
    """Everything a sweep of ``spec`` (read from ``path``) needs here, checked before any engine starts.
    ``sampler``: NVML opened (a stand-in in tests); default: this host's."""
    file = str(path)
    problems: list[Problem] = []
    found: list[str] = []
    launched = {k: e for k, e in spec.engines.items() if not e.external}
    if not spec.device.on_cpu and launched:
        need = max(e.gpus for e in launched.values())
        want = gpu_model(spec.device.accelerator)  # a catalog GPU: its memory is checked too
        word = want or spec.device.accelerator  # what NVML's device name must hold (None: any NVIDIA GPU)
        label = f"{need} {f'NVIDIA {want}' if want else word or 'NVIDIA GPU'}{'s' if need > 1 else ''}"
        s = sampler or gpu.GpuSampler()
        if sampler is None:
            s.open()
            s.close()
        sizes = {k: f"tp {e.tp} × dp {e.dp}" for k, e in launched.items()}
        asked = f"the experiment asks for {label} (" + ", ".join(f"engines.{k}: {v}" for k, v in sizes.items()) + ")"
        host_fix = (
            f"run it on a host with {label} and the NVIDIA driver (nvidia-smi lists them); on a CPU "
            "machine, sweep the cpu_*.yaml experiments"
        )
        if not s.available:
            problems.append(Problem(file, "device", f"{asked}; {s.reason}", host_fix))
        else:
            seen = s.devices
            names = sorted({d["name"] for d in seen})
            if len(seen) < need:
                problems.append(
                    Problem(file, "device", f"{asked}; NVML sees {len(seen)} ({', '.join(names)})", host_fix)
                )
            matching = [d for d in seen if word is None or word.lower() in d["name"].lower()]
            if len(seen) >= need and word and len(matching) < need:
                problems.append(Problem(file, "device", f"{asked}; NVML sees {', '.join(names)}", host_fix))
            if want:
                low = [d for d in matching if d["memory_total_bytes"] < MEMORY_SLACK * _catalog()[want][1]]
                if low:
                    problems.append(
                        Problem(
                            file,
                            "device",
                            f"GPU {low[0]['index']} ({low[0]['name']}) has "
                            f"{low[0]['memory_total_bytes'] / 1e9:.1f} GB, below the {_catalog()[want][1] / 1e9:.0f} GB "
                            f"of a {want} in kvlab's catalog (a MIG slice, or another model)",
                            host_fix,
                        )
                    )
            found.append(f"GPUs: {len(seen)} × {', '.join(names)} (needs {need})")
    checked: dict[tuple[str, ...], tuple[dict | None, str]] = {}
    for key, e in launched.items():
        adapter = get_adapter(e.name)
        launch = adapter.launch_prefix(e)
        version, dists = RELEASES[e.name]
        if len(launch) == 1 and not Path(launch[0]).exists():
            problems.append(
                Problem(file, f"engines.{key}.launch", f"{e.launch[0]} does not exist", _env_fix(e.launch[0]))
            )
        else:
            if tuple(launch) not in checked:
                checked[tuple(launch)] = _versions(launch, dists)
            got, why = checked[tuple(launch)]
            if got is None:
                problems.append(
                    Problem(
                        file,
                        f"engines.{key}.launch",
                        f"{' '.join(e.launch)} does not run a Python that answers ({why})",
                        _env_fix(e.launch[0]),
                    )
                )
            elif not got:
                problems.append(
                    Problem(
                        file,
                        f"engines.{key}.launch",
                        f"{' '.join(e.launch)} has no {' or '.join(dists)} installed",
                        _env_fix(e.launch[0]),
                    )
                )
            elif version not in got.values():
                problems.append(
                    Problem(
                        file,
                        f"engines.{key}.launch",
                        f"{' '.join(e.launch)} holds "
                        + ", ".join(f"{d} {v}" for d, v in got.items())
                        + f"; kvlab's {adapter.label} adapter is "
                        f"written against {version}",
                        _env_fix(e.launch[0]),
                    )
                )
            else:
                found.append(f"engines.{key}: {', '.join(f'{d} {v}' for d, v in got.items())} at {e.launch[0]}")
        problem, model = _model_problem(file, key, e)
        problems += [problem] if problem else []
        found += [model] if model else []
        port = _port_problem(file, key, e)
        problems += [port] if port else []
    for key, e in spec.engines.items():
        if e.external:
            found.append(
                f"engines.{key}: a server kvlab does not start, at {e.url} (checked when the sweep reaches it)"
            )
    where, free = free_near(Path(data_dir) / "runs" / spec.name)
    if free < MIN_FREE_BYTES:
        problems.append(
            Problem(
                file,
                f"(data folder {where})",
                f"{free / 2**20:.0f} MiB free, a sweep needs at least {MIN_FREE_BYTES / 2**20:.0f} MiB",
                "free disk space or give --data-dir on a disk with room",
            )
        )
    else:
        found.append(f"disk: {free / 1e9:.1f} GB free at {where}")
    return Report(file, problems, found)
