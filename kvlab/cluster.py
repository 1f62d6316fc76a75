"""Sweeps over a Ray cluster: each server group runs on one node, its finished runs come back to this host.

The Ray executor (:class:`RayExecutor`) consumes a campaign (kvlab.campaign) as the local executor does
(``Campaign(specs, data_dir).execute(RayExecutor(address))``): the campaign on the driver (this process) holds
every experiment's lock, skips finished runs and writes the manifests; the executor sends each server group
(``plan.by_server``) to Ray as one task asking for what its engines need (:func:`resources_for`). The task runs a
campaign of just that group's runs (``Campaign(only=...)``) with the local executor in a temporary data folder on
the node it lands on (engines start there, bound to that node's loopback, each with its watchdog) and streams back
each finished run folder as a tar archive with the node's host facts and server records; the driver publishes each
folder into ``data_dir/runs/<experiment>/`` by one rename, as a local sweep does, and each manifest lists the nodes
that ran its runs.

A task whose node or worker process dies has the runs it did not return dispatched again; the run in flight
(the first not returned: a group runs in order) counts the loss as an attempt with cause ``node_lost``, and once
its experiment's ``retry.max_attempts`` are spent it is recorded failed with that cause (a lost node says
nothing about the run's configuration, so ``retry_on`` does not decide). Ctrl-C, or a task failing in kvlab's
own code, cancels every task (force: the worker is killed, and the watchdog of each engine it started kills the
engine).

Ray is imported here only, and only when a cluster sweep starts: kvlab runs without it.
"""

from __future__ import annotations

import io
import logging
import os
import queue
import secrets
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import polars as pl

from kvlab import host, plan, store
from kvlab.campaign import Campaign, DiskFullError, ServerRecord, SweepResult, is_disk_full
from kvlab.engines.base import Failure
from kvlab.paths import publish_dir, temp_prefix
from kvlab.rows import attempt_row
from kvlab.runner import LocalExecutor
from kvlab.units import count
from kvlab.experiment import ExperimentSpec, RunSpec

#: How to get Ray (the pinned version is in pyproject.toml's ``cluster`` extra).
INSTALL_HINT = "pip install 'kvlab[cluster]' (or `make test-cluster`)"


class ClusterError(RuntimeError):
    """A cluster sweep cannot run: Ray is not installed, the cluster cannot be reached, or a task failed."""


