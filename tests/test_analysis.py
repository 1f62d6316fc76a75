"""The studies' arithmetic on the published table: exact values the table gives."""

import polars as pl
import pytest
from prefix_frames import conc_runs, multi_turn_frames, sharing_requests, sharing_runs

from kvlab import store
from kvlab.studies.capacity import frames as capacity_frames
from kvlab.studies.context_scaling import frames as context_scaling_frames
from kvlab.studies.engine_choice import frames as engine_choice_frames
from kvlab.studies import measured_frames
from kvlab.studies.prefix_sharing import frames as prefix_sharing_frames
from kvlab.studies import sharing_frames
from kvlab.studies.throughput_decay import frames as throughput_decay_frames

RUNS = store.load_runs()
PUB = RUNS.filter((pl.col("source") == "published") & (pl.col("experiment") == "article_b300"))
CLAIMS = store.load_claims()


def test_relative_speed_matches_article():
    rel = measured_frames.relative_speed(PUB).select("context_label", "faster", "speedup").rows()
    assert [(c, f) for c, f, _ in rel] == [("64K", "vllm"), ("200K", "sglang")]
    assert rel[0][2] == pytest.approx(150.8 / 100.5) and round(rel[0][2], 2) == 1.50
    assert rel[1][2] == pytest.approx(295.2 / 225.3) and round(rel[1][2], 2) == 1.31


def test_decay_batch_time_ratios():
    dec = {r["engine"]: r for r in measured_frames.decay_factors(PUB).iter_rows(named=True)}
    assert round(dec["vllm"]["batch_time_ratio"], 2) == 2.94
    assert round(dec["sglang"]["batch_time_ratio"], 2) == 1.49
    # prompt tokens/s per batch *rises* with context for both (ratio < 1)
    assert dec["vllm"]["prompt_tokens_per_s_ratio"] == pytest.approx((65536 / 100.5) / (204800 / 295.2))
    assert dec["sglang"]["prompt_tokens_per_s_ratio"] < 1


def test_throughput_definitions():
    tp = measured_frames.throughput(PUB).sort("context_tokens", "engine")
    assert tp["batches_per_s"].to_list() == pytest.approx([1 / 150.8, 1 / 100.5, 1 / 225.3, 1 / 295.2])
    assert tp["requests_per_s"].null_count() == 4  # the article gives no batch size
    measured = pl.DataFrame(
        {
            "source": ["measured"],
            "experiment": ["e"],
            "hardware": ["CPU"],
            "context_label": ["2K"],
            "context_tokens": [2048],
            "engine": ["vllm"],
            "status": ["ok"],
            "batch_time_s": [2.0],
            "batch_size": [4],
            "output_tokens": [32],
            "prompt_tokens": [2000],
            "scale_factor": [32.0],
        }
    )
    row = measured_frames.throughput(measured).row(0, named=True)
    assert (row["requests_per_s"], row["output_tokens_per_s"], row["prompt_tokens_per_s"]) == (2.0, 64.0, 4000.0)


def test_crossover_between_contexts():
    lin = measured_frames.crossover(PUB)
    assert (lin.faster_below, lin.faster_above) == ("vllm", "sglang")
    # linear: 65536 + 139264 * 50.3 / (50.3 + 69.9)
    assert lin.context_tokens == pytest.approx(65536 + 139264 * 50.3 / 120.2)
    pw = measured_frames.crossover(PUB, method="power")
    assert 65536 < pw.context_tokens < 204800 and pw.context_tokens != pytest.approx(lin.context_tokens)
    assert "power law" in pw.assumption


def test_crossover_none_outside_range():
    only_64k = PUB.filter(pl.col("context_label") == "64K")
    assert measured_frames.crossover(only_64k).context_tokens is None
    vllm_always = PUB.with_columns(
        pl.when(pl.col("engine") == "vllm").then(pl.col("batch_time_s") / 10).otherwise(pl.col("batch_time_s"))
    )
    x = measured_frames.crossover(vllm_always)
    assert x.context_tokens is None and "vLLM is faster at every measured context" in x.note


