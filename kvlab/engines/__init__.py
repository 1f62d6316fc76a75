"""Engine adapters (vLLM, SGLang): pure argv/env/HTTP/failure knowledge; engines themselves are never imported."""

from __future__ import annotations

from kvlab.engines.base import CANONICAL_METRICS, FAILURE_CAUSES, EngineAdapter, Failure
from kvlab.engines.sglang import SGLangAdapter
from kvlab.engines.vllm import VLLMAdapter

_ADAPTERS: dict[str, type[EngineAdapter]] = {"vllm": VLLMAdapter, "sglang": SGLangAdapter}


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for engine ``name`` ('vllm' or 'sglang')."""
    try:
        return _ADAPTERS[name]()
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(_ADAPTERS)}") from None


__all__ = ["CANONICAL_METRICS", "FAILURE_CAUSES", "EngineAdapter", "Failure", "get_adapter"]
