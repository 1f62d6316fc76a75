"""The model against published measured GPU runs: a roofline is an upper bound on throughput, so a published
*measured* figure above the model's bound falsifies it (and its modelled KV capacity must hold the published
concurrency). The runs, with their citations and conditions, are in ``data/reference/published_gpu_runs.yaml``.

The bound at a run's conditions: the most sequences the GPU's memory holds at the run's context (all of its memory,
the larger of the catalog's figure and the source's, weights as stored, the KV in the run's number format), each decode step reading at least the non-routed weights the
step uses and every sequence's KV at the prompt's length, at 100% of peak bandwidth. Every choice raises the bound
(no activations, no routed-expert reads, the shortest context), so a published figure above it is a contradiction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvlab.paths import DATA_DIR
from kvlab.catalog import KV_FORMATS, CatalogError, gpu as find_gpu, model as find_model

#: PyYAML's safe loader in C (libyaml, in PyYAML's wheels; the pure-Python one where it is missing): the same
#: documents, about ten times faster, read on every model computation
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

RUNS_FILE = "published_gpu_runs.yaml"


class PublishedRun(BaseModel):
    """One published measured run: what was measured, where and how (its conditions), and its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    publisher: str = Field(min_length=1)
    published: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="date, YYYY-MM-DD")
    url: str = Field(pattern=r"^https://")
    model: str = Field(description="catalog model (data/catalog/models.csv)")
    gpu: str = Field(description="catalog GPU (data/catalog/gpus.csv)")
    engine: str
    attention: Literal["dp", "tp"] = Field(
        description="dp: attention data-parallel (each GPU its own sequences and "
        "KV, experts spread over `gpus`); tp: one TP replica"
    )
    gpus: int = Field(gt=0, description="GPUs of one decode instance (dp: the expert-parallel group)")
    tp: int = Field(gt=0)
    dcp: int = Field(gt=0)
    kv_format: str
    input_tokens: int = Field(gt=0)
    output_tokens: int = Field(ge=0)
    metric: Literal["output_tokens_per_s_per_gpu"]
    value: float = Field(gt=0)
    concurrency_per_gpu: float | None = Field(default=None, gt=0)
    concurrency_gpus: int | None = Field(
        default=None, gt=0, description="the expert-parallel group the concurrency is stated at (empty: `gpus`)"
    )
    kv_usage: float | None = Field(default=None, gt=0, le=1)
    tokens_per_step: float = Field(default=1.0, gt=0, description="output tokens per request per decode step")
    memory_gb: float | None = Field(
        default=None, gt=0, description="GPU memory as the source states it (GB); empty: the catalog's"
    )
    ttft_s: float | None = Field(default=None, gt=0, description="published time to first token of one prompt")
    prefill_gpus: int | None = Field(
        default=None, gt=0, description="GPUs one prompt's prefill runs over (empty: the source does not state it)"
    )
    per_gpu: str = Field(
        default="", description="what the per-GPU figure divides by, as the source states it or as read here"
    )
    conditions: str = Field(min_length=1)
    verified: str = Field(min_length=1, description="how and when the figures were checked against the source")

    def citation(self) -> str:
        return f'"{self.title}" ({self.publisher}, {self.published}, {self.url})'


