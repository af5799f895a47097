#!/usr/bin/env bash
# A fleet under load: docker/compose.yaml's profile `fleet` (three rankd:cpu containers behind
# HAProxy, docker/haproxy.cfg) driven by rankd-bench load, with the figures docs/deploy.md ("A
# fleet") quotes. Each check prints its figures; one that misses its bar fails the script.
#   (c) cache: the result-cache hit rate of one repeated query stream (each run with queries of
#       its own) sent to one node alone, to the fleet with x-rankd-affinity and without: with
#       affinity within 10% of the one node's, without it much lower (a third, for pairs that
#       repeat once).
#   (d) bounded load: a skewed stream (every call for one query) from 24 clients at once, with
#       affinity: no node answers more than 1.5x its fair share of the calls (each node's mean
#       calls in flight, which bounded load bounds, printed beside).
#   (a) kill -9 of a node under steady load: no call fails but those it held (retried by HAProxy,
#       or UNAVAILABLE); HAProxy marks it DOWN within its detection time ((check interval + check
#       timeout) x fall, 6 s; 2 s of slack for a loaded machine) and sends it nothing after.
#   (b) docker stop of a node under steady load (--drain-delay-s: NOT_SERVING while still
#       serving, then the drain): no call fails.
# Images: rankd:cpu (scripts/docker_lib.sh's build_image: after scripts/docker_smoke.sh, as in CI,
# every layer is cached) and rankd-haproxy:2.6. The load runs on the host: the build tree's
# rankd-bench (${RANKD_BUILD_DIR:-build}, built if absent). The nodes' /metrics are read at their
# container addresses. RANKD_FLEET_LOAD_S: seconds of each load (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/docker_lib.sh
build_image Dockerfile.cpu rankd:cpu
build_image Dockerfile.haproxy rankd-haproxy:2.6
bench=${RANKD_BUILD_DIR:-build}/bin/rankd-bench
if [[ ! -x $bench ]]; then
  step "building rankd-bench"
  RANKD_TARGETS=rankd-bench scripts/build.sh >&2
fi
load_s=${RANKD_FLEET_LOAD_S:-20}
# docker/haproxy.cfg's detection time: DOWN after 2 failed checks, each starting 2 s after the
# last one ended and failing within 1 s.
detect_s=6

work=$(mktemp -d)
compose=(docker-compose -p rankd-fleet-smoke -f docker/compose.yaml --profile fleet)
# The balancer on free loopback ports (others may use 50053, 8082 or 8404 here).
export RANKD_FLEET_GRPC_PORT=127.0.0.1: RANKD_FLEET_HTTP_PORT=127.0.0.1:
export RANKD_FLEET_STATS_PORT=127.0.0.1:
export RANKD_API_KEYS=$work/api-keys RANKD_API_KEY=smoke-$(od -An -N12 -tx1 /dev/urandom | tr -d " \n")  # rankd-bench's key (the keys file takes 16 characters at least)
echo "$RANKD_API_KEY" >"$RANKD_API_KEYS"
chmod 0444 "$RANKD_API_KEYS"
passed=0
cleanup() {
  ((passed)) || "${compose[@]}" logs --tail 20 >&2 || true
  "${compose[@]}" down -v -t 1 --remove-orphans >/dev/null 2>&1 || true  # no drain needed
  rm -rf "$work"
}
trap cleanup EXIT

