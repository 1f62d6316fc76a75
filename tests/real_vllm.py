"""One sweep on the real vLLM CPU build that several engine tests read (conftest's session fixture ``real_vllm``):
each vLLM start costs about 30 s of the suite's time on a 2-core machine, so experiments that need the same server
configuration share one start, as kvlab's own sweeps do.

One sweep of every experiment below in one process: ``studies`` on two servers (prefix caching on / off: shared
fractions, multi-turn, 128 in flight; tests/test_studies.py), and on the cache-on server's exact configuration,
sharing its one start: ``two_contexts`` and ``study_b`` (exact token counts, one start for two experiments),
``repeats`` (the 90%-shared point twice: no run hits another's cache) and ``blocks`` (vLLM's side of the sglang-jax
test: its prefix hits in whole blocks; a start of its own cost that test about 30 s). The second server's start
overlaps the first's (the default), and it is paused (SIGSTOP, every process) while each run of the first group is
measured; the sequential form is checked by the probe test (tests/test_runner.py).

Until 2026-12-06 a third start came first: a `kvlab sweep` SIGKILLed after one finished run, resumed here. The
resume needs no engine of its own (tests/test_runner.py resumes a killed sweep of an external fixture server), and a
SIGKILLed harness's real vLLM going with it is tests/test_server.py's test.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from test_runner import BASE_ENGINE, engine_processes

from kvlab import runner
from kvlab.campaign import Campaign, SweepResult
from kvlab.experiment import ExperimentSpec

#: The workload and steps of the ``blocks`` experiment, which tests/test_sglang_jax.py runs on sglang-jax too.
BLOCKS_WORKLOAD = {"kind": "fixed_batch", "batch_size": 4, "prompt_tokens": 1000, "output_tokens": 12}
_BATCH = {"workload.kind": "fixed_batch", "workload.shared_fraction": None, "workload.concurrency": None}
_SHARED = {"workload.kind": "shared_prefix", "workload.shared_fraction": 0.5, "workload.concurrency": 1}
BLOCKS_STEPS = [_BATCH, _SHARED]


@dataclass
class RealVllmSweep:
    data: Path  # the data folder of every experiment below
    tag: str  # the served model name, on every engine's command line
    result: SweepResult  # the one-process sweep (step 2)
    seen: list[tuple[str, bool, set[str]]]  # per run: its experiment, its caching, the other group's process states


def _write(data: Path, spec: dict) -> Path:
    path = data / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def shared_sweep(data: Path) -> RealVllmSweep:
    tag = f"kvlab-test-{uuid.uuid4().hex[:8]}"
    engine = {**BASE_ENGINE, "served_model_name": tag, "max_model_len": 4096}
    study = [
        *({"workload.kind": "shared_prefix", "workload.shared_fraction": f} for f in (0.0, 0.5, 0.9)),
        {
            "workload.kind": "multi_turn",
            "workload.context_tokens": None,
            "workload.shared_fraction": None,
            "workload.batch_size": 3,
            "workload.turns": 3,
            "workload.document_tokens": 1024,
            "workload.question_tokens": 32,
            "workload.output_tokens": 16,
        },
        {
            "workload.kind": "classification",
            "workload.context_tokens": None,
            "workload.shared_fraction": None,
            "workload.prompt_tokens": 48,
            "workload.output_tokens": 10,
            "workload.batch_size": 160,
            "workload.concurrency": 128,
        },
    ]
    studies = {
        "name": "studies",
        "hardware": "CPU (test)",
        "device": "cpu",
        "engines": {"apc": {**engine, "prefix_caching": True}, "no_apc": {**engine, "prefix_caching": False}},
        "workload": {
            "kind": "shared_prefix",
            "batch_size": 8,
            "concurrency": 4,
            # 1,024 tokens (1,016 of prompt): the 50% and 90% points reuse 3 and 7 whole 128-token blocks of the
            # shared prefix (2,048 until 2026-12-07: the same mechanism at twice the prefill, about 19 s more alone)
            "context_tokens": 1024,
            "output_tokens": 8,
            "shared_fraction": 0.0,
        },
        "matrix": {"engine": ["apc", "no_apc"], "study": study},
        "warmup": True,
        "retry": {"max_attempts": 1, "retry_on": []},
    }
    # experiments on the cache-on server's configuration
    small = {
        "hardware": "CPU (test)",
        "device": "cpu",
        "scale_factor": 32,
        "engines": {"vllm": {**engine, "prefix_caching": True}},
        "warmup": True,
        "retry": {"max_attempts": 1, "retry_on": []},
    }
    paths = [
        _write(data, studies),
        # 2 x 992 against 2 x 4,064 prompt tokens (four times the prefill), and one single run
        _write(
            data,
            {
                **small,
                "name": "two_contexts",
                "matrix": {"workload.context_tokens": [1024, 4096]},
                "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 1024, "output_tokens": 32},
            },
        ),
        _write(
            data,
            {
                **small,
                "name": "study_b",
                "workload": {"kind": "fixed_batch", "batch_size": 1, "context_tokens": 256, "output_tokens": 16},
            },
        ),
        # the studies' 90%-shared point, twice: the repeats must not hit each other's (nor that run's) cache
        _write(
            data,
            {**small, "name": "repeats", "repeats": 2, "workload": {**studies["workload"], "shared_fraction": 0.9}},
        ),
        # vLLM's side of tests/test_sglang_jax.py: 4 distinct 1,000-token prompts, then a 500-token shared prefix sent
        # one request at a time (vLLM reuses whole 128-token blocks of it, sglang-jax every token)
        _write(data, {**small, "name": "blocks", "matrix": {"step": BLOCKS_STEPS}, "workload": BLOCKS_WORKLOAD}),
    ]
    seen: list[tuple[str, bool, set[str]]] = []

    def on_run(run, status):
        other = "--no-enable-prefix-caching"
        procs = [p for p in engine_processes(tag) if (other in " ".join(p.cmdline())) == run.engine.prefix_caching]
        seen.append((run.experiment, run.engine.prefix_caching, {p.status() for p in procs}))

    # overlapped starts: the default
    result = Campaign([ExperimentSpec.load(p) for p in paths], data, on_run=on_run).execute(runner.LocalExecutor())
    return RealVllmSweep(data, tag, result, seen)