def import_ray():
    """The ``ray`` module, or ClusterError saying how to install it."""
    try:
        import ray  # here, not at the top: Ray is the optional `cluster` extra, and kvlab imports without it
    except ImportError:
        raise ClusterError(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


#: Where Ray reads a token (its AuthenticationTokenLoader): the token itself, or a file holding it; with neither,
#: ~/.ray/auth_token.
RAY_TOKEN_ENV = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")

#: Ray's environment switch for clusters of one machine (ray._private.ray_constants.ENABLE_RAY_CLUSTER); 0 keeps a
#: `--ray local` cluster on the loopback.
RAY_ONE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def connect(address: str, insecure: bool = False):
    """Join the cluster at ``address``: ``auto`` (the one this host belongs to), ``local`` (start one on this
    host), or ``[ray://]host:port``; an already connected process keeps its connection.

    ``local`` starts Ray with token authentication on (RAY_AUTH_MODE=token, set in this process for Ray and the
    nodes it starts) and, unless the environment gives one (:data:`RAY_TOKEN_ENV`), a new token in RAY_AUTH_TOKEN
    (so Ray writes none to ~/.ray/auth_token), as a cluster of this one machine
    whose every server listens on the loopback (:data:`RAY_ONE_MACHINE_ENV`), and no dashboard. A cluster that runs without authentication is left again and refused (ClusterError) unless
    ``insecure`` (``--ray-insecure``): anyone who reaches its ports could run code where kvlab starts engines.
    ``insecure`` also leaves a ``local`` cluster's authentication to RAY_AUTH_MODE as the environment sets it."""
    local = address == "local"
    if local and not insecure:
        # read once, when Ray is imported, by this driver, and by every process of the cluster ray.init starts
        os.environ["RAY_AUTH_MODE"] = "token"
        if not any(os.environ.get(name) for name in RAY_TOKEN_ENV):
            # this cluster's own token, as Ray makes one (secrets.token_hex(32)), in the environment its processes
            # inherit: without one Ray writes a token to ~/.ray/auth_token, a file outside the data folder that
            # outlives the cluster
            os.environ[RAY_TOKEN_ENV[0]] = secrets.token_hex(32)
    if local:
        # Ray's switch for a cluster of one machine (named for the platforms where it is the default): Ray then takes
        # the loopback as the node's address instead of the host's, and Ray 2.60 binds every server (GCS, raylet,
        # workers, agents) to the node's address; without it they listen on every interface (`::`) whatever
        # _node_ip_address says (ray.init resolves 127.0.0.1 to the host's address). Read by Ray's processes when
        # they import it; this process's own copy is set below too, in case Ray was imported already.
        os.environ[RAY_ONE_MACHINE_ENV] = "0"
    ray = import_ray()
    if local:
        try:
            import ray._private.ray_constants as ray_constants  # Ray is optional (kvlab[cluster]): not at the top
        except ImportError:  # a Ray without it (or a stand-in): the environment variable is all there is
            pass
        else:
            ray_constants.ENABLE_RAY_CLUSTER = False
    if ray.is_initialized():
        return ray
    if address not in ("auto", "local"):
        hostport = address.split("://", 1)[-1]
        host_, _, port = hostport.rpartition(":")
        if not host_ or not port.isdigit():
            raise ClusterError(f"--ray {address!r}: not auto, local, ray://host:port or host:port")
        try:
            socket.create_connection((host_, int(port)), timeout=5).close()
        except OSError as exc:
            raise ClusterError(
                f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); "
                "start one with `ray start --head` or use --ray local"
            ) from None
    try:
        if local:  # every server on the loopback (RAY_ONE_MACHINE_ENV above)
            ray.init(address=None, log_to_driver=False, _node_ip_address="127.0.0.1", include_dashboard=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except Exception as exc:  # ConnectionError, or Ray's own when `auto` finds no cluster
        raise ClusterError(f"--ray {address}: cannot join the Ray cluster: {exc}") from None
    if warning := auth_off_warning(address):
        if not insecure:
            ray.shutdown()
            raise ClusterError(f"{warning} Refused: pass --ray-insecure to use it all the same.")
        logging.getLogger(__name__).warning(warning)
    return ray


def auth_mode(environ=os.environ) -> str:
    """Ray's authentication mode in this process once it joined a cluster: ``token`` (or ``k8s``) or ``disabled``.

    Ray (2.52+) reads RAY_AUTH_MODE on every node and on the driver, and a driver without the token cannot join a
    cluster that checks it: so a driver that joined with auth disabled has joined a cluster without it. Asked of
    ``ray._raylet.get_authentication_mode`` (which also knows Ray's own defaults), else of RAY_AUTH_MODE."""
    try:
        # here, not at the top: Ray is the optional `cluster` extra (and older Rays have no token auth)
        from ray._raylet import AuthenticationMode, get_authentication_mode

        mode = get_authentication_mode()
        return next(
            (name.lower() for name in ("TOKEN", "K8S") if mode == getattr(AuthenticationMode, name, object())),
            "disabled",
        )
    except Exception:  # no Ray, or a Ray without token auth (before 2.52)
        return (environ.get("RAY_AUTH_MODE") or "disabled").strip().lower()


def auth_off_warning(address: str, environ=os.environ) -> str | None:
    """What ``--ray`` warns when the cluster it joined runs without authentication; None when it checks a token."""
    if auth_mode(environ) in ("token", "k8s"):
        return None
    return (
        f"--ray {address}: this Ray cluster runs without authentication (RAY_AUTH_MODE is not 'token'): anyone "
        "who can reach its ports can run code on its nodes, and kvlab starts engines there. Start every node and "
        "the driver with RAY_AUTH_MODE=token and one token (RAY_AUTH_TOKEN, or the file `ray get-auth-token "
        "--generate` writes), as docs/experiments.md shows."
    )


def resources_for(group: list[RunSpec], resource: str | None = None) -> dict:
    """Ray task options for one server group: tp × dp GPUs for an engine kvlab launches on GPUs (the experiment's
    ``device`` is gpu); else one CPU, or one unit of the custom ``resource``
    (so that, e.g., one CPU-engine group runs per node whatever its core count)."""
    run = group[0]
    if not run.engine.external and not run.on_cpu:
        return {"num_cpus": 1, "num_gpus": run.engine.gpus}
    if resource:
        return {"num_cpus": 0, "resources": {resource: 1}}
    return {"num_cpus": 1}


def check_capacity(nodes: list[dict], groups: list[tuple[str, list[RunSpec]]], resource: str | None = None) -> None:
    """ClusterError naming the first server group that no single live node can hold (``nodes`` as ``ray.nodes()``
    gives them): a Ray task runs on one node, so such a group would wait forever. Checked against the nodes
    present at dispatch (on an autoscaling cluster, start the nodes first)."""
    alive = [n.get("Resources") or {} for n in nodes if n.get("Alive")]
    for _, group in groups:
        need = resources_for(group, resource)
        demand = {
            k: v
            for k, v in {
                "GPU": need.get("num_gpus", 0),
                "CPU": need.get("num_cpus", 0),
                **need.get("resources", {}),
            }.items()
            if v
        }
        if any(all(res.get(k, 0) >= v for k, v in demand.items()) for res in alive):
            continue
        run = group[0]
        has = max(({k: res.get(k, 0) for k in demand} for res in alive), default={}, key=lambda r: tuple(r.values()))
        raise ClusterError(
            f"{run.experiment}: the {run.engine_label} server group ({count(len(group), 'run')}) needs "
            f"{_amounts(demand)} on one node, and no node of the cluster has that "
            f"({count(len(alive), 'live node')}, the largest {_amounts(has) or 'nothing'}); nothing was dispatched. "
            "A server spanning nodes is started outside kvlab and given as the engine's url."
        )


def _amounts(resources: dict) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in resources.items())