# HAProxy's stats (CSV), the nodes' /metrics and rankd-bench's results.
py() {
  python3 - "$@" <<'PY'
import csv, io, json, subprocess, sys, time, urllib.request

def get(url):
    return urllib.request.urlopen(url, timeout=5).read().decode()

def servers(stats):  # grpc-affinity's servers: {name: row}
    rows = csv.DictReader(io.StringIO(get("http://%s/stats;csv" % stats).lstrip("# ")))
    return {r["svname"]: r for r in rows
            if r["pxname"] == "grpc-affinity" and r["svname"] not in ("FRONTEND", "BACKEND")}

def metric(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "up":  # STATS: how many of the servers are UP
    print(sum(r["status"] == "UP" for r in servers(args[0]).values()))
elif cmd == "counters":  # IP...: per node "OK calls, result-cache hits, misses"
    for ip in args:
        text = get("http://%s:9464/metrics" % ip)
        print(" ".join("%d" % metric(text, s) for s in (
            'rankd_requests_total{code="OK"}', "rankd_result_cache_hits_total",
            "rankd_result_cache_misses_total")))
elif cmd == "result":  # JSON: "ok failed errors p50_ms" of a rankd-bench load run
    r = json.load(open(args[0]))
    errors = ",".join("%s:%d" % kv for kv in sorted(r["errors"].items())) or "none"
    print(r["requests_ok"], r["requests_failed"], errors, "%.0f" % r["latency_ms"]["p50"])
elif cmd == "lose":  # STATS SERVER COMMAND...: runs COMMAND (in the background), waits for DOWN
    stats, server, command = args[0], args[1], args[2:]
    row = servers(stats)[server]
    held = int(row["scur"])  # the most calls HAProxy had on it, from just before COMMAND to DOWN
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while row["status"].split()[0] != "DOWN":
        if time.monotonic() - t0 > 60:
            sys.exit("%s is not DOWN 60 s after %s" % (server, " ".join(command)))
        time.sleep(0.05)
        row = servers(stats)[server]
        held = max(held, int(row["scur"]))
    down_s = time.monotonic() - t0
    sent = int(row["stot"])
    proc.wait()  # docker stop: the drain's end
    print(held, "%.1f" % down_s, sent, "%.1f" % (time.monotonic() - t0))
elif cmd == "rerank":  # HTTP KEY [AFFINITY]: POST /v1/rerank through the balancer, 2 results
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + args[1]}
    if len(args) > 2:
        headers["x-rankd-affinity"] = args[2]
    body = json.dumps({"query": "rust engineer", "documents": ["Rust, Berlin", "Barista"]})
    req = urllib.request.Request("http://%s/v1/rerank" % args[0], data=body.encode(),
                                 headers=headers, method="POST")
    assert len(json.load(urllib.request.urlopen(req, timeout=30))["results"]) == 2
elif cmd == "inflight":  # STATS SECONDS: each server's mean calls in flight, sampled every 0.5 s
    samples = []
    for _ in range(int(float(args[1]) * 2)):
        samples.append([int(r["scur"]) for _, r in sorted(servers(args[0]).items())])
        time.sleep(0.5)
    print(" ".join("%.1f" % (sum(s[i] for s in samples) / len(samples))
                   for i in range(len(samples[0]))))
elif cmd == "sent":  # STATS SERVER: calls HAProxy has sent it; then retries, redispatches of all
    rows = servers(args[0])
    print(rows[args[1]]["stot"], sum(int(r["wretr"] or 0) for r in rows.values()),
          sum(int(r["wredis"] or 0) for r in rows.values()))
PY
}

node_ids=() node_ips=()
# Waits until HAProxy has all three nodes UP; then reads their container ids and addresses.
wait_fleet() {
  local up=0
  for _ in $(seq 180); do
    up=$(py up "$stats" 2>/dev/null || echo 0)
    ((up == 3)) && break
    sleep 1
  done
  ((up == 3)) || fail "HAProxy has $up of 3 nodes UP after 180 s"
  node_ids=() node_ips=()
  for n in 1 2 3; do
    node_ids+=("$("${compose[@]}" ps -q "rankd-fleet-$n")")
    node_ips+=("$($docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' \
                 "${node_ids[-1]}")")
  done
}

step "starting the fleet"
"${compose[@]}" up -d --no-build >&2
grpc=$("${compose[@]}" port rankd-balancer 50051)
http=$("${compose[@]}" port rankd-balancer 8080)
stats=$("${compose[@]}" port rankd-balancer 8404)
wait_fleet
step "3 nodes UP behind HAProxy (gRPC $grpc, HTTP $http, http://$stats/stats): ${node_ips[*]}"
# The HTTP API through the balancer, by affinity and by least request.
py rerank "$http" "$RANKD_API_KEY" "$(printf %s "rust engineer" | sha256sum | cut -c1-16)" &&
  py rerank "$http" "$RANKD_API_KEY" || fail "POST /v1/rerank through HAProxy"

# rankd-bench load to TARGET, text queries and items, 8 items a call; an open loop (8 calls a
# second: a steady load well inside the fleet's capacity, as a fleet is sized to run; the more
# calls a node holds at once, the more bounded load moves off their query's node) unless the
# flags say --concurrency. Writes $work/NAME.json.
load() {  # NAME TARGET [FLAGS...]
  local name=$1 target=$2
  shift 2
  "$bench" load --target "$target" --items text --ni 8 --item-words 8 --query-words 4 \
    --deadline-ms 20000 --duration "$load_s" --repeat-lag 16 --json "$work/$name.json" "$@" \
    >"$work/$name.out" 2>&1 || true  # exit 1 on failed calls: the checks below judge them
  [[ -s $work/$name.json ]] || { cat "$work/$name.out" >&2; fail "$name: rankd-bench load failed"; }
}
counters() { py counters "${node_ips[@]}"; }
steady=(--rate 8)

# (c) Cache hits: one stream shape (half the (query, item) pairs repeat an earlier pair, 60
# queries), each run with queries of its own (--seed). Hit rate: hits / lookups on the nodes over
# the run.
hit_rate() {  # BEFORE AFTER: `counters` output
  paste <(echo "$1") <(echo "$2") |
    awk '{ h += $5 - $2; m += $6 - $3 } END { printf "%.3f\n", h / (h + m > 0 ? h + m : 1) }'
}
declare -A hits p50
for run in single affinity spread; do
  case $run in
    single) target=${node_ips[0]}:50051 flags=(--seed 11) ;;
    affinity) target=$grpc flags=(--seed 12 --affinity) ;;
    spread) target=$grpc flags=(--seed 13) ;;
  esac
  before=$(counters)
  load "$run" "$target" "${steady[@]}" --cache --repeat 0.5 --queries 60 "${flags[@]}"
  hits[$run]=$(hit_rate "$before" "$(counters)")
  read -r ok failed errors p50[$run] <<<"$(py result "$work/$run.json")"
  ((failed == 0)) || fail "(c) $run: $failed of $((ok + failed)) calls failed ($errors)"
