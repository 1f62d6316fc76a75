"""Computed sentences and verdicts: what they say for fixed frames (the article's table, fixed measured runs)."""

import polars as pl
import pytest
from prefix_frames import conc_runs, multi_turn_frames, repeated, sharing_runs

from kvlab import analysis, guide, narrative, store
from kvlab.claims.sharing import gain_points, radix_paged_pairs, sharing_points, turn_points

RUNS = store.load_runs()
PUB = RUNS.filter((pl.col("source") == "published") & (pl.col("experiment") == "article_b300"))
CLAIMS = store.load_claims().filter(pl.col("experiment") == "article_b300")


def _measured(times):
    """Measured runs (vllm, sglang-jax) at 64K/200K scaled to 1,024/3,200 tokens with the given batch times."""
    rows = [
        (e, lab, c, t)
        for (e, lab, c), t in zip(
            [("vllm", "64K", 1024), ("sglang-jax", "64K", 1024), ("vllm", "200K", 3200), ("sglang-jax", "200K", 3200)],
            times,
        )
    ]
    return pl.DataFrame(
        {
            "source": "measured",
            "experiment": "cpu_long_context",
            "hardware": "CPU",
            "engine": [r[0] for r in rows],
            "context_label": [r[1] for r in rows],
            "context_tokens": [r[2] for r in rows],
            "batch_time_s": [r[3] for r in rows],
            "status": "ok",
            "batch_size": 4,
            "output_tokens": 64,
            "scale_factor": 64.0,
            "prompt_tokens": [r[2] - 64 for r in rows],
        }
    )


def test_speed_claims_against_the_table_and_the_measured_direction():
    rel = analysis.relative_speed(PUB)
    rel_m = analysis.relative_speed(_measured([1.0, 2.0, 4.0, 3.0]), "vllm", "sglang-jax")
    got = [
        (v.claim_id, v.outcome, v.evidence, round(v.value, 2), v.n)
        for v in narrative.speed_claim_verdicts(CLAIMS, rel, rel_m, {"sglang": "sglang-jax"})
    ]
    # CPU runs of two engines never decide the GPU claim: each measured row quotes the shortest context's ratio
    assert got == [
        ("speedup_64K", "consistent", "published", 1.5, 2),  # n: the two published times at 64K
        # value: the speed-up the claim names at its context, sglang-jax 2 s ÷ vLLM 1 s at 64K ...
        ("speedup_64K", "cannot be tested here", "measured", 2.0, 1),
        ("speedup_200K", "consistent", "published", 1.31, 2),
        # ... and vLLM 4 s ÷ sglang-jax 3 s at 200K (the 64K baseline, vLLM 2× faster, is in the number)
        ("speedup_200K", "cannot be tested here", "measured", 1.33, 1),
    ]
    slow = analysis.relative_speed(_measured([1.0, 2.0, 1.0, 14.0]), "vllm", "sglang-jax")
    last = narrative.speed_claim_verdicts(CLAIMS, rel, slow, {"sglang": "sglang-jax"})[-1]
    assert (last.outcome, last.value, last.unit, last.kind) == ("cannot be tested here", 1 / 14, "×", "relative_speed")
    assert last.number.startswith("vLLM already 2.0× faster at 64K (1,024 tokens)")


def test_crossover_verdicts_say_found_with_the_range():
    runs = _measured([1.0, 2.0, 4.0, 3.0])
    pub = [analysis.crossover(PUB, method=m) for m in ("linear", "power")]
    meas = [analysis.crossover(runs, "vllm", "sglang-jax", method="linear")]
    got = narrative.crossover_verdicts(pub, 131072.0, meas)
    assert [v.number for v in got] == [
        "121K–127K tokens (linear, power)",
        "≈128K tokens (not an independent check)",
        "yes, at ≈2,112 tokens (linear)",
    ]  # half way: 1,024 + 2,176 / 2
    never = narrative.crossover_verdicts([], None, [analysis.crossover(_measured([1, 2, 1, 14]), "vllm", "sglang-jax")])
    assert [v.number for v in never] == ["no: vLLM faster at every measured context"]


def test_captions_state_direction_and_size():
    rel = analysis.relative_speed(PUB)
    assert (
        narrative.speed_caption(rel.to_dicts(), "published")
        == "Published: vLLM is 1.50× faster at 64K; SGLang is 1.31× faster at 200K — the winner changes with context."
    )
    growth = analysis.batch_time_growth(_measured([1.0, 2.0, 4.0, 3.0]))
    assert narrative.growth_caption(growth.to_dicts(), "measured") == (
        "Measured: vLLM's batch time grows 4.0× from 64K to 200K; sglang-jax (CPU)'s batch time grows 1.5× "
        "from 64K to 200K — the steeper line is the engine whose speed falls most with context."
    )  # one run per context: two significant figures, as the sentences and verdicts give them (issue 39)


# --------------------------------------------------------------------------- throughput decay (02), memory study (03)


def test_decay_sentences_and_tables_state_each_direction():
    dec = analysis.decay_factors(PUB)  # vLLM 100.5 → 295.2 s, SGLang 150.8 → 225.3 s
    assert narrative.decay_sentences(dec.to_dicts(), "published").splitlines() == [
        "- published, SGLang: from 64K to 200K batch time grows **1.49×** (so requests/s falls 1.49×), "
        "while prompt tokens/s rises 2.09×.",  # (65,536 / 150.8) / (204,800 / 225.3) = 0.478
        "- published, vLLM: from 64K to 200K batch time grows **2.94×** (so requests/s falls 2.94×), "
        "while prompt tokens/s rises 1.06×.",
    ]  # 0.940
    m = analysis.decay_factors(_measured([1.0, 2.0, 4.0, 3.0]))  # vllm 1 → 4 s, sglang-jax 2 → 3 s at 1,024 → 3,200
    # prompt tokens/s counts the real prompts (context − 64 output tokens), as the throughput table beside it does:
    # sglang-jax (960 / 2) / (3,136 / 3) = 0.459, vLLM (960 / 1) / (3,136 / 4) = 1.22
    # one run per context: two significant figures (published rows above keep the article's precision)
    assert narrative.decay_table(m.to_dicts()).rows == [
        ["sglang-jax (CPU)", "2", "3", "falls 1.5×", "rises 2.2×"],
        ["vLLM", "1", "4", "falls 4.0×", "falls 1.2×"],
    ]
    assert narrative.decay_caption(dec.to_dicts(), "published", "batches per second") == (
        "Published: from 64K to 200K, batches per second falls 2.94× for vLLM and 1.49× for SGLang — SGLang's "
        "throughput holds up better; in absolute throughput (left) the lines cross: vLLM ahead at 64K, SGLang at "
        "200K; relative to its own value at 64K (right) each engine's line starts at 1, so those lines never cross."
    )
    assert narrative.decay_caption(m.to_dicts(), "measured", "output tokens per second").startswith(
        "Measured: from 64K (1,024 tok) to 200K (3,200 tok), output tokens per second falls 4.0× for vLLM and 1.5× "
        "for sglang-jax (CPU)"
    )


