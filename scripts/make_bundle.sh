#!/usr/bin/env bash
# Relocatable bundle for a GPU host that has only the CUDA driver and toolkit:
#   bundle/bin/   the build's executables (rankd, rankd-bench, test binaries), debug info stripped
#                 (with --archive: rankd, rankd-client, rankd-bench and the GPU test binaries)
#   bundle/lib/   the non-system shared libraries they load (abseil, gRPC, protobuf, ICU, ...)
#   bundle/gpu_tests.txt   the test binaries that hold ctest tests labelled gpu
# libc/libm/libstdc++/libgcc/ld-linux (and the rest of glibc) come from the host, as do the CUDA
# runtime and cuBLAS (/usr/local/cuda/lib64) and the driver (libcuda). Run a binary there with
#   LD_LIBRARY_PATH=$PWD/bundle/lib:/usr/local/cuda/lib64 bundle/bin/<name>
#
# With --archive, bin/, lib/ and gpu_tests.txt end up packed in OUT/rankd-bundle.tar.xz instead
# (about a quarter of the size: OpenBLAS and ICU's data are most of it), which is what travels to
# the GPU host (the device tool carries at most 64 MiB); scripts/gpu_check.sh unpacks it there.
#
#   scripts/make_bundle.sh [--archive] [BUILD_DIR (default build)] [OUT_DIR (default bundle)]
#
# BUNDLE_BINS="rankd rankd-bench ..." keeps only those programs (with --archive): the device tool's
# 64 MiB holds the working tree too (about 38 MiB in 2026-12), and the whole archive (about
# 26 MB) no longer fits beside it with every GPU test binary; a call that runs two of them
# carries only what it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCHIVE=0
STRIP=--strip-debug
if [[ ${1:-} == --archive ]]; then
  # What travels to the GPU host is bounded (64 MiB with the working tree): symbol tables go too,
  # and xz takes its slowest setting (about 7 MB less than --strip-debug and xz -6, 2026-12-04).
  ARCHIVE=1
  STRIP=--strip-unneeded
  shift
fi
BUILD=${1:-build}
OUT=${2:-bundle}
[[ -d $BUILD/bin ]] || { echo "make_bundle: $BUILD/bin does not exist (build first)" >&2; exit 1; }
for b in ${BUNDLE_BINS:-}; do
  [[ -x $BUILD/bin/$b ]] || { echo "make_bundle: BUNDLE_BINS: $BUILD/bin/$b is not built" >&2; exit 1; }
done

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
# Which binaries hold GPU tests, from ctest's own listing.
gpu_tests=""
if [[ -f $BUILD/CTestTestfile.cmake ]]; then
  gpu_tests=$(ctest --test-dir "$BUILD" -L gpu --show-only=json-v1 2>/dev/null |
    python3 -c '
import json, os, sys
tests = json.load(sys.stdin).get("tests", [])
print("\n".join(sorted({os.path.basename(t["command"][0]) for t in tests if t.get("command")})))
')
fi
# The archive travels to the GPU host, which runs only the programs and the GPU tests
# (scripts/gpu_check.sh): the CPU-only test binaries stay behind (about 6 MB of the archive).
gpu_host_runs=" rankd rankd-client rankd-bench $(echo $gpu_tests) "
if [[ -n ${BUNDLE_BINS:-} ]]; then
  gpu_host_runs=" $BUNDLE_BINS "
fi
for f in "$BUILD"/bin/*; do
  [[ -f $f && -x $f ]] || continue
  [[ $ARCHIVE == 1 && $gpu_host_runs != *" $(basename "$f") "* ]] && continue
  strip "$STRIP" -o "$OUT/bin/$(basename "$f")" "$f"
done
# rankd's own shared objects, which binaries dlopen rather than link (the sentencepiece shim).
for f in "$BUILD"/lib/*.so; do
  [[ -f $f ]] || continue
  strip "$STRIP" -o "$OUT/lib/$(basename "$f")" "$f"
done

# Shared libraries the host provides itself.
system='^(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libdl|libpthread|librt|libutil|libresolv|libcuda|libcudart|libcublas|libcublasLt)\.so'
missing=0
while read -r name path; do
  if [[ $path == "not" ]]; then
    echo "make_bundle: $name is not found by ldd" >&2
    missing=1
    continue
  fi
  [[ $name =~ $system ]] && continue
  strip "$STRIP" -o "$OUT/lib/$name" "$(readlink -f "$path")"
done < <(ldd "$OUT"/bin/* "$OUT"/lib/librankd_*.so | awk '$2 == "=>" && $3 != "" {print $1, $3}' | sort -u)
[[ $missing == 0 ]] || exit 1

[[ -f $BUILD/CTestTestfile.cmake ]] && printf '%s\n' "$gpu_tests" > "$OUT/gpu_tests.txt"
du -sh "$OUT/bin" "$OUT/lib" | sed 's/^/make_bundle: /'
if [[ $ARCHIVE == 1 ]]; then
  tar -C "$OUT" -cf - bin lib $( [[ -f $OUT/gpu_tests.txt ]] && echo gpu_tests.txt ) |
    xz -T2 -9e > "$OUT/rankd-bundle.tar.xz"
  rm -rf "$OUT/bin" "$OUT/lib" "$OUT/gpu_tests.txt"
  du -sh "$OUT/rankd-bundle.tar.xz" | sed 's/^/make_bundle: /'
fi
