#!/usr/bin/env bash
# gpu-ab.sh: on the GPU machine, after gpu-build.sh: side-by-side decode A/B of environment settings in the
# same process order each round (the machines of a kind differ by a few percent; compare within one call).
#   bash scripts/gpu-ab.sh [-r ROUNDS] [-c CONFIG] "SETTINGS A" "SETTINGS B" ...
# each SETTINGS is a space-separated list of VAR=value (X=0 for none); the bench is Llama-3-8B (or CONFIG),
# 128-token prompt, 256 decoded, median of 3 reps. Prints one line per run: settings, tokens/s, % of roofline.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
rounds=2
config=bench/configs/llama-3-8b.json
usage() { echo "usage: $0 [-r ROUNDS] [-c CONFIG] SETTINGS..." >&2; exit 2; }
while getopts "r:c:" o; do
  case $o in
  r) rounds=$OPTARG ;;
  c) config=$OPTARG ;;
  *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage
. .gpu/env.sh
for round in $(seq "$rounds"); do
  for s in "$@"; do
    # shellcheck disable=SC2086  # SETTINGS is a list of words
    line=$(env $s timeout 120 build-gpu/cinfer bench --device cuda --random-weights "$config" --prompt 128 --gen 256 --reps 3 2>&1 |
           grep '^decode' | sed 's/.*one step ahead): //')
    echo "round $round | $s | ${line:-failed}"
  done
done