def test_decay_claims_against_the_table_and_the_measured_shape():
    check = analysis.consistency(PUB, CLAIMS)
    got = narrative.decay_claim_verdicts(
        CLAIMS, check, analysis.decay_factors(PUB), analysis.decay_factors(_measured([1.0, 2.0, 4.0, 3.0]))
    )
    assert [(v.outcome, v.evidence, round(v.value, 2), v.n) for v in got] == [
        ("inconsistent", "published", 2.94, 2),  # n: the engine's published times at 64K and 200K
        ("inconsistent", "published", 1.49, 2),
        ("consistent", "published", round(2.937 / 1.494, 2), 4),  # both engines at both contexts
        ("cannot be tested here", "measured", 2.0, 1),  # vLLM 2× faster at 64K already: implementations, on a CPU
    ]
    assert got[0].number == "table: requests/s falls 2.94× from 64K to 200K (stated 3.29×)"
    assert "standing for" not in got[-1].claim and got[-1].kind == "throughput_decay"
    flat = analysis.decay_factors(_measured([1.0, 1.0, 2.0, 8.0]))  # sglang-jax falls 8×, vLLM 2×: still CPU runs
    assert (
        narrative.decay_claim_verdicts(CLAIMS, check, analysis.decay_factors(PUB), flat)[-1].outcome
        == "cannot be tested here"
    )
    assert narrative.claims_caption(
        check.to_dicts(), analysis.consistency_verdicts(check).to_dicts(), CLAIMS.to_dicts()
    ) == (
        "Published: 2 of the article's 4 stated ratios match its own table — vLLM 1.5× faster at 64K and SGLang 1.31× "
        "faster at 200K, read as T(slower) ÷ T(faster); 2 match under no definition checked (hatched, ✗): vLLM falls "
        "3.29× 64K→200K (table: 2.94×), SGLang falls 1.25× 64K→200K (table: 1.49×)."
    )
    lines = narrative.consistency_sentences(
        analysis.consistency_verdicts(check).to_dicts(), check.to_dicts()
    ).splitlines()
    assert lines[2].endswith(
        "— **not** what the table implies under any definition checked: by its batch times "
        "requests/s falls 2.94× and prompt tokens/s rises 1.06×; the text says 3.29×."
    )


def _memory_runs(gpu_count=None, repeats=1):
    """vLLM and sglang-jax at 0.92 and 0.95, 200K scaled to 3,200 tokens; sglang-jax at 0.95 needed one retry
    (``repeats`` runs of each, the same values)."""
    rows = [
        ("vllm", 0.92, 1.0, 400.0, 800.0, 0),
        ("vllm", 0.95, 0.8, 300.0, 780.0, 0),
        ("sglang-jax", 0.92, 14.0, 8000.0, 10000.0, 0),
        ("sglang-jax", 0.95, 15.0, 8200.0, 15000.0, 1),
    ]
    if repeats > 1:
        runs = pl.concat(
            [
                _memory_runs(gpu_count)[0].with_columns(  # run time spreads 1% a run at 0.92, 10% at 0.95
                    pl.col("run_id") + f"-{k}",
                    pl.col("batch_time_s") * (1 + k * pl.when(pl.col("mem_util") == 0.92).then(0.01).otherwise(0.1)),
                )
                for k in range(repeats)
            ]
        )
        attempts = pl.concat(
            [_memory_runs(gpu_count)[1].with_columns(pl.col("run_id") + f"-{k}") for k in range(repeats)]
        )
        return runs, attempts
    runs = pl.DataFrame(
        {
            "source": "measured",
            "experiment": "cpu_long_context",
            "hardware": "CPU",
            "run_id": [f"r{i}" for i in range(4)],
            "engine": [r[0] for r in rows],
            "mem_util": [r[1] for r in rows],
            "context_label": "200K",
            "context_tokens": 3200,
            "status": "ok",
            "batch_time_s": [r[2] for r in rows],
            "ttft_mean_ms": [r[3] for r in rows],
            "e2e_mean_ms": [r[4] for r in rows],
            "attempts": [r[5] + 1 for r in rows],
            "server_preemptions": [0, 0, None, None],
            "gpu_count": pl.Series([gpu_count] * 4, dtype=pl.Int64),
            "device_kind": "gpu" if gpu_count else "cpu",  # CPU runs configure an explicit KV budget, as recorded
            "kv_budget_bytes": pl.Series([None if gpu_count else 8388608] * 4, dtype=pl.Int64),
            "scale_factor": 64.0,
        }
    )
    attempts = pl.DataFrame(
        {
            "run_id": ["r0", "r1", "r2", "r3", "r3"],
            "status": ["ok", "ok", "ok", "failed", "ok"],
            "failure_cause": [None, None, None, "runtime_oom", None],
        }
    )
    return runs, attempts


def test_memory_conclusion_states_retries_run_time_spread_and_latency():
    runs, attempts = _memory_runs()
    stats = analysis.memory_study(runs, attempts)
    cmp = analysis.memory_comparison(stats)
    assert narrative.memory_conclusion(cmp.to_dicts(), stats.to_dicts()).splitlines() == [
        "### Conclusion (measured)",
        "- **Retries**: 0 at 0.92 (2 runs) and 1 at 0.95 (2 runs: sglang-jax (CPU) at 200K (3,200 tok)); no run failed.",
        # one run a side: two significant figures, trailing zero kept (units.sig2)
        "- **Run time** at 0.92 against 0.95: vLLM at 200K (3,200 tok) 25% longer (1.0 s vs 0.80 s); "
        "sglang-jax (CPU) at 200K (3,200 tok) 6.7% shorter (14 s vs 15 s).",
        "- **Spread** of batch time over repeats (coefficient of variation, 0.92 → 0.95): not measured — one successful "
        "run per engine, setting and context, so run-time stability cannot be compared.",
        "- **Latency** at 0.92 against 0.95: vLLM at 200K (3,200 tok) mean request latency 2.6% higher (800 ms vs "
        "780 ms), mean TTFT 33% higher (400 ms vs 300 ms); sglang-jax (CPU) at 200K (3,200 tok) mean request latency 33% "
        "lower (10,000 ms vs 15,000 ms), mean TTFT 2.4% lower (8,000 ms vs 8,200 ms).",
    ]
    three = analysis.memory_study(*_memory_runs(repeats=3))  # three runs a side: three significant figures
    assert (
        "- **Run time** at 0.92 against 0.95: vLLM at 200K (3,200 tok) 15% longer (1.01 s vs 0.88 s); sglang-jax "
        "(CPU) at 200K (3,200 tok) 14% shorter (14.1 s vs 16.5 s)."
    ) in narrative.memory_conclusion(analysis.memory_comparison(three).to_dicts(), three.to_dicts()).splitlines()
    assert narrative.memory_caption(stats.to_dicts(), cmp.to_dicts()) == (
        "Measured: 0 retries at 0.92, 1 retry at 0.95, no failed run; at 200K (3,200 tok), 0.92 against 0.95: batch "
        "time 25% longer for vLLM and 6.7% shorter for sglang-jax (CPU), mean request latency 2.6% higher for vLLM "
        "and 33% lower for sglang-jax (CPU)."
    )


