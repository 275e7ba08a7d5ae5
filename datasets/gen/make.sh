#!/usr/bin/env bash
# Rebuild every dataset from registry packages (maintainer step; needs ~6 GB for PyTorch).
#   datasets/gen/make.sh            # build into datasets/, rewrite manifest.toml
#   datasets/gen/make.sh --check    # build twice and report files whose bytes differ
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${PLANEPACK_VENV:-$HOME/.cache/planepack-data/venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/../requirements.txt"
fi
cd "$here"
if [ "${1:-}" = "--check" ]; then
  "$venv/bin/python" build.py
  (cd .. && find . -name '*.safetensors' | sort | xargs sha256sum) > /tmp/planepack-run1.sha
  "$venv/bin/python" build.py
  (cd .. && find . -name '*.safetensors' | sort | xargs sha256sum) > /tmp/planepack-run2.sha
  diff /tmp/planepack-run1.sha /tmp/planepack-run2.sha && echo "all files bit-identical across two runs"
else
  "$venv/bin/python" build.py "$@"
fi
