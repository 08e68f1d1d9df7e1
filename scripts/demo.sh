#!/usr/bin/env bash
# demo.sh BUILD_DIR: generates a passage with the embedded default model and prints tokens/s. Seed 5:
# with the current cinfer-tiny its passage runs the full 120 tokens and reads as English (re-pick it
# when the model is retrained).
set -euo pipefail
build=${1:-build}
bin=$build/cinfer
"$bin" run -p "In the beginning" --max-tokens 120 --temperature 0.8 --seed 5 --stats
