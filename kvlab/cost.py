"""Cost and energy per output token (issue 54, item 5).

Cost: $ per million output tokens = $ per device-hour / (output tokens/s per device x 3,600 / 10^6), the formula
InferenceX (SemiAnalysis) publishes for $ per million tokens from a GPU-hour price, here with a price the experiment
or the report's parameters state, never an assumed one.

Energy: the joules a run's devices drew over its batch, from cumulative energy counters read before and after it:
NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded; Volta and
later) summed over the GPUs where it answers; else the Linux powercap RAPL package counters
(/sys/class/powercap/intel-rapl:N/energy_uj, microjoules, wrapping at max_energy_range_uj; AMD's packages appear
there too) where this user may read them; else none, with the reason, never 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

#: Where Linux exposes powercap zones (Documentation/power/powercap/powercap.rst).
POWERCAP = Path("/sys/class/powercap")
#: A package zone (intel-rapl:0), not a subzone (intel-rapl:0:0, core or uncore or dram).
_PACKAGE = re.compile(r"^intel-rapl:\d+$")
NVML_SOURCE = "NVML total-energy counter (nvmlDeviceGetTotalEnergyConsumption), summed over the GPUs"
RAPL_SOURCE = "Linux powercap RAPL package counters (energy_uj), summed over the packages"


def dollars_per_million_tokens(price_per_device_hour: float, tokens_per_s: float, devices: int = 1) -> float | None:
    """$ per million tokens at ``tokens_per_s`` (the run's, over all its ``devices``) and ``price_per_device_hour``:
    price / (tokens/s per device x 3,600 / 10^6). None without throughput (no tokens, no cost per token)."""
    if price_per_device_hour < 0 or devices < 1:
        raise ValueError(f"need a price >= 0 and devices >= 1, got {price_per_device_hour}, {devices}")
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return price_per_device_hour / (tokens_per_s / devices * 3600 / 1e6)


@dataclass(frozen=True)
class Reading:
    """One read of the energy counters: joules per counter (cumulative), their wrap ranges, or why there are none."""

    source: str | None
    joules: dict[str, float] = field(default_factory=dict)
    ranges: dict[str, float] = field(default_factory=dict)
    reason: str | None = None


def _nvml_reading(nvml: ModuleType) -> Reading:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Reading(None, reason=f"NVML not available ({exc})")
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        if not handles:
            return Reading(None, reason="NVML shows no GPU")
        joules = {f"gpu{i}": nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0 for i, h in enumerate(handles)}
        return Reading(NVML_SOURCE, joules)
    except nvml.NVMLError as exc:
        return Reading(None, reason=f"NVML has no total-energy counter here ({exc})")
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _rapl_reading(root: Path) -> Reading:
    if not root.is_dir():
        return Reading(None, reason=f"no {root} (no powercap driver, or a virtual machine that does not expose RAPL)")
    zones = sorted(z for z in root.iterdir() if _PACKAGE.match(z.name))
    if not zones:
        return Reading(None, reason=f"{root} has no RAPL package zone (intel-rapl:N)")
    joules, ranges = {}, {}
    for z in zones:
        try:
            joules[z.name] = int((z / "energy_uj").read_text()) / 1e6
            ranges[z.name] = int((z / "max_energy_range_uj").read_text()) / 1e6
        except PermissionError:
            return Reading(
                None,
                reason=f"{z / 'energy_uj'} is not readable by this user (root only since Linux 5.10: CVE-2020-8694)",
            )
        except (OSError, ValueError) as exc:
            return Reading(None, reason=f"{z / 'energy_uj'} cannot be read ({type(exc).__name__}: {exc})")
    return Reading(RAPL_SOURCE, joules, ranges)


def read_energy(nvml: ModuleType | None = None, powercap: Path | None = None, gpu: bool = False) -> Reading:
    """The energy counters of the devices a run computes on: NVML's where ``gpu`` (``nvml``: the pynvml module, a
    stand-in in tests), the powercap RAPL packages' otherwise; a reading without counters says why."""
    if gpu:
        if nvml is None:
            from kvlab.gpu import _nvml  # NVML is loaded only where a GPU run reads its counters

            nvml = _nvml()
        return _nvml_reading(nvml)
    return _rapl_reading(powercap or POWERCAP)


def columns(before: Reading, after: Reading) -> dict[str, Any]:
    """The RUNS energy columns of a batch between two readings: joules (a counter that wrapped adds its range), its
    source, or null with the reason, never 0."""
    reason = before.reason or after.reason
    if reason is None and set(before.joules) != set(after.joules):
        reason = "the energy counters changed between the readings"
    if reason is not None:
        return {"energy_j": None, "energy_source": None, "energy_note": f"energy not available: {reason}"}
    total = 0.0
    for name, b in before.joules.items():
        a = after.joules[name]
        total += a - b if a >= b else a + before.ranges.get(name, 0.0) - b
    return {"energy_j": total, "energy_source": after.source, "energy_note": None}


def joules_per_token(energy_j: float | None, output_tokens: int | None) -> float | None:
    """Energy per output token: the batch's joules over the output tokens of every request it sent (the counters
    cover the whole batch); None where either is missing."""
    return energy_j / output_tokens if energy_j is not None and output_tokens else None
