#!/usr/bin/env bash
# ctest entry point: the `serve` playground in headless Chromium (Debian's chromium package,
# driven by puppeteer-core pinned in package-lock.json; no browser is downloaded).
#   tests/web/run.sh path/to/ultrafast
# Exits 77 (ctest: skipped) when node, the npm packages or chromium are unavailable.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(realpath "${1:?usage: run.sh path/to/ultrafast}")"
model="${UF_MODEL:-$here/../../../shared/models/tiny-llama-256-q8_0.gguf}"
if [ ! -f "$model" ]; then
  echo "$model is missing (../shared is not beside this checkout; UF_MODEL=PATH picks another): skipping the playground tests"
  exit 77
fi
if ! command -v node >/dev/null 2>&1; then
  echo "node not found: skipping the playground tests"
  exit 77
fi
chromium="${UF_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
  echo "$chromium not found (apt-get install chromium): skipping the playground tests"
  exit 77
fi
# Skip only when the browser itself cannot start (no display is needed: it runs headless).
if ! timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --dump-dom about:blank \
     >/dev/null 2>&1; then
  echo "$chromium cannot start headless: skipping the playground tests"
  exit 77
fi
if [ ! -d "$here/node_modules/puppeteer-core" ]; then
  if ! PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix "$here" --no-audit --no-fund; then
    echo "npm ci failed: skipping the playground tests"
    exit 77
  fi
fi
UF_BIN="$bin" UF_MODEL="$model" UF_CHROMIUM="$chromium" exec node --test --test-concurrency=1 "$here/playground.test.mjs"
