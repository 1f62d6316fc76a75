"""GPU telemetry through NVML (kvlab.gpu): the sampler, its place on the telemetry grid, what a run folder keeps, and
the memory a run left outside the KV pool per GPU.

No GPU was lent to the session that wrote these tests: the sampler is tested against a stand-in pynvml module that
answers what NVML answers for an NVIDIA H100 80GB HBM3, in NVML's own types and units (memory in bytes: 81,559 MiB
in all, as nvidia-smi prints it; power in milliwatts; utilisation in percent; temperature in °C). The values are
those of the stand-in, not a recording from a device. On this host (no NVIDIA driver) the real module is tested too.
"""

from __future__ import annotations

import asyncio
import json
import types

import polars as pl
import pytest

from kvlab import gpu, host, metrics, runner
from kvlab.client import BatchResult

MIB = 2**20
H100_TOTAL = 81_559 * MIB  # 85,520,809,984 bytes: an H100 80GB HBM3 as nvidia-smi and NVML give it


class _Err(Exception):
    """pynvml.NVMLError: str() is NVML's message, ``value`` its return code."""

    def __init__(self, value: int, msg: str):
        super().__init__(msg)
        self.value = value


def fake_nvml(gpus: list[dict], init_error: _Err | None = None) -> types.SimpleNamespace:
    """A stand-in for pynvml: ``gpus`` each {name, used, total, util, power_mw, temp} (power_mw None: the board does
    not report power, NVML_ERROR_NOT_SUPPORTED); counts the calls to nvmlInit and nvmlShutdown."""
    calls = {"init": 0, "shutdown": 0}

    def init():
        calls["init"] += 1
        if init_error:
            raise init_error

    def power(h):
        if gpus[h]["power_mw"] is None:
            raise _Err(3, "Not Supported")
        return gpus[h]["power_mw"]

    return types.SimpleNamespace(
        NVMLError=_Err,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_TEMPERATURE_GPU=0,
        calls=calls,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: gpus[h]["name"],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(
            used=gpus[h]["used"], total=gpus[h]["total"], free=gpus[h]["total"] - gpus[h]["used"]
        ),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=gpus[h]["util"], memory=0),
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetTemperature=lambda h, sensor: gpus[h]["temp"] if sensor == 0 else -1,
    )


def two_h100s() -> list[dict]:
    return [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "used": 77_460 * MIB,
            "total": H100_TOTAL,
            "util": 97,
            "power_mw": 612_345,
            "temp": 63,
        },
        {
            "name": b"NVIDIA H100 80GB HBM3",
            "used": 4 * MIB,
            "total": H100_TOTAL,
            "util": 0,
            "power_mw": None,
            "temp": 31,
        },
    ]


def test_the_sampler_reads_every_gpu_in_nvmls_units_and_marks_what_a_board_does_not_report():
    nvml = fake_nvml(two_h100s())
    s = gpu.GpuSampler(nvml).open()
    assert s.available and s.reason is None
    assert s.devices == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85_520_809_984},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85_520_809_984},
    ]
    assert s.sample() == {
        "gpu0_memory_used_bytes": 81_222_696_960,
        "gpu0_memory_total_bytes": 85_520_809_984,
        "gpu0_utilization_pct": 97.0,
        "gpu0_power_w": 612.345,
        "gpu0_temperature_c": 63.0,
        "gpu1_memory_used_bytes": 4_194_304,
        "gpu1_memory_total_bytes": 85_520_809_984,
        "gpu1_utilization_pct": 0.0,
        "gpu1_power_w": None,
        "gpu1_temperature_c": 31.0,
    }
    assert s.unsupported == {"gpu1_power_w": "_Err: Not Supported"}
    s.close()
    s.close()
    assert nvml.calls == {"init": 1, "shutdown": 1}
    assert s.describe()["devices"][1]["name"] == "NVIDIA H100 80GB HBM3"


def test_a_host_without_nvml_has_no_gpu_values_and_says_why():
    nvml = fake_nvml([], init_error=_Err(12, "NVML Shared Library Not Found"))
    s = gpu.GpuSampler(nvml).open()
    assert not s.available and s.sample() == {}
    assert (
        s.reason == "NVML not available on this host (_Err: NVML Shared Library Not Found): no NVIDIA driver is loaded"
    )
    s.close()
    assert nvml.calls == {"init": 1, "shutdown": 0}  # never opened, never shut
    assert gpu.GpuSampler(fake_nvml([])).open().reason == "NVML answered but shows no GPU"


