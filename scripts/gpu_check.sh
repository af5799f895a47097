#!/usr/bin/env bash
# On the GPU host: checks the CUDA backend from a relocatable bundle (scripts/make_bundle.sh), in
# the repository root of a checkout that has tests/data. Phases (default: all, in this order):
#   tests      every GPU test binary (bundle/gpu_tests.txt), with their [stats] error lines
#   score      `rankd score --backend cuda` (both strategies) on llama-cls's golden cases, compared
#              with the golden scores
#   serve      `rankd serve --backend cuda` (one worker) answering llama-cls's golden text cases
#              through rankd-client, compared with the golden scores
#   bench      the standard workload (ARCHITECTURE.md, "Measuring") through rankd-bench engine,
#              both strategies x graphs on/off x Ni 50/250, and embedding items (Ni=250)
#   variants   A/B of backend switches: the standard workload (Ni=50, both strategies, graphs on)
#              once per entry of $VARIANTS ('|'-separated env assignments, '-' for none; default
#              "-"), each run twice, interleaved, so that clock drift shows as spread, on each
#              model of $VARIANT_MODELS (make-model presets; default 379m) and strategy of
#              $VARIANT_STRATEGIES (default "multi-item ibpc")
#   shapes     issue 25's shapes on 379M (multi-item, graphs on): Tq=50 Ti=150 Ni 50 and 250, Ti=32,
#              Ti=16 at --concurrency 8, Tq=1024, embedding items Ni=250; once per entry of
#              $VARIANTS as the variants phase does (two interleaved rounds)
#   gemm       `rankd-bench kernels --filter gemm`: every linear layer of both model shapes at the
#              pass's rows and 512, the own GEMM (ping-pong, cooperative 128 and 256) vs cuBLASLt
#   ab         A/B(/C) of builds: the standard workload (Ni=50 both strategies, Ni=250 multi-item,
#              graphs on; or $AB_WORKLOADS, '|'-separated engine flags) through this bundle's
#              rankd-bench and through $BUNDLE_B's (another bundle or its archive, e.g. the commit
#              before a change) and $BUNDLE_C's if set (a folder with only bin/rankd-bench uses this
#              bundle's lib/), $AB_ROUNDS (3) rounds, each starting with another build, every side
#              in $AB_ENV's assignments; then a per-stage profile of each ($AB_PROFILE's flags)
#   kernels    `rankd-bench kernels` (each kernel alone on the workload's shapes), JSON in $OUT;
#              $KERNELS_RUNS ('|'-separated flag sets) runs it once per set instead
#   profile    the per-stage GPU time table of the CUDA backend (RANKD_CUDA_PROFILE=1, eager) for
#              the standard workload (both strategies, Ni=50) and embedding items (Ni=250)
#   controls   issue 12's serving controls through `rankd serve --backend cuda` (379M, multi-item,
#              one worker) under rankd-bench load: (a) the result cache's gain: the same seeded
#              trace with half the (query, item) pairs repeated, cache off then on, closed loop at
#              concurrency 8, Ni 50 and 250 (items/s and the ratio); then the p99 at full depth at
#              low and high load (Ni=250, concurrency $CONTROLS_LOW / $CONTROLS_HIGH: 4 / 32); (b)
#              the depth controller (target $CONTROLS_TARGET_P99_S, else the geometric mean of
#              those two p99s) through a closed-loop step low -> high -> low, its timeline
#              (controls_timeline.csv) and plots (controls_p99.svg, controls_depth.svg) in $OUT.
#              About 5 minutes. CONTROLS_BACKEND, CONTROLS_MODEL, CONTROLS_SHAPE (load's shape
#              flags) and CONTROLS_TIME_SCALE (multiplies every duration) let it run elsewhere:
#              CONTROLS_BACKEND=cpu CONTROLS_MODEL=tests/data/models/llama-cls BUNDLE=build
#              CONTROLS_SHAPE="--tq 20 --ti 20 --vocab 1024" CONTROLS_TIME_SCALE=0.25
#   shaping    interactive p99 alone and beside a PRIORITY_BATCH backlog, shaping on and off
#   soak       `rankd-bench soak` (issue 13: 1x, 2x and recovery, RSS/fds/threads/restarts) against
#              `rankd serve --backend cuda` (379M, one worker), $SOAK_DURATION s (120), with
#              server.max_queue_wait_s $SOAK_MAX_QUEUE_WAIT_S (0: off) and a memory probe
#   jobs       `rankd score --backend cuda --jobs N` on 379M (200 lines, Ni=50, Tq=50, Ti=150):
#              items/s for N = 1, 4, 16 (the summary line of each run)
#   fidelity   bench/fidelity.py (issue 17's fidelity bar): every golden model and the demo model,
#              HF float32 (golden.json, or computed) against HF bf16 and `rankd score --backend
#              cuda` at each of $FIDELITY_PRECISIONS (bf16,fp8): mean per-request Spearman, same
#              top-1, RMS error; fidelity.md (the Markdown table) and fidelity.json in $OUT
#   demo       scripts/eval_demo_model.py (issue 25's fp8 fidelity bar): the demo model's MRR@10 on
#              its three query sets through `rankd score --backend cuda` at each of
#              $DEMO_PRECISIONS (bf16,fp8), the training code's float32 torch model on the GPU beside
#              it; a line each with rankd's held-out MRR@10 and its difference to float32's (the bar:
#              within 0.005); demo_<precision>.json in $OUT
#   memcheck   compute-sanitizer memcheck on every GPU test binary
#   racecheck  compute-sanitizer racecheck on the attention kernel tests
# TEST_TIMEOUT (600) bounds each GPU test binary, RUN_TIMEOUT (300) each variants, shapes and gemm
# run (a kernel that hangs then costs that, not the call). Logs go to $OUT (one file per phase,
# plus summary.txt; the device tool returns at most 8 files).
# The bundle must hold rankd, rankd-client, rankd-bench and the GPU test binaries.
#
#   scripts/gpu_check.sh [PHASE...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rankd-gpu-check}
BUNDLE=${BUNDLE:-bundle}
MODEL_379M=${MODEL_379M:-/tmp/rankd-379m}
SANITIZER=${SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
phases=("$@")
[[ ${#phases[@]} == 0 ]] && phases=(tests score serve bench memcheck racecheck)

# unpack_bundle DIR: DIR/bin from DIR/rankd-bundle.tar.xz if only the archive is there.
unpack_bundle() {
  [[ -d $1/bin || ! -f $1/rankd-bundle.tar.xz ]] && return 0
  tar -C "$1" -xJf "$1/rankd-bundle.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$1/rankd-bundle.tar.xz" "$1" || { echo "cannot unpack the bundle $1" >&2; exit 1; }
}
unpack_bundle "$BUNDLE"
BUNDLE=$(realpath "$BUNDLE")
export LD_LIBRARY_PATH=$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RANKD_TEST_DATA_DIR=$PWD/tests/data
BIN=$BUNDLE/bin
mapfile -t GPU_TESTS < <(grep -v '^$' "$BUNDLE/gpu_tests.txt" 2>/dev/null)
[[ ${#GPU_TESTS[@]} == 0 ]] && GPU_TESTS=(cuda_kernels_test cuda_backend_test)

failed=()
make_model() {
  [[ -f $MODEL_379M/model.safetensors ]] ||
    run "make-model 379m" "$OUT/bench.log" 300 "$BIN/rankd-bench" make-model \
      --preset 379m --out "$MODEL_379M" --tokenizer-from tests/data/models/llama-cls
}
# preset_model PRESET: the directory of a make-model preset (379m: $MODEL_379M), made once.
preset_model() {
  if [[ $1 == 379m ]]; then
    make_model >&2
    echo "$MODEL_379M"
    return
  fi
  local dir=/tmp/rankd-$1 tok=tests/data/models/llama-cls
  [[ $1 == qwen3-* ]] && tok=tests/data/tokenizers/qwen3
  [[ -f $dir/model.safetensors ]] ||
    run "make-model $1" "$OUT/bench.log" 300 "$BIN/rankd-bench" make-model \
      --preset "$1" --out "$dir" --tokenizer-from "$tok" >&2
  echo "$dir"
}
say() { echo "$*" | tee -a "$SUMMARY"; }
# run NAME LOG TIMEOUT_S CMD...: runs CMD with its output appended to LOG; records failures.
run() {
  local name=$1 log=$2 limit=$3
  shift 3
  local start=$SECONDS
  echo "===== $name: $*" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  say "$(printf '%-40s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - start)))"
  [[ $rc == 0 ]] || failed+=("$name")
  return $rc
}

# run_variant NAME LOG VARIANT CMD...: CMD (a rankd-bench engine run) under RUN_TIMEOUT with
# VARIANT's environment assignments ('-' for none), its result line copied into the summary.
run_variant() {
  local name=$1 log=$2 v=$3
  shift 3
  local envs=()
  [[ $v != - ]] && read -r -a envs <<<"$v"
  run "$name" "$log" "${RUN_TIMEOUT:-300}" env "${envs[@]}" "$@" &&
    grep -A1 '^backend' "$log" | tail -n 1 | sed 's/^/    /' | tee -a "$SUMMARY"
}

# wait_serving HOST:PORT: until rankd.v1.Scorer reports SERVING (the ready file only says that
# the ports listen; a worker may still be loading), at most 120 s.
wait_serving() {
  for _ in $(seq 240); do
    "$BIN/rankd-client" health --target "$1" --service rankd.v1.Scorer >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  say "rankd serve on $1 did not report SERVING in 120 s"
  return 1
}
# serve_setup NAME: what the controls and shaping phases share: log=$OUT/NAME.log, the backend,
# model, strategy and shape ($CONTROLS_BACKEND, $CONTROLS_MODEL, $CONTROLS_STRATEGY,
# $CONTROLS_SHAPE: the standard workload's 379M Llama, multi-item, Tq=50 Ti=150 by default),
# the low and high closed-loop loads, and scratch paths for the functions below.
serve_setup() {
  log=$OUT/$1.log
  c_backend=${CONTROLS_BACKEND:-cuda}
  c_model=${CONTROLS_MODEL:-$MODEL_379M}
  [[ $c_model == "$MODEL_379M" ]] && make_model
  c_model=$(realpath "$c_model")
  read -r -a c_shape <<<"${CONTROLS_SHAPE:---tq 50 --ti 150 --vocab 32000}"
  low=${CONTROLS_LOW:-4}
  high=${CONTROLS_HIGH:-32}
  ready=/tmp/rankd-controls-ready.json
  json=/tmp/rankd-controls
  mkdir -p "$json"
}
# sec S: S seconds, scaled by $CONTROLS_TIME_SCALE (a quick CPU rehearsal).
sec() { awk -v s="$1" -v k="${CONTROLS_TIME_SCALE:-1}" 'BEGIN { printf "%g", s * k }'; }
# p99_of JSON: the p99 (ms) of a rankd-bench load --json result.
p99_of() {
  python3 -c 'import json, sys; print("%.1f" % json.load(open(sys.argv[1]))["latency_ms"]["p99"])' "$1"
}
# start_controls_server [YAML]: rankd serve (one worker) from a config file (the result cache on:
# its default), YAML appended, $C_SERVER_YAML's lines in its server section ($C_METRICS_LISTEN:
# the metrics address, default off); sets $server and $target.
start_controls_server() {
  rm -f "$ready"
  printf 'model:\n  dir: %s\n  backend: %s\n  cuda_strategy: %s\nserver:\n  listen: %s\n  metrics_listen: %s\n  http_listen: ""\n%sworkers:\n  count: 1\nlogging:\n  level: warn\n%s\n' \
    "$c_model" "$c_backend" "${CONTROLS_STRATEGY:-multi-item}" 127.0.0.1:0 \
    "${C_METRICS_LISTEN:-\"\"}" "${C_SERVER_YAML:-}" "${1:-}" \
    >"$json/serve.yaml"
  { echo "===== rankd serve --config:"; cat "$json/serve.yaml"; } >>"$log"
  "$BIN/rankd" serve --config "$json/serve.yaml" --ready-file "$ready" >>"$log" 2>&1 &
  server=$!
  for _ in $(seq 240); do [[ -s $ready ]] && break; sleep 0.5; done
  if [[ ! -s $ready ]]; then
    say "rankd serve did not get ready in 120 s"
    failed+=("serve for $log")
    kill -TERM "$server" 2>/dev/null
    wait "$server"
    return 1
  fi
  target=127.0.0.1:$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["grpc_port"])' "$ready")
  wait_serving "$target" || failed+=("serve ready for $log")
}
stop_controls_server() {
  kill -TERM "$server" 2>/dev/null
  wait "$server"
  say "$(printf '%-40s rc=%s' "rankd serve exit after SIGTERM" "$?")"
}
# load NAME FLAGS...: rankd-bench load against $target with the workload's shape.
load() {
  local name=$1
  shift
  run "$name" "$log" 400 "$BIN/rankd-bench" load --target "$target" "${c_shape[@]}" \
    --deadline-ms 30000 "$@"
}

say "== gpu_check $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader \
  2>&1 | tee -a "$SUMMARY"

for phase in "${phases[@]}"; do
  case $phase in
    tests)
      for t in "${GPU_TESTS[@]}"; do
        run "test $t" "$OUT/tests.log" "${TEST_TIMEOUT:-600}" "$BIN/$t" --gtest_color=no
        grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|tests? ran' "$OUT/tests.log" | tail -n 3 |
          sed 's/^/    /' | tee -a "$SUMMARY"
      done
      grep -h '^\[stats\]' "$OUT/tests.log" | sort -u >>"$SUMMARY"
      ;;
    score)
      g=tests/data/models/llama-cls/golden.json
      python3 - "$g" "$OUT/score_in.jsonl" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
with open(sys.argv[2], "w") as f:
    for c in g["cases"]:
        f.write(json.dumps({"query_ids": c["prefix_ids"], "items": [{"ids": i["ids"]} for i in c["items"]]}) + "\n")
    for c in g.get("embedding_cases", []):
        f.write(json.dumps({"query_ids": c["prefix_ids"],
                            "items": [{"embedding": i["embeddings"]} for i in c["items"]]}) + "\n")
PY
      for strategy in ibpc multi-item; do
        if run "rankd score --backend cuda $strategy" "$OUT/score.log" 120 "$BIN/rankd" score \
            --model tests/data/models/llama-cls --backend cuda --strategy "$strategy" \
            --input "$OUT/score_in.jsonl" --output "$OUT/score_out.jsonl"; then
          python3 - "$g" "$OUT/score_out.jsonl" <<'PY' 2>&1 | tee -a "$SUMMARY" "$OUT/score.log"
import json, sys
g = json.load(open(sys.argv[1]))
refs = [[(i["score"], i.get("score_bf16_cuda")) for i in c["items"]]
        for c in g["cases"] + g.get("embedding_cases", [])]
outs = [json.loads(l)["scores"] for l in open(sys.argv[2])]
worst, bad, n = 0.0, 0, 0
for ref_line, out_line in zip(refs, outs):
    for (ref, hf), got in zip(ref_line, out_line):
        allowed = max(2e-2 * max(1, abs(ref)), 1.5 * abs(hf - ref) if hf is not None else 0)
        err = abs(got - ref)
        worst = max(worst, err)
        bad += err > allowed
        n += 1
print(f"    {n} scores, max |err| {worst:.4g}, {bad} outside the bf16 tolerance")
sys.exit(1 if bad or n == 0 or len(outs) != len(refs) else 0)
PY
          [[ ${PIPESTATUS[0]} == 0 ]] || failed+=("score compare $strategy")
        fi
      done
      rm -f "$OUT/score_in.jsonl" "$OUT/score_out.jsonl"
      ;;
    serve)
      g=tests/data/models/llama-cls/golden.json
      ready=/tmp/rankd-gpu-check-ready.json
      rm -f "$ready"
      "$BIN/rankd" serve --backend "${SERVE_BACKEND:-cuda}" --model tests/data/models/llama-cls \
        --workers 1 \
        --listen 127.0.0.1:0 --ready-file "$ready" >>"$OUT/serve.log" 2>&1 &
      server=$!
      for _ in $(seq 120); do [[ -s $ready ]] && break; sleep 0.5; done
      if [[ ! -s $ready ]]; then
        say "rankd serve --backend cuda did not get ready in 60 s"
        failed+=("serve")
      else
        port=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["grpc_port"])' \
          "$ready")
        wait_serving "127.0.0.1:$port" || failed+=("serve ready")
        python3 - "$g" /tmp/rankd-serve-in.jsonl <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
with open(sys.argv[2], "w") as f:
    for c in g["cases"]:
        f.write(json.dumps({"query": c["query"], "items": [{"text": i["text"]} for i in c["items"]]}) + "\n")
PY
        run "rankd serve --backend cuda + client" "$OUT/serve.log" 120 sh -c \
          "'$BIN/rankd-client' score --target 127.0.0.1:$port --input /tmp/rankd-serve-in.jsonl \
           > /tmp/rankd-serve-out.jsonl" &&
          python3 - "$g" /tmp/rankd-serve-out.jsonl <<'PY' 2>&1 | tee -a "$SUMMARY" "$OUT/serve.log"
import json, sys
g = json.load(open(sys.argv[1]))
outs = [json.loads(l) for l in open(sys.argv[2])]
worst, bad, n = 0.0, 0, 0
for c, out in zip(g["cases"], outs):
    got = [s.get("score", 0.0) for s in out.get("scores", [])]
    if len(got) != len(c["items"]):
        bad += 1
    for it, s in zip(c["items"], got):
        ref, hf = it["score"], it.get("score_bf16_cuda")
        allowed = max(2e-2 * max(1, abs(ref)), 1.5 * abs(hf - ref) if hf is not None else 0)
        worst = max(worst, abs(s - ref))
        bad += abs(s - ref) > allowed
        n += 1
print(f"    serve: {n} scores, max |err| {worst:.4g}, {bad} outside the bf16 tolerance")
sys.exit(1 if bad or n == 0 or len(outs) != len(g["cases"]) else 0)
PY
        [[ ${PIPESTATUS[0]} == 0 ]] || failed+=("serve compare")
      fi
      kill -TERM "$server" 2>/dev/null
      wait "$server"
      say "$(printf '%-40s rc=%s' "rankd serve exit after SIGTERM" "$?")"
      rm -f "$ready" /tmp/rankd-serve-in.jsonl /tmp/rankd-serve-out.jsonl
      ;;
    bench)
      make_model
      for strategy in ibpc multi-item; do
        for graphs in --graphs --no-graphs; do
          for ni in 50 250; do
            run "engine $strategy $graphs ni=$ni" "$OUT/bench.log" 300 "$BIN/rankd-bench" engine \
              --backend cuda --model "$MODEL_379M" --tq 50 --ti 150 --ni $ni --iters 20 \
              --strategy $strategy $graphs &&
              grep -A1 '^backend' "$OUT/bench.log" | tail -n 1 | sed 's/^/    /' | tee -a "$SUMMARY"
          done
        done
      done
      for strategy in ibpc multi-item; do
        for graphs in --graphs --no-graphs; do
          run "engine $strategy $graphs embedding items ni=250" "$OUT/bench.log" 300 \
            env RANKD_CUDA_STATS=1 "$BIN/rankd-bench" engine --backend cuda --model "$MODEL_379M" \
            --tq 50 --ni 250 --items embedding --iters 100 --strategy $strategy $graphs &&
            grep -A1 '^backend' "$OUT/bench.log" | tail -n 1 | sed 's/^/    /' | tee -a "$SUMMARY"
          grep 'cuda backend stats' "$OUT/bench.log" | tail -n 1 | sed 's/^/    /' | tee -a "$SUMMARY"
        done
      done
      ;;
    variants)
      IFS='|' read -r -a variants <<<"${VARIANTS:--}"
      for preset in ${VARIANT_MODELS:-379m}; do
        model=$(preset_model "$preset")
        for round in 1 2; do
          for v in "${variants[@]}"; do
            for strategy in ${VARIANT_STRATEGIES:-multi-item ibpc}; do
              run_variant "variant $preset [$v] $strategy round $round" "$OUT/variants.log" "$v" \
                "$BIN/rankd-bench" engine --backend cuda --model "$model" --tq 50 --ti 150 \
                --ni 50 --iters 30 --strategy "$strategy" --graphs
            done
          done
        done
      done
      ;;
    shapes)
      make_model
      IFS='|' read -r -a variants <<<"${VARIANTS:--}"
      for round in 1 2; do
        for shape in "--tq 50 --ti 150 --ni 50" "--tq 50 --ti 150 --ni 250" \
            "--tq 50 --ti 32 --ni 50" "--tq 50 --ti 16 --ni 50 --concurrency 8" \
            "--tq 1024 --ti 150 --ni 50" "--tq 50 --ni 250 --items embedding"; do
          for v in "${variants[@]}"; do
            # shellcheck disable=SC2086  # the shape's flags split on purpose
            run_variant "shape [$shape] [$v] round $round" "$OUT/shapes.log" "$v" \
              "$BIN/rankd-bench" engine --backend cuda --model "$MODEL_379M" --iters 30 \
              --strategy multi-item --graphs $shape
          done
        done
      done
      ;;
    gemm)
      run "rankd-bench kernels --filter gemm" "$OUT/gemm.log" "${RUN_TIMEOUT:-300}" \
        "$BIN/rankd-bench" kernels \
        --filter gemm --json "$OUT/gemm.json"
      cat "$OUT/gemm.log" >>"$SUMMARY"
      ;;
    ab)
      make_model
      [[ -n ${BUNDLE_B:-} ]] || { say "ab: set BUNDLE_B to the other build's bundle"; exit 2; }
      # Sides: A this bundle, B $BUNDLE_B, C $BUNDLE_C if set. A side's libraries come from its own
      # bundle's lib/, or from A's when it ships only bin/rankd-bench (a variant of A's build).
      declare -A side_bin side_lib
      side_bin[A]=$BIN
      side_lib[A]=$BUNDLE/lib
      sides_all="A B"
      for side in B C; do
        var=BUNDLE_$side
        [[ -n ${!var:-} ]] || continue
        unpack_bundle "${!var}"
        dir=$(realpath "${!var}")
        side_bin[$side]=$dir/bin
        side_lib[$side]=$dir/lib
        [[ -d $dir/lib ]] || side_lib[$side]=$BUNDLE/lib
        [[ $side == C ]] && sides_all="A B C"
      done
      # The workloads ('|'-separated rankd-bench engine flags) and the environment every side runs
      # in (AB_ENV: space-separated assignments, e.g. RANKD_CUDA_OWN_GEMM=0).
      IFS='|' read -r -a workloads <<<"${AB_WORKLOADS:---tq 50 --ti 150 --strategy multi-item --ni 50|--tq 50 --ti 150 --strategy ibpc --ni 50|--tq 50 --ti 150 --strategy multi-item --ni 250}"
      read -r -a ab_env <<<"${AB_ENV:-}"
      for round in $(seq "${AB_ROUNDS:-3}"); do
        # Each round starts with another side: an order effect cancels out.
        read -r -a order <<<"$sides_all"
        shift_by=$(((round - 1) % ${#order[@]}))
        order=("${order[@]:shift_by}" "${order[@]:0:shift_by}")
        for side in "${order[@]}"; do
          for args in "${workloads[@]}"; do
            # shellcheck disable=SC2086  # the workload's flags split on purpose
            run "ab $side [$args] [${AB_ENV:-}] round $round" "$OUT/ab.log" 300 \
              env "${ab_env[@]}" LD_LIBRARY_PATH="${side_lib[$side]}:/usr/local/cuda/lib64" \
              "${side_bin[$side]}/rankd-bench" engine --backend cuda --model "$MODEL_379M" \
              --iters 30 --graphs $args &&
              grep -A1 '^backend' "$OUT/ab.log" | tail -n 1 | sed 's/^/    /' | tee -a "$SUMMARY"
          done
        done
      done
      # Where each build's time goes (eager, per stage): tells GPU work from host overhead.
      # AB_PROFILE: the workload profiled (default the standard one, multi-item, Ni=50).
      for side in $sides_all; do
        echo "===== profile $side" >>"$OUT/ab_profile.log"
        # shellcheck disable=SC2086
        run "ab profile $side [${AB_PROFILE:-standard}]" "$OUT/ab_profile.log" 300 \
          env "${ab_env[@]}" RANKD_CUDA_PROFILE=1 \
          LD_LIBRARY_PATH="${side_lib[$side]}:/usr/local/cuda/lib64" \
          "${side_bin[$side]}/rankd-bench" engine --backend cuda --model "$MODEL_379M" --iters 10 \
          ${AB_PROFILE:---tq 50 --ti 150 --strategy multi-item --ni 50}
      done
      cat "$OUT/ab_profile.log" >>"$SUMMARY"
      ;;
    kernels)
      # KERNELS_RUNS: '|'-separated flag sets, one run each (e.g. "--filter attention|--filter
      # attention --tq 1024"); default one run of everything. JSON of run i in kernels_i.json.
      IFS='|' read -r -a kernel_runs <<<"${KERNELS_RUNS:- }"
      for i in "${!kernel_runs[@]}"; do
        # shellcheck disable=SC2086  # the run's flags split on purpose
        run "rankd-bench kernels ${kernel_runs[$i]}" "$OUT/kernels.log" 300 "$BIN/rankd-bench" \
          kernels ${kernel_runs[$i]} --json "$OUT/kernels_$i.json"
      done
      cat "$OUT/kernels.log" >>"$SUMMARY"
      ;;
    profile)
      make_model
      for args in "--strategy ibpc --ni 50" "--strategy multi-item --ni 50" \
          "--strategy ibpc --ni 250 --items embedding"; do
        echo "===== profile $args" >>"$OUT/profile.log"
        run "profile $args" "$OUT/profile.log" 300 env RANKD_CUDA_PROFILE=1 "$BIN/rankd-bench" \
          engine --backend cuda --model "$MODEL_379M" --tq 50 --ti 150 --iters 10 $args
      done
      grep -v '^=====' "$OUT/profile.log" >>"$SUMMARY"
      ;;
    controls)
      serve_setup controls
      if start_controls_server; then
        load "controls warm-up" --concurrency 2 --ni 50 --seed 99 --duration "$(sec 5)"
        for ni in 50 250; do
          # One seed per Ni (another query pool), so that one run's pairs are not the other's.
          for cache in off on; do
            load "controls cache $cache ni=$ni" --concurrency 8 --ni $ni --repeat 0.5 \
              --queries 16 --seed $ni --warmup-s "$(sec 5)" --duration "$(sec 12)" \
              --json "$json/cache_${cache}_$ni.json" $([[ $cache == on ]] && echo --cache)
          done
          python3 - "$json/cache_off_$ni.json" "$json/cache_on_$ni.json" <<'PY' 2>&1 | tee -a "$SUMMARY" "$log"
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
ratio = on["items_per_s"] / off["items_per_s"] if off["items_per_s"] else float("nan")
print(f"    ni={on['ni']}: cache off {off['items_per_s']:,.0f} items/s (p99 "
      f"{off['latency_ms']['p99']:.1f} ms), cache on {on['items_per_s']:,.0f} items/s served "
      f"({on['worker_items_per_s']:,.0f} by the worker, p99 {on['latency_ms']['p99']:.1f} ms), "
      f"hit rate {on['hit_rate']:.3f}, repeat {on['repeat_requested']:.2f} asked "
      f"{on['repeat_realized']:.3f} realized: {ratio:.2f}x")
