"""Capacity-limited throughput: the model's answer to "which engine, at my context and TPOT target?" (issue 55).

For one context, one TPOT target and one memory setting, per engine configuration: the sequences its pool holds
(:func:`kvlab.perfmodel.roofline.memory`, each engine's own pools), the largest batch whose decode step meets the TPOT
target, the step time there and the output tokens/s per GPU that batch gives. A fixed batch (the B300 article's)
hides what DCP buys: room for more sequences, not a faster step.

Every figure is a range. The step time comes from each assumption set's bounded fit (every named term inside its
prior), with the **unexplained per-step cost** as a band: its low end leaves it out (c(engine) at most its 5 ms
prior), its high end keeps the whole fitted per-step cost; the sequences' range spans the memory readings
(:func:`kvlab.perfmodel.figures.memory_sets`, :data:`NON_KV_INSIDE_VLLM_TARGET`).
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.perfmodel.calibrate import OVERHEADS, PRIORS, refits
from kvlab.perfmodel.ranges import _default_index
from kvlab.perfmodel.roofline import GIB, Assumptions, Config, Params, decode_step, memory

#: vLLM's memory inside its target besides weights and KV, per GPU (bytes): the model's assumed 4 GiB, and what vLLM's
#: own start-up log implies for Kimi-K2-Thinking on 8×H200 ("Kimi-K2-Thinking Usage Guide", vLLM project recipes,
#: GitHub, 2025-11: 46.80 GiB of KV inside the default 0.9 target of an H200's 143,771 MiB beside 74.2 GB of weights
#: per GPU leaves 10.4 GiB; kvlab.perfmodel.outside.PoolCheck.non_kv_inside_target_bytes). A range, each end a source.
NON_KV_INSIDE_VLLM_TARGET = (4 * GIB, 10.4 * GIB)
#: SGLang's state-pool ratio (``--mamba-full-memory-ratio``, default 0.9) is a setting: the values its effect on the
#: ceiling is shown at (kvlab.studies.whatif_model's memory constants).
STATE_POOL_RATIOS = (0.5, 0.9, 2.0)
#: The two engine-specific memory constants by name (:func:`memory_constants`'s ``constant`` column).
NON_KV_CONSTANT = f"{engine_label(VLLM)} non-KV memory inside its target"
STATE_RATIO_CONSTANT = f"{engine_label(SGLANG)} state-pool ratio"


def memory_readings(a: Assumptions = Assumptions()) -> list[Assumptions]:
    """The memory readings a ceiling's range spans: KV format × MLA width (the figures' memory sets) × vLLM's
    non-KV memory inside its target (:data:`NON_KV_INSIDE_VLLM_TARGET`)."""
    from kvlab.perfmodel.figures import memory_sets  # matplotlib: loaded where the ranges are made

    return [replace(s, activation_bytes_per_gpu=b) for s in memory_sets(a) for b in NON_KV_INSIDE_VLLM_TARGET]


def _capped(p: Params) -> Params:
    """``p`` without the unexplained per-step cost: each engine's c at most its prior's maximum."""
    return replace(p, **{n: min(getattr(p, n), PRIORS[n][1]) for n in OVERHEADS.values()})


def tpot_batch(cfg: Config, seqs: int, context_tokens: int, tpot_s: float, p: Params, a: Assumptions) -> int:
    """The largest batch (≤ ``seqs``) whose decode step at ``context_tokens`` meets ``tpot_s``; 0 when one sequence
    does not (step time grows with the batch, so a bisection finds it)."""
    lo, hi = 0, seqs
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if decode_step(cfg, mid, context_tokens, p, a).total_s <= tpot_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _at(cfg: Config, seqs: int, context_tokens: int, tpot_s: float, p: Params, a: Assumptions) -> tuple:
    """(batch, step s, output tokens/s per GPU) of one configuration under one parameter set."""
    b = tpot_batch(cfg, seqs, context_tokens, tpot_s, p, a)
    if not b:
        return 0, decode_step(cfg, 1, context_tokens, p, a).total_s, 0.0
    step = decode_step(cfg, b, context_tokens, p, a).total_s
    return b, step, b / step / cfg.tp


def capacity_limited(
    sens: pl.DataFrame,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    context_tokens: int = 204800,
    tpot_ms: float | tuple[float, ...] = 50.0,
    mem_util: float = 0.92,
    configs: tuple[tuple[str, int], ...] = ((VLLM, 1), (SGLANG, 8)),
    tp: int = 8,
    a: Assumptions = Assumptions(),
) -> pl.DataFrame:
    """One row per engine configuration (``configs``: (engine, DCP)) and TPOT target (``tpot_ms``, one or several):
    ``seqs`` the pool holds at ``context_tokens`` (with ``seqs_lo``/``_hi`` over :func:`memory_readings`),
    ``limited_by`` (its pool), and under the bounded fits of ``sens`` (a sensitivity table with ``physics=True``; the
    default set's in the plain column): ``batch`` the TPOT target allows, ``step_ms`` there and
    ``tokens_per_s_per_gpu``, each with ``_lo``/``_hi`` over every set, its unexplained per-step cost left out (low end
    of the step, high end of the rate) or kept whole; ``batch_limited_by``: "pool", "TPOT" or "out of reach" (not one
    sequence meets the target at the default set)."""

    sets = refits(sens, a, physics=True)
    d = _default_index(sens) or 0
    targets = (tpot_ms,) if isinstance(tpot_ms, (int, float)) else tuple(tpot_ms)
    rows = []
    for engine, dcp in configs:
        cfg = Config.of(gpu, model, engine, tp, dcp, mem_util)
        mem = memory(cfg, context_tokens, a)
        seqs_all = [memory(cfg, context_tokens, r).max_concurrent_seqs for r in memory_readings(a)]
        pools: dict[tuple, int] = {}  # the pool depends on the KV format and MLA width alone
        for t in targets:
            runs = []
            for i, (_w, ai, p) in enumerate(sets):
                key = (ai.kv_format, ai.mla_width)
                if key not in pools:
                    pools[key] = memory(cfg, context_tokens, ai).max_concurrent_seqs
                for q in (p, _capped(p)):
                    runs.append((i if q is p else None, _at(cfg, pools[key], context_tokens, t / 1e3, q, ai)))
            rows.append(_row(cfg, mem, seqs_all, context_tokens, t, runs, d))
    return pl.DataFrame(rows)


def _row(cfg: Config, mem, seqs_all: list[int], context_tokens: int, tpot_ms: float, runs: list, d: int) -> dict:
    """One configuration and TPOT target: the default set's batch, step and rate, and their ranges over ``runs``."""
    default = next(x for i, x in runs if i == d)
    batch = default[0]
    return {
        "engine": cfg.engine, "tp": cfg.tp, "dcp": cfg.dcp, "config": cfg.label(), "gpu": cfg.gpu.gpu,
        "model": cfg.model.model, "mem_util": cfg.mem_util, "context_tokens": context_tokens, "tpot_ms": float(tpot_ms),
        "seqs": mem.max_concurrent_seqs, "seqs_lo": min(seqs_all), "seqs_hi": max(seqs_all),
        "limited_by": mem.limited_by,
        "batch": batch, "batch_lo": min(x[0] for _, x in runs), "batch_hi": max(x[0] for _, x in runs),
        "step_ms": 1e3 * default[1], "step_ms_lo": 1e3 * min(x[1] for _, x in runs),
        "step_ms_hi": 1e3 * max(x[1] for _, x in runs),
        "tokens_per_s_per_gpu": default[2], "tokens_per_s_per_gpu_lo": min(x[2] for _, x in runs),
        "tokens_per_s_per_gpu_hi": max(x[2] for _, x in runs),
        "batch_limited_by": "out of reach" if not batch else "pool" if batch == mem.max_concurrent_seqs else "TPOT",
    }  # fmt: skip


def capacity_limited_lines(table: pl.DataFrame) -> list[str]:
    """``kvlab model --tpot-ms``'s lines: per configuration the pool's sequences, the batch, the step and the rate,
    each with its range."""
    if not table.height:
        return []
    r0 = table.row(0, named=True)
    out = [
        f"capacity-limited throughput at {r0['context_tokens']:,} tokens, TPOT target {r0['tpot_ms']:g} ms, mem_util "
        f"{r0['mem_util']:g} (modelled; bounded fits over the assumption sets, the unexplained per-step cost as a "
        "band: left out at the fast end, kept whole at the slow end):"
    ]
    for r in table.iter_rows(named=True):
        rate = (
            f"{r['tokens_per_s_per_gpu']:,.0f} output tokens/s per GPU (range {r['tokens_per_s_per_gpu_lo']:,.0f}-"
            f"{r['tokens_per_s_per_gpu_hi']:,.0f})"
        )
        batch = (
            f"batch {r['batch']}, set by the {r['batch_limited_by']}"
            if r["batch"]
            else f"the target is out of reach at the default set (one sequence's step {r['step_ms']:,.1f} ms)"
        )
        out.append(
            f"  {r['config']}: pool holds {r['seqs']} sequences (range {r['seqs_lo']}-{r['seqs_hi']}, limited by "
            f"{r['limited_by']}); {batch} (batch range {r['batch_lo']}-{r['batch_hi']}); step {r['step_ms']:,.1f} ms "
            f"(range {r['step_ms_lo']:,.1f}-{r['step_ms_hi']:,.1f}); {rate}"
        )
    return out


def memory_constants(
    gpu: str = "B300",
    model: str = "Kimi-K3",
    context_tokens: int = 204800,
    mem_util: float = 0.92,
    tp: int = 8,
    dcp: int = 8,
    a: Assumptions = Assumptions(),
) -> pl.DataFrame:
    """The memory constants the ceilings rest on, one row per value: the constant, its value, its source, the
    configuration it moves and that configuration's ceiling at ``context_tokens`` (sequences) under it: the GPU's
    memory, vLLM's non-KV memory inside its target (:data:`NON_KV_INSIDE_VLLM_TARGET`), SGLang's state-pool ratio
    (:data:`STATE_POOL_RATIOS`) and the need outside the target per engine (:attr:`Assumptions.outside_pool_fraction`)."""
    vllm, sglang = Config.of(gpu, model, VLLM, tp, 1, mem_util), Config.of(gpu, model, SGLANG, tp, dcp, mem_util)
    g = vllm.gpu
    rows = [("GPU memory", f"{g.memory_bytes / GIB:,.1f} GiB", g.citation, vllm, a)]
    log = "the model's assumption (unsourced)", '"Kimi-K2-Thinking Usage Guide" (vLLM project recipes, GitHub, 2025-11)'
    for b, src in zip(NON_KV_INSIDE_VLLM_TARGET, log):
        rows.append((NON_KV_CONSTANT, f"{b / GIB:.1f} GiB", src, vllm,
                     replace(a, activation_bytes_per_gpu=b)))  # fmt: skip
    # each source given once, on its constant's first row (a table row per value)
    if sglang.model.linear_state_bytes_per_seq:
        for i, r in enumerate(STATE_POOL_RATIOS):
            src = "--mamba-full-memory-ratio (default 0.9: sgl-project/sglang server_args.py, GitHub, 2026)"
            rows.append((STATE_RATIO_CONSTANT, f"{r:g}", src if not i else "the same setting",
                         sglang, replace(a, sglang_state_pool_ratio=r)))  # fmt: skip
    for i, cfg in enumerate((vllm, sglang)):
        src = "the window the B300 article implies (0.95 failed, 0.92 ran)"
        rows.append(("need outside the target", f"{a.outside_pool_fraction:.1%} of memory",
                     src if not i else "the same window", cfg, a))  # fmt: skip
    out = []
    for name, value, src, cfg, ai in rows:
        m = memory(cfg, context_tokens, ai)
        out.append({"constant": name, "value": value, "source": src, "config": cfg.label(),
                    "context_tokens": context_tokens, "mem_util": mem_util, "ceiling_seqs": m.max_concurrent_seqs,
                    "limited_by": m.limited_by, "fits": m.fits})  # fmt: skip
    return pl.DataFrame(out)