def test_memory_claims_on_a_cpu_host_and_on_gpus():
    claims = CLAIMS.filter(pl.col("kind") == "memory")
    runs, attempts = _memory_runs()
    stats = analysis.memory_study(runs, attempts)
    cmp = analysis.memory_comparison(stats)
    assert narrative.kv_budget_simulated(runs) and not narrative.kv_budget_simulated(_memory_runs(8)[0])
    cpu = narrative.memory_claim_verdicts(claims, stats, cmp, None, simulated=True)
    assert [(v.claim_id, v.outcome, v.value, v.n) for v in cpu] == [
        ("memory_095", "cannot be tested here", 1.0, 1),
        ("memory_092_retries", "cannot be tested here", 0.0, 1),
        ("memory_092_stability", "cannot be tested here", None, 1),  # one run per setting: no spread
        # latency: vLLM +2.6% (TTFT +33%), sglang-jax −33% (TTFT −2.4%), one run each: signs mixed, n=1
        ("memory_092_latency", "inconclusive", pytest.approx(800 / 780), 1),
    ]
    assert cpu[3].spread == (pytest.approx(800 / 780), pytest.approx(800 / 780))  # vLLM's latency ratio, one run
    assert cpu[3].reason.startswith("signs mixed")
    assert "simulated KV-cache budget" in cpu[0].claim
    gpu = narrative.memory_claim_verdicts(claims, stats, cmp, None, simulated=False)
    assert [(v.outcome, v.n) for v in gpu] == [("inconclusive", 1)] * 4  # one run per engine and setting
    three, att3 = _memory_runs(8, repeats=3)
    s3 = analysis.memory_study(three, att3)
    gpu3 = narrative.memory_claim_verdicts(claims, s3, analysis.memory_comparison(s3), None, simulated=False)
    assert [(v.outcome, v.n) for v in gpu3[:2]] == [("contradicted", 3), ("reproduced", 3)]  # vLLM: no retry at 0.95
    nothing = narrative.memory_claim_verdicts(claims, stats.clear(), cmp.clear(), None)
    assert [(v.outcome, v.number) for v in nothing] == [
        ("cannot be tested here", "no measured run with a memory setting")
    ] * 4


def test_memory_setting_is_read_from_what_each_run_recorded():
    from kvlab.claims.memory import memory_setting

    cpu, _ = _memory_runs()
    reserve = cpu.with_columns(pl.lit(None, pl.Int64).alias("kv_budget_bytes"))  # host_memory_reserve: no KV budget
    assert [memory_setting(f) for f in (cpu, reserve, _memory_runs(8)[0], pl.concat([cpu, reserve]))] == [
        "kv_budget",
        "host_reserve",
        "gpu",
        "mixed",
    ]
    assert narrative.kv_budget_simulated(cpu) and not narrative.kv_budget_simulated(reserve)
    # a CPU run without a KV budget is never described as one
    scope = narrative.memory_scope(reserve.to_dicts(), memory_setting(reserve))
    assert "no explicit KV-cache budget" in scope and "maps each memory setting" not in scope
    stats = analysis.memory_study(reserve, _memory_runs()[1])
    v = narrative.memory_claim_verdicts(
        CLAIMS.filter(pl.col("kind") == "memory"),
        stats,
        analysis.memory_comparison(stats),
        None,
        memory_setting(reserve),
    )
    assert [x.outcome for x in v[:3]] == ["cannot be tested here"] * 3
    assert all(x.scope == "CPU, host-memory reserve" for x in v) and not any("KV budget" in x.claim for x in v)
    # runs that record neither a budget nor a device (hand-made ones) are never taken for GPU runs
    bare = reserve.with_columns(pl.lit(None, pl.String).alias("device_kind"))
    assert memory_setting(bare) is None and "not known" in narrative.memory_scope(bare.to_dicts(), memory_setting(bare))
    v = narrative.memory_claim_verdicts(
        CLAIMS.filter(pl.col("kind") == "memory"), stats, analysis.memory_comparison(stats), None, memory_setting(bare)
    )
    assert [x.outcome for x in v[:3]] == ["cannot be tested here"] * 3


def test_headroom_text_says_what_the_fits_column_rests_on():
    from kvlab.perfmodel.figures import headroom_table

    head = headroom_table("B300", "Kimi-K3", [0.92, 0.95], [1, 8], [65536, 204800])
    assert narrative.headroom_caption(head.to_dicts()) == (
        "Modelled: 0.95 fits 9–14% more sequences than 0.92 at every context and DCP size shown (DCP 1, 200K: 12 vs "
        "11); DCP 8 fits 4.6–4.8× as many as DCP 1."
    )  # SGLang's pools: 162/35 at 64K and 0.92 to 58/12 at 200K and 0.95
    text = narrative.headroom_sentences(head.to_dicts())
    assert (
        "- modelled, DCP 1 (vLLM's path), 64K context: sequences that fit — 35 at 0.92, 39 at 0.95 (11% more at 0.95)."
        in text
    )
    assert (
        "every row fits at 0.92; at 0.95 it marks 4 of 4 rows as not fitting — not for lack of KV room, but because "
        "0.95 leaves 13.4 GiB per GPU outside the target, less than the 17.4 GiB (6.5% of the GPU)"
    ) in text
    assert "restates the article's OOM claim rather than predicting it" in text
    v = narrative.memory_claim_verdicts(
        CLAIMS.filter(pl.col("claim_id") == "memory_095"),
        pl.DataFrame(schema={"mem_util": pl.Float64, "retries": pl.Int64, "runs": pl.Int64, "engine": pl.String}),
        pl.DataFrame(),
        head,
    )
    assert (v[-1].outcome, v[-1].evidence, v[-1].number) == (
        "cannot be tested here",
        "modelled",
        "13.4 GiB/GPU left outside the target at 0.95 < 17.4 GiB assumed need — an assumption taken from this claim",
    )
    none_fit = headroom_table("H100", "Kimi-K3", [0.92, 0.95], [1], [65536])
    assert narrative.headroom_caption(none_fit.to_dicts()).startswith("Modelled: not one sequence fits at 0.92")


# --------------------------------------------------------------------------- reports 05 and 06: two measured engines
# (tests/prefix_frames.py: vLLM's paged blocks against sglang-jax's radix tree)


def test_hit_count_not_reported_is_not_available_not_zero():
    runs = sharing_runs().with_columns(
        pl.when(pl.col("engine") == "sglang-jax")
        .then(None)
        .otherwise(pl.col("cached_prompt_tokens"))
        .alias("cached_prompt_tokens")
    )
    text = narrative.hit_rate_sentence(analysis.prefix_sharing(runs).to_dicts())
    assert (
        "- sglang-jax (CPU), prefix cache on: cache-hit rate not available, not available, not available, not "
        "available at 0%, 20%, 50%, 90% shared."
    ) in text


def test_hit_rate_sentence_names_engine_label_and_count(sharing):
    assert narrative.hit_rate_sentence(sharing.to_dicts()).splitlines() == [
        "- sglang-jax (CPU), prefix cache off: cache-hit rate 0%, 0%, 0%, 0% at 0%, 20%, 50%, 90% shared "
        "(counted from its usage cached_tokens).",
        "- sglang-jax (CPU), prefix cache on: cache-hit rate 0%, 19%, 47%, 84% at 0%, 20%, 50%, 90% shared "
        "(counted from its usage cached_tokens).",
        "- vLLM, prefix cache off: cache-hit rate 0%, 0%, 0%, 0% at 0%, 20%, 50%, 90% shared "
        "(counted from its server counter).",
        "- vLLM, prefix cache on: cache-hit rate 0%, 18%, 41%, 83% at 0%, 20%, 50%, 90% shared "
        "(counted from its server counter).",
    ]


