"""The CPU form of the memory study mirrors the reference host: its 0.95 / 0.92 KV budgets stand in the ratio kvlab's
model gives Kimi-K3's KV pool on 8x B300 (within 2%), and the 200K-equivalent batch crosses the pool at 0.92 only."""

from __future__ import annotations

import pytest

from kvlab.paths import EXPERIMENTS_DIR
from kvlab.perfmodel.roofline import Config, memory
from kvlab.experiment import ExperimentSpec, expand

KV_BYTES_PER_TOKEN = 1_024  # the tiny Llama: 2 layers x 1 KV head x 128 x 2 (K, V) x 2 B


def model_ratio() -> float:
    pools = [memory(Config.of("B300", "Kimi-K3", "vllm", 8, 1, u), 204_800).kv_pool_bytes_per_gpu for u in (0.92, 0.95)]
    assert round(pools[0] / 1e9, 2) == 65.55 and round(pools[1] / 1e9, 2) == 74.19  # as the file states them
    return pools[1] / pools[0]


def budgets(name: str) -> dict[float, set[int]]:
    out: dict[float, set[int]] = {}
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / name)
    for r in [*expand(spec), *expand(spec.quick_form())]:
        out.setdefault(r.engine.mem_util, set()).add(r.engine.kv_cache_bytes)
    return out


def test_the_cpu_memory_study_has_the_reference_hosts_pool_ratio_within_2_percent():
    got = budgets("cpu_long_context.yaml")
    assert got == {0.92: {12_582_912}, 0.95: {14_286_848}}  # 12,288 and 13,952 tokens, whole 128-token blocks
    ratio = 14_286_848 / 12_582_912
    assert model_ratio() == pytest.approx(1.1318, abs=5e-5)
    assert ratio == pytest.approx(1.1354, abs=5e-5) and abs(ratio / model_ratio() - 1) < 0.02
    assert budgets("cpu_capacity.yaml") == got  # its servers are the study's (tests/test_load.py)


def test_the_200k_equivalent_batch_crosses_the_pool_at_092_only():
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_long_context.yaml")
    batch = spec.workload.batch_size
    pool = {u: min(b) // KV_BYTES_PER_TOKEN for u, b in budgets("cpu_long_context.yaml").items()}
    assert pool == {0.92: 12_288, 0.95: 13_952}
    assert batch * 3_200 == 12_800 and pool[0.92] < 12_800 <= pool[0.95]  # 200K / 64: queues at 0.92 only
    assert batch * 1_024 <= pool[0.92]  # 64K / 64: the whole batch fits at both
    assert all(p % 128 == 0 and p >= 4_160 for p in pool.values())  # whole blocks; the server's max_model_len fits
