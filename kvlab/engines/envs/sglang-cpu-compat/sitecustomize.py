"""kvlab's compatibility fix for PyTorch SGLang 0.5.23 on a CPU, from PyPI's CUDA-only kernel wheel.

Active only where an experiment puts this folder on the server's PYTHONPATH (``env:`` of the CPU
experiments: ``PYTHONPATH: kvlab/engines/envs/sglang-cpu-compat``); Python then runs this file at the start
of the server and of every process SGLang spawns. Nothing is installed or edited in the environment.

What it replaces, and why:

1. ``sgl_kernel.load_utils._load_architecture_specific_ops`` (sglang-kernel 0.4.10). PyPI ships only the
   CUDA build of SGLang's kernel package; importing ``sgl_kernel`` loads its ``common_ops`` library, which
   links ``libcuda.so.1`` and fails on a host without an NVIDIA driver ("Could not load any common_ops
   library"). SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``) still imports a few names from
   ``sgl_kernel`` (the Python wrappers, e.g. from ``kernels/ops/kvcache/cache_move.py``). Here the loader
   returns without loading ``common_ops`` when ``libcuda.so.1`` cannot be loaded, so the wrappers import;
   a wrapper whose op is missing fails when called, never silently.
2. The op ``torch.ops.sgl_kernel.assign_req_to_token_pool_cpu``, which SGLang's CPU engine calls for every
   batch (``sglang/srt/mem_cache/allocation.py``) and which exists only in SGLang's CPU kernel build (a
   source build with ``-march=native``, not on PyPI). It is defined here in plain torch, with the
   semantics of SGLang's C++ kernel: for each request i, the next ``end_offset[i] - start_offset[i]``
   entries of ``out_cache_loc`` are written to ``req_to_token[req_pool_indices[i],
   start_offset[i]:end_offset[i]]``.

Without SGLang's AMX kernels, SGLang falls back to its ``torch_native`` attention backend and plain torch
for the rest: reports label these runs "SGLang (CPU, torch-native kernels)", never SGLang's CPU kernels'
or a GPU's speed. ``tests/test_sglang.py`` fails when this fix no longer applies (the names it replaces
are gone or changed) or is no longer needed (the kernel wheel imports, or the op exists, without it).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

#: The releases this fix was written for (checked by tests/test_sglang.py against the environment).
FOR_RELEASES = {"sglang": "0.5.23", "sglang-kernel": "0.4.10"}
_OP = "sgl_kernel::assign_req_to_token_pool_cpu"
_SCHEMA = (
    "(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, Tensor end_offset, "
    "Tensor out_cache_loc, int pool_len) -> ()"
)


def _libcuda_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def assign_req_to_token_pool(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len: int
) -> None:
    """The CPU kernel's semantics in plain torch (see the module docstring, item 2)."""
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    pos = 0
    for row, start, end in zip(rows, starts, ends):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[pos : pos + n].to(req_to_token.dtype)
        pos += n


def _define_missing_ops() -> None:
    import torch

    if hasattr(torch.ops.sgl_kernel, "assign_req_to_token_pool_cpu"):
        return  # a kernel build that has it (the fix is then not needed: the test says so)
    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    lib.define(_SCHEMA.join(("assign_req_to_token_pool_cpu", "")))
    lib.impl("assign_req_to_token_pool_cpu", assign_req_to_token_pool, "CPU")
    _define_missing_ops.lib = lib  # keep the registration alive


class _PatchLoadUtils(importlib.abc.MetaPathFinder):
    """Finds ``sgl_kernel.load_utils`` as usual and patches it right after it is executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "sgl_kernel.load_utils":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        inner = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                load_ops, preload = module._load_architecture_specific_ops, module._preload_cuda_library
                if not _libcuda_loads():  # no NVIDIA driver: keep the Python wrappers, skip the CUDA libraries
                    module._load_architecture_specific_ops = lambda: None
                    module._preload_cuda_library = lambda: None
                else:
                    module._load_architecture_specific_ops, module._preload_cuda_library = load_ops, preload
                _define_missing_ops()

        spec.loader = Loader()
        return spec


if not any(isinstance(f, _PatchLoadUtils) for f in sys.meta_path):
    sys.meta_path.insert(0, _PatchLoadUtils())