PY
        done
        # The p99 at full depth (no controller) at low and high load: the target lies between.
        for c in $low $high; do
          load "controls p99 full depth c=$c ni=250" --concurrency $c --ni 250 --seed 7 \
            --warmup-s "$(sec 3)" --duration "$(sec 10)" --json "$json/p99_c$c.json"
        done
        stop_controls_server
        p99_low=$(p99_of "$json/p99_c$low.json")
        p99_high=$(p99_of "$json/p99_c$high.json")
        target_s=${CONTROLS_TARGET_P99_S:-$(awk -v a="$p99_low" -v b="$p99_high" \
          'BEGIN { printf "%.4f", (a > 0 && b > 0) ? sqrt(a * b) / 1000 : 0.5 }')}
        say "    full depth p99: c=$low $p99_low ms, c=$high $p99_high ms -> target_p99_s $target_s"
        # Low until t1, high until t2, low until the end.
        t1=$(sec 20) t2=$(sec 100) t_end=$(sec 140)
        if start_controls_server "$(printf 'depth_control:\n  enabled: true\n  target_p99_s: %s\n  window_s: %s' \
            "$target_s" "${CONTROLS_WINDOW_S:-5}")"; then
          load "controls depth step c=$low,$high,$low ni=250" --concurrency $low --ni 250 \
            --seed 8 --schedule "0:$low,$t1:$high,$t2:$low" --duration "$t_end" \
            --timeline "$OUT/controls_timeline.csv" --json "$json/depth_step.json"
          stop_controls_server
          run "controls plot" "$log" 60 "$BIN/rankd-bench" plot-timeline \
            --timeline "$OUT/controls_timeline.csv" --out "$OUT/controls" \
            --target-p99-ms "$(awk -v t="$target_s" 'BEGIN { print t * 1000 }')" \
            --title "depth_control through a load step (Ni=250, concurrency $low, $high, $low)"
          # Per segment: the per-second p99 (median, and the share of seconds within 20% of the
          # target) and the mean depth; "settled" leaves out a segment's first half.
          python3 - "$OUT/controls_timeline.csv" "$target_s" "$t1" "$t2" "$t_end" <<'PY' 2>&1 | tee -a "$SUMMARY" "$log"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
