"""Load as a dimension of a workload (kvlab.load): the arrival schedule, closed-loop concurrency, warm-up and the
steady-state window, the saturation stop, and run keys that change only where a load is set."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from kvlab import client, metrics, runner, store
from kvlab import load as loads
from kvlab.campaign import Campaign
from kvlab.studies.capacity import frames as capacity
from kvlab.experiment import ExperimentSpec, SpecError, expand
from kvlab.workloads import fixed_batch, multi_turn
from kvlab import schema
from tests.support.sse_fixture import FixtureConfig, SSEServer

ENGINE = {"name": "vllm", "launch": None, "model": "org/remote-model", "max_model_len": 4096}


def spec(workload: dict, url: str = "http://127.0.0.1:9", **extra) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "load",
            "hardware": "CPU (test)",
            "device": "cpu",
            "engines": {"vllm": {**ENGINE, "url": url}},
            "workload": workload,
            "retry": {"max_attempts": 1, "retry_on": []},
            **extra,
        }
    )


SHARED = {"kind": "shared_prefix", "batch_size": 8, "context_tokens": 1024, "output_tokens": 16, "shared_fraction": 0.5}


# ----------------------------------------------------------------------------- the schedule


def test_the_arrival_schedule_of_a_seed_is_fixed_and_its_gaps_are_gamma_with_the_stated_mean():
    assert loads.arrival_times(5, 2.0, 1.0, seed=0) == pytest.approx(
        [0.0, 0.33996595, 0.84976450, 0.85966783, 0.86080250], abs=1e-8
    )
    assert loads.arrival_times(5, 2.0, 1.0, seed=0) == loads.arrival_times(5, 2.0, 1.0, seed=0)
    assert loads.arrival_times(5, 2.0, 1.0, seed=1) != loads.arrival_times(5, 2.0, 1.0, seed=0)
    assert loads.arrival_times(1, 2.0) == [0.0] and loads.arrival_times(0, 2.0) == []
    for shape in (0.5, 1.0, 4.0):  # mean 1/rate whatever the shape; squared coefficient of variation 1/shape
        gaps = np.diff(loads.arrival_times(40_001, 4.0, shape, seed=7))
        assert gaps.mean() == pytest.approx(0.25, rel=0.03)
        assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 / shape, rel=0.05)


def test_a_conversation_arrives_as_one_chain():
    prompts = multi_turn.prompts(3, 2, 8, 2, 2, 1000)
    assert loads.chain_starts(prompts) == [0, 2, 4]
    assert loads.chain_starts(fixed_batch.prompts(3, 8, 2, 1000)) == [0, 1, 2]


# ----------------------------------------------------------------------------- spec and keys


def test_a_run_without_load_keeps_its_key_and_each_load_level_is_a_run_of_its_own():
    # the key main computed for this run before load existed: stored runs without a load keep theirs
    assert [r.key for r in expand(spec(SHARED, slo={"ttft_ms": 500}))] == ["0910ac7fd4c0"]
    ladder = spec(
        SHARED | {"load": {"concurrency": 1, "warmup_requests": 2}}, matrix={"workload.load.concurrency": [1, 2, 4]}
    )
    runs = expand(ladder)
    assert [r.workload.load.concurrency for r in runs] == [1, 2, 4]
    assert len({r.key for r in runs} | {"0910ac7fd4c0"}) == 4
    assert [r.workload.in_flight for r in runs] == [1, 2, 4]  # RUNS.batch_size: what the load keeps in flight
    assert len({r.server_key for r in runs}) == 1  # a load is no server setting: the ladder shares one start


def test_a_load_states_a_concurrency_or_a_rate_and_leaves_requests_to_measure():
    with pytest.raises(ValueError, match="concurrency .* or rate_rps"):
        loads.LoadSpec()
    with pytest.raises(ValueError, match="leaves none of the 8 requests"):
        spec(SHARED | {"load": {"concurrency": 2, "warmup_requests": 8}})
    assert loads.LoadSpec(rate_rps=2, burstiness=0.5, concurrency=4).label() == "2 req/s (gamma 0.5), c<=4"
    assert (loads.LoadSpec(concurrency=3).mode, loads.LoadSpec(rate_rps=1).mode) == ("closed", "open")


# ----------------------------------------------------------------------------- the window and the rules


class R:
    def __init__(self, i, send, end):
        self.request_index, self.t_send_s, self.t_send, self.t_end = i, send, 100 + send, 100 + end


def test_the_steady_window_runs_from_the_first_measured_send_to_the_last_send():
    recs = [R(0, 0.0, 1.0), R(1, 0.0, 1.2), R(2, 1.0, 2.0), R(3, 1.2, 2.1), R(4, 2.0, 3.5), R(5, 2.1, 3.0)]
    w = loads.steady_window(recs, warmup_requests=2)
    assert (w.start_s, w.end_s, w.length_s) == (1.0, 2.1, pytest.approx(1.1))
    assert (w.warmup, w.counted, w.outside) == ((0, 1), (2, 3), (4, 5))  # 4 and 5 finish after the last send


def test_the_queue_rule_needs_k_strict_rises_of_the_waiting_series():
    def s(*q):
        return [(i, {"requests_waiting": v}, None) for i, v in enumerate(q)]

    assert loads.queue_rising(s(0, 1, 2, 3, 4), 5)
    assert not loads.queue_rising(s(0, 1, 2, 2, 4), 5)
    assert not loads.queue_rising(s(1, 2, 3, 4), 5)
    assert loads.queue_rising(s(0, 1, 2, 3, 4) + [(9, {}, "HTTP 500")], 5)  # a failed sample is no sample


def test_the_ttft_rule_fires_on_the_p90_of_finished_requests_past_its_minimum():
    watch = loads.SaturationWatch(loads.LoadSpec(concurrency=4, stop_min_requests=4), slo_ttft_ms=100)
    for t in (100, 100, 400):
        watch.finished(t)
    assert watch.reason() is None  # 3 finished, the rule waits for 4
    watch.finished(400)
    assert (
        watch.reason() is not None and "p90 TTFT 400 ms of 4 finished requests > 3 x the SLO's 100 ms" in watch.reason()
    )
    assert loads.SaturationWatch(loads.LoadSpec(concurrency=4), slo_ttft_ms=None).limit_ms is None


# ----------------------------------------------------------------------------- against the SSE fixture


def test_a_closed_loop_never_has_more_in_flight_than_its_concurrency_and_keeps_it_full():
    prompts = fixed_batch.prompts(12, 8, 4, 1000)
    load = loads.LoadSpec(concurrency=3, warmup_requests=3)
    watch = loads.SaturationWatch(load, None)
    with SSEServer(FixtureConfig(first_delay_s=0.02, delay_s=0.005)) as srv:
        batch = asyncio.run(
            client.run_requests(srv.url, "m", prompts, concurrency=3, **loads.client_args(load, prompts, watch))
        )
        assert srv.max_running == 3 and len(srv.served) == 12
    assert [r.request_index for r in sorted(batch.records, key=lambda r: r.t_send_s)] == list(range(12))
    w = loads.steady_window(batch.records, 3)
    assert w.warmup == (0, 1, 2) and set(w.counted) | set(w.outside) == set(range(3, 12))
    assert set(w.outside) >= {10, 11}  # in flight at the last send: the drain, not the steady state


def test_an_open_loop_sends_each_request_no_earlier_than_its_arrival():
    """Each request leaves at its own arrival time, not after the answer to the one before: the server takes 0.4 s
    to a first token, so a closed loop would send the second request 0.39 s late. A send may come late by the
    client's own event-loop lag, which the batch records: under make test, beside the engine pass on the same core,
    sends came more than 50 ms, and once more than 200 ms, late while the loop itself woke that late."""
    prompts = fixed_batch.prompts(6, 8, 2, 1000)
    load = loads.LoadSpec(rate_rps=10, arrival_seed=3)
    with SSEServer(FixtureConfig(first_delay_s=0.4)) as srv:
        batch = asyncio.run(
            client.run_requests(
                srv.url, "m", prompts, **loads.client_args(load, prompts, loads.SaturationWatch(load, None))
            )
        )
    due = loads.arrival_times(6, 10, 1.0, seed=3)
    sent = [r.t_send_s for r in batch.records]
    assert all(s >= d - 0.002 for s, d in zip(sent, due))  # never early (t0 is the first send, a hair after start)
    lag = batch.loop_lag_max_ms / 1e3  # how late the client's loop woke at most: the host's delay, not the code's
    assert all(s - d < 0.05 + lag for s, d in zip(sent, due)), ([s - d for s, d in zip(sent, due)], lag)


def test_a_saturating_server_stops_the_load_point_by_its_queue():
    """One slot, 0.05 s a request, 60 arrivals per second: the fixture's waiting queue rises sample after sample and
    the point stops sending long before its 200 requests."""
    prompts = fixed_batch.prompts(200, 8, 2, 1000)
    load = loads.LoadSpec(rate_rps=60, stop_queue_rising=5, stop_ttft_factor=None)
    samples: list = []
    watch = loads.SaturationWatch(load, None, samples)

    async def go(url):
        sampler = asyncio.create_task(
            metrics.sample_during(url, {"requests_waiting": "vllm:num_requests_waiting"}, samples, interval_s=0.05)
        )
        try:
            return await client.run_requests(url, "m", prompts, **loads.client_args(load, prompts, watch))
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)

    with SSEServer(FixtureConfig(first_delay_s=0.05, slots=1)) as srv:
        batch = asyncio.run(go(srv.url))
    assert watch.stopped == "past saturation: the server's waiting queue rose over 5 consecutive telemetry samples"
    assert 5 < len(batch.records) < 60 and batch.ok  # what was sent still finished


def _sweep(tmp_path, workload, fixture, engine: dict | None = None, **extra):
    with SSEServer(fixture) as srv:
        path = tmp_path / "load.yaml"
        raw = {
            "name": "load",
            "hardware": "CPU (test)",
            "device": "cpu",
            "engines": {"vllm": {**ENGINE, **(engine or {}), "url": srv.url}},
            "workload": workload,
            "retry": {"max_attempts": 1, "retry_on": []},
            **extra,
        }
        path.write_text(yaml.safe_dump(raw))
        res = Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
        return res, srv


def test_a_stored_load_point_counts_only_its_window_and_says_how_it_was_sent(tmp_path):
    res, srv = _sweep(
        tmp_path,
        {
            "kind": "fixed_batch",
            "batch_size": 10,
            "context_tokens": 64,
            "output_tokens": 4,
            "load": {"concurrency": 2, "warmup_requests": 2},
        },
        FixtureConfig(first_delay_s=0.02, delay_s=0.01),
        slo={"ttft_ms": 10_000},
    )
    assert res.ok == 1 and srv.max_running == 2
    run = schema.run_rates(store.load_runs(tmp_path)).row(0, named=True)
    assert (run["load_mode"], run["load_concurrency"], run["load_rate_rps"], run["batch_size"]) == (
        "closed",
        2,
        None,
        2,
    )
    assert run["requests_warmup"] == 2 and run["load_stop"] is None
    assert run["requests_ok"] + run["requests_outside_window"] == 8  # every measured request, inside or not
    assert run["requests_outside_window"] >= 1 and run["requests_within_slo"] == run["requests_ok"]
    assert run["requests_per_s"] == pytest.approx(run["requests_ok"] / run["window_s"])
    assert store.load_requests(tmp_path, "load").height == 10  # requests.parquet keeps them all
    assert "load c=2: 10 of 10 requests sent, 2 warm-up" in run["notes"]


def test_a_load_points_whole_batch_token_sums_equal_the_servers_counters(tmp_path):
    """The window's sums count its requests only; batch_prompt/output_tokens count every request sent (warm-up and
    outside the window too), as the server's /metrics deltas do: the two agree exactly."""
    res, srv = _sweep(
        tmp_path,
        {
            "kind": "fixed_batch",
            "batch_size": 10,
            "context_tokens": 64,
            "output_tokens": 4,
            "load": {"concurrency": 2, "warmup_requests": 2},
        },
        FixtureConfig(first_delay_s=0.02, delay_s=0.01),
    )
    assert res.ok == 1
    run = store.load_runs(tmp_path).row(0, named=True)
    sent = srv.served[1:]  # the first is kvlab's warm-up request after the server start, before the counters' read
    assert len(sent) == 10 and run["requests_warmup"] == 2 and run["requests_outside_window"] >= 1
    per_prompt = sent[0].prompt_tokens
    assert {s.prompt_tokens for s in sent} == {per_prompt} == {64 - 4}
    assert run["batch_prompt_tokens"] == run["server_prompt_tokens"] == sum(s.prompt_tokens for s in sent) == 600
    assert run["batch_output_tokens"] == run["server_generation_tokens"] == 10 * 4
    assert srv.prompt_tokens_total == 600 + srv.served[0].prompt_tokens  # the fixture's own counter, warm-up included
    # the window's sums cover fewer requests than the server's counters
    assert run["served_prompt_tokens"] == run["requests_ok"] * 60 < run["server_prompt_tokens"]
    assert run["served_output_tokens"] == run["requests_ok"] * 4 < run["server_generation_tokens"]
    # the run's rates are stored with it, over its window (schema.run_rates), not filled on reading
    stored = pl.read_parquet(next(tmp_path.glob(f"runs/load/*/{store.RUN_FILE}"))).row(0, named=True)
    assert stored["requests_per_s"] == run["requests_ok"] / run["window_s"] == run["requests_per_s"]
    assert stored["output_tokens_per_s"] == run["served_output_tokens"] / run["window_s"]
    assert stored["goodput_requests_per_s"] is None  # no SLO stated


