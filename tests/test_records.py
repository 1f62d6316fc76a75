"""The per-request metric definitions on hand-made records, and records as REQUESTS rows and a RUNS summary."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest

from kvlab import client
from kvlab.client import RequestRecord
from kvlab.schema import REQUESTS, RUNS
from kvlab import schema


def _record(index, t_send, chunk_times, n_out, *, status="ok", prompt=1000, cached=None, t0=0.0):
    t_first = chunk_times[0] if chunk_times else None
    t_last = chunk_times[-1] if chunk_times else None
    return RequestRecord(
        request_index=index,
        status=status,
        error=None if status == "ok" else "HTTP 500: boom",
        http_status=200 if status == "ok" else 500,
        prompt_tokens=prompt if status == "ok" else None,
        output_tokens=n_out,
        reasoning_tokens=None,
        cached_tokens=cached,
        chunks=len(chunk_times),
        t_send_s=t_send - t0,
        t_first_s=None if t_first is None else t_first - t0,
        t_last_s=None if t_last is None else t_last - t0,
        ttft_ms=client.ttft_ms(t_send, t_first),
        tpot_ms=client.tpot_ms(t_first, t_last, n_out),
        e2e_ms=client.e2e_ms(t_send, t_last),
        itl_max_ms=client.itl_max_ms(chunk_times),
        t_send=t_send,
        t_first=t_first,
        t_last=t_last,
        t_end=t_last or t_send,
        chunk_times=tuple(chunk_times),
        reasoning_chunks=0,
        t_first_answer=t_first,
        t_first_chunk=t_first,
        empty_chunks=0,
        requested_prompt_tokens=prompt,
        requested_output_tokens=n_out or 0,
        text=None,
        reasoning_text=None,
    )


def test_per_request_definitions_exact():
    # sent at 10.0, first text at 10.5, then 4 more chunks; server says 9 tokens (chunks carry 2 tokens)
    r = _record(0, 10.0, [10.5, 10.7, 10.9, 11.1, 11.3], 9)
    assert r.ttft_ms == pytest.approx(500.0)
    assert r.e2e_ms == pytest.approx(1300.0)
    assert r.tpot_ms == pytest.approx(800.0 / 8)  # tokens from usage, not chunks
    assert r.itl_max_ms == pytest.approx(200.0)
    assert client.chunk_gaps_ms([1.0, 1.5, 1.75]) == pytest.approx([500.0, 250.0])


def test_itl_is_per_network_read():
    """Chunks of one read share its stamp: they are one arrival, so ITL has no zero gaps from them."""
    times = [1.0, 1.0, 1.0, 1.25, 1.25, 1.75]  # three reads: 3 chunks, 2 chunks, 1 chunk
    assert client.itl_gaps_ms(times) == pytest.approx([250.0, 500.0])
    assert client.chunk_gaps_ms(times) == pytest.approx([0.0, 0.0, 250.0, 0.0, 500.0])  # per chunk, not ITL
    assert client.itl_max_ms(times) == pytest.approx(500.0)
    assert client.itl_gaps_ms([2.0, 2.0, 2.0]) == [] and client.itl_max_ms([2.0, 2.0]) is None  # one read: no ITL


def test_tpot_undefined_below_two_tokens_or_without_usage():
    assert client.tpot_ms(1.0, 1.0, 1) is None
    assert client.tpot_ms(1.0, 2.0, None) is None
    assert client.tpot_ms(None, 2.0, 5) is None
    assert client.tpot_ms(1.0, 2.0, 2) == pytest.approx(1000.0)
    assert client.itl_max_ms([1.0]) is None
    assert client.ttft_ms(1.0, None) is None and client.e2e_ms(None, 2.0) is None


def test_summarize_excludes_failures_from_latency_but_counts_them():
    recs = [
        _record(0, 0.0, [0.1, 0.2, 0.3], 3, cached=16),  # ttft 100, tpot 100, e2e 300
        _record(1, 0.0, [0.3, 0.4, 0.7], 3, cached=0),  # ttft 300, tpot 200, e2e 700
        _record(2, 0.0, [0.2], 1),  # ttft 200, tpot undefined, e2e 200
        _record(3, 0.0, [9.0, 9.5], 2, status="failed"),  # would skew every mean
    ]
    s = client.summarize(recs, batch_time_s=9.5)
    assert set(s) <= set(RUNS.names)
    assert s["ttft_mean_ms"] == pytest.approx(200.0)
    assert s["ttft_p99_ms"] == pytest.approx(200.0 + 0.98 * 100.0)  # numpy linear: 300 - (1-0.98)*100
    assert s["tpot_mean_ms"] == pytest.approx(150.0)
    assert s["e2e_mean_ms"] == pytest.approx(400.0)
    assert (s["requests_ok"], s["requests_failed"]) == (3, 1)
    assert s["served_prompt_tokens"] == 3000
    assert s["served_output_tokens"] == 3 + 3 + 1 + 2
    assert s["cached_prompt_tokens"] == 16
    assert s["batch_time_s"] == 9.5


def test_summarize_all_failed_and_no_usage_gives_nulls_not_zeros():
    recs = [dataclasses.replace(_record(i, 0.0, [], None, status="failed"), prompt_tokens=None) for i in range(3)]
    s = client.summarize(recs, batch_time_s=1.0)
    assert s["requests_ok"] == 0 and s["requests_failed"] == 3
    for k in (
        "ttft_mean_ms",
        "ttft_p99_ms",
        "tpot_mean_ms",
        "e2e_mean_ms",
        "served_prompt_tokens",
        "served_output_tokens",
        "cached_prompt_tokens",
    ):
        assert s[k] is None, k


def test_request_rows_fit_schema():
    recs = [_record(0, 1.0, [1.5, 2.0], 2, t0=1.0), _record(1, 1.2, [], None, status="failed", t0=1.0)]
    df = client.request_rows(recs, "run-1")
    assert df.columns == REQUESTS.names
    assert df.height == 2
    row = df.row(0, named=True)
    assert row["run_id"] == "run-1" and row["t_send_s"] == 0.0 and row["t_first_s"] == pytest.approx(0.5)
    assert row["ttft_ms"] == pytest.approx(500.0) and row["tpot_ms"] == pytest.approx(500.0)
    assert df.row(1, named=True)["status"] == "failed"
    assert client.request_rows([], "r").columns == REQUESTS.names


def test_summarize_percentiles_of_ttft_tpot_itl_e2e():
    recs = [_record(i, 0.0, [0.1 * (i + 1), 0.1 * (i + 1), 0.1 * (i + 1) + 0.05 * (i + 1)], 3) for i in range(5)]
    recs.append(_record(9, 0.0, [5.0, 6.0], 2, status="failed"))  # left out of every percentile
    s = client.summarize(recs, batch_time_s=1.0)
    ttfts = [100.0 * (i + 1) for i in range(5)]
    itls = [50.0 * (i + 1) for i in range(5)]  # one gap per request: its first read held two chunks
    for q in (50, 90, 99):
        assert s[f"ttft_p{q}_ms"] == pytest.approx(float(np.percentile(ttfts, q)))
        assert s[f"itl_p{q}_ms"] == pytest.approx(float(np.percentile(itls, q)))
        assert s[f"tpot_p{q}_ms"] == pytest.approx(float(np.percentile([x / 2 for x in itls], q)))
        assert s[f"e2e_p{q}_ms"] == pytest.approx(float(np.percentile([a + b for a, b in zip(ttfts, itls)], q)))
    assert set(s) <= set(RUNS.names)
    assert s["requests_within_slo"] is None and s["slo_ttft_ms"] is None  # no SLO stated: no goodput, not 0


def test_within_slo_and_goodput_count():
    fast = _record(0, 0.0, [0.1, 0.2, 0.3], 3)  # ttft 100, tpot 100
    slow_first = _record(1, 0.0, [0.5, 0.6, 0.7], 3)  # ttft 500
    slow_tokens = _record(2, 0.0, [0.1, 0.5, 0.9], 3)  # tpot 400
    one_token = _record(3, 0.0, [0.1], 1)  # no TPOT: meets a TPOT bound
    failed = _record(4, 0.0, [0.1, 0.2], 2, status="failed")
    no_usage = _record(5, 0.0, [0.1, 0.2], None)  # TPOT unknown: cannot be shown to meet it
    recs = [fast, slow_first, slow_tokens, one_token, failed, no_usage]
    s = client.summarize(recs, batch_time_s=2.0, slo={"ttft_ms": 200.0, "tpot_ms": 150.0})
    assert [client.within_slo(r, 200.0, 150.0) for r in recs] == [True, False, False, True, False, False]
    assert (s["requests_within_slo"], s["slo_ttft_ms"], s["slo_tpot_ms"]) == (2, 200.0, 150.0)
    assert client.summarize(recs, 2.0, slo={"ttft_ms": 200.0, "tpot_ms": None})["requests_within_slo"] == 4
    rates = schema.run_rates(pl.DataFrame([{**s, "served_output_tokens": 12}]))
    assert rates["goodput_requests_per_s"][0] == pytest.approx(1.0)
    assert rates["requests_per_s"][0] == pytest.approx(s["requests_ok"] / 2.0)
    assert rates["output_tokens_per_s"][0] == pytest.approx(6.0)


def test_run_rates_divide_by_the_window_under_a_load_and_leave_failed_runs_and_stated_figures_alone():
    rows = pl.DataFrame(
        [
            # a load point: 10 requests inside its 2.5 s window of a 4 s batch, 5 within the SLO
            {
                "source": "measured",
                "status": "ok",
                "batch_time_s": 4.0,
                "window_s": 2.5,
                "requests_ok": 10,
                "served_output_tokens": 40,
                "requests_within_slo": 5,
                "output_tokens_per_s": None,
            },
            # a fixed batch: 4 requests in 2 s, no SLO
            {
                "source": "measured",
                "status": "ok",
                "batch_time_s": 2.0,
                "window_s": None,
                "requests_ok": 4,
                "served_output_tokens": 64,
                "requests_within_slo": None,
                "output_tokens_per_s": None,
            },
            # a failed run has no batch time, so no rates, even under a load
            {
                "source": "measured",
                "status": "failed",
                "batch_time_s": None,
                "window_s": 1.5,
                "requests_ok": 3,
                "served_output_tokens": 12,
                "requests_within_slo": 3,
                "output_tokens_per_s": None,
            },
            # a published figure stated without counts keeps its value
            {
                "source": "published",
                "status": "ok",
                "batch_time_s": None,
                "window_s": None,
                "requests_ok": None,
                "served_output_tokens": None,
                "requests_within_slo": None,
                "output_tokens_per_s": 123.0,
            },
        ]
    )
    r = schema.run_rates(rows)
    assert r["requests_per_s"].to_list() == [4.0, 2.0, None, None]
    assert r["output_tokens_per_s"].to_list() == [16.0, 32.0, None, 123.0]
    assert r["goodput_requests_per_s"].to_list() == [2.0, None, None, None]
