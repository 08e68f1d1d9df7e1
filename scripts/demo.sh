#!/usr/bin/env bash
# demo.sh BUILD_DIR: generates a passage with the embedded default model (or, in a checkout without it,
# the largest test fixture) and prints tokens/s.
set -euo pipefail
build=${1:-build}
bin=$build/cinfer
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$root/models/cinfer-tiny/config.json" ]; then
  "$bin" run --model "$root/models/cinfer-tiny" -p "In the beginning" --max-tokens 120 --temperature 0.8 --seed 1 --stats
else
  model="$root/tests/fixtures/models/llama-large"
  echo "demo: generating 64 tokens with the random-weight fixture $model"
  "$bin" run --model "$model" --prompt-ids 1,2,3,4 --max-tokens 64 --temperature 0 --ignore-eos --output ids
  "$bin" bench --model "$model" --prompt 32 --gen 64 --reps 1
fi