target_ms, (t1, t2, t_end) = float(sys.argv[2]) * 1e3, map(float, sys.argv[3:6])
def seg(name, a, b):
    sel = [r for r in rows if a <= int(r["t"]) < b and r["p99_ms"]]
    if not sel:
        print(f"    {name}: no calls")
        return
    p99 = [float(r["p99_ms"]) for r in sel]
    near = sum(abs(p - target_ms) <= 0.2 * target_ms for p in p99) / len(p99)
    print(f"    {name:<22} t=[{a:g},{b:g}) s: per-second p99 median {statistics.median(p99):.1f} ms"
          f" (target {target_ms:.1f}; {near:.0%} of seconds within 20%), mean depth "
          f"{statistics.mean(float(r['mean_depth']) for r in sel):.1f}, errors "
          f"{sum(int(r['errors']) for r in sel)}")
seg("low, before the step", t1 / 2, t1)
seg("high, settling", t1, (t1 + t2) / 2)
seg("high, settled", (t1 + t2) / 2, t2)
seg("low again, settled", (t2 + t_end) / 2, t_end)
PY
        fi
      fi
      rm -rf "$json" "$ready"
      ;;
    shaping)
      # Interactive p99 alone, then with a batch backlog (closed loop, Ni=250, PRIORITY_BATCH),
      # with shaping (busy_threshold 0.5, the default) and without it (1: batch work never waits
      # for load; interactive still goes first). The batch load's timeline shows it yield to the
      # interactive load and take the idle GPU back.
      serve_setup shaping
      rate=""
      for threshold in 0.5 1; do
        start_controls_server "$(printf 'shaping:\n  busy_threshold: %s' "$threshold")" || continue
        load "shaping warm-up" --concurrency 2 --ni 250 --seed 99 --duration "$(sec 5)"
        if [[ -z $rate ]]; then
          load "shaping peak c=8 ni=50" --concurrency 8 --ni 50 --seed 1 --duration "$(sec 10)" \
            --json "$json/peak.json"
          rate=$(python3 -c 'import json, sys; print("%.1f" % (0.4 * json.load(open(sys.argv[1]))["requests_per_s"]))' \
            "$json/peak.json")
          load "shaping interactive alone r=$rate" --rate "$rate" --ni 50 --seed 2 --warmup-s 2 \
            --duration "$(sec 20)" --json "$json/alone.json"
        fi
        echo "===== batch backlog (busy_threshold $threshold)" >>"$log"
        "$BIN/rankd-bench" load --target "$target" "${c_shape[@]}" --priority batch \
          --concurrency 16 --ni 250 --seed 3 --deadline-ms 120000 --duration "$(sec 40)" \
          --timeline "$OUT/shaping_batch_$threshold.csv" --json "$json/batch_$threshold.json" \
          >>"$log" 2>&1 &
        batch=$!
        sleep "$(sec 5)"
        load "shaping interactive + backlog t=$threshold" --rate "$rate" --ni 50 --seed 4 \
          --warmup-s 2 --duration "$(sec 20)" --json "$json/with_$threshold.json"
        wait "$batch"
        say "$(printf '%-40s rc=%s' "shaping batch backlog t=$threshold" "$?")"
        stop_controls_server
      done
      python3 - "$json" "$(sec 5)" "$(sec 27)" "$OUT" <<'PY' 2>&1 | tee -a "$SUMMARY" "$log"
