#!/usr/bin/env bash
# The main job on the embedded default: installs missing packages, builds, and starts
# `rankd serve` in the foreground (configs/tiny-cpu.yaml: the bundled demo reranker
# models/demo-jobs-reranker, CPU backend, 2 worker processes, gRPC on 127.0.0.1:50051,
# Prometheus metrics on 127.0.0.1:9464).
# Any arguments go to rankd instead: scripts/run.sh serve --model DIR --backend cuda
set -euo pipefail
cd "$(dirname "$0")/.."
RANKD_TARGETS="rankd rankd-client rankd-bench" scripts/build.sh
BUILD_DIR=${RANKD_BUILD_DIR:-build}
if (($# == 0)); then
  set -- serve
fi
exec "$BUILD_DIR/bin/rankd" "$@"
