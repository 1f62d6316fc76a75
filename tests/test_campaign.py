"""The campaign and its two executors without an engine: typed server records in the manifest, the overlapped
starts' hand-over, a failed start recorded for the rest of its group, the campaign's lifecycle around any
executor, and the Ray executor's records and manifest fields (no Ray needed: nothing is dispatched)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from kvlab import campaign, cluster, runner, store
from kvlab.campaign import Campaign, ServerRecord, SweepError, SweepResult
from kvlab.experiment import ExperimentSpec, expand
from tests.support.sse_fixture import SSEServer
from test_runner import tag_of, write_spec

#: The keys of a server in a manifest, as kvlab wrote them before servers were typed (plus ``node`` on Ray).
MANIFEST_SERVER_KEYS = {
    "server_key",
    "engine",
    "argv",
    "launched_by_kvlab",
    "url",
    "env",
    "experiments",
    "log",
    "started_at",
    "ready_s",
    "start_overlapped",
    "paused_s",
}


def _record(**kw) -> ServerRecord:
    base = dict(
        server_key="abc",
        engine="vllm",
        argv=["python", "-m", "x"],
        launched_by_kvlab=True,
        url=None,
        env={},
        experiments=["e"],
        log="server-abc-attempt1.log",
        started_at="2026-12-02T00:00:00+00:00",
        ready_s=1.5,
        start_overlapped=False,
        paused_s=0.0,
    )
    return ServerRecord(**base | kw)


def _manifest(data_dir: Path, name: str) -> dict:
    return json.loads((data_dir / "runs" / name / "manifest.json").read_text())


def test_a_server_record_is_the_manifest_entry_it_replaces():
    assert {f.name for f in fields(ServerRecord)} == MANIFEST_SERVER_KEYS | {"node", "kv_pool_tokens", "probe"}
    # no node key on a local sweep's, no probe key on a start that was not probed
    assert set(_record().as_dict()) == MANIFEST_SERVER_KEYS | {"kv_pool_tokens"}
    assert _record(node="n1").as_dict()["node"] == "n1"
    assert _record(probe={"k": 16}).as_dict()["probe"] == {"k": 16}


def test_a_server_shared_with_a_probed_experiment_is_probed_once_and_both_manifests_keep_it(tmp_path):
    """One server start serves study_a (no probe) and study_b (probe: true): the probe set goes once, after the
    warm-up; both manifests list the start with its probe; only the probed experiment lists its configurations."""
    from kvlab import probe

    with SSEServer() as srv:
        engine = {"launch": None, "url": srv.url, "model": "org/m"}
        a = write_spec(tmp_path, "study_a", engine=engine, workload={"batch_size": 1, "context_tokens": 256})
        b = write_spec(
            tmp_path,
            "study_b",
            engine=engine | {"served_model_name": tag_of(a)},
            workload={"batch_size": 2, "context_tokens": 256},
        )
        b.write_text(b.read_text() + "probe: true\n")
        res = Campaign([ExperimentSpec.load(a), ExperimentSpec.load(b)], tmp_path).execute(runner.LocalExecutor())
        texts = [s.prompt_tokens for s in srv.served]
    n = len(probe.PROBE_PROMPTS)
    assert (res.ok, res.server_starts) == (2, 1)
    assert texts == [16, *[len(p.split()) for p in probe.PROBE_PROMPTS], 240, 240, 240]  # warm-up, probe, runs
    for name in ("study_a", "study_b"):
        server = _manifest(tmp_path, name)["sweeps"][-1]["servers"][0]
        assert len(server["probe"]["outputs"]) == n and server["probe"]["configuration"]["engine_label"] == "vllm"
    assert "configurations" not in _manifest(tmp_path, "study_a")
    assert _manifest(tmp_path, "study_b")["configurations"] == [expand(ExperimentSpec.load(b))[0].server_key]


def test_two_experiments_on_one_external_server_share_one_typed_start(tmp_path):
    with SSEServer() as srv:
        engine = {"launch": None, "url": srv.url, "model": "org/m"}
        a = write_spec(tmp_path, "study_a", engine=engine, workload={"batch_size": 1, "context_tokens": 256})
        b = write_spec(
            tmp_path,
            "study_b",
            engine=engine | {"served_model_name": tag_of(a)},
            workload={"batch_size": 2, "context_tokens": 256},
        )
        seen = []
        local = runner.LocalExecutor()
        res = Campaign(
            [ExperimentSpec.load(a), ExperimentSpec.load(b)],
            tmp_path,
            on_run=lambda run, status: seen.append((run.experiment, status)),
        ).execute(local)
    assert isinstance(res, SweepResult) and (res.ok, res.failed, res.server_starts) == (2, 0, 1)
    assert seen == [("study_a", "ok"), ("study_b", "ok")]
    assert [type(s) for s in local.servers] == [ServerRecord]
    assert local.servers[0].experiments == ["study_a", "study_b"] and local.servers[0].launched_by_kvlab is False
    for name, other in (("study_a", "study_b"), ("study_b", "study_a")):
        entry = _manifest(tmp_path, name)["sweeps"][-1]
        assert [set(s) for s in entry["servers"]] == [MANIFEST_SERVER_KEYS | {"kv_pool_tokens"}]
        assert entry["servers"][0]["kv_pool_tokens"] is None  # an external server: kvlab reads no log of it
        assert entry["servers"][0]["experiments"] == ["study_a", "study_b"] and entry["swept_with"] == [other]
        assert (entry["ok"], entry["server_starts"]) == (1, 1)
        spec = json.loads((store.run_dirs(tmp_path, name)[0] / store.SPEC_FILE).read_text())
        assert spec["argv"] is None and spec["server_key"] == local.servers[0].server_key  # an external server's


def test_a_server_that_never_starts_is_not_relaunched_for_the_rest_of_its_group(tmp_path):
    path = write_spec(
        tmp_path,
        "down",
        engine={"launch": None, "url": "http://127.0.0.1:9", "model": "org/m", "startup_timeout_s": 1},
        repeats=2,
    )
    res = Campaign(ExperimentSpec.load(path), tmp_path).execute(runner.LocalExecutor())
    assert (res.ok, res.failed, res.server_starts, res.attempts) == (0, 2, 1, 1)
    runs = store.load_runs(tmp_path).sort("repeat")
    first = runs["run_id"][0]
    assert runs["attempts"].to_list() == [1, 0] and runs["failure_cause"].to_list() == ["timeout", "timeout"]
    assert runs["notes"][1] == (
        f"not launched: the same server configuration failed to start in every attempt of run {first} (timeout)"
    )
    servers = _manifest(tmp_path, "down")["sweeps"][-1]["servers"]
    assert len(servers) == 1 and servers[0]["launched_by_kvlab"] is False  # the failed start is listed too


class _Executor:
    """An executor that stores nothing and says what it was asked."""

    def __init__(self, fail_preflight: bool = False, fail_run: bool = False):
        self.fail_preflight, self.fail_run = fail_preflight, fail_run
        self.servers = [_record(experiments=["plain"], node="n1")]
        self.calls: list[str] = []

    def preflight(self, camp, todo):
        self.calls.append(f"preflight {len(todo)}")
        if self.fail_preflight:
            raise RuntimeError("refused")

    def run(self, camp, todo, result):
        self.calls.append(f"run {len(todo)}")
        result.server_starts = 1
        if self.fail_run:
            raise KeyboardInterrupt

    def manifest_extra(self, experiment):
        return {"extra": experiment}


def test_a_campaign_prepares_runs_its_executor_writes_the_manifest_and_releases_its_locks(tmp_path):
    spec = ExperimentSpec.load(write_spec(tmp_path, "plain", repeats=2))
    ex = _Executor()
    res = Campaign(spec, tmp_path).execute(ex)
    assert ex.calls == ["preflight 2", "run 2"] and (res.planned, res.skipped) == (2, 0)
    entry = _manifest(tmp_path, "plain")["sweeps"][-1]
    assert entry["extra"] == "plain" and entry["servers"][0]["node"] == "n1" and entry["server_starts"] == 1
    assert res.experiments["plain"].server_starts == 1  # counted from the executor's records
    free = Campaign(spec, tmp_path)
    free.prepare()  # the lock was released
    free.release()

    # an interrupted executor: the manifest still lists what it started; the lock is released
    with pytest.raises(KeyboardInterrupt):
        Campaign(spec, tmp_path).execute(_Executor(fail_run=True))
    assert len(_manifest(tmp_path, "plain")["sweeps"]) == 2
    # a refusal before anything launches: no manifest entry
    with pytest.raises(RuntimeError, match="refused"):
        Campaign(spec, tmp_path).execute(_Executor(fail_preflight=True))
    assert len(_manifest(tmp_path, "plain")["sweeps"]) == 2
    held = Campaign(spec, tmp_path)
    held.prepare()
    try:
        with pytest.raises(SweepError, match=rf"plain: another sweep is running it \(pid {os.getpid()} "):
            Campaign(spec, tmp_path).execute(_Executor())
    finally:
        held.release()


def test_a_campaign_stores_a_run_it_could_not_send_and_counts_its_attempts(tmp_path):
    spec = ExperimentSpec.load(write_spec(tmp_path, "unsent"))
    run = expand(spec)[0]
    camp = Campaign(spec, tmp_path, on_run=lambda r, status: seen.append((r.key, status)))
    seen: list = []
    result = SweepResult("unsent", 1, 0, experiments={"unsent": SweepResult("unsent", 1, 0)})
    lost = [runner.attempt_row(run, 1, runner.Failure("node_lost", "gone"), 2.0, None)]
    path = camp.record_unsent(run, "node_lost", lost, "its node was lost", result)
    assert (
        path == tmp_path / "runs" / "unsent" / run.key and result.run_dirs == [path] and seen == [(run.key, "failed")]
    )
    assert (result.failed, result.attempts, result.experiments["unsent"].attempts) == (1, 1, 1)
    row = store.load_runs(tmp_path).row(0, named=True)
    assert (row["status"], row["failure_cause"], row["attempts"], row["notes"]) == (
        "failed",
        "node_lost",
        1,
        "its node was lost",
    )
    assert "argv" not in json.loads((path / store.SPEC_FILE).read_text())  # as before: an unsent run has none


def test_the_free_space_check_lives_with_the_campaign(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "MIN_FREE_BYTES", 2**62)
    spec = ExperimentSpec.load(write_spec(tmp_path, "full"))
    with pytest.raises(SweepError, match="MiB free on its disk"):
        Campaign(spec, tmp_path).execute(_Executor())


# ----------------------------------------------------------------------------- overlapped starts


class _Adapter:
    def env_overrides(self, engine):
        return {"X": "1"}

    def kv_pool_tokens(self, log_text):
        return 4096 if "KV pool" in log_text else None


class _FakeServer:
    """A stand-in for EngineServer that logs what ServerStarts does to it."""

    made: list[_FakeServer] = []

    def __init__(self, engine, log_path: Path):
        self.engine, self.log_path, self.events = engine, log_path, []
        self.external, self.adapter = False, _Adapter()
        self.recorded_argv, self.ready_after_s, self.paused_s = ["engine", engine.name], 2.0, 0.0
        self.launched = self.paused = False
        _FakeServer.made.append(self)

    def start(self):
        self.launched = True
        self.events.append("start")

    def wait_ready(self):
        self.events.append("ready")

    def log_text(self, this_start=False):
        return "KV pool"

    def pause(self):
        self.paused = True
        self.events.append("pause")

    def resume(self):
        self.paused = False
        self.events.append("resume")

    def stop(self):
        self.events.append("stop")


def _two_groups(tmp_path):
    spec = ExperimentSpec.load(write_spec(tmp_path, "overlap", matrix={"engine.prefix_caching": [True, False]}))
    runs = expand(spec)
    assert len({r.server_key for r in runs}) == 2
    return runs


def test_the_next_groups_server_starts_beside_this_one_paused_and_is_handed_to_its_group(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "EngineServer", _FakeServer)
    _FakeServer.made = []
    first, second = _two_groups(tmp_path)
    with runner.ServerStarts(tmp_path, overlap=True) as starts:
        with starts.group(first, second):
            ahead = _FakeServer.made[-1]  # launched as the first group begins
            assert ahead.events == ["start"] and ahead.log_path.name == f"server-{second.server_key}-attempt1.log"
            server = starts.server(first, 1)
            assert server is not ahead
            starts.start(server, first)
            assert ahead.events == ["start", "pause"]  # paused once the first group's server is ready
        with starts.group(second, None):
            assert starts.server(second, 1) is ahead and ahead.events[-1] == "resume"
            starts.start(ahead, second)
            assert ahead.events == ["start", "pause", "resume", "ready"]  # launched early: not started again
    assert [(r.server_key, r.start_overlapped, r.argv, r.env) for r in starts.records] == [
        (first.server_key, True, ["engine", "vllm"], {"X": "1"}),
        (second.server_key, True, ["engine", "vllm"], {"X": "1"}),
    ]
    assert starts.current is starts.records[-1]
    assert "stop" not in ahead.events  # the executor stops the servers it used, not ServerStarts


def test_early_launches_never_used_are_stopped_on_leaving(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "EngineServer", _FakeServer)
    _FakeServer.made = []
    first, second = _two_groups(tmp_path)
    with pytest.raises(KeyboardInterrupt), runner.ServerStarts(tmp_path) as starts:
        with starts.group(first, second):
            raise KeyboardInterrupt  # before the first server started
    assert _FakeServer.made[0].events == ["start", "stop"]  # the second group's early launch

    _FakeServer.made = []
    with runner.ServerStarts(tmp_path) as starts:
        with starts.group(first, second):
            pass
        with starts.group(second, None):
            pass  # interrupted before its start: the server handed to it is stopped with the group
    assert _FakeServer.made[0].events == ["start", "resume", "stop"]

    _FakeServer.made = []
    with runner.ServerStarts(tmp_path, overlap=False) as starts, starts.group(first, second):
        pass
    assert _FakeServer.made == []  # sequential starts: nothing launched early


# ----------------------------------------------------------------------------- the Ray executor, without Ray


def test_the_ray_executor_reports_each_nodes_servers_and_runs(tmp_path):
    ex = cluster.RayExecutor("ray://head:10001")
    ex.nodes = {
        "n1": {"host": {"cpu": "a"}, "runs": [("a", "k1"), ("b", "k2")], "servers": [_record(experiments=["a", "b"])]},
        "n2": {"host": {"cpu": "b"}, "runs": [("a", "k3")], "servers": [_record(experiments=["a"])]},
    }
    assert [(s.node, s.experiments) for s in ex.servers] == [("n1", ["a", "b"]), ("n2", ["a"])]
    assert ex.nodes["n1"]["servers"][0].node is None  # the node is added to a copy
    assert ex.manifest_extra("b") == {
        "ray": {
            "address": "ray://head:10001",
            "nodes": [{"node_id": "n1", "host": {"cpu": "a"}, "runs": ["k2"], "server_starts": 1}],
        }
    }
    assert [n["server_starts"] for n in ex.manifest_extra("a")["ray"]["nodes"]] == [1, 1]


def test_a_cluster_campaign_with_nothing_pending_dispatches_nothing_and_needs_no_ray(tmp_path):
    with SSEServer() as srv:
        path = write_spec(tmp_path, "done", engine={"launch": None, "url": srv.url, "model": "org/m"})
        spec = ExperimentSpec.load(path)
        assert Campaign(spec, tmp_path).execute(runner.LocalExecutor()).ok == 1
    # Ray is not even imported: there is nothing to send
    again = Campaign(spec, tmp_path).execute(cluster.RayExecutor("auto"))
    assert (again.skipped, again.ok, again.server_starts) == (1, 0, 0)
    sweeps = _manifest(tmp_path, "done")["sweeps"]
    assert len(sweeps) == 2 and sweeps[-1]["ray"] == {"address": "auto", "nodes": []} and sweeps[-1]["servers"] == []


def sweep_doors(package: Path) -> list[str]:
    """Every function or method under ``package`` that hands back a sweep's result (its return annotation names
    SweepResult), as 'file: qualified name'."""
    import ast

    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        scopes = [("", tree)]
        while scopes:
            prefix, scope = scopes.pop()
            for node in ast.iter_child_nodes(scope):
                if isinstance(node, ast.ClassDef):
                    scopes.append((f"{prefix}{node.name}.", node))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if node.returns is not None and "SweepResult" in ast.unparse(node.returns):
                        found.append(f"{path.relative_to(package.parent)}: {prefix}{node.name}")
    return sorted(found)


def test_a_campaign_is_the_one_way_a_sweep_runs():
    """Local, on Ray, from the command or a test: every sweep is ``Campaign.execute(executor)``; no other function
    of kvlab returns a sweep's result (runner.sweep, runner.Sweep, cluster.sweep and cluster.execute are gone)."""
    from kvlab.paths import ROOT

    assert sweep_doors(ROOT / "kvlab") == [
        "kvlab/campaign.py: Campaign._execute",
        "kvlab/campaign.py: Campaign.execute",
    ]
    assert not [n for n in ("Sweep", "sweep") if hasattr(runner, n)] and not hasattr(cluster, "sweep")


