"""The fault soak (benchmarks/fault_soak.py), seeded and fast: 200 requests in 10 runs through the runner and client
against the SSE fixture serving every plain fault it knows, and 300 in 3 runs against its hostile modes (an endless
stream, a drip, 10^6 chunks, a redirect); no engine. Each run records the client's event-loop lag (issue 56: on a busy
machine a starved client must show as such), printed with the figures."""

from __future__ import annotations

from benchmarks import fault_soak
from kvlab import runner
from tests.support.sse_fixture import FAULTS, HOSTILE_FAULTS


def test_a_fault_soak_ends_every_request_ok_or_classified_and_loses_no_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "ENGINE_DEATH_WAIT_S", 0.0)  # the fixture never dies: no need to wait for it
    raw = fault_soak.soak(tmp_path, runs=10, batch=20, fault_rate=0.3, metrics_fault_rate=0.2, seed=0)
    with capsys.disabled():  # the figures, in the test log
        print(
            f"\nfault soak: {raw['requests_stored']} requests in {raw['runs_stored']} runs, {raw['wall_s']:.1f} s; "
            f"faults drawn {raw['faults_drawn']}; outcomes {raw['request_outcomes']}; run causes {raw['run_causes']}; "
            f"/metrics faults {raw['metrics_faults']}; client loop lag up to {raw['client_loop_lag_max_ms']:.0f} ms"
        )
    assert fault_soak.problems(raw) == []
    assert raw["escaped"] is None and raw["requests_stored"] == 200 and raw["runs_stored"] == 10
    assert set(raw["faults_drawn"]) == set(FAULTS) - set(HOSTILE_FAULTS)  # every plain fault served at least once
    assert set(raw["metrics_faults"]) == {"garbage", "http_500"}
    assert {"http_error", "timeout"} <= set(raw["run_causes"])  # a stall fails its run as a hung engine would
    assert raw["request_outcomes"].get("flagged", 0) > 0 and raw["request_outcomes"]["ok"] > 100


def test_a_hostile_soak_ends_every_request_within_its_bounds_and_loses_no_run(tmp_path, monkeypatch, capsys):
    """Issues 40 and 56: 300 requests against the hostile modes, each ending ok or with its named cause (an endless
    stream and 10^6 chunks: oversized; a drip: timeout at its deadline, 2 s x (1 + 2) = 6 s; a 307: http_status, not
    followed), every run stored, and the process's peak RSS grows by less than 300 MiB."""
    monkeypatch.setattr(runner, "ENGINE_DEATH_WAIT_S", 0.0)
    raw = fault_soak.soak(tmp_path, runs=3, batch=100, fault_rate=0.25, metrics_fault_rate=0.0, seed=1, hostile=True)
    with capsys.disabled():
        print(
            f"\nhostile soak: {raw['requests_stored']} requests in {raw['runs_stored']} runs, {raw['wall_s']:.1f} s; "
            f"faults drawn {raw['faults_drawn']}; outcomes {raw['request_outcomes']}; run causes {raw['run_causes']}; "
            f"peak RSS {raw['rss_peak_before_mib']:.0f} -> {raw['rss_peak_mib']:.0f} MiB; "
            f"client loop lag up to {raw['client_loop_lag_max_ms']:.0f} ms"
        )
    assert fault_soak.problems(raw) == []
    assert raw["escaped"] is None and raw["requests_stored"] == 300 >= fault_soak.HOSTILE_REQUESTS
    assert raw["runs_stored"] == 3
    assert set(raw["faults_drawn"]) == set(HOSTILE_FAULTS)
    assert (
        raw["request_outcomes"]["oversized"] == raw["faults_drawn"]["endless"] + raw["faults_drawn"]["huge_chunk_count"]
    )
    assert raw["request_outcomes"]["timeout"] == raw["faults_drawn"]["drip"]
    assert raw["request_outcomes"]["http_status"] == raw["faults_drawn"]["redirect"]
    assert raw["rss_peak_mib"] - raw["rss_peak_before_mib"] < 300


def test_the_soak_sees_what_it_checks():
    """problems() reports a lost run, an unclassified request and outcomes that do not match the faults served."""
    run = {
        "key": "k",
        "status": "failed",
        "cause": "http_error",
        "requests_ok": 1,
        "requests_failed": 1,
        "requests_miscounted": 0,
        "stored_requests": 2,
        "expected": {"ok": 1, "dropped": 1},
        "got": {"ok": 1, "client": 1},
    }
    raw = {
        "escaped": None,
        "runs_planned": 2,
        "batch": 2,
        "served": 4,
        "requests_stored": 4,
        "runs_stored": 1,
        "result": {"planned": 2, "ok": 0, "failed": 1},
        "per_run": [run],
    }
    found = fault_soak.problems(raw)
    assert "run k: the client's event-loop lag was not recorded" in found
    assert not any("lag" in p for p in fault_soak.problems(raw | {"per_run": [run | {"client_loop_lag_ms": 0.0}]}))
    assert any(p.startswith("runs lost") for p in found)
    assert any("unforeseen exception: {'client'}" in p for p in found)
    assert any("do not match the faults served" in p for p in found)
    assert fault_soak.problems({"escaped": "KeyError: 'x'"}) == ["an exception escaped the sweep: KeyError: 'x'"]
