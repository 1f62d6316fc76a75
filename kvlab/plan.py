"""The plan step of a sweep, between validation and execution: make what the runs need on this machine
(kvlab's tiny model), then validate every run, and group the runs by the server they need; the dry run prints
that plan. Validation itself (kvlab.experiment) writes nothing."""

from __future__ import annotations

import shlex
from pathlib import Path

from kvlab import tinymodel
from kvlab.engines import get_adapter
from kvlab.engines.spec import redact_env
from kvlab.experiment import ExperimentSpec, RunSpec, expand
from kvlab.units import count


def make_local_models(spec: ExperimentSpec) -> list[Path]:
    """Generate kvlab's tiny model when an engine of ``spec`` uses it (deterministic; a current copy is
    reused); returns the models made or checked."""
    tiny = tinymodel.DEFAULT_PATH.resolve()
    if any(Path(e.model_arg).resolve() == tiny for e in spec.engines.values()):
        return [tinymodel.ensure_tiny_model()]
    return []


def load(path: str | Path) -> ExperimentSpec:
    """An experiment ready to sweep: its fields validated, its local models made, then every run validated
    (SpecError naming file, field and value), so a fresh clone sweeps without a separate step."""
    spec = ExperimentSpec.read(path)
    make_local_models(spec)
    spec.check_runs(Path(path))
    return spec


def by_server(runs: list[RunSpec]) -> list[tuple[str, list[RunSpec]]]:
    """Runs grouped by identical server configuration (``server_key``), in first-seen order: each group
    is one server start."""
    groups: dict[str, list[RunSpec]] = {}
    for r in runs:
        groups.setdefault(r.server_key, []).append(r)
    return list(groups.items())


def starts_may_overlap(run: RunSpec, nxt: RunSpec) -> bool:
    """Whether ``nxt``'s server may be launched while ``run``'s starts (the runner then pauses it while ``run``'s
    group is measured): only kvlab-launched engines on a CPU (the experiment's ``device: cpu``), each with an
    explicit KV budget (kv_cache_bytes), so two fit in host memory and neither sizes its cache from what the other
    left free. On a GPU host servers never overlap: the GPUs are the server's."""
    return all(not r.engine.external and r.engine.kv_cache_bytes is not None and r.on_cpu for r in (run, nxt))


def dry_run_text(specs: ExperimentSpec | list[ExperimentSpec], overlap_starts: bool = True) -> str:
    """The exact commands a sweep of these experiments would run, one block per server configuration
    (a server whose runs come from several experiments is listed once, as it is started once)."""
    specs = [specs] if isinstance(specs, ExperimentSpec) else list(specs)
    runs = [r for spec in specs for r in expand(spec)]
    lines = [
        f"# experiment {spec.name}: {count(sum(r.experiment == spec.name for r in runs), 'run')}" for spec in specs
    ]
    many = len(specs) > 1
    groups = by_server(runs)
    for i, (server_key, group) in enumerate(groups):
        e = group[0].engine
        adapter = get_adapter(e.name)
        port = e.port or 0
        env = adapter.env_overrides(e)
        if e.external:
            lines.append(
                f"\n# server {server_key} ({e.name}) at {e.url}: external, kvlab does not start or "
                f"stop it; {count(len(group), 'run')}"
            )
        else:
            early = overlap_starts and i > 0 and starts_may_overlap(groups[i - 1][1][0], group[0])
            lines.append(
                f"\n# server {server_key} ({e.name}); port {'{free port}' if not e.port else port}; "
                f"{count(len(group), 'run')}"
                + ("; launched while the previous server starts, paused while its runs are measured" if early else "")
            )
        if not e.external:
            # the API key as the server is given it (server.EngineServer.argv and _env), by reference only
            key_ref = f"${e.api_key_env}" if e.api_key_env else None
            route = adapter.api_key_route if key_ref else None
            env = redact_env(env)
            # what keeps the engine's own ports on its host, given at launch (server.EngineServer._env)
            bind = adapter.launch_bind_env(e, port, "$RENDEZVOUS")
            env |= {k: "$PORT" if not e.port and v == str(port) else v for k, v in bind.items()}
            # the engine's own temporary folder, made at launch and removed at stop (server.EngineServer._env)
            scratch = {k: v for k, v in adapter.scratch_env("$ENGINE_TMPDIR").items() if k not in e.env}
            env |= scratch
            if scratch:
                lines.append(
                    "# ENGINE_TMPDIR: a new folder of this start's own (mode 0700) in kvlab's temporary folder, "
                    "where the engine keeps its sockets and caches; removed when the server stops"
                )
            if any("$RENDEZVOUS" in v for v in env.values()):
                lines.append(
                    "# RENDEZVOUS: a new file name in kvlab's private state folder, where the engine's workers "
                    "meet instead of a TCP store on every interface; removed when the server stops"
                )
            if route == "env":
                env[adapter.api_key_env_var] = key_ref
            argv = adapter.command(e, port, key_ref if route == "argv" else None)
            if route == "config_file":
                argv += ["--config", "$KEYFILE"]
                lines.append(
                    f"# KEYFILE: a new file of mode 0600 holding 'api-key: {key_ref}', removed once the server is up"
                )
            elif route == "argv":
                lines.append(
                    f"# warning: {e.name} reads its API key only from --api-key: while this server runs, "
                    "`ps` shows the key to every user of this machine"
                )
            if env:
                lines.append("env " + " ".join(f"{k}={_shell_quote(v)}" for k, v in sorted(env.items())) + " \\")
            if not e.port:  # the port is chosen at launch
                argv[argv.index("--port") + 1] = "$PORT"
            lines.append("  " + " ".join(_shell_quote(a) for a in argv))
        for r in group:
            w = r.workload
            run_id = f"{r.experiment}/{r.key}" if many else r.key
            lines.append(
                f"#   run {run_id}: {r.context_label} ({w.prompt_len}+{w.output_tokens} tokens) × "
                f"{w.batch_size} {w.kind}{_detail(w)}, repeat {r.repeat}"
            )
    return "\n".join(lines)


def _shell_quote(a: str) -> str:
    return a if a.startswith("$") or a == "file://$RENDEZVOUS" else shlex.quote(a)


def _detail(w) -> str:
    """What the dry run adds per workload: its kind's detail (sharing, turns), requests in flight."""
    parts = w.detail()
    if w.concurrency is not None:
        parts.append(f"≤{w.concurrency} in flight")
    if w.load is not None:
        parts.append(f"load {w.load.label()}, {w.load.warmup_requests} warm-up")
    return f" ({'; '.join(parts)})" if parts else ""