# --------------------------------------------------------------------------- on a node


def run_group(specs: list[ExperimentSpec], keys: list[tuple[str, str]]) -> Iterator[dict]:
    """On a node: run the runs ``keys`` ((experiment, run key) pairs of one server group) with the local executor
    in a temporary data folder; yield the node first, then each run as soon as it is written (its folder as a tar
    archive, and the servers started so far)."""
    import ray  # here, not at the top: the optional `cluster` extra, there on the node where this task runs

    tmp = Path(tempfile.mkdtemp(prefix="kvlab-ray-"))
    finished: queue.Queue = queue.Queue()
    campaign = Campaign(specs, tmp, fresh=True, only=set(keys), on_run=lambda run, status: finished.put(run))
    local = LocalExecutor()
    error: list[BaseException] = []

    def work() -> None:
        try:
            campaign.execute(local)
        except BaseException as exc:  # re-raised in the task, so Ray hands it to the driver
            error.append(exc)
        finally:
            finished.put(None)

    yield {"node": ray.get_runtime_context().get_node_id(), "host": host.describe()}
    thread = threading.Thread(target=work, name="kvlab-group", daemon=True)
    thread.start()
    try:
        while (run := finished.get()) is not None:
            if not (campaign.exp_dir(run.experiment) / run.key).is_dir():
                continue  # counted failed but not stored (the node's disk filled up): the thread's error follows
            yield {
                "experiment": run.experiment,
                "key": run.key,
                "servers": [replace(s, experiments=list(s.experiments)) for s in local.servers],
                "tar": _pack(campaign.exp_dir(run.experiment) / run.key),
            }
        thread.join()
        if error:
            raise error[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _pack(folder: Path) -> bytes:
    """A run folder as an uncompressed tar archive (its files under the folder's name)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=folder.name)
    return buf.getvalue()


# --------------------------------------------------------------------------- on the driver


def _publish(exp_dir: Path, key: str, data: bytes, lost: list[dict]) -> Path:
    """Unpack a run folder next to its final place and move it there by one rename; attempts lost with their
    node come first in its attempts table (and count in its row's ``attempts``)."""
    tmp = Path(
        tempfile.mkdtemp(dir=exp_dir, prefix=temp_prefix(key))
    )  # kvlab's temporary name: clean_partial removes it
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        folder = tmp / key
        if lost:
            att_path, run_path = folder / store.ATTEMPTS_FILE, folder / store.RUN_FILE
            att = pl.read_parquet(att_path)
            att = pl.concat([pl.DataFrame(lost, schema=att.schema), att.with_columns(pl.col("attempt") + len(lost))])
            att.write_parquet(att_path)
            row = pl.read_parquet(run_path)
            cause = row["failure_cause"][0] or "node_lost"  # the cause of the last attempt retried
            row.with_columns(
                pl.lit(att.height).cast(row.schema["attempts"]).alias("attempts"),
                pl.lit(cause).cast(pl.String).alias("failure_cause"),
            ).write_parquet(run_path)
        for f in folder.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        publish_dir(folder, exp_dir / key)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return exp_dir / key


class RayExecutor:
    """Runs a campaign's pending runs on the Ray cluster at ``address`` (see :func:`connect`; see
    kvlab.campaign.Executor): one task per server group, each finished run published here as it comes back.
    ``resource``: the custom Ray resource a CPU group asks one unit of (see :func:`resources_for`)."""

    def __init__(self, address: str = "auto", resource: str | None = None, insecure: bool = False):
        self.address = address
        self.resource = resource
        self.insecure = insecure  # join a cluster without authentication (connect)
        self.nodes: dict[str, dict] = {}  # node id -> host facts, runs, servers

    def preflight(self, campaign: Campaign, todo: list[RunSpec]) -> None:
        """Refuse a load search before the manifest entry opens (its probes are runs the search decides as it goes,
        which a node's task, given its run keys up front, does not send back); the cluster is joined when there is
        work for it."""
        searches = [r for r in todo if r.workload.load is not None and r.workload.load.search is not None]
        if searches:
            names = ", ".join(sorted({f"{r.experiment}/{r.key}" for r in searches})[:3])
            raise ClusterError(
                f"workload.load.search runs on one machine, not under --ray ({len(searches)} search run(s): {names}"
                f"{', ...' if len(searches) > 3 else ''}): sweep these without --ray"
            )

    def run(self, campaign: Campaign, todo: list[RunSpec], result: SweepResult) -> None:
        """Dispatch the pending runs, one task per server group, until every one is stored."""
        if todo:
            _dispatch(
                connect(self.address, self.insecure), campaign, plan.by_server(todo), self.resource, result, self.nodes
            )

    @property
    def servers(self) -> list[ServerRecord]:
        """The servers each node started, with the node."""
        return [replace(s, node=n) for n, node in self.nodes.items() for s in node["servers"]]

    def manifest_extra(self, experiment: str) -> dict:
        """The nodes that ran the experiment's runs: host facts, runs and server starts of each."""
        mine = [
            {
                "node_id": n,
                "host": node["host"],
                "runs": [k for e, k in node["runs"] if e == experiment],
                "server_starts": sum(experiment in s.experiments for s in node["servers"]),
            }
            for n, node in self.nodes.items()
        ]
        return {"ray": {"address": self.address, "nodes": [m for m in mine if m["runs"]]}}


def _dispatch(
    ray,
    campaign: Campaign,
    groups: list[tuple[str, list[RunSpec]]],
    resource: str | None,
    result: SweepResult,
    nodes: dict[str, dict],
) -> None:
    """Run the groups as Ray tasks until every run is stored (or Ctrl-C cancels them all)."""
    check_capacity(ray.nodes(), groups, resource)
    remote = ray.remote(num_returns="streaming", max_retries=0)(run_group)
    specs = list(campaign.specs.values())
    events: queue.Queue = queue.Queue()
    tasks: list[dict] = []  # each: its generator, runs not yet returned, node, latest server records
    running: set[int] = set()
    lost: dict[tuple[str, str], list[dict]] = {}  # node_lost attempts per run

    def submit(group: list[RunSpec]) -> None:
        gen = remote.options(**resources_for(group, resource), name=f"kvlab-group-{group[0].server_key}").remote(
            specs, [(r.experiment, r.key) for r in group]
        )
        tasks.append({"gen": gen, "left": list(group), "node": None, "servers": [], "t0": time.perf_counter()})
        running.add(len(tasks) - 1)
        threading.Thread(target=_drain, args=(ray, len(tasks) - 1, gen, events), daemon=True).start()

    for _, group in groups:
        submit(group)
    try:
        while running:
            try:
                n, item = events.get(timeout=0.5)  # a timeout so that Ctrl-C is seen
            except queue.Empty:
                continue
            task = tasks[n]
            if item is None:
                running.discard(n)
            elif isinstance(item, BaseException):
                running.discard(n)
                if isinstance(item, ray.exceptions.RayTaskError):  # kvlab's own code raised on the node
                    if isinstance(cause := getattr(item, "cause", None), DiskFullError):
                        raise _node_disk_full(campaign, task["node"], cause, result) from None
                    raise ClusterError(f"a server group's task failed on node {task['node']}: {item}") from None
                _on_lost(campaign, task, item, lost, result, submit)
            elif "host" in item:
                task["node"] = item["node"]
                nodes.setdefault(item["node"], {"host": item["host"], "runs": [], "servers": []})
            else:
                exp, key = item["experiment"], item["key"]
                run = next(r for r in task["left"] if (r.experiment, r.key) == (exp, key))
                task["left"].remove(run)
                task["servers"], task["t0"] = item["servers"], time.perf_counter()
                nodes[task["node"]]["runs"].append((exp, key))
                try:
                    path = _publish(campaign.exp_dir(exp), key, item["tar"], lost.pop((exp, key), []))
                except Exception as exc:  # ENOSPC/EDQUOT here: the run is not published, the campaign stops
                    if not is_disk_full(exc):
                        raise
                    raise campaign.disk_full(run, exc, result) from None
                status = pl.read_parquet(path / store.RUN_FILE)["status"][0]
                campaign.stored(run, path, status, result, pl.read_parquet(path / store.ATTEMPTS_FILE).height)
    except BaseException:  # Ctrl-C, or a task that failed in kvlab's code: no task may run on unobserved
        for n in running:
            ray.cancel(tasks[n]["gen"], force=True)
        raise
    finally:
        for task in tasks:  # the servers each task reported, with the node it ran on
            if task["node"] is not None:
                nodes[task["node"]]["servers"] += task["servers"]
        result.server_starts = sum(len(node["servers"]) for node in nodes.values())


def _node_disk_full(campaign: Campaign, node: str | None, exc: DiskFullError, result: SweepResult) -> DiskFullError:
    """A node's disk filled up while it stored a run in its temporary folder: the one error the campaign stops
    with, naming the node, the run and the space left there (the run is counted failed here, not published)."""
    run = exc.run
    if run is not None:
        result.tally(run, "failed")
        campaign.on_run(run, "failed")
    exp_dir = campaign.exp_dir(run.experiment) if run is not None else campaign.data_dir / "runs"
    what = f"run {run.experiment}/{run.key}" if run is not None else "a run"
    done = sum(
        len(store.finished_run_keys(campaign.exp_dir(n))) for n in campaign.specs if campaign.exp_dir(n).is_dir()
    )
    msg = (
        f"disk full on node {node or '(not yet known)'} while it stored {what} in its temporary folder: "
        f"{exc.free_bytes / 2**20:.1f} MiB ({exc.free_bytes:,} bytes) free there ({exc.failure.detail}). Nothing "
        f"of it was published; {count(done, 'finished run')} under {exp_dir.parent} {'is' if done == 1 else 'are'} intact. Free some space on "
        "that node and sweep again: it resumes from this run."
    )
    return DiskFullError(msg, exc.failure, run, exc.free_bytes)


def _drain(ray, n: int, gen, events: queue.Queue) -> None:
    """Forward a task's yielded items to the driver's queue, then None, or the error that ended the task."""
    try:
        for ref in gen:
            events.put((n, ray.get(ref)))
        events.put((n, None))
    except BaseException as exc:
        events.put((n, exc))


def _on_lost(
    campaign: Campaign,
    task: dict,
    exc: BaseException,
    lost: dict[tuple[str, str], list[dict]],
    result: SweepResult,
    submit,
) -> None:
    """A task's node or worker died: charge the run in flight one node_lost attempt, store it failed when its
    attempts are spent, and dispatch the group's other unreturned runs again."""
    left = task["left"]
    task["left"] = []
    if not left:
        return
    run = left[0]
    history = lost.setdefault((run.experiment, run.key), [])
    detail = f"node {task['node'] or '(not yet known)'} lost: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    history.append(
        attempt_row(run, len(history) + 1, Failure("node_lost", detail), time.perf_counter() - task["t0"], None)
    )
    if len(history) >= campaign.specs[run.experiment].retry.max_attempts:
        campaign.record_unsent(
            run,
            "node_lost",
            lost.pop((run.experiment, run.key)),
            "its node was lost in its only attempt"
            if len(history) == 1
            else f"its node was lost in each of {count(len(history), 'attempt')}",
            result,
        )
        left = left[1:]
    if left:
        submit(left)