def test_crossover_refuses_mixed_sources():
    mixed = pl.concat([PUB, PUB.with_columns(pl.lit("modelled").alias("source"))])
    with pytest.raises(ValueError, match="one source"):
        measured_frames.crossover(mixed)


def test_consistency_check_reports_each_claim():
    check = measured_frames.consistency(PUB, CLAIMS)
    verdict = {r["claim_id"]: r for r in throughput_decay_frames.consistency_verdicts(check).iter_rows(named=True)}
    assert verdict["speedup_64K"]["consistent_under_any"] is True
    assert verdict["speedup_200K"]["consistent_under_any"] is True
    assert verdict["decay_vllm"]["consistent_under_any"] is False
    assert verdict["decay_sglang"]["consistent_under_any"] is False
    assert round(verdict["decay_vllm"]["implied_by_time_ratio"], 2) == 2.94
    assert round(verdict["decay_sglang"]["implied_by_time_ratio"], 2) == 1.49
    assert {c: (r["kind"], r["engine"]) for c, r in verdict.items()} == {
        "speedup_64K": ("relative_speed", "vllm"),
        "speedup_200K": ("relative_speed", "sglang"),
        "decay_vllm": ("throughput_decay", "vllm"),
        "decay_sglang": ("throughput_decay", "sglang"),
    }
    # every numeric claim is checked under every definition of its kind
    assert check.height == 2 * len(measured_frames.SPEED_DEFINITIONS) + 2 * len(measured_frames.DECAY_DEFINITIONS)


def test_consistency_flags_a_claim_naming_the_slower_engine():
    wrong = CLAIMS.with_columns(
        pl.when(pl.col("claim_id") == "speedup_64K").then(pl.lit("sglang")).otherwise(pl.col("engine")).alias("engine")
    )
    check = measured_frames.consistency(PUB, wrong).filter(pl.col("claim_id") == "speedup_64K")
    assert not check["consistent"].any()


def test_memory_study_counts_retries_and_causes():
    from kvlab.studies.memory_utilisation import frames as mf

    runs = pl.DataFrame(
        {
            "source": ["measured"] * 3,
            "experiment": ["e"] * 3,
            "run_id": ["a", "b", "c"],
            "hardware": ["CPU"] * 3,
            "engine": ["vllm"] * 3,
            "mem_util": [0.95, 0.95, 0.92],
            "context_label": ["2K"] * 3,
            "context_tokens": [2048] * 3,
            "status": ["ok", "failed", "ok"],
            "batch_time_s": [2.0, None, 3.0],
            "attempts": [3, 3, 1],
            "ttft_mean_ms": [10.0, None, 12.0],
            "e2e_mean_ms": [100.0, None, 120.0],
            "server_preemptions": [0, None, 0],
        }
    )
    attempts = pl.DataFrame(
        {
            "run_id": ["a", "a", "a", "b", "b", "b", "c"],
            "attempt": [1, 2, 3, 1, 2, 3, 1],
            "status": ["failed", "failed", "ok", "failed", "failed", "failed", "ok"],
            "failure_cause": ["kv_cache_too_small"] * 2 + [None] + ["runtime_oom"] * 3 + [None],
        }
    )
    stats = {r["mem_util"]: r for r in mf.memory_study(runs, attempts).iter_rows(named=True)}
    assert (stats[0.95]["runs"], stats[0.95]["runs_failed"], stats[0.95]["retries"]) == (2, 1, 4)
    assert (stats[0.92]["runs_failed"], stats[0.92]["retries"]) == (0, 0)
    assert stats[0.95]["batch_time_mean_s"] == 2.0
    causes = mf.failure_causes(attempts, runs).filter(pl.col("mem_util") == 0.95)
    assert dict(causes.select("failure_cause", "failed_attempts").iter_rows()) == {
        "kv_cache_too_small": 2,
        "runtime_oom": 3,
    }


def _two_engines(times: dict[tuple[str, int], float]) -> pl.DataFrame:
    """Measured fixed-batch runs, one per (engine, context tokens) -> batch time."""
    rows = [
        {
            "source": "measured",
            "experiment": "e",
            "hardware": "CPU",
            "engine": e,
            "context_tokens": c,
            "context_label": f"{c * 32 // 1024}K",
            "status": "ok",
            "batch_time_s": t,
            "batch_size": 4,
            "output_tokens": 64,
            "prompt_tokens": c - 64,
            "scale_factor": 32.0,
        }
        for (e, c), t in times.items()
    ]
    return pl.DataFrame(rows)


