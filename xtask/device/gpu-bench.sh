#!/usr/bin/env bash
# The prepared GPU bench for a lent device machine (an NVIDIA H200 here): one call runs
# `xtask gpu-bench` on every dataset there (decode and IBP encode against the copy kernel, the
# offload round trip both ways, IBP gathers) and writes its figures under $OUT.
#
# The device has the NVIDIA driver but no Vulkan loader and no Rust toolchain. Prepare here,
# from the repository root (once per session; `.gl` and `.devbin` are ignored through
# .git/info/exclude):
#
#   echo /.gl/ >> .git/info/exclude; echo /.devbin/ >> .git/info/exclude
#   lists=$(mktemp -d); mkdir -p .gl "$lists/partial"
#   o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$lists"
#   apt-get $o update && (cd .gl && apt-get $o download libvulkan1)
#   cargo build --release -p xtask && mkdir -p .devbin && cp target/release/xtask .devbin/
#
# Test it here on lavapipe before spending device time (a few datasets, to /tmp):
#
#   OUT=/tmp/devtest FILTER=kv RUNS=3 bash xtask/device/gpu-bench.sh
#
# Then one `run` with carry [".gl", ".devbin"], command `bash xtask/device/gpu-bench.sh`,
# and a timeout that leaves room for a rerun. The datasets travel with the checkout.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$nvidia_icd" ] && export VK_DRIVER_FILES="$nvidia_icd"
command -v nvidia-smi >/dev/null && nvidia-smi -L
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
export PLANEPACK_DATASETS="$PWD/datasets"
bin=.devbin/xtask
[ -x "$bin" ] || bin=target/release/xtask
args=(gpu-bench --out "$OUT/gpu" --runs "${RUNS:-7}")
[ -n "${FILTER:-}" ] && args+=(--filter "$FILTER")
"$bin" "${args[@]}" 2>&1 | tee "$OUT/log"
status=${PIPESTATUS[0]}
echo "gpu-bench exit status $status" | tee -a "$OUT/log"
exit "$status"
