"""The model checked where it can fail: published figures that one term of the model could get wrong, each set
against the term's own prediction with a margin (issue 55). Beside :mod:`kvlab.perfmodel.reference`'s throughput
bound (HBM bandwidth ÷ KV bytes, which tests catalog arithmetic and can hardly fail), four kinds of check:

- **capacity** against a published concurrency: the memory fraction the published requests per GPU need for weights
  plus KV at the run's final context (above 1: the model's KV or weight bytes are too large);
- **prefill** against a published TTFT: the prefill's FLOPs at the GPU's peak give a least time on one GPU; a TTFT
  under it needs more GPUs, so the check decides only where the source states the prefill's parallel degree;
- **fitted terms** at a published run's conditions: the step time of a fit (bandwidth efficiency and per-step cost,
  fitted on the B300 article's Kimi-K3 table) carried to another model and host: a *hypothesis test*;
- **KV pool** against an engine's own log (:class:`PoolLog`): the tokens the logged KV memory holds at the model's
  KV bytes per token, and the memory the log implies the engine keeps inside its target besides weights and KV.

Each takes the reading of what its source leaves unstated that makes it hardest to fail; the records say which.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvlab.catalog import KV_FORMATS, CatalogError, gpu as find_gpu, model as find_model
from kvlab.paths import DATA_DIR
from kvlab.perfmodel.reference import RUNS_FILE, SAFE_LOADER, PublishedRun, load_published_runs, per_gpu_terms
from kvlab.perfmodel.roofline import GIB, Config, Params, kv_split

#: Memory fractions the capacity check prints the modelled concurrency at (beside all of memory).
CAPACITY_FRACTIONS = (0.80, 0.85, 0.88, 0.90)


# --------------------------------------------------------------------------- capacity against published concurrency


@dataclass(frozen=True)
class CapacityCheck:
    """The modelled concurrency per GPU at a published run's final context beside its published concurrency."""

    run: PublishedRun
    memory_bytes: float  # the memory read (the source's figure where it states one, else the catalog's)
    catalog_memory_bytes: float
    weights_per_gpu_bytes: float
    kv_bytes_per_seq: float  # KV of one sequence at the final context, per GPU

    def capacity(self, fraction: float = 1.0, memory_bytes: float | None = None) -> float:
        """Sequences of the final context that ``fraction`` of the GPU's memory holds beside the weights."""
        mem = self.memory_bytes if memory_bytes is None else memory_bytes
        return max(0.0, (fraction * mem - self.weights_per_gpu_bytes) / self.kv_bytes_per_seq)

    @property
    def fraction_needed(self) -> float:
        """The share of the GPU's memory the published concurrency needs for weights plus KV."""
        return (self.weights_per_gpu_bytes + self.run.concurrency_per_gpu * self.kv_bytes_per_seq) / self.memory_bytes

    @property
    def margin(self) -> float:
        """Modelled capacity at all of memory ÷ the published concurrency: ≥ 1 when the model holds it."""
        return self.capacity() / self.run.concurrency_per_gpu

    @property
    def consistent(self) -> bool:
        return self.fraction_needed <= 1.0


def at_concurrency(run: PublishedRun) -> PublishedRun:
    """``run`` read at the expert-parallel group its concurrency is stated at (``concurrency_gpus``)."""
    return run.model_copy(update={"gpus": run.concurrency_gpus or run.gpus})


def capacity_check(run: PublishedRun) -> CapacityCheck:
    """:class:`CapacityCheck` of a run that states its concurrency per GPU (read at ``concurrency_gpus``)."""
    run = at_concurrency(run)
    t = per_gpu_terms(run)
    g = find_gpu(run.gpu)
    ctx = run.input_tokens + run.output_tokens
    return CapacityCheck(run, t.memory_bytes, g.memory_bytes, t.stored_bytes, ctx * t.kv_bytes_per_token)


# --------------------------------------------------------------------------- prefill against a published TTFT


