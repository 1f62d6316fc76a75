"""Issue 55: the model checked where it can fail (capacity against published concurrency, prefill FLOPs against a
published TTFT, fitted terms at published conditions, the KV pool against an engine's log), physical limits on every
fitted term, memory constants from the devices, capacity-limited throughput and the unexplained cost as a share of
batch time. Exact figures by hand from the catalog and the stored records."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from kvlab.catalog import gpu
from kvlab.paths import DATA_DIR
from kvlab.perfmodel import Assumptions, Config, decode_step, memory, published_fit
from kvlab.perfmodel.calibrate import consistent_fits, crossover_range, over_peak, refits
from kvlab.perfmodel.outside import (
    CAPACITY_FRACTIONS,
    outside_checks,
    terms_tokens_per_s,
)

GIB = 1024**3
MIB = 1024**2
R1_ROUTED = 58 * 256 * 44_040_192  # DeepSeek-R1's routed-expert parameters
R1_STORED_DEP8 = (671e9 - R1_ROUTED) * 1.0 + R1_ROUTED * 0.5625 / 8  # per GPU at DEP8
R1_KV_FP8 = 61 * 576  # 35,136 B per token


@pytest.fixture(scope="module")
def sens():
    return crossover_range(DATA_DIR, physics=True)[0]


def _doctored(tmp_path: Path, section: str, index: int, **changes) -> Path:
    data = tmp_path / "data"
    (data / "reference").mkdir(parents=True)
    doc = yaml.safe_load((DATA_DIR / "reference" / "published_gpu_runs.yaml").read_text())
    doc[section][index].update(changes)
    (data / "reference" / "published_gpu_runs.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return data


# --------------------------------------------------------------------------- memory constants from the devices


def test_gpu_memory_is_what_the_devices_report():
    assert gpu("H200").memory_bytes == 143_771 * MIB == 150_754_820_096
    assert gpu("B200").memory_bytes == 183_359 * MIB == 192_265_846_784
    assert gpu("B300").memory_bytes == gpu("GB300").memory_bytes == 288e9  # published specifications


# --------------------------------------------------------------------------- capacity against published concurrency


def test_capacity_against_published_concurrency_by_hand():
    gb300, gb200 = outside_checks(DATA_DIR).capacity
    per_seq = 136_000 * R1_KV_FP8
    assert gb300.weights_per_gpu_bytes == pytest.approx(R1_STORED_DEP8, rel=1e-12)  # read at DEP8, not 32 GPUs
    assert [round(gb300.capacity(f), 1) for f in CAPACITY_FRACTIONS] == [35.0, 38.0, 39.8, 41.0]
    assert gb300.fraction_needed == pytest.approx((R1_STORED_DEP8 + 40 * per_seq) / 288e9, rel=1e-12)
    assert (round(gb300.fraction_needed, 2), round(gb300.margin, 2), gb300.consistent) == (0.88, 1.18, True)
    # GB200: the post's 192 GB (the catalog's 186 GB beside it)
    assert gb200.memory_bytes == 192e9 and gb200.catalog_memory_bytes == 186e9
    assert (round(gb200.capacity(), 1), round(gb200.capacity(memory_bytes=186e9), 1)) == (27.0, 25.7)
    assert (round(gb200.fraction_needed, 3), gb200.consistent) == (0.926, True)


def test_a_published_concurrency_past_the_capacity_is_contradicted_and_named(tmp_path):
    from kvlab.studies.whatif_model import checks, frames, words

    data = _doctored(tmp_path, "runs", 0, concurrency_per_gpu=60.0)  # needs 1.21 of HBM
    c = outside_checks(data).capacity[0]
    assert not c.consistent and round(c.fraction_needed, 2) == 1.21
    v = checks.capacity_verdict(c)
    assert (v.claim_id, v.outcome, v.family, round(v.value, 2)) == (
        "published_capacity_lmsys_gb300_longctx",
        "contradicted",
        "own",
        0.78,
    )
    text = words.outside(frames.outside([v]))
    assert "**Contradicted:** capacity vs published concurrency (needs 1.21 of HBM;" in text


# --------------------------------------------------------------------------- prefill FLOPs against a published TTFT


def test_prefill_against_the_published_ttft_says_why_it_cannot_decide(tmp_path):
    from kvlab.studies.whatif_model.checks import prefill_verdict

    (c,) = outside_checks(DATA_DIR).prefill
    dense = 2 * 37e9 * 128_000
    attention = 128_000 * 128_001 / 2 * 61 * 2 * 128 * (128 + 64 + 128)
    assert c.flops == pytest.approx(dense + attention, rel=1e-12) and round(c.flops / 1e16, 2) == 5.04
    assert round(c.one_gpu_s, 1) == 11.2  # all at the FP8 peak of 4.5 PFLOP/s
    least = (attention + 2 * (37e9 - 58 * 8 * 44_040_192) * 128_000) / 4.5e15  # routed experts may run at FP4
    assert c.least_one_gpu_s == pytest.approx(least, rel=1e-12) and round(c.gpus_needed, 2) == 1.17
    v = prefill_verdict(c)
    assert (v.outcome, v.limit) == ("cannot be tested here", "the source does not state a condition the check needs")
    # the GPUs needed follow from the time printed beside them (10.0 s ÷ 8.6 s), not from the 11.2 s before it
    assert v.number == (
        "5.04 × 10¹⁶ FLOPs, 11.2 s on one GPU at peak (10.0 s for all but the routed experts, which may run at FP4): "
        "8.6 s needs ≥ 1.17 GPUs"
    )
    # stated: one GPU contradicts the FLOPs, two do not
    one = prefill_verdict(outside_checks(_doctored(tmp_path / "a", "runs", 0, prefill_gpus=1)).prefill[0])
    two = prefill_verdict(outside_checks(_doctored(tmp_path / "b", "runs", 0, prefill_gpus=2)).prefill[0])
    assert (one.outcome, two.outcome) == ("contradicted", "reproduced")


# --------------------------------------------------------------------------- fitted terms at published conditions


def test_fitted_terms_at_the_published_concurrency_by_hand():
    run = outside_checks(DATA_DIR).runs[0]
    free = published_fit(DATA_DIR).params
    bounded = published_fit(DATA_DIR, physics=True).params
    # each GPU at DEP8: 40 sequences, 320 tokens a step over the group touch E(1 - (1 - 8/256)^320) experts a layer
    touched = 256 * (1 - (1 - 8 / 256) ** 320) * 58 * 44_040_192 * 0.5625 / 8
    read = (37e9 - 58 * 8 * 44_040_192) + touched + 40 * (128_000 + 7_999 / 2) * R1_KV_FP8
    for p, want in ((free, 110), (bounded, 219)):
        step = read / (8e12 * p.bandwidth_efficiency) + p.sglang_step_overhead_s
        assert terms_tokens_per_s(run, p) == pytest.approx(40 / step, rel=1e-12)
        assert round(40 / step) == want
    from kvlab.claims.held_out import winners_held_out
    from kvlab.studies.whatif_model.checks import terms_verdict

    facts = (*winners_held_out(published_fit(DATA_DIR)), 0.031, 0.405)
    assert terms_verdict(run, "free", (110.0, 41.0, 1305.0), 12.2, facts).outcome == "contradicted"
    # within the bounded fit's own 19.3% miss of its table: not contradicted, and an illustration (rule 3)
    assert terms_verdict(run, "bounded", (219.0, 173.0, 877.0), 19.3, facts).outcome == "inconclusive"


# --------------------------------------------------------------------------- the KV pool against an engine's log


def test_the_kv_pool_against_vllm_s_own_log(tmp_path):
    tp8, dcp8 = outside_checks(DATA_DIR).pools
    assert tp8.bytes_per_token_per_gpu == 61 * 576 * 2 == 70_272 and dcp8.bytes_per_token_per_gpu == 8_784
    assert tp8.modelled_tokens == pytest.approx(46.80 * GIB / 70_272, rel=1e-12)
    assert round(tp8.implied_bytes_per_token) == 70_274 and (tp8.consistent, dcp8.consistent) == (True, True)
    # vLLM's memory inside its 0.9 target beside weights and KV: 10.4 GiB on an H200 of 143,771 MiB
    weights = 1.04e12 * 0.571 / 8
    assert tp8.non_kv_inside_target_bytes == pytest.approx(0.9 * 143_771 * MIB - weights - 46.80 * GIB, rel=1e-12)
    assert round(tp8.non_kv_inside_target_bytes / GIB, 1) == 10.4
    # a log that counted the pool at the 93-layer reading of the KV would contradict the formula
    from kvlab.studies.whatif_model.checks import pool_verdict

    wrong = outside_checks(_doctored(tmp_path, "pool_logs", 0, kv_tokens=469_105)).pools[0]
    assert (wrong.consistent, pool_verdict(wrong).outcome) == (False, "contradicted")


# --------------------------------------------------------------------------- physical limits on every fitted term


def test_no_fit_over_peak_counts_as_consistent(sens):
    assert over_peak(1.4663, 0.0747) == "prefill 1.47× peak"
    assert over_peak(1.1398, 1.0113) == "prefill 1.14× peak; decode bandwidth 1.01× peak"
    assert over_peak(1.0, 0.9) == ""
    cons = consistent_fits(sens, DATA_DIR)
    kept = cons.filter(pl.col("consistent"))
    assert ((kept["prefill_efficiency"] <= 1 + 1e-9) & (kept["bandwidth_efficiency"] <= 1 + 1e-9)).all()
    over = cons.filter(pl.col("over_peak") != "")
    assert over.height == ((cons["prefill_efficiency"] > 1 + 1e-9) | (cons["bandwidth_efficiency"] > 1 + 1e-9)).sum()
    best = cons.filter(pl.col("over_peak") == "")["max_abs_residual_pct"].min()
    assert cons["threshold_pct"][0] == pytest.approx(best + 5.0, rel=1e-12)
    assert (kept.height, over.height, round(best, 1)) == (36, 340, 5.4)
    assert (sens["over_peak"] != "").sum() == 16  # the free fits over peak, flagged in the sets' table


def test_the_held_out_statement_names_what_batch_32_needs(sens):
    from kvlab.perfmodel.ranges import held_out_by_set

    h = held_out_by_set(sens, DATA_DIR)
    good = h.per_set.filter(pl.col("right") == pl.col("held_out"))
    assert (good["prefill_efficiency"] > 1).all() and h.within_peak == ()
    assert h.text() == (
        "0 of 4 at the default; 4 of 4 in 15 of 96 sets, all at batch 32, needing prefill at 111–171% of dense "
        "peak: not physical"
    )


# --------------------------------------------------------------------------- the unexplained cost and throughput


def test_the_unexplained_cost_as_a_share_of_batch_time(sens):
    from kvlab.perfmodel.ranges import bounded_miss, unexplained_shares
    from kvlab.perfmodel.roofline import Workload, batch_time

    shares = unexplained_shares(sens)
    phys = published_fit(DATA_DIR, physics=True)
    cfg = Config.of("B300", "Kimi-K3", "sglang", 8, 8, 0.92)
    by_hand = []
    for c in (65536, 204800):  # the unexplained cost per step x the batch's steps / its modelled time
        pred = batch_time(cfg, c, Workload(), phys.params)
        by_hand.append((phys.params.sglang_step_overhead_s - 5e-3) * 1024 * pred.waves / pred.batch_time_s)
    assert (shares["sglang"].default_lo, shares["sglang"].default_hi) == (
        pytest.approx(min(by_hand), rel=1e-9),
        pytest.approx(max(by_hand), rel=1e-9),
    )
    assert [round(100 * x) for x in (shares["vllm"].default_lo, shares["vllm"].default_hi)] == [17, 40]
    assert [round(100 * x) for x in (shares["sglang"].default_lo, shares["sglang"].default_hi)] == [28, 55]
    m = bounded_miss(sens)
    assert (round(m.default, 1), round(m.lo, 1), round(m.hi, 1)) == (19.3, 5.4, 35.5)


def test_capacity_limited_throughput_by_hand(sens):
    from kvlab.perfmodel.throughput import capacity_limited, tpot_batch

    t = capacity_limited(sens, context_tokens=204800, tpot_ms=(50, 100))
    p = refits(sens, physics=True)[next(i for i, r in enumerate(sens.iter_rows(named=True))
                                         if (r["batch_size"], r["output_tokens"], r["expert_reads"], r["mla_width"],
                                             r["kv_format"]) == (8, 1024, "uniform", 576, "bf16"))][2]  # fmt: skip
    v = Config.of("B300", "Kimi-K3", "vllm", 8, 1, 0.92)
    assert memory(v, 204800).max_concurrent_seqs == 11
    assert tpot_batch(v, 11, 204800, 0.05, p, Assumptions()) == 0  # one sequence's step is over 50 ms
    step = decode_step(v, 11, 204800, p).total_s
    row = t.filter((pl.col("engine") == "vllm") & (pl.col("tpot_ms") == 100)).row(0, named=True)
    assert (row["seqs"], row["batch"], row["batch_limited_by"]) == (11, 11, "pool")
    assert row["tokens_per_s_per_gpu"] == pytest.approx(11 / step / 8, rel=1e-12)
    at50 = t.filter(pl.col("tpot_ms") == 50)
    assert at50["batch"].to_list() == [0, 0] and at50["batch_limited_by"].to_list() == ["out of reach"] * 2
    assert at50["seqs"].to_list() == [11, 51] and at50["seqs_lo"].to_list() == [10, 51]


def test_kvlab_model_prints_capacity_limited_throughput():
    from typer.testing import CliRunner

    from kvlab.cli import app

    out = CliRunner().invoke(app, ["model", "--context", "204800", "--tpot-ms", "50"]).output
    assert "capacity-limited throughput at 204,800 tokens, TPOT target 50 ms, mem_util 0.92" in out
    assert "  vllm TP8: pool holds 11 sequences (range 10-25, limited by KV); the target is out of reach" in out
    assert "  sglang TP8+DCP8: pool holds 51 sequences (range 51-116, limited by KV);" in out
    assert "output tokens/s per GPU (range 0-" in out


def test_memory_constants_move_the_ceilings():
    from kvlab.perfmodel.throughput import memory_constants

    at200, at64 = memory_constants(), memory_constants(context_tokens=65536)
    vllm = pl.col("constant") == "vLLM non-KV memory inside its target"
    assert at200.filter(vllm)["ceiling_seqs"].to_list() == [11, 10]
    assert at64.filter(vllm)["ceiling_seqs"].to_list() == [35, 31]
    ratio = at200.filter(pl.col("constant") == "SGLang state-pool ratio")
    assert ratio["value"].to_list() == ["0.5", "0.9", "2"] and ratio["ceiling_seqs"].to_list() == [65, 51, 32]
    assert all(s for s in at200["source"].to_list())
