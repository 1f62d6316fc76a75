"""Engine adapters (vLLM, SGLang, sglang-jax): pure argv/env/HTTP/failure knowledge; engines themselves are never imported."""

from __future__ import annotations

from kvlab.engines.base import CANONICAL_METRICS, FAILURE_CAUSES, EngineAdapter, Failure
from kvlab.engines.sglang import SGLangAdapter
from kvlab.engines.sglang_jax import SGLangJaxAdapter
from kvlab.engines.spec import ENGINE_NAMES, EngineSpec
from kvlab.engines.vllm import VLLMAdapter

_ADAPTERS: dict[str, type[EngineAdapter]] = {cls.name: cls for cls in (VLLMAdapter, SGLangAdapter, SGLangJaxAdapter)}
if set(_ADAPTERS) != set(ENGINE_NAMES):
    raise ImportError(f"engine adapters {sorted(_ADAPTERS)} do not match ENGINE_NAMES {sorted(ENGINE_NAMES)}")
#: How reports name each engine ("sglang-jax (CPU)" is SGLang's JAX runtime, not PyTorch SGLang).
ENGINE_LABELS: dict[str, str] = {name: _ADAPTERS[name].label for name in ENGINE_NAMES}


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for engine ``name`` (one of ENGINE_NAMES)."""
    try:
        return _ADAPTERS[name]()
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(_ADAPTERS)}") from None


__all__ = ["CANONICAL_METRICS", "ENGINE_LABELS", "ENGINE_NAMES", "FAILURE_CAUSES", "EngineAdapter", "EngineSpec",
           "Failure", "get_adapter"]
