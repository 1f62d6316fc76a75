"""SGLang adapter: argv for `sglang serve`, its endpoints, metrics and failure messages."""

from __future__ import annotations

import os
import re

from kvlab import host
from kvlab.engines.base import EngineAdapter, http_json
from kvlab.engines.spec import EngineSpec
from kvlab.paths import ROOT


READY_MARKER = "The server is fired up and ready to roll"

_STARTUP_PATTERNS = [
    ("Not enough memory. Please try to increase --mem-fraction-static", "kv_cache_too_small"),
    ("Not enough memory", "kv_cache_too_small"),
    # sliding-window models: the window's pool took what the full KV pool needed (pool_configurator.py)
    ("leaves no room for the full KV pool", "kv_cache_too_small"),
    # the GPUs' free memory differs at start-up (distributed/bootstrap.py): other processes hold memory on some
    ("The memory capacity is unbalanced", "startup_oom"),
]
_RUNTIME_PATTERNS = [
    ("Scheduler hit an exception", "crash"),
    ("Received sigquit from a child process", "crash"),
]

#: The SGLang-family scheduler's periodic log lines, as sglang-jax 0.1.0rc0 writes them (scheduler_metrics_mixin
#: .log_prefill_stats / log_decode_stats; kvlab reads them from the engines that serve no /metrics, log_telemetry):
#:   Prefill batch. #new-seq: 2, #new-token: 2000, #cached-token: 0, token usage: 0.06, #running-req: 1, #queue-req: 0,
#:   Decode batch. #running-req: 1, #token: 1005, token usage: 0.06, gen throughput (token/s): 3.75, #queue-req: 0,
#: #running-req is the running batch's size when the line is written (a prefill line's does not count its #new-seq:
#: SGLang's /metrics gauge num_running_reqs is set from the same number), #queue-req the waiting queue, token usage
#: the used share of the KV pool (0-1) and #token (decode lines only) the tokens it holds. A hybrid (sliding-window)
#: model logs full and swa usage instead: the larger is kept, as its scheduler itself does.
SCHEDULER_LINE = re.compile(r"\b(?:Prefill|Decode) batch\. ")
LOG_FIELDS: dict[str, re.Pattern[str]] = {
    "requests_running": re.compile(r"#running-req: (\d+),"),
    "requests_waiting": re.compile(r"#queue-req: (\d+),"),
    "kv_cache_usage": re.compile(r"(?<![\w-])(?:full |swa )?token usage: (\d+(?:\.\d+)?),"),
    "kv_tokens_used": re.compile(r"#(?:full |swa )?token: (\d+),"),
}


