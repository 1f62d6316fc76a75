"""`kvlab sweep --ray`: server groups as Ray tasks on a real local cluster of two nodes (real vLLM CPU servers),
the same result store as a local sweep, a lost node's runs dispatched again, nothing dispatched twice; and,
without Ray, the messages that say what is missing."""

from __future__ import annotations

import builtins
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import psutil
import pytest

from benchmarks import bench_tools as bt
from kvlab import cluster, plan, runner, store
from kvlab.campaign import Campaign
from kvlab.paths import ROOT
from kvlab.experiment import ExperimentSpec, expand
from test_runner import bound_to_loopback, engine_processes, listening_sockets, tag_of, write_spec

RESOURCE = bt.RAY_NODE_RESOURCE  # one unit per node: one server group per node at a time


# ----------------------------------------------------------------------------- without Ray


def test_ray_missing_or_cluster_unreachable_fails_with_what_to_do(tmp_path, monkeypatch):
    path = write_spec(tmp_path, "no_ray")
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(
        cluster.ClusterError, match=r"needs Ray, which is not installed here: pip install 'kvlab\[cluster\]'"
    ):
        Campaign(ExperimentSpec.load(path), tmp_path).execute(cluster.RayExecutor("auto"))
    assert not (tmp_path / "runs" / "no_ray").exists() or not store.run_dirs(tmp_path)
    monkeypatch.setattr(builtins, "__import__", real_import)

    # a subprocess without ray on its path: the CLI says how to install it and launches nothing
    code = (
        "import builtins, sys; real = builtins.__import__\n"
        "def imp(n, *a, **k):\n"
        "    if n == 'ray' or n.startswith('ray.'): raise ImportError(n)\n"
        "    return real(n, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "from kvlab.cli import app; sys.argv = ['kvlab'] + sys.argv[1:]; app()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "sweep", str(path), "--data-dir", str(tmp_path), "--ray", "auto"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 1, out.stderr
    assert "needs Ray, which is not installed here: pip install 'kvlab[cluster]'" in out.stderr
    assert not store.run_dirs(tmp_path) and not engine_processes(tag_of(path))


@pytest.mark.cluster
def _fake_ray(monkeypatch, mode: int | None):
    """A stand-in ``ray`` whose ``_raylet`` reports auth ``mode`` (0 disabled, 1 token, 2 k8s); None: a Ray without
    token auth (no ``_raylet`` functions), so kvlab falls back on RAY_AUTH_MODE."""
    import types

    ray = types.ModuleType("ray")
    ray.is_initialized = lambda: False
    ray.init = lambda **kw: None
    raylet = types.ModuleType("ray._raylet")
    if mode is not None:
        raylet.AuthenticationMode = type("AuthenticationMode", (), {"DISABLED": 0, "TOKEN": 1, "K8S": 2})
        raylet.get_authentication_mode = lambda: mode
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray._raylet", raylet)


@pytest.mark.parametrize(
    ("mode", "env", "warned"),
    [
        (None, None, True),
        (None, "disabled", True),
        (None, "token", False),
        (None, " Token ", False),
        (0, "token", True),  # Ray's own answer wins over the variable
        (1, None, False),
        (2, None, False),
    ],
)
def test_ray_warns_when_the_cluster_it_joins_has_auth_off(monkeypatch, mode, env, warned):
    _fake_ray(monkeypatch, mode)
    environ = {} if env is None else {"RAY_AUTH_MODE": env}
    text = cluster.auth_off_warning("HEAD:6379", environ)
    assert (text is not None) == warned
    if warned:
        assert text.startswith("--ray HEAD:6379: this Ray cluster runs without authentication")
        assert "RAY_AUTH_MODE=token" in text and "docs/experiments.md" in text


def test_local_starts_with_token_auth_on_the_loopback_and_a_cluster_without_auth_is_refused_unless_insecure(
    monkeypatch, caplog
):
    """--ray local: Ray started with RAY_AUTH_MODE=token (whatever the environment said), node address 127.0.0.1,
    no dashboard. A cluster that runs without authentication is left again (ray.shutdown) and refused, naming
    --ray-insecure; with it, joined with the warning, and local's authentication is the environment's own."""
    _fake_ray(monkeypatch, None)  # a Ray that reports no mode: kvlab reads RAY_AUTH_MODE, as the driver joined with it
    ray = sys.modules["ray"]
    calls: list = []
    ray.init = lambda **kw: calls.append(("init", kw))
    ray.shutdown = lambda: calls.append(("shutdown", {}))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # restored after the test: connect sets it for local
    monkeypatch.delenv(cluster.RAY_ONE_MACHINE_ENV, raising=False)  # so is Ray's one-machine switch
    for name in cluster.RAY_TOKEN_ENV:  # and the token kvlab makes
        monkeypatch.delenv(name, raising=False)
    with caplog.at_level("WARNING", logger="kvlab.cluster"):
        cluster.connect("local")
    assert os.environ["RAY_AUTH_MODE"] == "token" and caplog.records == []
    # a token of this cluster's own in the environment Ray's processes inherit, so Ray writes none to ~/.ray
    token = os.environ["RAY_AUTH_TOKEN"]
    assert len(token) == 64 and int(token, 16) >= 0 and "RAY_AUTH_TOKEN_PATH" not in os.environ
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/some/where/token")  # one the user gives is Ray's to read
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    cluster.connect("local")
    assert "RAY_AUTH_TOKEN" not in os.environ
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")  # the token alone, as the user exported it
    monkeypatch.setenv("RAY_AUTH_TOKEN", "users-own")
    cluster.connect("local")
    assert os.environ["RAY_AUTH_TOKEN"] == "users-own"
    calls[1:] = []
    assert os.environ[cluster.RAY_ONE_MACHINE_ENV] == "0"  # every Ray server on the loopback
    assert calls == [
        ("init", {"address": None, "log_to_driver": False, "_node_ip_address": "127.0.0.1", "include_dashboard": False})
    ]

    calls.clear()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(cluster.ClusterError) as refused:
        cluster.connect("auto")
    assert str(refused.value).startswith("--ray auto: this Ray cluster runs without authentication")
    assert str(refused.value).endswith("Refused: pass --ray-insecure to use it all the same.")
    assert calls == [("init", {"address": "auto", "log_to_driver": False}), ("shutdown", {})]

    calls.clear()
    for address in ("auto", "local"):
        with caplog.at_level("WARNING", logger="kvlab.cluster"):
            cluster.connect(address, insecure=True)
    assert [c[0] for c in calls] == ["init", "init"] and os.environ["RAY_AUTH_MODE"] == "disabled"
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]
    assert "runs without authentication" in caplog.records[0].getMessage()


