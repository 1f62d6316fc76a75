"""benchmarks/telemetry_overhead.py (which starts a real vLLM server, so it is not run here): it imports, and its
verdict on fixed runs is the stated rule: the difference of the medians against the range of the runs without."""

from benchmarks import telemetry_overhead as bench


def test_the_benchmark_judges_the_difference_against_the_spread_of_the_runs_without():
    runs = [
        {"arm": "without telemetry", "batch_time_s": t, "ttft_mean_ms": f, "failed": 0, "samples_ok": 0}
        for t, f in ((2.0, 100.0), (2.2, 110.0), (2.1, 130.0))
    ]
    runs += [
        {"arm": "with telemetry", "batch_time_s": t, "ttft_mean_ms": f, "failed": 0, "samples_ok": 4}
        for t, f in ((2.15, 170.0), (2.25, 180.0), (2.05, 175.0))
    ]
    rows = bench.summarise({"runs": runs, "repeats": 3, "interval_s": 0.5, "host": "test", "engine_version": "x"})
    batch, ttft = rows[0], rows[1]
    # batch time: medians 2.15 - 2.1 = 0.05 s, inside the 0.2 s range of the runs without
    assert (round(batch.value, 6), batch.met) == (0.05, True)
    # TTFT: medians 175 - 110 = 65 ms, outside the 30 ms range of the runs without
    assert (ttft.value, ttft.met) == (65.0, False)
    assert "4–4 samples answered per batch" in rows[2].note
    assert batch.figure.startswith("vLLM, batch time") and rows[2].figure == "vLLM, conditions"  # engine_label's name


def test_both_engines_run_without_prefix_cache_or_development_endpoints():
    """No run can hit another's cache, so no cache reset, and so no development endpoint (issue 25): SGLang as the
    shipped CPU experiments run it (its CPU flags and compatibility fix), with the same KV and length as vLLM."""
    specs = {e: bench.engine_spec(e, "tag", {1}) for e in ("vllm", "sglang")}
    for e, spec in specs.items():
        assert (spec.prefix_caching, spec.dev_mode, spec.served_model_name) == (False, False, "tag"), e
        assert (spec.kv_cache_bytes, spec.max_model_len, spec.launch[:3]) == (64 * 2**20, 2048, ["taskset", "-c", "1"])
    assert specs["sglang"].env["SGLANG_USE_CPU_ENGINE"] == "1" and "--device" in specs["sglang"].extra_args
