#!/usr/bin/env bash
# The prepared GPU bench for a lent device machine (an NVIDIA H200 here): one call runs
# `xtask gpu-bench` on every dataset there (decode, and bit-plane, IBP and rANS encode, against
# the copy kernel, the offload round trip both ways, IBP gathers) and writes its figures under
# $OUT.
#
# The device has the NVIDIA driver but no Vulkan loader and no Rust toolchain. Prepare here,
# from the repository root (once per session; `.gl` and `.devbin` are ignored through
# .git/info/exclude):
#
#   echo /.gl/ >> .git/info/exclude; echo /.devbin/ >> .git/info/exclude
#   lists=$(mktemp -d); mkdir -p .gl "$lists/partial"
#   o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$lists"
#   apt-get $o update && (cd .gl && apt-get $o download libvulkan1 libglvnd0 libegl1 \
#       libopengl0 libgl1 libglx0 libgles2)
#   cargo build --release -p xtask && mkdir -p .devbin && cp target/release/xtask .devbin/ \
#       && strip .devbin/xtask
#
# (The loader alone is not enough: NVIDIA's Vulkan driver is libGLX_nvidia, which needs
# glvnd's dispatch library; without it no adapter is found (seen on the H200, 2026-12-04).
# Stripped, the binary is 13 MB and the call's tree 65 MB, under the 64 MiB limit; unstripped
# (16 MB) it is over.)
#
# Test it here on lavapipe before spending device time (a few datasets, to /tmp):
#
#   OUT=/tmp/devtest FILTER=kv RUNS=3 bash xtask/device/gpu-bench.sh
#
# NAME (default gpu) names the results folder and log under $OUT, CODECS limits the codecs
# (`--codecs`), and the planepack-gpu variables pass through: e.g. a second run in the same call,
# `NAME=gpu-whole CODECS=rans PLANEPACK_GPU_RANS_PLANES=0`, measures the rANS decoder with a
# workgroup per chunk beside the GPU default (plane-parallel) on the same machine.
#
# Then one `run` with carry [".gl", ".devbin"], command `bash xtask/device/gpu-bench.sh`,
# and a timeout that leaves room for a rerun. The datasets travel with the checkout.
#
# NVIDIA's nvCOMP beside it does not fit in a call (measured 2026-12-02, again 2026-12-04): a
# call carries the whole working tree within 64 MiB; the tracked tree is 51.8 MB (43 MB of it
# datasets), the stripped binary 13 MB, and
# nvCOMP for the device's CUDA 13 is two wheels, nvidia-nvcomp-cu13 6.0.0.12 (4.2 MB) and
# nvidia-libnvcomp-cu13 (29.8 MB; its libnvcomp.so.6 alone is 25 MB, 21.7 MB under xz -9).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
if [ -d .gl ]; then
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
name="${NAME:-gpu}"
args=(gpu-bench --out "$OUT/$name" --runs "${RUNS:-7}")
[ -n "${FILTER:-}" ] && args+=(--filter "$FILTER")
[ -n "${CODECS:-}" ] && args+=(--codecs "$CODECS")
"$bin" "${args[@]}" 2>&1 | tee "$OUT/$name.log"
status=${PIPESTATUS[0]}
echo "gpu-bench exit status $status" | tee -a "$OUT/$name.log"
exit "$status"
