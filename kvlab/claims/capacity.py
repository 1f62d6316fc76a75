"""KV capacity beside its prediction: the physical model's concurrency ceiling (kvlab.perfmodel.memory) per DCP size,
memory target and context, on the definition the measured runs use (kvlab.analysis.concurrency_ceiling: pool //
tokens per request), so the two stand side by side (docs/design.md, "Load definitions", KV capacity)."""

from __future__ import annotations

import polars as pl

from kvlab import analysis
from kvlab.engines import SGLANG, VLLM
from kvlab.perfmodel.roofline import Assumptions, Config, memory


def modelled_ceilings(gpu: str = "B300", model: str = "Kimi-K3", tp: int = 8, dcp_sizes: tuple[int, ...] = (1, 8),
                      mem_utils: tuple[float, ...] = (0.92, 0.95),
                      contexts: tuple[int, ...] = (65536, 131072, 204800),
                      assumptions: Assumptions | None = None) -> pl.DataFrame:
    """The physical model's concurrency ceiling (kvlab.perfmodel.memory), source "modelled", per DCP size x memory
    target x context: ``kv_pool_tokens`` (the pool the model predicts, in tokens, the figure engines log),
    ``concurrency_ceiling`` = that // context (the same definition as :func:`kvlab.analysis.run_ceilings`, so the
    two stand side by side) and ``max_concurrent_seqs``, the model's own count, which also charges each sequence its
    linear-attention state (Kimi-K3's KDA layers); ``fits`` and ``reason`` are the model's memory check. DCP 1 is
    modelled as vLLM, DCP > 1 as SGLang (perfmodel's headroom table does the same). The defaults are the GPU
    host's capacity question: Kimi-K3 on 8 x B300 at the contexts and memory targets of
    data/experiments/b300_capacity.yaml."""
    a = assumptions or Assumptions()
    rows = []
    for u in mem_utils:
        for d in dcp_sizes:
            cfg = Config.of(gpu, model, SGLANG if d > 1 else VLLM, tp, d, u)
            for c in contexts:
                m = memory(cfg, int(c), a)
                rows.append({"source": "modelled", "gpu": cfg.gpu.gpu, "model": cfg.model.model,
                             "engine": cfg.engine, "tp": tp, "dcp": d, "mem_util": u, "context_tokens": int(c),
                             "kv_pool_tokens": m.kv_capacity_tokens,
                             "concurrency_ceiling": analysis.concurrency_ceiling(m.kv_capacity_tokens, int(c)),
                             "max_concurrent_seqs": m.max_concurrent_seqs, "fits": m.fits, "reason": m.reason})
    return pl.DataFrame(rows)