@dataclass(frozen=True)
class PrefillCheck:
    """A published TTFT against the least time the prompt's prefill FLOPs take at the GPU's peak."""

    run: PublishedRun
    flops: float  # the whole prefill (dense + attention) of one prompt
    least_flops: float  # what must run at the catalog's rates: all but the routed experts (they may run at FP4)
    one_gpu_s: float  # all of it at the catalog's peak rates on one GPU
    least_one_gpu_s: float  # ``least_flops`` at those rates on one GPU: the hardest-to-fail reading

    @property
    def gpus_needed(self) -> float:
        """GPUs the published TTFT needs at 100% of peak in the hardest-to-fail reading."""
        return self.least_one_gpu_s / self.run.ttft_s

    @property
    def decidable(self) -> bool:
        return self.run.prefill_gpus is not None

    @property
    def least_s(self) -> float | None:
        """The least prefill time over the recorded prefill GPUs (None where the source does not state them)."""
        return self.least_one_gpu_s / self.run.prefill_gpus if self.decidable else None

    @property
    def consistent(self) -> bool | None:
        return None if not self.decidable else self.least_s <= self.run.ttft_s


def prefill_check(run: PublishedRun) -> PrefillCheck:
    """:class:`PrefillCheck` of a run that states a TTFT."""
    m, g = find_model(run.model), find_gpu(run.gpu)
    parts = m.prefill_flop_parts(run.input_tokens)
    flops = sum(f for f, _ in parts)
    seconds = sum(f / g.flops_per_s(d) for f, d in parts)
    routed = 2 * m.routed_active_params * run.input_tokens
    least = flops - routed
    rate = g.flops_per_s(m.compute_dtype)
    return PrefillCheck(run, flops, least, seconds, seconds - routed / rate)


# --------------------------------------------------------------------------- fitted terms at published conditions


def terms_tokens_per_s(run: PublishedRun, p: Params, engine: str | None = None) -> float:
    """Output tokens/s per GPU the fitted terms ``p`` predict at ``run``'s published concurrency: each GPU's step
    reads the non-routed weights, its share of the routed experts the whole group's tokens touch (uniform routing)
    and its sequences' KV at their mean context, at ``p.bandwidth_efficiency`` of peak, plus c(engine). The
    all-to-all of expert parallelism is left out (it would lower the prediction: the hardest reading to fail)."""
    run = at_concurrency(run)
    m, g = find_model(run.model), find_gpu(run.gpu)
    t = per_gpu_terms(run)
    seqs = run.concurrency_per_gpu
    group = seqs * (run.gpus if run.attention == "dp" else 1)
    routed = 0.0
    if m.is_moe:
        touched = m.distinct_experts(group) * m.moe_layers * m.params_per_expert * m.expert_bytes_per_param
        routed = touched / (run.gpus if run.attention == "dp" else run.tp)
    mean_ctx = run.input_tokens + (run.output_tokens - 1) / 2
    read = t.read_weights_bytes + routed + seqs * mean_ctx * t.kv_bytes_per_token
    step = read / (g.mem_bandwidth_bytes_per_s * p.bandwidth_efficiency) + p.step_overhead_s(engine or run.engine)
    return seqs * run.tokens_per_step / step / t.replica_gpus


# --------------------------------------------------------------------------- the KV pool against an engine's log


