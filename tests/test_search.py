"""load.search (kvlab.search): the Wilson rule, the bracket-and-bisect sequence, the mechanism at the first failing
load, and a search through the runner on a fixed-time fixture server (exact probe sequence)."""

from __future__ import annotations

import json

import polars as pl
import pytest
import yaml

from kvlab import runner, search, store
from kvlab.campaign import Campaign
from kvlab.experiment import ExperimentSpec, SpecError
from tests.support.sse_fixture import FixtureConfig, SSEServer


def test_the_wilson_lower_bound_by_hand():
    assert search.wilson_lower(0, 0) == 0.0 and search.wilson_lower(0, 10) == 0.0
    # every request within: n / (n + z^2)
    assert search.wilson_lower(10, 10) == pytest.approx(10 / (10 + search.Z95**2))
    assert search.wilson_lower(8, 10) == pytest.approx(0.4901624, abs=1e-6)  # 80% of 10: [0.490, 0.943]
    # 95% needs at least 73 requests all within: 72 of 72 is below it
    assert search.wilson_lower(72, 72) < 0.95 <= search.wilson_lower(73, 73)


def _row(within, ok, failed=0, status="ok", stop=None, **extra):
    return {
        "run_id": "r",
        "status": status,
        "requests_within_slo": within,
        "requests_ok": ok,
        "requests_failed": failed,
    }


def test_failed_requests_count_against_and_a_saturating_or_failed_probe_fails():
    assert search.judge(4, _row(80, 80), 0.95).passed
    judged = search.judge(4, _row(76, 76, failed=4), 0.95)  # 76 of 80, the 4 failed ones count against
    assert (judged.within, judged.n, judged.passed) == (76, 80, False)
    assert judged.why == "76 of 80 within the SLO: Wilson 95% lower bound 0.878 < 0.95"
    saturated = search.judge(8, _row(80, 80) | {"load_stop": "past saturation: queue"}, 0.95)
    assert not saturated.passed and saturated.why == "saturated: past saturation: queue"
    failed = search.judge(8, _row(0, 0, status="failed") | {"failure_cause": "crash"}, 0.95)
    assert not failed.passed and failed.why == "the run failed (crash)"


def _levels(spec: search.SearchSpec, passes, whole=True) -> tuple[list[float], search.Bracket]:
    seen: list[float] = []

    def measure(level):
        seen.append(level)
        return _row(100, 100) if passes(level) else _row(50, 100)

    return seen, search.search(spec, measure, whole)


def test_the_bracket_doubles_then_bisects_to_the_precision():
    spec = search.SearchSpec()
    seen, b = _levels(spec, lambda c: c <= 5)
    assert seen == [1, 2, 4, 8, 6, 5] and (b.passing, b.failing) == (5, 6)
    assert b.stop == "bracket [5, 6] within the precision"
    seen, b = _levels(spec, lambda c: c <= 40)  # the tenth probe closes the bracket: 4 <= 0.1 x 40
    assert seen == [1, 2, 4, 8, 16, 32, 64, 48, 40, 44] and (b.passing, b.failing) == (40, 44)
    assert b.stop == "bracket [40, 44] within the precision"
    seen, b = _levels(search.SearchSpec(max_probes=4), lambda c: c <= 40)
    assert seen == [1, 2, 4, 8] and b.stop == "max_probes (4) reached" and b.failing is None
    seen, b = _levels(search.SearchSpec(limit=12), lambda c: True)
    assert seen == [1, 2, 4, 8, 12] and b.stop == "passes at the limit (12)" and b.passing == 12
    seen, b = _levels(search.SearchSpec(start=2), lambda c: False)
    assert seen == [2] and b.passing is None and b.stop == "no level passes: the first probe failed"


def test_an_open_loop_search_bisects_rates_to_the_precision():
    seen, b = _levels(search.SearchSpec(start=0.5, limit=16, precision=0.25), lambda r: r <= 3.0, whole=False)
    assert seen == [0.5, 1.0, 2.0, 4.0, 3.0, 3.5] and (b.passing, b.failing) == (3.0, 3.5)