def test_radix_vs_paged(sharing):
    lines = narrative.radix_vs_paged_sentence(radix_paged_pairs(sharing)).splitlines()
    assert lines[2] == (
        "- 50% shared (1,016 prefix tokens): sglang-jax (CPU) served **47%** of prompt tokens from its radix "
        "cache (token-exact ideal 47%), vLLM **41%** from its paged cache (whole 128-token-block ideal 41%); mean TTFT "
        "250 ms vs 134 ms, median batch time 2.50 s vs 1.34 s."
    )
    # 1016 − 896 = 120 tokens × 15 requests of 32,512: 5.5 points
    assert lines[-1] == (
        "- Largest hit-rate gap: at 50% shared, sglang-jax (CPU) served **5.5 percentage "
        "points** more of the prompt from its cache than vLLM."
    )
    only_vllm = sharing.filter(pl.col("engine") == "vllm")
    assert narrative.radix_vs_paged_sentence(radix_paged_pairs(only_vllm)).startswith(
        "*Radix vs paged: no shared fraction"
    )


def test_stand_in_note_only_with_sglang_jax_runs(sharing):
    note = narrative.stand_in_note(analysis.engines_in(sharing))
    assert note.startswith("**sglang-jax (CPU) is not PyTorch SGLang.** It is SGLang's JAX runtime")
    assert "never as 0" in note
    assert (
        narrative.stand_in_note(analysis.engines_in(sharing.filter(pl.col("engine") == "vllm"), pl.DataFrame())) is None
    )


def test_the_prefix_claim_quotes_the_engines_own_cache_off_flag():
    """The flag in the prose is the one kvlab gives the engine (its adapter's flags), never a second spelling."""
    rows = [
        {
            "engine": engine,
            "hardware": "CPU",
            "shared_fraction": 0.5,
            "prefix_caching": on,
            "cache_hit_rate": hit,
            "ideal_hit_rate": 0.44,
        }
        for engine in ("vllm", "sglang-jax")
        for on, hit in ((True, 0.4), (False, 0.0))
    ]
    assert "(`--no-enable-prefix-caching`, what the document describes) 0%" in narrative.prefix_claim_verdict(rows)
    assert "(`--disable-radix-cache`, " in narrative.prefix_claim_verdict(rows, "sglang-jax")
    # and the block size it names by default is the adapter's
    assert "caches whole 128-token blocks" in narrative.stand_in_note(["sglang-jax"])


def test_threshold_and_conclusions_per_engine(sharing):
    th = analysis.sharing_thresholds(analysis.caching_gain(sharing))
    assert set(th) == {"vllm", "sglang-jax"}
    runs, reqs = multi_turn_frames()
    text = narrative.prefix_conclusions(
        sharing.to_dicts(), th, analysis.multi_turn_by_turn(runs, reqs).to_dicts(), 0.3, 0.1, radix_paged_pairs(sharing)
    )
    assert (
        "- sglang-jax (CPU): threshold test at 30% → **smooth**; the cache first saves ≥10% of batch time at "
        "20% shared." in text
    )
    assert "- vLLM: threshold test at 30% → **smooth**" in text
    assert "at 90% shared, vLLM with its prefix cache on served **83%** of prompt tokens" in text
    # per engine, never mixed: (2048 + 192) / 2304 for sglang-jax; 2176 / 2304 for vLLM's whole blocks
    assert "- Multi-turn, sglang-jax (CPU): with the cache on, the last turn found 97% of its prompt cached." in text
    assert "- Multi-turn, vLLM: with the cache on, the last turn found 94% of its prompt cached." in text


def test_multi_turn_sentence_per_engine_says_not_reported():
    runs, reqs = multi_turn_frames()
    bt = analysis.multi_turn_by_turn(runs, reqs)
    text = narrative.multi_turn_sentence(bt.to_dicts())
    assert "turn 0: cached tokens not reported of 2,112, TTFT 40 ms" in text
    assert "0 of 2,112 tokens cached" in text  # sglang-jax with its cache off did report 0
    # runs behind each configuration not given: the ratio keeps two decimals
    assert (
        "- vLLM, last turn (turn 2): the cache serves **94%** of the prompt and TTFT is **4.00×** shorter than "
        "without it (30 ms vs 120 ms)."
    ) in text
    # one run per engine and cache setting (as report 05 counts them): two significant figures
    from kvlab.claims.sharing import with_turn_runs

    one = with_turn_runs(bt, runs)
    assert (
        one.select("engine", "prefix_caching", "turn", "n_runs")
        .sort("engine", "prefix_caching", "turn")["n_runs"]
        .to_list()
        == [1] * 12
    )
    assert (
        "- vLLM, last turn (turn 2): the cache serves **94%** of the prompt and TTFT is **4.0×** shorter than "
        "without it (30 ms vs 120 ms)."
    ) in narrative.multi_turn_sentence(one.to_dicts())
    three = pl.concat([runs.with_columns(pl.col("run_id") + f"-{k}") for k in range(3)])
    reqs3 = pl.concat([reqs.with_columns(pl.col("run_id") + f"-{k}") for k in range(3)])
    bt3 = with_turn_runs(analysis.multi_turn_by_turn(three, reqs3), three)
    assert set(bt3["n_runs"]) == {3} and "TTFT is **4.00×** shorter" in narrative.multi_turn_sentence(bt3.to_dicts())
    # the table's ratio column, from frames with an uneven ratio: 2 s.f. for one run a side, as measured with three
    odd = one.with_columns(
        pl.when(pl.col("prefix_caching")).then(pl.col("ttft_mean_ms") * 0.9).otherwise(pl.col("ttft_mean_ms"))
    )
    assert turn_points(odd)["ratio"].to_list()[:3] == [4.4] * 3  # 40 / 9 = 4.444…
    assert turn_points(odd.with_columns(n_runs=pl.lit(3)))["ratio"][0] == pytest.approx(40 / 9)
    assert "- sglang-jax (CPU), last turn (turn 2): the cache serves **97%** of the prompt" in text
    assert text.splitlines()[-1] == (
        "- Radix vs paged, turn by turn (cache on, mean cached tokens per request, "
        "sglang-jax (CPU) vs vLLM): turn 1: 2,144 vs 2,048, turn 2: 2,240 vs 2,176; the "
        "same at turn 0."
    )


def test_a_saving_where_nothing_is_reused_is_called_inconclusive():
    f = [0.0, 0.2, 0.5, 0.9]
    gain = pl.DataFrame({"engine": ["vllm"] * 4, "shared_fraction": f, "time_saved": [0.31, 0.12, 0.46, 0.65]})
    th = analysis.sharing_threshold(gain)
    assert narrative.threshold_sentence(th, gain.to_dicts()).endswith(
        "- **The threshold test is inconclusive on these runs**: at 0% shared nothing is reused, yet the runs "
        "with the cache on took 31% less batch time than with it off, a difference the prefix cache cannot explain "
        "and as large as the 10% saving the test looks for. More repeats per point (the full sweep) are needed to test it."
    )
    sharing = analysis.prefix_sharing(sharing_runs())
    text = narrative.prefix_conclusions(sharing.to_dicts(), {"vllm": th}, [], 0.3, 0.1, radix_paged_pairs(sharing))
    assert (
        "- vLLM: threshold test at 30% → **inconclusive** (at 0% shared, with nothing to reuse, cache on "
        "vs off already differ by +31% of batch time)."
    ) in text


