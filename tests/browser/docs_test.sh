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
source "$root/tests/common/rankd_test_server.sh"
key=docs-test-key-0123
rankd_test_server_init docs_test "$key"
# The embedded default with CORS for one origin (loopback, as the page's app is: no private-network
# rules apply between them); its model path made absolute.
allowed_origin=http://localhost:9
refused_origin=http://localhost:10
"$rankd" serve --print-default-config |
  sed -e "s|^  dir: \.\./|  dir: $root/|" \
      -e "s|^  cors_allow_origins: \[\]\$|  cors_allow_origins: ['$allowed_origin']|" >"$run/config.yaml"
grep -qF "cors_allow_origins: ['$allowed_origin']" "$run/config.yaml" ||
  { echo "docs_test: could not set server.cors_allow_origins in the default config" >&2; exit 1; }
rankd_test_server_start "$rankd" --config "$run/config.yaml"
port() { rankd_test_server_port "$1"; }

mkdir -p "$(dirname "$shot")"
status=0
NODE_PATH="$work/node_modules" CHROMIUM=${CHROMIUM:-/usr/bin/chromium} node "$root/tests/browser/docs_test.js" \
  "http://127.0.0.1:$(port http_port)" "http://127.0.0.1:$(port metrics_port)/readyz" "$key" "$shot" \
  "$allowed_origin" "$refused_origin" || status=$?
((status == 0)) || rankd_test_server_failed
exit "$status"
