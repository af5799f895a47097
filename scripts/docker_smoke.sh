#!/usr/bin/env bash
# Builds docker/Dockerfile.cpu and smoke-tests the image as an operator would run it: published
# ports, an API key file mounted, the HEALTHCHECK reaching healthy, a scored request and /metrics
# through the published ports, the non-root uid, and `docker stop` under load exiting 0 with every
# call in flight answered. Run as root on a Debian 12 machine (scripts/docker_lib.sh: the engine
# and the base images from Debian's mirror, nothing from Docker Hub; the caches).
# RANKD_DOCKER_CUDA=1 also builds docker/Dockerfile.cuda (from the toolkit at /usr/local/cuda)
# and, with no GPU here, checks that its libraries resolve and that it stops at the GPU check.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/docker_lib.sh

build_image Dockerfile.cpu rankd:cpu
if [[ ${RANKD_DOCKER_CUDA:-0} == 1 ]]; then
  docker/make_cuda_toolkit_image.sh /usr/local/cuda
  build_image Dockerfile.cuda rankd:cuda
fi

work=$(mktemp -d)
name=rankd-smoke-$$
cleanup() {
  $docker rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
key=smoke-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
echo "$key" >"$work/api-keys"
chmod 0444 "$work/api-keys"

step "running $name"
# Host ports: any free ones on 127.0.0.1 (others may run rankd on 50051 here).
$docker run -d --name "$name" --stop-timeout 45 -p 127.0.0.1::50051 -p 127.0.0.1::9464 -p 127.0.0.1::8080 \
  -v "$work/api-keys:/etc/rankd/api-keys:ro" rankd:cpu >/dev/null
grpc_port=$($docker port "$name" 50051/tcp | head -n 1 | sed 's/.*://')
http_port=$($docker port "$name" 9464/tcp | head -n 1 | sed 's/.*://')
api_port=$($docker port "$name" 8080/tcp | head -n 1 | sed 's/.*://')

for _ in $(seq 180); do
  health=$($docker inspect -f '{{.State.Health.Status}}' "$name")
  [[ $health == healthy ]] && break
  [[ $($docker inspect -f '{{.State.Running}}' "$name") == true ]] ||
    { $docker logs "$name" >&2; fail "the container exited"; }
  sleep 1
done
[[ $health == healthy ]] || { $docker logs "$name" >&2; fail "HEALTHCHECK: $health after 180 s"; }
step "healthy"

client() {  # rankd-client of the image, on the host's network: through the published port
  $docker run --rm -i --network host --entrypoint rankd-client rankd:cpu "$@" \
    --target "127.0.0.1:$grpc_port"
}
metrics() {
  python3 -c 'import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode())' "$http_port"
}

answer=$(echo '{"query": "what is rankd", "items": ["a reranker server", "a cooking recipe"]}' |
           client score --api-key "$key") || fail "score: $answer"
python3 -c 'import json, math, sys
s = json.loads(sys.argv[1])["scores"]
assert len(s) == 2 and all(i["scored"] and math.isfinite(i["score"]) for i in s)' "$answer" ||
  fail "score: $answer"
if echo '{"query": "q", "items": ["a"]}' | client score --api-key wrong >/dev/null; then
  fail "a wrong API key was accepted"
fi
step "scored: $answer"
# The HTTP JSON API through its published port, with the key.
rerank=$(python3 -c 'import json, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:%s/v1/rerank" % sys.argv[1], method="POST",
    data=json.dumps({"query": "what is rankd", "documents": ["a reranker server", "a recipe"]}).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + sys.argv[2]})
r = json.load(urllib.request.urlopen(req, timeout=30))
assert len(r["results"]) == 2 and all(0 < x["relevance_score"] < 1 for x in r["results"]), r
print(json.dumps(r))' "$api_port" "$key") || fail "POST /v1/rerank: $rerank"
step "POST /v1/rerank: $rerank"

# (Not `metrics | grep -q`: under pipefail, grep's early exit fails the writer, BrokenPipeError.)
grep -q '^rankd_ready 1' <<<"$(metrics)" || fail "/metrics has no 'rankd_ready 1'"
uid=$($docker exec "$name" id -u)
[[ $uid == 65534 ]] || fail "runs as uid $uid, not 65534"
step "/metrics ok, uid $uid"

# Load: long calls, stopped once all are in the server (running or queued); each must be
# answered. Calls that arrive after SIGTERM get UNAVAILABLE (draining), by design. 120 items, so
# that the 4 calls on the image's 2 workers end well inside the 30 s drain on a busy machine too:
# at load average 7 a 300-item call took 20 s (4 of them outlasted the drain), so 120 take ~8 s.
python3 -c 'import json
items = [" ".join("item %d word %d" % (i, w) for w in range(20)) for i in range(120)]
print(json.dumps({"query": "which item is best", "items": items}))' >"$work/big.jsonl"
pids=()
for i in 1 2 3 4; do
  client score --api-key "$key" --deadline-ms 60000 <"$work/big.jsonl" >"$work/load$i.out" &
  pids+=($!)
done
for _ in $(seq 600); do
  in_server=$(metrics | awk '/^rankd_(calls_in_flight|queue_depth) / { n += $2 } END { print n + 0 }')
  ((in_server >= ${#pids[@]})) && break
  sleep 0.1
done
((in_server >= ${#pids[@]})) || fail "only $in_server of ${#pids[@]} calls reached the server"
step "docker stop with $in_server calls running or queued"
$docker stop "$name" >/dev/null
exit_code=$($docker inspect -f '{{.State.ExitCode}}' "$name")
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { failed=$((failed + 1)); head -c 300 "$work/load$((i + 1)).out" >&2; }
done
[[ $exit_code == 0 ]] || { $docker logs --tail 20 "$name" >&2; fail "docker stop: exit $exit_code"; }
((failed == 0)) || fail "$failed of ${#pids[@]} calls in flight failed at docker stop"
step "rankd:cpu passed (docker stop: exit 0, ${#pids[@]} calls in flight answered)"

if [[ ${RANKD_DOCKER_CUDA:-0} == 1 ]]; then
  # No GPU here: the CUDA image must get as far as looking for one (every library of its binaries
  # resolves, the image config and ENTRYPOINT flags validate) and stop there, saying why.
  missing=$($docker run --rm --entrypoint sh rankd:cuda -c \
              'ldd /opt/rankd/bin/* /opt/rankd/lib/*.so* 2>/dev/null | grep "not found" || true')
  [[ -z $missing ]] || fail "rankd:cuda: unresolved libraries: $missing"
  if out=$($docker run --rm -v "$work/api-keys:/etc/rankd/api-keys:ro" rankd:cuda 2>&1); then
    fail "rankd:cuda served without a GPU: $out"
  fi
  grep -q "the cuda backend needs a GPU and none is visible" <<<"$out" ||
    fail "rankd:cuda without a GPU did not stop at the GPU check: $out"
  step "rankd:cuda: libraries resolve; without a GPU it stops at the GPU check"
fi
step "passed"
