#!/usr/bin/env bash
# Installs the Debian packages cinfer needs to build and test (libmicrohttpd-dev for `serve`; node, npm and
# chromium for the server's black-box suites), then the pinned npm packages of tests/server/js (npm ci) when
# its node_modules is missing or was installed from another package-lock.json. Idempotent: does nothing when all are present.
set -euo pipefail
PKGS="build-essential cmake ninja-build pkg-config libcjson-dev libpcre2-dev libutf8proc-dev \
libmicrohttpd-dev python3 python3-jinja2 clang bible-kjv-text bible-kjv chromium"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
command -v node >/dev/null || missing="$missing nodejs"
command -v npm >/dev/null || missing="$missing npm"
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# npm ci again when the lock file changed since the last install (its hash is kept in node_modules).
js="$(cd "$(dirname "$0")/.." && pwd)/tests/server/js"
stamp="$js/node_modules/.cinfer-lock.sha256"
want=$(sha256sum "$js/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: npm ci in tests/server/js"
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" > "$stamp"
fi
