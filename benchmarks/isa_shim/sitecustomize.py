"""Measurement shim for benchmarks/avx2_cap.py: make an AVX-512 host answer as an AVX2-only one.

Put on PYTHONPATH with KVLAB_AVX2_CAP=1 (the benchmark does both; nothing else loads it). Python imports
``sitecustomize`` at start-up, so every process of the engine (API server, engine core, worker) and the
kvlab sweep that launches it is affected:

- in an engine environment with torch: torch's CPU-capability probes that vLLM's CPU build consults
  (AVX-512, AVX512-BF16, AMX) answer False, so it loads its AVX2 kernels and picks the AVX2 attention
  path. The benchmark also sets ATEN_CPU_CAPABILITY=avx2 (torch's own kernels) and
  ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN's JIT, torch's and vLLM's copies) and XLA_FLAGS=--xla_cpu_max_isa=AVX2
  (sglang-jax's XLA);
- in kvlab's environment: ``kvlab.host.native_bf16`` answers False, so ``dtype: bfloat16-if-native``
  resolves as it would on an AVX2-only CPU.

It changes which code paths run, not the hardware: clock speed, caches and memory bandwidth stay this
machine's, so capped timings estimate an AVX2-only CPU, they do not replace one.
"""

import os

if os.environ.get("KVLAB_AVX2_CAP") == "1":
    try:
        import torch
    except ImportError:  # kvlab's own environment, or sglang-jax's
        torch = None
    if torch is not None:
        for _probe in (
            "_is_avx512_supported",
            "_is_avx512_vnni_supported",
            "_is_avx512_bf16_supported",
            "_is_amx_tile_supported",
            "_is_amx_fp16_supported",
        ):
            if hasattr(torch.cpu, _probe):
                setattr(torch.cpu, _probe, lambda: False)
    try:
        import kvlab.host as _host
    except ImportError:  # an engine environment
        _host = None
    if _host is not None:
        _host.native_bf16 = lambda: False

# Python imports only the first sitecustomize on its path: run the next one too (SGLang's CPU compatibility fix,
# kvlab/engines/envs/sglang-cpu-compat, when the capped engine is SGLang), so the cap and the fix both apply.
if os.environ.get("KVLAB_AVX2_CAP") == "1":
    import importlib.util as _util
    import sys as _sys

    _here = os.path.dirname(os.path.abspath(__file__))
    for _entry in _sys.path:
        _next = os.path.join(os.path.abspath(_entry or "."), "sitecustomize.py")
        if os.path.dirname(_next) != _here and os.path.isfile(_next):
            _spec = _util.spec_from_file_location("_kvlab_next_sitecustomize", _next)
            _module = _util.module_from_spec(_spec)
            _sys.modules[_spec.name] = _module
            _spec.loader.exec_module(_module)
            break
