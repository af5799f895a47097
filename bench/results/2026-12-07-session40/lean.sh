#!/usr/bin/env bash
# lean.sh DIR: bundle of build/ as DIR/rankd-bundle.tar.xz without the backend/prefix test binaries
set -e
d=$1; rm -rf $d && scripts/make_bundle.sh --archive build $d > /tmp/bundle.log 2>&1 && rm -rf $d/bin $d/lib
rm -rf /tmp/rb && mkdir /tmp/rb && tar -C /tmp/rb -xJf $d/rankd-bundle.tar.xz
rm -f /tmp/rb/bin/cuda_backend_test /tmp/rb/bin/cuda_prefix_memory_test
tar -C /tmp/rb -c . | xz -9e -T2 > $d/rankd-bundle.tar.xz; ls -la $d
