"""Computed sentences and verdicts: what they say for fixed frames (the article's table, fixed measured runs)."""

import polars as pl

from kvlab import analysis, narrative, store

RUNS = store.load_runs()
PUB = RUNS.filter((pl.col("source") == "published") & (pl.col("experiment") == "article_b300"))
CLAIMS = store.load_claims().filter(pl.col("experiment") == "article_b300")


def _measured(times):
    """Measured runs (vllm, sglang-jax) at 64K/200K scaled to 1,024/3,200 tokens with the given batch times."""
    rows = [(e, lab, c, t) for (e, lab, c), t in zip(
        [("vllm", "64K", 1024), ("sglang-jax", "64K", 1024), ("vllm", "200K", 3200), ("sglang-jax", "200K", 3200)], times)]
    return pl.DataFrame({"source": "measured", "experiment": "cpu_long_context", "hardware": "CPU",
                         "engine": [r[0] for r in rows], "context_label": [r[1] for r in rows],
                         "context_tokens": [r[2] for r in rows], "batch_time_s": [r[3] for r in rows],
                         "status": "ok", "batch_size": 4, "output_tokens": 64, "scale_factor": 64.0,
                         "prompt_tokens": [r[2] - 64 for r in rows]})


def test_speed_claims_against_the_table_and_the_measured_direction():
    rel = analysis.relative_speed(PUB)
    rel_m = analysis.relative_speed(_measured([1.0, 2.0, 4.0, 3.0]), "vllm", "sglang-jax")
    got = [(v.outcome, v.evidence, v.number) for v in
           narrative.speed_claim_verdicts(CLAIMS, rel, rel_m, {"sglang": "sglang-jax"})]
    assert got == [
        ("reproduced", "published", "vLLM 1.50× faster at 64K"),
        ("reproduced", "measured", "vLLM 2.00× faster at 64K (1,024 tokens)"),
        ("reproduced", "published", "SGLang 1.31× faster at 200K"),
        ("reproduced", "measured", "sglang-jax (CPU) 1.33× faster at 200K (3,200 tokens)"),
    ]
    slow = analysis.relative_speed(_measured([1.0, 2.0, 1.0, 14.0]), "vllm", "sglang-jax")
    last = narrative.speed_claim_verdicts(CLAIMS, rel, slow, {"sglang": "sglang-jax"})[-1]
    assert (last.outcome, last.number) == ("contradicted", "vLLM 14.00× faster at 200K (3,200 tokens)")


def test_crossover_verdicts_say_found_with_the_range():
    runs = _measured([1.0, 2.0, 4.0, 3.0])
    pub = [analysis.crossover(PUB, method=m) for m in ("linear", "power")]
    meas = [analysis.crossover(runs, "vllm", "sglang-jax", method="linear")]
    got = narrative.crossover_verdicts(pub, 131072.0, meas)
    assert [v.number for v in got] == ["121K–127K tokens (linear, power)", "≈128K tokens (not an independent check)",
                                       "yes, at ≈2,112 tokens (linear)"]  # half way: 1,024 + 2,176 / 2
    never = narrative.crossover_verdicts([], None, [analysis.crossover(_measured([1, 2, 1, 14]), "vllm", "sglang-jax")])
    assert [v.number for v in never] == ["no: vLLM faster at every measured context"]


def test_captions_state_direction_and_size():
    rel = analysis.relative_speed(PUB)
    assert narrative.speed_caption(rel, "published") == \
        "Published: vLLM is 1.50× faster at 64K; SGLang is 1.31× faster at 200K — the winner changes with context."
    growth = analysis.batch_time_growth(_measured([1.0, 2.0, 4.0, 3.0]))
    assert narrative.growth_caption(growth, "measured") == (
        "Measured: vLLM's batch time grows 4.00× from 64K to 200K; sglang-jax (CPU)'s batch time grows 1.50× "
        "from 64K to 200K — the steeper line is the engine whose speed falls most with context.")


# --------------------------------------------------------------------------- throughput decay (02), memory study (03)

