#!/usr/bin/env bash
# Write a hashed lock file for a GPU host's engine environment (.engines/vllm-cuda, .engines/sglang-cuda) by
# RESOLVING its request file: a CUDA environment cannot pass the tests on a CPU build machine, so it is not frozen
# from a working install the way lock.sh freezes the CPU ones (docs/environments.md, "The GPU host's environments").
# Every package, indirect ones included, is pinned with the sha256 of each of its files on PyPI, for CPython 3.11 on
# x86-64 Linux with glibc >= 2.34 (SGLang 0.5.23's wheels need it). `make locks` calls this.
#   lock-cuda.sh UV REQUEST_FILE LOCK_FILE [CONSTRAINT_LOCK]
# CONSTRAINT_LOCK: a lock whose versions the resolution must keep where they apply (sglang-cuda keeps the versions of
# sglang-cpu.lock, the same PyPI build of SGLang that the CPU tests run, so the two environments differ by nothing).
set -euo pipefail
uv=$1 req=$2 lock=$3 constraint=${4:-}
pins=$(mktemp)
trap 'rm -f "$pins" "$lock.tmp"' EXIT
constrain=()
if [ -n "$constraint" ]; then
  grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' "$constraint" > "$pins"
  constrain=(--constraint "$pins")
fi
"$uv" pip compile -q --generate-hashes --no-header --python-version 3.11 --python-platform x86_64-manylinux_2_34 \
  --index-url https://pypi.org/simple "${constrain[@]}" "$req" -o "$lock.tmp"
{ echo "# Resolved from $(basename "$req") on $(date -u +%F) by kvlab/engines/envs/lock-cuda.sh (CPython 3.11, x86-64 Linux, PyPI)."
  echo "# Do not edit: refresh with \`make locks\` (docs/environments.md)."
  sed -E "s|(-r )[^ ]*/|\1|; s|-c /tmp/[^ ]*|-c $(basename "${constraint:-none}")|" "$lock.tmp"; } > "$lock"
echo "$lock: $(grep -c '^[A-Za-z0-9]' "$lock") packages"