def test_relative_speed_and_crossover_between_measured_engines():
    runs = _two_engines(
        {("vllm", 2048): 2.0, ("vllm", 6400): 8.0, ("sglang-jax", 2048): 4.0, ("sglang-jax", 6400): 6.0}
    )
    rel = measured_frames.relative_speed(runs, "vllm", "sglang-jax")
    assert rel.select(
        "context_label", "engine", "batch_time_s", "other_engine", "other_batch_time_s", "faster", "speedup"
    ).rows() == [
        ("64K", "vllm", 2.0, "sglang-jax", 4.0, "vllm", 2.0),
        ("200K", "vllm", 8.0, "sglang-jax", 6.0, "sglang-jax", 8.0 / 6.0),
    ]
    # contexts pair on their tokens: a label written another way names the same context
    relabelled = runs.with_columns(
        pl.when(pl.col("engine") == "sglang-jax")
        .then(pl.lit("65,536"))
        .otherwise(pl.col("context_label"))
        .alias("context_label")
    )
    assert measured_frames.relative_speed(relabelled, "vllm", "sglang-jax")["speedup"].to_list() == [2.0, 8.0 / 6.0]
    x = measured_frames.crossover(runs, "vllm", "sglang-jax")
    assert (x.context_tokens, x.faster_below, x.faster_above) == (2048 + 4352 / 2, "vllm", "sglang-jax")
    # with sglang-jax slower everywhere the estimate says so instead of extrapolating
    slow = runs.with_columns(
        pl.when(pl.col("engine") == "sglang-jax")
        .then(pl.col("batch_time_s") * 3)
        .otherwise(pl.col("batch_time_s"))
        .alias("batch_time_s")
    )
    none = measured_frames.crossover(slow, "vllm", "sglang-jax")
    assert none.context_tokens is None
    assert none.note == "vLLM is faster at every measured context (2,048–6,400 tokens): no crossover inside the range"
    fast = runs.with_columns(
        pl.when(pl.col("engine") == "sglang-jax")
        .then(pl.col("batch_time_s") / 10)
        .otherwise(pl.col("batch_time_s"))
        .alias("batch_time_s")
    )
    assert measured_frames.crossover(fast, "vllm", "sglang-jax").note.startswith(
        "sglang-jax (CPU) is faster at every measured context"
    )  # the engine's label, never its id


def test_batch_time_growth_fits_a_power_law_per_engine():
    runs = _two_engines(
        {
            ("vllm", 1024): 1.0,
            ("vllm", 2048): 2.0,
            ("vllm", 4096): 4.0,
            ("sglang-jax", 1024): 3.0,
            ("sglang-jax", 4096): 6.0,
            ("sglang-jax", 2048): 3.0,
        }
    )
    g = {r["engine"]: r for r in context_scaling_frames.batch_time_growth(runs).iter_rows(named=True)}
    v = g["vllm"]
    assert (v["growth"], v["n_contexts"], v["c_from"], v["c_to"]) == (4.0, 3, 1024, 4096)
    assert g["vllm"]["exponent"] == pytest.approx(1.0)  # doubling context doubles time: linear
    # log2 T = log2 3 + {0, 0, 1} at log2 C = {10, 11, 12}: least-squares slope 0.5
    assert g["sglang-jax"]["growth"] == 2.0 and g["sglang-jax"]["exponent"] == pytest.approx(0.5)
    one = context_scaling_frames.batch_time_growth(runs.filter(pl.col("context_tokens") == 1024))
    assert one["growth"].to_list() == [None, None] and one["exponent"].to_list() == [None, None]


