#!/usr/bin/env bash
# Write a hashed lock file from a WORKING environment: every installed package, indirect ones included,
# at the version that ran, with the sha256 of each of its files on the index. `make locks` calls this for
# each engine environment (see docs/environments.md, "Refreshing the locks").
#   lock.sh UV ENV_DIR LOCK_FILE
# setuptools stays in (torch.utils.cpp_extension imports it; pip venvs carry it, uv venvs do not).
# The lock is installed with `uv pip install --no-deps --require-hashes`: it is the whole environment,
# so uv does not resolve again (the vLLM environment holds SGLang's parser without its torch pin).
set -euo pipefail
uv=$1 env=$2 lock=$3
freeze=$(mktemp)
trap 'rm -f "$freeze"' EXIT
"$uv" pip freeze --python "$env/bin/python" --exclude-editable | grep -v -E '^pip==' > "$freeze"
py=$("$env/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
find_links=()
[ -n "${FIND_LINKS:-}" ] && find_links=(--find-links "$FIND_LINKS")
"$uv" pip compile -q --no-deps --generate-hashes --no-header --python-version "$py" "${find_links[@]}" "$freeze" -o "$lock.tmp"
# uv writes no hash for a file it took from a --find-links folder: add the file's own sha256 (the CPU
# torch wheel on machines that keep PyTorch's CPU index files locally).
while read -r pin; do
  name=${pin%%==*} version=${pin#*==}
  file=$(ls "${FIND_LINKS:-/nonexistent}/${name//-/_}-${version}-"*.whl 2>/dev/null | head -1 || true)
  [ -n "$file" ] || { echo "lock.sh: no hash and no local file for $pin" >&2; exit 1; }
  sum=$(sha256sum "$file" | cut -d' ' -f1)
  sed -i "s|^$pin\$|$pin \\\\\n    --hash=sha256:$sum|" "$lock.tmp"
done < <(grep -E '^[A-Za-z0-9_.-]+==[^ ]+$' "$lock.tmp" || true)
{ echo "# Locked from a working $(basename "$env") environment on $(date -u +%F) by kvlab/engines/envs/lock.sh (Python $py)."
  echo "# Do not edit: refresh with \`make locks\` (docs/environments.md)."
  sed 's|    # via -r /tmp/[^ ]*||' "$lock.tmp" | grep -v '^ *# via -r /tmp/'; } > "$lock"
rm -f "$lock.tmp"
echo "$lock: $(grep -c '^[A-Za-z0-9]' "$lock") packages"
