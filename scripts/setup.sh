#!/usr/bin/env bash
# Installs the Debian packages cinfer needs to build and test (libmicrohttpd-dev for the coming `serve` verb;
# nothing links it yet). Idempotent: does nothing when all are present.
set -euo pipefail
PKGS="build-essential cmake ninja-build pkg-config libcjson-dev libpcre2-dev libutf8proc-dev \
libmicrohttpd-dev python3 python3-jinja2 clang bible-kjv-text bible-kjv"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
command -v npm >/dev/null || missing="$missing npm"
if [ -z "$missing" ]; then exit 0; fi
echo "setup: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
