"""The preflight: what a sweep of an experiment needs on this host, checked before any engine starts (`kvlab check`,
and the start of `kvlab sweep`). A GPU experiment needs its GPUs (count, model and memory, from NVML) and, where its
engines run from kvlab's CUDA builds, an NVIDIA driver they run on; every engine kvlab launches needs its environment
to exist and report the release kvlab's adapters were written against, its model folder (or a local copy of a hub
model, and room in the Hugging Face cache to download one) with a config the adapter reads, and its fixed port free;
the data folder needs room. Each problem names the experiment file, the field and the fix.
"""

from __future__ import annotations

import json
import os
import re
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

#: What kvlab's CUDA builds are: both locks (kvlab/engines/envs/vllm-cuda.lock, sglang-cuda.lock) hold torch's cu130
#: wheels with nvidia-cuda-runtime 13.0.96, the CUDA 13.0 runtime.
CUDA_BUILD = "CUDA 13.0 (cu130)"
#: The least NVIDIA driver a CUDA 13.0 build runs on, on Linux x86-64: >= 580.65.06, NVIDIA's CUDA Toolkit 13.0
#: release notes, section "CUDA Driver", table "CUDA Toolkit and Corresponding Driver Versions" (row CUDA 13.0 GA;
#: https://docs.nvidia.com/cuda/archive/13.0.0/cuda-toolkit-release-notes/). NVIDIA's data-center driver matrix
#: (https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html) lists R580 as
#: the first branch that supports CUDA 13.x, every 13.x release through minor version compatibility. An older driver
#: passes NVML's checks and fails when the engine starts.
MIN_DRIVER = "580.65.06"
DRIVER_FIX = (
    f"install NVIDIA driver {MIN_DRIVER} or newer (the R580 data-center branch or a later one; `nvidia-smi` prints "
    "the version in use), then reload the driver or reboot"
)
NVIDIA_SMI_TIMEOUT_S = 30

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


def hf_cache() -> Path:
    """The Hugging Face hub cache the engines read a hub model from and `hf download` fills: HF_HUB_CACHE, else
    HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface" / "hub"


def hub_snapshot(model: str) -> Path | None:
    """A local copy of hub model ``org/name`` in the Hugging Face cache (:func:`hf_cache`) holding a config.json; None
    when there is none."""
    found = sorted((hf_cache() / f"models--{model.replace('/', '--')}" / "snapshots").glob("*/config.json"))
    return found[-1].parent if found else None


def checkpoint_size(model: str) -> tuple[float, str] | None:
    """(bytes, how they are counted) of the weights of a model kvlab's catalog holds (data/catalog/models.csv, by
    key or alias: Kimi-K3 is 2.78 × 10¹² parameters × 0.5616 bytes, 1.56 TB); None for one it does not."""
    from kvlab import catalog  # the model stack: only where a hub model must be downloaded

    try:
        m = catalog.model(model)
    except (KeyError, catalog.CatalogError):
        return None
    how = f"the catalog's {m.total_params / 1e12:.2f} × 10¹² parameters × {m.weight_bytes_per_param:.4f} bytes"
    return m.weight_bytes(), how


def download_fix(model: str, size: float | None) -> str:
    """How to put hub model ``model`` into the cache a sweep reads: the licence, the login, the download command."""
    room = f"at least {_size(size)} free" if size else "room"
    return (
        f"accept the model's licence on its hub page (https://huggingface.co/{model}) and log in once "
        f"(`.venv/bin/hf auth login`), then download it into the cache the engines read: `export HF_HOME=<a folder "
        f"on a disk with {room}>; .venv/bin/hf download {model}`, and sweep with the same HF_HOME (or give the local "
        "folder that holds the model)"
    )


def driver_version(nvml=None) -> tuple[str | None, str]:
    """This host's NVIDIA driver version and what told it ('NVML', 'nvidia-smi'); None and why, where neither
    answers. ``nvml``: the pynvml module (nvidia-ml-py; a stand-in in tests), default the installed one."""
    why = []
    try:
        nvml = nvml or gpu._nvml()
        nvml.nvmlInit()
        try:
            version = nvml.nvmlSystemGetDriverVersion()
        finally:
            nvml.nvmlShutdown()
        return (version.decode() if isinstance(version, bytes) else str(version)), "NVML"
    except Exception as exc:  # ImportError, NVMLError (no library, no driver loaded)
        why.append(f"NVML: {type(exc).__name__}: {exc}")
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()[0], "nvidia-smi"
        why.append(f"nvidia-smi: exit {out.returncode}")
    except FileNotFoundError:
        why.append("nvidia-smi: not found")
    except (OSError, subprocess.TimeoutExpired) as exc:
        why.append(f"nvidia-smi: {type(exc).__name__}: {exc}")
    return None, "; ".join(why)


def _release(version: str) -> tuple[int, ...]:
    """'580.65.06' → (580, 65, 6): the leading digits of each part ('03-open' → 3, none → 0)."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in version.strip().split("."))


