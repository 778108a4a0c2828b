#!/usr/bin/env bash
# ctest entry point: end-to-end tests of `ultrafast serve` with the official openai and
# @anthropic-ai/sdk npm clients.
#   tests/e2e/run.sh path/to/ultrafast
# Exits 77 (ctest: skipped) when node, the npm packages or the serve command are unavailable.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(realpath "${1:?usage: run.sh path/to/ultrafast}")"
model="${UF_MODEL:-$here/../../../shared/models/tiny-qwen2-256-q8_0.gguf}"
if [ ! -f "$model" ]; then
  echo "$model is missing (../shared is not beside this checkout; UF_MODEL=PATH picks another): skipping the e2e tests"
  exit 77
fi
if ! command -v node >/dev/null 2>&1; then
  echo "node not found: skipping the e2e tests"
  exit 77
fi
if [ ! -d "$here/node_modules/openai" ] || [ ! -d "$here/node_modules/@anthropic-ai/sdk" ]; then
  if ! npm ci --prefix "$here" --no-audit --no-fund; then
    echo "npm ci failed: skipping the e2e tests"
    exit 77
  fi
fi
if ! "$bin" serve --help >/dev/null 2>&1; then
  echo "$bin has no serve command: skipping the e2e tests"
  exit 77
fi
UF_BIN="$bin" UF_MODEL="$model" exec node --test "$here/server.test.mjs" "$here/apis.test.mjs"
