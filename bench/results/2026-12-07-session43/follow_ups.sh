#!/usr/bin/env bash
# Session 43, calls 2-6 on callX's warm H100 (each its own `run`; the bundle carried per call):
# call 2 (carry build-gpu-h): the Hopper GEMM tests callX's 200 s cut off
#   cuda_hopper_gemm_test --gtest_filter='*Fp8Operands*:*GatedFp8*:*Precondition*:*Stagger*'
# call 3 (carry build-gpu-i): cuda_backend_test --gtest_filter='*WgmmaAttention*:*QkNormInGemm*'
# call 4 (carry build-gpu-j): the demo model's fp8 bar, gate_up fast with the others promoted, then
#   promoted alone
#   env RANKD_CUDA_FP8_PROMOTED=1 RANKD_CUDA_FP8_FAST_ACCUM=gate_up OUT=/tmp/gcn BUNDLE=build-gpu-j \
#     DEMO_PRECISIONS=fp8 scripts/gpu_check.sh demo
#   env RANKD_CUDA_FP8_PROMOTED=1 OUT=/tmp/gcn2 BUNDLE=build-gpu-j DEMO_PRECISIONS=fp8 \
#     scripts/gpu_check.sh demo
# calls 5 and 6 (carry build-gpu-j): bench/fidelity.py on fp8, each of the two settings
#   env RANKD_CUDA_FP8_PROMOTED=1 [RANKD_CUDA_FP8_FAST_ACCUM=gate_up] python3 bench/fidelity.py \
#     --rankd build-gpu-j/bin/rankd --backend cuda --precisions fp8 --demo-queries 200 \
#     --json $OUT/fidelity.json --markdown $OUT/fidelity.md
F=${F:-build-gpu-h}; [[ -d $F/bin ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
case ${CALL:-2} in
  2) $F/bin/cuda_hopper_gemm_test --gtest_filter='*Fp8Operands*:*GatedFp8*:*Precondition*:*Stagger*' ;;
  3) $F/bin/cuda_backend_test --gtest_filter='*WgmmaAttention*:*QkNormInGemm*' ;;
  4) for e in "RANKD_CUDA_FP8_FAST_ACCUM=gate_up" "RANKD_CUDA_FP8_FAST_ACCUM=0"; do
       env RANKD_CUDA_FP8_PROMOTED=1 $e OUT=/tmp/gcn BUNDLE=$F DEMO_PRECISIONS=fp8 scripts/gpu_check.sh demo
     done ;;
  5) for e in "RANKD_CUDA_FP8_FAST_ACCUM=gate_up" "RANKD_CUDA_FP8_FAST_ACCUM=0"; do
       env RANKD_CUDA_FP8_PROMOTED=1 $e python3 bench/fidelity.py --rankd $F/bin/rankd --backend cuda \
         --precisions fp8 --demo-queries 200 --markdown $OUT/fidelity_${e##*=}.md
     done ;;
esac
