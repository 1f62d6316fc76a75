"""Engine-choice studies: decision tree branches, reasoning split on the SSE fixture, and real vLLM prefix-cache runs."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import polars as pl
import psutil
import pytest
from tests.support.sse_fixture import FixtureConfig, SSEServer
from test_runner import engine_processes

from kvlab import guide, reasoning_tokens, store, workloads
from kvlab.client import run_requests
from kvlab.experiment import ExperimentSpec
from kvlab.studies.engine_choice import frames as engine_choice_frames
from kvlab.studies.prefix_sharing import frames as prefix_sharing_frames
from kvlab.studies import sharing_frames

# ----------------------------------------------------------------------------- decision tree


@pytest.mark.parametrize(
    ("kwargs", "engine", "answers"),
    [
        (dict(shared_prefix=True, fixed_context_fraction=0.3), "sglang", ["yes", "yes (30%)"]),
        (dict(shared_prefix=True, fixed_context_fraction=0.9), "sglang", ["yes", "yes (90%)"]),
        (
            dict(shared_prefix=True, fixed_context_fraction=0.29, deepseek_family=True),
            "sglang",
            ["yes", "no (29%)", "yes"],
        ),
        (
            dict(shared_prefix=True, fixed_context_fraction=0.1, deepseek_family=False),
            "vllm",
            ["yes", "no (10%)", "no"],
        ),
        (dict(shared_prefix=False, concurrency=100), "vllm", ["no", "yes (100)"]),
        (
            dict(shared_prefix=False, concurrency=99, mixed_hardware_or_frequent_model_changes=True),
            "vllm",
            ["no", "no (99)", "yes"],
        ),
        (
            dict(shared_prefix=False, concurrency=8, priority="throughput"),
            "sglang",
            ["no", "no (8)", "no", "throughput"],
        ),
        (dict(shared_prefix=False, concurrency=8, priority="stability"), "vllm", ["no", "no (8)", "no", "stability"]),
        # questions off the path do not matter
        (
            dict(shared_prefix=False, concurrency=500, deepseek_family=True, priority="throughput"),
            "vllm",
            ["no", "yes (500)"],
        ),
    ],
)
def test_decision_tree_every_branch(kwargs, engine, answers):
    rec = guide.decision_tree(**kwargs)
    assert rec.engine == engine
    assert [a for _, a in rec.path] == answers
    assert rec.strength == ("equal" if answers[-1] == "no" and kwargs.get("shared_prefix") else "clear")


def test_decision_tree_rejects_bad_inputs():
    with pytest.raises(ValueError, match="fixed_context_fraction"):
        guide.decision_tree(True, 1.5)
    with pytest.raises(ValueError, match="priority"):
        guide.decision_tree(False, priority="speed")
    with pytest.raises(ValueError, match="concurrency"):
        guide.decision_tree(False, concurrency=0)


def test_user_workload_families_and_tree():
    assert guide.UserWorkload(model="DeepSeek-R1").deepseek_family()
    assert not guide.UserWorkload(model="Llama-3.1-70B").deepseek_family()
    assert guide.UserWorkload(shared_fraction=0.2, model="DeepSeek-R1").tree().engine == "sglang"


def test_document_examples_are_read_from_the_shipped_experiments():
    got = {label.split(" · ")[0]: w for label, w in guide.document_examples()}
    rag, cls, r1 = got["1"], got["2"], got["3"]
    # last turn: document 8,192 + 3 questions × 64 + 2 answers × 256, then its own 256-token answer
    assert (rag.context_tokens, rag.concurrency, rag.tp) == (8192 + 3 * 64 + 3 * 256, 32, 1)
    assert rag.shared_fraction == pytest.approx(8192 / (8192 + 3 * 64 + 2 * 256))
    assert (cls.context_tokens, cls.shared_fraction, cls.concurrency, cls.tp, cls.dcp) == (128 + 10, 0.0, 256, 4, 4)
    assert (r1.context_tokens, r1.shared_fraction, r1.concurrency) == (256 + 4096, 0.0, 32)
    assert r1.deepseek_family() and not rag.deepseek_family()
    assert [w.tree().engine for w in (rag, cls, r1)] == ["sglang", "vllm", "vllm"]  # r1: the tree, as written


def test_experiment_workload_names_the_experiment_with_an_unknown_model(tmp_path):
    from kvlab.paths import EXPERIMENTS_DIR

    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "gpu_reasoning_r1.yaml")
    engines = {k: e.model_copy(update={"model": "acme/Unknown-7B"}) for k, e in spec.engines.items()}
    with pytest.raises(KeyError, match="gpu_reasoning_r1.*acme/Unknown-7B"):
        guide.experiment_workload(spec.model_copy(update={"engines": engines}))


def test_evidence_names_the_contradicted_premise():
    w = guide.UserWorkload(shared_fraction=0.5, concurrency=16, model="Llama-3.1-8B")
    sharing = pl.DataFrame(
        {
            "experiment": ["e"] * 2,
            "hardware": ["CPU"] * 2,
            "engine": ["vllm"] * 2,
            "prefix_caching": [True, False],
            "shared_fraction": [0.5, 0.5],
            "cache_hit_rate": [0.45, 0.0],
            "ideal_hit_rate": [0.47, 0.47],
            "batch_time_s": [1.0, 1.5],
        }
    )
    from kvlab.perfmodel import published_fit

    ev = guide.from_evidence(w, published_fit(), sharing, pl.DataFrame())
    # GQA at TP8: DCP changes nothing; one engine measured: nothing decides, and the guide follows the tree
    assert (ev.engine, ev.decided_by, ev.factors[0].favours) == ("sglang", "tree", None)
    from kvlab.studies.engine_choice.words import recommendation_sentence

    why = recommendation_sentence(w, w.tree(), ev, sharing.to_dicts())
    assert "assumes vLLM shares no prefixes" in why and "45%" in why


def test_threshold_verdicts():
    f = [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9]
    smooth = pl.DataFrame({"shared_fraction": f, "time_saved": [0.6 * x for x in f]})
    step = pl.DataFrame({"shared_fraction": f, "time_saved": [0.0, 0.0, 0.01, 0.4, 0.45, 0.5, 0.55]})
    assert prefix_sharing_frames.sharing_threshold(smooth).verdict == "smooth"
    assert prefix_sharing_frames.sharing_threshold(smooth).first_fraction == 0.2
    assert prefix_sharing_frames.sharing_threshold(step).verdict == "threshold"
    assert prefix_sharing_frames.sharing_threshold(smooth.head(2)).verdict == "no data"


# ----------------------------------------------------------------------------- reasoning split (SSE fixture)


def _chat_batch(cfg: FixtureConfig, n: int = 3):
    prompts = workloads.reasoning.prompts(n, max_tokens=8)
    with SSEServer(cfg) as srv:
        return asyncio.run(run_requests(srv.url, "m", prompts, keep_text=True))


def test_reasoning_parser_stream_is_split_by_chunks_and_by_tokenizer():
    batch = _chat_batch(FixtureConfig(reasoning_chunks=5, tokens_per_chunk=1))
    records, method = reasoning_tokens.account(batch.records)
    assert method == "chunks"
    assert [r.reasoning_tokens for r in records] == [5, 5, 5]
    assert all(r.output_tokens - r.reasoning_tokens == 3 for r in records)  # answer tokens
    words = lambda text: len(text.split())  # noqa: E731  (the fixture's tokens are ' t0', ' t1', ...)
    records, method = reasoning_tokens.account(batch.records, words)
    assert method == "tokenizer" and [r.reasoning_tokens for r in records] == [5, 5, 5]


def test_usage_reasoning_count_wins():
    batch = _chat_batch(FixtureConfig(reasoning_chunks=5))
    rec = dataclasses.replace(batch.records[0], reasoning_tokens=6)
    assert reasoning_tokens.split_record(rec) == reasoning_tokens.Split(6, 2, "usage")


def test_think_tags_in_text_are_split_without_a_parser():
    batch = _chat_batch(FixtureConfig(reasoning_chunks=0))
    rec = dataclasses.replace(batch.records[0], text="<think> t0 t1 t2 t3 t4 t5</think> t6 t7")
    words = lambda text: len(text.split())  # noqa: E731
    assert reasoning_tokens.split_record(rec, words) == reasoning_tokens.Split(6, 2, "tokenizer")
    s = reasoning_tokens.split_record(rec)  # no tokenizer: share of characters
    assert s.method == "chars" and s.reasoning_tokens + s.answer_tokens == 8 and s.reasoning_tokens > 4


def test_split_think():
    assert reasoning_tokens.split_think("<think>plan it</think>The answer") == ("plan it", "The answer")
    assert reasoning_tokens.split_think("plan it</think>answer") == ("plan it", "answer")  # template opened the tag
    assert reasoning_tokens.split_think("  <think>still thinking") == ("still thinking", "")
    assert reasoning_tokens.split_think("no tags here") == ("", "no tags here")


def test_failed_request_has_no_split():
    batch = _chat_batch(FixtureConfig(http_status=500), n=1)
    assert reasoning_tokens.split_record(batch.records[0]) == reasoning_tokens.Split(None, None, "none")


def test_tiny_model_tokenizer_counts(tiny_model):
    count = reasoning_tokens.local_token_counter(tiny_model)
    assert count("") == 0 and count("hello world") >= 1


# ----------------------------------------------------------------------------- real vLLM


@pytest.mark.engine
def test_repeats_do_not_hit_each_others_cache_by_the_servers_counters(real_vllm):
    """No dev mode, no cache reset between runs: each run's own cache_salt keeps it from an earlier run's cache. The
    90%-shared point measured three times on one server (once in the studies, twice as repeats, the same prompts
    where the same point repeats): the server's hit counter equals the client's per-request count and is the same
    for every run, as a first run's; a run that reused an earlier run's prefix would count its first request's
    prefix as hits too."""
    runs = store.load_runs(real_vllm.data).filter(pl.col("prefix_caching") & (pl.col("mode") == "shared_prefix"))
    (shared,) = runs.filter(pl.col("experiment") == "repeats")["shared_prefix_tokens"].unique()
    point = runs.filter(pl.col("shared_prefix_tokens") == shared).sort("experiment", "repeat")
    assert point.select("experiment", "repeat").rows() == [("repeats", 0), ("repeats", 1), ("studies", 0)]
    hits = point["server_prefix_cache_hits"].to_list()
    assert hits == point["cached_prompt_tokens"].to_list()
    assert hits[0] > 0 and len(set(hits)) == 1, hits  # 7 of 8 requests reuse the first one's prefix, in every run
    assert all("per-run cache_salt (vLLM)" in n for n in point["notes"].to_list())


@pytest.mark.engine
def test_prefix_cache_multi_turn_and_high_concurrency_on_real_vllm(real_vllm):
    """The studies' runs of the shared sweep: shared fractions, multi-turn and 128 in flight, with prefix caching
    on and off; the cache-off server started while the cache-on one did and stayed paused while its runs were
    measured."""
    tmp_path, res, seen, tag = real_vllm.data, real_vllm.result, real_vllm.seen, real_vllm.tag
    assert (res.experiments["studies"].ok, res.failed, res.server_starts) == (10, 0, 2)
    # overlapped starts: while the first group ran, the second group's engine existed, every process of it stopped
    # (the cache-on group holds the four small experiments' seven runs too); then the first's was stopped
    apc_runs = 12  # the studies' 5, the small experiments' 7
    assert [(c, states) for _, c, states in seen] == [(True, {psutil.STATUS_STOPPED})] * apc_runs + [(False, set())] * 5
    servers = json.loads((tmp_path / "runs" / "studies" / "manifest.json").read_text())["sweeps"][-1]["servers"]
    assert [s["start_overlapped"] for s in servers] == [True, True]
    assert servers[0]["paused_s"] == 0 and servers[1]["paused_s"] > 0
    assert 0 < servers[1]["ready_s"] < 300  # launch to ready, the pause left out
    runs = store.load_runs(tmp_path).filter(pl.col("experiment") == "studies")

    # shared prefix: hits rise with the shared fraction with caching on, and vanish with it off
    sharing = sharing_frames.prefix_sharing(runs)
    on = sharing.filter(pl.col("prefix_caching")).sort("shared_fraction")
    off = sharing.filter(~pl.col("prefix_caching")).sort("shared_fraction")
    assert on["shared_fraction"].to_list() == [0.0, 0.5, 0.9]
    rates = on["cache_hit_rate"].to_list()
    assert rates[0] == 0 and 0 < rates[1] < rates[2] <= on["ideal_hit_rate"][2] + 1e-9
    assert rates[2] > 0.6  # 7 of 8 requests reuse ~90% of their prompt, in whole blocks
    assert off["cache_hit_rate"].to_list() == [0.0, 0.0, 0.0]
    sp = runs.filter(pl.col("mode") == "shared_prefix")
    # the server's hit counter and the per-request usage report agree exactly
    assert sp["server_prefix_cache_hits"].to_list() == sp["cached_prompt_tokens"].to_list()
    assert sp.filter(~pl.col("prefix_caching"))["server_prefix_cache_hits"].sum() == 0
    # no dev mode: each run with the cache on is isolated from the earlier ones by its own cache_salt (the hit
    # rate of 0 at shared fraction 0.0 above is that isolation, counted by the server), and its note says so
    for caching, note in sp.select("prefix_caching", "notes").iter_rows():
        assert (note is not None and "per-run cache_salt (vLLM)" in note) if caching else note is None

    # multi-turn: each turn reuses the previous turn's prompt (up to a partial block)
    by_turn = prefix_sharing_frames.multi_turn_by_turn(runs, store.load_requests(tmp_path))
    mt_on = by_turn.filter(pl.col("prefix_caching")).sort("turn")
    assert mt_on["turn"].to_list() == [0, 1, 2]
    prompts, cached = mt_on["prompt_tokens"].to_list(), mt_on["cached_tokens"].to_list()
    # (whole 128-token blocks: 1,056 and 1,104 prompt tokens both leave 1,024 reusable)
    assert cached[1] >= prompts[0] - 128 and cached[2] >= prompts[1] - 128 and cached[2] >= cached[1] > 0
    assert by_turn.filter(~pl.col("prefix_caching"))["cached_tokens"].sum() == 0

    # classification at 128 in flight: every request accounted for
    conc = engine_choice_frames.concurrency_study(runs)
    assert conc["in_flight"].to_list() == [128, 128]
    assert conc["requests_sent"].to_list() == [160, 160]
    assert (conc["requests_ok"] + conc["requests_failed"]).to_list() == [160, 160]
    assert conc["requests_failed"].to_list() == [0, 0]
    cl = runs.filter(pl.col("mode") == "classification")
    assert cl["served_output_tokens"].to_list() == [1600, 1600]
    assert not engine_processes(tag)
