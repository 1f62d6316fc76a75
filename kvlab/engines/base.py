"""The engine-adapter interface: argv, env, HTTP endpoints and failure classification for one engine."""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

from kvlab import host
from kvlab.engines.spec import EngineSpec
from kvlab.paths import ROOT


# node_lost: a cluster sweep's node (or its worker process) died with the run in flight (kvlab.cluster).
# disk_full: the run could not be stored (ENOSPC or EDQUOT); it stops the sweep and is not stored, so the next
# sweep measures it again (kvlab.campaign.DiskFullError).
FailureCause = Literal[
    "startup_oom", "kv_cache_too_small", "runtime_oom", "crash", "timeout", "http_error", "node_lost", "disk_full"
]
FAILURE_CAUSES: tuple[str, ...] = (
    "startup_oom",
    "kv_cache_too_small",
    "runtime_oom",
    "crash",
    "timeout",
    "http_error",
    "node_lost",
    "disk_full",
)

#: Canonical counter names every adapter maps to its engine's Prometheus names.
CANONICAL_METRICS = (
    "prompt_tokens",
    "generation_tokens",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "cached_tokens",
)

_FITS_RE = re.compile(r"estimated maximum model length is (\d+)")

#: A setting kvlab gives an engine on its command line: an adapter's ``flags`` spell the ones its engine takes,
#: :meth:`EngineAdapter.setting` says each one's value for a spec.
Setting = Literal[
    "model",
    "host",
    "port",
    "tp",
    "dcp",
    "dp",
    "memory",
    "context",
    "metrics",
    "prefix_cache_off",
    "kv_budget",
    "enforce_eager",
    "cache_report",
]
#: The settings every engine spells alike, given after an adapter's own ``flags`` (EngineAdapter.server_args).
SharedSetting = Literal["dtype", "trust_remote_code", "reasoning_parser", "served_model_name", "api_key"]
SHARED_FLAGS: dict[SharedSetting, str] = {
    "dtype": "--dtype",
    "trust_remote_code": "--trust-remote-code",
    "reasoning_parser": "--reasoning-parser",
    "served_model_name": "--served-model-name",
    "api_key": "--api-key",
}


@dataclass(frozen=True)
class Failure:
    """Why a server or a run failed, decided from the exit code and the server log."""

    cause: FailureCause
    detail: str  # the log line (or message) that decided the cause
    fits_max_len: int | None = None  # max model length the engine said would fit, when it said
    exit_code: int | None = None


def fits_max_len(log_text: str) -> int | None:
    """The last 'estimated maximum model length is N' in a log, if any."""
    found = _FITS_RE.findall(log_text)
    return int(found[-1]) if found else None


def _line_with(log_text: str, needle: str) -> str:
    for line in log_text.splitlines():
        if needle.lower() in line.lower():
            return line.strip()[:500]
    return needle


#: The most of a response body ``http_json`` reads (1 MiB: health, version, model lists and flush answers are small).
MAX_HTTP_JSON_BYTES = 2**20


def http_json(url: str, method: str = "GET", timeout: float = 5.0, headers: dict[str, str] | None = None):
    """(status, parsed JSON or text) for one small request; (None, error text) when unreachable, when no complete
    answer came within ``timeout`` seconds in all (a monotonic total: a server that drips bytes does not extend it),
    or when the body is over MAX_HTTP_JSON_BYTES (the error names which: kvlab.httpcall).

    Redirects are not followed (a 3xx is the status returned), so the Authorization header never reaches another
    host; no proxy is taken from the environment.
    """
    # aiohttp (through kvlab.httpcall too): loaded with the first request, not with every import of the adapters,
    # which `kvlab --help` and each command's validation make (half of the help's start-up, issue 57)
    import aiohttp

    from kvlab import httpcall  # (the same stack)

    try:
        answer = httpcall.call(
            method,
            url,
            deadline_s=timeout,
            max_bytes=MAX_HTTP_JSON_BYTES,
            headers=headers,
            data=b"" if method == "POST" else None,
        )
    except (httpcall.HttpLimitError, aiohttp.ClientError, OSError, ValueError) as exc:
        return None, str(exc) or type(exc).__name__
    body = answer.text()
    try:
        return answer.status, json.loads(body)
    except ValueError:
        return answer.status, body


