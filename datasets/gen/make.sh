#!/usr/bin/env bash
# Rebuild every dataset from registry packages (maintainer step; needs ~6 GB for PyTorch).
#   datasets/gen/make.sh            # build into datasets/, rewrite manifest.toml
#   datasets/gen/make.sh --check    # build a second copy in a temp folder, compare every file
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${PLANEPACK_VENV:-$HOME/.cache/planepack-data/venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/../requirements.txt"
fi
cd "$here"
if [ "${1:-}" = "--check" ]; then
  second="$(mktemp -d)"
  PLANEPACK_DATASETS_OUT="$second" "$venv/bin/python" -c '
import activations, others
activations.build(); others.kv_cache(); others.embeddings(); others.gnn(); others.weights()'
  status=0
  for f in $(cd .. && find . -name '*.safetensors' | sort); do
    if cmp -s "../$f" "$second/$f"; then echo "same      $f"; else echo "DIFFERENT $f"; status=1; fi
  done
  exit $status
else
  "$venv/bin/python" build.py "$@"
fi
