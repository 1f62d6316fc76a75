"""GPU and model catalogs for the physical model, read and validated from data/catalog/*.csv."""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvlab.paths import CATALOG_DIR

GPUS_FILE = "gpus.csv"
MODELS_FILE = "models.csv"
#: KV number formats the model knows (:meth:`Model.kv_bytes_per_token`; the model's ``Assumptions.kv_format``).
KV_FORMATS = ("bf16", "fp8", "fp8_packed_mla")


class CatalogError(ValueError):
    """A catalog file is malformed; the message names the file, the row and the field."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    derived_fields: tuple[str, ...] = Field(
        default=(), description="fields whose value is derived or assumed rather than read off a datasheet/config"
    )
    citation: str = Field(min_length=1, description="where the figures come from")
    notes: str = ""

    def is_derived(self, field: str) -> bool:
        return field in self.derived_fields

    @model_validator(mode="after")
    def _derived_fields_exist(self):
        unknown = [f for f in self.derived_fields if f not in type(self).model_fields]
        if unknown:
            raise ValueError(f"derived_fields names unknown field(s) {unknown}")
        return self


class GPU(_Row):
    """One accelerator (or the CPU host): per-device figures."""

    gpu: str = Field(description="short key, e.g. 'B300'")
    name: str = Field(
        description="the GPU's name as NVIDIA writes it; a run's accelerator (RUNS) matches when it starts with it"
    )
    memory_bytes: float = Field(gt=0)
    mem_bandwidth_bytes_per_s: float = Field(gt=0)
    interconnect_bytes_per_s: float = Field(
        ge=0,
        description="per-GPU NVLink bandwidth per direction (half the datasheet's bidirectional total); 0 when none",
    )
    bf16_flops_per_s: float = Field(gt=0, description="dense BF16")
    fp8_flops_per_s: float = Field(gt=0, description="dense FP8")

    def flops_per_s(self, dtype: str) -> float:
        return self.fp8_flops_per_s if dtype == "fp8" else self.bf16_flops_per_s


class Model(_Row):
    """One served model: the structure that decides KV bytes, weight bytes and FLOPs."""

    model: str
    aliases: tuple[str, ...] = ()
    attention_type: Literal["mla", "gqa", "hybrid"]
    num_layers: int = Field(gt=0)
    mla_layers: int = Field(ge=0)
    gqa_layers: int = Field(ge=0)
    linear_layers: int = Field(ge=0)
    hidden_size: int = Field(gt=0)
    attn_heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0, description="KV heads of a GQA layer; 1 for MLA (one shared latent)")
    head_dim: int | None = Field(default=None, gt=0, description="GQA head dimension")
    kv_lora_rank: int | None = Field(default=None, gt=0, description="MLA latent rank")
    qk_rope_dim: int | None = Field(default=None, gt=0)
    qk_nope_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    kv_dtype_bytes: int = Field(gt=0, description="bytes per KV element (2 = BF16)")
    kv_layers_alt: int | None = Field(
        default=None, gt=0, description="MLA layer count of an alternative reading of the KV size (Kimi-K3: 93)"
    )
    linear_state_bytes_per_seq: float = Field(ge=0, description="fixed per-sequence state of linear-attention layers")
    total_params: float = Field(gt=0)
    active_params: float = Field(gt=0)
    weight_bytes_per_param: float = Field(gt=0)
    compute_dtype: Literal["bf16", "fp8"]
    #: Mixed-precision prefill: the active parameters whose matrix products run in BF16 (priced at the BF16 rate, the
    #: rest of the active parameters at ``compute_dtype``'s); empty = every active parameter at ``compute_dtype``.
    bf16_active_params: float | None = Field(default=None, ge=0)
    #: number format of prefill attention (QK^T and PV); empty = ``compute_dtype``.
    attention_dtype: Literal["bf16", "fp8"] | None = None
    native_context: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    # Mixture of experts (all four empty for a dense model): what a decode step reads depends on how many
    # distinct routed experts the whole batch touches, not on the per-token active set alone.
    moe_layers: int | None = Field(default=None, gt=0, description="layers whose MLP routes to experts")
    routed_experts: int | None = Field(default=None, gt=0, description="routed experts per MoE layer (E)")
    experts_per_token: int | None = Field(default=None, gt=0, description="routed experts each token uses (top-k)")
    params_per_expert: float | None = Field(default=None, gt=0, description="parameters of one routed expert")
    expert_bytes_per_param: float | None = Field(
        default=None, gt=0, description="stored bytes per routed-expert parameter (MXFP4 0.53125, INT4 g32 0.5625)"
    )
    dense_bytes_per_param: float | None = Field(
        default=None, gt=0, description="stored bytes per parameter outside the routed experts (read every step)"
    )

    @model_validator(mode="after")
    def _consistent(self):
        if self.mla_layers + self.gqa_layers + self.linear_layers != self.num_layers:
            raise ValueError(
                f"mla_layers + gqa_layers + linear_layers = "
                f"{self.mla_layers + self.gqa_layers + self.linear_layers} != num_layers {self.num_layers}"
            )
        if self.mla_layers and None in (self.kv_lora_rank, self.qk_rope_dim, self.qk_nope_dim, self.v_head_dim):
            raise ValueError("MLA layers need kv_lora_rank, qk_rope_dim, qk_nope_dim and v_head_dim")
        if self.gqa_layers and self.head_dim is None:
            raise ValueError("GQA layers need head_dim")
        if self.active_params > self.total_params:
            raise ValueError("active_params exceeds total_params")
        if self.bf16_active_params is not None and self.bf16_active_params > self.active_params:
            raise ValueError("bf16_active_params exceeds active_params")
        moe = (
            self.moe_layers,
            self.routed_experts,
            self.experts_per_token,
            self.params_per_expert,
            self.expert_bytes_per_param,
            self.dense_bytes_per_param,
        )
        if any(v is not None for v in moe) and None in moe:
            raise ValueError(
                "a MoE row needs all of moe_layers, routed_experts, experts_per_token, params_per_expert, "
                "expert_bytes_per_param and dense_bytes_per_param (a dense row none)"
            )
        if self.is_moe and self.experts_per_token > self.routed_experts:
            raise ValueError("experts_per_token exceeds routed_experts")
        if self.is_moe and self.routed_active_params > self.active_params:
            raise ValueError("moe_layers x experts_per_token x params_per_expert exceeds active_params")
        return self

    # ------------------------------------------------------------------ mixture of experts

    @property
    def is_moe(self) -> bool:
        return self.routed_experts is not None

    @property
    def routed_active_params(self) -> float:
        """Routed-expert parameters one token uses (all MoE layers)."""
        return self.moe_layers * self.experts_per_token * self.params_per_expert if self.is_moe else 0.0

    def distinct_experts(self, tokens: float) -> float:
        """Expected distinct routed experts per MoE layer that ``tokens`` tokens (one decode step of a batch)
        touch when each picks ``experts_per_token`` of ``routed_experts`` uniformly and independently:
        E·(1 − (1 − k/E)^B). An upper bound in practice (real routing is correlated); ``k`` at B = 1."""
        if not self.is_moe:
            return 0.0
        e, k = self.routed_experts, self.experts_per_token
        return e * (1 - (1 - k / e) ** max(tokens, 1))

    def decode_weight_bytes(self, tokens: float = 1, expert_reads: str = "uniform") -> float:
        """Weight bytes one decode step reads (whole model): every non-routed parameter, plus the routed experts
        the step's ``tokens`` touch — ``"uniform"``: :meth:`distinct_experts` (batch-wide, uniform routing);
        ``"active"``: only one token's top-k (perfectly correlated routing, the lower bound). A dense model
        reads its active parameters at the blended ``weight_bytes_per_param``."""
        if expert_reads not in ("uniform", "active"):
            raise ValueError(f"expert_reads must be 'uniform' or 'active', not {expert_reads!r}")
        if not self.is_moe:
            return self.active_weight_bytes()
        per_layer = self.distinct_experts(tokens) if expert_reads == "uniform" else self.experts_per_token
        routed = self.moe_layers * per_layer * self.params_per_expert * self.expert_bytes_per_param
        return (self.active_params - self.routed_active_params) * self.dense_bytes_per_param + routed

    # ------------------------------------------------------------------ structure

    def kv_bytes_per_token(
        self, kv_layers: int | None = None, mla_width: int | None = None, kv_format: str | None = None
    ) -> int:
        """KV-cache bytes one token costs over all layers (whole model, before any split).

        ``kv_layers`` replaces the number of MLA layers holding KV (Kimi-K3: 24, or 93 in
        the reading that counts every layer); ``mla_width`` the values an MLA layer caches per token
        (default ``kv_lora_rank + qk_rope_dim``, 576; 512 if the decoupled key part were not cached);
        GQA layers are unaffected, and so is a model without MLA layers (both readings are about MLA).
        ``kv_format`` (None = the catalog's ``kv_dtype_bytes``): "bf16" 2 B per value, "fp8" 1 B, or
        "fp8_packed_mla" — FlashMLA's FP8 MLA cache (DeepSeek, "FlashMLA" README, 2025): the latent in FP8 with
        one FP32 scale per 128 values and the rope part in BF16, 512 + 16 + 128 = 656 B per layer at width 576
        (GQA layers: FP8).
        """
        if kv_format is not None and kv_format not in KV_FORMATS:
            raise ValueError(f"kv_format must be {', '.join(KV_FORMATS[:-1])} or {KV_FORMATS[-1]}, not {kv_format!r}")
        elem = {None: self.kv_dtype_bytes, "bf16": 2, "fp8": 1, "fp8_packed_mla": 1}[kv_format]
        mla = kv_layers if kv_layers is not None and self.mla_layers else self.mla_layers
        total = 0
        if mla:
            width = mla_width or self.kv_lora_rank + self.qk_rope_dim
            if kv_format == "fp8_packed_mla":
                latent = min(width, self.kv_lora_rank)
                rope = width - latent
                total += mla * (latent + 4 * math.ceil(latent / 128) + 2 * rope)
            else:
                total += mla * width * elem
        if self.gqa_layers:
            total += self.gqa_layers * self.kv_heads * self.head_dim * 2 * elem
        return int(total)

    @property
    def full_attention_layers(self) -> int:
        """Layers whose KV grows with context (the ones DCP splits and syncs)."""
        return self.mla_layers + self.gqa_layers

    def attn_flops_per_pair(self) -> float:
        """FLOPs of one (query, key) pair summed over the full-attention layers (prefill, QK^T and PV)."""
        mla = 2 * self.attn_heads * (self.qk_nope_dim + self.qk_rope_dim + self.v_head_dim) if self.mla_layers else 0
        gqa = 2 * self.attn_heads * 2 * self.head_dim if self.gqa_layers else 0
        return float(self.mla_layers * mla + self.gqa_layers * gqa)

    def prefill_flop_parts(self, tokens: int) -> list[tuple[float, str]]:
        """Prefill FLOPs of ``tokens`` prompt tokens of one sequence, split by the number format each part runs in:
        (FLOPs, "bf16" | "fp8"). Dense part 2 x active params per token (``bf16_active_params`` of them at BF16, the rest
        at ``compute_dtype``), causal attention pairs x :meth:`attn_flops_per_pair` at ``attention_dtype``."""
        bf16 = self.bf16_active_params or 0.0
        pairs = tokens * (tokens + 1) / 2
        parts = [
            (2 * (self.active_params - bf16) * tokens, self.compute_dtype),
            (2 * bf16 * tokens, "bf16"),
            (pairs * self.attn_flops_per_pair(), self.attention_dtype or self.compute_dtype),
        ]
        return [(f, d) for f, d in parts if f > 0]

    def weight_bytes(self) -> float:
        return self.total_params * self.weight_bytes_per_param

    def active_weight_bytes(self) -> float:
        return self.active_params * self.weight_bytes_per_param

    def matches(self, name: str) -> bool:
        """True when a results row's ``model`` names this model (key, alias, or a path ending in one)."""
        cand = {name.strip().lower(), Path(name.strip()).name.lower()}
        return bool(cand & {self.model.lower(), *(a.lower() for a in self.aliases)})


def _split_list(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(";") if v.strip())


def _read(path: Path, cls: type[BaseModel], key: str) -> dict[str, BaseModel]:
    if not path.is_file():
        raise CatalogError(f"{path}: catalog file missing")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = set(cls.model_fields)
        header = set(reader.fieldnames or [])
        if unknown := sorted(header - fields):
            raise CatalogError(f"{path}: unknown column(s) {unknown}")
        required = {n for n, f in cls.model_fields.items() if f.is_required()}
        if missing := sorted(required - header):
            raise CatalogError(f"{path}: missing column(s) {missing}")
        out: dict[str, BaseModel] = {}
        for i, raw in enumerate(reader, start=2):  # line 1 is the header
            row = {k: v.strip() for k, v in raw.items() if v is not None and v.strip() != ""}
            for list_field in ("derived_fields", "aliases"):
                if list_field in row:
                    row[list_field] = _split_list(row[list_field])
            try:
                item = cls.model_validate(row)
            except ValidationError as exc:
                errs = "; ".join(f"field '{'.'.join(map(str, e['loc'])) or '(row)'}': {e['msg']}" for e in exc.errors())
                raise CatalogError(f"{path}, line {i} ({row.get(key, '?')}): {errs}") from None
            name = getattr(item, key)
            if name in out:
                raise CatalogError(f"{path}, line {i}: duplicate {key} '{name}'")
            out[name] = item
    if not out:
        raise CatalogError(f"{path}: no rows")
    return out


@lru_cache(maxsize=8)
def _gpus(path: Path) -> dict[str, GPU]:
    return _read(path, GPU, "gpu")  # type: ignore[return-value]


@lru_cache(maxsize=8)
def _models(path: Path) -> dict[str, Model]:
    return _read(path, Model, "model")  # type: ignore[return-value]


def load_gpus(catalog_dir: str | Path = CATALOG_DIR) -> dict[str, GPU]:
    """Every catalogued GPU by key, validated."""
    return _gpus(Path(catalog_dir).resolve() / GPUS_FILE)


def load_models(catalog_dir: str | Path = CATALOG_DIR) -> dict[str, Model]:
    """Every catalogued model by key, validated."""
    return _models(Path(catalog_dir).resolve() / MODELS_FILE)


#: The catalog's entry for the CPU host (data/catalog/gpus.csv): what a run whose device is a CPU is modelled on.
CPU_ENTRY = "CPU"


def gpu(name: str, catalog_dir: str | Path = CATALOG_DIR) -> GPU:
    """A catalog entry by key ('B300', 'CPU'), or a GPU by an accelerator name that starts with its name ('NVIDIA
    B300', and NVML's 'NVIDIA H100 80GB HBM3' for the H100). The CPU host's entry is found by its key only: whether
    a run was on a CPU is its typed device (:func:`device_gpu`), never read from a name."""
    gpus = load_gpus(catalog_dir)
    if name in gpus:
        return gpus[name]
    low = name.strip().lower()
    for g in gpus.values():
        if g.gpu == CPU_ENTRY:
            continue
        if low == g.gpu.lower() or low.startswith(g.name.lower()):
            return g
    raise KeyError(f"hardware '{name}' is not in {Path(catalog_dir) / GPUS_FILE} (known: {sorted(gpus)})")


def device_gpu(
    kind: str | None, accelerator: str | None, hardware: str | None = None, catalog_dir: str | Path = CATALOG_DIR
) -> GPU:
    """The catalog entry of a typed device (kvlab.device; a run record's ``device_kind`` and ``accelerator``): the
    CPU host's for a cpu device, the GPU its accelerator names for a gpu device. KeyError, naming ``hardware`` (the
    label, for the reader) where the kind is not known, a GPU device names no accelerator, or the catalog lacks it."""
    if kind == "cpu":
        return gpu(CPU_ENTRY, catalog_dir)
    if kind == "gpu" and accelerator:
        return gpu(accelerator, catalog_dir)
    what = "no device kind" if kind is None else "a GPU of no stated model"
    raise KeyError(
        f"hardware '{hardware or accelerator or kind}' has {what}: the catalog "
        f"({Path(catalog_dir) / GPUS_FILE}) is looked up by a run's device_kind and accelerator"
    )


def row_gpu(row, catalog_dir: str | Path = CATALOG_DIR) -> GPU:
    """The catalog entry a results row (RUNS) ran on, from its ``device_kind`` and ``accelerator``
    (:func:`device_gpu`)."""
    return device_gpu(row.get("device_kind"), row.get("accelerator"), row.get("hardware"), catalog_dir)


def model(name: str, catalog_dir: str | Path = CATALOG_DIR) -> Model:
    """A model by key or alias."""
    models = load_models(catalog_dir)
    if name in models:
        return models[name]
    for m in models.values():
        if m.matches(name):
            return m
    raise KeyError(f"model '{name}' is not in {Path(catalog_dir) / MODELS_FILE} (known: {sorted(models)})")
