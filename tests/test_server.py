"""EngineServer: launch, readiness, classified startup failures, teardown and orphan reaping (fake and real vLLM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from kvlab.server import EngineServer, ServerError, free_port, read_api_key, reap_orphans, redact
from kvlab.experiment import EngineSpec
from kvlab.paths import ROOT

FAKE = Path(__file__).with_name("fake_engine.py")


def _fake_spec(**kw) -> EngineSpec:
    base = dict(
        name="vllm", launch=[sys.executable, str(FAKE)], model="org/fake", max_model_len=1024, startup_timeout_s=20
    )
    return EngineSpec(**(base | kw))


def _group_alive(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return out


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "servers"
    monkeypatch.setenv("KVLAB_STATE_DIR", str(d))
    return d


def test_redact_and_free_port():
    assert redact("x --api-key s3 --api-key=s3 a-s3-b", "s3") == "x --api-key *** --api-key=*** a-***-b"
    assert redact("api_key='s3'", None) == "api_key='s3'"
    assert 0 < free_port() < 65536


def test_read_api_key_is_the_one_reader(monkeypatch):
    monkeypatch.setenv("KVLAB_TEST_KEY", "k-42")
    assert read_api_key(_fake_spec(api_key_env="KVLAB_TEST_KEY")) == "k-42"
    assert read_api_key(_fake_spec()) is None
    monkeypatch.delenv("KVLAB_TEST_KEY")
    with pytest.raises(ValueError, match="environment variable 'KVLAB_TEST_KEY' is not set"):
        read_api_key(_fake_spec(api_key_env="KVLAB_TEST_KEY"))
    with pytest.raises(ValueError, match="give the API key through api_key_env"):
        _fake_spec(extra_args=["--api-key", "k-42"])


def test_an_engine_that_answers_health_before_its_warm_up_is_ready_only_after_it(tmp_path, registry):
    """SGLang's /health answers while its own warm-up request still runs: kvlab waits for its ready line, so
    that request never lands in a measured batch; a server that never prints it times out saying so."""
    t = time.monotonic()
    with EngineServer(_fake_spec(name="sglang", env={"FAKE_MODE": "warmup"}), tmp_path / "w.log") as srv:
        assert srv.ready_after_s >= 1.5 and time.monotonic() - t >= 1.5
        assert "fired up and ready to roll" in srv.log_text()
    with (
        pytest.raises(ServerError) as err,
        EngineServer(_fake_spec(name="sglang", startup_timeout_s=3, env={"FAKE_MODE": "silent"}), tmp_path / "n.log"),
    ):
        pass
    assert err.value.failure.cause == "timeout"
    assert "answered 200 but the log never said 'The server is fired up and ready to roll'" in str(err.value)
    # the log is appended to: the ready line of the earlier start in it is not this start's
    with (
        pytest.raises(ServerError) as err,
        EngineServer(_fake_spec(name="sglang", startup_timeout_s=3, env={"FAKE_MODE": "silent"}), tmp_path / "w.log"),
    ):
        pass
    assert err.value.failure.cause == "timeout" and "fired up" in (tmp_path / "w.log").read_text()
    # vLLM: /health is enough, so the same engine is ready long before its ready line (not a bound on the start-up
    # time, which a loaded machine stretches: the line is 20 s away and the start did not wait for it)
    with EngineServer(_fake_spec(env={"FAKE_MODE": "warmup", "FAKE_WARMUP_S": "20"}), tmp_path / "v.log") as srv:
        assert "fired up and ready to roll" not in srv.log_text()


def test_fake_server_lifecycle(tmp_path, registry):
    with EngineServer(_fake_spec(env={"FAKE_MODE": "ok"}), tmp_path / "s.log") as srv:
        assert srv.running() and srv.ready_after_s is not None
        assert list(registry.glob("*.json"))
        pgid = srv.pid
        assert len(_group_alive(pgid)) == 2  # server + its worker child
    assert not _group_alive(pgid)
    assert not list(registry.glob("*.json"))
    assert "fake engine argv" in (tmp_path / "s.log").read_text()


def test_stop_escalates_to_sigkill(tmp_path, registry):
    srv = EngineServer(_fake_spec(env={"FAKE_MODE": "stubborn"}), tmp_path / "s.log").start()
    srv.wait_ready()
    t = time.monotonic()
    srv.stop(grace_s=1)
    assert time.monotonic() - t < 10
    assert srv.exit_code == -signal.SIGKILL
    assert not _group_alive(srv.pid)


def test_startup_failure_is_classified(tmp_path, registry):
    srv = EngineServer(_fake_spec(env={"FAKE_MODE": "kvsmall"}), tmp_path / "s.log")
    srv.start()
    with pytest.raises(ServerError) as err:
        srv.wait_ready()
    assert err.value.failure.cause == "kv_cache_too_small"
    assert err.value.failure.fits_max_len == 896  # what vLLM said would fit in 1 MiB
    assert err.value.failure.exit_code == 1


def test_timeout_is_a_failure_and_cleans_up(tmp_path, registry):
    srv = EngineServer(_fake_spec(env={"FAKE_MODE": "hang"}, startup_timeout_s=1.5), tmp_path / "s.log")
    with pytest.raises(ServerError) as err:
        with srv:
            pass
    assert err.value.failure.cause == "timeout"
    assert not _group_alive(srv.pid)


def test_foreign_server_on_our_port_is_not_ready(tmp_path, registry):
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    foreign = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        srv = EngineServer(_fake_spec(env={"FAKE_MODE": "ok"}, port=foreign.server_port), tmp_path / "s.log")
        with pytest.raises(ServerError) as err:
            with srv:
                pass
        assert err.value.failure.cause == "crash"
        assert "Address already in use" in err.value.failure.detail
    finally:
        foreign.shutdown()


def test_api_key_never_recorded(tmp_path, registry, monkeypatch):
    import stat

    from kvlab.server import _group_members

    monkeypatch.setenv("KVLAB_TEST_KEY", "topsecret-123")
    spec = _fake_spec(name="sglang", env={"FAKE_MODE": "ok"}, api_key_env="KVLAB_TEST_KEY")
    srv = EngineServer(spec, tmp_path / "s.log")
    try:
        srv.start()
        # SGLang reads it from a --config YAML file of this user's only, never from the command line
        key_file = Path(srv.argv[srv.argv.index("--config") + 1])
        assert key_file.read_text() == 'api-key: "topsecret-123"\n'
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        srv.wait_ready()
        assert not key_file.exists()  # read at start-up, removed once the server is up
        assert not any("topsecret-123" in a for a in srv.argv)
        assert not any("topsecret-123" in " ".join(p.cmdline()) for p in _group_members(srv.pid))  # what ps shows
        assert "topsecret-123" not in " ".join(srv.recorded_argv)
        assert srv.headers == {"Authorization": "Bearer topsecret-123"}
        assert srv.api_key == "topsecret-123"
        kept = srv.recorded_log(tmp_path / "kept.log").read_text()  # the copy a run stores, server still up
        assert "topsecret-123" not in kept and 'fake engine config: api-key: "***"' in kept  # the fake read the key
        rec = next(registry.glob("*.json")).read_text()
        assert "topsecret-123" not in rec
    finally:
        srv.stop()
    assert "topsecret-123" not in (tmp_path / "s.log").read_text()  # the fake prints its config
    vsrv = EngineServer(_fake_spec(api_key_env="KVLAB_TEST_KEY"), tmp_path / "v.log")
    assert "topsecret-123" not in vsrv.argv  # vLLM reads VLLM_API_KEY instead
    assert vsrv._env()["VLLM_API_KEY"] == "topsecret-123"
    jsrv = EngineServer(_fake_spec(name="sglang-jax", api_key_env="KVLAB_TEST_KEY"), tmp_path / "j.log")
    assert "topsecret-123" in jsrv.argv  # sglang-jax reads it nowhere else (the dry run says so)
    assert "topsecret-123" not in " ".join(jsrv.recorded_argv)
    monkeypatch.delenv("KVLAB_TEST_KEY")
    with pytest.raises(ValueError, match="KVLAB_TEST_KEY"):
        EngineServer(spec, tmp_path / "x.log")


def test_a_key_file_that_cannot_be_created_new_stops_the_start(tmp_path, registry, monkeypatch):
    """The key file is created new: a file or link already at its path is never written through."""
    monkeypatch.setenv("KVLAB_TEST_KEY", "topsecret-123")
    srv = EngineServer(_fake_spec(name="sglang", api_key_env="KVLAB_TEST_KEY"), tmp_path / "s.log")
    target = tmp_path / "victim"
    target.write_text("keep")
    srv._key_file.symlink_to(target)
    try:
        with pytest.raises(FileExistsError):
            srv.start()
        assert target.read_text() == "keep"
    finally:
        srv._key_file.unlink(missing_ok=True)
        srv.stop()


def test_reap_orphans_only_kills_engines(tmp_path, registry):
    registry.mkdir(parents=True)
    # a harness that has exited, recorded as EngineServer records its owner: pid and start time (the pid alone can
    # be reused by then; make test's engine pass starts enough processes to wrap the pids within a run)
    dead_pid, dead_started = subprocess.run(
        [sys.executable, "-c", "import psutil; me = psutil.Process(); print(me.pid, me.create_time())"],
        capture_output=True,
        text=True,
    ).stdout.split()
    dead_owner = {"owner_pid": int(dead_pid), "owner_started": float(dead_started)}
    engine = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "vllm.entrypoints.fake"], start_new_session=True
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        # each engine's own temporary folder (what the engine's watchdog removes, unless it was killed too); a
        # record naming a folder kvlab did not make, or a link to one, has it left alone
        kept = tmp_path / "not-an-engine-folder"
        scratch = {engine.pid: tmp_path / "kvlab-engine-a1", other.pid: tmp_path / "kvlab-engine-link"}
        for folder in (kept, scratch[engine.pid]):
            folder.mkdir(mode=0o700)
            (folder / "ipc-socket").write_text("")
        scratch[other.pid].symlink_to(kept)
        for p in (engine, other):
            (registry / f"{p.pid}.json").write_text(
                json.dumps(
                    {
                        "pid": p.pid,
                        "pgid": p.pid,
                        **dead_owner,
                        "rendezvous": f"rendezvous-{p.pid}",
                        "scratch": str(scratch[p.pid]),
                    }
                )
            )
            (registry / f"rendezvous-{p.pid}").write_text("")  # torch's FileStore, left by a killed engine
        outside = tmp_path / "rendezvous-outside"  # a record that names a path: nothing outside the folder goes
        outside.write_text("")
        (registry / "path.json").write_text(
            json.dumps(
                {"pid": other.pid, "pgid": other.pid, **dead_owner, "rendezvous": str(outside), "scratch": str(kept)}
            )
        )
        # A live owner protects its servers.
        me = psutil.Process()
        (registry / "live.json").write_text(
            json.dumps({"pid": engine.pid, "pgid": engine.pid, "owner_pid": me.pid, "owner_started": me.create_time()})
        )
        assert reap_orphans(registry) == [engine.pid]
        engine.wait(timeout=10)
        assert other.poll() is None  # not an engine command line: pid may have been reused
        assert [p.name for p in registry.glob("*.json")] == ["live.json"]
        assert not list(registry.glob("rendezvous-*")) and outside.exists()
        assert not scratch[engine.pid].exists() and scratch[other.pid].is_symlink()
        assert [f.name for f in kept.iterdir()] == ["ipc-socket"]
    finally:
        for p in (engine, other):
            p.kill()
            p.wait()


# ------------------------------------------------------------------ stopping during start-up, litter, the key's address


@pytest.fixture
def short_tmp():
    """A new, empty folder of a short path to be a TMPDIR: an ipc socket's path holds at most 107 bytes, and an
    engine's socket goes in a folder of its own (kvlab-engine-XXXXXXXX) and is named by a UUID, 59 bytes in all;
    pytest's tmp_path is too long a start for that, as vLLM would find too."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kvlab-t-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _litter(folder: Path) -> list[str]:
    """What tests/fake_engine.py leaves in ``folder``: its ipc socket (named by a UUID) and its tempfile, by kind."""
    return sorted(
        "socket" if f.is_socket() else f.name.split("-")[0] + "-" + f.name.split("-")[1] for f in folder.iterdir()
    )


