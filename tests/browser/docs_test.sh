#!/usr/bin/env bash
# The browser test of GET /docs (ctest docs_browser_test, label `browser`): headless Debian
# chromium driven by playwright-core (npm) loads Swagger UI from a live `rankd serve` (the embedded
# default, API keys on, server.cors_allow_origins set), finds every route, authorizes with the
# key, runs "Try it out" on POST /v1/rerank, checks the answer in the page, and saves a screenshot
# of it; then a browser app on an allowed origin calls the API through a CORS preflight, and one
# on another origin is refused.
# Installs chromium (apt-get, through scripts/install-deps.sh) and playwright-core (npm, into
# WORK_DIR) when missing, so that a fresh machine runs it; fails loudly when either is unavailable.
#
# Usage: tests/browser/docs_test.sh RANKD_BINARY SCREENSHOT.png [WORK_DIR]
#   (to refresh the README's: tests/browser/docs_test.sh build/bin/rankd docs/images/api-docs.png)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rankd=$(realpath "$1")
shot=$(realpath -m "$2")
work=$(realpath -m "${3:-$(dirname "$rankd")/../browser-test}")
PLAYWRIGHT_CORE_VERSION=1.65.1

RANKD_EXTRA_PACKAGES=chromium "$root/scripts/install-deps.sh"
mkdir -p "$work"
installed=$(node -p "require('$work/node_modules/playwright-core/package.json').version" 2>/dev/null || true)
if [[ $installed != "$PLAYWRIGHT_CORE_VERSION" ]]; then
  echo "docs_test: npm install playwright-core@$PLAYWRIGHT_CORE_VERSION into $work" >&2
  npm install --prefix "$work" --no-save --no-audit --no-fund --prefer-offline \
    "playwright-core@$PLAYWRIGHT_CORE_VERSION" >&2
fi

# The server: free ports (--ready-file tells them), one worker, an API key.
run=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$run"
}
trap cleanup EXIT
key=docs-test-key-0123
echo "$key" >"$run/keys"
# The embedded default with CORS for one origin (loopback, as the page's app is: no private-network
# rules apply between them); its model path made absolute.
allowed_origin=http://localhost:9
refused_origin=http://localhost:10
"$rankd" serve --print-default-config |
  sed -e "s|^  dir: \.\./|  dir: $root/|" \
      -e "s|^  cors_allow_origins: \[\]\$|  cors_allow_origins: ['$allowed_origin']|" >"$run/config.yaml"
grep -qF "cors_allow_origins: ['$allowed_origin']" "$run/config.yaml" ||
  { echo "docs_test: could not set server.cors_allow_origins in the default config" >&2; exit 1; }
"$rankd" serve --config "$run/config.yaml" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --workers 1 --api-keys-file "$run/keys" --ready-file "$run/ready.json" \
  2>"$run/server.log" &
server_pid=$!
for _ in $(seq 600); do
  [[ -s $run/ready.json ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$run/server.log" >&2; echo "docs_test: rankd serve exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s $run/ready.json ]] || { cat "$run/server.log" >&2; echo "docs_test: rankd serve did not start" >&2; exit 1; }
port() { node -p "JSON.parse(require('fs').readFileSync('$run/ready.json'))['$1']"; }

mkdir -p "$(dirname "$shot")"
status=0
NODE_PATH="$work/node_modules" CHROMIUM=${CHROMIUM:-/usr/bin/chromium} node "$root/tests/browser/docs_test.js" \
  "http://127.0.0.1:$(port http_port)" "http://127.0.0.1:$(port metrics_port)/readyz" "$key" "$shot" \
  "$allowed_origin" "$refused_origin" || status=$?
if ((status != 0)); then
  echo "docs_test: FAILED; the server's log:" >&2
  cat "$run/server.log" >&2
fi
exit "$status"