def test_memory_study_keeps_missing_counters_null_and_compares_settings():
    from kvlab.studies.memory_utilisation import frames as mf

    runs = pl.DataFrame(
        {
            "source": ["measured"] * 4,
            "experiment": ["e"] * 4,
            "run_id": ["a", "b", "c", "d"],
            "hardware": ["CPU"] * 4,
            "engine": ["vllm", "vllm", "sglang-jax", "sglang-jax"],
            "mem_util": [0.92, 0.95, 0.92, 0.95],
            "context_label": ["200K"] * 4,
            "context_tokens": [3200] * 4,
            "status": ["ok"] * 4,
            "batch_time_s": [8.0, 6.0, 6.0, 5.0],
            "attempts": [1, 1, 1, 2],
            "ttft_mean_ms": [1.0] * 4,
            "e2e_mean_ms": [2.0] * 4,
            "server_preemptions": [2, 0, None, None],
        }
    )
    attempts = pl.DataFrame(
        {
            "run_id": ["a", "b", "c", "d", "d"],
            "attempt": [1, 1, 1, 1, 2],
            "status": ["ok", "ok", "ok", "failed", "ok"],
            "failure_cause": [None, None, None, "runtime_oom", None],
        }
    )
    stats = mf.memory_study(runs, attempts)
    pre = {(r["engine"], r["mem_util"]): r["preemptions"] for r in stats.iter_rows(named=True)}
    assert pre == {("vllm", 0.92): 2, ("vllm", 0.95): 0, ("sglang-jax", 0.92): None, ("sglang-jax", 0.95): None}
    cmp = {r["engine"]: r for r in mf.memory_comparison(stats).iter_rows(named=True)}
    assert (cmp["vllm"]["mem_low"], cmp["vllm"]["mem_high"], cmp["vllm"]["time_ratio"]) == (0.92, 0.95, 0.75)
    assert (cmp["sglang-jax"]["retries_low"], cmp["sglang-jax"]["retries_high"]) == (0, 1)
    assert cmp["sglang-jax"]["time_ratio"] == pytest.approx(5 / 6) and cmp["sglang-jax"]["preemptions_high"] is None
    assert mf.memory_comparison(stats.filter(pl.col("mem_util") == 0.92)).height == 0  # one setting: nothing
    assert mf.memory_comparison(stats.clear()).height == 0


def test_memory_ratios_set_each_engine_against_itself_with_the_range_of_its_repeats():
    """0.92 ÷ 0.95 within each engine: the ratio of the means, and least ÷ most to most ÷ least over the repeats."""
    from kvlab.studies.memory_utilisation import frames as mf

    rows = [
        ("vllm", 0.92, 8.0),
        ("vllm", 0.95, 6.0),
        ("vllm", 0.95, 4.0),
        ("vllm", 0.92, 10.0),
        ("vllm", 0.95, 5.0),
        ("vllm", 0.92, 9.0),
        ("sglang-jax", 0.92, 6.0),
        ("sglang-jax", 0.95, 5.0),
    ]
    runs = pl.DataFrame(
        {
            "source": "measured",
            "experiment": "e",
            "hardware": "CPU",
            "run_id": [f"r{i}" for i in range(len(rows))],
            "engine": [r[0] for r in rows],
            "mem_util": [r[1] for r in rows],
            "context_label": "200K",
            "context_tokens": 3200,
            "status": "ok",
            "batch_time_s": [r[2] for r in rows],
            "attempts": 1,
            "ttft_mean_ms": 1.0,
            "e2e_mean_ms": [r[2] * 100 for r in rows],
            "server_preemptions": None,
        }
    )
    attempts = pl.DataFrame({"run_id": [f"r{i}" for i in range(len(rows))], "status": "ok", "failure_cause": None})
    ratios = {r["engine"]: r for r in mf.memory_ratios(mf.memory_study(runs, attempts)).iter_rows(named=True)}
    v, s = ratios["vllm"], ratios["sglang-jax"]
    # vLLM: means 9 s (8, 9, 10) against 5 s (4, 5, 6); the range 8 ÷ 6 to 10 ÷ 4
    assert (v["mem_low"], v["mem_high"], v["n_runs"]) == (0.92, 0.95, 3)
    assert (v["batch_time_ratio"], v["batch_time_ratio_min"], v["batch_time_ratio_max"]) == (
        pytest.approx(1.8),
        pytest.approx(8 / 6),
        pytest.approx(2.5),
    )
    assert (v["e2e_ratio"], v["e2e_ratio_min"], v["e2e_ratio_max"]) == (
        pytest.approx(1.8),
        pytest.approx(8 / 6),
        pytest.approx(2.5),
    )
    # sglang-jax: one run a side, so its range is the ratio itself
    assert (s["batch_time_ratio"], s["batch_time_ratio_min"], s["batch_time_ratio_max"], s["n_runs"]) == (
        pytest.approx(1.2),
        pytest.approx(1.2),
        pytest.approx(1.2),
        1,
    )
    assert mf.memory_ratios(mf.memory_study(runs, attempts).filter(pl.col("mem_util") == 0.92)).height == 0