def test_the_door_check_sees_another_entry_point(tmp_path):
    pkg = tmp_path / "kvlab"
    pkg.mkdir()
    (pkg / "runner.py").write_text(
        "class Sweep:\n    def execute(self) -> SweepResult: ...\n\n\n"
        "def sweep(specs) -> 'SweepResult': ...\n\n\ndef other() -> int: ...\n"
    )
    assert sweep_doors(pkg) == ["kvlab/runner.py: Sweep.execute", "kvlab/runner.py: sweep"]


def test_kvlab_sweep_runs_a_campaign_with_the_local_executor(tmp_path):
    """The command builds the Campaign and its executor itself: what it prints, and what it stores."""
    import subprocess
    import sys

    from kvlab.paths import ROOT

    with SSEServer() as srv:
        path = write_spec(tmp_path, "by_cli", engine={"launch": None, "url": srv.url, "model": "org/m"}, repeats=2)
        cmd = [sys.executable, "-m", "kvlab.cli", "sweep", str(path), "--data-dir", str(tmp_path)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "by_cli: 2 runs to do, 0 finished runs reused" in out.stderr
    assert "by_cli: 2 ok, 0 failed, 0 reused" in out.stderr and "1 server start, 2 attempts" in out.stderr
    assert "by_cli: 0 runs to do, 2 finished runs reused" in again.stderr and "0 server starts" in again.stderr
    sweeps = _manifest(tmp_path, "by_cli")["sweeps"]
    assert [(s["ok"], s["skipped"], len(s["servers"])) for s in sweeps] == [(2, 0, 1), (0, 2, 0)]
    assert "ray" not in sweeps[0]


def test_a_sweep_measures_a_quarantined_run_again_and_sets_aside_a_copied_folder_naming_both(tmp_path):
    """Issue 56, items 1 and 3: a re-sweep counted a corrupt and a truncated run among its "finished runs reused"
    and never measured them again. Now it moves each into quarantined/ with its reason beside it, measures its run
    again and says so; a copied run folder is set aside too, its warning naming both folders and the one kept."""
    import subprocess
    import sys

    from kvlab.paths import ROOT

    with SSEServer() as srv:
        path = write_spec(
            tmp_path,
            "again",
            engine={"launch": None, "url": srv.url, "model": "org/m"},
            workload={"context_tokens": 256},
            repeats=3,
        )
        spec = ExperimentSpec.load(path)
        assert Campaign(spec, tmp_path).execute(runner.LocalExecutor()).ok == 3
        exp = tmp_path / "runs" / "again"
        corrupt, truncated, copied = (exp / r.key for r in expand(spec))
        (corrupt / store.RUN_FILE).write_bytes(b"PAR1 not a parquet file PAR1")
        requests = (truncated / store.REQUESTS_FILE).read_bytes()
        (truncated / store.REQUESTS_FILE).write_bytes(requests[: len(requests) // 2])
        copy = exp / "backup-copy"
        shutil.copytree(copied, copy, symlinks=True)  # cp -a
        mtime = (copied / store.RUN_FILE).stat().st_mtime_ns
        cmd = [sys.executable, "-m", "kvlab.cli", "sweep", str(path), "--data-dir", str(tmp_path)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        again = Campaign(spec, tmp_path).execute(runner.LocalExecutor())
    said = " ".join(out.stderr.split())  # rich wraps long lines
    assert "again: 2 runs to do, 1 finished run reused" in said
    aside = exp / store.QUARANTINE_DIR
    for bad in (corrupt, truncated):
        assert f"run folder {bad} cannot be read, so it is not reused: {bad}/" in said
        assert f"moved to {aside / bad.name} (the reason beside it) and measured again" in said
        assert (aside / bad.name / store.RUN_FILE).is_file()  # moved, not deleted
        assert f"reason: {bad}/" in (aside / f"{bad.name}{store.REASON_SUFFIX}").read_text()
        assert store.check_run_dir(bad) is None  # measured again
    assert (
        f"duplicate run folder: {copy} holds run {copied.name} of again (measured), as {copied} does: {copied} is "
        f"kept (its folder name is its run id), this copy is not read; moved to {aside / copy.name}"
    ) in said
    assert (copied / store.RUN_FILE).stat().st_mtime_ns == mtime and (aside / copy.name).is_dir()
    assert (
        "again: 2 ok, 0 failed, 1 reused → "
        f"{exp}; 2 unreadable run folders not reused but measured again, 1 duplicate run folder (a copy of another's "
        f"run) not read: set aside in {aside}"
    ) in said
    first, entry, last = _manifest(tmp_path, "again")["sweeps"]
    assert (entry["ok"], entry["skipped"]) == (2, 1) and "quarantined" not in first and "quarantined" not in last
    assert [(q["folder"], q["kept"], q["moved_to"]) for q in entry["quarantined"]] == sorted(
        [
            (corrupt.name, None, f"quarantined/{corrupt.name}"),
            (truncated.name, None, f"quarantined/{truncated.name}"),
            ("backup-copy", copied.name, "quarantined/backup-copy"),
        ]
    )
    assert store.quarantined(tmp_path) == [] and store.load_runs(tmp_path).height == 3
    # the next sweep reuses all three and sets nothing aside
    assert (again.skipped, again.ok, again.quarantined) == (3, 0, [])


# ----------------------------------------------------------------------------- a full disk on the Ray path


class _RayTaskError(Exception):
    """Ray's: the error a task raised, its ``cause`` unpickled on the driver."""

    def __init__(self, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


def _stand_in_ray(monkeypatch):
    """A ``ray`` module that runs each group's task in this process (the node is "node-1"), its items and its
    error passed through pickle as Ray passes them to the driver."""
    import pickle
    import sys
    import types

    class Remote:
        def __init__(self, fn):
            self.fn = fn

        def options(self, **kw):
            return self

        def remote(self, specs, keys):
            def gen():
                try:
                    for item in self.fn(pickle.loads(pickle.dumps(specs)), keys):
                        yield pickle.loads(pickle.dumps(item))
                except Exception as exc:
                    raise _RayTaskError(pickle.loads(pickle.dumps(exc))) from None

            return gen()

    ray = types.ModuleType("ray")
    ray.exceptions = types.SimpleNamespace(RayTaskError=_RayTaskError)
    ray.is_initialized = lambda: True
    ray.nodes = lambda: [{"Alive": True, "Resources": {"CPU": 4.0}}]
    ray.get_runtime_context = lambda: types.SimpleNamespace(get_node_id=lambda: "node-1")
    ray.get = lambda ref: ref
    ray.cancel = lambda gen, force=False: None
    ray.remote = lambda **opts: Remote
    monkeypatch.setitem(sys.modules, "ray", ray)


def test_a_disk_full_error_travels_pickled_with_its_run_and_free_space(tmp_path):
    import pickle

    from kvlab.engines.base import Failure

    run = expand(ExperimentSpec.load(write_spec(tmp_path, "pickled")))[0]
    err = campaign.DiskFullError("disk full while storing ...", Failure("disk_full", "os error 28"), run, 1234)
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, campaign.DiskFullError) and isinstance(back, SweepError)
    assert (str(back), back.failure, back.run, back.free_bytes) == (str(err), err.failure, run, 1234)


@pytest.mark.parametrize("where", ["node", "driver"])
def test_a_disk_that_fills_up_in_a_cluster_campaign_stops_it_with_one_message_and_a_rerun_resumes(
    tmp_path, monkeypatch, where
):
    """ENOSPC while the second of three runs is stored: on the node, in its temporary folder (the run writer; the
    node's error comes back pickled inside Ray's task error), or on the driver, as the run is published. The
    campaign stops with one DiskFullError naming the run (and the node), nothing half-written is left, the run
    stored before stays, and the next cluster sweep resumes with the two left; ``kvlab sweep --ray`` says it in
    one message (exit 1)."""
    import errno

    from typer.testing import CliRunner

    from kvlab import cli

    _stand_in_ray(monkeypatch)
    with SSEServer() as srv:
        path = write_spec(
            tmp_path, "cluster_full", engine={"launch": None, "url": srv.url, "model": "org/m"}, repeats=3
        )
        spec = ExperimentSpec.load(path)
        keys = [r.key for r in Campaign(spec, tmp_path).pending()[0]]
        exp = tmp_path / "runs" / "cluster_full"

        def inject(m) -> None:
            seen = []
            if where == "node":
                import polars as pl

                real_parquet = pl.DataFrame.write_parquet

                def write_parquet(df, file, *a, **k):
                    if "kvlab-ray-" in str(file) and Path(file).name == store.REQUESTS_FILE:
                        seen.append(file)
                        if len(seen) == 2:  # the node's second run
                            Path(file).write_bytes(b"PAR1 half a file")
                            raise pl.exceptions.ComputeError(
                                "parquet: underlying IO error: No space left on device (os error 28)"
                            )
                    return real_parquet(df, file, *a, **k)

                m.setattr(pl.DataFrame, "write_parquet", write_parquet)
            else:
                real_publish = cluster.publish_dir

                def publish_dir(tmp, final):
                    seen.append(final)
                    if len(seen) == 2:  # the driver's second run
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final))
                    return real_publish(tmp, final)

                m.setattr(cluster, "publish_dir", publish_dir)

        with monkeypatch.context() as m:
            inject(m)
            with pytest.raises(campaign.DiskFullError) as err:
                Campaign(spec, tmp_path).execute(cluster.RayExecutor("auto"))
        said = " ".join(str(err.value).split())
        assert err.value.run.key == keys[1] and err.value.failure.cause == "disk_full"
        if where == "node":
            assert said.startswith(
                f"disk full on node node-1 while it stored run cluster_full/{keys[1]} in its temporary folder: "
            )
            assert "Nothing of it was published; 1 finished run" in said
        else:
            assert said.startswith(f"disk full while storing run cluster_full/{keys[1]}: ")
            assert "; 1 finished run in " in said and " is intact." in said
        assert "sweep again: it resumes from this run" in said
        assert store.finished_run_keys(exp) == {keys[0]}
        assert [p.name for p in exp.iterdir() if p.name.startswith(".")] == []  # nothing half-written
        sweeps = _manifest(tmp_path, "cluster_full")["sweeps"]
        assert (sweeps[-1]["ok"], sweeps[-1]["failed"]) == (1, 1)  # the run counted failed, not stored

        with monkeypatch.context() as m:  # the command: one message, exit 1, no traceback
            inject(m)
            res = CliRunner().invoke(cli.app, ["sweep", str(path), "--data-dir", str(tmp_path), "--ray", "auto"])
        out = " ".join(res.output.split())
        assert res.exit_code == 1, res.output
        assert out.count("cluster sweep stopped") == out.count("disk full") == 1 and "Traceback" not in res.output
        assert keys[2] in out  # it resumed: the second run stored, the disk full at the third
        assert store.finished_run_keys(exp) == set(keys[:2])

        again = Campaign(spec, tmp_path).execute(cluster.RayExecutor("auto"))  # space freed
    assert (again.skipped, again.ok, again.failed) == (2, 1, 0)
    assert store.finished_run_keys(exp) == set(keys)