def test_decay_sentences_and_tables_state_each_direction():
    dec = analysis.decay_factors(PUB)  # vLLM 100.5 → 295.2 s, SGLang 150.8 → 225.3 s
    assert narrative.decay_sentences(dec, "published").splitlines() == [
        "- published, sglang: from 64K to 200K batch time grows **1.49×** (so requests/s falls 1.49×), "
        "while prompt tokens/s rises 2.09×.",  # (65,536 / 150.8) / (204,800 / 225.3) = 0.478
        "- published, vllm: from 64K to 200K batch time grows **2.94×** (so requests/s falls 2.94×), "
        "while prompt tokens/s rises 1.06×."]  # 0.940
    m = analysis.decay_factors(_measured([1.0, 2.0, 4.0, 3.0]))  # vllm 1 → 4 s, sglang-jax 2 → 3 s at 1,024 → 3,200
    # prompt tokens/s counts the real prompts (context − 64 output tokens), as the throughput table beside it does:
    # sglang-jax (960 / 2) / (3,136 / 3) = 0.459, vLLM (960 / 1) / (3,136 / 4) = 1.22
    assert narrative.decay_table(m).rows == [["sglang-jax (CPU)", "2", "3", "falls 1.50×", "rises 2.18×"],
                                             ["vLLM", "1", "4", "falls 4.00×", "falls 1.22×"]]
    assert narrative.decay_caption(dec, "published", "batches per second") == (
        "Published: from 64K to 200K, batches per second falls 2.94× for vLLM and 1.49× for SGLang — SGLang's "
        "throughput holds up better; the lines cross: vLLM ahead at 64K, SGLang at 200K.")
    assert narrative.decay_caption(m, "measured", "output tokens per second").startswith(
        "Measured: from 64K (1,024 tok) to 200K (3,200 tok), output tokens per second falls 4.00× for vLLM and 1.50× "
        "for sglang-jax (CPU)")


def test_decay_claims_against_the_table_and_the_measured_shape():
    check = analysis.consistency(PUB, CLAIMS)
    got = narrative.decay_claim_verdicts(CLAIMS, check, analysis.decay_factors(PUB),
                                         analysis.decay_factors(_measured([1.0, 2.0, 4.0, 3.0])))
    assert [(v.outcome, v.evidence, v.number) for v in got] == [
        ("contradicted", "published", "table: requests/s falls 2.94× from 64K to 200K (stated 3.29×)"),
        ("contradicted", "published", "table: requests/s falls 1.49× from 64K to 200K (stated 1.25×)"),
        ("reproduced", "published", "SGLang falls 1.49×, vLLM 2.94×"),
        ("reproduced", "measured", "sglang-jax (CPU) falls 1.50×, vLLM 4.00× (1,024 → 3,200 tokens)"),
    ]
    assert "sglang-jax (CPU) standing for SGLang" in got[-1].claim
    flat = analysis.decay_factors(_measured([1.0, 1.0, 2.0, 8.0]))  # sglang-jax falls 8×, vLLM 2×: shape contradicted
    assert narrative.decay_claim_verdicts(CLAIMS, check, analysis.decay_factors(PUB), flat)[-1].outcome == "contradicted"
    assert narrative.claims_caption(check, CLAIMS) == (
        "Published: 2 of the article's 4 stated ratios match its own table — vLLM 1.5× faster at 64K and SGLang 1.31× "
        "faster at 200K, read as T(slower) ÷ T(faster); 2 match under no definition checked (hatched, ✗): vLLM falls "
        "3.29× 64K→200K (table: 2.94×), SGLang falls 1.25× 64K→200K (table: 1.49×).")
    lines = narrative.consistency_sentences(analysis.consistency_verdicts(check), check).splitlines()
    assert lines[2].endswith("— **not** what the table implies under any definition checked: by its batch times "
                             "requests/s falls 2.94× and prompt tokens/s rises 1.06×; the text says 3.29×.")


def _memory_runs(gpu_count=None):
    """vLLM and sglang-jax at 0.92 and 0.95, 200K scaled to 3,200 tokens; sglang-jax at 0.95 needed one retry."""
    rows = [("vllm", 0.92, 1.0, 400.0, 800.0, 0), ("vllm", 0.95, 0.8, 300.0, 780.0, 0),
            ("sglang-jax", 0.92, 14.0, 8000.0, 10000.0, 0), ("sglang-jax", 0.95, 15.0, 8200.0, 15000.0, 1)]
    runs = pl.DataFrame({
        "source": "measured", "experiment": "cpu_long_context", "hardware": "CPU", "run_id": [f"r{i}" for i in range(4)],
        "engine": [r[0] for r in rows], "mem_util": [r[1] for r in rows], "context_label": "200K",
        "context_tokens": 3200, "status": "ok", "batch_time_s": [r[2] for r in rows],
        "ttft_mean_ms": [r[3] for r in rows], "e2e_mean_ms": [r[4] for r in rows], "attempts": [r[5] + 1 for r in rows],
        "server_preemptions": [0, 0, None, None], "gpu_count": pl.Series([gpu_count] * 4, dtype=pl.Int64),
        "scale_factor": 64.0})
    attempts = pl.DataFrame({"run_id": ["r0", "r1", "r2", "r3", "r3"], "status": ["ok", "ok", "ok", "failed", "ok"],
                             "failure_cause": [None, None, None, "runtime_oom", None]})
    return runs, attempts