class PoolLog(BaseModel):
    """An engine's start-up log lines about its KV pool, with where they come from and the conditions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    log_id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    publisher: str = Field(min_length=1)
    published: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$")
    url: str = Field(pattern=r"^https://")
    model: str
    gpu: str
    engine: str
    tp: int = Field(gt=0)
    dcp: int = Field(gt=0)
    kv_format: str
    kv_pool_gib: float = Field(gt=0, description="the logged KV memory per GPU, GiB as printed")
    kv_pool_precision_gib: float = Field(gt=0, description="half the last printed digit")
    kv_tokens: int = Field(gt=0, description="the logged KV cache size in tokens (vLLM: x dcp)")
    block_tokens: int = Field(gt=0, description="the most tokens the pool's whole-block rounding can drop (per rank)")
    mem_util: float = Field(gt=0, le=1, description="the engine's memory target (its default where none is passed)")
    conditions: str = Field(min_length=1)
    verified: str = Field(min_length=1)

    def citation(self) -> str:
        return f'"{self.title}" ({self.publisher}, {self.published}, {self.url})'


def load_pool_logs(data_dir: str | Path = DATA_DIR) -> list[PoolLog]:
    """Every ``pool_logs`` entry of ``data_dir``/reference/published_gpu_runs.yaml, validated (none: [])."""
    path = Path(data_dir) / "reference" / RUNS_FILE
    doc = yaml.load(path.read_text(), Loader=SAFE_LOADER) if path.is_file() else None
    out = []
    for i, row in enumerate((doc or {}).get("pool_logs") or [], start=1):
        where = f"{path}, pool log {i} ({row.get('log_id', '?') if isinstance(row, dict) else '?'})"
        try:
            log = PoolLog.model_validate(row)
        except ValidationError as exc:
            errs = "; ".join(f"field '{'.'.join(map(str, e['loc'])) or '(log)'}': {e['msg']}" for e in exc.errors())
            raise CatalogError(f"{where}: {errs}") from None
        if log.kv_format not in KV_FORMATS:
            raise CatalogError(f"{where}: field 'kv_format': {log.kv_format!r} is not one of {', '.join(KV_FORMATS)}")
        for field, check in (("model", find_model), ("gpu", find_gpu)):
            try:
                check(getattr(log, field))
            except KeyError as exc:
                raise CatalogError(f"{where}: field '{field}': {exc.args[0]}") from None
        out.append(log)
    return out


@dataclass(frozen=True)
class PoolCheck:
    """The tokens a logged KV pool holds at the model's KV bytes per token, beside the logged tokens."""

    log: PoolLog
    bytes_per_token_per_gpu: float  # the model's
    weights_per_gpu_bytes: float
    memory_bytes: float  # the catalog's GPU memory

    @property
    def modelled_tokens(self) -> float:
        """Tokens the logged pool holds at the model's bytes per token per GPU (DCP's split included: the engine's
        own count, which vLLM multiplies by the DCP size)."""
        return self.log.kv_pool_gib * GIB / self.bytes_per_token_per_gpu

    @property
    def tolerance(self) -> float:
        """The relative difference the log's rounding allows: its printed GiB and one block per rank."""
        lg = self.log
        return lg.kv_pool_precision_gib / lg.kv_pool_gib + lg.block_tokens * lg.dcp / lg.kv_tokens

    @property
    def margin(self) -> float:
        """Logged tokens ÷ modelled tokens: 1 within :attr:`tolerance` when the KV formula holds."""
        return self.log.kv_tokens / self.modelled_tokens

    @property
    def implied_bytes_per_token(self) -> float:
        """The log's own KV bytes per token per GPU (pool ÷ logged tokens; × DCP: per token of the whole model)."""
        return self.log.kv_pool_gib * GIB / self.log.kv_tokens

    @property
    def consistent(self) -> bool:
        return abs(self.margin - 1) <= self.tolerance

    @property
    def non_kv_inside_target_bytes(self) -> float:
        """What the engine keeps inside its target besides weights and KV, per GPU: target − weights − pool."""
        return self.log.mem_util * self.memory_bytes - self.weights_per_gpu_bytes - self.log.kv_pool_gib * GIB


def pool_check(log: PoolLog) -> PoolCheck:
    cfg = Config.of(log.gpu, log.model, log.engine, log.tp, log.dcp, log.mem_util)
    per_tok = cfg.model.kv_bytes_per_token(kv_format=log.kv_format) / kv_split(cfg)
    return PoolCheck(log, per_tok, cfg.model.weight_bytes() / log.tp, cfg.gpu.memory_bytes)


# --------------------------------------------------------------------------- all of them


@dataclass(frozen=True)
class OutsideChecks:
    """Every check of this module on one data folder's records."""

    capacity: tuple[CapacityCheck, ...]
    prefill: tuple[PrefillCheck, ...]
    pools: tuple[PoolCheck, ...]
    runs: tuple[PublishedRun, ...]


def outside_checks(data_dir: str | Path = DATA_DIR) -> OutsideChecks:
    """The capacity, prefill and pool checks of every record that states what each needs (the fitted-terms test
    needs fits: :func:`terms_tokens_per_s`, over a study's refits)."""
    runs = load_published_runs(data_dir)
    return OutsideChecks(
        tuple(capacity_check(r) for r in runs if r.concurrency_per_gpu),
        tuple(prefill_check(r) for r in runs if r.ttft_s),
        tuple(pool_check(lg) for lg in load_pool_logs(data_dir)),
        tuple(runs),
    )