import csv, json, os, statistics, sys
d, t_on, t_off, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def load(name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else None
alone = load("alone.json")
if alone:
    print(f"    interactive alone: p99 {alone['latency_ms']['p99']:.1f} ms, p50 "
          f"{alone['latency_ms']['p50']:.1f} ms at {alone['requests_per_s']:.1f} req/s")
for t in ("0.5", "1"):
    w, b = load(f"with_{t}.json"), load(f"batch_{t}.json")
    if not (w and b and alone):
        continue
    margin = w["latency_ms"]["p99"] / alone["latency_ms"]["p99"] - 1
    rows = list(csv.DictReader(open(os.path.join(out, f"shaping_batch_{t}.csv"))))
    def items(a, z):
        v = [float(r["items_per_s"] or 0) for r in rows if a <= float(r["t"]) < z]
        return statistics.mean(v) if v else float("nan")
    print(f"    busy_threshold {t}: interactive p99 {w['latency_ms']['p99']:.1f} ms "
          f"({margin:+.0%} vs alone), p50 {w['latency_ms']['p50']:.1f} ms, errors "
          f"{w['requests_failed']}; "
          f"batch {items(0, t_on):,.0f} items/s alone, {items(t_on + 2, t_off):,.0f} beside "
          f"interactive, {items(t_off + 2, 1e9):,.0f} after; batch p99 "
          f"{b['latency_ms']['p99']:.0f} ms, errors {b['requests_failed']}")
PY
      rm -rf "$json" "$ready"
      ;;
    soak)
      serve_setup soak
      C_METRICS_LISTEN=127.0.0.1:0 C_SERVER_YAML="  max_queue_wait_s: ${SOAK_MAX_QUEUE_WAIT_S:-0}