def test_relative_to_context_sets_each_engine_to_1_at_the_reference():
    frame = pl.DataFrame(
        {
            "source": "published",
            "experiment": "a",
            "hardware": "B300",
            "engine": ["vllm", "vllm", "sglang", "sglang", "sglang"],
            "context_label": ["64K", "200K", "32K", "64K", "200K"],
            "context_tokens": [65536, 204800, 32768, 65536, 204800],
            "batches_per_s": [0.01, 0.0034, 0.02, 0.008, 0.0052],
        }
    )
    at64 = {
        (r["engine"], r["context_label"]): (r["batches_per_s_rel"], r["reference_context"])
        for r in throughput_decay_frames.relative_to_context(frame, "batches_per_s", "64K").iter_rows(named=True)
    }
    assert at64 == {
        ("vllm", "64K"): (1.0, "64K"),
        ("vllm", "200K"): (pytest.approx(0.34), "64K"),
        ("sglang", "32K"): (2.5, "64K"),
        ("sglang", "64K"): (1.0, "64K"),
        ("sglang", "200K"): (pytest.approx(0.65), "64K"),
    }
    # no reference named: each engine's shortest context (sglang's 32K, vLLM's 64K)
    short = {
        (r["engine"], r["context_label"]): (r["batches_per_s_rel"], r["reference_context"])
        for r in throughput_decay_frames.relative_to_context(frame, "batches_per_s").iter_rows(named=True)
    }
    assert short[("sglang", "64K")] == (pytest.approx(0.4), "32K") and short[("vllm", "200K")][1] == "64K"


def test_caching_gain_carries_the_range_of_each_speed_up_over_the_repeats():
    rows = [(True, 2.0, 100.0), (True, 3.0, 150.0), (False, 6.0, 300.0), (False, 9.0, 600.0)]
    sharing = pl.DataFrame(
        {
            "experiment": "e",
            "hardware": "CPU",
            "engine": "vllm",
            "shared_fraction": 0.5,
            "prefix_caching": [r[0] for r in rows],
            "ideal_hit_rate": 0.4,
            "cache_hit_rate": 0.3,
            "prompt_tokens_per_s": 1.0,
            "batch_time_s": [r[1] for r in rows],
            "ttft_mean_ms": [r[2] for r in rows],
            "n_runs": 3,
        }
    )
    # one row per setting, each with its repeats' range: on 2-3 s (median 2.5), off 6-9 s (median 7.5)
    folded = pl.DataFrame(
        {
            "experiment": ["e", "e"],
            "hardware": "CPU",
            "engine": "vllm",
            "shared_fraction": 0.5,
            "prefix_caching": [True, False],
            "ideal_hit_rate": 0.4,
            "cache_hit_rate": [0.3, 0.0],
            "prompt_tokens_per_s": 1.0,
            "batch_time_s": [2.5, 7.5],
            "batch_time_min_s": [2.0, 6.0],
            "batch_time_max_s": [3.0, 9.0],
            "ttft_mean_ms": [125.0, 450.0],
            "ttft_min_ms": [100.0, 300.0],
            "ttft_max_ms": [150.0, 600.0],
            "n_runs": [3, 3],
        }
    )
    g = prefix_sharing_frames.caching_gain(folded).row(0, named=True)
    assert (g["batch_speedup"], g["batch_speedup_min"], g["batch_speedup_max"], g["n_runs"]) == (3.0, 2.0, 4.5, 3)
    assert (g["ttft_speedup"], g["ttft_speedup_min"], g["ttft_speedup_max"]) == (3.6, 2.0, 6.0)
    assert (
        "batch_speedup_min" not in prefix_sharing_frames.caching_gain(sharing).columns
    )  # no range columns: none made up


