"""Issue 41: per-engine terms with bounds, per-engine memory pools, fitted terms that stay with their model, the
held-out test per assumption set, the ranges the studies print, and the bound against published GPU runs."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from kvlab.paths import DATA_DIR
from kvlab.perfmodel import Assumptions, Config, Workload, batch_time, memory, published_fit
from kvlab.perfmodel.calibrate import (
    PRIOR_CENTRE,
    PRIORS,
    crossover_from_fit,
    crossover_range,
    consistent_fits,
    fit_for_model,
    step_costs,
)
from kvlab.catalog import CatalogError
from kvlab.perfmodel.roofline import crossover_context

GIB = 1024**3
WEIGHTS = 2.7795e12 * 0.56159 / 8  # Kimi-K3 per GPU at TP8 (catalog: total params x blended bytes per param)
STATE = 434_110_464 / 8  # KDA state of one sequence on one GPU


@pytest.fixture(scope="module")
def sens():
    return crossover_range(DATA_DIR, physics=True)[0]


# --------------------------------------------------------------------------- per-engine pools, one function


def test_each_engine_s_pool_by_hand_at_200k():
    """vLLM: activations inside the 0.92 target, the KDA state in its one pool; SGLang: activations outside its
    fraction, the KDA state in a pool of its own (ratio 0.9: 0.9/1.9 of what the weights leave)."""
    v = memory(Config.of("B300", "Kimi-K3", "vllm", 8, 1, 0.92), 204800)
    s = memory(Config.of("B300", "Kimi-K3", "sglang", 8, 8, 0.92), 204800)
    rest = 0.92 * 288e9 - WEIGHTS
    assert v.kv_pool_bytes_per_gpu == pytest.approx(rest - 4 * GIB, rel=1e-12)
    assert v.max_concurrent_seqs == int((rest - 4 * GIB) // (204800 * 27648 + STATE)) == 11
    assert s.kv_pool_bytes_per_gpu == pytest.approx(rest / 1.9, rel=1e-12)
    assert s.state_pool_bytes_per_gpu == pytest.approx(rest * 0.9 / 1.9, rel=1e-12)
    kv_slots, state_slots = int(rest / 1.9 // (204800 * 27648 / 8)), int(rest * 0.9 / 1.9 // STATE)
    assert (kv_slots, state_slots) == (51, 609)
    assert (s.max_concurrent_seqs, s.limited_by) == (51, "KV")
    assert s.kv_capacity_tokens == int(rest / 1.9 // 3456)


def test_dcp_does_not_raise_sglang_s_state_slots():
    """SGLang's DCP shards only the MLA cache: with a small state pool the ceiling is the state's, whatever the DCP."""
    a = Assumptions(sglang_state_pool_ratio=0.01)
    got = {d: memory(Config.of("B300", "Kimi-K3", "sglang", 8, d, 0.92), 65536, a) for d in (2, 8)}
    rest = 0.92 * 288e9 - WEIGHTS
    state_slots = int(rest * 0.01 / 1.01 // STATE)
    assert state_slots == 12
    assert [(m.max_concurrent_seqs, m.limited_by) for m in got.values()] == [(12, "state"), (12, "state")]
    assert abs(got[8].kv_capacity_tokens - 4 * got[2].kv_capacity_tokens) <= 4  # the KV pool's tokens grow with DCP


def test_reports_03_and_07_read_their_ceilings_from_one_function():
    from kvlab.perfmodel.figures import headroom_table
    from kvlab.studies.capacity.frames import modelled_ceilings
    from kvlab.perfmodel.pools import concurrency_ceilings

    args = ("B300", "Kimi-K3", [0.92, 0.95], [1, 8], [65536, 131072, 204800])
    one = concurrency_ceilings(*args).sort("mem_util", "dcp", "context_tokens")
    r03 = headroom_table(*args).sort("mem_util", "dcp", "context_tokens")
    r07 = modelled_ceilings(mem_utils=(0.92, 0.95), dcp_sizes=(1, 8)).sort("mem_util", "dcp", "context_tokens")
    assert (
        r03["max_concurrent_seqs"].to_list()
        == r07["concurrency_ceiling"].to_list()
        == one["max_concurrent_seqs"].to_list()
        == [35, 17, 11, 162, 81, 51, 39, 20, 12, 182, 91, 58]
    )
    assert r07["engine"].to_list() == ["vllm"] * 3 + ["sglang"] * 3 + ["vllm"] * 3 + ["sglang"] * 3


# --------------------------------------------------------------------------- per-step terms with bounds


def test_no_fit_but_a_labelled_free_fit_has_a_dcp_latency_above_100_us(sens):
    assert (sens["phys_dcp_layer_latency_us"] <= 100 * (1 + 1e-9)).all()
    cons = consistent_fits(sens, DATA_DIR)
    over = cons.filter(pl.col("dcp_layer_latency_us") > 100 * (1 + 1e-9))
    assert over.height > 0 and set(over["fit"]) <= {"free", "free, bandwidth fixed"}


def test_per_step_costs_per_engine_with_their_ranges(sens):
    from kvlab.perfmodel.ranges import per_step_costs

    costs = per_step_costs(sens)
    cap = PRIORS["vllm_step_overhead_s"][1] * 1e3
    for engine, c in costs.items():
        totals = sens[f"phys_{engine}_overhead_ms"]
        # independent: each set's bounded per-step cost split at the prior's 5 ms
        assert c.unexplained_ms.hi == pytest.approx(max(max(t - cap, 0) for t in totals), rel=1e-9)
        assert c.unexplained_ms.lo == pytest.approx(min(max(t - cap, 0) for t in totals), rel=1e-9)
        assert c.fitted_overhead_ms.hi <= cap and c.unexplained_ms.sets == 96
    assert [
        round(x, 1)
        for x in (
            costs["sglang"].unexplained_ms.lo,
            costs["sglang"].unexplained_ms.hi,
            costs["sglang"].unexplained_ms.default,
        )
    ] == [1.9, 122.7, 74.4]
    assert [
        round(x, 1)
        for x in (
            costs["vllm"].unexplained_ms.lo,
            costs["vllm"].unexplained_ms.hi,
            costs["vllm"].unexplained_ms.default,
        )
    ] == [0.0, 104.1, 42.4]
    default = step_costs(published_fit(DATA_DIR, physics=True).params)
    assert costs["sglang"].unexplained_ms.default == pytest.approx(default["sglang"].unexplained_s * 1e3, rel=1e-9)


def test_kvlab_model_prints_per_engine_costs_held_out_and_bounds():
    from kvlab.perfmodel.report import model_command

    out = model_command()
    assert (
        "    SGLang: fitted per-step overhead 5.00 ms (range 5.00-5.00); unexplained per-step cost 74.4 ms (range "
        "1.9-122.7) that nothing in the model explains"
    ) in out
    assert "    vLLM: fitted per-step overhead 5.00 ms (range 0.00-5.00); unexplained per-step cost 42.4 ms" in out
    assert "0 of 4 at the default; 4 of 4 in 15 of 96 sets, all at batch 32" in out
    assert "lmsys_gb300_longctx: DeepSeek-R1-NVFP4 on GB300, 128,000 in: bound 1,665 >= published 226.2" in out
    assert "free fit — NON-PHYSICAL" in out  # the free fit, with its DCP latency above the prior, is labelled


# --------------------------------------------------------------------------- typed ranges and the held-out test


def test_held_out_per_assumption_set(sens):
    from kvlab.claims.held_out import winners_held_out
    from kvlab.perfmodel.ranges import held_out_by_set

    h = held_out_by_set(sens, DATA_DIR)
    assert (h.default, h.all_right, h.sets, h.batch_sizes) == ((0, 4), 15, 96, (32,))
    assert h.text() == (
        "0 of 4 at the default; 4 of 4 in 15 of 96 sets, all at batch 32, needing prefill at 111–171% of dense peak: "
        "not physical"
    )
    row = h.per_set.filter(pl.col("right") == 4).row(0, named=True)  # recomputed from the set's own fit
    a = Assumptions(
        expert_reads=row["expert_reads"],
        mla_width=None if row["mla_width"] == 576 else row["mla_width"],
        kv_format=row["kv_format"],
    )
    assert winners_held_out(published_fit(DATA_DIR, Workload(row["batch_size"], row["output_tokens"]), a)) == (4, 4)


def test_model_ranges_speed_ratios_and_crossovers(sens):
    from kvlab.perfmodel.ranges import model_ranges

    m = model_ranges(sens)
    r64, r200 = m.ratios
    assert (r64.context_tokens, r64.sglang_faster, r200.sglang_faster) == (65536, 0, 44)
    assert (round(r64.ratio.lo, 3), round(r64.ratio.hi, 3), round(r200.ratio.lo, 3), round(r200.ratio.hi, 3)) == (
        0.618,
        0.795,
        0.917,
        1.432,
    )
    assert sum(w == "SGLang" for w in sens["winner_200k"]) == r200.sglang_faster  # the table's own winners
    assert (m.crossover.lo, m.crossover.hi, m.crossover.counted, m.crossover.default) == (110224, 764133, 96, 177652)
    assert m.crossover.default == crossover_from_fit(published_fit(DATA_DIR))
    assert (m.physics_crossover.lo, m.physics_crossover.hi, m.physics_crossover.counted) == (72125, 1037389, 72)


# --------------------------------------------------------------------------- fitted terms stay with their model


def test_no_report_applies_a_kimi_k3_fitted_term_to_another_model():
    from kvlab import guide

    fit = published_fit(DATA_DIR)
    assert fit.model == "Kimi-K3" and fit_for_model(fit, "moonshotai/Kimi-K3") is fit
    other = fit_for_model(fit, "Llama-3.1-8B")
    assert (other.kind, other.params, other.model) == ("uncalibrated", PRIOR_CENTRE, "Llama-3.1-8B")
    # report 06's context factor: the priors' centre, and the two engines differ by DCP's collectives alone
    w = guide.UserWorkload(8192, 0.4, 128, "Llama-3.1-8B", "B300", 8, 8, False, "stability")
    ta, tb = guide.context_factor(w, fit).times
    va, vb = guide.engine_configs(w)
    assert (ta, tb) == (
        batch_time(va, 8192, p=PRIOR_CENTRE).batch_time_s,
        batch_time(vb, 8192, p=PRIOR_CENTRE).batch_time_s,
    )
    msg = 7 / 8 * 8 * 32 * 129 * 4  # partial outputs + LSE of 8 sequences, 32 heads, FP32, to 7 of 8 ranks
    assert tb - ta == pytest.approx(1024 * 32 * (PRIOR_CENTRE.dcp_layer_latency_s + msg / 0.9e12), rel=1e-9)
    # the crossover and the ranges for another model: never from the Kimi-K3 fits
    assert crossover_from_fit(fit, model="Llama-3.1-8B") == crossover_context(
        Config.of("B300", "Llama-3.1-8B", "vllm", 8, 1),
        Config.of("B300", "Llama-3.1-8B", "sglang", 8, 8),
        Workload(),
        PRIOR_CENTRE,
    )
    table, _ = crossover_range(DATA_DIR, workloads=[Workload()], model="Llama-3.1-8B")
    assert set(table["fit"]) == {"prior centre", "prior fast end", "prior slow end"}
    # report 06's study (what its notebook shows) passes its fit through fit_for_model for the model it is given
    from kvlab import studies

    r = studies.compute_report("06", DATA_DIR, {"model": "Llama-3.1-8B", "curve_points": 4})
    assert (r.fit_kind, r.fit_model) == ("uncalibrated", "Llama-3.1-8B")


# --------------------------------------------------------------------------- the bound against published GPU runs


def _runs_copy(tmp_path: Path, **changes) -> Path:
    data = tmp_path / "data"
    (data / "reference").mkdir(parents=True)
    doc = yaml.safe_load((DATA_DIR / "reference" / "published_gpu_runs.yaml").read_text())
    doc["runs"][0].update(changes)
    (data / "reference" / "published_gpu_runs.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return data


def test_bounds_against_published_runs_by_hand():
    from kvlab.perfmodel.reference import bound_checks

    gb300, gb300_gb200, gb200 = bound_checks(DATA_DIR)
    # DeepSeek-R1-NVFP4 on GB300, Wide-EP read at the 32 GPUs the post names (the reading that raises the bound):
    # 17.07e9 non-routed params at 1 B + 653.9e9 routed at 0.5625 B over 32 GPUs; FP8 KV 61 x 576 = 35,136 B per
    # token; 54 sequences of 136,000 tokens fit; each step reads the 16.57e9 active non-routed bytes and
    # 54 x 128,000 tokens of KV at 8 TB/s
    routed = 58 * 256 * 44_040_192
    stored = (671e9 - routed) * 1.0 + routed * 0.5625 / 32
    cap = (288e9 - stored) / (136_000 * 35_136)
    step = ((37e9 - 58 * 8 * 44_040_192) + 54 * 128_000 * 35_136) / 8e12
    assert (gb300.capacity_per_gpu, gb300.bound) == (pytest.approx(cap, rel=1e-12), pytest.approx(54 / step, rel=1e-12))
    assert (round(gb300.bound, 1), round(gb300.margin, 2), gb300.consistent) == (1665.2, 7.36, True)
    # the same post's GB200 baseline, at the post's 192 GB (the catalog's 186 GB is lower: the bound reads the larger)
    assert gb300_gb200.capacity_per_gpu == pytest.approx((192e9 - stored) / (136_000 * 35_136), rel=1e-12)
    assert (round(gb300_gb200.bound, 1), gb300_gb200.consistent) == (1604.9, True)
    assert (round(gb200.bound), gb200.consistent) == (103384, True)


def test_a_published_figure_above_the_bound_contradicts_the_model_and_names_the_term(tmp_path):
    from kvlab.perfmodel.reference import bound_checks
    from kvlab.studies.whatif_model.checks import bound_verdict

    doctored = bound_checks(_runs_copy(tmp_path, value=2000.0))[0]  # above the 1,665.2 bound
    assert not doctored.consistent and doctored.margin == pytest.approx(1665.2 / 2000, abs=1e-4)
    assert doctored.wrong_term().startswith("the KV bytes read per step (35,136 B per token per GPU in fp8)")
    v = bound_verdict(doctored)
    assert (v.claim_id, v.outcome, v.evidence) == ("published_bound_lmsys_gb300_longctx", "contradicted", "published")
    assert "the model is contradicted: the KV bytes read per step" in v.reason
    # a published concurrency the modelled KV capacity cannot hold contradicts it too, naming the capacity
    crowded = bound_checks(_runs_copy(tmp_path / "b", concurrency_per_gpu=60.0))[0]
    assert not crowded.consistent and crowded.wrong_term().startswith("the KV capacity: 54.3 sequences per GPU")


def test_a_bad_published_run_names_the_file_and_field(tmp_path):
    from kvlab.perfmodel.reference import load_published_runs

    with pytest.raises(CatalogError, match=r"published_gpu_runs.yaml, run 1 \(lmsys_gb300_longctx\): field 'value'"):
        load_published_runs(_runs_copy(tmp_path, value=-1))
    with pytest.raises(CatalogError, match=r"field 'gpu': hardware 'B900'"):
        load_published_runs(_runs_copy(tmp_path / "g", gpu="B900"))


# --------------------------------------------------------------------------- the step-fit plan's GPU time


def test_the_step_fit_dry_run_prints_its_gpu_minutes():
    from kvlab import plan
    from kvlab.perfmodel.report import SERVER_START_S, gpu_minutes
    from kvlab.experiment import expand

    spec = plan.load(DATA_DIR / "experiments" / "b300_step_fit.yaml")
    est = gpu_minutes(spec)
    assert (est["runs"], est["servers"], est["gpus"]) == (44, 5, 8)
    # independent: every run's modelled batch time under the free fit x its 8 GPUs, plus 5 starts of 8 GPUs
    fit = published_fit(DATA_DIR)
    total = sum(
        batch_time(
            Config.of("B300", "Kimi-K3", r.engine.name, r.engine.tp, r.engine.dcp, r.engine.mem_util),
            r.workload.context_tokens,
            Workload(r.workload.batch_size, r.workload.output_tokens),
            fit.params,
        ).batch_time_s
        * r.engine.tp
        for r in expand(spec)
    )
    assert total / 60 + 5 * SERVER_START_S * 8 / 60 in (
        pytest.approx(est["gpu_minutes"][0], rel=1e-9),
        pytest.approx(est["gpu_minutes"][1], rel=1e-9),
    )
    from typer.testing import CliRunner

    from kvlab.cli import app

    out = CliRunner().invoke(app, ["sweep", str(DATA_DIR / "experiments" / "b300_step_fit.yaml"), "--dry-run"]).output
    wall = est["wall_minutes"]  # the runs and the starts one after the other: TP8 on 8 GPUs, GPU-minutes / 8
    assert wall[0] == pytest.approx(est["gpu_minutes"][0] / 8) and wall[1] == pytest.approx(est["gpu_minutes"][1] / 8)
    assert out.splitlines()[-1].startswith(
        f"# estimate: {est['gpu_minutes'][0]:,.0f}-{est['gpu_minutes'][1]:,.0f} GPU-minutes on 8 GPUs ≈ "
        f"{wall[0] / 60:.1f}-{wall[1] / 60:.1f} h wall (44 runs"
    )
    assert gpu_minutes(plan.load(DATA_DIR / "experiments" / "cpu_long_context.yaml")) is None  # a CPU plan: none


def test_kvlab_model_never_predicts_another_model_with_the_kimi_k3_fit():
    from kvlab.perfmodel.calibrate import PRIOR_FAST, PRIOR_SLOW
    from kvlab.perfmodel.report import model_command

    out = model_command(
        gpu="H200", model="Llama-3.1-70B", engine="vllm", tp=8, context_tokens=[8192], batch_size=4, output_tokens=10
    )
    assert (
        "params (uncalibrated roofline at the centre of its priors" in out and "the available fit is Kimi-K3's" in out
    )
    assert "prefill_efficiency 0.525, bandwidth_efficiency 0.600" in out and "calibration on" not in out
    cfg = Config.of("H200", "Llama-3.1-70B", "vllm", 8, 1, 0.92)
    fast, slow = (batch_time(cfg, 8192, Workload(4, 10), p).batch_time_s for p in (PRIOR_FAST, PRIOR_SLOW))
    assert f"  vllm TP8 at 8K: {fast:,.1f}-{slow:,.1f} s" in out