def test_reuse_sentences_say_which_requests_found_the_prefix(study):
    assert narrative.reuse_sentences(study["reuse"].to_dicts()).splitlines() == [
        "- vLLM, cache on — requests that found the prefix in the cache: 20% shared: 15 of 16 (3 of the 4 sent first), "
        "50% shared: 15 of 16 (3 of the 4 sent first), 90% shared: 15 of 16 (3 of the 4 sent first).",
        "- sglang-jax (CPU), cache on — requests that found the prefix in the cache: 20% shared: 12 of 16 (0 of the 4 "
        "sent first), 50% shared: 12 of 16 (0 of the 4 sent first), 90% shared: 12 of 16 (0 of the 4 sent first).",
        "- At 90% shared, 0 of the 4 requests sglang-jax (CPU) received together at the start found the prefix in its "
        "radix cache; vLLM reused its blocks for 3 of 4. In these runs the requests that reached sglang-jax (CPU) while "
        "the prefix was still being computed computed it again; every later request reused all 1,829 prefix tokens.",
    ]


def test_prefix_verdicts_test_each_claim_with_one_number(study):
    s = study
    found = narrative.prefix_verdicts(s["claims"], s["sharing"], s["gain"], s["thresholds"], s["by_turn"], s["reuse"])
    assert [(v.outcome, v.evidence, v.number) for v in found] == [
        # vLLM's blocks: 14 × 128 of 1,829 prefix tokens for 15 of 16 requests = 26,880 / 32,512; one run per point,
        # so no hit share decides (n=1: inconclusive, rule 2 of kvlab.claims.grading)
        ("inconclusive", "measured", "83% of prompt tokens served from vLLM's cache at 90% shared; 0% with it off"),
        ("inconclusive", "measured", "84% of prompt tokens served from its radix cache at 90% shared; 0% with it off"),
        # the 4 of the first wave are sent together, before the prefix is cached: only the 12 after could reuse it
        (
            "inconclusive",
            "measured",
            "12 of the 12 requests sent after each run's first wave reused the 1,829-token "
            "prefix at 90% shared; none of the 4 sent together first (before it could be "
            "cached)",
        ),
        # batch time 2 × (1 − 0.8 × hit rate) against 4 × (…): vLLM 2× faster at 0% already, on a CPU: untestable
        (
            "cannot be tested here",
            "measured",
            "vLLM already 2.0× faster at 0% shared; vLLM 1.9× sooner at 50%; vLLM "
            "1.9× sooner at 90%. What the cache saves within each engine is the fair "
            "comparison (the threshold row below)",
        ),
        # the report's own questions, one run a point: noise can make or hide a jump, so inconclusive, n shown
        (
            "inconclusive",
            "measured",
            "sglang-jax (CPU): no jump, a steady rise (R² 1.00); vLLM: no jump, a steady rise (R² 1.00)",
        ),
        # one run per engine and cache setting: the per-turn ratios to two significant figures
        ("inconclusive", "measured", "turn 2: vLLM 94%, TTFT 4.0× shorter; sglang-jax (CPU) 97%, TTFT 4.0× shorter"),
    ]
    assert [v.family for v in found] == ["document"] * 4 + ["own"] * 2
    assert found[4].reason.startswith("n=1 repeat on the smaller side, fewer than the 3 a measured finding needs")
    assert found[2].value == 1.0 and found[2].unit == "fraction of the requests that could reuse the prefix"
    assert (found[5].claim_id, found[5].n) == ("multi_turn_reuse", 1)
    assert (found[3].claim_id, found[3].value, found[3].n, found[3].kind) == (
        "shared_prefix_threshold",
        2.0,
        1,
        "engine_choice",
    )
    assert (
        found[2].claim
        == (
            "“SGLang's RadixAttention computes only each request's own suffix” — sglang-jax (CPU), "
            "requests arriving 4 at a time"
        )
        and found[2].claim_id == "sglang_radix_suffix"
    )
    # without per-request counts the suffix claim falls back on the hit rate against the token-exact ideal
    no_reuse = narrative.prefix_verdicts(s["claims"], s["sharing"], s["gain"], s["thresholds"], s["by_turn"], None)
    assert (no_reuse[2].outcome, no_reuse[2].n, no_reuse[2].number) == (
        "inconclusive",
        1,
        "84% of prompt tokens from the cache at 90% shared against 84% if every request after the first reused it",
    )
    # a vLLM that never hits agrees with the claim; no runs at all test nothing
    zero = s["sharing"].with_columns(
        pl.when(pl.col("engine") == "vllm").then(0.0).otherwise(pl.col("cache_hit_rate")).alias("cache_hit_rate")
    )
    assert narrative.prefix_verdicts(s["claims"], zero, s["gain"], {}, pl.DataFrame())[0].outcome == "inconclusive"
    # three runs per point: the hit shares decide (vLLM's cache on serves 83% against 0% off in every run)
    runs3 = pl.concat([sharing_runs().with_columns(pl.col("run_id") + f"-{k}") for k in range(3)])
    three = narrative.prefix_verdicts(s["claims"], analysis.prefix_sharing(runs3), s["gain"], {}, pl.DataFrame())
    assert [(v.claim_id, v.outcome, v.n) for v in three[:2]] == [
        ("vllm_no_prefix_sharing", "contradicted", 3),
        ("sglang_radix_sharing", "reproduced", 3),
    ]
    assert three[0].value == pytest.approx(26880 / 32512)
    empty = narrative.prefix_verdicts(s["claims"], s["sharing"].clear(), s["gain"].clear(), {}, pl.DataFrame())
    assert [v.outcome for v in empty] == ["cannot be tested here"] * 4


def test_prefix_captions_say_what_each_figure_shows(study):
    s = study
    assert narrative.prefix_sharing_caption(s["sharing"].to_dicts()) == (
        "At 90% shared, with its prefix cache on, vLLM 83% (its whole-block ideal 83%) and sglang-jax (CPU) 84% "
        "(token-exact ideal 84%) of prompt tokens came from the cache; with the caches off every hit rate is 0%. vLLM "
        "finishes the batch 1.9× sooner than sglang-jax (CPU) there and 2.0× sooner with nothing shared, so sharing "
        "does not change which engine is faster."
    )
    assert narrative.caching_gain_caption(s["gain"].to_dicts(), s["thresholds"]) == (
        "Above 1× the cache helps: vLLM: batch time unchanged (1.0×) with the cache at 0% shared, 3.0× shorter at "
        "90%, rising with no jump; sglang-jax (CPU): batch time unchanged (1.0×) with the cache at 0% shared, 3.1× "
        "shorter at 90%, rising with no jump."
    )
    assert narrative.multi_turn_caption(s["by_turn"].to_dicts()) == (
        "Last turn (turn 2), prefix cache on: vLLM 94% of its prompt cached, mean TTFT 4.0× shorter than with the "
        "cache off; sglang-jax (CPU) 97% of its prompt cached, mean TTFT 4.0× shorter than with the cache off; with "
        "the caches off no token came from the cache."
    )
    ideal = analysis.ideal_sharing(1008, 8, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9], 128)
    # at 50%: 504 prefix tokens, 3 whole blocks = 384; × 7/8 of 1,008: 43.75% against 33.3%
    assert narrative.ideal_reuse_caption(ideal.to_dicts(), 1008, 8, 128, 0.3) == (
        "Modelled for 8 requests of 1,008 tokens: a token-exact cache could serve at most 79% of prompt tokens at 90% "
        "shared, on a straight line (shared fraction × 7/8) with no step at the article's 30%; a cache of whole "
        "128-token blocks falls short of it by up to 10.4 percentage points (33% against 44% at 50% shared)."
    )


