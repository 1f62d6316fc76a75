"""A peer's own benchmark command as a kept driver process (an engine venv): JSON job lines in, result lines out.

    <engine venv>/bin/python -m benchmarks.drivers.peer_cli vllm|sglang|MODULE:FUNCTION [LOG]

Imports the peer's benchmark once, at start (7 s for vLLM's, 10 s for SGLang's on a 2-core host; what the import
prints is appended to LOG where given), then runs its own CLI entry point once per job, as its command line would:
``vllm`` is ``vllm bench serve`` as benchmarks.peer_agreement.VLLM_BENCH_SERVE runs it (FlexibleArgumentParser,
add_cli_args, main), ``sglang`` is ``python -m sglang.benchmark.serving`` (its ``cli_main``, which parses
``sys.argv``); ``MODULE:FUNCTION`` is any other console-script entry point (a test's fake peer). A job is
``{"argv": [the peer's arguments after the program], "log": path}``: ``sys.argv`` is set as that command line would
set it for the call, everything the peer prints (stdout and stderr at the file-descriptor level, so its logging
handlers and anything below Python too) is appended to the log, and the answer is ``{"exit": code}`` (0 where the
entry point returns, a SystemExit's code where it exits). Any other exception is written to the log and reported
by driver_main's error answer.

What the peers keep between runs in one process, and why a run's figures are still those of a fresh process (read
in vLLM 0.32.0's vllm/benchmarks/serve.py and SGLang 0.5.23's sglang/benchmark/serving.py): both reseed ``random``
and ``np.random`` from ``--seed`` each run and draw their prompts (vLLM's random dataset from its own
``default_rng(seed)``), build their HTTP sessions and event loop (``asyncio.run``) and load their tokenizer anew per
run. SGLang sets its module-global ``args`` per run (its request functions read it) and caches the vocabulary list
of the last tokenizer object (``lru_cache(maxsize=1)`` keyed by the object, a new one each run: recomputed, the same
list), and raises RLIMIT_NOFILE (idempotent). vLLM calls ``gc.freeze()`` each run after the tokenizer and prompts
are made, so whatever they hold in cycles would stay in the permanent generation after the run: this driver calls
``gc.unfreeze()`` and ``gc.collect()`` after every job, so each run starts from a collected heap as a fresh process
does. Checked with each peer's benchmark() replaced by a recorder: a seed's prompts and the global ``random`` and
``np.random`` states at the start of its benchmark (where the arrival gaps are drawn) are the same in a process's
first run and in its third, after a run of another seed.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.bench_tools import driver_main


def vllm_bench_serve() -> tuple[Callable[[], object], str]:
    """``vllm bench serve`` exactly as benchmarks.peer_agreement.VLLM_BENCH_SERVE runs it (its arguments from
    ``sys.argv[1:]``), and the ``sys.argv[0]`` that snippet sees (``-c``)."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def run() -> object:
        p = FlexibleArgumentParser()
        add_cli_args(p)
        return main(p.parse_args(sys.argv[1:]))

    return run, "-c"


def entry_point(spec: str) -> tuple[Callable[[], object], str]:
    """``module:function``: that function, called with no arguments as a console script is (it reads ``sys.argv``),
    and the ``sys.argv[0]`` ``python -m module`` would give it (the module's file)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit(f"peer_cli: a peer is vllm, sglang or MODULE:FUNCTION, not {spec!r}")
    mod = importlib.import_module(module)
    return getattr(mod, name), str(getattr(mod, "__file__", module))


#: the peers by name: how each is loaded (imported once, at start)
PEERS: dict[str, Callable[[], tuple[Callable[[], object], str]]] = {
    "vllm": vllm_bench_serve,
    "sglang": lambda: entry_point("sglang.benchmark.serving:cli_main"),
}


def load(peer: str) -> tuple[Callable[[], object], str]:
    """The entry point of ``peer`` (a name of :data:`PEERS` or ``module:function``) and its ``sys.argv[0]``."""
    return PEERS[peer]() if peer in PEERS else entry_point(peer)


def _flush() -> None:
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) if s}.values():
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


@contextlib.contextmanager
def output_to(log: str | os.PathLike) -> Iterator[None]:
    """For the block, file descriptors 1 and 2 append to ``log``: whatever the code prints, through ``sys.stdout``,
    ``sys.stderr``, a logging handler that took either at import, or below Python, lands there."""
    _flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def run_peer(call: Callable[[], object], argv0: str, argv: list[str]) -> int:
    """One run of the entry point with ``sys.argv`` as its command line gives it; its exit code (0 where it returns,
    a SystemExit's code where it exits: None is 0, an int is itself, anything else is printed and counts 1, as the
    interpreter does). Any other exception is printed (to where stderr goes) and raised."""
    saved = sys.argv
    sys.argv = [argv0, *argv]
    try:
        call()
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        raise
    finally:
        sys.argv = saved


def handler(call: Callable[[], object], argv0: str) -> Callable[[dict], dict]:
    """driver_main's job handler: each job one run of the peer, its output appended to the job's log."""

    def handle(job: dict) -> dict:
        try:
            with output_to(Path(job["log"])):
                code = run_peer(call, argv0, [str(a) for a in job["argv"]])
        finally:
            gc.unfreeze()  # what a run froze (vLLM's freeze_gc_heap) is collectable again, as after a process's end
            gc.collect()
        return {"exit": code}

    return handle


def main(argv: list[str] | None = None) -> None:
    peer, *log = sys.argv[1:] if argv is None else argv
    # the protocol gets its own descriptor; fd 1 goes where stderr goes, so nothing the peer writes to its stdout
    # (now, at import, or later) reaches the protocol; sys.stdout is swapped for the protocol only after the import,
    # so a logging handler the import sets up on sys.stdout holds fd 1, not the protocol
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    with output_to(log[0]) if log else contextlib.nullcontext():
        call, argv0 = load(peer)
    sys.stdout = protocol
    driver_main(handler(call, argv0))


if __name__ == "__main__":
    main()
