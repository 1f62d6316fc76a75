"""NVIDIA GPUs through NVML (nvidia-ml-py): each GPU's memory, utilisation, power and temperature, sampled into a
run's telemetry on the same grid as the engine's /metrics (kvlab.metrics), and the memory a run left outside the KV
pool per GPU (report 03).

A host without NVML (no NVIDIA driver: this CPU build machine) records every GPU column empty with the reason NVML
gave, never a 0: telemetry.csv keeps the first GPU's columns, null, and telemetry.json's ``gpu`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import polars as pl

#: What each GPU's telemetry holds, as telemetry.csv names the columns ``gpu{index}_{field}``: the device's memory
#: in use and in all (bytes, nvmlDeviceGetMemoryInfo), its utilisation (percent of the last sample period a kernel
#: ran, nvmlDeviceGetUtilizationRates().gpu), its power draw (W; NVML gives mW) and its temperature (°C, the GPU die).
GPU_FIELDS = ("memory_used_bytes", "memory_total_bytes", "utilization_pct", "power_w", "temperature_c")
SOURCE = "NVML (nvidia-ml-py), every GPU the driver shows, sampled on the engine series' grid"


def column(index: int, name: str) -> str:
    """telemetry.csv's column for GPU ``index``'s ``name`` (one of :data:`GPU_FIELDS`)."""
    return f"gpu{index}_{name}"


#: The columns a run's telemetry keeps when NVML is not available: the first GPU's, empty.
UNAVAILABLE_COLUMNS = tuple(column(0, f) for f in GPU_FIELDS)


def _nvml() -> ModuleType:
    import pynvml  # nvidia-ml-py; imported here so a fake module can stand in (tests)

    return pynvml


@dataclass
class GpuSampler:
    """NVML opened for one run: :meth:`open` finds the devices (or why there are none), :meth:`sample` reads every
    device's :data:`GPU_FIELDS`, :meth:`close` shuts NVML down. ``nvml`` is the pynvml module (a stand-in in
    tests). A field a device does not support (NVML_ERROR_NOT_SUPPORTED: power on some boards) is None with its
    reason in ``unsupported``; a device that stops answering mid-run gives None for that sample only."""

    nvml: ModuleType | None = None
    reason: str | None = None  # why there is no GPU telemetry; None when NVML answered with at least one GPU
    devices: list[dict] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    _handles: list = field(default_factory=list)
    _open: bool = False

    @property
    def available(self) -> bool:
        return self.reason is None and bool(self._handles)

    def open(self) -> GpuSampler:
        nvml = self.nvml = self.nvml or _nvml()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self.reason = f"NVML not available on this host ({type(exc).__name__}: {exc}): no NVIDIA driver is loaded"
            return self
        self._open = True
        try:
            n = nvml.nvmlDeviceGetCount()
            for i in range(n):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                name = nvml.nvmlDeviceGetName(h)
                self._handles.append(h)
                self.devices.append(
                    {
                        "index": i,
                        "name": name.decode() if isinstance(name, bytes) else name,
                        "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                    }
                )
        except nvml.NVMLError as exc:
            self.reason = f"NVML answered but its devices could not be read ({type(exc).__name__}: {exc})"
            self._handles, self.devices = [], []
            return self
        if not self._handles:
            self.reason = "NVML answered but shows no GPU"
        return self

    def _read(self, h, name: str):
        nvml = self.nvml
        if name == "memory_used_bytes":
            return int(nvml.nvmlDeviceGetMemoryInfo(h).used)
        if name == "memory_total_bytes":
            return int(nvml.nvmlDeviceGetMemoryInfo(h).total)
        if name == "utilization_pct":
            return float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        if name == "power_w":
            return nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        return float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))

    def sample(self) -> dict[str, float | None]:
        """One reading of every device: {``gpu{i}_{field}``: value or None}; {} when NVML is not available."""
        out: dict[str, float | None] = {}
        if not self.available:
            return out
        nvml = self.nvml
        for i, h in enumerate(self._handles):
            for name in GPU_FIELDS:
                key = column(i, name)
                if key in self.unsupported:
                    out[key] = None
                    continue
                try:
                    out[key] = self._read(h, name)
                except nvml.NVMLError as exc:
                    out[key] = None
                    if getattr(exc, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                        self.unsupported[key] = f"{type(exc).__name__}: {exc}"
        return out

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass

    def describe(self) -> dict:
        """What telemetry.json says of the GPU columns: available, reason (why not), source, devices, unsupported."""
        return {
            "available": self.available,
            "reason": self.reason,
            "source": SOURCE,
            "fields": list(GPU_FIELDS),
            "devices": self.devices,
            "unsupported": dict(self.unsupported),
        }


def memory_outside_kv_pool(samples: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Per run and GPU, the GPU memory the run left outside the engine: ``total`` − the most ``used`` any sample saw
    (the engine holds its KV pool, weights and activations from start-up on; what is left is the headroom the memory
    setting gave away), with the run's ``engine``, ``mem_util`` and ``context_tokens`` from ``runs``
    (kvlab.store.load_runs).

    ``samples``: kvlab.store.load_telemetry's frame (its ``gpu{i}_memory_*`` columns). One row per run × GPU that
    has at least one memory sample: ``run_id``, ``gpu``, ``memory_total_bytes``, ``memory_used_max_bytes``,
    ``left_bytes`` (and ``left_gib``), ``left_fraction`` (of the total), ``samples``; no row for a run whose GPU columns are empty (a
    host without NVML), so a CPU-only store gives an empty frame."""
    schema = {
        "run_id": pl.String,
        "gpu": pl.Int64,
        "memory_total_bytes": pl.Float64,
        "memory_used_max_bytes": pl.Float64,
        "left_bytes": pl.Float64,
        "left_fraction": pl.Float64,
        "samples": pl.UInt32,
    }
    gpus = sorted(
        {
            int(c[3:].split("_", 1)[0])
            for c in samples.columns
            if c.startswith("gpu") and c.endswith("_memory_used_bytes")
        }
    )
    frames = []
    for i in gpus:
        used, total = column(i, "memory_used_bytes"), column(i, "memory_total_bytes")
        if total not in samples.columns:
            continue
        frames.append(
            samples.filter(pl.col(used).is_not_null() & pl.col(total).is_not_null())
            .group_by("run_id")
            .agg(
                pl.col(total).max().alias("memory_total_bytes"),
                pl.col(used).max().alias("memory_used_max_bytes"),
                pl.len().alias("samples"),
            )
            .with_columns(pl.lit(i, pl.Int64).alias("gpu"))
        )
    cols = ["run_id", "gpu", "memory_total_bytes", "memory_used_max_bytes", "samples"]
    out = pl.concat(frames).select(cols) if frames else pl.DataFrame(schema={k: schema[k] for k in cols})
    out = out.with_columns((pl.col("memory_total_bytes") - pl.col("memory_used_max_bytes")).alias("left_bytes"))
    out = out.with_columns(
        (pl.col("left_bytes") / pl.col("memory_total_bytes")).alias("left_fraction"),
        (pl.col("left_bytes") / 2**30).alias("left_gib"),
    )
    keep = [c for c in ("run_id", "engine", "mem_util", "context_tokens") if c in runs.columns]
    return (
        out.join(runs.select(keep), on="run_id", how="left")
        .select(
            *keep,
            "gpu",
            "memory_total_bytes",
            "memory_used_max_bytes",
            "left_bytes",
            "left_gib",
            "left_fraction",
            "samples",
        )
        .sort(*[c for c in ("engine", "mem_util", "context_tokens") if c in keep], "run_id", "gpu")
    )
