#!/usr/bin/env bash
# The main job on the embedded default: installs missing packages, builds, and scores the sample
# requests in examples/requests.jsonl with the bundled tiny model on the CPU backend.
# Any arguments replace the default ones: scripts/run.sh score --model DIR --input FILE
set -euo pipefail
cd "$(dirname "$0")/.."
RANKD_TARGETS=rankd scripts/build.sh
BUILD_DIR=${RANKD_BUILD_DIR:-build}
if (($# == 0)); then
  set -- score --model tests/data/models/llama-cls --input examples/requests.jsonl
fi
exec "$BUILD_DIR/bin/rankd" "$@"