def test_a_run_without_load_has_whole_batch_sums_equal_to_its_served_sums(tmp_path):
    res, srv = _sweep(
        tmp_path, {"kind": "fixed_batch", "batch_size": 3, "context_tokens": 64, "output_tokens": 4}, FixtureConfig()
    )
    run = store.load_runs(tmp_path).row(0, named=True)
    assert (
        (run["batch_prompt_tokens"], run["batch_output_tokens"])
        == (run["served_prompt_tokens"], run["served_output_tokens"])
        == (run["server_prompt_tokens"], run["server_generation_tokens"])
        == (180, 12)
    )


def test_runs_stored_before_the_whole_batch_sums_read_them_as_not_recorded():
    from kvlab.paths import ROOT

    runs = store.load_runs(ROOT / "tests" / "fixtures").filter(pl.col("source") == "measured")
    assert runs.height > 0
    assert runs["batch_prompt_tokens"].null_count() == runs["batch_output_tokens"].null_count() == runs.height


def test_a_load_point_past_its_slo_stops_early_and_records_why(tmp_path):
    """One slot at 50 ms a request, 6 kept in flight: each waits for the five before it (TTFT ~300 ms), 3 x the
    20 ms SLO is passed by the first finished requests, and the point stops well short of its 60."""
    res, srv = _sweep(
        tmp_path,
        {
            "kind": "fixed_batch",
            "batch_size": 60,
            "context_tokens": 64,
            "output_tokens": 2,
            "load": {"concurrency": 6, "warmup_requests": 1, "stop_min_requests": 4, "stop_queue_rising": None},
        },
        FixtureConfig(first_delay_s=0.05, slots=1),
        slo={"ttft_ms": 20},
    )
    assert res.ok == 1
    run = store.load_runs(tmp_path).row(0, named=True)
    assert run["load_stop"].startswith("past saturation: p90 TTFT") and "3 x the SLO's 20 ms" in run["load_stop"]
    sent = store.load_requests(tmp_path, "load").height
    assert sent < 20 and len(srv.served) == sent + 1  # + kvlab's warm-up request after the server start
    assert "stopped early, past saturation" in run["notes"]