def test_the_mechanism_names_what_the_runs_telemetry_shows_or_says_not_determined():
    tele = pl.DataFrame({"requests_waiting": [0.0, 2.0, 3.0], "kv_cache_usage": [0.5, 0.97, 0.99]})
    fail = {"load_concurrency": 4, "kv_pool_tokens": 12288, "context_tokens": 3200, "tpot_p90_ms": 30.0}
    assert search.mechanism(fail | {"server_preemptions": 2}, None, tele) == "preemptions: the server preempted 2 times"
    assert search.mechanism(fail, None, tele) == (
        "queueing past the KV pool's concurrency ceiling: up to 3 requests waited (KV pool 99% used)"
    )
    no_usage = tele.drop("kv_cache_usage")
    assert search.mechanism(fail, None, no_usage) == (
        "queueing past the KV pool's concurrency ceiling: up to 3 requests waited (ceiling 3 = 12,288 / 3,200 tokens)"
    )
    within = fail | {"load_concurrency": 2}  # below the ceiling of 3, the pool at most 60%
    half = pl.DataFrame({"requests_waiting": [0.0, 1.0], "kv_cache_usage": [0.4, 0.6]})
    assert search.mechanism(within, None, half) == (
        "not determined: up to 1 requests waited, but the KV pool was not full (60% at most) nor level 2 past its "
        "ceiling"
    )
    # past the nominal ceiling (pool / the longest request: a trace's mostly shorter requests) with the pool a third
    # used: its usage, not the ceiling, says what held them (cpu_trace, vLLM at 16 in flight, KV pool 35% used)
    assert search.mechanism(fail, None, half) == (
        "not determined: up to 1 requests waited past the nominal ceiling 3 (12,288 / 3,200 tokens), but the KV "
        "pool was at most 60% used"
    )
    # the pool had room and fewer ran than were sent: a scheduler's cap (cpu_trace on 2026-12-07: SGLang's
    # --max-running-requests 4 at 10 in flight, KV pool 9% used; vLLM at 32 in flight ran 13 with 12 waiting at 34%)
    capped = half.with_columns(pl.Series("requests_running", [4.0, 4.0]))
    assert search.mechanism(fail | {"load_concurrency": 10}, None, capped) == (
        "queueing under a scheduler limit, not the KV pool: at most 4 requests ran at once while up to 1 waited (KV "
        "pool at most 60% used)"
    )
    three = capped.with_columns(pl.lit(3.0).alias("requests_running"))  # level 4, past the nominal ceiling of 3
    assert search.mechanism(fail, None, three).startswith(
        "queueing under a scheduler limit, not the KV pool: at most 3 requests"
    )
    assert search.mechanism(within, None, capped.with_columns(pl.lit(2.0).alias("requests_running"))).startswith(
        "not determined: up to 1 requests waited, but the KV pool was not full"  # as many ran as were sent
    )
    idle = pl.DataFrame({"requests_waiting": [0.0, 0.0]})
    assert search.mechanism(fail, {"tpot_p90_ms": 20.0}, idle) == (
        "decode slowing with batch size: TPOT p90 +50% on the passing load's while nothing queued"
    )
    assert search.mechanism(fail, {"tpot_p90_ms": 29.0}, idle).startswith("not determined: nothing queued")
    assert search.mechanism(fail, {"tpot_p90_ms": 20.0}, None) == (
        "not determined: the run has no waiting-queue telemetry"
    )


def _experiment(tmp_path, url: str, **load) -> ExperimentSpec:
    raw = {
        "name": "srch",
        "hardware": "CPU (test)",
        "device": "cpu",
        "engines": {"vllm": {"name": "vllm", "launch": None, "model": "org/m", "max_model_len": 4096, "url": url}},
        "workload": {
            "kind": "fixed_batch",
            "batch_size": 40,
            "context_tokens": 64,
            "output_tokens": 2,
            "load": {
                "concurrency": 1,
                "window": "span",
                "stop_queue_rising": None,
                "search": {"share": 0.85, "limit": 16},
                **load,
            },
        },
        "slo": {"ttft_ms": 210},
        "retry": {"max_attempts": 1, "retry_on": []},
    }
    (tmp_path / "srch.yaml").write_text(yaml.safe_dump(raw))
    return ExperimentSpec.load(tmp_path / "srch.yaml")


def test_a_search_on_a_fixed_time_server_probes_the_exact_sequence_and_stores_each_probe(tmp_path):
    """One slot at 60 ms a request, FIFO: with c kept in flight each request waits for the c - 1 before it, TTFT
    about c x 60 ms: 180 ms at 3 is within the 210 ms bound, 240 ms at 4 is not. 1, 2, 4 bracket; 3 bisects."""
    with SSEServer(FixtureConfig(first_delay_s=0.06, slots=1)) as srv:
        res = Campaign(_experiment(tmp_path, srv.url), tmp_path).execute(runner.LocalExecutor())
        runs = store.load_runs(tmp_path)
        result = runs.filter(pl.col("search_probes").is_not_null()).row(0, named=True)
        probes = search.probes_of(result)
        assert [p.level for p in probes] == [1, 2, 4, 3]
        assert [p.passed for p in probes] == [True, True, False, True]
        assert (result["search_highest_passing"], result["search_first_failing"]) == (3, 4)
        assert result["search_n"] == 40 and result["search_lower_bound"] >= 0.85 and probes[2].within < 38
        assert result["search_stop"] == "bracket [3, 4] within the precision"
        assert result["search_mechanism"].startswith("not determined")  # the fixture has no KV pool to read
        stored = {r["run_id"]: r for r in runs.filter(pl.col("search_probes").is_null()).iter_rows(named=True)}
        assert [stored[p.run_id]["load_concurrency"] for p in probes] == [1, 2, 4, 3]
        assert result["search_goodput_requests_per_s"] == stored[probes[-1].run_id]["goodput_requests_per_s"]
        assert res.ok == 5 and result["requests_ok"] is None  # the search run itself sends nothing
        # a second sweep finds the search done and keeps its probes (runs of their own, not set aside)
        again = Campaign(_experiment(tmp_path, srv.url), tmp_path).execute(runner.LocalExecutor())
    assert (again.skipped, again.superseded, store.load_runs(tmp_path).height) == (1, 0, 5)
    assert json.loads((tmp_path / "runs/srch" / result["run_id"] / search.PROGRESS_FILE).read_text())["probes"]


def test_a_search_without_an_slo_is_refused(tmp_path):
    spec = _experiment(tmp_path, "http://127.0.0.1:9").model_dump(mode="json")
    spec["slo"] = None
    with pytest.raises(SpecError, match="workload.load.search finds the highest load within the SLO"):
        from kvlab.experiment import expand

        expand(ExperimentSpec.model_validate(spec))


def test_the_wilson_upper_bound_mirrors_the_lower():
    assert search.wilson_upper(0, 0) == 1.0 and search.wilson_upper(10, 10) == pytest.approx(1.0)
    assert search.wilson_upper(0, 10) == pytest.approx(1 - search.wilson_lower(10, 10))
    assert search.wilson_upper(8, 10) == pytest.approx(0.9433178, abs=1e-6)  # 80% of 10: [0.490, 0.943]
    assert search.wilson_upper(39, 40) == pytest.approx(1 - search.wilson_lower(1, 40))