def _turn_runs():
    return pl.DataFrame(
        {
            "source": ["measured"],
            "experiment": ["mt"],
            "hardware": ["CPU"],
            "engine": ["vllm"],
            "prefix_caching": [True],
            "mode": ["multi_turn"],
            "status": ["ok"],
            "run_id": ["r"],
        }
    )


def test_multi_turn_reads_the_stored_turn_and_rebuilds_it_only_for_old_runs():
    # two conversations of three turns (100, 150, 200 prompt tokens); both turn-1 requests failed
    reqs = pl.DataFrame(
        {
            "run_id": ["r"] * 6,
            "request_index": list(range(6)),
            "status": ["ok", "failed", "ok"] * 2,
            "conversation": [0, 0, 0, 1, 1, 1],
            "turn": [0, 1, 2] * 2,
            "prompt_tokens": [100, None, 200] * 2,
            "cached_tokens": [0, None, 150] * 2,
            "ttft_ms": [10.0, None, 20.0] * 2,
        },
        schema_overrides={"prompt_tokens": pl.Int64, "cached_tokens": pl.Int64, "ttft_ms": pl.Float64},
    )
    stored = prefix_sharing_frames.multi_turn_by_turn(_turn_runs(), reqs)
    assert stored.select("turn", "requests", "prompt_tokens", "cached_share").rows() == [
        (0, 2, 100.0, 0.0),
        (2, 2, 200.0, 0.75),
    ]
    assert prefix_sharing_frames.multi_turn_requests(_turn_runs(), reqs)["turn"].to_list() == [0, 0, 2, 2]
    # a run stored before requests.parquet had the column: the rank of prompt length stands in for the turn
    # (here it cannot see the failed turn: turn 2 becomes 1)
    for old in (reqs.drop("conversation", "turn"), reqs.with_columns(pl.lit(None, pl.Int64).alias("turn"))):
        assert prefix_sharing_frames.multi_turn_by_turn(_turn_runs(), old)["turn"].to_list() == [0, 1]


# --------------------------------------------------------------------------- prefix sharing, multi-turn, concurrency:
# two measured engines (tests/prefix_frames.py)


def test_each_engine_counts_its_own_hits(sharing):
    on = {
        (r["engine"], r["shared_fraction"]): r for r in sharing.filter(pl.col("prefix_caching")).iter_rows(named=True)
    }
    assert on[("vllm", 0.5)]["cache_hit_rate"] == pytest.approx(7 * 128 * 15 / (16 * 2032))
    assert on[("sglang-jax", 0.5)]["cache_hit_rate"] == pytest.approx(1016 * 15 / (16 * 2032))
    assert on[("vllm", 0.5)]["hit_source"] == "server counter"
    assert on[("sglang-jax", 0.5)]["hit_source"] == "usage cached_tokens"
    assert on[("vllm", 0.5)]["block_ideal_hit_rate"] == pytest.approx(7 * 128 * 15 / (16 * 2032))
    assert on[("sglang-jax", 0.5)]["ideal_hit_rate"] == pytest.approx(0.5 * 15 / 16)


def test_hit_count_not_reported_is_null_not_zero():
    runs = sharing_runs().with_columns(
        pl.when(pl.col("engine") == "sglang-jax")
        .then(None)
        .otherwise(pl.col("cached_prompt_tokens"))
        .alias("cached_prompt_tokens")
    )
    jax = sharing_frames.prefix_sharing(runs).filter(pl.col("engine") == "sglang-jax")
    assert jax["cache_hit_rate"].null_count() == jax.height and jax["hit_source"].null_count() == jax.height


def test_multi_turn_by_turn_per_engine_keeps_an_unreported_cached_share_null():
    runs, reqs = multi_turn_frames()
    off = prefix_sharing_frames.multi_turn_by_turn(runs, reqs).filter(
        (pl.col("engine") == "vllm") & ~pl.col("prefix_caching")
    )
    assert off["cached_share"].null_count() == 3 and off["cached_reported"].to_list() == [0, 0, 0]


