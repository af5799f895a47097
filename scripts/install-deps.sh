#!/usr/bin/env bash
# Installs the Debian 12 packages rankd builds with, if any is missing. Safe to run repeatedly:
# with everything present it does nothing (no apt-get update).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libabsl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libsentencepiece-dev libpcre2-dev libicu-dev libopenblas-dev libcpp-httplib-dev libssl-dev
  libexpat1-dev openssl libboost-dev zlib1g-dev
)
# RANKD_NO_TEST_DEPS=1 (the Docker images, built with -DRANKD_TESTS=OFF): without the test libraries.
if [[ -z "${RANKD_NO_TEST_DEPS:-}" ]]; then
  # python3: tests/demo's generator test; liblzma-dev: the real tokenizer files (xz) in tests/data
  PACKAGES+=(libgtest-dev libgmock-dev python3 liblzma-dev)
  # curl: the README's examples (readme_examples_test) call the HTTP API with it
  PACKAGES+=(curl)
  # npm: swagger-ui-dist for GET /docs and playwright-core for its browser test (any npm will do;
  # Debian's only where none is on PATH, e.g. not over a nodesource nodejs that brings its own).
  command -v npm >/dev/null || PACKAGES+=(npm)
fi
if [[ -n "${RANKD_EXTRA_PACKAGES:-}" ]]; then
  read -r -a extra <<<"$RANKD_EXTRA_PACKAGES"
  PACKAGES+=("${extra[@]}")
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  # Minimal images (Debian containers) often run as a user without sudo: say what is missing and
  # what to run instead of failing later with a bare "sudo: command not found".
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: not root and sudo is not installed; as root, run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  SUDO=(sudo)
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