def kv_bytes_per_token(config: dict, element_bytes: int = 2, head_dim_multiple: int = 1) -> int:
    """KV-cache bytes one token takes for a Llama-style config: K and V for every layer and KV head, head_dim
    rounded up to ``head_dim_multiple`` (1: as the model gives it)."""
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    padded = -(-head_dim // head_dim_multiple) * head_dim_multiple
    kv_heads = int(config.get("num_key_value_heads") or heads)
    return int(config["num_hidden_layers"]) * 2 * kv_heads * padded * element_bytes


#: `sglang serve` through the launch prefix's interpreter: what SGLang 0.5.23's `sglang` script runs (its console entry
#: point, sglang.cli.main:main, which has no ``__main__`` block to `python -m`). ``launch_server`` still works but warns
#: "'sglang serve' is the recommended entrypoint". ``--model-type llm`` picks the language-model backend, which serve
#: otherwise detects by looking for a diffusion model (for a hub id, a download of its model_index.json); serve removes
#: it before its server parser (``prepare_server_args``, the one launch_server runs) reads the rest.
SERVE_SCRIPT = "import sys; from sglang.cli.main import main; sys.exit(main())"
SERVE = ("-c", SERVE_SCRIPT, "serve", "--model-type", "llm")

#: kvlab's fix that binds SGLang's data-parallel port placeholders on the served host (its docstring says why).
BIND_HOST_SHIM = ROOT / "kvlab" / "engines" / "envs" / "sglang-bind-host"
BIND_HOST_ENV = "KVLAB_SGLANG_BIND_HOST"


def bind_host_env(spec: EngineSpec) -> dict[str, str]:
    """PYTHONPATH (BIND_HOST_SHIM first, then the spec's PYTHONPATH, else the one kvlab runs with)
    and BIND_HOST_ENV for an SGLang server with data parallelism on a host of this machine; {} otherwise (dp 1, a
    wildcard host: every interface as asked, a host name). The spec's env extends PYTHONPATH rather than replaces
    it (EngineAdapter.launch_bind_env)."""
    if not spec.data_parallel or host.interface_of(spec.host) is None:
        return {}
    rest = spec.env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    return {
        "PYTHONPATH": os.pathsep.join([str(BIND_HOST_SHIM), *([rest] if rest else [])]),
        BIND_HOST_ENV: spec.host.strip("[]"),
    }


class SGLangAdapter(EngineAdapter):
    name = "sglang"
    label = "SGLang"
    family = "sglang"
    colour_key = "orange"
    # its tokenizer manager rejects input + max_new_tokens >= context_len
    strict_context = True
    cpu_note = "CPU, torch-native kernels"  # PyPI has no build of SGLang's AMX CPU kernels (envs/sglang-cpu-compat)
    module = "sglang.launch_server"  # the pre-`sglang serve` entry (:meth:`entry` runs `sglang serve`)
    health_path = "/health"
    metric_names = {
        "prompt_tokens": "sglang:prompt_tokens_total",
        "generation_tokens": "sglang:generation_tokens_total",
        # SGLang has no prefix-cache query counter: every prompt token goes through the radix-tree
        # lookup, so its prompt-token counter is the query count, and its cached-token counter the
        # hits (tokens served from the radix cache) — the same two sums vLLM's counters give.
        # (sglang:cache_hit_rate is a gauge over a recent window, not a per-run delta.)
        "prefix_cache_queries": "sglang:prompt_tokens_total",
        "prefix_cache_hits": "sglang:cached_tokens_total",
        "preemptions": "sglang:num_retracted_requests_total",  # SGLang "retracts" where vLLM preempts
        "cached_tokens": "sglang:cached_tokens_total",
    }
    # SGLang 0.5.23 (srt/observability/metrics_collector.py) declares both counters with labels (model name, and
    # cache_source for cached tokens) and increments them only on an event: cached_tokens_total in
    # TokenizerMetricsCollector.observe_one_finished_request only when a request had cached_tokens > 0, and
    # num_retracted_requests_total in SchedulerMetricsCollector.increment_retracted_reqs, called by the scheduler
    # only when a decode step retracted at least one request. A labelled prometheus_client counter (multiprocess
    # mode, as SGLang runs it) exports no sample before its first .labels().inc(): absent from a /metrics body
    # that serves sglang:prompt_tokens_total (the same --enable-metrics, the same collectors), each is 0, not
    # unknown. Its prompt-, generation-token counters are incremented on every finished request.
    counted_once_incremented = ("prefix_cache_hits", "cached_tokens", "preemptions")
    telemetry_counted_once_incremented = ("preemptions_total",)  # the same retraction counter, sampled
    telemetry_names = {
        "kv_cache_usage": "sglang:token_usage",  # used share of the KV pool, 0-1
        "requests_running": "sglang:num_running_reqs",
        "requests_waiting": "sglang:num_queue_reqs",
        "preemptions_total": "sglang:num_retracted_requests_total",
        "generation_tokens_total": "sglang:generation_tokens_total",
    }
    cmdline_markers = ("sglang.cli.main", "sglang.launch_server", "sglang::")
    ready_marker = READY_MARKER
    # /health answers as soon as HTTP is up; its warm-up /generate request ends with READY_MARKER.
    health_before_warmup = True
    flush_refused_while_busy = True
    startup_patterns = _STARTUP_PATTERNS
    #: the scheduler at start-up: "max_total_num_tokens=65536, chunked_prefill_size=..., max_running_requests=..."
    kv_pool_patterns = (r"max_total_num_tokens=(\d+)",)
    runtime_patterns = _RUNTIME_PATTERNS
    # SGLang 0.5.23 reads its key from --api-key or from a YAML file given as --config (server_args.py,
    # ConfigArgumentMerger), never from the environment
    api_key_route = "config_file"
    flags = {
        "model": "--model-path",
        "host": "--host",
        "port": "--port",
        "tp": "--tp-size",
        "dcp": "--dcp-size",
        "dp": "--dp-size",
        "memory": "--mem-fraction-static",
        "context": "--context-length",
        "metrics": "--enable-metrics",  # /metrics is off by default in SGLang
        "kv_budget": "--max-total-tokens",  # tokens (kv_budget_arg)
        "cache_report": "--enable-cache-report",  # usage.prompt_tokens_details.cached_tokens
        "prefix_cache_off": "--disable-radix-cache",
    }

    def entry(self, spec: EngineSpec) -> list[str]:
        """`sglang serve --model-type llm` (:data:`SERVE`)."""
        return list(SERVE)

    def kv_budget_arg(self, spec: EngineSpec) -> int:
        """``--max-total-tokens`` takes the budget in tokens: :meth:`kv_budget_tokens`."""
        return self.kv_budget_tokens(spec)

    def telemetry_from_log(self, line: str) -> dict[str, float | None] | None:
        """One scheduler line (:data:`SCHEDULER_LINE`) → {canonical: value, None where the line does not carry it};
        None for any other line. Telemetry's canonical names (the /metrics path's, telemetry_names) plus
        ``kv_tokens_used``."""
        m = SCHEDULER_LINE.search(line)
        if m is None:
            return None
        rest = line[m.end() :]
        out: dict[str, float | None] = {}
        for name, pattern in LOG_FIELDS.items():
            found = [float(v) for v in pattern.findall(rest)]
            out[name] = max(found) if found else None
        return out

    def kv_bytes_per_token(self, config: dict, element_bytes: int) -> int:
        """KV-cache bytes per token in SGLang's (PyTorch) memory pool: head_dim as the model gives it
        (MHATokenToKVPool; no padding)."""
        return kv_bytes_per_token(config, element_bytes)

    def kv_budget_tokens(self, spec: EngineSpec) -> int:
        """kv_cache_bytes as a token count for ``--max-total-tokens`` (needs a local model's config.json)."""
        config = spec.local_config()
        if config is None:
            raise ValueError(
                f"kv_cache_bytes ({spec.kv_cache_bytes}) on {self.name} needs a local model with a config.json "
                f"(to turn bytes into --max-total-tokens); got model {spec.model!r}: pass --max-total-tokens "
                "in extra_args instead"
            )
        element_bytes = 4 if spec.served_dtype() == "float32" else 2  # the KV cache follows the compute dtype
        return spec.served_kv_cache_bytes() // self.kv_bytes_per_token(config, element_bytes)

    def env_overrides(self, spec: EngineSpec) -> dict[str, str]:
        env: dict[str, str] = {}
        if spec.allow_long_context:
            env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = "1"
        return env | dict(spec.env)

    def bind_env(self, spec: EngineSpec, port: int, rendezvous: str) -> dict[str, str]:
        """The collective libraries' interface (EngineAdapter.bind_env), and the scheduler's torch.distributed
        rendezvous through a file: SGLang 0.5.23 initialises it at tcp://<host>:<nccl port> (bootstrap.py
        _resolve_dist_init_method), and torch's TCPStore listens on every interface whatever host it is given
        (measured: the scheduler of a server launched with --host 127.0.0.1 listened on *:<nccl port>; --nccl-port
        would only choose the port). SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE replaces that address (a FileStore: no socket), and
        SGLang then binds neither dist_init_port nor nccl_port (server_args.py PortArgs.init_new). MASTER_ADDR and
        MASTER_PORT: what SGLang otherwise derives from the tcp:// address for the names of its CPU kernels'
        shared-memory segments (bootstrap._set_shm_master_env, setdefault), distinct per server by its port. Not
        where the spec's extra_args make it one node of several (--nnodes, --dist-init-addr): their ranks meet over
        the network, where a file on this machine cannot reach.

        With data parallelism (``spec.data_parallel``) and a host that is an address of this
        machine, also kvlab's fix for the controller's port placeholders (envs/sglang-bind-host: SGLang binds them
        on every interface, with no option for it), first on PYTHONPATH before the spec's own (or the inherited)
        PYTHONPATH, which it runs on: :func:`bind_host_env`."""
        env = super().bind_env(spec, port, rendezvous)
        if any(a.split("=", 1)[0] in ("--nnodes", "--dist-init-addr") for a in spec.extra_args):
            return env
        return (
            env
            | {
                "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE": f"file://{rendezvous}",
                "MASTER_ADDR": spec.host,
                "MASTER_PORT": str(port),
            }
            | bind_host_env(spec)
        )

    def version(self, base_url: str, headers: dict[str, str] | None = None) -> str | None:
        for path in ("/server_info", "/get_server_info"):  # the second is the pre-rename name
            status, body = http_json(base_url + path, headers=headers)
            if status == 200 and isinstance(body, dict) and body.get("version"):
                return str(body["version"])
        return None

    def flush_cache(self, base_url: str, headers: dict[str, str] | None = None) -> bool | None:
        status, body = http_json(base_url + "/flush_cache", method="POST", headers=headers)
        if status is None:
            return None
        # It answers 400 (older releases: 200 with a refusal text) while requests run: read the body.
        return status == 200 and "cache flushed" in str(body).lower() and "not flushed" not in str(body).lower()