#: What the GPU stack under every engine writes when it fails (PyTorch's CUDA checks, the CUDA runtime's error
#: strings, NCCL's), each a crash: a kernel that faulted or a collective that broke leaves the engine dead whatever
#: the memory setting. Read from the installed wheels by tests/test_gpu_failures.py (libc10_cuda.so, libtorch_cuda.so,
#: libcudart.so.13, libnccl.so.2 of PyTorch 2.14.1's CUDA 13 build), so a reworded message fails that test.
GPU_CRASH_PATTERNS = [
    ("NCCL error", "crash"),  # torch's ProcessGroupNCCL and vLLM's/SGLang's pynccl wrappers
    ("unhandled cuda error", "crash"),  # NCCL's ncclUnhandledCudaError
    ("unhandled system error", "crash"),  # NCCL's ncclSystemError
    ("remote process exited or there was a network error", "crash"),  # NCCL's ncclRemoteError
    ("unspecified launch failure", "crash"),  # cudaErrorLaunchFailure
    ("an illegal memory access was encountered", "crash"),  # cudaErrorIllegalAddress
    ("the launch timed out and was terminated", "crash"),  # cudaErrorLaunchTimeout
    ("CUDA error: ", "crash"),  # torch's C10_CUDA_CHECK for any other CUDA error (after the OOM one)
]

#: Failure messages every engine writes (PyTorch's, the CUDA stack's, the OS's), matched after an engine's own
#: start-up patterns and before its own run-time ones: (needle, cause). A CUDA allocation that failed outside
#: PyTorch's caching allocator (cuBLAS, NCCL buffers) reads "CUDA error: out of memory": memory, not a crash.
COMMON_STARTUP_PATTERNS = [
    ("CUDA out of memory", "startup_oom"),
    ("CUDA error: out of memory", "startup_oom"),
    ("OutOfMemoryError", "startup_oom"),
    *GPU_CRASH_PATTERNS,
    ("Address already in use", "crash"),  # port taken between free_port() and bind
]
COMMON_RUNTIME_PATTERNS = [
    ("CUDA out of memory", "runtime_oom"),
    ("CUDA error: out of memory", "runtime_oom"),
    ("OutOfMemoryError", "runtime_oom"),
    *GPU_CRASH_PATTERNS,
]


