"""Engine adapters (vLLM, SGLang, sglang-jax): pure argv/env/HTTP/failure knowledge; engines themselves are never imported.

The names below load on first use (PEP 562), so that importing one submodule (``kvlab.engines.spec``) or the
package itself does not load every adapter and the HTTP stack they use: `kvlab --help` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy names are, for type checkers and readers
    from kvlab.engines import registry
    from kvlab.engines.base import CANONICAL_METRICS, FAILURE_CAUSES, EngineAdapter, Failure
    from kvlab.engines.registry import (
        ENGINE_LABELS,
        ENGINE_NAMES,
        FAMILIES,
        SGLANG,
        SGLANG_JAX,
        VLLM,
        VLLM_CPU_BLOCK_TOKENS,
        adapter_class,
        engine_label,
        get_adapter,
    )
    from kvlab.engines.spec import EngineSpec

#: Each public name -> the submodule that defines it.
_WHERE = {
    "CANONICAL_METRICS": "base",
    "FAILURE_CAUSES": "base",
    "EngineAdapter": "base",
    "Failure": "base",
    "ENGINE_LABELS": "registry",
    "ENGINE_NAMES": "registry",
    "FAMILIES": "registry",
    "SGLANG": "registry",
    "SGLANG_JAX": "registry",
    "VLLM": "registry",
    "VLLM_CPU_BLOCK_TOKENS": "registry",
    "adapter_class": "registry",
    "engine_label": "registry",
    "get_adapter": "registry",
    "EngineSpec": "spec",
}

__all__ = [
    "CANONICAL_METRICS",
    "ENGINE_LABELS",
    "ENGINE_NAMES",
    "FAILURE_CAUSES",
    "FAMILIES",
    "SGLANG",
    "SGLANG_JAX",
    "VLLM",
    "VLLM_CPU_BLOCK_TOKENS",
    "EngineAdapter",
    "EngineSpec",
    "Failure",
    "adapter_class",
    "engine_label",
    "get_adapter",
    "registry",
]


def __getattr__(name: str):
    if name == "registry":
        module = importlib.import_module("kvlab.engines.registry")
    elif name in _WHERE:
        module = importlib.import_module(f"kvlab.engines.{_WHERE[name]}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = module if name == "registry" else getattr(module, name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
