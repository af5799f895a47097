#!/usr/bin/env bash
# Session 44, call 1 (carry ["build-gpu-h"]: the bundle of e105de3): keeps its libraries and its
# rankd-bench in /tmp/keep for the next calls on this warm machine (which carry only slim bin/
# archives: build-gpu-s), then the baseline's attention rows and passes (ab_attention.sh).
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
mkdir -p /tmp/keep/h && cp -r $F/lib /tmp/keep/ && cp -r $F/bin /tmp/keep/h/
F=$F bash bench/results/2026-12-08-session44/ab_attention.sh
