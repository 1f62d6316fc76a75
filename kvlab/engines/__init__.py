"""Engine adapters (vLLM, SGLang, sglang-jax): pure argv/env/HTTP/failure knowledge; engines themselves are never imported."""

from __future__ import annotations

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
