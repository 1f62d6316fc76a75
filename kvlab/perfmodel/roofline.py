"""Roofline model of one engine configuration on one host: prefill, decode under TP/DCP, memory feasibility.

Everything here is a closed-form function of catalog figures (:mod:`kvlab.catalog`),
a :class:`Workload` (the article's unknowns), :class:`Assumptions` (fixed, stated) and
:class:`Params` (the few free parameters that :mod:`kvlab.perfmodel.calibrate` fits).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from scipy.optimize import brentq

from kvlab.engines.registry import FAMILY_OF, SGLANG
from kvlab.catalog import GPU, Model, gpu as find_gpu, model as find_model

GIB = 1024**3


@dataclass(frozen=True)
class Workload:
    """A fixed batch: ``batch_size`` prompts of ``context_tokens`` each, all sent at once, each
    generating ``output_tokens``. The B300 article states neither batch size nor output length;
    these defaults are the model's one place for them, and they equal the shipped experiment
    ``data/experiments/b300_long_context.yaml`` (a test keeps the two together).

    - ``batch_size = 8``: the article holds one batch fixed for both engines and contexts, and both
      ran at a 0.92 memory target. With vLLM keeping a full MLA KV copy on every GPU the model fits
      about 10 Kimi-K3 sequences of 200K per B300 at 0.92 (:func:`memory`), so 8 is the largest round
      batch that runs in one wave for vLLM at 200K. A batch that does not fit runs in waves here.
    - ``output_tokens = 1024``: a common benchmark output length, short beside 64K-200K prompts, so
      prompt length stays what "context" means. It is also the least favourable reading for the
      physics: the fitted decode bandwidth efficiency scales with ``batch_size x output_tokens``
      (8 x 1024 needs ~3% of peak; 8 x 4096 ~15%) and the per-layer DCP latency inversely with
      ``output_tokens``. The fit quality and the crossover barely move: see
      :func:`kvlab.perfmodel.calibrate.sensitivity` and the what-if notebook.

    **Context** means one thing everywhere in kvlab — experiment files, results, model and reports: the
    tokens a sequence holds at its end, prompt + output. A published "64K" row is 65,536 tokens of context,
    so its prompt is 65,536 − ``output_tokens``; measured rows state both.
    """

    batch_size: int = 8
    output_tokens: int = 1024


@dataclass(frozen=True)
class Assumptions:
    """Fixed figures of the model that are not fitted and not in the catalogs (each a stated guess)."""

    #: TP of both engines in the B300 article (8 GPUs; DCP reuses the TP ranks). The article says only
    #: that vLLM "kept its single-GPU decode path": read here as TP 8 without DCP.
    published_tp: int = 8
    #: memory target when a row does not give one: the article's runs that completed used 0.92.
    default_mem_util: float = 0.92
    #: latency of one small-message all-reduce over NVLink inside one host (custom/NCCL all-reduce).
    tp_allreduce_latency_s: float = 10e-6
    #: TP all-reduces per layer per decode step (after attention and after the MLP/MoE).
    allreduces_per_layer: int = 2
    #: activations, sampler and CUDA-graph buffers counted inside the memory target.
    activation_bytes_per_gpu: float = 4 * GIB
    #: fraction of device memory the process needs outside the target (CUDA context, NCCL buffers,
    #: fragmentation). Not derived: 6.5% is the middle of the window the B300 article implies (0.95 leaves
    #: 5% and failed, 0.92 leaves 8% and worked). The model restates that claim; it does not predict it.
    outside_pool_fraction: float = 0.065
    #: MLA layers holding KV; None = the catalog's count (Kimi-K3: 24; 93 in the other reading).
    kv_layers: int | None = None
    #: values an MLA layer caches per token; None = kv_lora_rank + qk_rope_dim (576; 512 without the rope part).
    mla_width: int | None = None
    #: routed experts a decode step reads: "uniform" = the distinct experts the whole batch touches under
    #: uniform independent routing (an upper bound); "active" = one token's top-k only (perfectly correlated
    #: routing, the lower bound). Real routing lies between (:meth:`Model.decode_weight_bytes`).
    expert_reads: str = "uniform"
    #: number format of the KV cache (:data:`~kvlab.catalog.KV_FORMATS`): "bf16" (the catalog's 2 B per
    #: value), "fp8" (1 B), or "fp8_packed_mla" (FlashMLA's FP8 MLA layout: the latent in FP8 with one FP32 scale
    #: per 128 values, the rope part kept in BF16; 656 B per layer and token at width 576). InferenceX's Kimi-K3 recipes
    #: default to FP8 KV; the article does not say, so this is an open assumption of the range.
    kv_format: str = "bf16"
    #: SGLang keeps a linear-attention (KDA) state in a pool of its own, beside the KV pool: of the memory its
    #: ``--mem-fraction-static`` leaves after the weights, the state pool gets ratio / (1 + ratio) and the KV pool the
    #: rest (SGLang's ``--mamba-full-memory-ratio``, default 0.9: sgl-project/sglang, ``server_args.py`` and the model
    #: runner's pool sizing, GitHub, 2026). Only for a model with such a state; vLLM keeps it in its one KV pool.
    sglang_state_pool_ratio: float = 0.9


@dataclass(frozen=True)
class Params:
    """The free parameters (fitted per hardware by :func:`kvlab.perfmodel.calibrate.calibrate`)."""

    #: achieved fraction of dense peak FLOP/s during prefill.
    prefill_efficiency: float = 0.5
    #: achieved fraction of peak memory bandwidth while reading weights, KV and state in decode.
    bandwidth_efficiency: float = 0.7
    #: latency of DCP's one collective per full-attention layer per decode step (the all-gather / LSE merge of
    #: partial outputs); its message size over the link bandwidth is added separately (:func:`decode_step`).
    dcp_layer_latency_s: float = 30e-6
    #: each engine's own time per decode step outside reading memory and communicating (scheduler, sampling,
    #: kernel launches, host synchronisation): c(vLLM) and c(SGLang). Named, never hidden in another term.
    vllm_step_overhead_s: float = 0.0
    sglang_step_overhead_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def step_overhead_s(self, engine: str) -> float:
        """c(engine): the per-step overhead of ``engine`` (SGLang's for SGLang's family, sglang-jax included;
        vLLM's otherwise)."""
        return self.sglang_step_overhead_s if FAMILY_OF.get(engine, engine) == SGLANG else self.vllm_step_overhead_s


#: The pure roofline: peak compute and bandwidth, no latency. Used for "fraction of the bound".
BOUND = Params(prefill_efficiency=1.0, bandwidth_efficiency=1.0, dcp_layer_latency_s=0.0)


@dataclass(frozen=True)
class Config:
    """One engine configuration on one host."""

    gpu: GPU
    model: Model
    engine: str
    tp: int = 8
    dcp: int = 1
    #: None = no memory limit modelled (the CPU host, whose KV space is set in bytes, not by a fraction).
    mem_util: float | None = 0.92
    #: an explicit KV budget per GPU (vLLM --kv-cache-memory-bytes; the CPU experiment's budgets):
    #: replaces the pool computed from ``mem_util``.
    kv_cache_bytes: float | None = None

    def __post_init__(self):
        if self.tp < 1 or self.dcp < 1 or self.tp % self.dcp:
            raise ValueError(f"tp {self.tp} and dcp {self.dcp}: both >= 1 and tp % dcp == 0 required")
        if self.mem_util is not None and not 0 < self.mem_util <= 1:
            raise ValueError(f"mem_util {self.mem_util} must be in (0, 1]")

    @classmethod
    def of(
        cls, gpu: str, model: str, engine: str, tp: int = 8, dcp: int = 1, mem_util: float | None = 0.92,
        kv_cache_bytes: float | None = None,
    ) -> Config:  # fmt: skip
        return cls(find_gpu(gpu), find_model(model), engine, tp, dcp, mem_util, kv_cache_bytes)

    def label(self) -> str:
        return f"{self.engine} TP{self.tp}" + (f"+DCP{self.dcp}" if self.dcp > 1 else "")


# --------------------------------------------------------------------------- memory


def kv_split(cfg: Config) -> int:
    """Over how many GPUs one token's KV is divided.

    GQA shards KV heads across TP (up to the number of KV heads); DCP further interleaves tokens.
    MLA has one shared latent (kv_heads = 1): TP alone keeps a full copy on every GPU, DCP divides it.
    """
    return min(cfg.tp, cfg.model.kv_heads * cfg.dcp)


def kv_bytes_per_token_per_gpu(cfg: Config, a: Assumptions = Assumptions()) -> float:
    return cfg.model.kv_bytes_per_token(a.kv_layers, a.mla_width, a.kv_format) / kv_split(cfg)


def state_bytes_per_seq_per_gpu(cfg: Config) -> float:
    """Linear-attention state of one sequence on one GPU (heads split over TP)."""
    return cfg.model.linear_state_bytes_per_seq / cfg.tp


@dataclass(frozen=True)
class Memory:
    """Memory picture of one configuration at one context, per GPU."""

    weights_bytes_per_gpu: float
    kv_pool_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int  # tokens the replica's KV pool holds (the figure engines log)
    max_concurrent_seqs: int  # sequences of this context that fit at once
    outside_pool_bytes_per_gpu: float  # (1 - mem_util) x memory
    fits: bool
    reason: str
    #: SGLang's separate linear-state pool (0 where the state shares the KV pool, as in vLLM, or there is none)
    state_pool_bytes_per_gpu: float = 0.0
    #: what sets ``max_concurrent_seqs``: "KV" (the KV pool, state included where it shares it) or "state"
    limited_by: str = "KV"


def is_sglang(engine: str) -> bool:
    return FAMILY_OF.get(engine, engine) == SGLANG


def memory(cfg: Config, context_tokens: int, a: Assumptions = Assumptions()) -> Memory:
    """Weights per GPU, KV pool and capacity at ``cfg.mem_util``, sequences that fit, and whether a run fits: the
    engine's own pool semantics (the one function every concurrency ceiling comes from, :mod:`kvlab.perfmodel.pools`).

    - vLLM (``--gpu-memory-utilization``): the target holds weights, activations and the KV pool; a linear-attention
      state shares the KV pool (one pool, each sequence charged its KV and its state).
    - SGLang (``--mem-fraction-static``): the fraction holds weights and pools only, activations live outside it; a
      linear-attention state has a pool of its own (:attr:`Assumptions.sglang_state_pool_ratio`), whose slots DCP does
      not raise: DCP shards only the MLA cache ("Decode Context Parallelism", SGLang documentation, 2026,
      https://docs.sglang.io/docs/advanced_features/dcp.md). The ceiling is the smaller of the two pools' counts.
    """
    weights = cfg.model.weight_bytes() / cfg.tp
    per_tok = kv_bytes_per_token_per_gpu(cfg, a)
    state = state_bytes_per_seq_per_gpu(cfg)
    per_seq = context_tokens * per_tok + state
    if cfg.kv_cache_bytes is not None:
        pool = cfg.kv_cache_bytes
        seqs = int(pool // per_seq)
        reason = (
            "fits"
            if seqs >= 1
            else f"one {context_tokens}-token sequence needs {per_seq:,.0f} B of KV, budget {pool:,.0f} B"
        )
        return Memory(weights, pool, per_tok, int(pool // per_tok), seqs, math.inf, seqs >= 1, reason)
    if cfg.mem_util is None:
        return Memory(weights, math.inf, per_tok, 2**62, 2**62, math.inf, True, "no memory limit modelled")
    total = cfg.gpu.memory_bytes
    sglang = is_sglang(cfg.engine)
    rest = cfg.mem_util * total - weights - (0.0 if sglang else a.activation_bytes_per_gpu)
    state_pool, limited = 0.0, "KV"
    if sglang and state > 0:
        r = a.sglang_state_pool_ratio
        state_pool, pool = rest * r / (1 + r), rest / (1 + r)
        kv_seqs = int(pool // (context_tokens * per_tok)) if pool > 0 else 0
        state_seqs = int(state_pool // state) if state_pool > 0 else 0
        seqs = min(kv_seqs, state_seqs)
        limited = "state" if state_seqs < kv_seqs else "KV"
    else:
        pool = rest
        seqs = int(pool // per_seq) if pool > 0 else 0
    outside = (1 - cfg.mem_util) * total
    cap = int(pool // per_tok) if pool > 0 else 0
    if weights > cfg.mem_util * total:
        reason = f"weights {weights / GIB:.1f} GiB/GPU exceed the target {cfg.mem_util * total / GIB:.1f} GiB"
    elif seqs < 1:
        reason = f"one {context_tokens}-token sequence needs {per_seq / GIB:.2f} GiB/GPU of KV, pool holds {max(pool, 0) / GIB:.2f}"
    elif outside < a.outside_pool_fraction * total:
        reason = (
            f"{outside / GIB:.1f} GiB/GPU left outside the target < assumed need "
            f"{a.outside_pool_fraction * total / GIB:.1f} GiB ({a.outside_pool_fraction:.1%}, article-implied): OOM risk"
        )
    else:
        reason = "fits"
    return Memory(weights, pool, per_tok, cap, seqs, outside, reason == "fits", reason, state_pool, limited)


# --------------------------------------------------------------------------- time


def prefill_time_s(cfg: Config, context_tokens: int, n_seqs: int, p: Params) -> float:
    """Compute-bound prefill of ``n_seqs`` prompts: dense FLOPs (2 x active params per token) plus causal attention
    (pairs x FLOPs per pair), each part at the peak of the number format it runs in (:meth:`Model.prefill_flop_parts`:
    Kimi-K3's BF16 trunk and attention at the BF16 rate, its MXFP4 x MXFP8 experts at the FP8 rate), over all TP GPUs
    at ``prefill_efficiency`` of that peak. Linear-attention layers are counted through their weights only (their
    chunked scan is linear)."""
    g = cfg.gpu
    seconds = sum(f / g.flops_per_s(dtype) for f, dtype in cfg.model.prefill_flop_parts(context_tokens))
    return n_seqs * seconds / (cfg.tp * p.prefill_efficiency)


@dataclass(frozen=True)
class Step:
    """One decode step of ``n_seqs`` sequences at one context: time by part and bytes read per GPU."""

    weights_bytes: float
    kv_bytes: float
    state_bytes: float
    read_s: float
    tp_comm_s: float
    dcp_comm_s: float
    overhead_s: float = 0.0  # c(engine): the engine's own time per step (Params.step_overhead_s)

    @property
    def total_s(self) -> float:
        return self.overhead_s + self.read_s + self.tp_comm_s + self.dcp_comm_s

    @property
    def read_bytes(self) -> float:
        return self.weights_bytes + self.kv_bytes + self.state_bytes


def decode_step(cfg: Config, n_seqs: int, context_tokens: float, p: Params, a: Assumptions = Assumptions()) -> Step:
    """One decode step, per GPU: step = c(engine) + (weights + KV + state bytes read) / achieved bandwidth
    + TP all-reduces + DCP communication.

    - c(engine): :meth:`Params.step_overhead_s`, the engine's own per-step overhead (an explicit parameter).
    - Bytes read: the weights the step touches (every non-routed parameter plus, for a MoE model, the routed
      experts the batch's ``n_seqs`` tokens touch: ``a.expert_reads``), the KV at ``context_tokens`` (split by
      :func:`kv_split`, in ``a.kv_format``) and the linear state, at ``bandwidth_efficiency`` x peak bandwidth.
    - DCP: one collective per full-attention layer, each its latency (``dcp_layer_latency_s``) plus its
      message (partial outputs + log-sum-exp of the step's sequences, FP32) over the link bandwidth."""
    m, g = cfg.model, cfg.gpu
    weights = m.decode_weight_bytes(n_seqs, a.expert_reads) / cfg.tp
    kv = n_seqs * context_tokens * kv_bytes_per_token_per_gpu(cfg, a)
    state = n_seqs * state_bytes_per_seq_per_gpu(cfg)
    read_s = (weights + kv + state) / (g.mem_bandwidth_bytes_per_s * p.bandwidth_efficiency)
    tp_comm = 0.0
    if cfg.tp > 1:
        msg = 2 * (cfg.tp - 1) / cfg.tp * n_seqs * m.hidden_size * 2  # ring all-reduce of BF16 activations
        per = a.tp_allreduce_latency_s + (msg / g.interconnect_bytes_per_s if g.interconnect_bytes_per_s else 0.0)
        tp_comm = m.num_layers * a.allreduces_per_layer * per
    dcp_comm = 0.0
    if cfg.dcp > 1:
        width = (m.kv_lora_rank or m.head_dim or 0) + 1  # partial output + log-sum-exp, FP32
        msg = (cfg.dcp - 1) / cfg.dcp * n_seqs * m.attn_heads * width * 4
        per = p.dcp_layer_latency_s + (msg / g.interconnect_bytes_per_s if g.interconnect_bytes_per_s else 0.0)
        dcp_comm = m.full_attention_layers * per
    return Step(weights, kv, state, read_s, tp_comm, dcp_comm, p.step_overhead_s(cfg.engine))


@dataclass(frozen=True)
class Prediction:
    """Modelled batch time of a fixed batch, with its parts."""

    config: Config
    context_tokens: int
    workload: Workload
    memory: Memory
    concurrent_seqs: int
    waves: int
    prefill_s: float
    decode_s: float
    step_first: Step = field(repr=False)  # decode step of the first wave at its mean context

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def batch_time_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.workload.batch_size * self.workload.output_tokens / self.batch_time_s


def batch_time(
    cfg: Config, context_tokens: int, w: Workload = Workload(), p: Params = Params(), a: Assumptions = Assumptions()
) -> Prediction:
    """Batch time at ``context_tokens`` of context (prompt + output, :class:`Workload`): prefill of every
    prompt (``context_tokens - output_tokens``), then decode of ``output_tokens`` steps per wave.

    Step time is linear in context, so the sum over a wave's steps equals ``output_tokens`` steps at the
    mean context ``prompt + (output_tokens - 1) / 2``. When fewer sequences fit than the batch holds
    (KV at the final context), the batch runs in waves. A run that does not fit still gets a time
    (``fits`` says it would fail): the memory check and the speed model are kept apart.
    """
    prompt = context_tokens - w.output_tokens
    if prompt < 1:
        raise ValueError(f"context {context_tokens} tokens leaves no prompt before {w.output_tokens} output tokens")
    mem = memory(cfg, context_tokens, a)
    conc = max(1, min(w.batch_size, mem.max_concurrent_seqs))
    waves = math.ceil(w.batch_size / conc)
    mean_ctx = prompt + (w.output_tokens - 1) / 2
    prefill = prefill_time_s(cfg, prompt, w.batch_size, p)
    decode, left, first = 0.0, w.batch_size, None
    steps: dict[int, Step] = {}  # every wave but the last holds conc sequences: one step computed per wave size
    while left > 0:
        n = min(conc, left)
        if n not in steps:
            steps[n] = decode_step(cfg, n, mean_ctx, p, a)
        step = steps[n]
        first = first or step
        decode += w.output_tokens * step.total_s
        left -= n
    return Prediction(cfg, context_tokens, w, mem, conc, waves, prefill, decode, first)


@lru_cache(maxsize=4096)
def crossover_context(
    cfg_a: Config,
    cfg_b: Config,
    w: Workload = Workload(),
    p: Params = Params(),
    a: Assumptions = Assumptions(),
    lo_tokens: int = 1024,
    hi_tokens: int = 1 << 20,
) -> float | None:
    """Context (tokens) where ``cfg_a`` and ``cfg_b`` take the same batch time; None when they do not cross
    in [lo, hi] (lo at least twice the output length). The first crossing on a log grid is refined by bisection (scipy's brentq)
    to the first whole-token context at which ``cfg_b`` is the faster one: batch times are computed at whole tokens, so
    that is the answer's precision, and unlike brentq's own stopping point within its tolerance it does not move with
    the CPU's SIMD paths (docs/testing.md, "The model's figures on other CPUs").
    Cached per process for its arguments (all immutable): a notebook re-run in one kernel, or report 04's ranges over
    every assumption set, solves each crossing once."""

    def diff(c: float) -> float:
        return (
            batch_time(cfg_a, int(round(c)), w, p, a).batch_time_s
            - batch_time(cfg_b, int(round(c)), w, p, a).batch_time_s
        )

    lo_tokens = max(lo_tokens, 2 * w.output_tokens)  # a context holds its output: at least as much prompt
    # the grid is walked up to its first sign change (the answer is the first crossing): the contexts past it are
    # never computed
    grid = [lo_tokens * (hi_tokens / lo_tokens) ** (i / 64) for i in range(65)]
    v1 = diff(grid[0])
    for c0, c1 in zip(grid, grid[1:]):
        v0 = v1
        if v0 == 0:
            return c0
        v1 = diff(c1)
        if v0 * v1 < 0:
            n = math.floor(brentq(diff, c0, c1, xtol=1.0))
            while n > c0 and diff(n) * v1 > 0:
                n -= 1
            while diff(n + 1) * v1 <= 0:
                n += 1
            return float(n + 1)
    return None