def test_stored_runs_from_before_load_still_load(tmp_path):
    from kvlab.paths import ROOT

    runs = store.load_runs(ROOT / "tests" / "fixtures")
    assert runs.height > 0 and runs["load_mode"].null_count() == runs.height


def test_a_load_on_a_kind_that_is_sent_at_once_is_accepted_and_a_bad_one_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "name": "bad",
                "hardware": "CPU (test)",
                "device": "cpu",
                "engines": {"vllm": {**ENGINE, "url": "http://127.0.0.1:9"}},
                "workload": SHARED | {"load": {"rate_rps": -1}},
            }
        )
    )
    with pytest.raises(SpecError, match=r"workload\.load\.rate_rps"):
        ExperimentSpec.load(bad)


# ----------------------------------------------------------------------------- the B300 capacity experiment


def test_the_b300_capacity_plan_dry_runs_with_a_ladder_per_engine_context_and_memory_setting():
    """data/experiments/b300_capacity.yaml: vLLM TP8 and SGLang TP8+DCP8 at 64K/128K/200K and 0.92/0.95, a closed-
    loop ladder of 7 rungs under an SLO, one server per engine x memory setting; the quick form's runs are the full
    study's; the ladder crosses the model's vLLM ceiling at every context. Both engines' own parsers check its
    argvs in tests/test_engines.py (engine-marked), which reads every shipped experiment."""
    from kvlab import plan
    from kvlab.paths import EXPERIMENTS_DIR

    path = EXPERIMENTS_DIR / "b300_capacity.yaml"
    spec = plan.load(path)
    runs = expand(spec)
    assert len(runs) == 2 * 2 * 3 * 7 and len({r.server_key for r in runs}) == 4
    assert spec.slo.ttft_ms == 20_000 and spec.slo.tpot_ms == 100
    points: dict = {}
    for r in runs:
        points.setdefault((r.engine.name, r.engine.tp, r.engine.dcp, r.engine.mem_util, r.context_tokens), []).append(
            r.workload.load.concurrency
        )
        assert r.workload.n_requests >= 3 * r.workload.load.concurrency > r.workload.load.warmup_requests
    assert sorted({k[:3] for k in points}) == [("sglang", 8, 8), ("vllm", 8, 1)]
    assert {(k[3], k[4]) for k in points} == {(u, c) for u in (0.92, 0.95) for c in (65536, 131072, 204800)}
    assert all(v == [1, 2, 4, 8, 16, 32, 64] for v in points.values())
    quick = expand(spec.quick_form())
    assert len(quick) == 32 and {r.key for r in quick} <= {r.key for r in runs}
    text = plan.dry_run_text(spec)
    assert "--dcp-size 8" in text and "--tensor-parallel-size 8" in text and "--mem-fraction-static 0.95" in text
    assert "(load c=64, 64 warm-up)" in text
    ceilings = capacity.modelled_ceilings().filter(pl.col("dcp") == 1)
    assert ceilings["concurrency_ceiling"].max() < 64  # the top rung is past vLLM's modelled ceiling everywhere


