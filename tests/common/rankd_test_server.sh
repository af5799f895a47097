# Sourced (bash, set -euo pipefail) by the shell tests that drive a real `rankd serve`
# (tests/clients/clients_test.sh, tests/browser/docs_test.sh): one place for starting it on free
# loopback ports, waiting for it and stopping it at exit.
#
#   rankd_test_server_init NAME KEY   $run (a temporary folder, removed at exit) with KEY as the
#                                     only line of $run/keys; NAME prefixes the messages
#   rankd_test_server_start RANKD [ARGS...]
#                                     RANKD serve ARGS... with one worker, the keys file, gRPC,
#                                     metrics and HTTP on 127.0.0.1:0 and its log in
#                                     $run/server.log; returns once its ready file is written (the
#                                     ports listen), exits with the log if it does not start
#   rankd_test_server_port KEY        a port of the ready file (grpc_port, http_port, metrics_port)
#   rankd_test_server_failed          the server's log, after a failed check
rankd_test_server_init() {
  _rts_name=$1
  run=$(mktemp -d)
  server_pid=
  trap _rankd_test_server_cleanup EXIT
  echo "$2" >"$run/keys"
}
_rankd_test_server_cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$run"
}
rankd_test_server_start() {
  local rankd=$1
  shift
  "$rankd" serve "$@" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --workers 1 --api-keys-file "$run/keys" --ready-file "$run/ready.json" 2>"$run/server.log" &
  server_pid=$!
  for _ in $(seq 600); do
    [[ -s $run/ready.json ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$run/server.log" >&2
  echo "$_rts_name: rankd serve did not start" >&2
  exit 1
}
rankd_test_server_port() {
  node -p "JSON.parse(require('fs').readFileSync('$run/ready.json'))['$1']"
}
rankd_test_server_failed() {
  echo "$_rts_name: FAILED; the server's log:" >&2
  cat "$run/server.log" >&2
}