done
python3 -c 'import sys
one, affinity, spread = map(float, sys.argv[1:4])
print("fleet_smoke: (c) result-cache hit rate: one node %.3f; the fleet with affinity %.3f "
      "(%.2f of one node), without %.3f (%.2f); p50 latency %s, %s, %s ms" % (
          one, affinity, affinity / one, spread, spread / one, *sys.argv[4:]), file=sys.stderr)
sys.exit(0 if one > 0.3 and affinity >= 0.9 * one and spread <= 0.65 * one else 1)' \
  "${hits[single]}" "${hits[affinity]}" "${hits[spread]}" \
  "${p50[single]}" "${p50[affinity]}" "${p50[spread]}" ||
  fail "(c) with affinity the fleet must keep 0.9 of one node's hit rate, without it much less"

# (d) Bounded load: a skewed stream, every call for one query, from 24 clients at once (a busy
# fleet: on a calm one bounded load rightly leaves a query with the node that caches it).
before=$(counters)
py inflight "$stats" "$load_s" >"$work/inflight" &  # what bounded load bounds, for the record
load skewed "$grpc" --concurrency 24 --queries 1 --seed 21 --affinity
wait
read -r ok failed errors _ <<<"$(py result "$work/skewed.json")"
((failed == 0)) || fail "(d) $failed of $((ok + failed)) calls failed ($errors)"
paste <(echo "$before") <(counters) | awk -v inflight="$(cat "$work/inflight")" '
  { calls[NR] = $4 - $1; total += calls[NR] }
  END {
    for (i = 1; i <= NR; i++) {
      share = calls[i] * NR / total
      if (share > max) max = share
      line = line " " calls[i]
    }
    printf "fleet_smoke: (d) one hot query from 24 clients: calls per node%s, the busiest %.2fx" \
      " its fair share (calls in flight per node on average: %s)\n", line, max, inflight \
      > "/dev/stderr"
    exit max <= 1.5 ? 0 : 1
  }' || fail "(d) a node answered more than 1.5x its fair share"

# Node N goes (COMMAND) under steady load with affinity: sets held (the most calls HAProxy had
# on it from just before COMMAND until DOWN), down_s (until HAProxy marked it DOWN), gone_s (until COMMAND returned), and checks that
# HAProxy sent it nothing after DOWN. The load's figures are the caller's to judge.
lose_node() {  # NAME N COMMAND...
  local name=$1 n=$2 sent_down sent_end
  shift 2
  load "$name" "$grpc" "${steady[@]}" --queries 60 --seed "3$n" --affinity &
  local pid=$!
  sleep $((load_s / 3))
  read -r held down_s sent_down gone_s <<<"$(py lose "$stats" "rankd$n" "$@")"
  wait "$pid"
  read -r sent_end retried redispatched <<<"$(py sent "$stats" "rankd$n")"
  ((sent_end == sent_down)) || fail "($name) HAProxy sent rankd$n calls after marking it DOWN"
  read -r ok failed errors _ <<<"$(py result "$work/$name.json")"
}
restart_node() {  # N
  "${compose[@]}" start "rankd-fleet-$1" >/dev/null 2>&1
  wait_fleet
}

# (a) kill -9: the calls the node held are retried on another node, or fail UNAVAILABLE.
lose_node killed 2 "$docker" kill -s KILL "${node_ids[1]}"
echo "fleet_smoke: (a) kill -9 of a node under load: $failed of $((ok + failed)) calls failed" \
  "($errors; it held $held); HAProxy retried $retried and redispatched $redispatched calls," \
  "marked it DOWN after $down_s s (bound $detect_s s) and sent it nothing after" >&2
((failed <= held)) || fail "(a) $failed calls failed, more than the $held the killed node held"
[[ $errors == none || $errors =~ ^UNAVAILABLE:[0-9]+$ ]] || fail "(a) calls failed with $errors"
python3 -c 'import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]) + 2)' \
  "$down_s" "$detect_s" || fail "(a) HAProxy took $down_s s to mark the killed node DOWN"
restart_node 2

# (b) docker stop: NOT_SERVING while still serving (8 s), HAProxy takes it out, then the drain.
lose_node stopped 3 "$docker" stop --time 55 "${node_ids[2]}"  # compose's stop_grace_period
echo "fleet_smoke: (b) docker stop of a node under load: $failed of $((ok + failed)) calls" \
  "failed ($errors); HAProxy marked it DOWN after $down_s s, the stop took $gone_s s" >&2
((failed == 0)) || fail "(b) $failed calls failed during a docker stop ($errors)"
restart_node 3

passed=1
step "passed"
