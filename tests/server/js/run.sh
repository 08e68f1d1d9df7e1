#!/bin/sh
# run.sh: runs one Node suite of `cinfer serve` for ctest. Exits 77 (ctest: skipped) with a message when node,
# or chromium for the browser test, is not installed here; under CI (CI set) their absence is a failure.
# usage: run.sh FILE.mjs [ARGS...]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
file=$1
shift
missing() {
  if [ -n "${CI:-}" ]; then
    echo "FAIL: $1 is not installed (CI must run the server suite: scripts/setup.sh installs it)" >&2
    exit 1
  fi
  echo "SKIP: $1 is not installed; the server's Node suite needs it (scripts/setup.sh installs it)"
  exit 77
}
command -v node >/dev/null 2>&1 || missing node
case "$file" in
  *browser*) [ -x "${CHROMIUM:-/usr/bin/chromium}" ] || missing chromium ;;
esac
if [ ! -d "$here/node_modules/openai" ] || [ ! -d "$here/node_modules/@anthropic-ai/sdk" ] || [ ! -d "$here/node_modules/puppeteer-core" ]; then
  echo "FAIL: the npm packages are missing from $here/node_modules: run scripts/setup.sh (npm ci there)" >&2
  exit 1
fi
case "$file" in
  test_*) exec node --test-reporter=spec "$here/$file" "$@" ;;
  *) exec node "$here/$file" "$@" ;;
esac
