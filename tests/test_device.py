"""The typed device (kvlab.device): its short names, and the model's catalog looked up by it, never by a label."""

from __future__ import annotations

import polars as pl
import pytest

from kvlab.device import Device, device_name, shown
from kvlab.catalog import device_gpu, gpu, row_gpu
from kvlab.figures import device_of


def test_a_device_is_a_kind_or_a_mapping():
    assert Device.model_validate("cpu") == Device(kind="cpu")
    b300 = Device.model_validate({"kind": "gpu", "accelerator": "NVIDIA B300", "count": 8})
    assert (b300.kind, b300.accelerator, b300.count, b300.on_cpu) == ("gpu", "NVIDIA B300", 8, False)
    with pytest.raises(ValueError, match="a cpu device has no accelerator or count"):
        Device.model_validate({"kind": "cpu", "accelerator": "Intel Xeon"})


def test_short_names_come_from_the_typed_fields():
    assert [
        device_name("cpu"),
        device_name("gpu", "NVIDIA B300", 8),
        device_name("gpu", "NVIDIA H100"),
        device_name("gpu", None, 4),
        device_name("gpu", None, 1),
        device_name(None, "NVIDIA B300", 8),
    ] == ["CPU", "8× NVIDIA B300", "NVIDIA H100", "4 GPUs", "GPU", None]
    # a row without a kind (a hand-built frame) is named by its label whole, never cut
    assert shown({"hardware": "CPU x86_64 (vLLM CPU build)", "device_kind": None}) == "CPU x86_64 (vLLM CPU build)"
    assert shown({"hardware": "CPU x86_64 (vLLM CPU build)", "device_kind": "cpu"}) == "CPU"
    frame = pl.DataFrame(
        {
            "hardware": ["NVIDIA B300 x8"] * 2,
            "device_kind": [None, "gpu"],
            "accelerator": ["NVIDIA B300 SXM6 AC", None],
            "gpu_count": [None, 8],
        }
    )
    assert device_of(frame) == "8× NVIDIA B300 SXM6 AC" and device_of(frame.clear()) == ""


def test_the_catalog_is_looked_up_by_the_typed_device():
    assert device_gpu("cpu", None).gpu == "CPU" and device_gpu("gpu", "NVIDIA H100 80GB HBM3").gpu == "H100"
    assert row_gpu({"device_kind": "gpu", "accelerator": "NVIDIA B300", "hardware": "CPU-sounding label"}).gpu == "B300"
    assert gpu("CPU").gpu == "CPU"
    with pytest.raises(KeyError, match="hardware 'CPU x86_64 \\(2 cores\\)' is not in"):
        gpu("CPU x86_64 (2 cores)")  # the CPU host's entry by its key only, never by a label
    with pytest.raises(KeyError, match="hardware 'CPU x86_64' has no device kind"):
        row_gpu({"hardware": "CPU x86_64"})
    with pytest.raises(KeyError, match="hardware 'NVIDIA GPU x4' has a GPU of no stated model"):
        device_gpu("gpu", None, "NVIDIA GPU x4")
