"""benchmarks/telemetry_overhead.py (which starts a real vLLM server, so it is not run here): it imports, and its
verdict on fixed runs is the stated rule: the difference of the medians against the range of the runs without."""

from benchmarks import telemetry_overhead as bench


def test_the_benchmark_judges_the_difference_against_the_spread_of_the_runs_without():
    runs = [{"arm": "without telemetry", "batch_time_s": t, "ttft_mean_ms": f, "failed": 0, "samples_ok": 0}
            for t, f in ((2.0, 100.0), (2.2, 110.0), (2.1, 130.0))]
    runs += [{"arm": "with telemetry", "batch_time_s": t, "ttft_mean_ms": f, "failed": 0, "samples_ok": 4}
             for t, f in ((2.15, 170.0), (2.25, 180.0), (2.05, 175.0))]
    rows = bench.summarise({"runs": runs, "repeats": 3, "interval_s": 0.5, "host": "test", "engine_version": "x"})
    batch, ttft = rows[0], rows[1]
    # batch time: medians 2.15 - 2.1 = 0.05 s, inside the 0.2 s range of the runs without
    assert (round(batch.value, 6), batch.met) == (0.05, True)
    # TTFT: medians 175 - 110 = 65 ms, outside the 30 ms range of the runs without
    assert (ttft.value, ttft.met) == (65.0, False)
    assert "4–4 samples answered per batch" in rows[2].note