def test_the_cpu_capacity_quick_form_is_two_engines_by_two_contexts_by_two_settings_by_three_rungs():
    """data/experiments/cpu_capacity.yaml (dry run only here): 28 quick runs, each engine x context x memory setting
    with the ladder 1, 2, 4 (4 three times at 200K and 0.92), on the long-context study's four servers (no start of its own); make report sweeps it in
    both forms."""
    from kvlab import plan
    from kvlab.paths import EXPERIMENTS_DIR

    spec = plan.load(EXPERIMENTS_DIR / "cpu_capacity.yaml")
    quick = expand(spec.quick_form())
    ladders: dict = {}
    for r in quick:
        ladders.setdefault((r.engine.name, r.engine.mem_util, r.context_tokens), []).append(r.workload.load.concurrency)
    # three runs of 4 in flight at 200K and 0.92, past its ceiling of 2: the queueing verdict's n (28 runs in all)
    past = {(e, 0.92, 3200) for e in ("vllm", "sglang")}
    assert len(quick) == 28 and all(v == ([1, 2, 4, 4, 4] if k in past else [1, 2, 4]) for k, v in ladders.items())
    assert sorted(
        r.repeat
        for r in quick
        if (r.engine.name, r.engine.mem_util, r.context_tokens) in past and r.workload.load.concurrency == 4
    ) == [0, 0, 1, 1, 2, 2]
    assert set(ladders) == {(e, u, c) for e in ("vllm", "sglang") for u in (0.92, 0.95) for c in (1024, 3200)}
    assert {r.workload.load.concurrency for r in expand(spec)} == {1, 2, 4, 8}
    long_context = expand(ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_long_context.yaml"))
    assert {r.server_key for r in quick} == {r.server_key for r in long_context}
    every = sorted(p.name for p in EXPERIMENTS_DIR.glob("cpu_*.yaml"))
    assert "cpu_capacity.yaml" in every and make_experiments("FULL=1") == every
    # cpu_trace (report 07's replayed traffic) is in the default build too, its quick form (issue 54)
    assert make_experiments() == every


def make_experiments(*args: str) -> list[str]:
    """The experiment files `make sweep` / `make report` would sweep (the Makefile's EXPERIMENTS), by name."""
    import subprocess

    from kvlab.paths import ROOT

    out = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "--eval",
            "show-experiments: ; @echo $(EXPERIMENTS)",
            "show-experiments",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(Path(p).name for p in out.split())


# ----------------------------------------------------------------------------- the climb


def test_a_ladder_stops_climbing_above_a_rung_past_saturation_or_where_goodput_fell():
    rungs = [loads.Rung(1, 2.0, None), loads.Rung(2, 3.0, None), loads.Rung(4, 2.5, None)]
    assert loads.not_climbed(rungs, 4) is None  # judged only from the rungs below it
    assert loads.not_climbed(rungs, 8) == "not climbed: goodput fell from 3 req/s at 2 to 2.5 at 4"
    assert (
        loads.not_climbed([loads.Rung(1, None, None), loads.Rung(2, None, "past saturation: ...")], 4)
        == "not climbed: the rung at 2 stopped past saturation"
    )
    assert loads.not_climbed([loads.Rung(1, None, None), loads.Rung(2, None, None)], 4) is None  # no SLO: climbs
    assert loads.not_climbed([loads.Rung(1, 3.0, None), loads.Rung(2, 2.75, None)], 4) is None  # 8% : noise
    assert loads.not_climbed([loads.Rung(1, 3.0, None), loads.Rung(2, 2.6, None)], 4) is not None  # 13%
    ladder = expand(
        spec(
            SHARED | {"load": {"concurrency": 1}},
            matrix={"workload.load.concurrency": [1, 2], "workload.batch_size": [8, 16]},
        )
    )
    keys = {(r.workload.load.concurrency, r.workload.batch_size): loads.ladder_key(r) for r in ladder}
    assert len(set(keys.values())) == 1  # level and request count: the same ladder
    other = expand(spec(SHARED | {"load": {"rate_rps": 1}}))[0]
    assert loads.ladder_key(other) not in keys.values()  # an open loop is another ladder


def test_a_sweep_leaves_the_rungs_above_where_goodput_fell_and_a_later_sweep_still_does(tmp_path):
    """One slot at 200 ms a request under a 300 ms TTFT SLO: alone a request meets it, two in flight wait for each
    other (about 400 ms; 100 ms either side of the bound: at 100 / 150 ms, beside the engine pass on 2026-12-07, 3 of
    23 requests alone took past 150 ms), so goodput falls from the rung at 1 to the rung at 2 and 4 and 8 are not sent
    (nor stored); a second sweep reuses 1 and 2 and again leaves 4 and 8, judged from the stored rungs."""
    work = {
        "kind": "fixed_batch",
        "batch_size": 24,
        "context_tokens": 64,
        "output_tokens": 2,
        "load": {"concurrency": 1, "warmup_requests": 0, "stop_min_requests": 3, "stop_queue_rising": None},
    }
    matrix = {"workload.load.concurrency": [8, 4, 2, 1]}  # listed top down: the sweep climbs them bottom up
    seen: list = []
    with SSEServer(FixtureConfig(first_delay_s=0.2, slots=1)) as srv:
        path = tmp_path / "climb.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "name": "climb",
                    "hardware": "CPU (test)",
                    "device": "cpu",
                    "engines": {"vllm": {**ENGINE, "url": srv.url}},
                    "workload": work,
                    "matrix": matrix,
                    "slo": {"ttft_ms": 300},
                    "retry": {"max_attempts": 1, "retry_on": []},
                }
            )
        )
        res = Campaign(
            ExperimentSpec.load(path), tmp_path, on_run=lambda r, s: seen.append((r.workload.load.concurrency, s))
        ).execute(runner.LocalExecutor())
        assert seen == [(1, "ok"), (2, "ok"), (4, "not climbed"), (8, "not climbed")]
        assert (res.ok, res.not_climbed) == (2, 2)
        stored = schema.run_rates(store.load_runs(tmp_path)).sort("load_concurrency")
        assert stored["load_concurrency"].to_list() == [1, 2]
        good = stored["goodput_requests_per_s"].to_list()
        # alone, a request meets the SLO with 100 ms to spare; on a loaded core a few may miss it (beside the engine
        # pass: 22 of 23 once, 20 of 23 in make test on 2026-12-07), where two in flight make each wait for the other
        assert good[1] < good[0] and stored["requests_ok"][0] > 0
        assert stored["requests_within_slo"][0] >= 0.75 * stored["requests_ok"][0]
        seen.clear()
        again = Campaign(
            ExperimentSpec.load(path), tmp_path, on_run=lambda r, s: seen.append((r.workload.load.concurrency, s))
        ).execute(runner.LocalExecutor())
    assert seen == [(4, "not climbed"), (8, "not climbed")] and (again.skipped, again.not_climbed) == (2, 2)


# ----------------------------------------------------------------------------- the model's KV capacity