class EngineAdapter(ABC):
    """Everything kvlab knows about one engine; pure functions of an EngineSpec (no engine import)."""

    # ------------------------------------------------------------------ identity (what reports say of it)
    name: ClassVar[str]
    #: How figures and tables name the engine (the runtime, where it is not the engine's usual one).
    label: ClassVar[str]
    #: The engine family its results stand for (the article compares two: vLLM's and SGLang's); an engine
    #: outside its family's own name (sglang-jax) is evidence about that family, never a measurement of it.
    family: ClassVar[str]
    #: What a reader must know about the engine when its name could be misread ('' where nothing).
    note: ClassVar[str] = ""
    #: What the engine is, where it stands in for its family's own engine ('' where it is that engine).
    stand_in: ClassVar[str] = ""
    #: Its colour in every figure, a name of kvlab.style.PALETTE (one hue per family, shades within it).
    colour_key: ClassVar[str]

    # ------------------------------------------------------------------ capabilities
    #: An explicit KV budget (EngineSpec.kv_cache_bytes) can be given (vLLM --kv-cache-memory-bytes,
    #: SGLang --max-total-tokens).
    kv_budget: ClassVar[bool] = True
    #: It rejects a request whose prompt + output reaches the context length (SGLang's tokenizer manager checks
    #: ``input + max_new_tokens >= context_len``); False: it accepts up to the context length itself.
    strict_context: ClassVar[bool] = False
    #: It has development endpoints behind a switch (EngineSpec.dev_mode): vLLM's VLLM_SERVER_DEV_MODE.
    dev_endpoints: ClassVar[bool] = False
    #: What ran when the engine serves on a CPU, for provenance lines ('SGLang 0.5.23 (CPU, torch-native
    #: kernels; …)'); empty where the label already says it.
    cpu_note: ClassVar[str] = "CPU"
    module: ClassVar[str]  # run as `python -m <module>` unless :meth:`entry` says otherwise
    health_path: ClassVar[str] = "/health"
    metric_names: ClassVar[dict[str, str | None]]  # canonical -> Prometheus name (None: not exported)
    #: Counters (canonical names of metric_names) the engine exports only once they were first incremented: a
    #: labelled Prometheus counter has no sample until ``.labels(...).inc()`` runs. Absent from a /metrics body
    #: that serves the engine's prompt-token counter, such a counter is 0, not unknown (kvlab.metrics.counter_deltas).
    counted_once_incremented: ClassVar[tuple[str, ...]] = ()
    #: The same for telemetry_names' canonical names: 0 in a sample that serves generation_tokens_total
    #: (kvlab.metrics.telemetry_values).
    telemetry_counted_once_incremented: ClassVar[tuple[str, ...]] = ()
    #: What a run's telemetry samples from /metrics during the run (kvlab.metrics.sample_during): canonical ->
    #: Prometheus name of the engine's gauges and counters (kv_cache_usage as a fraction 0-1).
    telemetry_names: ClassVar[dict[str, str]] = {}
    #: An engine that serves no /metrics but logs SGLang's periodic scheduler lines (#running-req, #queue-req, token
    #: usage): a run's telemetry tails the server log kvlab launched it with instead (kvlab.metrics.tail_log_during,
    #: read by :meth:`telemetry_from_log`, the same series names as telemetry_names'). Not for a server kvlab did not
    #: launch: its log is elsewhere.
    log_telemetry: ClassVar[bool] = False
    #: Where the Prometheus counters are served; None: the engine serves none (counters not available).
    metrics_path: ClassVar[str | None] = "/metrics"
    #: The engine leaves ``usage.prompt_tokens_details`` out when no prompt token was cached, so a
    #: missing value on a successful request means 0 (only when cached-token reporting is on).
    cached_tokens_omitted_when_zero: ClassVar[bool] = False
    #: The engine refuses a cache flush while a request is still finishing (worth asking again shortly).
    flush_refused_while_busy: ClassVar[bool] = False
    #: The engine's completions take a ``cache_salt`` that keys its prefix cache: kvlab isolates each run from
    #: earlier ones with a salt of its own instead of flushing the cache (which vLLM allows only through its
    #: development endpoints).
    cache_salt: ClassVar[bool] = False
    cmdline_markers: ClassVar[tuple[str, ...]]  # substrings that identify this engine's processes
    #: Environment variable the engine reads its API key from (with api_key_route "env").
    api_key_env_var: ClassVar[str | None] = None
    #: How the server is given its API key: "env" (``api_key_env_var``: out of argv and `ps`), "config_file"
    #: (a YAML file of mode 0600 passed as ``--config``, removed once the server is up) or "argv"
    #: (``--api-key``, only where the engine reads it nowhere else: `ps` shows it to every user of the
    #: machine while the server runs; kvlab redacts it in what it records).
    api_key_route: ClassVar[Literal["env", "config_file", "argv"]] = "argv"

    @classmethod
    def serves_metrics(cls) -> bool:
        """Whether the engine serves Prometheus counters (else its server counters are not available, never 0)."""
        return cls.metrics_path is not None

    def telemetry_from_log(self, line: str) -> dict[str, float | None] | None:
        """One line of the server's log → telemetry values (telemetry_names' canonical names), None for a line that
        carries none: the engine's log grammar, which a run with ``log_telemetry`` reads
        (kvlab.metrics.tail_log_during). None for every line here: an engine whose log kvlab does not read."""
        return None

    # ------------------------------------------------------------------ command line
    #: The engine's spelling of each setting kvlab gives it (:data:`Setting`), in the order its argv lists them; a
    #: setting the engine does not name here is never given. The values are :meth:`setting`'s.
    flags: ClassVar[dict[Setting, str]]

    @classmethod
    def flag(cls, setting: Setting) -> str | None:
        """How the engine spells ``setting`` on its command line, None where kvlab never gives it: for prose that
        names the flag (a report quoting the flag that turns vLLM's prefix cache off)."""
        return cls.flags.get(setting)

    def server_args(self, spec: EngineSpec, port: int, api_key: str | None = None) -> list[str]:
        """The arguments after the entry point (:meth:`entry`): what the engine's own parser checks. The adapter's
        ``flags`` in its order, then the flags every engine spells alike (:data:`SHARED_FLAGS`), each with its
        :meth:`setting`, then the spec's extra arguments (last, so they can override)."""
        args: list[str] = []
        for setting, flag in [*self.flags.items(), *SHARED_FLAGS.items()]:
            value = self.setting(setting, spec, port, api_key)
            if value is True:
                args.append(flag)
            elif value is not None and value is not False:
                args += [flag, value]
        return args + list(spec.extra_args)

    def setting(
        self, name: Setting | SharedSetting, spec: EngineSpec, port: int, api_key: str | None = None
    ) -> str | bool | None:
        """One setting's value for ``spec`` served on ``port``: a string, given after its flag; True, the flag
        alone; None or False, the flag left out."""
        match name:
            case "model":
                return spec.model_arg
            case "host":
                return spec.host
            case "port":
                return str(port)
            case "tp":
                return str(spec.tp)
            case "dcp":
                return str(spec.dcp) if spec.dcp > 1 else None
            case "dp":
                return str(spec.dp) if spec.dp > 1 else None
            case "memory":
                return f"{spec.mem_util:g}"
            case "context":
                return str(spec.max_model_len)
            case "metrics":  # serve /metrics, where the engine does not by default
                return True
            case "prefix_cache_off":
                return not spec.prefix_caching
            case "kv_budget":
                return None if spec.kv_cache_bytes is None else str(self.kv_budget_arg(spec))
            case "enforce_eager":
                return spec.enforce_eager
            case "cache_report":
                return spec.report_cached_tokens
            case "dtype":
                return spec.served_dtype() or None
            case "trust_remote_code":
                return spec.trust_remote_code
            case "reasoning_parser":
                return spec.reasoning_parser or None
            case "served_model_name":
                return spec.served_model_name or None
            case "api_key":
                return api_key or None
        raise ValueError(f"{type(self).__name__}: no setting {name!r}")

    def kv_budget_arg(self, spec: EngineSpec) -> int:
        """The explicit KV budget (EngineSpec.kv_cache_bytes) as the engine's ``kv_budget`` flag takes it: bytes, the
        budget the engine is served (EngineSpec.served_kv_cache_bytes), unless the adapter says otherwise."""
        return spec.served_kv_cache_bytes()

    def launch_prefix(self, spec: EngineSpec) -> list[str]:
        """The launch prefix with a relative interpreter path (e.g. '.engines/vllm/bin/python') made absolute."""
        first, rest = spec.launch[0], list(spec.launch[1:])
        if "/" in first and not os.path.isabs(first):
            first = str(ROOT / first)
        return [first, *rest]

    def entry(self, spec: EngineSpec) -> list[str]:
        """What the launch prefix runs to start the server, before the server args: ``-m module`` unless the adapter
        names the engine's own command line (vLLM's ``vllm serve``, SGLang's ``sglang serve``)."""
        return ["-m", self.module]

    def command(self, spec: EngineSpec, port: int, api_key: str | None = None) -> list[str]:
        """Full argv: launch prefix + entry point (:meth:`entry`) + server args."""
        return [*self.launch_prefix(spec), *self.entry(spec), *self.server_args(spec, port, api_key)]

    def env_overrides(self, spec: EngineSpec) -> dict[str, str]:
        """Variables kvlab sets for this engine (the spec's env wins); what server_key hashes."""
        return dict(spec.env)

    def env(self, spec: EngineSpec, base: dict[str, str] | None = None) -> dict[str, str]:
        """The full environment for the server process: ``base`` (default os.environ) + overrides."""
        merged = dict(os.environ if base is None else base)
        # Engine environments are built without byte-compiling (uv, docs/environments.md): let the first start
        # write bytecode for the modules it imports, else every start (and each worker the engine spawns with
        # -B) compiles torch and the engine from source again. The spec's env can still set it.
        merged.pop("PYTHONDONTWRITEBYTECODE", None)
        merged.update(self.env_overrides(spec))
        return merged

    def bind_env(self, spec: EngineSpec, port: int, rendezvous: str) -> dict[str, str]:
        """Variables that keep every port the engine's own processes open on ``spec.host``, for its start on
        ``port``: the collective libraries' listeners (Gloo's and NCCL's bootstrap sockets bind to the address the
        machine's host name resolves to, often a LAN address, unless told an interface), and where an engine's
        workers would meet over a TCP store (which binds every interface whatever address it is given), a file
        instead: ``rendezvous``, a path in kvlab's private state folder that no other start uses (removed at stop).
        Set at launch over the inherited environment, under the spec's env (which wins); not part of the server
        key, since another machine names another interface. No interface is named for a wildcard host (0.0.0.0,
        ::: every interface, as asked) or a host name (kvlab cannot tell which interface that is)."""
        nic = host.interface_of(spec.host)
        # NCCL matches an interface name as a prefix unless it starts with '='; Gloo takes the exact name
        return {"GLOO_SOCKET_IFNAME": nic, "NCCL_SOCKET_IFNAME": f"={nic}"} if nic else {}

    def scratch_env(self, folder: str) -> dict[str, str]:
        """Variables that keep the files an engine writes for itself (its IPC sockets, lock files, caches) in
        ``folder``, a temporary folder of this start's own that kvlab removes when the server stops
        (server.EngineServer): TMPDIR, which Python's tempfile and most libraries honour. Set at launch under the
        spec's env (which wins); not part of the server key."""
        return {"TMPDIR": folder}

    #: bind_env variables that already hold the spec's own value (a path put before the spec's PYTHONPATH), so the
    #: spec's env extends them rather than replaces them
    BIND_EXTENDS_SPEC_ENV: ClassVar[tuple[str, ...]] = ("PYTHONPATH",)

    def launch_bind_env(self, spec: EngineSpec, port: int, rendezvous: str) -> dict[str, str]:
        """What of :meth:`bind_env` a launch sets: all of it but what the spec's env sets itself (which wins),
        except :attr:`BIND_EXTENDS_SPEC_ENV`. The server's start (server.EngineServer._env) and the dry run (plan.py)."""
        return {
            k: v
            for k, v in self.bind_env(spec, port, rendezvous).items()
            if k not in spec.env or k in self.BIND_EXTENDS_SPEC_ENV
        }

    # ------------------------------------------------------------------ HTTP
    def base_url(self, spec: EngineSpec, port: int | None) -> str:
        """Where the server answers: the spec's url for an external server, else host:port."""
        if spec.url:
            return spec.url.rstrip("/")
        return f"http://{spec.host}:{port}"

    @abstractmethod
    def version(self, base_url: str, headers: dict[str, str] | None = None) -> str | None:
        """The engine version the running server reports, or None when it does not answer."""

    @abstractmethod
    def flush_cache(self, base_url: str, headers: dict[str, str] | None = None) -> bool | None:
        """Empty the prefix cache: True done, False refused (busy / not enabled), None unreachable."""

    # ------------------------------------------------------------------ failures
    #: Printed once the server is up: log matches after it are runtime failures, before it start-up ones.
    ready_marker: ClassVar[str]
    #: /health answers 200 before the server has finished warming itself up, so a server kvlab launched is
    #: ready only once its log shows ``ready_marker`` too (else its own warm-up request runs inside the
    #: first measured batch).
    health_before_warmup: ClassVar[bool] = False
    #: (needle, cause) pairs, most specific first; wording drifts between releases, so match fragments.
    startup_patterns: ClassVar[list[tuple[str, str]]]
    runtime_patterns: ClassVar[list[tuple[str, str]]]
    #: Lines that best explain an otherwise unclassified non-zero exit.
    crash_markers: ClassVar[tuple[str, ...]] = ("Traceback",)

    #: Regular expressions whose first group is the KV pool in tokens as the engine logs it at start-up (digits,
    #: thousands commas allowed); empty where the engine logs none.
    kv_pool_patterns: ClassVar[tuple[str, ...]] = ()

    def kv_pool_tokens(self, log_text: str) -> int | None:
        """The server's KV pool in tokens as the engine itself reports it in ``log_text`` (one start's log), or None
        when it reports none. Several reports (one per engine core, e.g. data-parallel replicas) that differ give
        the smallest: the pool one replica holds, which bounds what it can admit."""
        found = [int(m.replace(",", "")) for pattern in self.kv_pool_patterns for m in re.findall(pattern, log_text)]
        return min(found) if found else None

    def classify_failure(self, exit_code: int | None, log_text: str) -> Failure | None:
        """Failure from an exit code (None: still running) and the server log; None when nothing failed."""
        patterns = (
            [*COMMON_RUNTIME_PATTERNS, *self.runtime_patterns]
            if self.ready_marker in log_text
            else [*self.startup_patterns, *COMMON_STARTUP_PATTERNS]
        )
        hit = self._first_match(log_text, patterns)
        if hit:
            cause, line = hit
            fits = fits_max_len(log_text) if cause == "kv_cache_too_small" else None
            return Failure(cause, line, fits, exit_code)  # type: ignore[arg-type]
        if exit_code not in (None, 0):
            line = self._first_match(log_text, [(m, "crash") for m in self.crash_markers])
            return Failure("crash", line[1] if line else f"exited with code {exit_code}", None, exit_code)
        return None

    @staticmethod
    def _first_match(log_text: str, patterns: list[tuple[str, str]]) -> tuple[str, str] | None:
        low = log_text.lower()
        for needle, cause in patterns:
            if needle.lower() in low:
                return cause, _line_with(log_text, needle)
        return None