def test_memory_conclusion_states_retries_run_time_spread_and_latency():
    runs, attempts = _memory_runs()
    stats = analysis.memory_study(runs, attempts)
    cmp = analysis.memory_comparison(stats)
    assert narrative.memory_conclusion(cmp, stats).splitlines() == [
        "### Conclusion (measured)",
        "- **Retries**: 0 at 0.92 (2 runs) and 1 at 0.95 (2 runs: sglang-jax at 200K (3,200 tok)); no run failed.",
        "- **Run time** at 0.92 against 0.95: vllm at 200K (3,200 tok) 25% longer (1 s vs 0.8 s); "
        "sglang-jax at 200K (3,200 tok) 6.7% shorter (14 s vs 15 s).",
        "- **Spread** of batch time over repeats (coefficient of variation, 0.92 → 0.95): not measured — one successful "
        "run per engine, setting and context, so run-time stability cannot be compared.",
        "- **Latency** at 0.92 against 0.95: vllm at 200K (3,200 tok) mean request latency 2.6% higher (800 ms vs "
        "780 ms), mean TTFT 33% higher (400 ms vs 300 ms); sglang-jax at 200K (3,200 tok) mean request latency 33% "
        "lower (10,000 ms vs 15,000 ms), mean TTFT 2.4% lower (8,000 ms vs 8,200 ms).",
    ]
    assert narrative.memory_caption(stats, cmp) == (
        "Measured: 0 retries at 0.92, 1 retry at 0.95, no failed run; at 200K (3,200 tok), 0.92 against 0.95: batch "
        "time 25% longer for vLLM and 6.7% shorter for sglang-jax (CPU), mean request latency 2.6% higher for vLLM "
        "and 33% lower for sglang-jax (CPU).")


def test_memory_claims_on_a_cpu_host_and_on_gpus():
    claims = CLAIMS.filter(pl.col("kind") == "memory")
    runs, attempts = _memory_runs()
    stats = analysis.memory_study(runs, attempts)
    cmp = analysis.memory_comparison(stats)
    assert narrative.kv_budget_simulated(runs) and not narrative.kv_budget_simulated(_memory_runs(8)[0])
    cpu = narrative.memory_claim_verdicts(claims, stats, cmp, None, simulated=True)
    assert [(v.outcome, v.number) for v in cpu] == [
        ("cannot be tested here", "1 retry in 2 runs at 0.95 (vLLM 0, sglang-jax (CPU) 1)"),
        ("cannot be tested here", "retries: 0 at 0.92, 1 at 0.95; spread: one run per setting"),
        ("contradicted", "mean request latency at 0.92 against 0.95, 200K (3,200 tok): vLLM +2.6%, sglang-jax (CPU) −33%"),
    ]
    assert "simulated KV-cache budget" in cpu[0].claim and "direction only" in cpu[2].claim
    gpu = narrative.memory_claim_verdicts(claims, stats, cmp, None, simulated=False)
    assert [v.outcome for v in gpu] == ["contradicted", "reproduced", "contradicted"]  # vLLM had no retry at 0.95
    nothing = narrative.memory_claim_verdicts(claims, stats.clear(), cmp.clear(), None)
    assert [(v.outcome, v.number) for v in nothing] == [("cannot be tested here", "no measured run with a memory setting")] * 2


def test_headroom_text_says_what_the_fits_column_rests_on():
    from kvlab.perfmodel.figures import headroom_table

    head = headroom_table("B300", "Kimi-K3", [0.92, 0.95], [1, 8], [65536, 204800])
    assert narrative.headroom_caption(head) == (
        "Modelled: 0.95 fits 9–13% more sequences than 0.92 at every context and DCP size shown (DCP 1, 200K: 12 vs "
        "11); DCP 8 fits 6.7–8.1× as many as DCP 1.")
    text = narrative.headroom_sentences(head)
    assert "- modelled, DCP 1 (vLLM's path), 64K context: sequences that fit — 35 at 0.92, 39 at 0.95 (11% more at 0.95)." in text
    assert ("every row fits at 0.92; at 0.95 it marks 4 of 4 rows as not fitting — not for lack of KV room, but because "
            "0.95 leaves 13.4 GiB per GPU outside the target, less than the 17.4 GiB (6.5% of the GPU)") in text
    assert "restates the article's OOM claim rather than predicting it" in text
    v = narrative.memory_claim_verdicts(CLAIMS.filter(pl.col("claim_id") == "memory_095"), pl.DataFrame(
        schema={"mem_util": pl.Float64, "retries": pl.Int64, "runs": pl.Int64, "engine": pl.String}), pl.DataFrame(), head)
    assert (v[-1].outcome, v[-1].evidence, v[-1].number) == (
        "cannot be tested here", "modelled",
        "13.4 GiB/GPU left outside the target at 0.95 < 17.4 GiB assumed need — an assumption taken from this claim")
    none_fit = headroom_table("H100", "Kimi-K3", [0.92, 0.95], [1], [65536])
    assert narrative.headroom_caption(none_fit).startswith("Modelled: not one sequence fits at 0.92")
