#!/usr/bin/env bash
# Builds rankd with clang, AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's coverage
# (build-fuzz/), then runs every fuzz target in fuzz/ for FUZZ_SECONDS (default 60) each, from its
# seed corpus fuzz/corpus/<target>/ (read only: new inputs go to $FUZZ_WORK/<target>/). Crashes,
# leaks and timeouts are written to $FUZZ_WORK/artifacts/ and make the script exit 1. Prints one
# line per target: its executions, the corpus it reached, and what it found.
#
#   scripts/fuzz.sh [TARGET...]        FUZZ_SECONDS=600 scripts/fuzz.sh fuzz_safetensors
# RANKD_FUZZ_TESTS=ON builds the tests into the same sanitized tree and
# RANKD_FUZZ_TARGETS="" builds everything; RANKD_FUZZ_BUILD_ONLY=1 stops after the build
# (scripts/sanitize.sh asan builds so, then runs the CPU suite there).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${RANKD_FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_WORK=${FUZZ_WORK:-/tmp/rankd-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
RANKD_EXTRA_PACKAGES="clang libclang-rt-14-dev ${RANKD_EXTRA_PACKAGES:-}" scripts/install-deps.sh
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (apt-get install clang)" >&2; exit 2; }
targets=("$@")
[[ ${#targets[@]} == 0 ]] && mapfile -t targets < <(sed -n 's/^rankd_add_fuzzer(\([a-z_]*\) .*/\1/p' fuzz/CMakeLists.txt)
CC=clang CXX=clang++ RANKD_BUILD_DIR=$BUILD_DIR RANKD_TARGETS="${RANKD_FUZZ_TARGETS-${targets[*]}}" \
  scripts/build.sh -DRANKD_FUZZ=ON -DRANKD_CUDA=OFF -DRANKD_SANITIZE=address,undefined \
  -DRANKD_TESTS="${RANKD_FUZZ_TESTS:-OFF}" -DRANKD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
[[ ${RANKD_FUZZ_BUILD_ONLY:-0} == 1 ]] && exit 0
mkdir -p "$FUZZ_WORK/artifacts"
# UBSan findings are errors, not warnings; leaks count (LeakSanitizer is on with ASan).
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$FUZZ_WORK/$t"
  log=$FUZZ_WORK/$t.log
  rc=0
  "$BUILD_DIR/bin/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$FUZZ_WORK/artifacts/$t-" \
    "$FUZZ_WORK/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
  found=$(ls "$FUZZ_WORK/artifacts" | grep -c "^$t-" || true)
  printf '%-32s rc=%-3s %10s execs in %ss, %s, corpus %s files, %s artifacts\n' "$t" "$rc" \
    "${execs:-?}" "$SECONDS_EACH" "${cov:-cov: ?}" "$(ls "$FUZZ_WORK/$t" | wc -l)" "$found"
  if [[ $rc != 0 ]]; then
    failed=1
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -n 20 >&2
  fi
done
exit $failed
