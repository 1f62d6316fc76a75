#!/usr/bin/env bash
# Print the first interpreter that runs Python >= $1 (default 3.12) and < 3.14 (sglang-jax's range):
# python3.13 / python3.12 on PATH, then pyenv's and the usual install folders. Exit 1, saying what
# to install, when there is none.
set -uo pipefail
want="${1:-3.12}"
ok() { "$1" -c "import sys; v = sys.version_info[:2]; sys.exit(not ((3, ${want#3.}) <= v < (3, 14)))" 2>/dev/null; }
for cand in python3.13 python3.12 \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[23]*/bin/python3.1[23] \
    /usr/local/bin/python3.1[23] /usr/bin/python3.1[23] /opt/python/3.1[23]*/bin/python3; do
  path=$(command -v "$cand" 2>/dev/null) || continue
  if ok "$path"; then echo "$path"; exit 0; fi
done
echo "no Python >= $want (< 3.14) found for sglang-jax: install one (e.g. 'apt-get install python3.12', " \
     "'pyenv install 3.12') or give it: make ENGINE_PYTHON312=/path/to/python3.12 ..." >&2
exit 1