@pytest.mark.skipif(bool(host.gpus()), reason="this host has NVML and a GPU")
def test_on_this_host_the_real_nvml_module_says_the_library_is_missing():
    s = gpu.GpuSampler().open()
    assert not s.available and s.sample() == {}
    assert s.reason == (
        "NVML not available on this host (NVMLError_LibraryNotFound: NVML Shared Library Not Found): "
        "no NVIDIA driver is loaded"
    )


def _grid(coro_fn, seconds: float) -> None:
    async def go():
        task = asyncio.create_task(coro_fn())
        await asyncio.sleep(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())


def test_gpu_readings_join_each_sample_on_the_engine_grid_even_a_failed_one():
    s = gpu.GpuSampler(fake_nvml(two_h100s()[:1])).open()
    samples: list = []
    n = iter(range(100))

    async def take():
        if next(n) == 1:
            raise RuntimeError("HTTP 503")
        return {"requests_running": 2.0}, None

    _grid(lambda: metrics._on_grid(take, samples, 0.05, s), 0.32)
    assert len(samples) >= 4
    assert samples[0][1] == {
        "requests_running": 2.0,
        "gpu0_memory_used_bytes": 81_222_696_960,
        "gpu0_memory_total_bytes": 85_520_809_984,
        "gpu0_utilization_pct": 97.0,
        "gpu0_power_w": 612.345,
        "gpu0_temperature_c": 63.0,
    }
    assert samples[1][2] == "RuntimeError: HTTP 503" and "requests_running" not in samples[1][1]
    assert samples[1][1]["gpu0_memory_used_bytes"] == 81_222_696_960
    alone: list = []
    _grid(lambda: metrics.sample_gpus_during(alone, s, 0.05), 0.2)
    assert alone and all(set(v) == set(gpu.UNAVAILABLE_COLUMNS) and e is None for _, v, e in alone)


BATCH = BatchResult(records=[], t0=100.0, t_end=101.5, batch_time_s=1.5, started_at="2026-12-05T11:00:00Z")


def test_a_run_folder_keeps_each_gpus_columns_and_what_they_are(tmp_path):
    s = gpu.GpuSampler(fake_nvml(two_h100s())).open()
    values = {"requests_running": 1.0, **s.sample()}
    m = runner.Measurement(BATCH, {}, [], telemetry=[(100.25, values, None)], gpus=s.describe())
    files = runner.write_telemetry(tmp_path, m)
    tele = pl.read_csv(files["telemetry.csv"])
    assert tele.columns == ["t_s", *sorted(c for c in values), "error"]
    assert tele["gpu1_power_w"].to_list() == [None] and tele["gpu0_power_w"].to_list() == [612.345]
    info = json.loads(files["telemetry.json"].read_text())["gpu"]
    assert info == {
        "available": True,
        "reason": None,
        "source": gpu.SOURCE,
        "fields": list(gpu.GPU_FIELDS),
        "devices": s.devices,
        "unsupported": {"gpu1_power_w": "_Err: Not Supported"},
    }


def test_without_nvml_a_run_folder_keeps_empty_gpu_columns_never_zero(tmp_path):
    s = gpu.GpuSampler(fake_nvml([], init_error=_Err(12, "NVML Shared Library Not Found"))).open()
    m = runner.Measurement(BATCH, {}, [], telemetry=[(100.25, {"requests_running": 1.0}, None)], gpus=s.describe())
    files = runner.write_telemetry(tmp_path, m)
    tele = pl.read_csv(files["telemetry.csv"], infer_schema=False)
    assert tele.columns == ["t_s", *sorted(gpu.UNAVAILABLE_COLUMNS), "requests_running", "error"]
    assert all(tele[c].to_list() == [None] for c in gpu.UNAVAILABLE_COLUMNS)
    info = json.loads(files["telemetry.json"].read_text())["gpu"]
    assert (info["available"], info["reason"]) == (False, s.reason)