def test_prefix_tables_are_readers_tables(study):
    t = narrative.sharing_table(sharing_points(study["sharing"]).to_dicts())
    assert t.caption == "one run per point (no repeats); with the prefix cache off every cache-hit rate is 0%"
    assert "cache-hit rate, cache off (%)" not in t.headers  # a column of zeros said once instead
    assert t.rows[3][:5] == ["vLLM", "90", "1,829", "82.7", "84.4"]
    g = narrative.gain_table(gain_points(study["gain"]).to_dicts())
    assert g.headers[-1] == "batch time saved by the cache (%)"
    # one run a side: each ratio and the time saved to two significant figures (2.95× and 66.1% measured at 90%)
    assert g.caption == "one run a side per point (no repeats): ratios to two significant figures"
    assert [r[3:] for r in g.rows[:4]] == [
        ["1.0", "1.0", "0"],
        ["1.2", "1.2", "14"],
        ["1.5", "1.5", "33"],
        ["3.0", "3.0", "66"],
    ]
    assert "td.col3 {\n  text-align: left" not in g.html()  # numbers formatted in advance still line up right
    turns = narrative.turns_table(turn_points(study["by_turn"]).to_dicts())
    # vLLM with its cache off reported no cached count: the column stays (–) and the reporting counts are shown
    assert "cached per request, cache off (tokens)" in turns.headers and turns.rows[0][6] == "–"
    assert turns.headers[-2:] == [
        "requests reporting a cached count, cache on",
        "requests reporting a cached count, cache off",
    ]
    claims = narrative.prefix_claims_table(study["claims"].to_dicts())
    assert claims.headers == ["what the article says", "how this report tests it"] and len(claims.rows) == 4
    assert narrative.prefix_citation_note(
        study["claims"].filter(pl.col("claim_id").is_in(list(narrative.PREFIX_CLAIMS))).to_dicts()
    ).endswith("— section on vLLM PagedAttention, section on SGLang RadixAttention, decision tree.")


def test_prefix_tables_give_spread_as_least_to_most_as_the_figure_draws_it():
    """With repeats, both of 05's tables give the spread the figure's whiskers draw (least–most), never a std."""
    runs3 = pl.concat(
        [
            sharing_runs().with_columns(
                pl.col("run_id") + f"-{k}",
                pl.col("batch_time_s") * (1 + 0.05 * k),
                pl.col("ttft_mean_ms") * (1 + 0.1 * k),
            )
            for k in range(3)
        ]
    )
    sharing = analysis.prefix_sharing(runs3)
    t = narrative.sharing_table(sharing_points(sharing).to_dicts())
    assert t.caption.startswith(
        "median over the runs of each point; spread: least to most over them, as the figure's whiskers"
    )
    assert not any("std" in h for h in t.headers)
    assert t.headers[-4:] == [
        "batch time, cache on: least–most over the runs (s)",
        "batch time, cache off: least–most over the runs (s)",
        "runs, on",
        "runs, off",
    ]
    # vLLM at 20% shared: on 1.72, 1.806, 1.892 s; off 2.0, 2.1, 2.2 s
    assert t.rows[1][-4:] == ["1.72–1.89", "2–2.2", "3", "3"]
    g = narrative.gain_table(gain_points(analysis.caching_gain(sharing)).to_dicts())
    assert g.headers[3:7] == [
        "mean TTFT, off ÷ on (×)",
        "mean TTFT, off ÷ on: least–most over the runs (×)",
        "median batch time, off ÷ on (×)",
        "median batch time, off ÷ on: least–most over the runs (×)",
    ]
    # vLLM at 90%: batch off ÷ on median 2.1 ÷ 0.7109 = 2.95, least 2.0 ÷ 0.7449 = 2.685, most 2.2 ÷ 0.6772 = 3.25
    assert g.rows[3][3:] == ["2.95", "2.46–3.54", "2.95", "2.68–3.25", "66.1"]


def test_prefix_factor_says_by_how_much_and_on_what(sharing):
    f = guide.prefix_factor(guide.UserWorkload(shared_fraction=0.4), sharing)
    assert narrative.factor_evidence(f) == (
        "prefix: vLLM, median batch time 1.9× shorter than sglang-jax (CPU)'s at 50% shared, each engine's "
        "prefix cache on (shared-prefix runs)"
    )
    # CPU runs of two implementations: the lead is said, and said not to decide
    assert narrative.factor_finding(f).endswith(
        "With nothing to share (0% shared) vLLM is 2.0× faster, so sharing the prefix narrows vLLM's lead. "
        "Shorter batch time: vLLM, 1.9× shorter than sglang-jax (CPU) (shared-prefix runs); it is a CPU baseline of "
        "two different engine implementations, which cannot decide which engine is faster on a GPU host"
    )
    assert "Favours" not in narrative.factor_line(f)
    g = guide.prefix_factor(guide.UserWorkload(shared_fraction=0.4), repeated(sharing, "batch_time_s"))
    assert narrative.factor_finding(g).endswith(
        "Shorter batch time: **vLLM**, 1.87× shorter than sglang-jax (CPU) (shared-prefix runs)"
    )  # three repeats: three significant figures
    assert narrative.factor_line(g).endswith(" Favours **vLLM**.")


def test_sglang_jax_win_counts_for_the_sglang_family_and_says_so(fit):
    sh = repeated(analysis.prefix_sharing(sharing_runs(vllm_time=4.0, jax_time=2.0)), "batch_time_s")  # 2.14× at 0.5
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(w, fit, sh, repeated(analysis.concurrency_study(conc_runs()), "requests_per_s"))
    assert narrative.evidence_basis(ev) == (
        "measured — prefix: sglang-jax (CPU), median batch time 2.14× shorter than vLLM's at 50% shared, each "
        "engine's prefix cache on (shared-prefix runs); concurrency: sglang-jax (CPU), 1.25× the completed "
        "requests/s of vLLM at 128 requests in flight (classification runs); the SGLang side of these measurements is "
        "sglang-jax (CPU): evidence about the SGLang family on CPU, not PyTorch SGLang on a GPU"
    )
    assert narrative.disagreement(w, w.tree(), ev, sh.to_dicts()) is None  # the tree says sglang too
    assert "Favours **SGLang** (measured on sglang-jax (CPU))." in narrative.evidence_sentences(ev)
    assert narrative.evidence_gap_sentence(ev) is None


def test_split_factors_say_the_trees_first_question_decides(fit, sharing):
    conc = repeated(analysis.concurrency_study(conc_runs()), "requests_per_s")  # sglang-jax 1.25× the requests/s
    sharing = repeated(sharing, "batch_time_s")  # vLLM wins the prefix factor
    shared = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(shared, fit, sharing, conc)
    assert narrative.evidence_basis(ev).endswith(
        "so the prefix factor, the tree's first question for this workload, decides; the SGLang side of these "
        "measurements is sglang-jax (CPU): evidence about the SGLang family on CPU, not PyTorch SGLang on a GPU"
    )
    why = narrative.disagreement(shared, shared.tree(), ev, sharing.to_dicts())
    assert why.startswith(
        "The tree says **SGLang** (RadixAttention's effect at its greatest); the "
        "measured data say **vLLM** (prefix: vLLM, median batch time 1.87× shorter"
    )
    assert (
        "measured, vLLM's automatic prefix caching reused 41% of prompt tokens at 50% shared "
        "(sglang-jax (CPU)'s radix cache: 47%)"
    ) in why
    distinct = guide.UserWorkload(shared_fraction=0.0, concurrency=128)
    ev = guide.from_evidence(distinct, fit, sharing, conc)
    assert "so the concurrency factor" in narrative.evidence_basis(ev)
    why = narrative.disagreement(distinct, distinct.tree(), ev, sharing.to_dicts())
    assert (
        "The tree's high-concurrency branch assumes vLLM's C++ routing stability wins with ≥ 100 requests in "
        "flight; measured, concurrency: sglang-jax (CPU), 1.25× the completed requests/s of vLLM"
    ) in why


