"""What machine a run happened on (GPUs via NVML where present, else the CPU) and which code ran it."""

from __future__ import annotations

import ipaddress
import os
import platform
import subprocess
from collections.abc import Mapping
from functools import lru_cache

import psutil
import pynvml

from kvlab import __version__
from kvlab.paths import ROOT


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform says."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _all_cpu_flags() -> set[str]:
    """Every feature flag /proc/cpuinfo lists for the first CPU (x86 "flags", Arm "Features"); empty elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_flags() -> list[str]:
    """The vector extensions that decide CPU-engine speed (vLLM's CPU build is several times slower
    without AVX-512), as /proc/cpuinfo lists them."""
    have = _all_cpu_flags()
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "bf16") if f in have]


#: CPU flags that mean native bfloat16 arithmetic: AVX512-BF16 or AMX on x86, BF16 on Arm.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


@lru_cache(maxsize=1)
def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively: AVX512-BF16 or AMX on x86, BF16 on Arm.

    Without it vLLM's CPU build runs bfloat16 matrix products through a slow fallback (measured with the
    ISA capped at AVX2: ``benchmarks/avx2_cap.py``), which an engine spec's ``dtype: bfloat16-if-native``
    answers by computing in float32 there.
    """
    return bool(_all_cpu_flags() & NATIVE_BF16_FLAGS)


def interface_of(host: str) -> str | None:
    """The name of this machine's network interface that holds ``host`` (an IP address, or ``localhost``: the
    loopback's), e.g. 'lo' for 127.0.0.1; None for a wildcard (0.0.0.0, ::), a host name, or an address no
    interface holds. What an engine's GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME name (kvlab.engines.base)."""
    name = host.strip("[]")
    try:
        ip = ipaddress.ip_address("127.0.0.1" if name.lower() == "localhost" else name)
    except ValueError:
        return None
    if ip.is_unspecified:
        return None
    interfaces = psutil.net_if_addrs()
    for nic, addrs in interfaces.items():
        for a in addrs:
            try:
                if ipaddress.ip_address(a.address.split("%", 1)[0]) == ip:
                    return nic
            except ValueError:  # a link-layer address
                continue
    if ip.is_loopback:  # 127.0.0.2 and the like, which no interface lists but the loopback answers
        return next(
            (nic for nic, addrs in interfaces.items() for a in addrs if a.address in ("127.0.0.1", "::1")), None
        )
    return None


def gpus() -> list[dict]:
    """NVIDIA GPUs seen through NVML (name, memory); [] without a driver."""
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            out.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    "driver": pynvml.nvmlSystemGetDriverVersion(),
                }
            )
        return out
    finally:
        pynvml.nvmlShutdown()


@lru_cache(maxsize=1)
def describe() -> dict:
    """Host facts stored in every manifest."""
    g = gpus()
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_cores": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": g,
        "accelerator": f"{len(g)}× {g[0]['name']}" if g else f"CPU {platform.machine()} ({os.cpu_count()} cores)",
    }


def pinned_to_cpu(engine: Mapping) -> bool:
    """Whether an engine spec (``EngineSpec`` as a dict, or a stored spec.json's ``engine``) keeps the engine on
    the CPU whatever the host has: sglang-jax's ``--device cpu``, ``JAX_PLATFORMS=cpu``, or no visible CUDA device."""
    args = [str(a) for a in engine.get("extra_args") or []]
    env = {str(k): str(v) for k, v in (engine.get("env") or {}).items()}
    device_arg = any(
        a == "--device" and i + 1 < len(args) and args[i + 1].lower() == "cpu" or a.lower() == "--device=cpu"
        for i, a in enumerate(args)
    )
    return (
        device_arg
        or env.get("JAX_PLATFORMS", "").strip().lower() == "cpu"
        or ("CUDA_VISIBLE_DEVICES" in env and env["CUDA_VISIBLE_DEVICES"].strip() in ("", "-1"))
    )


def device_kind(engine: Mapping, facts: Mapping | None) -> str | None:
    """What computed a run, "cpu" or "gpu", from the engine spec and the facts of the host that served it
    (:func:`describe`): an engine pinned to the CPU ran there; otherwise a host with GPUs ran it on them and one
    without on its CPU. None for a server kvlab did not start (``url``): the facts of this host do not describe
    it. Never read from a hardware label."""
    if pinned_to_cpu(engine):
        return "cpu"
    if engine.get("url") or facts is None:
        return None
    return "gpu" if facts.get("gpus") else "cpu"


def gpu_model(facts: Mapping | None) -> str | None:
    """The GPU model of a host's facts (:func:`describe`) as NVML names it, e.g. 'NVIDIA H100 80GB HBM3' (several
    models: their names, sorted, joined by ' + '); None without GPUs."""
    names = sorted({str(g.get("name")) for g in (facts or {}).get("gpus") or [] if g.get("name")})
    return " + ".join(names) or None


def gpu_count() -> int | None:
    n = len(describe()["gpus"])
    return n or None


def git_commit() -> str | None:
    """The commit of the kvlab checkout, with '-dirty' when it has uncommitted changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        if sha.returncode:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return sha.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def provenance() -> dict:
    return {"kvlab_version": __version__, "git_commit": git_commit(), "host": describe()}
