#!/usr/bin/env bash
# Next session, call C (bundle h of HEAD: BUNDLE_BINS="rankd-bench cuda_hopper_gemm_test"
# scripts/make_bundle.sh --archive build build-gpu-h; carry ["build-gpu-h"]): the memory-bound
# kernels' rows (qkv_rope with its live count read beside its loads, rms_norm unchanged as the
# control: the profile's qkv_rope / rms_norm ratio was 0.50 on H100s in sessions 31-33), the
# per-stage profile, the residual adds' GEMM rows with and without the stream's prefetch, and
# issue 25's shapes under session 43's defaults (two rounds).
F=build-gpu-h; [[ -x $F/bin/rankd-bench ]] || tar -C $F -xJf $F/rankd-bundle.tar.xz
export LD_LIBRARY_PATH=$PWD/$F/lib:/usr/local/cuda/lib64 RANKD_TEST_DATA_DIR=$PWD/tests/data
B=$F/bin; L=$OUT/main.log; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L; hostname >> $L
$B/rankd-bench make-model --preset 379m --out /tmp/m379 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
$B/rankd-bench make-model --preset qwen3-0.6b --out /tmp/m06 --tokenizer-from tests/data/models/llama-cls > /dev/null 2>&1 &
echo "== kernels ($(el) s)" >> $L
for k in qkv_rope rms_norm; do
  timeout 60 $B/rankd-bench kernels --filter $k --shape both >> $OUT/kernels.log 2>&1
done
grep -E "^(379m|qwen3)" $OUT/kernels.log >> $L
# The residual adds with and without the stream's L2 prefetch (HopperGemmPlan::prefetch_out), and
# cuBLASLt's, in the same call (session 43: o_proj 44.8 / 44.2, down 96.4 / 82.6 without it).
for v in "o_proj+= ownpp128" "down+= ownpp128" "o_proj+= cublaslt T=7500" "down+= cublaslt T=7500"; do
  timeout 60 $B/rankd-bench kernels --filter gemm --shape both --variant "$v" >> $OUT/gemm.log 2>&1
done
grep -E "^(379m|qwen3)" $OUT/gemm.log | grep "T=7500" | awk '{print $1, $3, $4, $5, $9}' >> $L
wait
echo "== profile ($(el) s)" >> $L
timeout 60 env RANKD_CUDA_PROFILE=1 $B/rankd-bench engine --backend cuda --model /tmp/m379 --tq 50 --ti 150 --ni 50 --iters 10 --strategy multi-item --precision bf16 > $OUT/profile.log 2>&1
sed -n "/score passes/,/host wall/p" $OUT/profile.log >> $L
echo "== shapes ($(el) s)" >> $L
for round in 1 2; do
for v in "m379 bf16 --tq 50 --ti 150 --ni 50" "m379 fp8 --tq 50 --ti 150 --ni 50" "m06 bf16 --tq 50 --ti 150 --ni 50" "m06 fp8 --tq 50 --ti 150 --ni 50" "m379 bf16 --tq 50 --ti 150 --ni 250" "m379 bf16 --tq 1024 --ti 150 --ni 50" "m379 bf16 --tq 50 --ti 16 --ni 50 --concurrency 8" "m379 bf16 --tq 50 --ni 250 --items embedding"; do
  (( $(el) < ${UNTIL_S:-500} )) || break 2
  set -- $v; model=$1; prec=$2; shift 2
  timeout 60 $B/rankd-bench engine --backend cuda --model /tmp/$model --iters 30 --strategy multi-item --graphs --precision $prec "$@" > $OUT/run.log 2>&1
  echo "[$v] r$round $(grep -A1 '^backend' $OUT/run.log | tail -1)" >> $L
done; done
echo "== done ($(el) s)" >> $L
