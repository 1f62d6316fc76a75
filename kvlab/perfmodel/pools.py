"""The concurrency ceilings of one engine configuration: ONE function, so every report that shows a modelled ceiling
(report 03's headroom, report 07's modelled ceiling, the lead's studies) shows the same numbers.

The pool semantics are each engine's own (:func:`kvlab.perfmodel.roofline.memory`): vLLM's
``--gpu-memory-utilization`` holds the activations inside the target and one KV pool that also holds a
linear-attention state; SGLang's ``--mem-fraction-static`` leaves the activations outside the fraction and keeps such a
state in a pool of its own, which DCP does not enlarge (DCP shards only the MLA cache).
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from kvlab.engines import SGLANG, VLLM
from kvlab.perfmodel.roofline import GIB, Assumptions, Config, memory


def engine_for_dcp(dcp: int) -> str:
    """The engine a DCP size is modelled on: no DCP is vLLM's configuration (the article's), DCP > 1 SGLang's."""
    return SGLANG if dcp > 1 else VLLM


def concurrency_ceilings(
    gpu: str,
    model: str,
    mem_utils: Iterable[float],
    dcp_sizes: Iterable[int],
    contexts: Iterable[int],
    a: Assumptions = Assumptions(),
    tp: int = 8,
    engines: dict[int, str] | None = None,
) -> pl.DataFrame:
    """One row per memory target x DCP size x context: the engine's pools and the sequences that fit at once.

    Columns: ``source`` ("modelled"), ``gpu``, ``model``, ``engine`` (``engines[dcp]``, default
    :func:`engine_for_dcp`), ``tp``, ``dcp``, ``mem_util``, ``context_tokens``, ``kv_pool_gib_per_gpu``,
    ``kv_capacity_tokens`` (the KV pool in tokens, the figure engines log), ``state_pool_gib_per_gpu`` (SGLang's
    separate linear-state pool; 0 where none), ``max_concurrent_seqs`` (the ceiling: sequences of that context that
    fit, each charged its KV and its state), ``limited_by`` ("KV" or "state"), ``outside_pool_gib_per_gpu`` and
    ``outside_need_gib_per_gpu`` (memory left outside the target, and the need assumed from the B300 article),
    ``fits`` and ``reason`` (the model's memory check)."""
    rows = []
    for u in mem_utils:
        for d in dcp_sizes:
            engine = (engines or {}).get(d) or engine_for_dcp(d)
            cfg = Config.of(gpu, model, engine, tp, d, u)
            for c in contexts:
                m = memory(cfg, int(c), a)
                rows.append({
                    "source": "modelled", "gpu": cfg.gpu.gpu, "model": cfg.model.model, "engine": engine, "tp": tp,
                    "mem_util": u, "dcp": d, "context_tokens": int(c),
                    "kv_pool_gib_per_gpu": m.kv_pool_bytes_per_gpu / GIB, "kv_capacity_tokens": m.kv_capacity_tokens,
                    "state_pool_gib_per_gpu": m.state_pool_bytes_per_gpu / GIB,
                    "max_concurrent_seqs": m.max_concurrent_seqs, "limited_by": m.limited_by,
                    "outside_pool_gib_per_gpu": m.outside_pool_bytes_per_gpu / GIB,
                    "outside_need_gib_per_gpu": a.outside_pool_fraction * cfg.gpu.memory_bytes / GIB,
                    "fits": m.fits, "reason": m.reason,
                })  # fmt: skip
    return pl.DataFrame(rows)
