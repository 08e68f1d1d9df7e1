#!/usr/bin/env bash
# demo.sh BUILD_DIR: generates a passage with the embedded default model and prints tokens/s.
set -euo pipefail
build=${1:-build}
bin=$build/cinfer
"$bin" run -p "In the beginning" --max-tokens 120 --temperature 0.8 --seed 4 --stats