def test_concurrency_preemptions_not_available_for_sglang_jax():
    conc = engine_choice_frames.concurrency_study(conc_runs())
    pre = dict(zip(conc["engine"], conc["preemptions"]))
    assert pre == {"vllm": 0, "sglang-jax": None}


def test_a_saving_where_nothing_is_reused_makes_the_threshold_test_inconclusive():
    f = [0.0, 0.2, 0.5, 0.9]
    gain = pl.DataFrame({"engine": ["vllm"] * 4, "shared_fraction": f, "time_saved": [0.31, 0.12, 0.46, 0.65]})
    th = prefix_sharing_frames.sharing_threshold(gain)
    assert (th.verdict, th.gain_at_zero) == ("inconclusive", 0.31)
    assert (
        prefix_sharing_frames.sharing_threshold(
            gain.with_columns(pl.Series("time_saved", [0.09, 0.12, 0.46, 0.65]))
        ).verdict
        != "inconclusive"
    )  # under min_gain (10%) at 0: the test stands


def test_prefix_reuse_counts_requests_and_the_first_wave(study):
    on = {
        (r["engine"], r["shared_fraction"]): r
        for r in study["reuse"].filter(pl.col("prefix_caching")).iter_rows(named=True)
    }
    jax, vllm = on[("sglang-jax", 0.9)], on[("vllm", 0.9)]
    assert (jax["requests"], jax["requests_hit"], jax["first_wave"], jax["first_wave_hit"]) == (16, 12, 4, 0)
    assert (vllm["requests_hit"], vllm["first_wave_hit"], vllm["cached_tokens_per_hit"]) == (15, 3, 1792)
    assert jax["cached_tokens_per_hit"] == jax["shared_prefix_tokens"] == 1829
    runs = sharing_runs().with_columns(batch_size=pl.lit(4))
    unreported = prefix_sharing_frames.prefix_reuse_by_request(
        runs, sharing_requests(runs).with_columns(cached_tokens=pl.lit(None, pl.Int64))
    )
    assert unreported["requests_hit"].null_count() == unreported.height  # not reported: null, never 0


def test_multi_turn_requests_number_turns_like_the_means(study):
    r = study["turn_requests"]
    assert r.height == 2 * 2 * 3 * 2 and sorted(r["turn"].unique().to_list()) == [0, 1, 2]
    means = r.group_by("engine", "prefix_caching", "turn").agg(pl.col("ttft_ms").mean())
    assert (
        means.join(study["by_turn"], on=["engine", "prefix_caching", "turn"])
        .filter(pl.col("ttft_ms") != pl.col("ttft_mean_ms"))
        .is_empty()
    )


# ----------------------------------------------------------------------------- KV capacity (issue 23)


def test_the_concurrency_ceiling_is_the_reported_pool_over_the_tokens_per_request():
    assert capacity_frames.concurrency_ceiling(100_000, 8_192) == 12  # 100,000 / 8,192 = 12.2
    assert (
        capacity_frames.concurrency_ceiling(16_384, 8_192) == 2
        and capacity_frames.concurrency_ceiling(16_383, 8_192) == 1
    )
    assert capacity_frames.concurrency_ceiling(None, 8_192) is None  # no pool reported: unknown, never 0
    with pytest.raises(ValueError):
        capacity_frames.concurrency_ceiling(100, 0)
    runs = pl.DataFrame(
        {"kv_pool_tokens": [100_000, None, 4_000], "context_tokens": [8_192, 1_024, 1_024]},
        schema={"kv_pool_tokens": pl.Int64, "context_tokens": pl.Int64},
    )
    assert capacity_frames.run_ceilings(runs)["concurrency_ceiling"].to_list() == [12, None, 3]


