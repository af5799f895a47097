#!/usr/bin/env bash
# Installs missing packages, then configures and builds rankd into ${RANKD_BUILD_DIR:-build}.
# Extra CMake arguments pass through: scripts/build.sh -DRANKD_CUDA=OFF
# RANKD_TARGETS="rankd" builds only those targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_DIR=${RANKD_BUILD_DIR:-build}
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B "$BUILD_DIR" -G Ninja "$@" >&2
targets=()
for t in ${RANKD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "${RANKD_JOBS:-$(nproc)}" "${targets[@]}" >&2
