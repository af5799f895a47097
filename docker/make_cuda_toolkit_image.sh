#!/usr/bin/env bash
# Makes the local image that docker/Dockerfile.cuda takes its CUDA toolkit from
# (ARG CUDA_TOOLKIT_IMAGE, default rankd-cuda-toolkit:13.0): the compiler, headers and the runtime
# libraries rankd links (cudart, cuBLASLt) of this machine's toolkit (default /usr/local/cuda),
# imported under /usr/local/cuda of an otherwise empty image. Nothing is downloaded.
#   docker/make_cuda_toolkit_image.sh [TOOLKIT_DIR] [IMAGE]
set -euo pipefail
toolkit=$(readlink -f "${1:-/usr/local/cuda}")
image=${2:-rankd-cuda-toolkit:13.0}
if [[ ! -x "$toolkit/bin/nvcc" ]]; then
  echo "make_cuda_toolkit_image: no $toolkit/bin/nvcc (give the toolkit's folder)" >&2
  exit 1
fi
cd "$toolkit"
# lib/ holds every library of the toolkit (cuDNN, NCCL, ... 2.4 GB): take only rankd's.
members=(bin include nvvm targets lib64 lib/cmake lib/stubs lib/libcudadevrt.a
         lib/libcudart.so lib/libcudart.so.13 lib/libcudart_static.a lib/libculibos.a
         lib/libcublas.so lib/libcublas.so.13 lib/libcublasLt.so lib/libcublasLt.so.13)
present=()
for m in "${members[@]}"; do
  if [[ -e $m || -L $m ]]; then present+=("$m"); fi
done
tar -c --transform 's,^,usr/local/cuda/,S' "${present[@]}" | docker import - "$image" >/dev/null
echo "make_cuda_toolkit_image: $image from $toolkit" >&2
