"""sglang-jax adapter: SGLang's JAX runtime (PyPI ``sglang-jax``, module ``sgl_jax``), the SGLang engine that serves on CPU.

sglang-jax is the SGLang project's port of its server to JAX (TPU first; CPU and GPU through
JAX's backends). It keeps SGLang's scheduler, its radix-tree prefix cache (RadixAttention,
page size 1: hits are token-exact) and its OpenAI API, so on a machine without a GPU it is the
SGLang side of a measured comparison. It is *not* PyTorch SGLang: kernels, batching details and
speed differ, so results on it are labelled ``sglang-jax`` and never stand for ``sglang``.

What it lacks (0.1.0rc0, measured): ``/metrics`` answers 404 even with ``--enable-metrics``, so
server-side counters are *not available* (None, never 0), and a run's telemetry (requests running and
waiting, KV-pool usage) comes from its scheduler's periodic log lines instead; prefix hits come from
``usage.prompt_tokens_details.cached_tokens``, which it omits when the hit is 0; the version is
in ``/get_server_info``. ``--mem-fraction-static`` sizes the KV pool from device memory (on CPU:
half of host RAM by default), so an explicit KV budget is passed as ``--max-total-tokens``.
"""

from __future__ import annotations

from kvlab.engines.base import EngineAdapter, http_json
from kvlab.engines import sglang
from kvlab.engines.sglang import SGLangAdapter
from kvlab.engines.spec import EngineSpec


_STARTUP_PATTERNS = [
    ("Not enough memory", "kv_cache_too_small"),
    ("RESOURCE_EXHAUSTED", "startup_oom"),  # XLA's allocation failure
]
_RUNTIME_PATTERNS = [
    ("RESOURCE_EXHAUSTED", "runtime_oom"),
    ("Scheduler hit an exception", "crash"),
    ("Received sigquit from a child process", "crash"),
]


def kv_bytes_per_token(config: dict, element_bytes: int = 2) -> int:
    """KV-cache bytes one token takes in sglang-jax for a Llama-style config (bf16 unless ``element_bytes``
    says otherwise, head_dim padded to 128).

    Its memory pool stores K and V for every layer and KV head with head_dim rounded up to a
    multiple of 128 (``align_to(head_dim, 128)`` in ``memory_pool.merge_kv``).
    """
    return sglang.kv_bytes_per_token(config, element_bytes, head_dim_multiple=128)


class SGLangJaxAdapter(SGLangAdapter):
    name = "sglang-jax"
    label = "sglang-jax (CPU)"
    # family "sglang" (inherited): evidence about SGLang's family, never a measurement of PyTorch SGLang
    colour_key = "dark orange"
    note = (
        "SGLang's JAX runtime (`sgl_jax`) on JAX's CPU backend, **not PyTorch SGLang** (the engine the article "
        "measured): its kernels and speed differ, so its results are labelled sglang-jax and never stand for sglang"
    )
    stand_in = (
        "SGLang's JAX runtime, run here on CPU. It keeps SGLang's radix-tree prefix cache (RadixAttention, page "
        "size 1, so a hit is token-exact); its results are evidence about the SGLang family on CPU, never "
        "SGLang on a GPU"
    )
    cpu_note = ""  # the label says it
    module = "sgl_jax.launch_server"
    health_path = "/health"
    # No /metrics endpoint (404): every counter is "not exported", so its deltas are None.
    metric_names = {k: None for k in SGLangAdapter.metric_names}
    metrics_path = None
    telemetry_names = {}  # nothing to sample over HTTP ...
    # ... so a run's telemetry tails its server log's scheduler lines ("Prefill batch." / "Decode batch.": #running-req,
    # #queue-req, token usage, #token), as of the engine's last such line (SGLangAdapter.telemetry_from_log)
    log_telemetry = True
    cached_tokens_omitted_when_zero = True
    cmdline_markers = ("sgl_jax.launch_server", "sgl_jax", "sglang::")
    startup_patterns = _STARTUP_PATTERNS
    runtime_patterns = _RUNTIME_PATTERNS
    #: its model runner at start-up (sgl_jax model_runner_kv_cache_mixin): "ModelRunner final max_total_num_tokens: N"
    kv_pool_patterns = (r"final max_total_num_tokens: (\d+)",)
    # sglang-jax 0.1.0rc0 reads its key only from --api-key: no config file, no environment variable
    api_key_route = "argv"
    # SGLang's spellings, with no decode context parallelism and no --enable-metrics (it would serve nothing), and
    # data parallelism after the memory flags
    flags = {
        "model": "--model-path",
        "host": "--host",
        "port": "--port",
        "tp": "--tp-size",
        "memory": "--mem-fraction-static",
        "context": "--context-length",
        "dp": "--dp-size",
        "kv_budget": "--max-total-tokens",  # tokens (SGLangAdapter.kv_budget_arg)
        "cache_report": "--enable-cache-report",
        "prefix_cache_off": "--disable-radix-cache",
    }

    def entry(self, spec: EngineSpec) -> list[str]:
        """``-m sgl_jax.launch_server``: sglang-jax 0.1.0rc0 has no `serve` command line (no ``sgl_jax.cli``)."""
        return EngineAdapter.entry(self, spec)

    def kv_bytes_per_token(self, config: dict, element_bytes: int) -> int:
        return kv_bytes_per_token(config, element_bytes)  # head_dim padded to 128 (module function)

    def env_overrides(self, spec: EngineSpec) -> dict[str, str]:
        return dict(spec.env)  # no long-context override variable; JAX_PLATFORMS etc. come from the spec

    def bind_env(self, spec: EngineSpec, port: int, rendezvous: str) -> dict[str, str]:
        # JAX, not torch.distributed: no TCP store to move (SGLang's override would be read by nothing)
        return EngineAdapter.bind_env(self, spec, port, rendezvous)

    def version(self, base_url: str, headers: dict[str, str] | None = None) -> str | None:
        status, body = http_json(base_url + "/get_server_info", headers=headers)
        if status == 200 and isinstance(body, dict) and body.get("version"):
            return str(body["version"])
        return None
