"""What computes a run: a CPU, or GPUs (their model and count where known).

The one typed answer to "CPU or GPU?": an experiment states it (``device:`` in its YAML, :class:`Device`), every run
record carries it (RUNS ``device_kind``, ``accelerator``, ``gpu_count``: kvlab.schema), and whatever decides by the
kind of device (GPU requests on a Ray cluster, overlapping server starts, the CPU grading rule, the model's catalog
entry) reads it there. No code reads it out of a hardware label: the label is free text for readers. Runs stored
before the device was recorded get it once, when they are read (kvlab.store, the migration of old runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The kinds of device a run computes on (RUNS ``device_kind``).
DEVICE_KINDS = ("cpu", "gpu")
DeviceKind = Literal["cpu", "gpu"]


class Device(BaseModel):
    """What an experiment's runs compute on. YAML gives the kind alone (``device: cpu``, ``device: gpu``) or a mapping
    with the accelerator model and count where known (``device: {kind: gpu, accelerator: NVIDIA B300, count: 8}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: DeviceKind = Field(description="cpu | gpu: what computes the runs")
    accelerator: str | None = Field(
        None,
        min_length=1,
        description="the GPU model as NVIDIA names it (e.g. 'NVIDIA "
        "B300'); the host's GPUs must be this model. None: any GPU (or a CPU)",
    )
    count: int | None = Field(None, ge=1, description="GPUs the experiment's host has; None: not stated (or a CPU)")

    @model_validator(mode="before")
    @classmethod
    def _kind_alone(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v

    @model_validator(mode="after")
    def _cpu_alone(self) -> Device:
        if self.kind == "cpu" and (self.accelerator is not None or self.count is not None):
            raise ValueError("a cpu device has no accelerator or count (those describe GPUs): give `device: cpu`")
        return self

    @property
    def on_cpu(self) -> bool:
        return self.kind == "cpu"


def device_name(kind: str | None, accelerator: str | None = None, count: int | None = None) -> str | None:
    """A device's short name for a title, from its typed fields (a run record's ``device_kind``, ``accelerator`` and
    ``gpu_count``): 'CPU'; '8× NVIDIA B300', 'NVIDIA B300', '4 GPUs' or 'GPU'. None where the kind is not known."""
    if kind == "cpu":
        return "CPU"
    if kind != "gpu":
        return None
    if accelerator:
        return f"{count}× {accelerator}" if count else accelerator
    return f"{count} GPUs" if count and count > 1 else "GPU"


def shown(row: Mapping[str, Any]) -> str:
    """How a title names the device a results row ran on (a RUNS row, or a study frame's): its typed device's short
    name (:func:`device_name` of ``device_kind``, ``accelerator``, ``gpu_count``); where the row has no device kind (a
    hand-built frame), its hardware label whole, as the experiment or document wrote it."""
    return device_name(row.get("device_kind"), row.get("accelerator"), row.get("gpu_count")) or str(
        row.get("hardware") or ""
    )