def test_cpu_baselines_are_said_to_decide_nothing_and_the_guide_follows_the_tree(fit, sharing):
    """CPU runs of vLLM against sglang-jax: no 'from the data: vLLM', no 'they disagree'; the tree's answer, and why
    the measured factors cannot decide."""
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    conc = analysis.concurrency_study(conc_runs())
    ev = guide.from_evidence(w, fit, sharing, conc)
    assert narrative.evidence_sentences(ev).splitlines()[-1] == (
        "- from the data: no factor decides, so the guide follows the tree: **SGLang** (the measured prefix and "
        "concurrency comparisons are CPU baselines of two different engine implementations, which cannot decide "
        "which engine is faster on a GPU host; the model does not separate the engines here)."
    )
    assert narrative.disagreement(w, w.tree(), ev, sharing.to_dicts()) is None
    assert narrative.recommendation_sentence(w, w.tree(), ev, sharing.to_dicts()) == (
        "**The tree says SGLang; the data here can neither confirm nor contradict it**: the measured prefix and "
        "concurrency comparisons are CPU baselines of two different engine implementations, which cannot decide "
        "which engine is faster on a GPU host; the model does not separate the engines here. The tree's "
        "shared-prefix branch assumes vLLM shares no prefixes; measured, vLLM's automatic prefix caching reused 41% "
        "of prompt tokens at 50% shared (sglang-jax (CPU)'s radix cache: 47%), so a shared prefix alone "
        "does not separate the engines."
    )
    assert narrative.evidence_gap_sentence(ev) == (
        "Two engines were measured (prefix, concurrency), but on a CPU: runs of two different engine implementations "
        "there are a baseline that cannot decide which engine is faster on a GPU host. Run the GPU experiments "
        "(`data/experiments/gpu_*.yaml`), with 3 repeats, for a measured comparison."
    )


def test_differences_the_grading_rules_do_not_pass_are_said_to_decide_nothing(fit):
    sh = analysis.prefix_sharing(sharing_runs(vllm_time=2.0, jax_time=2.0 * 1.03))  # 3% apart everywhere
    conc = analysis.concurrency_study(conc_runs(40.0, 41.0))
    ev = guide.from_evidence(
        guide.UserWorkload(shared_fraction=0.4, concurrency=128),
        fit,
        repeated(sh, "batch_time_s", spread=0.05),
        repeated(conc, "requests_per_s", spread=0.05),
    )
    assert narrative.evidence_basis(ev).endswith(
        "the model does not separate the engines here; so the guide follows the tree"
    )
    # at 0.5 sglang-jax's token-exact hits make it 1.339 / 1.2875 = 1.04× faster: within the repeats' spread
    assert narrative.factor_finding(ev.factors[1]).endswith(
        "Shorter batch time: sglang-jax (CPU), 1.04× shorter than vLLM (shared-prefix runs); it is no decided "
        "difference (sglang-jax (CPU) against vLLM: the min–max ranges of the 3+ repeats of each side overlap: the "
        "difference is within the spread)"
    )
    assert narrative.evidence_gap_sentence(ev) == (
        "Two engines were measured (prefix, concurrency), but no measured difference passes the grading rules (at "
        "least 3 repeats a side, least–most ranges apart): the measurements do not separate them."
    )
    one = guide.from_evidence(guide.UserWorkload(), fit, sh.filter(pl.col("engine") == "vllm"), pl.DataFrame())
    assert narrative.evidence_gap_sentence(one).startswith("No measurement here compares two engines")


def test_context_factor_says_what_the_model_times_when_dcp_divides_nothing(fit):
    f = guide.context_factor(guide.UserWorkload(8192, model="Llama-3.1-8B"), fit)
    # the uncalibrated roofline at its priors' centre: a Kimi-K3 fit is never applied to Llama-3.1-8B
    assert (
        "at 8,192 tokens on B300 the model gives SGLang TP8+DCP8 5.63 s per batch against vLLM TP8's 3.98 s "
        "(1.42× slower, the cost of DCP alone)"
    ) in narrative.factor_finding(f)  # what the chart beside it shows, not 'the same time'


def test_with_nothing_measured_the_guide_follows_the_tree_and_says_so(fit, sharing):
    empty_sh, empty_conc = sharing.head(0), analysis.concurrency_study(conc_runs()).head(0)
    shared = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(shared, fit, empty_sh, empty_conc)
    assert narrative.disagreement(shared, shared.tree(), ev, empty_sh.to_dicts()) is None
    assert narrative.recommendation_sentence(shared, shared.tree(), ev, empty_sh.to_dicts()) == (
        "**The tree says SGLang; the data here can neither confirm nor contradict it**: no measurement compares two "
        "engines; the model does not separate the engines here."
    )
    distinct = guide.UserWorkload(shared_fraction=0.0, concurrency=16)
    ev = guide.from_evidence(distinct, fit, empty_sh, empty_conc)
    assert narrative.evidence_sentences(ev).endswith(
        "- from the data: no factor decides, so the guide follows the tree: **vLLM** (no measurement compares two "
        "engines; the model does not separate the engines here)."
    )


def test_engine_choice_captions(sharing):
    assert narrative.prefix_caption(sharing.to_dicts()) == (
        "Measured on CPU, prefix cache on, at 90% shared: prompt tokens served from the cache — vLLM 83% "
        "(whole-block ideal 83%), sglang-jax (CPU) 84% (token-exact ideal 84%); vLLM's median batch time is 2.0× "
        "shorter at 0% and 1.9× shorter at 90% shared."
    )
    assert narrative.concurrency_caption(analysis.concurrency_study(conc_runs()).to_dicts()) == (
        "Measured on CPU at 128 requests in flight: sglang-jax (CPU) completes 50 requests/s (mean TTFT 100 ms) and "
        "vLLM completes 40 requests/s (mean TTFT 100 ms) — sglang-jax (CPU) 1.2× the throughput; 512 of 512 "
        "requests sent completed (none failed)."
    )
    tree = guide.UserWorkload(shared_fraction=0.4).tree()
    assert narrative.tree_caption(tree) == (
        "Highlighted, this workload's path: Shared system prompt / document repeated across requests? yes → Fixed "
        "context ≥ 30% of the prompt? yes (40%) ⇒ SGLang (RadixAttention's effect at its greatest)."
    )