@pytest.mark.parametrize("mode", ["ok", "stubborn"])
def test_an_engine_keeps_its_files_in_a_folder_of_its_own_removed_when_it_stops(
    tmp_path, registry, monkeypatch, short_tmp, mode
):
    """Issue 56, item 6: vLLM left about 100 ipc socket files named by UUID in TMPDIR after the sweeps. Each start gets
    a folder of its own (mode 0700) as its TMPDIR and vLLM's VLLM_RPC_BASE_PATH; stop() removes it, after a SIGTERM
    the engine obeys or a SIGKILL it needed (stubborn), and nothing the engine wrote is left in the parent folder."""
    import stat
    import tempfile

    parent = short_tmp
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    srv = EngineServer(_fake_spec(env={"FAKE_MODE": mode}), tmp_path / "s.log")
    try:
        srv.start()
        srv.wait_ready()
        scratch = srv._scratch
        assert scratch.parent == parent and scratch.name.startswith("kvlab-engine-")
        assert stat.S_IMODE(scratch.stat().st_mode) == 0o700
        env = psutil.Process(srv.pid).environ()
        assert env["TMPDIR"] == env["VLLM_RPC_BASE_PATH"] == str(scratch)
        assert _litter(scratch) == ["fake-engine", "socket"]  # the engine wrote there, and only there
        assert [f.name for f in parent.iterdir()] == [scratch.name]
    finally:
        srv.stop(grace_s=1)
    assert not scratch.exists() and not list(parent.iterdir())
    assert not _group_alive(srv.pid)