def _load_runs() -> pl.DataFrame:
    from kvlab.schema import RUNS

    base = dict(
        source="measured",
        experiment="cap",
        hardware="CPU",
        model="tiny",
        engine="vllm",
        tp=1,
        dp=1,
        dcp=1,
        mem_util=0.92,
        context_tokens=1024,
        context_label="64K",
        status="ok",
        load_mode="closed",
        requests_failed=0,
        window_s=2.0,
        batch_time_s=3.0,
    )
    rows = [  # concurrency, ok, within SLO, output tokens, median TPOT (ms), stopped
        (1, 4, 4, 256, 20.0, None),
        (2, 6, 6, 384, 25.0, None),
        (4, 8, 6, 512, 50.0, None),
        (8, 8, 2, 480, 60.0, "past saturation: ..."),
    ]
    df = pl.DataFrame(
        [
            base
            | dict(
                run_id=f"r{c}",
                load_concurrency=c,
                batch_size=c,
                requests_ok=ok,
                requests_within_slo=w,
                served_output_tokens=out,
                tpot_p50_ms=tpot,
                load_stop=stop,
            )
            for c, ok, w, out, tpot, stop in rows
        ]
        + [
            base
            | dict(
                run_id="plain",
                load_mode=None,
                batch_size=4,
                requests_ok=4,
                requests_within_slo=4,
                served_output_tokens=256,
                tpot_p50_ms=10.0,
            )
        ]
    )
    return RUNS.conform(df)


def test_a_load_curve_gives_each_point_its_throughput_interactivity_and_slo_attainment():
    curve = capacity_frames.load_curve(_load_runs())
    assert curve["load_level"].to_list() == [1, 2, 4, 8]  # the run without a load is no load point
    assert curve["goodput_requests_per_s"].to_list() == [2.0, 3.0, 3.0, 1.0]  # within SLO / the 2 s window
    assert curve["output_tokens_per_s_per_device"].to_list() == [128.0, 192.0, 256.0, 240.0]
    assert curve["output_tokens_per_s_per_user"].to_list() == pytest.approx([50.0, 40.0, 20.0, 1000 / 60])
    assert curve["slo_attainment"].to_list() == [1.0, 1.0, 0.75, 0.25]
    assert curve["within_slo"].to_list() == [True, True, False, False]
    best = capacity_frames.highest_load_within_slo(curve).row(0, named=True)
    assert (best["max_load_within_slo"], best["goodput_requests_per_s"], best["first_load_past_slo"]) == (2, 3.0, 4)
    assert best["levels"] == [1, 2, 4, 8]
    front = capacity_frames.pareto_front(curve)
    assert front["on_front"].to_list() == [True, True, True, False]  # c=8: fewer tokens/s both per device and user


def test_memory_study_leaves_out_load_points():
    """A capacity ladder's runs (load_mode set) vary by load, not by memory setting: 03's memory study leaves them
    to report 07 and counts only the fixed batches."""
    from kvlab.studies.memory_utilisation import frames as mf

    runs = pl.DataFrame(
        {
            "source": ["measured"] * 4,
            "experiment": ["long", "cap", "cap", "cap"],
            "run_id": list("abcd"),
            "hardware": ["CPU"] * 4,
            "engine": ["vllm"] * 4,
            "mem_util": [0.92] * 4,
            "context_label": ["200K"] * 4,
            "context_tokens": [3200] * 4,
            "status": ["ok"] * 4,
            "batch_time_s": [1.0, 0.4, 0.6, 1.2],
            "attempts": [1] * 4,
            "ttft_mean_ms": [10.0] * 4,
            "e2e_mean_ms": [100.0] * 4,
            "server_preemptions": [0] * 4,
            "load_mode": [None, "closed", "closed", "closed"],
        }
    )
    attempts = pl.DataFrame(
        {"run_id": list("abcd"), "attempt": [1] * 4, "status": ["ok"] * 4, "failure_cause": [None] * 4},
        schema_overrides={"failure_cause": pl.Utf8},
    )
    study = mf.memory_study(runs, attempts)
    assert study.select("experiment", "runs", "batch_time_mean_s").rows() == [("long", 1, 1.0)]


def test_mean_batch_times_keep_the_device_a_title_names():
    """A published table's panel is titled by its device (8× NVIDIA B300), not 'GPU': the mean keeps the accelerator
    and the count beside the kind (issue 39: figure titles read '(GPU)' after the typed device landed)."""
    from kvlab.figures import device_of

    means = measured_frames.mean_batch_times(
        RUNS.filter(pl.col("source") == "published")
    )  # the shipped reference tables
    assert device_of(means) == "8× NVIDIA B300"
