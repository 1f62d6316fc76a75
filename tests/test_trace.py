"""The trace workload kind (kvlab.workloads.trace): exact lengths from hash ids, refusal of records whose ids do not
make their length, scaling that keeps the prefix structure, the replay schedule, and a stored trace run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from kvlab import runner, store
from kvlab.campaign import Campaign
from kvlab.experiment import ExperimentSpec, workload_spec
from kvlab.paths import ROOT
from kvlab.workloads import trace
from tests.support.sse_fixture import FixtureConfig, SSEServer

SLICE = "data/traces/mooncake_conversation_40.jsonl"


def write(tmp_path, *records, name="t.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def rec(ts, n_in, n_out, ids):
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def test_prompts_have_exactly_input_length_tokens_from_their_ids_blocks_the_last_one_cut(tmp_path):
    path = write(tmp_path, rec(0, 10, 3, [1, 2, 3]), rec(500, 6, 2, [1, 2]), rec(1500, 9, 1, [1, 9, 3]))
    recs = trace.read_trace(path, block_size=4)
    ps = trace.prompts(recs, 4, vocab_size=512, seed=7)
    b = {h: trace.block_tokens(h, 4, 512, seed=7).tolist() for h in (1, 2, 3, 9)}
    assert (
        [list(p.token_ids) for p in ps]
        == [
            b[1] + b[2] + b[3][:2],  # 10 tokens: two whole blocks and 2 of the third
            b[1] + b[2][:2],  # 6 tokens: the second block cut to the remainder
            b[1] + b[9] + b[3][:1],  # 9 tokens
        ]
    )
    assert [p.prompt_tokens for p in ps] == [10, 6, 9] and [p.max_tokens for p in ps] == [3, 2, 1]
    # reusable: the leading ids an earlier record sent; the cut block counts only its tokens
    assert [p.reusable_tokens for p in ps] == [0, 6, 4]
    assert [p.trace_line for p in ps] == [1, 2, 3]
    assert len({tuple(v) for v in b.values()}) == 4 and all(16 <= t < 512 for v in b.values() for t in v)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (rec(0, 13, 1, [1, 2, 3]), r"t.jsonl:2: 3 hash_ids x 4-token blocks = 12 tokens cannot cover input_length 13"),
        (rec(0, 4, 1, [1, 2]), r"t.jsonl:2: 2 hash_ids for input_length 4 at 4-token blocks: 1 would cover it"),
        ({"timestamp": 0, "input_length": 4, "hash_ids": [1]}, r"t.jsonl:2: no output_length"),
        (rec(0, 4, 0, [1]), r"t.jsonl:2: output_length must be an integer >= 1, got 0"),
        (rec(0, 4, 1, []), r"t.jsonl:2: hash_ids must be a non-empty list"),
        (rec(-1, 4, 1, [1]), r"t.jsonl:2: timestamp must be milliseconds >= 0"),
    ],
)
def test_a_record_whose_ids_do_not_make_its_length_is_refused_naming_its_line(tmp_path, record, message):
    path = write(tmp_path, rec(0, 4, 1, [7]), record)
    with pytest.raises(ValueError, match=message):
        trace.read_trace(path, block_size=4)


def test_a_line_that_is_not_json_or_goes_back_in_time_is_refused_naming_it(tmp_path):
    (tmp_path / "bad.jsonl").write_text(json.dumps(rec(0, 4, 1, [1])) + "\n\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:3: not JSON"):
        trace.read_trace(tmp_path / "bad.jsonl", 4)
    path = write(tmp_path, rec(900, 4, 1, [1]), rec(800, 4, 1, [2]), name="back.jsonl")
    with pytest.raises(ValueError, match=r"back.jsonl:2: timestamp 800 ms is before the line above's"):
        trace.read_trace(path, 4)


def test_the_csv_form_reads_as_the_jsonl_form(tmp_path):
    path = write(tmp_path, rec(0, 10, 3, [1, 2, 3]), rec(500, 6, 2, [1, 2]))
    (tmp_path / "t.csv").write_text("timestamp,input_length,output_length,hash_ids\n0,10,3,1 2 3\n500,6,2,1 2\n")
    from_csv, from_jsonl = trace.read_trace(tmp_path / "t.csv", 4), trace.read_trace(path, 4)
    assert [r.line for r in from_csv] == [2, 3]  # the file's lines, the header first
    assert [(r.timestamp_ms, r.input_length, r.output_length, r.hash_ids) for r in from_csv] == [
        (r.timestamp_ms, r.input_length, r.output_length, r.hash_ids) for r in from_jsonl
    ]


def test_a_scale_factor_divides_lengths_and_block_alike_so_the_shared_blocks_stay_shared(tmp_path):
    path = write(tmp_path, rec(0, 10, 3, [1, 2, 3]), rec(500, 6, 2, [1, 2]), rec(1500, 9, 1, [1, 9, 3]))
    w = workload_spec(kind="trace", batch_size=3, trace_file=path, block_size=4, scale_factor=2)
    assert [(r.input_length, r.output_length) for r in w.records] == [(5, 2), (3, 1), (5, 1)]
    ps = w.generate(512, seed=0)
    b = {h: trace.block_tokens(h, 2, 512, seed=0).tolist() for h in (1, 2, 3, 9)}
    assert [list(p.token_ids) for p in ps] == [b[1] + b[2] + b[3][:1], b[1] + b[2][:1], b[1] + b[9] + b[3][:1]]
    assert [p.reusable_tokens for p in ps] == [0, 3, 2]
    assert (w.prompt_tokens, w.output_tokens, w.total_tokens) == (5, 2, 7)
    with pytest.raises(ValueError, match=r"scale_factor \(3\) must divide block_size \(4\)"):
        workload_spec(kind="trace", batch_size=3, trace_file=path, block_size=4, scale_factor=3)


def test_the_replay_follows_the_traces_timestamps_times_time_scale_from_its_offset_and_window(tmp_path):
    path = write(tmp_path, *(rec(t, 4, 1, [i]) for i, t in enumerate([0, 1000, 1500, 4000, 9000])))
    w = workload_spec(kind="trace", batch_size=3, trace_file=path, block_size=4, offset=1, time_scale=0.5)
    assert w.replay_schedule().offsets == (0.0, 0.25, 1.5)
    assert [p.trace_line for p in w.generate(512, 0)] == [2, 3, 4]
    windowed = workload_spec(kind="trace", batch_size=4, trace_file=path, block_size=4, window_s=4)
    assert [r.line for r in windowed.records] == [1, 2, 3, 4]  # 4 s of trace time from the first: 0 to 4,000 ms
    with pytest.raises(ValueError, match=r"batch_size \(2\) must be the 4 records window_s 4 holds from record 0"):
        workload_spec(kind="trace", batch_size=2, trace_file=path, block_size=4, window_s=4)
    with pytest.raises(ValueError, match=r"batch_size \(6\) is more than the 5 records from record 0"):
        workload_spec(kind="trace", batch_size=6, trace_file=path, block_size=4)
    loaded = workload_spec(kind="trace", batch_size=3, trace_file=path, block_size=4, load={"concurrency": 2})
    assert loaded.replay_schedule() is None  # under a load, the load sends
    with pytest.raises(ValueError, match="not `concurrency`"):
        workload_spec(kind="trace", batch_size=3, trace_file=path, block_size=4, concurrency=2)


def test_the_shipped_slice_and_its_scaled_form_replay_the_same_prompts():
    full = trace.read_trace(SLICE)
    assert len(full) == 40 and full[-1].timestamp_ms == 12_000 and max(r.input_length for r in full) == 87_169
    scaled_file = ROOT / "data/traces/mooncake_conversation_40.scaled64.jsonl"
    assert scaled_file.read_text() == trace.scaled_lines(SLICE, 64)
    at64 = workload_spec(kind="trace", batch_size=40, trace_file=SLICE, scale_factor=64)
    pre = workload_spec(kind="trace", batch_size=40, trace_file=str(scaled_file), block_size=8)
    assert at64.generate(512, 3) == pre.generate(512, 3)
    ps = at64.generate(512, 3)
    assert [p.prompt_tokens for p in ps[:4]] == [106, 115, 114, 36]  # ceil(6758 / 64), ceil(7322 / 64), ...
    assert (sum(p.reusable_tokens for p in ps), sum(p.prompt_tokens for p in ps)) == (312, 7933)
    assert at64.total_tokens == 1370 and at64.trace_digest == trace.digest(SLICE)


def test_a_stored_trace_run_sends_exact_lengths_on_its_schedule_with_reusable_beside_cached(tmp_path):
    path = write(tmp_path, rec(0, 10, 3, [1, 2, 3]), rec(300, 6, 2, [1, 2]), rec(600, 9, 2, [1, 9, 3]))
    with SSEServer(FixtureConfig(cached_tokens=4)) as srv:
        raw = {
            "name": "tr",
            "hardware": "CPU (test)",
            "device": "cpu",
            "engines": {
                "vllm": {"name": "vllm", "launch": None, "model": "org/m", "max_model_len": 64, "url": srv.url}
            },
            "workload": {"kind": "trace", "batch_size": 3, "trace_file": path, "block_size": 4},
            "retry": {"max_attempts": 1, "retry_on": []},
        }
        (tmp_path / "tr.yaml").write_text(yaml.safe_dump(raw))
        res = Campaign(ExperimentSpec.load(tmp_path / "tr.yaml"), tmp_path).execute(runner.LocalExecutor())
    assert res.ok == 1
    assert [s.prompt_tokens for s in srv.served[1:]] == [10, 6, 9]  # after kvlab's warm-up request
    req = store.load_requests(tmp_path, "tr").sort("request_index")
    assert req["prompt_tokens"].to_list() == [10, 6, 9] and req["trace_line"].to_list() == [1, 2, 3]
    assert req["reusable_tokens"].to_list() == [0, 6, 4] and req["cached_tokens"].to_list() == [4, 4, 4]
    sends = np.array(req["t_send_s"].to_list())
    assert np.all(sends >= [0, 0.3 - 0.002, 0.6 - 0.002]) and np.all(sends - [0, 0.3, 0.6] < 0.1)
    run = store.load_runs(tmp_path).row(0, named=True)
    assert (run["mode"], run["reusable_prompt_tokens"], run["cached_prompt_tokens"]) == ("trace", 10, 12)
    assert (run["prompt_tokens"], run["output_tokens"], run["context_tokens"]) == (10, 3, 13)


def _trace_spec(tmp_path, experiment_scale, workload_scale) -> None:
    raw = {
        "name": "tr",
        "hardware": "CPU (test)",
        "device": "cpu",
        "scale_factor": experiment_scale,
        "engines": {
            "vllm": {"name": "vllm", "launch": None, "model": "org/m", "max_model_len": 16384, "url": "http://x"}
        },
        "workload": {"kind": "trace", "batch_size": 2, "trace_file": SLICE, "scale_factor": workload_scale},
    }
    (tmp_path / "tr.yaml").write_text(yaml.safe_dump(raw))
    return ExperimentSpec.load(tmp_path / "tr.yaml")


def test_a_trace_scaled_by_another_factor_than_its_experiments_is_refused(tmp_path):
    """The workload's scale_factor divides the trace's lengths; the experiment's labels every context: a trace scaled
    by 64 in an experiment that says 32 would be labelled at half its real length."""
    with pytest.raises(
        Exception,
        match=r"workload.scale_factor \(64\) divides the trace's lengths, but the "
        r"experiment's scale_factor \(32\)",
    ):
        _trace_spec(tmp_path, 32, 64)
    assert _trace_spec(tmp_path, 64, 64).scale_factor == 64
    assert _trace_spec(tmp_path, 64, 1).scale_factor == 64  # a trace file already scaled replays at factor 1


def test_cpu_trace_runs_on_the_capacity_studys_servers_one_replay_and_one_search_each():
    """data/experiments/cpu_trace.yaml (dry, no engine): per engine and memory setting one replay on the trace's
    timestamps and one load search, on the very servers cpu_capacity and cpu_long_context start."""
    from kvlab.experiment import expand
    from kvlab.paths import EXPERIMENTS_DIR

    runs = expand(ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_trace.yaml"))
    capacity = expand(ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_capacity.yaml"))
    assert {r.server_key for r in runs} == {r.server_key for r in capacity}
    sends = sorted(
        (r.engine.name, r.engine.mem_util, r.workload.load is not None and r.workload.load.search is not None)
        for r in runs
    )
    assert sends == [(e, m, s) for e in ("sglang", "vllm") for m in (0.92, 0.95) for s in (False, True)]
    assert {(r.workload.scale_factor, r.workload.batch_size, r.workload.prompt_tokens) for r in runs} == {
        (64, 40, 1363)
    }
