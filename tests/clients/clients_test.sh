#!/usr/bin/env bash
# The real client SDKs against `rankd serve` (ctest clients_test, label `clients`): npm's
# cohere-ai (CohereClient v1 and CohereClientV2), ai's rerank() with @ai-sdk/cohere,
# @langchain/cohere and @llamaindex/cohere, unchanged, each with its own default model name and
# API version (clients_test.js), against the embedded default (configs/tiny-cpu.yaml, the demo
# model) with an API key on. The SDKs are those of package.json, their dependencies pinned by
# package-lock.json, installed with `npm ci` into WORK_DIR when they are not there yet (npm's
# registry is the only network use; the clients talk only to loopback). Fails when an SDK
# refuses an answer or ranks otherwise than the server.
#
# Usage: tests/clients/clients_test.sh RANKD_BINARY [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rankd=$(realpath "$1")
work=$(realpath -m "${2:-$(dirname "$rankd")/../clients-test}")

command -v npm >/dev/null || { echo "clients_test: npm is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
mkdir -p "$work"
# npm ci again only when the pinned set changed.
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [[ ! -d $work/node_modules ]]; then
  echo "clients_test: npm ci (tests/clients/package-lock.json) into $work" >&2
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --prefer-offline >&2)
fi

# The server: free ports (--ready-file tells them), one worker, an API key.
source "$here/../common/rankd_test_server.sh"
key=clients-test-key-0123
rankd_test_server_init clients_test "$key"
rankd_test_server_start "$rankd"
port() { rankd_test_server_port "$1"; }
# Ready to score (a worker up) before the clients call.
readyz="http://127.0.0.1:$(port metrics_port)/readyz"
for _ in $(seq 600); do
  node -e "fetch('$readyz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))" && break
  sleep 0.1
done

status=0
NODE_PATH="$work/node_modules" node "$here/clients_test.js" "http://127.0.0.1:$(port http_port)" "$key" || status=$?
((status == 0)) || rankd_test_server_failed
exit "$status"
