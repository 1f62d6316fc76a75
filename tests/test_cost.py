"""Cost and energy per output token (kvlab.cost): the $ per million tokens formula, NVML's total-energy counter on a
stand-in NVML, the powercap RAPL counters in a stand-in folder, and the reason a host without either records."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import yaml

from kvlab import cost, runner, store
from kvlab.campaign import Campaign
from kvlab.experiment import ExperimentSpec
from tests.support.sse_fixture import FixtureConfig, SSEServer
from tests.test_gpu import _Err


def test_dollars_per_million_tokens_is_the_price_over_tokens_per_device_hour():
    # $2.50 a device-hour at 1,000 tokens/s on one device: 3.6 M tokens an hour, $0.6944 per million
    assert cost.dollars_per_million_tokens(2.5, 1000.0) == pytest.approx(2.5 / 3.6)
    # eight devices serving 8,000 tokens/s together: 1,000 per device, the same cost per token
    assert cost.dollars_per_million_tokens(2.5, 8000.0, devices=8) == pytest.approx(2.5 / 3.6)
    assert cost.dollars_per_million_tokens(2.5, 0.0) is None and cost.dollars_per_million_tokens(2.5, None) is None
    with pytest.raises(ValueError):
        cost.dollars_per_million_tokens(-1, 10.0)


def fake_nvml(counters_mj: list[list[int]], supported: bool = True) -> types.SimpleNamespace:
    """A stand-in pynvml whose GPUs' total-energy counters (mJ) give the next value of their list at each read."""
    reads = [iter(c) for c in counters_mj]

    def energy(h):
        if not supported:
            raise _Err(3, "Not Supported")
        return next(reads[h])

    return types.SimpleNamespace(
        NVMLError=_Err,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(counters_mj),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetTotalEnergyConsumption=energy,
    )


def test_energy_from_nvmls_total_energy_counters_summed_over_the_gpus():
    nvml = fake_nvml([[1_000_000, 1_250_500], [7_000, 107_000]])
    before, after = cost.read_energy(nvml, gpu=True), cost.read_energy(nvml, gpu=True)
    cols = cost.columns(before, after)
    assert cols == {"energy_j": pytest.approx(250.5 + 100.0), "energy_source": cost.NVML_SOURCE, "energy_note": None}
    assert cost.joules_per_token(cols["energy_j"], 700) == pytest.approx(0.5007142857)
    unsupported = cost.read_energy(fake_nvml([[0]], supported=False), gpu=True)
    assert cost.columns(unsupported, unsupported) == {
        "energy_j": None,
        "energy_source": None,
        "energy_note": "energy not available: NVML has no total-energy counter here (Not Supported)",
    }


def _zone(root: Path, name: str, uj: int, max_uj: int = 262_143_328_850) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "energy_uj").write_text(f"{uj}\n")
    (root / name / "max_energy_range_uj").write_text(f"{max_uj}\n")


def test_energy_from_the_powercap_rapl_packages_with_a_wrapped_counter(tmp_path):
    _zone(tmp_path, "intel-rapl:0", 5_000_000)
    _zone(tmp_path, "intel-rapl:1", 262_143_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 1)  # a subzone (core): inside its package's count, not added again
    before = cost.read_energy(powercap=tmp_path)
    _zone(tmp_path, "intel-rapl:0", 17_500_000)  # +12.5 J
    _zone(tmp_path, "intel-rapl:1", 671_150)  # wrapped: +328,850 + 671,150 uJ = +1 J
    _zone(tmp_path, "intel-rapl:0:0", 999_999_999)
    cols = cost.columns(before, cost.read_energy(powercap=tmp_path))
    assert cols == {"energy_j": pytest.approx(13.5), "energy_source": cost.RAPL_SOURCE, "energy_note": None}


def test_energy_not_readable_says_why_never_zero(tmp_path, monkeypatch):
    missing = cost.read_energy(powercap=tmp_path / "none")
    assert cost.columns(missing, missing)["energy_note"] == (
        f"energy not available: no {tmp_path / 'none'} (no powercap driver, or a virtual machine that does not "
        "expose RAPL)"
    )
    assert cost.read_energy(powercap=tmp_path).reason == f"{tmp_path} has no RAPL package zone (intel-rapl:N)"
    _zone(tmp_path, "intel-rapl:0", 5)
    real = Path.read_text

    def denied(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", denied)
    cols = cost.columns(cost.read_energy(powercap=tmp_path), cost.read_energy(powercap=tmp_path))
    assert cols["energy_j"] is None and cols["energy_note"] == (
        f"energy not available: {tmp_path / 'intel-rapl:0' / 'energy_uj'} is not readable by this user (root only "
        "since Linux 5.10: CVE-2020-8694)"
    )


def test_a_stored_run_records_its_energy_or_why_not(tmp_path, monkeypatch):
    _zone(tmp_path / "powercap", "intel-rapl:0", 1_000_000)
    reads = iter([1_000_000, 3_500_000])
    real = cost._rapl_reading

    def rapl(root):
        _zone(tmp_path / "powercap", "intel-rapl:0", next(reads))
        return real(root)

    monkeypatch.setattr(cost, "POWERCAP", tmp_path / "powercap")
    monkeypatch.setattr(cost, "_rapl_reading", rapl)
    with SSEServer(FixtureConfig()) as srv:
        raw = {
            "name": "en",
            "hardware": "CPU (test)",
            "device": "cpu",
            "engines": {
                "vllm": {"name": "vllm", "launch": None, "model": "org/m", "max_model_len": 256, "url": srv.url}
            },
            "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 64, "output_tokens": 5},
            "retry": {"max_attempts": 1, "retry_on": []},
        }
        (tmp_path / "en.yaml").write_text(yaml.safe_dump(raw))
        Campaign(ExperimentSpec.load(tmp_path / "en.yaml"), tmp_path).execute(runner.LocalExecutor())
    run = store.load_runs(tmp_path).row(0, named=True)
    assert (run["energy_j"], run["energy_source"], run["energy_note"]) == (2.5, cost.RAPL_SOURCE, None)
    assert cost.joules_per_token(run["energy_j"], run["batch_output_tokens"]) == 0.25  # 2.5 J over 10 tokens