def test_the_cli_refuses_a_cluster_without_auth_before_anything_launches(tmp_path):
    """`kvlab sweep --ray auto` on a cluster without authentication: exit 1 naming --ray-insecure, nothing run (a Ray
    stand-in on the subprocess's path that joins anything with auth disabled)."""
    path = write_spec(tmp_path, "no_auth")
    fake = tmp_path / "fake" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "def is_initialized(): return False\ndef init(**kw): pass\ndef shutdown(): pass\n"
    )
    (fake / "_raylet.py").write_text(
        "class AuthenticationMode: DISABLED, TOKEN, K8S = 0, 1, 2\ndef get_authentication_mode(): return 0\n"
    )
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    out = subprocess.run(
        [sys.executable, "-m", "kvlab.cli", "sweep", str(path), "--data-dir", str(tmp_path), "--ray", "auto"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert out.returncode == 1, out.stderr
    assert "runs without authentication" in out.stderr and "--ray-insecure" in out.stderr
    assert not store.run_dirs(tmp_path) and not engine_processes(tag_of(path))


@pytest.mark.cluster  # needs Ray (kvlab[cluster]): make test-cluster installs it
def test_ray_local_checks_a_token_and_listens_on_the_loopback_only(tmp_path):
    """`--ray local` (in a subprocess: Ray reads RAY_AUTH_MODE when imported): token authentication on, with a
    token kvlab made (nothing written to ~/.ray), and every socket Ray's processes listen on (the driver's and its
    descendants', and any other process of Ray's own programs) bound to the loopback."""
    code = (
        "import json, os, psutil; from kvlab import cluster\n"
        "os.environ.pop('RAY_AUTH_MODE', None); ray = cluster.connect('local')\n"
        "me = psutil.Process(); mine = {me.pid, *(c.pid for c in me.children(recursive=True))}\n"
        "ray_pids = [p.pid for p in psutil.process_iter(['cmdline']) if p.pid not in mine and any("
        "w.startswith('ray::') or '/site-packages/ray/' in w for w in p.info['cmdline'] or [])]\n"
        "print(json.dumps({'auth': cluster.auth_mode(), 'pids': [me.pid, *ray_pids]}))\n"
        "import sys; sys.stdout.flush(); input(); ray.shutdown()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k not in cluster.RAY_TOKEN_ENV},
            "PYTHONPATH": str(ROOT / "tests"),
            "HOME": str(tmp_path),  # where Ray would write its token file
        },
    )
    try:
        facts = json.loads(proc.stdout.readline())
        sockets = [s for pid in facts["pids"] for s in listening_sockets(pid)]
    finally:
        proc.communicate("\n", timeout=120)
    assert facts["auth"] == "token" and not (tmp_path / ".ray").exists()
    # Ray's gRPC servers listen on IPv6 sockets bound to the IPv4 loopback (::ffff:127.0.0.1); without kvlab's
    # one-machine switch they listened on '::' and '0.0.0.0', and the runtime-env agent on the host's address
    assert len(sockets) >= 4 and not [s for s in sockets if not bound_to_loopback(s[0])], sockets


@pytest.mark.cluster  # needs Ray (kvlab[cluster]): make test-cluster installs it
def test_a_bad_ray_address_fails_before_anything_launches(tmp_path):
    path = write_spec(tmp_path, "bad_address")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address, says in (
        (f"127.0.0.1:{port}", "no Ray cluster answers there"),
        ("not-an-address", "not auto, local, ray://host:port or host:port"),
    ):
        with pytest.raises(cluster.ClusterError, match=says):
            cluster.connect(address)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvlab.cli",
            "sweep",
            str(path),
            "--data-dir",
            str(tmp_path),
            "--ray",
            f"ray://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 1 and "no Ray cluster answers there" in out.stderr, out.stderr
    assert not store.run_dirs(tmp_path) and not engine_processes(tag_of(path))


def test_groups_ask_for_gpus_on_gpu_hardware_and_cpus_or_a_resource_on_cpu():
    from kvlab.paths import EXPERIMENTS_DIR

    gpu = plan.by_server(expand(ExperimentSpec.load(EXPERIMENTS_DIR / "b300_long_context.yaml")))
    cpu = plan.by_server(expand(ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_classification.yaml")))
    assert {tuple(sorted(cluster.resources_for(g).items())) for _, g in gpu} == {(("num_cpus", 1), ("num_gpus", 8))}
    run = gpu[0][1][0]
    two_replicas = run.model_copy(update={"engine": run.engine.model_copy(update={"dp": 2})})
    assert cluster.resources_for([two_replicas]) == {"num_cpus": 1, "num_gpus": 16}  # tp × dp
    assert cluster.resources_for(cpu[0][1]) == {"num_cpus": 1}
    assert cluster.resources_for(cpu[0][1], RESOURCE) == {"num_cpus": 0, "resources": {RESOURCE: 1}}


def test_a_group_no_node_can_hold_is_refused_before_dispatch():
    """R1 at TP8 × DP2 needs 16 GPUs in one Ray task: on 8-GPU nodes it would wait forever."""
    from kvlab.paths import EXPERIMENTS_DIR

    groups = plan.by_server(expand(ExperimentSpec.load(EXPERIMENTS_DIR / "gpu_reasoning_r1.yaml")))
    eight = {"Alive": True, "Resources": {"CPU": 64.0, "GPU": 8.0}}
    with pytest.raises(
        cluster.ClusterError,
        match=r"gpu_reasoning_r1: the sglang server group \(4 runs\) needs "
        r"16 GPU, 1 CPU on one node, and no node of the cluster has that \(2 live nodes, "
        r"the largest 8 GPU, 64 CPU\)",
    ):
        cluster.check_capacity([eight, eight, {"Alive": False, "Resources": {"GPU": 16.0, "CPU": 8.0}}], groups)
    cluster.check_capacity([eight, {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 16.0}}], groups)  # fits
    cpu = plan.by_server(expand(ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_classification.yaml")))
    with pytest.raises(cluster.ClusterError, match=f"needs 1 {RESOURCE} on one node"):
        cluster.check_capacity([{"Alive": True, "Resources": {"CPU": 2.0}}], cpu, RESOURCE)


# ----------------------------------------------------------------------------- a real local cluster


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node that runs nothing and two worker nodes with one CPU and one `kvlab_node` each (make
    test-cluster installs Ray; a missing Ray fails these tests, never skips them)."""
    with bt.ray_local_cluster(2, RESOURCE) as c:
        yield c


def _folders(data_dir: Path, name: str) -> dict[str, list[str]]:
    exp = data_dir / "runs" / name
    return {k: sorted(f.name for f in (exp / k).iterdir()) for k in sorted(store.finished_run_keys(exp))}


def _raylet_of(pid: int, c) -> object | None:
    """The cluster node whose raylet is an ancestor of process ``pid`` (Ray workers are raylets' children)."""
    ancestors = {p.pid for p in psutil.Process(pid).parents()}
    for node in c.worker_nodes:
        if node.all_processes["raylet"][0].process.pid in ancestors:
            return node
    return None


@pytest.mark.cluster
@pytest.mark.engine
def test_two_groups_on_two_nodes_store_what_a_local_sweep_stores(tmp_path, ray_cluster, engine_python, tiny_model):
    path = write_spec(
        tmp_path,
        "split",
        matrix={"engine.prefix_caching": [True, False]},
        workload={"batch_size": 2, "context_tokens": 768, "output_tokens": 512},
    )
    spec = ExperimentSpec.load(path)
    local = Campaign(spec, tmp_path / "local").execute(runner.LocalExecutor())
    t = time.perf_counter()
    res = Campaign(spec, tmp_path / "ray").execute(cluster.RayExecutor(ray_cluster.address, RESOURCE))
    wall = time.perf_counter() - t
    assert (res.ok, res.failed, res.server_starts) == (local.ok, local.failed, local.server_starts) == (2, 0, 2)

    # the same files as the local sweep's, but for telemetry.csv, which a run has where a sample fell inside it
    def files(where: str) -> dict:
        return {k: [f for f in v if f != "telemetry.csv"] for k, v in _folders(tmp_path / where, "split").items()}

    assert files("ray") == files("local")
    assert set(_folders(tmp_path / "ray", "split")) == {r.key for r in expand(spec)}
    # the node's telemetry comes back with its run folder: telemetry.json always, its samples (telemetry.csv) where
    # the run lasted past the first sample (512 output tokens: a run of a second or more on 2 cores)
    for key, files in _folders(tmp_path / "ray", "split").items():
        info = json.loads((tmp_path / "ray" / "runs" / "split" / key / "telemetry.json").read_text())
        assert info["available"] and files == [
            "attempts.parquet",
            "requests.parquet",
            "run.parquet",
            "server-attempt1.log",
            "spec.json",
            *(["telemetry.csv"] if info["samples"] else []),
            "telemetry.json",
        ], (key, info)
    assert any("telemetry.csv" in files for files in _folders(tmp_path / "ray", "split").values())
    cols = ["run_id", "status", "attempts", "served_prompt_tokens", "served_output_tokens", "server_prompt_tokens"]
    assert (
        store.load_runs(tmp_path / "ray")
        .sort("run_id")
        .select(cols)
        .equals(store.load_runs(tmp_path / "local").sort("run_id").select(cols))
    )
    sweep = json.loads((tmp_path / "ray" / "runs" / "split" / "manifest.json").read_text())["sweeps"][-1]
    nodes = sweep["ray"]["nodes"]
    assert len(nodes) == 2 and sorted(len(n["runs"]) for n in nodes) == [1, 1]  # one group per node
    assert all(n["host"]["accelerator"] and n["server_starts"] == 1 for n in nodes)
    assert {s["node"] for s in sweep["servers"]} == {n["node_id"] for n in nodes}
    assert (sweep["ok"], sweep["server_starts"]) == (2, 2)
    assert not engine_processes(tag_of(path))
    print(f"\ncluster sweep: 2 groups on 2 nodes, {wall:.0f} s; local sweep {local.wall_s:.0f} s")

    # a second sweep of the finished experiment dispatches nothing
    dispatched = []
    real = cluster._dispatch
    try:
        cluster._dispatch = lambda *a, **k: dispatched.append(a) or real(*a, **k)
        again = Campaign(spec, tmp_path / "ray").execute(cluster.RayExecutor(ray_cluster.address, RESOURCE))
    finally:
        cluster._dispatch = real
    assert (again.skipped, again.ok, again.server_starts, dispatched) == (2, 0, 0, [])
    assert len(json.loads((tmp_path / "ray" / "runs" / "split" / "manifest.json").read_text())["sweeps"]) == 2


def _sweep_driver(path: Path, data_dir: Path, ray_cluster, stderr: int) -> subprocess.Popen:
    """`kvlab sweep` of ``path`` on the test cluster, in a process of its own (its stdout discarded)."""
    argv = [sys.executable, "-m", "kvlab.cli", "sweep", str(path), "--data-dir", str(data_dir)]
    argv += ["--ray", ray_cluster.address, "--ray-resource", RESOURCE]
    argv += ["--ray-insecure"]  # the test cluster (bench_tools.ray_local_cluster) runs without authentication
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, text=True)


@pytest.mark.cluster
@pytest.mark.engine
def test_ctrl_c_on_the_driver_cancels_the_tasks_and_no_engine_outlives_them(
    tmp_path, ray_cluster, engine_python, tiny_model
):
    path = write_spec(tmp_path, "interrupted", matrix={"engine.prefix_caching": [True, False]})
    tag = tag_of(path)
    driver = _sweep_driver(path, tmp_path, ray_cluster, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while len(engine_processes(tag)) < 2 and time.monotonic() < deadline:  # both groups' engines launched
        time.sleep(0.2)
    assert engine_processes(tag), "no engine started within 240 s"
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=60)
    interrupted = time.monotonic()
    assert driver.returncode != 0
    while engine_processes(tag) and time.monotonic() - interrupted < 20:
        time.sleep(0.2)
    assert not engine_processes(tag), f"an engine outlived its cancelled task by 20 s; driver said: {err[-2000:]}"
    assert not store.run_dirs(tmp_path)
    Campaign(ExperimentSpec.load(path), tmp_path).prepare()  # the driver released the experiment's lock


@pytest.mark.cluster
@pytest.mark.engine
def test_a_killed_driver_leaves_no_engine_and_its_resume_redoes_nothing(
    tmp_path, ray_cluster, engine_python, tiny_model
):
    path = write_spec(tmp_path, "driver_killed", repeats=3, workload={"context_tokens": 256, "output_tokens": 200})
    tag, exp_dir = tag_of(path), tmp_path / "runs" / "driver_killed"
    driver = _sweep_driver(path, tmp_path, ray_cluster, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not store.finished_run_keys(exp_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    driver.kill()  # SIGKILL: no handler runs; Ray ends the dead driver's tasks, each engine's watchdog its engine
    driver.wait()
    killed = time.monotonic()
    first = store.finished_run_keys(exp_dir)
    assert 1 <= len(first) < 3
    while engine_processes(tag) and time.monotonic() - killed < 30:
        time.sleep(0.2)
    assert not engine_processes(tag), "an engine outlived its SIGKILLed driver by 30 s"
    mtimes = {k: (exp_dir / k / "run.parquet").stat().st_mtime_ns for k in first}

    res = Campaign(ExperimentSpec.load(path), tmp_path).execute(cluster.RayExecutor(ray_cluster.address, RESOURCE))
    assert (res.skipped, res.ok) == (len(first), 3 - len(first))
    assert store.finished_run_keys(exp_dir) == {r.key for r in expand(ExperimentSpec.load(path))}
    assert {k: (exp_dir / k / "run.parquet").stat().st_mtime_ns for k in first} == mtimes  # not redone
    assert not [p for p in exp_dir.iterdir() if p.name.startswith(".")]  # no partial folders
    assert not engine_processes(tag)


@pytest.mark.cluster
@pytest.mark.engine
def test_a_node_lost_mid_group_has_its_runs_dispatched_again(tmp_path, ray_cluster, engine_python, tiny_model):
    """Last in this file: it removes a node from the module's cluster. The runs are long enough (1,600 output tokens)
    that the group's second run is still in flight when the node goes (with 8 it once finished first; with 800, about
    2 s, it did once more on 2026-12-04, while the driver published the first run)."""
    path = write_spec(
        tmp_path,
        "lost",
        repeats=2,
        workload={"batch_size": 2, "context_tokens": 2048, "output_tokens": 1600},
        retry={"max_attempts": 2, "retry_on": []},
    )
    tag = tag_of(path)
    removed: list = []

    def on_run(run, status):  # after the group's first run: remove the node serving it, mid-group
        if removed:
            return
        engines = engine_processes(tag)
        node = next(n for n in (_raylet_of(p.pid, ray_cluster) for p in engines) if n is not None)
        ray_cluster.remove_node(node, allow_graceful=False)
        removed.append(time.monotonic())

    spec = ExperimentSpec.load(path)
    res = Campaign(spec, tmp_path, on_run=on_run).execute(cluster.RayExecutor(ray_cluster.address, RESOURCE))
    assert removed
    assert (res.ok, res.failed, res.server_starts) == (2, 0, 2)
    runs = store.load_runs(tmp_path).sort("repeat")
    assert runs["attempts"].to_list() == [1, 2]  # the run in flight: one attempt lost with its node, one ok
    assert runs["failure_cause"].to_list() == [None, "node_lost"]
    lost = store.load_attempts(tmp_path).filter(pl.col("run_id") == runs["run_id"][1]).sort("attempt")
    assert lost["failure_cause"].to_list() == ["node_lost", None] and lost["status"].to_list() == ["failed", "ok"]
    assert lost["detail"][0].startswith("node ") and " lost: " in lost["detail"][0]
    nodes = json.loads((tmp_path / "runs" / "lost" / "manifest.json").read_text())["sweeps"][-1]["ray"]["nodes"]
    assert len(nodes) == 2 and [len(n["runs"]) for n in nodes] == [1, 1]
    assert not engine_processes(tag), "an engine outlived its lost node"


def test_a_load_search_is_refused_under_ray_before_anything_launches(tmp_path):
    """load.search decides its probes as it goes, which a node's task (its run keys fixed up front) does not send
    back: the Ray executor refuses it, naming the run, before it joins a cluster or writes a manifest entry."""
    from kvlab.paths import EXPERIMENTS_DIR

    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_trace.yaml")
    campaign = Campaign(spec, tmp_path / "data")
    todo, _ = campaign.pending()
    searches = [r for r in todo if r.workload.load is not None and r.workload.load.search is not None]
    with pytest.raises(cluster.ClusterError, match=r"load.search runs on one machine, not under --ray \(4 search"):
        cluster.RayExecutor("ray://127.0.0.1:1").preflight(campaign, todo)
    assert len(searches) == 4
    cluster.RayExecutor("ray://127.0.0.1:1").preflight(campaign, [r for r in todo if r not in searches])  # no search
    assert not (tmp_path / "data").exists()