def load_published_runs(data_dir: str | Path = DATA_DIR) -> list[PublishedRun]:
    """Every published run of ``data_dir``/reference/published_gpu_runs.yaml, validated; a bad value raises
    :class:`CatalogError` naming the file, the run (its position and id) and the field."""
    path = Path(data_dir) / "reference" / RUNS_FILE
    if not path.is_file():
        raise CatalogError(f"{path}: file missing")
    try:
        doc = yaml.load(path.read_text(), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML: {exc}") from None
    entries = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CatalogError(f"{path}: field 'runs': a non-empty list of runs expected")
    out = []
    for i, row in enumerate(entries, start=1):
        where = f"{path}, run {i} ({row.get('run_id', '?') if isinstance(row, dict) else '?'})"
        try:
            run = PublishedRun.model_validate(row)
        except ValidationError as exc:
            errs = "; ".join(f"field '{'.'.join(map(str, e['loc'])) or '(run)'}': {e['msg']}" for e in exc.errors())
            raise CatalogError(f"{where}: {errs}") from None
        for field, check in (("model", find_model), ("gpu", find_gpu)):
            try:
                check(getattr(run, field))
            except KeyError as exc:
                raise CatalogError(f"{where}: field '{field}': {exc.args[0]}") from None
        if run.kv_format not in KV_FORMATS:
            raise CatalogError(f"{where}: field 'kv_format': {run.kv_format!r} is not one of {', '.join(KV_FORMATS)}")
        out.append(run)
    return out


@dataclass(frozen=True)
class BoundCheck:
    """The model's throughput bound at one published run's conditions beside the published figure."""

    run: PublishedRun
    bound: float  # output tokens/s per GPU
    capacity_per_gpu: float  # sequences of the run's final context the GPU's memory holds
    kv_read_share: float  # share of the bound step's bytes that are KV (the rest weights)
    weights_per_gpu_bytes: float
    kv_bytes_per_token_per_gpu: float

    @property
    def margin(self) -> float:
        """Bound ÷ published figure: ≥ 1 when the model is consistent with the run."""
        return self.bound / self.run.value

    @property
    def capacity_ok(self) -> bool:
        """The modelled KV capacity holds the published concurrency (at the published KV usage where stated)."""
        c = self.run.concurrency_per_gpu
        return c is None or c <= self.capacity_per_gpu * (self.run.kv_usage or 1.0) + 1e-9

    @property
    def consistent(self) -> bool:
        return self.margin >= 1 and self.capacity_ok

    def wrong_term(self) -> str:
        """Which term of the model a contradiction points at ('' when consistent)."""
        if not self.capacity_ok:
            return (
                f"the KV capacity: {self.capacity_per_gpu:,.1f} sequences per GPU modelled, "
                f"{self.run.concurrency_per_gpu:g} published (KV bytes per token "
                f"{self.kv_bytes_per_token_per_gpu:,.0f} B per GPU or weights {self.weights_per_gpu_bytes / 1e9:,.1f} "
                "GB per GPU too large)"
            )
        if self.margin >= 1:
            return ""
        part = (
            f"the KV bytes read per step ({self.kv_bytes_per_token_per_gpu:,.0f} B per token per GPU in "
            f"{self.run.kv_format})"
            if self.kv_read_share >= 0.5
            else f"the weight bytes read per step ({self.weights_per_gpu_bytes / 1e9:,.1f} GB stored per GPU)"
        )
        return (
            f"{part}, or the peak bandwidth, is too large for the published rate: {self.kv_read_share:.0%} of the "
            "bound step's bytes are KV"
        )


@dataclass(frozen=True)
class PerGpu:
    """What one GPU of a published run holds and reads: KV bytes per token, stored weight bytes, the non-routed weight
    bytes a step reads, the GPUs one replica spans and the memory read (the larger of the catalog's and the
    source's: the reading that raises every bound)."""

    kv_bytes_per_token: float
    stored_bytes: float
    read_weights_bytes: float
    replica_gpus: int
    memory_bytes: float


def per_gpu_terms(run: PublishedRun) -> PerGpu:
    """:class:`PerGpu` at ``run``'s parallelism: attention data-parallel (each GPU its own sequences, the whole
    non-routed model, 1/gpus of the experts) or one TP (+DCP) replica over tp GPUs."""
    m, g = find_model(run.model), find_gpu(run.gpu)
    kv_tok = m.kv_bytes_per_token(kv_format=run.kv_format)
    routed_total = m.moe_layers * m.routed_experts * m.params_per_expert if m.is_moe else 0.0
    dense_bpp = m.dense_bytes_per_param if m.is_moe else m.weight_bytes_per_param
    dense_total = m.total_params - routed_total
    dense_active = m.active_params - m.routed_active_params
    memory = max(g.memory_bytes, (run.memory_gb or 0) * 1e9)
    if run.attention == "dp":
        stored = dense_total * dense_bpp + routed_total * (m.expert_bytes_per_param or 0) / run.gpus
        return PerGpu(kv_tok, stored, dense_active * dense_bpp, 1, memory)
    split = min(run.tp, m.kv_heads * run.dcp)
    return PerGpu(kv_tok / split, m.weight_bytes() / run.tp, dense_active * dense_bpp / run.tp, run.tp, memory)


def bound_check(run: PublishedRun) -> BoundCheck:
    """The upper bound on output tokens/s per GPU at ``run``'s conditions (see the module's docstring)."""
    g = find_gpu(run.gpu)
    t = per_gpu_terms(run)
    per_tok, stored, read_w = t.kv_bytes_per_token, t.stored_bytes, t.read_weights_bytes
    ctx_end = run.input_tokens + run.output_tokens
    cap = max(0.0, (t.memory_bytes - stored) / (ctx_end * per_tok))
    seqs = math.floor(cap)
    kv_read = seqs * run.input_tokens * per_tok
    step = (read_w + kv_read) / g.mem_bandwidth_bytes_per_s
    bound = seqs * run.tokens_per_step / step / t.replica_gpus if seqs else 0.0
    return BoundCheck(run, bound, cap, kv_read / (read_w + kv_read) if seqs else 0.0, stored, per_tok)


def bound_checks(data_dir: str | Path = DATA_DIR) -> list[BoundCheck]:
    """:func:`bound_check` for every published run of ``data_dir``."""
    return [bound_check(r) for r in load_published_runs(data_dir)]