def test_memory_left_outside_the_kv_pool_per_gpu_and_setting():
    """The most memory any sample saw in use, per run and GPU, against the GPU's total: 0.92 leaves 2,520 MiB more
    of each 81,559 MiB outside the engine than 0.95 (here, by construction of the samples)."""
    rows = []
    for run_id, used in (("r092", [70_000, 75_000, 74_900]), ("r095", [72_000, 77_520, 77_000])):
        for t, u in enumerate(used):
            rows.append(
                {
                    "run_id": run_id,
                    "experiment": "e",
                    "t_s": float(t),
                    "gpu0_memory_used_bytes": float(u * MIB),
                    "gpu0_memory_total_bytes": float(H100_TOTAL),
                    "gpu1_memory_used_bytes": float((u - 100) * MIB),
                    "gpu1_memory_total_bytes": float(H100_TOTAL),
                    "error": None,
                }
            )
    rows.append(
        {
            "run_id": "cpu",
            "experiment": "e",
            "t_s": 0.0,
            "gpu0_memory_used_bytes": None,
            "gpu0_memory_total_bytes": None,
            "gpu1_memory_used_bytes": None,
            "gpu1_memory_total_bytes": None,
            "error": None,
        }
    )
    runs = pl.DataFrame(
        {
            "run_id": ["r092", "r095", "cpu"],
            "engine": ["vllm"] * 3,
            "mem_util": [0.92, 0.95, 0.92],
            "context_tokens": [65_536] * 3,
        }
    )
    out = gpu.memory_outside_kv_pool(pl.DataFrame(rows), runs)
    assert out.select("run_id", "gpu", "left_bytes", "samples").rows() == [
        ("r092", 0, 6_559 * MIB, 3),
        ("r092", 1, 6_659 * MIB, 3),
        ("r095", 0, 4_039 * MIB, 3),
        ("r095", 1, 4_139 * MIB, 3),
    ]
    assert out["left_fraction"][0] == pytest.approx(6_559 / 81_559)
    assert out["mem_util"].to_list() == [0.92, 0.92, 0.95, 0.95]
    empty = gpu.memory_outside_kv_pool(pl.DataFrame(rows[-1:]), runs)
    assert empty.is_empty() and empty.columns == out.columns


def test_report_03s_data_path_reads_gpu_columns_back_from_stored_runs(tmp_path):
    """write_telemetry → store.write_run → store.load_telemetry / load_runs → memory_outside_kv_pool, as report 03
    reads them: two stand-in GPU runs at 0.92 and 0.95 (SYNTHETIC rows from tests/notebook_data.py, stand-in NVML
    readings) and one run of a host without NVML, which adds no row."""
    from kvlab import store
    from tests.notebook_data import capacity_frames

    base = capacity_frames()[0][0]
    for rid, mem, used_mib in (("g092", 0.92, [70_000, 75_000]), ("g095", 0.95, [72_000, 77_520]), ("cpu", 0.92, [])):
        gpus = [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "used": 0,
                "total": H100_TOTAL,
                "util": 90,
                "power_mw": 500_000,
                "temp": 60,
            }
        ]
        nvml = fake_nvml(gpus) if used_mib else fake_nvml([], init_error=_Err(12, "NVML Shared Library Not Found"))
        s = gpu.GpuSampler(nvml).open()
        samples = []
        for k, mib in enumerate(used_mib or [0]):
            gpus[0]["used"] = mib * MIB
            samples.append((100.25 + 0.5 * k, {"requests_running": 4.0, **s.sample()}, None))
        files = runner.write_telemetry(
            tmp_path / "t" / rid, runner.Measurement(BATCH, {}, [], telemetry=samples, gpus=s.describe())
        )
        store.write_run(
            tmp_path / "runs" / "mem",
            rid,
            base.with_columns(pl.lit(rid).alias("run_id"), pl.lit(mem).alias("mem_util")),
            files=files,
        )
    out = gpu.memory_outside_kv_pool(store.load_telemetry(tmp_path), store.load_runs(tmp_path))
    assert out.select("run_id", "mem_util", "gpu", "left_bytes", "samples").rows() == [
        ("g092", 0.92, 0, 6_559 * MIB, 2),
        ("g095", 0.95, 0, 4_039 * MIB, 2),
    ]
    assert out["left_gib"].to_list() == pytest.approx([6_559 / 1024, 4_039 / 1024])
