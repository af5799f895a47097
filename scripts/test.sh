#!/usr/bin/env bash
# The test command: installs missing packages, builds, and runs every test that needs no GPU.
# (GPU tests carry the ctest label `gpu`; run them on a GPU host with `ctest -L gpu`.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh -DRANKD_TESTS=ON "$@"
BUILD_DIR=${RANKD_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" -LE gpu --output-on-failure -j "${RANKD_TEST_JOBS:-2}" \
  --timeout 600