def test_engine_choice_verdicts(fit, sharing):
    from kvlab import store
    from kvlab.paths import DATA_DIR

    claims = store.load_claims(DATA_DIR).filter(pl.col("experiment") == "article_kv_design")
    conc = analysis.concurrency_study(conc_runs())
    w = guide.UserWorkload(8192, 0.4, 128, "Llama-3.1-8B")
    ev = guide.from_evidence(w, fit, sharing, conc)
    got = narrative.engine_choice_verdicts(claims, sharing, conc, w, w.tree(), ev)
    assert [(v.claim_id, v.outcome, v.evidence, v.n, v.number) for v in got[:2]] == [  # one run each: n=1
        (
            "vllm_no_prefix_sharing",
            "inconclusive",
            "measured",
            1,
            "83% of prompt tokens from vLLM's cache at 90% shared",
        ),
        (
            "sglang_radix_sharing",
            "inconclusive",
            "measured",
            1,
            "84% of prompt tokens from its cache at 90% shared (token-exact ideal 84%)",
        ),
    ]
    # the cross-engine claims, on CPU runs of two engines: cannot be tested here, the baseline ratio as the value
    assert [(v.claim_id, v.outcome, v.evidence, v.value, v.n) for v in got[2:]] == [
        ("shared_prefix_threshold", "cannot be tested here", "measured", 2.0, 1),  # vLLM 2 s, sglang-jax 4 s at 0
        ("high_concurrency", "cannot be tested here", "measured", None, 1),  # one load, 128: none below the 100
        ("engine_choice_recommendation", "cannot be tested here", "measured", 2.0, 1),
    ]
    none = narrative.engine_choice_verdicts(
        claims, sharing.head(0), conc.head(0), w, w.tree(), guide.from_evidence(w, fit, sharing.head(0), conc.head(0))
    )
    assert [v.outcome for v in none] == ["cannot be tested here"] * 5
    assert (
        none[-1].number
        == "nothing measured or modelled here separates the engines; the guide follows the tree (SGLang)"
    )


def test_caching_gain_caption_words_a_threshold_from_the_rows(study):
    import dataclasses

    ths = {e: dataclasses.replace(t, verdict="threshold") for e, t in study["thresholds"].items()}
    text = narrative.caching_gain_caption(study["gain"].to_dicts(), ths)
    assert "vLLM: batch time unchanged (1.0×) with the cache at 0% shared" in text  # one run a side: 2 s.f.
    assert text.count("the saving jumping from") == 2


def test_consistency_table_states_each_decay_factor_with_its_direction():
    """The article's table against its stated ratios: a decay factor reads 'rises 1.06×', never 0.940."""
    claims = CLAIMS.filter(pl.col("experiment") == "article_b300")
    check = analysis.consistency(PUB, claims)
    rows = narrative.consistency_table(check.to_dicts(), claims.to_dicts()).rows
    assert [r[3] for r in rows] == [
        "1.50",
        "1.33",
        "1.31",
        "1.24",
        "falls 2.94×",
        "rises 1.06×",
        "falls 1.49×",
        "rises 2.09×",
    ]


def test_bound_sentence_gives_measured_shares_to_two_significant_figures():
    """Report 04's 'against the limit': each measured share rests on one run (two significant figures); the
    published ones keep their decimal."""
    frac = pl.DataFrame(
        {
            "source": ["published", "published", "measured", "measured", "measured"],
            "hardware": ["B300", "B300", "CPU", "CPU", "CPU"],
            "batch_fraction_of_bound": [0.0123, 0.0456, 0.01234, 0.2567, 0.0567],
            "bandwidth_fraction_of_peak": [0.088, 0.091, None, None, None],
        }
    )
    assert narrative.bound_sentence(frac.to_dicts()).splitlines() == [
        "- published (B300): the article's runs took 22–81× the model's bound, i.e. reached 1.2%–4.6% of it; decode "
        "read memory at 8.8%–9.1% of peak bandwidth.",
        "- measured (CPU, 3 runs): 1.2%–26% of a bound computed from the catalog's nominal CPU figures — compare these "
        "runs with each other, not with a GPU.",
    ]


def test_a_saving_that_falls_across_the_threshold_is_not_said_to_jump():
    """05's threshold sentence: where the slope above makes it a threshold but the saving falls across 30%, the
    sentence says so instead of 'jumps'."""
    import polars as pl

    from kvlab import analysis
    from kvlab.narrative.prefix_sharing import threshold_sentence

    gain = pl.DataFrame(
        {"engine": ["vllm"] * 4, "shared_fraction": [0.0, 0.2, 0.5, 0.9], "time_saved": [0.02, 0.11, -0.15, 0.40]}
    )
    said = threshold_sentence(analysis.sharing_threshold(gain), gain.to_dicts())
    assert "jumps" not in said
    assert (
        "**The saving rises more steeply from 30% up than below it**, but it does not jump at the threshold: it "
        "falls between 20% and 50% shared (+11% → −15%)."
    ) in said


def test_the_caching_gain_caption_says_falling_where_the_saving_falls_across_the_threshold():
    import polars as pl

    from kvlab import analysis
    from kvlab.narrative.prefix_sharing import caching_gain_caption

    gain = pl.DataFrame(
        {
            "engine": ["vllm"] * 4,
            "shared_fraction": [0.0, 0.2, 0.5, 0.9],
            "time_saved": [0.02, 0.11, -0.15, 0.40],
            "batch_speedup": [1.02, 1.12, 0.87, 1.67],
        }
    )
    said = caching_gain_caption(gain.to_dicts(), analysis.sharing_thresholds(gain))
    assert "the saving falling from +11% at 20% to −15% at 50%" in said and "jumping" not in said


def test_a_cache_on_run_several_times_slower_where_nothing_is_reused_reads_as_a_factor():
    # at 0% shared the cache-on run took 5.74× the cache-off one (time saved -4.74): a factor, not "474% more"
    gain = pl.DataFrame(
        {"engine": ["sglang"] * 4, "shared_fraction": [0.0, 0.2, 0.5, 0.9], "time_saved": [-4.74, 0.1, 0.2, 0.3]}
    )
    th = analysis.sharing_threshold(gain)
    assert th.verdict == "inconclusive"
    assert (
        "yet the runs with the cache on took 5.7× as much batch time as with it off, a difference the prefix "
        "cache cannot explain"
    ) in narrative.threshold_sentence(th, gain.to_dicts())
    text = narrative.prefix_conclusions(
        analysis.prefix_sharing(sharing_runs()).to_dicts(),
        {"sglang": th},
        [],
        0.3,
        0.1,
        radix_paged_pairs(analysis.prefix_sharing(sharing_runs())),
    )
    assert "cache on vs off already differ by a factor of 5.7 in batch time)." in text
    assert "474%" not in text


def test_a_saving_that_falls_with_the_shared_fraction_is_never_called_a_rise():
    """Issue 39: report 05 called SGLang's saving 'a steady rise' and 'rising with no jump' where it went from +6.6%
    at 0% to −205% at 90% shared (fitted slopes −0.49 and −5.21): a smooth curve is a rise or a fall by its ends."""
    from kvlab.claims.sharing import saving_trend
    from kvlab.narrative.prefix_sharing import caching_gain_caption, threshold_sentence

    f = [0.0, 0.2, 0.5, 0.9]
    falls = pl.DataFrame(
        {
            "engine": ["sglang"] * 4,
            "shared_fraction": f,
            "time_saved": [0.066, -0.032, 0.039, -2.05],
            "batch_speedup": [1.07, 0.97, 1.04, 0.33],
        }
    )
    th = analysis.sharing_threshold(falls)
    assert th.verdict == "smooth" and saving_trend(falls) == "fall"
    assert saving_trend(falls.with_columns(pl.Series("time_saved", [0.0, 0.1, 0.2, 0.4]))) == "rise"
    assert "falling with no jump" in caching_gain_caption(falls.to_dicts(), {"sglang": th})
    said = threshold_sentence(th, falls.to_dicts())
    assert "the saving falls as the shared fraction grows" in said and "grows steadily" not in said
