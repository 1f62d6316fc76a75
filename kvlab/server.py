"""A running engine server: own process group, one log file, readiness, teardown that leaves no orphans.

Three lines of defence against an engine outliving kvlab: ``stop()`` (and atexit / SIGTERM / SIGHUP
handlers) kills the engine's process group; a watchdog process per server (:mod:`kvlab.watchdog`)
kills it when the harness dies without running any handler (SIGKILL, OOM killer); and the next
sweep reaps any group registered by a harness that is gone (``reap_orphans``).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from kvlab.engines import ENGINE_NAMES, Failure, get_adapter
from kvlab import watchdog
from kvlab.engines.base import http_json
from kvlab.paths import ROOT, private_folder_problem, write_text_atomic
from kvlab.engines import EngineSpec
from kvlab.engines.spec import holds_secret, redact_text

REDACTED = "***"
#: The watchdog script, run by path with the harness's interpreter (see kvlab/watchdog.py).
WATCHDOG = Path(__file__).with_name("watchdog.py")
#: How long the watchdog lets an orphaned engine shut down after SIGTERM before it sends SIGKILL.
WATCHDOG_GRACE_S = 5.0
#: How long stop() lets a server that serves requests shut down after SIGTERM before it sends SIGKILL. One still
#: starting has none: it is killed at once (SIGTERM and SIGKILL together), so that SIGTERM or Ctrl-C during a
#: start-up ends the sweep within a second or two (vLLM's CPU build, starting, took 15 s to act on SIGTERM).
STOP_GRACE_S = 15.0
#: How the name of each launched engine's own temporary folder starts (TMPDIR and the engine's IPC base path point
#: there: adapter.scratch_env), in the harness's temporary folder; removed when the engine stops.
SCRATCH_PREFIX = "kvlab-engine-"
#: The longest parent folder the engine's own folder goes in: vLLM names its ZeroMQ sockets there by a UUID, and a Unix
#: socket's path holds at most 107 bytes, which a longer TMPDIR (pytest's tmp_path, a deep home) broke ("AF_UNIX path
#: too long"). Beyond it the folder goes under /tmp.
SCRATCH_PARENT_MAX = 40


def scratch_parent() -> str | None:
    """Where an engine's own temporary folder is made: the harness's temporary folder, or /tmp where that path is
    longer than :data:`SCRATCH_PARENT_MAX` (None: tempfile's own choice)."""
    here = tempfile.gettempdir()
    return "/tmp" if len(here) > SCRATCH_PARENT_MAX and os.path.isdir("/tmp") else None


#: The deadline of one health check (kvlab.httpcall: a monotonic total, whatever the server drips); a start-up wait
#: gives each check at most what is left of its startup_timeout_s.
HEALTH_TIMEOUT_S = 2.0
#: The deadline of an external server's GET /v1/models.
MODELS_TIMEOUT_S = 10.0


def _within(deadline: float) -> float:
    """A health check's deadline inside a wait that ends at ``deadline`` (monotonic): at most HEALTH_TIMEOUT_S, at
    least 0.05 s (one last check when the wait is over)."""
    return min(HEALTH_TIMEOUT_S, max(0.05, deadline - time.monotonic()))


_MARKERS = tuple(dict.fromkeys(m for name in ENGINE_NAMES for m in get_adapter(name).cmdline_markers))


class ServerError(RuntimeError):
    """The server did not become ready (or died); ``failure`` says why, ``log_path`` where to read more."""

    def __init__(self, failure: Failure, log_path: Path):
        super().__init__(f"{failure.cause}: {failure.detail} (log: {log_path})")
        self.failure = failure
        self.log_path = log_path


class StateDirError(RuntimeError):
    """The state folder is not this user's own: another user (or a link) could plant or redirect registry files."""


def state_dir() -> Path:
    """Where live servers are registered: $KVLAB_STATE_DIR, else a per-user, per-checkout temp folder.

    Outside the repository so that no pid file is ever committed; per checkout so that two
    clones on one machine do not reap each other's servers. Its name can be guessed (other users share /tmp):
    :func:`ensure_state_dir` creates it mode 0700 and refuses one that is not this user's alone.
    """
    if os.environ.get("KVLAB_STATE_DIR"):
        return Path(os.environ["KVLAB_STATE_DIR"])
    tag = hashlib.sha256(str(ROOT.resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"kvlab-{os.getuid()}-{tag}" / "servers"


def _own_dir(path: Path, create: bool) -> bool:
    """Create ``path`` mode 0700 (``create``) and check it is a real folder of this user's that no other user
    can write to; StateDirError naming it otherwise. False when it does not exist (and ``create`` is off)."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        why = private_folder_problem(path)
    except FileNotFoundError:
        return False
    if why:
        raise StateDirError(
            f"{path}: kvlab's server state folder {why}; another user could plant or redirect its "
            "registry files. Remove it, or set KVLAB_STATE_DIR to a folder of your own. "
            "Nothing was launched."
        )
    return True


def ensure_state_dir(directory: Path | None = None, create: bool = True) -> bool:
    """Make the state folder (default :func:`state_dir`) ready: the per-user folder and its ``servers`` folder
    are created mode 0700, and each must be this user's alone (StateDirError naming it otherwise; a folder
    given by $KVLAB_STATE_DIR or ``directory``: that folder is checked, its parents made as usual). Returns
    whether the folder exists (``create`` off: only checks one that exists)."""
    default = None if os.environ.get("KVLAB_STATE_DIR") else state_dir()
    directory = state_dir() if directory is None else Path(directory)
    if directory == default:  # /tmp/kvlab-<uid>-<hash>/servers: both folders are kvlab's
        return _own_dir(directory.parent, create) and _own_dir(directory, create)
    if create:
        directory.parent.mkdir(parents=True, exist_ok=True)
    return _own_dir(directory, create)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def read_api_key(spec: EngineSpec) -> str | None:
    """The API key from the environment variable ``spec.api_key_env`` (None when it names none); the one place
    kvlab reads a key. ValueError naming the variable when it is not set."""
    var = spec.api_key_env
    if var is None:
        return None
    key = os.environ.get(var)
    if not key:
        raise ValueError(f"engine.api_key_env: environment variable {var!r} is not set")
    return key


def redact(text: str, secret: str | None) -> str:
    """``text`` with every form of ``secret`` an engine may log (as given, repr()-, JSON- and URL-escaped:
    kvlab.engines.spec.secret_forms) replaced by '***' (unchanged without a secret)."""
    return redact_text(text, secret)


# ---------------------------------------------------------------------------- registry

# Strong references: a server dropped without stop() must still be stopped at exit.
_LIVE: set[EngineServer] = set()
_HOOKS_LOCK = threading.Lock()
_HOOKS_INSTALLED = False


def stop_all() -> None:
    """Stop every server this process started and has not stopped yet."""
    for server in list(_LIVE):
        try:
            server.stop()
        except Exception:  # best effort at exit: one failure must not leave the others running
            pass


def _install_hooks() -> None:
    """atexit + SIGTERM/SIGHUP handlers, once, so a terminated harness takes its servers with it.

    SIGINT needs nothing extra: KeyboardInterrupt unwinds the context managers and atexit runs.
    """
    global _HOOKS_INSTALLED
    with _HOOKS_LOCK:
        if _HOOKS_INSTALLED:
            return
        _HOOKS_INSTALLED = True
        atexit.register(stop_all)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.getsignal(sig)

            def handler(signum, frame, previous=previous):
                stop_all()
                if callable(previous):
                    previous(signum, frame)
                raise SystemExit(128 + signum)

            signal.signal(sig, handler)


def _is_engine(proc: psutil.Process) -> bool:
    try:
        cmd = " ".join(proc.cmdline()) + " " + proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(m in cmd for m in _MARKERS)


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return members


def _kill_group(pgid: int, grace_s: float) -> None:
    """SIGTERM (and SIGCONT) the group, wait up to ``grace_s`` for every member, then SIGKILL what is left:
    the watchdog's routine, one definition for both."""
    watchdog.kill_group(pgid, grace_s)


def reap_orphans(directory: Path | None = None, grace_s: float = 10.0) -> list[int]:
    """Kill engine process groups left by a harness that died without stopping them, and remove their records and
    rendezvous files (EngineServer._rendezvous).

    A registered group is killed only when the harness that started it is gone and at least one
    member still runs an engine command line (pids get reused). Returns the killed group ids.
    """
    # a record names a process group to kill: read none from a folder another user could write to
    exists = ensure_state_dir(directory, create=False)
    directory = directory or state_dir()
    killed: list[int] = []
    for f in sorted(directory.glob("*.json")) if exists else []:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            f.unlink(missing_ok=True)
            continue
        if _alive(rec.get("owner_pid"), rec.get("owner_started")):
            continue  # its harness is still running: not an orphan
        pgid = int(rec["pgid"])
        engines = [p for p in _group_members(pgid) if _is_engine(p)]
        if engines:
            _kill_group(pgid, grace_s)
            killed.append(pgid)
        name = str(rec.get("rendezvous") or "")
        if name.startswith("rendezvous-") and name == Path(name).name:  # a name in this folder, never a path
            (directory / name).unlink(missing_ok=True)
        _remove_scratch(rec.get("scratch"))
        f.unlink(missing_ok=True)
    return killed


def _remove_scratch(folder: str | Path | None) -> None:
    """Remove an engine's own temporary folder (EngineServer._scratch) and what its engine left in it: only a
    folder named as kvlab names them, this user's alone (never through a link)."""
    if not folder or not Path(folder).name.startswith(SCRATCH_PREFIX):
        return
    try:
        if private_folder_problem(Path(folder)):
            return
    except FileNotFoundError:
        return
    shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int | None, started: float | None) -> bool:
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        return started is None or abs(p.create_time() - started) < 1.0
    except psutil.NoSuchProcess:
        return False


# ---------------------------------------------------------------------------- server


class EngineServer:
    """One engine server process. Use as a context manager: starts, waits until ready, always stops.

    >>> with EngineServer(spec, log_path) as srv:
    ...     srv.base_url  # 'http://127.0.0.1:PORT'
    """

    def __init__(self, spec: EngineSpec, log_path: str | Path, *, registry_dir: Path | None = None):
        self.spec = spec
        self.adapter = get_adapter(spec.name)
        self.log_path = Path(log_path)
        self.registry_dir = registry_dir or state_dir()
        self.external = spec.external  # a server someone else started: checked and used, never started or stopped
        self.port = None if self.external else (spec.port or free_port(spec.host))
        # a key in clear text: a host name resolved (again) here and the address checked is the one connected to
        self.base_url = spec.connect_url(self.adapter.base_url(spec, self.port))
        self._attached = False  # external: start() checked it and stop() was not called yet
        self._api_key = read_api_key(spec)
        # SGLang reads its key from a --config YAML file: written (mode 0600, a name nobody can guess) at start,
        # removed once the server is up or stopped
        self._key_file: Path | None = None
        if self._api_key and not self.external and self.adapter.api_key_route == "config_file":
            self._key_file = Path(tempfile.gettempdir()) / f"kvlab-key-{secrets.token_hex(12)}.yaml"
        # where an engine's workers meet through a file instead of a TCP store on every interface (adapter.bind_env):
        # in the private state folder, a name no other start uses; removed at stop
        self._rendezvous = self.registry_dir / f"rendezvous-{secrets.token_hex(12)}"
        # the engine's own temporary folder (its TMPDIR: IPC sockets, caches), made at start and removed at stop
        self._scratch: Path | None = None
        self._proc: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None
        self._pid_file: Path | None = None
        self._log_start = 0  # where this start's part of the (appended) log begins
        self.started_at: float | None = None
        self.ready_after_s: float | None = None  # launch to ready, time paused left out
        self.paused_s = 0.0  # total time the process group was stopped by pause()
        self._paused_at: float | None = None
        self.exit_code: int | None = None

    # -------------------------------------------------------------- argv / env
    @property
    def argv(self) -> list[str]:
        """The real argv (may hold the API key: never record it; use ``recorded_argv``)."""
        if self.external:
            return []
        on_cli = self._api_key if self.adapter.api_key_route == "argv" else None
        argv = self.adapter.command(self.spec, self.port, api_key=on_cli)
        return argv + ["--config", str(self._key_file)] if self._key_file else argv

    @property
    def recorded_argv(self) -> list[str] | None:
        """argv safe to write to logs and specs: the API key replaced by '***' (None: kvlab did not launch it)."""
        return None if self.external else [redact(a, self._api_key) for a in self.argv]

    def _env(self) -> dict[str, str]:
        """The server's environment: kvlab's own, then what keeps the engine's ports on the spec's host
        (adapter.bind_env) and its files in its own temporary folder (adapter.scratch_env), then the spec's env
        (which wins), then the API key where the engine reads it there."""
        env = self.adapter.env(self.spec)
        env.update(self.adapter.launch_bind_env(self.spec, self.port, str(self._rendezvous)))
        scratch = self.adapter.scratch_env(str(self._scratch)) if self._scratch else {}
        env.update({k: v for k, v in scratch.items() if k not in self.spec.env})
        if self._api_key and self.adapter.api_key_route == "env":
            env[self.adapter.api_key_env_var] = self._api_key
        return env

    @property
    def api_key(self) -> str | None:
        """The key a client sends (never record it: ``recorded_argv`` and ``recorded_log`` redact it)."""
        return self._api_key

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers a client needs (Authorization when an API key is set)."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    # -------------------------------------------------------------- lifecycle
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def watchdog_pid(self) -> int | None:
        """The process that kills this engine's group if the harness dies (None before start)."""
        return self._watchdog.pid if self._watchdog else None

    def running(self) -> bool:
        """The process is alive (an external server: it still answers its health check)."""
        if self.external:
            return self._attached and self._healthy()
        return self._proc is not None and self._proc.poll() is None

    def _healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
        status, _ = http_json(self.base_url + self.adapter.health_path, timeout=timeout_s, headers=self.headers)
        return status == 200

    def start(self) -> EngineServer:
        """Launch the server in its own process group with stdout+stderr to ``log_path``."""
        if self._proc is not None or self._attached:
            raise RuntimeError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.external:
            with open(self.log_path, "a") as log:
                log.write(
                    f"# kvlab: did not launch this server: it uses {self.base_url}, started by someone else, "
                    "and neither starts nor stops it (its own log is wherever it runs)\n"
                )
            self.started_at = time.monotonic()
            self._attached = True
            return self
        _install_hooks()
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()  # a log appended to by an earlier start: only what follows is this one's
            log.write(f"# kvlab: {' '.join(self.recorded_argv)}\n".encode())
            log.flush()
            self._write_key_file()
            ensure_state_dir(self.registry_dir)  # the rendezvous file's folder, before any worker looks for it
            self._scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=scratch_parent()))  # mode 0700
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self._env(),
                    cwd=ROOT,
                    start_new_session=True,  # own group: one killpg stops all workers
                )
            except BaseException:  # nothing launched (no such program): nothing left either
                _remove_scratch(self._scratch)
                raise
        self.started_at = time.monotonic()
        _LIVE.add(self)
        self._register()
        self._watchdog = subprocess.Popen(  # own session: a terminal's signals to the harness do not reach it
            [sys.executable, str(WATCHDOG), str(self._proc.pid), str(WATCHDOG_GRACE_S), str(self._scratch)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return self

    @property
    def launched(self) -> bool:
        """start() was called (an external server: it was checked)."""
        return self._proc is not None or self._attached

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    def pause(self) -> None:
        """Stop the whole process group (SIGSTOP) where it stands, starting or ready: it uses no CPU until
        resume(). The time paused is left out of the start-up timeout and of ``ready_after_s``."""
        if self._proc is not None and self._paused_at is None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGSTOP)
            self._paused_at = time.monotonic()

    def resume(self) -> None:
        """Continue a paused process group (SIGCONT); nothing when it is not paused."""
        if self._paused_at is None:
            return
        self.paused_s += time.monotonic() - self._paused_at
        self._paused_at = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGCONT)

    def _write_key_file(self) -> None:
        """The API key as the YAML file ``--config`` names: created new (never through a link or over another
        file), readable by this user only."""
        if self._key_file is None:
            return
        fd = os.open(self._key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as f:
            # keys as the flags are spelt (SGLang turns each into --<key>); a JSON string is a YAML one
            f.write(f"api-key: {json.dumps(self._api_key)}\n")

    def _remove_key_file(self) -> None:
        if self._key_file is not None:
            self._key_file.unlink(missing_ok=True)

    def _register(self) -> None:
        ensure_state_dir(self.registry_dir)
        me = psutil.Process()
        rec = {
            "pid": self._proc.pid,
            "pgid": self._proc.pid,
            "port": self.port,
            "engine": self.spec.name,
            "argv": self.recorded_argv,
            "log": str(self.log_path),
            "owner_pid": me.pid,
            "owner_started": me.create_time(),
            "rendezvous": self._rendezvous.name,  # removed by reap_orphans when no stop() could
            "scratch": str(self._scratch),  # (and this folder, when no watchdog could either)
        }
        self._pid_file = self.registry_dir / f"{self._proc.pid}.json"
        write_text_atomic(self._pid_file, json.dumps(rec, indent=2))

    def log_text(self, this_start: bool = False) -> str:
        """The server log so far, API key redacted; ``this_start``: only what this start wrote (the log file is
        appended to, so a ready line or a fatal error of an earlier start in it is not this one's)."""
        try:
            with open(self.log_path, "rb") as f:
                if this_start:
                    f.seek(self._log_start)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return redact(text, self._api_key)

    def recorded_log(self, dest: Path) -> Path | None:
        """Write the server log so far, API key redacted, to ``dest`` (what a run stores); None without a log."""
        if not self.log_path.exists():
            return None
        dest.write_text(self.log_text())
        return dest

    def failure(self) -> Failure | None:
        """The classified failure if the process has exited with an error (or logged a fatal one)."""
        if self.external:
            return None  # no process, no log here: only running() can tell
        code = self._proc.poll() if self._proc else None
        return self.adapter.classify_failure(code, self.log_text(this_start=True))

    def wait_ready(self, timeout_s: float | None = None, poll_s: float = 0.5) -> float:
        """Block until /health answers 200 (and, for an engine whose health check answers before its own warm-up
        ends, its log says it is ready); returns seconds since start, paused time left out.

        Raises ServerError (and stops the server) when the process exits first, with the cause
        classified from its log, or with cause 'timeout'.
        """
        if self._proc is None and not self._attached:
            raise RuntimeError("server not started")
        timeout_s = self.spec.startup_timeout_s if timeout_s is None else timeout_s
        if self.external:
            return self._wait_external(timeout_s, poll_s)
        self.resume()
        url = self.base_url + self.adapter.health_path
        while True:
            deadline = self.started_at + self.paused_s + timeout_s
            code = self._proc.poll()
            if code is not None:
                self.stop()
                failure = self.adapter.classify_failure(code, self.log_text(this_start=True)) or Failure(
                    "crash", f"exited with code {code} before ready", None, code
                )
                raise ServerError(failure, self.log_path)
            status, _ = http_json(url, timeout=_within(deadline), headers=self.headers)
            # A free port can be taken by another sweep's server before ours binds it: only
            # a 200 from a socket our own process group listens on means *we* are ready.
            healthy = status == 200 and self._owns_port()
            if healthy and (
                not self.adapter.health_before_warmup  # the log is read only once /health answers
                or self.adapter.ready_marker in self.log_text(this_start=True)
            ):
                self.ready_after_s = time.monotonic() - self.started_at - self.paused_s
                self._remove_key_file()  # read at start-up: not needed any more
                return self.ready_after_s
            if time.monotonic() > deadline:
                self.stop()
                why = (
                    (
                        f"{self.adapter.health_path} answered 200 but the log never said {self.adapter.ready_marker!r} "
                        "(the engine's own warm-up)"
                    )
                    if healthy
                    else f"no 200 from {self.adapter.health_path}"
                )
                raise ServerError(Failure("timeout", f"{why} within {timeout_s:g} s", None, None), self.log_path)
            time.sleep(poll_s)

    def _wait_external(self, timeout_s: float, poll_s: float) -> float:
        """An external server: its health check answers 200 within ``timeout_s`` and it serves the spec's model."""
        deadline = self.started_at + timeout_s
        while not self._healthy(_within(deadline)):
            if time.monotonic() > deadline:
                self._attached = False
                raise ServerError(
                    Failure(
                        "timeout",
                        f"the external server at {self.base_url} did not answer "
                        f"{self.adapter.health_path} with 200 within {timeout_s:g} s",
                    ),
                    self.log_path,
                )
            time.sleep(poll_s)
        status, body = http_json(self.base_url + "/v1/models", timeout=MODELS_TIMEOUT_S, headers=self.headers)
        data = body.get("data") if status == 200 and isinstance(body, dict) else None
        served = (
            sorted(m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str))
            if isinstance(data, list)
            else None
        )
        if served is not None and self.spec.served_name not in served:
            self._attached = False
            raise ServerError(
                Failure(
                    "http_error",
                    f"the external server at {self.base_url} serves "
                    f"{', '.join(map(repr, served)) or 'no model'}, not {self.spec.served_name!r} "
                    "(set served_model_name to the name it serves)",
                ),
                self.log_path,
            )
        with open(self.log_path, "a") as log:
            log.write(
                f"# kvlab: {self.base_url} answers and serves "
                f"{', '.join(served) if served else '(GET /v1/models did not answer)'}\n"
            )
        self.ready_after_s = time.monotonic() - self.started_at
        return self.ready_after_s

    def _owns_port(self) -> bool:
        for p in _group_members(self._proc.pid):
            try:
                conns = p.net_connections(kind="inet")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port for c in conns):
                return True
        return False

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM the whole process group, SIGKILL after ``grace_s`` (default: :data:`STOP_GRACE_S` once it has
        served, none while it starts: killed at once), then remove its temporary folder; returns the exit code.
        Idempotent. An external server is left running: kvlab only stops using it."""
        self._attached = False
        self._remove_key_file()
        if self._proc is None:
            return None
        if grace_s is None:
            grace_s = STOP_GRACE_S if self.ready_after_s is not None else 0.0
        self._paused_at = None  # _kill_group sends SIGCONT with SIGTERM
        if self._proc.poll() is None or _group_members(self._proc.pid):
            _kill_group(self._proc.pid, grace_s)
        try:
            self.exit_code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.exit_code = None
        self._stop_watchdog()
        self._rendezvous.unlink(missing_ok=True)  # torch removes it when its last user closes it, unless killed
        _remove_scratch(self._scratch)
        _LIVE.discard(self)
        if self._pid_file is not None:
            self._pid_file.unlink(missing_ok=True)
            self._pid_file = None
        self._redact_log()
        return self.exit_code

    def _stop_watchdog(self) -> None:
        """Close the watchdog's pipe (the group is already gone, so it just exits) and reap it."""
        if self._watchdog is None:
            return
        try:
            self._watchdog.stdin.close()
            self._watchdog.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self._watchdog.kill()
            self._watchdog.wait()
        self._watchdog = None

    def _redact_log(self) -> None:
        # SGLang prints its server args, key included; scrub the file once the writer is gone.
        if self._api_key and self.log_path.exists():
            text = self.log_path.read_text(errors="replace")
            if holds_secret(text, self._api_key):  # a new file put in place by rename: never a rewrite through a link
                write_text_atomic(self.log_path, redact(text, self._api_key))

    # -------------------------------------------------------------- HTTP helpers
    def version(self) -> str | None:
        """The version the server reports: text of at most 100 characters, else None (a server kvlab did not
        start may answer anything; what it says is data, escaped wherever it is shown)."""
        v = self.adapter.version(self.base_url, headers=self.headers)
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            return None
        return str(v)[:100] or None

    def flush_cache(self) -> bool | None:
        return self.adapter.flush_cache(self.base_url, headers=self.headers)

    def __enter__(self) -> EngineServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EngineServer({self.spec.name}, {self.base_url}, pid={self.pid})"