def test_a_long_temporary_folder_sends_the_engines_own_folder_to_tmp(tmp_path, monkeypatch):
    """vLLM's socket paths (a UUID in the engine's folder) fail past 107 bytes: under a TMPDIR longer than
    SCRATCH_PARENT_MAX (pytest's tmp_path is one) the engine's folder goes under /tmp; a short one is kept."""
    import tempfile

    from kvlab import server

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert len(str(tmp_path)) > server.SCRATCH_PARENT_MAX and server.scratch_parent() == "/tmp"
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    assert server.scratch_parent() is None


def test_the_specs_own_tmpdir_wins(tmp_path, registry, short_tmp):
    """A TMPDIR the spec sets is the engine's (the spec's env wins over what kvlab sets), and is left alone."""
    own = short_tmp
    srv = EngineServer(_fake_spec(env={"FAKE_MODE": "ok", "TMPDIR": str(own)}), tmp_path / "s.log")
    with srv:
        env = psutil.Process(srv.pid).environ()
        assert env["TMPDIR"] == str(own) and env["VLLM_RPC_BASE_PATH"] == str(srv._scratch)
    assert _litter(own) == ["fake-engine"] and not srv._scratch.exists()


def _sweep_file(tmp_path: Path, mode: str) -> Path:
    """An experiment of one run on tests/fake_engine.py in FAKE_MODE ``mode`` (the tiny model's vocabulary)."""
    import yaml

    spec = {
        "name": "stopping",
        "hardware": "CPU (test)",
        "device": "cpu",
        "scale_factor": 32,
        "engines": {
            "vllm": {
                "name": "vllm",
                "launch": [sys.executable, str(FAKE)],
                "model": "data/models/tiny-llama",
                "max_model_len": 1024,
                "startup_timeout_s": 300,
                "env": {"FAKE_MODE": mode},
            }
        },
        "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 64, "output_tokens": 4},
        "matrix": {},
        "repeats": 1,
        "warmup": True,
        "retry": {"max_attempts": 1, "retry_on": []},
    }
    path = tmp_path / "stopping.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _processes_with_env(name: str, value: str) -> list[int]:
    """Live processes of this user whose environment sets ``name`` to ``value``."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(name) == value:
                found.append(p.pid)
        except psutil.Error:
            pass
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_sweep_signalled_while_its_engine_starts_ends_within_2_s_leaving_nothing(tmp_path, registry, short_tmp, sig):
    """Issue 56, item 5: SIGTERM while vLLM was still starting ended the sweep only after 15.2 s, the grace before
    SIGKILL. An engine that is not ready has served nothing: stop() kills its group at once. The engine here ignores
    SIGTERM, and so does its worker, and never gets ready; the sweep is signalled once it is launched and has
    written its files (SIGTERM as `kill` sends it, SIGINT as Ctrl-C does)."""
    tmp = short_tmp  # the sweep's TMPDIR, which nothing else writes to
    data = tmp_path / "data"
    env = os.environ | {"KVLAB_STATE_DIR": str(registry), "TMPDIR": str(tmp)}
    # what `kvlab sweep` runs once its preflight passed (which asks the launch prefix for the engine's release)
    code = textwrap.dedent(f"""
        from kvlab import runner
        from kvlab.campaign import Campaign
        from kvlab.experiment import ExperimentSpec
        Campaign(ExperimentSpec.load({str(_sweep_file(tmp_path, "slowstart"))!r}), {str(data)!r}).execute(
            runner.LocalExecutor()
        )
    """)
    sweep = subprocess.Popen(
        [sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    pgid = scratch = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sweep.poll() is None:
            records = list(registry.glob("*.json"))
            if records:
                rec = json.loads(records[0].read_text())
                pgid, scratch = rec["pgid"], Path(rec["scratch"])
                if scratch.exists() and len(_litter(scratch)) == 2 and len(_group_alive(pgid)) == 2:
                    break
            time.sleep(0.1)
        else:
            pytest.fail(f"the engine did not start: {sweep.poll()}, {sweep.stderr.read() if sweep.poll() else ''}")
        assert scratch.parent == tmp
        t = time.monotonic()
        sweep.send_signal(sig)
        sweep.wait(timeout=30)
        took = time.monotonic() - t
        assert took < 2.0, f"the sweep took {took:.1f} s to end"
        assert sweep.returncode != 0
        assert not _group_alive(pgid)
        assert not _processes_with_env("TMPDIR", str(scratch))  # nothing the engine started lives on
        assert not list(registry.glob("*.json")) and not scratch.exists()
        assert not list(tmp.iterdir())  # neither the engine's files nor the sweep's
    finally:
        sweep.kill()
        sweep.wait()
        if pgid and _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_a_key_in_clear_goes_only_to_the_loopback_address_checked_when_connecting(tmp_path, registry, monkeypatch):
    """Issue 56, item 2: a host name is resolved when the experiment is loaded and again when kvlab connects, and the
    address checked then is the one connected to (the server's base url names it), so a resolver that changes its
    answer afterwards gets no say; one that answers an address elsewhere by then is refused before any request."""
    import http.server
    import socket
    import threading

    seen: list[tuple[str, str | None]] = []

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            body = json.dumps({"data": [{"id": "org/fake"}]}).encode() if self.path == "/v1/models" else b"{}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    answers = {"evil.localhost": "127.0.0.1"}
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host in answers:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("KVLAB_TEST_KEY", "k-42")
    engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    try:
        url = f"http://evil.localhost:{engine.server_port}"
        spec = EngineSpec(name="vllm", url=url, model="org/fake", max_model_len=1024, api_key_env="KVLAB_TEST_KEY")
        srv = EngineServer(spec, tmp_path / "s.log")
        assert srv.base_url == f"http://127.0.0.1:{engine.server_port}"
        answers["evil.localhost"] = "192.0.2.7"  # the resolver answers otherwise now
        srv.start()
        assert srv.wait_ready() >= 0 and srv.version() is None  # (this stand-in reports no version)
        assert [p for p, _ in seen] == ["/health", "/v1/models", "/version"]
        assert {auth for _, auth in seen} == {"Bearer k-42"}  # reached the address checked, with the key
        with pytest.raises(ValueError, match=r"to evil\.localhost, which is not this machine"):
            EngineServer(spec, tmp_path / "t.log")  # the next connection resolves again: refused
        assert EngineServer(spec.model_copy(update={"api_key_env": None}), tmp_path / "u.log").base_url == url
    finally:
        engine.shutdown()


# ------------------------------------------------------------------ real vLLM (CPU build)


def _engine_procs(model: Path, port: int) -> list[psutil.Process]:
    """Engine processes serving ``model`` on ``port`` (the port keeps other sessions' servers out)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if (
            "vllm.entrypoints" in " ".join(cmd)
            and str(model) in cmd
            and "--port" in cmd
            and cmd[cmd.index("--port") + 1] == str(port)
        ):
            out.append(p)
    return out


def _post(url, body, headers=None):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _harness(
    spec_src: str, log: Path, registry: Path, then: str = "import time; time.sleep(600)", env: dict | None = None
) -> tuple[subprocess.Popen, int, int, int]:
    """A harness process that starts a server and sleeps (or does ``then``, e.g. ``srv.wait_ready()``), in the
    environment ``env`` adds to; (the process, engine pgid, port, watchdog pid)."""
    code = textwrap.dedent(f"""
        from kvlab.server import EngineServer
        from kvlab.experiment import EngineSpec
        srv = EngineServer({spec_src}, {str(log)!r}).start()
        print(srv.pid, srv.port, srv.watchdog_pid, flush=True)
        {then}
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"KVLAB_STATE_DIR": str(registry)} | (env or {}),
    )
    pid, port, watchdog = map(int, proc.stdout.readline().split())
    return proc, pid, port, watchdog


def _status(pid: int) -> str | None:
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return None


def _gone_within(pgid: int, seconds: float) -> float | None:
    """Seconds until no live member of the group is left, or None if some remain after ``seconds``."""
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        if not _group_alive(pgid):
            return time.monotonic() - t
        time.sleep(0.2)
    return None


FAKE_SRC = f"EngineSpec(name='vllm', launch=[{sys.executable!r}, {str(FAKE)!r}], model='org/fake', max_model_len=1024)"


def test_sigkilled_harness_takes_its_engine_with_it(tmp_path, registry):
    proc, pid, _, watchdog = _harness(FAKE_SRC, tmp_path / "s.log", registry)
    try:
        time.sleep(1)
        assert len(_group_alive(pid)) == 2  # server + worker child
        scratch = Path(json.loads((registry / f"{pid}.json").read_text())["scratch"])
        assert scratch.is_dir() and any(scratch.iterdir())  # the engine's own temporary folder, with its files
        proc.kill()  # SIGKILL: no atexit, no signal handler runs in the harness
        proc.wait()
        assert _gone_within(pid, 10) is not None, "the watchdog should have killed the orphaned group"
        deadline = time.monotonic() + 5  # and removed its folder, and then exited itself (a zombie until init reaps it)
        while scratch.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not scratch.exists()
        while psutil.pid_exists(watchdog) and _status(watchdog) != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not psutil.pid_exists(watchdog) or _status(watchdog) == psutil.STATUS_ZOMBIE
    finally:
        proc.kill()
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signalled_harness_stops_its_engine(tmp_path, registry, sig):
    proc, pid, _, _ = _harness(FAKE_SRC, tmp_path / "s.log", registry)
    try:
        time.sleep(1)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert _gone_within(pid, 10) is not None
        assert not list(registry.glob("*.json"))  # stopped by the harness itself, which unregistered it
    finally:
        proc.kill()
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_a_normal_stop_also_ends_the_watchdog(tmp_path, registry):
    srv = EngineServer(_fake_spec(env={"FAKE_MODE": "ok"}), tmp_path / "s.log").start()
    srv.wait_ready()
    watchdog = psutil.Process(srv.watchdog_pid)
    assert os.getsid(watchdog.pid) == watchdog.pid != os.getsid(0)  # its own session: no terminal signal reaches it
    srv.stop()
    assert not psutil.pid_exists(watchdog.pid)  # exited and reaped


@pytest.mark.engine
@pytest.mark.full  # the fake engine's test of the same path runs by default
def test_sigkilled_harness_leaves_no_engine_and_the_reaper_is_the_second_line(
    tmp_path, registry, engine_python, tiny_model
):
    spec = (
        f"EngineSpec(name='vllm', launch=[{str(engine_python)!r}], model={str(tiny_model)!r}, "
        "max_model_len=1024, kv_cache_bytes=2**22, enforce_eager=True)"
    )
    proc, pid, port, _ = _harness(spec, tmp_path / "a.log", registry)
    try:
        time.sleep(3)  # let it spawn workers
        proc.kill()  # SIGKILL: the watchdog takes the engine down
        proc.wait()
        assert _gone_within(pid, 10) is not None
        assert not _engine_procs(tiny_model, port)
    finally:
        proc.kill()
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    # Harness and watchdog both SIGKILLed: the engine is orphaned until the next sweep's reaper.
    proc, pid, port, watchdog = _harness(spec, tmp_path / "b.log", registry)
    try:
        time.sleep(3)
        os.kill(watchdog, signal.SIGKILL)
        proc.kill()
        proc.wait()
        time.sleep(2)
        assert _group_alive(pid), "with its watchdog gone too, the engine should have outlived its harness"
        assert reap_orphans(registry) == [pid]
        assert not _group_alive(pid)
        assert not _engine_procs(tiny_model, port)
    finally:
        proc.kill()
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.engine
@pytest.mark.full  # the fake engine's test of the same path runs by default
def test_a_harness_signalled_while_vllm_starts_ends_within_2_s_leaving_nothing(
    tmp_path, registry, short_tmp, engine_python, tiny_model
):
    """Issue 56, items 5 and 6 on the real vLLM CPU build: SIGTERM while it starts (its EngineCore is up and has made
    its ipc sockets, in the engine's own folder) ends the harness within 2 s, with no process of the engine left
    and nothing in TMPDIR. Before, the harness waited out the 15 s grace before SIGKILL (15.2 s in issue 56)."""
    spec = (
        f"EngineSpec(name='vllm', launch=[{str(engine_python)!r}], model={str(tiny_model)!r}, "
        "max_model_len=1024, kv_cache_bytes=2**22, enforce_eager=True)"
    )
    proc, pid, port, _ = _harness(spec, tmp_path / "a.log", registry, "srv.wait_ready()", {"TMPDIR": str(short_tmp)})
    try:
        scratch = Path(json.loads((registry / f"{pid}.json").read_text())["scratch"])
        deadline = time.monotonic() + 300  # vLLM's imports alone take minutes on a busy 2-core machine
        while not any(f.is_socket() for f in scratch.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert any(f.is_socket() for f in scratch.iterdir()) and proc.poll() is None, (tmp_path / "a.log").read_text()
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        took = time.monotonic() - t
        assert took < 2.0, f"the harness took {took:.1f} s to end"
        assert not _group_alive(pid) and not _engine_procs(tiny_model, port)
        assert not _processes_with_env("TMPDIR", str(scratch))  # nothing the engine started lives on
        assert not list(short_tmp.iterdir())
    finally:
        proc.kill()
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)


# ----------------------------------------------------------------------------- the state folder and atomic files


def test_the_state_folder_is_made_0700_and_must_be_this_users_alone(tmp_path, monkeypatch):
    """/tmp/kvlab-<uid>-<hash>/servers has a name any local user can guess: kvlab makes both folders mode 0700
    and refuses either one when it is a link, another uid's, or writable by group or others."""
    import stat
    import tempfile

    from kvlab import server

    monkeypatch.delenv("KVLAB_STATE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = server.state_dir()
    assert d.parent.parent == tmp_path and d.parent.name.startswith(f"kvlab-{os.getuid()}-")
    assert server.ensure_state_dir(create=False) is False and not d.parent.exists()  # checking creates nothing
    assert server.ensure_state_dir(d) is True  # an EngineServer registers there: both folders made 0700 too
    assert [stat.S_IMODE(p.stat().st_mode) for p in (d.parent, d)] == [0o700, 0o700]
    assert server.ensure_state_dir() is True
    d.parent.chmod(0o777)
    with pytest.raises(server.StateDirError, match=rf"{d.parent}: .* mode 0777: other users can write to it"):
        server.ensure_state_dir()
    d.parent.chmod(0o700)
    d.chmod(0o720)
    with pytest.raises(server.StateDirError, match=rf"{d}: .*mode 0720"):
        server.reap_orphans()  # its records name process groups to kill: none is read from such a folder
    d.chmod(0o700)
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 4242)  # the folder now belongs to "another" user
    with pytest.raises(
        server.StateDirError,
        match=rf"{d}: .*belongs to uid {real}, not to this user "
        rf"\(uid {real + 4242}\).*KVLAB_STATE_DIR",
    ):
        server.ensure_state_dir(d)
    monkeypatch.undo()
    monkeypatch.delenv("KVLAB_STATE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    os.rmdir(d)
    d.symlink_to(tmp_path)
    with pytest.raises(server.StateDirError, match=rf"{d}: .*is a symbolic link"):
        server.ensure_state_dir()


def test_a_sweep_refuses_a_state_folder_that_is_not_its_users(tmp_path, monkeypatch):
    from kvlab.campaign import Campaign, SweepError
    from kvlab.paths import EXPERIMENTS_DIR
    from kvlab.experiment import ExperimentSpec

    d = tmp_path / "servers"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    monkeypatch.setenv("KVLAB_STATE_DIR", str(d))
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_classification.yaml")
    with pytest.raises(SweepError, match=rf"{d}: kvlab's server state folder has mode 0777.*Nothing was launched"):
        Campaign(spec, tmp_path / "data").prepare()


def test_registry_and_redacted_log_are_replaced_by_rename_never_written_through_a_link(tmp_path, registry, monkeypatch):
    from kvlab.paths import write_text_atomic

    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "target.json"
    link.symlink_to(victim)
    write_text_atomic(link, "new")
    assert victim.read_text() == "keep" and not link.is_symlink() and link.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    # the registry: written through a random mkstemp name, so no predictable <pid>.tmp a link could redirect
    monkeypatch.setenv("KVLAB_TEST_KEY", "topsecret-123")
    srv = EngineServer(
        _fake_spec(name="sglang", env={"FAKE_MODE": "ok"}, api_key_env="KVLAB_TEST_KEY"), tmp_path / "s.log"
    )
    calls = []
    import kvlab.server as server_mod

    real = server_mod.write_text_atomic
    monkeypatch.setattr(server_mod, "write_text_atomic", lambda p, t: (calls.append(Path(p)), real(p, t))[1])
    try:
        with srv:
            rec = registry / f"{srv.pid}.json"
            assert rec.exists() and json.loads(rec.read_text())["pid"] == srv.pid
            assert (registry.stat().st_mode & 0o077) == 0
    finally:
        srv.stop()
    assert calls[0] == rec
    assert calls[-1] == tmp_path / "s.log"  # the log the fake printed the key to: scrubbed by rename
    assert "topsecret-123" not in (tmp_path / "s.log").read_text()
    assert not [p for p in registry.iterdir()]