def test_the_models_ceiling_for_kimi_k3_on_eight_b300_by_hand():
    """From the catalog rows by hand: 24 MLA layers x 576 values x 2 B = 27,648 B of KV per token, a full copy on
    every GPU at DCP 1 (MLA has one latent) and 1/8 of it at DCP 8; weights 2.7795e12 params x 0.56159 B / 8 GPUs;
    pool = mem_util x 288e9 B - weights - 4 GiB (activations)."""
    df = capacity.modelled_ceilings()
    assert df.height == 12 and set(df["source"]) == {"modelled"}
    weights = 2.7795e12 * 0.56159 / 8
    for u in (
        0.92,
        0.95,
    ):  # vLLM (DCP 1): activations inside its memory fraction (SGLang's pools: test_perfmodel_terms)
        pool = u * 288e9 - weights - 4 * 2**30
        tokens = int(pool // 27_648)
        rows = df.filter((pl.col("mem_util") == u) & (pl.col("dcp") == 1)).sort("context_tokens")
        assert rows["kv_pool_tokens"].to_list() == [tokens] * 3
        assert rows["pool_ceiling"].to_list() == [tokens // c for c in (65536, 131072, 204800)]
        # the ceiling every page prints is the model's own count, which also charges each sequence its KDA state
        # (434,110,464 B / 8 GPUs)
        assert (
            rows["concurrency_ceiling"].to_list()
            == rows["max_concurrent_seqs"].to_list()
            == [int(pool // (c * 27_648 + 434_110_464 / 8)) for c in (65536, 131072, 204800)]
        )
    at = {(r["dcp"], r["mem_util"], r["context_tokens"]): r for r in df.iter_rows(named=True)}
    assert at[1, 0.92, 131072]["kv_pool_tokens"] == 2_370_790 and at[1, 0.92, 131072]["concurrency_ceiling"] == 17
    assert at[8, 0.92, 131072]["concurrency_ceiling"] == 81 and at[8, 0.95, 204800]["concurrency_ceiling"] == 58
    assert at[1, 0.92, 65536]["engine"] == "vllm" and at[8, 0.92, 65536]["engine"] == "sglang"
    assert not at[1, 0.95, 65536]["fits"] and at[1, 0.92, 65536]["fits"]  # 0.95 leaves less than the assumed need


# ----------------------------------------------------------------------------- the peers' definitions (issue 43)


def test_the_peers_options_default_to_kvlabs_behaviour_and_leave_the_run_key_as_it_was():
    load = {"concurrency": 4, "warmup_requests": 2}
    # the key main (c937608) computed for this load point before the three options existed
    assert [r.key for r in expand(spec(SHARED | {"load": load}))] == ["9c4d1bdf0931"]
    default = loads.LoadSpec(**load)
    assert (default.prompt_form, default.phase, default.window) == ("token_ids", "together", "steady")
    others = [
        expand(spec(SHARED | {"load": load | {k: v}}))[0].key for k, v in (("phase", "staggered"), ("window", "span"))
    ]
    assert len(set(others) | {"9c4d1bdf0931"}) == 3  # each other choice is another run
    from kvlab.tinymodel import ensure_tiny_model

    local = {**ENGINE, "model": str(ensure_tiny_model()), "url": "http://127.0.0.1:9"}
    forms = [
        ExperimentSpec.model_validate(
            {
                "name": "load",
                "hardware": "CPU (test)",
                "device": "cpu",
                "engines": {"vllm": local},
                "workload": SHARED | {"load": load | form},
            }
        )
        for form in ({}, {"prompt_form": "text"}, {"prompt_form": "text", "text_lengths": "decoded"})
    ]
    assert len({expand(f)[0].key for f in forms}) == 3
    assert loads.LoadSpec(**load).text_lengths == "exact"  # left out of the key at its default, as the others
    with pytest.raises(ValueError, match="text_lengths 'decoded' applies to prompt_form 'text' only"):
        loads.LoadSpec(**load, text_lengths="decoded")
    with pytest.raises(ValueError, match="staggered.*closed loop"):
        expand(spec(SHARED | {"load": {"rate_rps": 2.0, "phase": "staggered"}}))
    with pytest.raises(ValueError, match="window"):
        expand(spec(SHARED | {"load": load | {"window": "whole"}}))
    with pytest.raises(
        SpecError,
        match=r"workload\.load\.prompt_form: 'text' .* engines\.vllm\.model "
        r"\('org/remote-model'\) has not",
    ):
        expand(spec(SHARED | {"load": load | {"prompt_form": "text"}}))


def test_the_span_window_runs_from_the_first_measured_send_to_the_last_completion_and_counts_every_one():
    recs = [R(0, 0.0, 1.0), R(1, 0.0, 1.2), R(2, 1.0, 2.0), R(3, 1.2, 2.1), R(4, 2.0, 3.5), R(5, 2.1, 3.0)]
    w = loads.span_window(recs, warmup_requests=2)
    assert (w.start_s, w.end_s, w.length_s) == (1.0, 3.5, 2.5)
    assert (w.warmup, w.counted, w.outside) == ((0, 1), (2, 3, 4, 5), ())
    assert loads.window_of(recs, loads.LoadSpec(concurrency=2, warmup_requests=2)) == loads.steady_window(
        recs, 2
    )  # the default: the steady-state window


def test_prompts_as_text_are_the_ids_decoded_by_the_models_tokenizer(tmp_path):
    from tokenizers import Tokenizer

    from kvlab.tinymodel import ensure_tiny_model

    folder = ensure_tiny_model()
    tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    ids = fixed_batch.prompts(4, 256, 4, tok.get_vocab_size(), seed=3)
    text = loads.as_text(ids, Path(folder) / "tokenizer.json")
    # as the server counts them: the text's tokens and its BOS, as many as the ids (decoded as is: 259 + 1)
    assert [len(tok.encode(p.text).ids) for p in text] == [256] * 4
    assert len(tok.encode(tok.decode(list(ids[0].token_ids))).ids) == 260
    assert text[0].text.startswith(tok.decode(list(ids[0].token_ids[:8])))  # the ids' own text, cut to length
    assert all(p.token_ids is None and p.shared_prefix_tokens is None and p.max_tokens == 4 for p in text)
    assert (loads.prompt_form(ids), loads.prompt_form(text)) == ("token_ids", "text")
    # text_lengths: decoded (SGLang's benchmark's random-ids): the 255 ids decoded once, not corrected, so the
    # server counts other lengths than 256, different for each prompt
    decoded = loads.as_text(ids, Path(folder) / "tokenizer.json", exact=False)
    assert [len(tok.encode(p.text).ids) for p in decoded] == [259, 263, 262, 265]
    assert decoded[0].text == tok.decode(list(ids[0].token_ids[:255]), skip_special_tokens=False)
    with pytest.raises(ValueError, match=r"nothing/tokenizer\.json does not exist"):
        loads.as_text(ids, tmp_path / "nothing" / "tokenizer.json")


def _first_sends(phase: str) -> list[float]:
    prompts = fixed_batch.prompts(6, 8, 4, 1000)
    load = loads.LoadSpec(concurrency=3, phase=phase)
    with SSEServer(FixtureConfig(first_delay_s=0.1, delay_s=0.005)) as srv:
        batch = asyncio.run(
            client.run_requests(
                srv.url,
                "m",
                prompts,
                concurrency=3,
                **loads.client_args(load, prompts, loads.SaturationWatch(load, None)),
            )
        )
        assert srv.max_running == 3 and len(srv.served) == 6 and batch.ok
    return sorted(r.t_send_s for r in batch.records)


def test_a_staggered_closed_loop_sends_each_of_its_first_wave_after_the_ones_first_token():
    """0.1 s to each first chunk: together, the first three go within milliseconds; staggered, each of them waits
    for the one before's first chunk (>= 0.1 s apart), and the loop still keeps three in flight."""
    together, staggered = _first_sends("together"), _first_sends("staggered")
    assert together[2] - together[0] < 0.05
    assert staggered[1] - staggered[0] >= 0.1 and staggered[2] - staggered[1] >= 0.1


def test_the_conditions_label_names_prompt_form_phase_and_window_and_reads_older_runs_as_they_were_measured():
    rows = pl.DataFrame(
        [
            {"load_mode": "closed", "prompt_form": "token_ids", "load_phase": "together", "load_window": "steady"},
            {"load_mode": "closed", "prompt_form": "text", "load_phase": "staggered", "load_window": "span"},
            {"load_mode": "open", "prompt_form": "token_ids", "load_phase": None, "load_window": "span"},
            {"load_mode": "closed", "prompt_form": None, "load_phase": None, "load_window": None},
            {"load_mode": None, "prompt_form": "token_ids", "load_phase": None, "load_window": None},
        ]
    )
    assert loads.conditions_label(rows) == (
        "token-id prompts, first wave sent together, steady-state window; "
        "text prompts (tokenised by the server), first wave staggered, first send to last completion; "
        "token-id prompts, first send to last completion; "
        "prompt form not recorded, first wave sent together, steady-state window"
    )
    assert loads.conditions_label(rows.tail(1)) is None  # no load: nothing to name
    scaled = {"load_mode": "open", "prompt_form": "text", "load_window": "span", "load_arrivals": "scaled"}
    assert loads.conditions_label([scaled]) == (
        "text prompts (tokenised by the server), arrivals scaled to the exact rate, first send to last completion"
    )
    decoded = {"load_mode": "closed", "prompt_form": "text", "load_window": "span", "load_text_lengths": "decoded"}
    assert loads.conditions_label([decoded, decoded | {"load_text_lengths": "exact"}]) == (
        "text prompts (tokenised by the server), text as decoded (the server's lengths vary), first wave sent "
        "together, first send to last completion; "
        "text prompts (tokenised by the server), first wave sent together, first send to last completion"
    )


@pytest.mark.parametrize("burstiness", [1.0, 0.5, 4.0])
def test_scaled_arrivals_put_the_last_send_at_n_over_the_rate_and_a_drawn_gap_before_the_first(burstiness):
    """`vllm bench serve`'s schedule (arrivals: scaled): n gaps, the first before the first send, scaled so the n-th
    send falls at exactly n / rate whatever the draw; kvlab's own (drawn) starts at 0 and is left as drawn."""
    for seed in range(5):
        scaled = loads.arrival_times(16, 4.0, burstiness, seed, scaled=True)
        assert len(scaled) == 16 and scaled[-1] == pytest.approx(4.0, rel=1e-12) and scaled[0] > 0
        assert all(b >= a for a, b in zip(scaled, scaled[1:]))
        drawn = loads.arrival_times(16, 4.0, burstiness, seed)
        assert drawn[0] == 0.0 and drawn == loads.arrival_times(16, 4.0, burstiness, seed)
    assert len({round(loads.arrival_times(16, 4.0, 1.0, seed, scaled=True)[-1], 9) for seed in range(5)}) == 1
    assert len({round(loads.arrival_times(16, 4.0, 1.0, seed)[-1], 9) for seed in range(5)}) == 5


def test_a_scaled_open_loops_span_window_starts_where_the_load_starts():
    """With arrivals: scaled the requests' clock still starts at the first send, so the span window reaches back
    by the schedule's lead (its first offset): the load's whole duration, as vLLM's benchmark divides by."""
    from types import SimpleNamespace

    load = loads.LoadSpec(rate_rps=4.0, arrivals="scaled", window="span")
    prompts = [SimpleNamespace(index=i, conversation=None) for i in range(8)]
    lead = loads.schedule_lead_s(loads.client_args(load, prompts, loads.SaturationWatch(load, None))["start_offsets"])
    assert lead == loads.arrival_times(8, 4.0, 1.0, 0, scaled=True)[0] > 0
    recs = [SimpleNamespace(request_index=i, t_send_s=0.5 * i, t_send=0.0, t_end=0.1) for i in range(8)]
    w = loads.window_of(recs, load, lead)
    assert (w.start_s, w.end_s) == (pytest.approx(-lead), pytest.approx(3.6)) and len(w.counted) == 8
    assert loads.window_of(recs, load.model_copy(update={"window": "steady"}), lead).start_s == 0.0
    drawn = loads.LoadSpec(rate_rps=4.0)
    assert (
        loads.schedule_lead_s(loads.client_args(drawn, prompts, loads.SaturationWatch(drawn, None))["start_offsets"])
        == 0.0
    )
    assert loads.schedule_lead_s(None) == 0.0  # a closed loop has no schedule
    with pytest.raises(ValueError, match="arrivals 'scaled' applies to an open loop"):
        loads.LoadSpec(concurrency=4, arrivals="scaled")


def test_a_span_window_waits_out_the_gap_drawn_after_the_last_send_as_sglangs_benchmark_does():
    """SGLang's benchmark's request generator sleeps the gap it draws after every send, the last too, before its run
    can end, so its duration is at least its schedule's last send plus that gap: a span window given where the
    schedule ends (Schedule.until_s, on the requests' clock) ends there when that is past the last completion (and
    says so in the run's note), at the last completion when not; a steady window ignores it. A schedule whose
    sending stopped early (the saturation stop, or fewer requests sent than drawn) has no such end: its gap follows
    a send that never happened."""
    from types import SimpleNamespace

    load = loads.LoadSpec(rate_rps=4.0, window="span")
    recs = [SimpleNamespace(request_index=i, t_send_s=0.5 * i, t_send=0.0, t_end=0.1) for i in range(4)]
    plain = loads.window_of(recs, load)
    assert (plain.start_s, plain.end_s, plain.ends_with_tail) == (0.0, pytest.approx(1.6), False)
    schedule = loads.Schedule((0.0, 0.5, 1.0, 1.5), tail_s=0.35)
    assert schedule.until_s(recs, None) == pytest.approx(1.85)
    long_tail = loads.window_of(recs, load, until_s=schedule.until_s(recs, None))
    assert (long_tail.end_s, long_tail.ends_with_tail) == (pytest.approx(1.85), True)
    assert long_tail.counted == plain.counted == (0, 1, 2, 3) and long_tail.outside == ()
    short = loads.Schedule((0.0, 0.5, 1.0, 1.5), tail_s=0.05)
    assert loads.window_of(recs, load, until_s=short.until_s(recs, None)) == plain  # the last request outlasts it
    assert loads.window_of(recs, load.model_copy(update={"window": "steady"}), until_s=1.85).end_s == 1.5
    # stopped early: by the saturation rule, or before every drawn request was sent (the duration limit)
    assert schedule.until_s(recs, "past saturation: ...") == 0.0 and schedule.until_s(recs[:3], None) == 0.0
    # the scheduled end, not the last send's: a send held back (a limit on requests in flight) does not move it
    late = [*recs[:3], SimpleNamespace(request_index=3, t_send_s=1.7, t_send=0.0, t_end=0.1)]
    assert schedule.until_s(late, None) == pytest.approx(1.85)
    note = loads.LoadOutcome(load, long_tail, None).note(4)
    assert "inside the 1.85 s window from first send to the end of the gap drawn after the last send" in note
    assert "window from first send to last completion" in loads.LoadOutcome(load, plain, None).note(4)


def test_a_stored_span_load_point_records_its_options_and_counts_every_measured_request(tmp_path):
    res, _ = _sweep(
        tmp_path,
        {
            "kind": "fixed_batch",
            "batch_size": 8,
            "context_tokens": 64,
            "output_tokens": 4,
            "load": {"concurrency": 2, "warmup_requests": 2, "window": "span"},
        },
        FixtureConfig(first_delay_s=0.02, delay_s=0.01),
    )
    assert res.ok == 1
    run = schema.run_rates(store.load_runs(tmp_path)).row(0, named=True)
    assert (run["prompt_form"], run["load_phase"], run["load_window"]) == ("token_ids", "together", "span")
    assert run["requests_ok"] == 6 and run["requests_outside_window"] == 0
    reqs = store.load_requests(tmp_path, "load").sort("t_send_s")
    measured = reqs.slice(2)
    # the window ends at the last measured completion (its stream's end); the stored requests keep its last token
    # (e2e), which the stream's end follows by its closing read: under make test's load once 5.6 ms later, not 2 ms
    last_token = (measured["t_send_s"] + measured["e2e_ms"] / 1000).max() - measured["t_send_s"][0]
    assert last_token - 1e-6 <= run["window_s"] <= last_token + 0.05
    assert "window from first send to last completion" in run["notes"] and "together phase" in run["notes"]


def test_a_stored_text_load_point_as_decoded_sends_the_decoded_ids_and_records_it(tmp_path):
    """text_lengths: decoded (SGLang's benchmark's random-ids) reaches the run's prompts (kvlab.rows.prompts_for)
    and its RUNS row; at its default (exact) the texts are re-encoded to length and the column says exact."""
    from kvlab import rows
    from kvlab.tinymodel import ensure_tiny_model

    folder = ensure_tiny_model()
    workload = {
        "kind": "fixed_batch",
        "batch_size": 4,
        "context_tokens": 64,
        "output_tokens": 4,
        "load": {"concurrency": 2, "prompt_form": "text", "text_lengths": "decoded"},
    }
    res, _ = _sweep(tmp_path, workload, FixtureConfig(), engine={"model": str(folder), "max_model_len": 2048})
    assert res.ok == 1
    run = store.load_runs(tmp_path).row(0, named=True)
    assert (run["prompt_form"], run["load_text_lengths"]) == ("text", "decoded")
    assert "text as decoded" in loads.conditions_label([run])
    assert run["notes"].endswith("prompts as text as decoded (lengths vary)")
    (spec_run,) = expand(ExperimentSpec.load(tmp_path / "load.yaml"))
    vocab = rows.vocab_size(spec_run)
    ids = spec_run.workload.generate(vocab, seed=spec_run.workload.seed * 1000 + spec_run.repeat)
    sent = rows.prompts_for(spec_run, vocab)
    assert [p.text for p in sent] == [p.text for p in loads.as_text(ids, folder / "tokenizer.json", exact=False)]
    assert [p.text for p in sent] != [p.text for p in loads.as_text(ids, folder / "tokenizer.json")]


SGLANG_IDS = Path(__file__).parent / "fixtures" / "peers" / "sglang_random_ids.json"


def test_sglangs_draws_give_its_own_random_ids_prompts_and_gaps():
    """load.draws: random_ids against what SGLang 0.5.23's own code drew for two seeds on the tiny model
    (tests/fixtures/peers/sglang_random_ids.json): the very texts, so the very server lengths, and the very gaps."""
    import json

    from tokenizers import Tokenizer

    from kvlab.tinymodel import ensure_tiny_model

    folder = ensure_tiny_model()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab_size(with_added_tokens=False)
    for case in json.loads(SGLANG_IDS.read_text())["cases"]:
        n, length = case["num_prompts"], case["input_len"]
        ids, schedule = fixed_batch.random_ids_draws(
            n, length, case["output_len"], vocab, case["seed"], case["rate_rps"]
        )
        assert [len(p.token_ids) for p in ids] == [length] * n and {p.max_tokens for p in ids} == {case["output_len"]}
        assert [p.shared_prefix_tokens for p in ids] == [0] * n
        # consecutive ids from each prompt's own offset, the i-th shifted by i
        assert all(np.all(np.diff(np.array(p.token_ids)) % vocab == 1) for p in ids)
        texts = [p.text for p in loads.as_text(ids, folder / "tokenizer.json", exact=False)]
        assert texts == case["texts"]
        assert [len(tok.encode(t).ids) for t in texts] == case["server_prompt_tokens"]
        assert schedule.offsets == pytest.approx([0.0, *np.cumsum(case["gaps_s"][: n - 1])], abs=1e-12)
        assert len(case["gaps_s"]) == n and schedule.tail_s == pytest.approx(case["gaps_s"][-1], abs=1e-12)
    assert [c["server_prompt_tokens"] for c in json.loads(SGLANG_IDS.read_text())["cases"]] == [
        [247, 256, 256, 264],
        [63, 64, 67],
    ]
    ids, schedule = fixed_batch.random_ids_draws(3, 8, 2, 512, seed=1)
    assert schedule is None and [p.token_ids[0] for p in ids] == [
        p.token_ids[0] for p in fixed_batch.random_ids_draws(3, 8, 2, 512, seed=1, rate_rps=9.0)[0]
    ]  # the gaps come after the prompts' draws: a rate changes no prompt


def test_sglangs_draws_are_a_fixed_batch_option_of_exponential_drawn_gaps_left_out_of_the_key_at_kvlabs():
    from kvlab.tinymodel import ensure_tiny_model

    load = {"concurrency": 2}
    fb = {"kind": "fixed_batch", "batch_size": 4, "context_tokens": 64, "output_tokens": 4}
    tiny = {"engines": {"vllm": {**ENGINE, "url": "http://127.0.0.1:9", "model": str(ensure_tiny_model())}}}

    def local(workload: dict) -> ExperimentSpec:
        return ExperimentSpec.model_validate(spec(workload).model_dump() | tiny)

    keys = {
        expand(local(fb | {"load": load | extra}))[0].key for extra in ({}, {"draws": "kvlab"}, {"draws": "random_ids"})
    }
    assert len(keys) == 2  # kvlab's draws, the default, leave the key as it was
    with pytest.raises(ValueError, match="burstiness 1"):
        loads.LoadSpec(rate_rps=2.0, burstiness=0.5, draws="random_ids")
    with pytest.raises(ValueError, match="not scaled"):
        loads.LoadSpec(rate_rps=2.0, arrivals="scaled", draws="random_ids")
    with pytest.raises(ValueError, match="kind fixed_batch, not 'shared_prefix'"):
        expand(local(SHARED | {"load": load | {"draws": "random_ids"}}))
    with pytest.raises(ValueError, match="distinct_prompts false is not one"):
        spec(fb | {"distinct_prompts": False, "load": load | {"draws": "random_ids"}})
    remote = {"engines": {"vllm": {**ENGINE, "url": "http://127.0.0.1:9", "model": "org/remote-model"}}}
    with pytest.raises(
        SpecError, match=r"workload\.load\.draws: 'random_ids' .* tokenizer\.json, which engines\.vllm\.model"
    ):
        expand(ExperimentSpec.model_validate(spec(fb | {"load": load | {"draws": "random_ids"}}).model_dump() | remote))


def test_a_stored_open_loop_with_sglangs_draws_sends_its_prompts_on_its_schedule_and_records_it(tmp_path):
    from kvlab import rows
    from kvlab.tinymodel import ensure_tiny_model

    folder = ensure_tiny_model()
    workload = {
        "kind": "fixed_batch",
        "batch_size": 5,
        "prompt_tokens": 64,
        "output_tokens": 4,
        "seed": 1044,  # its gap after the last send (223 ms) outlasts the last request by far
        "load": {
            "rate_rps": 20.0,
            "prompt_form": "text",
            "text_lengths": "decoded",
            "draws": "random_ids",
            "window": "span",
        },
    }
    res, _ = _sweep(tmp_path, workload, FixtureConfig(), engine={"model": str(folder), "max_model_len": 2048})
    assert res.ok == 1
    run = store.load_runs(tmp_path).row(0, named=True)
    assert (run["prompt_form"], run["load_text_lengths"], run["load_draws"]) == ("text", "decoded", "random_ids")
    assert loads.conditions_label([run]).startswith(
        "text prompts (tokenised by the server), text as decoded (the server's lengths vary), prompts and gaps drawn "
        "as a peer's random-ids dataset draws them"
    )
    assert run["notes"].endswith("; prompts and gaps drawn as a peer's random-ids dataset draws them")
    (spec_run,) = expand(ExperimentSpec.load(tmp_path / "load.yaml"))
    ids, schedule = fixed_batch.random_ids_draws(5, 64, 4, rows.vocab_size(spec_run), 1044, 20.0)
    due = schedule.offsets
    sent = rows.prompts_for(spec_run, rows.vocab_size(spec_run))
    assert [p.text for p in sent] == [p.text for p in loads.as_text(ids, folder / "tokenizer.json", exact=False)]
    reqs = store.load_requests(tmp_path, "load").sort("request_index")
    at = np.array(reqs["t_send_s"]) - reqs["t_send_s"][0]
    assert np.all(at >= np.array(due) - 0.002) and np.all(at - np.array(due) < 0.05)  # its schedule, not kvlab's
    assert store.load_runs(tmp_path).select("load_draws").dtypes == [pl.String]
    # the span window lasts at least the gap drawn after the last send, as SGLang's benchmark's duration does
    # (the window ends at a request's stream end, a moment after its last token: t_last is what RUNS keeps)
    last_token = (np.array(reqs["t_send_s"]) + np.array(reqs["e2e_ms"]) / 1000 - reqs["t_send_s"][0]).max()
    end = due[-1] + schedule.tail_s  # this seed's gap outlasts the last request, so the window must reach it
    assert end > last_token + 0.01 and "end of the gap drawn after the last send" in run["notes"]
    assert run["window_s"] == pytest.approx(end, abs=1e-9)


def test_a_tokenizer_json_is_parsed_once_per_file_and_version(tmp_path):
    """kvlab.load.tokenizer_of: every run of a sweep with text prompts or random_ids draws asks for the same file;
    it is parsed once, and again only when the file changes."""
    import os
    import shutil

    from kvlab.tinymodel import ensure_tiny_model

    path = tmp_path / "tokenizer.json"
    shutil.copy(ensure_tiny_model() / "tokenizer.json", path)
    first = loads.tokenizer_of(path)
    assert loads.tokenizer_of(str(path)) is first and first.get_vocab_size(with_added_tokens=False) == 512
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert loads.tokenizer_of(path) is not first