def driver_problem(file: str, launches: list[str], driver) -> tuple[Problem | None, str]:
    """The driver ``launches`` (kvlab's CUDA builds, by interpreter) need against what ``driver()`` reads."""
    envs = ", ".join(sorted({str(Path(python).parent.parent) for python in launches}))
    version, source = driver()
    need = f"the CUDA builds it launches ({envs}) are {CUDA_BUILD} and need NVIDIA driver {MIN_DRIVER} or newer"
    if version is None:
        return Problem(file, "(NVIDIA driver)", f"{need}; no driver answers here ({source})", DRIVER_FIX), ""
    if _release(version) < _release(MIN_DRIVER):
        return Problem(
            file,
            "(NVIDIA driver)",
            f"driver {version} ({source}) is older: {need}, and their engines would fail at start",
            DRIVER_FIX,
        ), ""
    return None, f"NVIDIA driver {version} ({source}; the {CUDA_BUILD} builds need {MIN_DRIVER} or newer)"


def _model_problem(file: str, key: str, e: EngineSpec) -> tuple[Problem | None, str]:
    field = f"engines.{key}.model"
    if is_local_path(e.model):
        folder = Path(e.model_arg)
    else:
        folder = hub_snapshot(e.model)
        if folder is None:
            size = checkpoint_size(e.model)
            weighs = f" ({_size(size[0])}: {size[1]})" if size else ""
            return Problem(
                file,
                field,
                f"{e.model!r} is a hub id with no local copy here (Hugging Face cache {hf_cache()}): the engine "
                f"would download it after its start{weighs}, and a wrong id, a licence not accepted or a missing "
                "token fails there",
                download_fix(e.model, size[0] if size else None),
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


def _size(n: float) -> str:
    """Bytes as a datasheet writes them: '1.56 TB', '69.6 GB'."""
    return f"{n / 1e12:.2f} TB" if n >= 1e12 else f"{n / 1e9:.1f} GB"


def cache_problem(file: str, models: list[str]) -> tuple[Problem | None, str]:
    """Room in the Hugging Face cache for the hub models, not there yet, whose size kvlab's catalog knows."""
    sizes = {m: size[0] for m in dict.fromkeys(models) if (size := checkpoint_size(m))}
    if not sizes:
        return None, ""
    need = sum(sizes.values())
    where, free = free_near(hf_cache())
    what = " and ".join(f"{m} ({_size(size)})" for m, size in sizes.items())
    if free < need:
        return Problem(
            file,
            f"(Hugging Face cache {hf_cache()})",
            f"{_size(free)} free at {where}; the download of {what} needs {_size(need)}",
            f"point HF_HOME at a disk with {_size(need)} free (`export HF_HOME=/a/large/disk/huggingface`) for "
            "`.venv/bin/hf download` and the sweep alike",
        ), ""
    return None, f"Hugging Face cache {hf_cache()}: {_size(free)} free at {where}, room for {what}"


def _device_problems(
    file: str, spec: ExperimentSpec, launched: dict[str, EngineSpec], sampler: gpu.GpuSampler | None
) -> tuple[list[Problem], list[str]]:
    """The GPUs the launched engines need against what NVML sees: their count, model and (for a catalog GPU) memory."""
    problems: list[Problem] = []
    found: list[str] = []
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
        return problems, found
    seen = s.devices
    names = sorted({d["name"] for d in seen})
    if len(seen) < need:
        problems.append(Problem(file, "device", f"{asked}; NVML sees {len(seen)} ({', '.join(names)})", host_fix))
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
    return problems, found


def _launch_problem(
    file: str, key: str, e: EngineSpec, checked: dict[tuple[str, ...], tuple[dict | None, str]]
) -> tuple[Problem | None, str]:
    """Engine ``key``'s environment: it exists, its Python answers, and it holds the release kvlab's adapter is
    written against. ``checked``: the versions each launch prefix reported, filled here (one question each)."""
    adapter = get_adapter(e.name)
    launch = adapter.launch_prefix(e)
    version, dists = RELEASES[e.name]
    field = f"engines.{key}.launch"
    if len(launch) == 1 and not Path(launch[0]).exists():
        return Problem(file, field, f"{e.launch[0]} does not exist", _env_fix(e.launch[0])), ""
    if tuple(launch) not in checked:
        checked[tuple(launch)] = _versions(launch, dists)
    got, why = checked[tuple(launch)]
    if got is None:
        what = f"{' '.join(e.launch)} does not run a Python that answers ({why})"
    elif not got:
        what = f"{' '.join(e.launch)} has no {' or '.join(dists)} installed"
    elif version not in got.values():
        what = (
            f"{' '.join(e.launch)} holds "
            + ", ".join(f"{d} {v}" for d, v in got.items())
            + f"; kvlab's {adapter.label} adapter is "
            f"written against {version}"
        )
    else:
        return None, f"engines.{key}: {', '.join(f'{d} {v}' for d, v in got.items())} at {e.launch[0]}"
    return Problem(file, field, what, _env_fix(e.launch[0])), ""


def _disk_problem(file: str, spec: ExperimentSpec, data_dir: Path) -> tuple[Problem | None, str]:
    """Room in the data folder for the sweep's runs."""
    where, free = free_near(Path(data_dir) / "runs" / spec.name)
    if free < MIN_FREE_BYTES:
        return Problem(
            file,
            f"(data folder {where})",
            f"{free / 2**20:.0f} MiB free, a sweep needs at least {MIN_FREE_BYTES / 2**20:.0f} MiB",
            "free disk space or give --data-dir on a disk with room",
        ), ""
    return None, f"disk: {free / 1e9:.1f} GB free at {where}"


def check(
    path: str | Path,
    spec: ExperimentSpec,
    data_dir: Path = DATA_DIR,
    sampler: gpu.GpuSampler | None = None,
    driver=driver_version,
) -> Report:
    """Everything a sweep of ``spec`` (read from ``path``) needs here, checked before any engine starts.
    ``sampler``: NVML opened (a stand-in in tests); default: this host's. ``driver``: what reads the NVIDIA driver's
    version (:func:`driver_version`; a stand-in in tests)."""
    file = str(path)
    problems: list[Problem] = []
    found: list[str] = []

    def add(problem: Problem | None, line: str = "") -> None:
        problems.extend([problem] if problem else [])
        found.extend([line] if line else [])

    launched = {k: e for k, e in spec.engines.items() if not e.external}
    if not spec.device.on_cpu and launched:
        device_problems, device_found = _device_problems(file, spec, launched, sampler)
        problems += device_problems
        found += device_found
        cuda = [e.launch[0] for e in launched.values() if e.launch and "-cuda/" in e.launch[0]]
        if cuda:  # kvlab's locked CUDA builds (make engines GPU=1): the driver they need
            add(*driver_problem(file, cuda, driver))
    checked: dict[tuple[str, ...], tuple[dict | None, str]] = {}
    for key, e in launched.items():
        add(*_launch_problem(file, key, e, checked))
        add(*_model_problem(file, key, e))
        add(_port_problem(file, key, e))
    missing = [e.model for e in launched.values() if not is_local_path(e.model) and hub_snapshot(e.model) is None]
    add(*cache_problem(file, missing))
    for key, e in spec.engines.items():
        if e.external:
            found.append(
                f"engines.{key}: a server kvlab does not start, at {e.url} (checked when the sweep reaches it)"
            )
    add(*_disk_problem(file, spec, data_dir))
    return Report(file, problems, found)
