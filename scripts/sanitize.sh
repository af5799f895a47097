#!/usr/bin/env bash
# Runs rankd's tests under the sanitizers, with Debian's clang (RELIABILITY.md, "Sanitizers"):
#   asan  the whole CPU test suite (ctest -LE gpu) under AddressSanitizer, LeakSanitizer and
#         UndefinedBehaviorSanitizer, in build-fuzz/: the tree scripts/fuzz.sh builds (the same
#         configuration, tests included), so CI compiles the ASan code once for both;
#   tsan  the tests of everything that runs threads (thread pool and ParallelFor, worker pool,
#         step scheduler, depth controller, result cache, HTTP server and its body threads, the
#         scorer service and its workers end to end, credentials reload) under ThreadSanitizer,
#         in build-tsan/ (one e2e test left out, named below).
#
#   scripts/sanitize.sh [asan] [tsan]      (both by default; RANKD_JOBS: build jobs,
#                                           RANKD_TEST_JOBS: ctest jobs, default 2)
# Every sanitized process (the test binaries and the rankd servers and workers they start) writes
# its reports to $SANITIZE_LOGS/<job>/ (default /tmp/rankd-sanitize): a report fails the job even
# where the test itself passed (a worker that died of one and was restarted, say). The
# suppressions (tests/sanitizers/*.supp) cover only what happens inside uninstrumented Debian
# libraries; each entry says why.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SUPP=$ROOT/tests/sanitizers
LOGS=${SANITIZE_LOGS:-/tmp/rankd-sanitize}
TEST_JOBS=${RANKD_TEST_JOBS:-2}
jobs=("$@")
[[ ${#jobs[@]} == 0 ]] && jobs=(asan tsan)

# The TSan job's test binaries and the programs they start.
TSAN_TARGETS="common_test server_unit_test worker_unit_test server_e2e_test
  server_security_e2e_test http_traffic_e2e_test rankd rankd-client"

# Runs ctest in $1 with the remaining arguments, then fails if any process left a report in
# $LOGS/$job/.
run_tests() {
  local dir=$1
  shift
  local rc=0 start=$SECONDS
  ctest --test-dir "$dir" -LE gpu --output-on-failure -j "$TEST_JOBS" --timeout 900 "$@" || rc=$?
  local reports=("$LOGS/$job"/*)
  if [[ -e ${reports[0]} ]]; then
    echo "sanitize $job: ${#reports[@]} report file(s) in $LOGS/$job/:" >&2
    head -n 40 "${reports[@]}" >&2
    rc=1
  fi
  echo "sanitize $job: ctest rc=$rc, $((SECONDS - start)) s" >&2
  return $rc
}

failed=0
for job in "${jobs[@]}"; do
  rm -rf "${LOGS:?}/$job"
  mkdir -p "$LOGS/$job"
  case $job in
    asan)
      RANKD_FUZZ_TESTS=ON RANKD_FUZZ_TARGETS="" RANKD_FUZZ_BUILD_ONLY=1 scripts/fuzz.sh
      # halt_on_error: UBSan findings are errors (ASan halts on its own); detect_leaks is on with
      # ASan on x86_64 but said anyway; strict_string_checks and check_initialization_order catch
      # more than the defaults at little cost.
      export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1:suppressions=$SUPP/asan.supp:log_path=$LOGS/asan/asan
      export LSAN_OPTIONS=suppressions=$SUPP/lsan.supp
      export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$SUPP/ubsan.supp:log_path=$LOGS/asan/ubsan
      run_tests build-fuzz || failed=1
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
      ;;
    tsan)
      RANKD_EXTRA_PACKAGES="clang libclang-rt-14-dev" scripts/install-deps.sh
      CC=clang CXX=clang++ RANKD_BUILD_DIR=build-tsan RANKD_TARGETS="$TSAN_TARGETS" \
        scripts/build.sh -DRANKD_SANITIZE=thread -DRANKD_CUDA=OFF -DRANKD_TESTS=ON \
        -DRANKD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
      export TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1:suppressions=$SUPP/tsan.supp:log_path=$LOGS/tsan/tsan
      # Only the binaries built above: the others' placeholders (X_NOT_BUILT) are left out. Left
      # out too: ServeControlTest.SigtermUnderLoadEndsEveryCallOkOrUnavailable, whose held calls
      # end "UNAVAILABLE: Socket closed" in most runs under TSan's slowdown (RELIABILITY.md,
      # "Not yet": the stop may end the clients' connections before gRPC has written the last
      # answers).
      excluded='_NOT_BUILT$|^ServeControlTest\.SigtermUnderLoadEndsEveryCallOkOrUnavailable$'
      run_tests build-tsan -E "$excluded" || failed=1
      unset TSAN_OPTIONS
      ;;
    *)
      echo "sanitize: unknown job '$job' (asan, tsan)" >&2
      exit 2
      ;;
  esac
done
exit $failed