" start_controls_server || continue
      metrics=127.0.0.1:$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics_port"])' "$ready")
      run "soak ${SOAK_DURATION:-120} s" "$log" $((${SOAK_DURATION:-120} + 120)) "$BIN/rankd-bench" soak \
        --target "$target" --metrics "$metrics" --server-pid "$server" \
        --duration "${SOAK_DURATION:-120}" --ni 50 "${c_shape[@]}" --connections 4 \
        --probe-items 500 --json "$OUT/soak.json"
      sed -n '/^sustainable/,$p' "$log" | sed 's/^/    /' | tee -a "$SUMMARY"
      stop_controls_server
      rm -rf "$json" "$ready"
      ;;
    jobs)
      make_model
      lines=/tmp/rankd-jobs.jsonl
      python3 - "$lines" <<'PY'
import json, random, sys
r = random.Random(5)
with open(sys.argv[1], "w") as f:
    for _ in range(200):
        q = [1] + [r.randrange(4, 32000) for _ in range(49)]
        items = [{"ids": [r.randrange(4, 32000) for _ in range(150)]} for _ in range(50)]
        f.write(json.dumps({"query_ids": q, "items": items}) + "\n")
PY
      for n in 1 4 16; do
        run "rankd score --jobs $n" "$OUT/jobs.log" 300 "$BIN/rankd" score --model "$MODEL_379M" \
          --backend cuda --input "$lines" --output /dev/null --jobs "$n" --no-progress
        grep 'done:' "$OUT/jobs.log" | tail -n 1 | sed 's/^.*done:/    done:/' | tee -a "$SUMMARY"
      done
      rm -f "$lines"
      ;;
    fidelity)
      run "fidelity" "$OUT/fidelity.log" 900 python3 bench/fidelity.py --rankd "$BIN/rankd" \
        --backend cuda --precisions "${FIDELITY_PRECISIONS:-bf16,fp8}" \
        --json "$OUT/fidelity.json" --markdown "$OUT/fidelity.md"
      [[ -f $OUT/fidelity.md ]] && sed -n '/^All models/,$p' "$OUT/fidelity.md" |
        sed 's/^/    /' | tee -a "$SUMMARY"
      ;;
    demo)
      IFS=',' read -r -a demo_precisions <<<"${DEMO_PRECISIONS:-bf16,fp8}"
      for p in "${demo_precisions[@]}"; do
        run "demo model $p" "$OUT/demo.log" 600 python3 scripts/eval_demo_model.py \
          --rankd "$BIN/rankd" --rankd-args "--backend cuda --precision $p" --no-hf \
          --device cuda --json "$OUT/demo_$p.json" &&
          python3 - "$OUT/demo_$p.json" "$p" <<'PY' | tee -a "$SUMMARY"
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
rankd, torch = m["rankd"]["heldout"]["mrr@10"], m["torch"]["heldout"]["mrr@10"]
sets = " ".join(f"{s} {m['rankd'][s]['mrr@10']:.4f}" for s in m["rankd"])
print(f"    demo model {sys.argv[2]}: held-out MRR@10 {rankd:.4f}, float32 {torch:.4f}, "
      f"difference {rankd - torch:+.4f} (rankd MRR@10: {sets})")
PY
      done
      ;;
    memcheck)
      for t in "${GPU_TESTS[@]}"; do
        run "memcheck $t" "$OUT/memcheck.log" 400 "$SANITIZER" --tool memcheck \
          --error-exitcode 1 "$BIN/$t" --gtest_color=no
        grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) +\]' "$OUT/memcheck.log" | tail -n 2 |
          sed 's/^/    /' | tee -a "$SUMMARY"
      done
      ;;
    racecheck)
      run "racecheck attention" "$OUT/racecheck.log" 300 "$SANITIZER" --tool racecheck \
        --error-exitcode 1 "$BIN/cuda_kernels_test" --gtest_filter='*Attention*' --gtest_color=no
      grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -n 1 |
        sed 's/^/    /' | tee -a "$SUMMARY"
      ;;
    *)
      say "unknown phase $phase"
      failed+=("$phase")
      ;;
  esac
done

if [[ ${#failed[@]} == 0 ]]; then
  say "== gpu_check: all passed"
else
  say "== gpu_check: FAILED: ${failed[*]}"
  exit 1
fi
