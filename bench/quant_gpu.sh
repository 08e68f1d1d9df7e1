#!/usr/bin/env bash
# quant_gpu.sh: the GPU quantization figures of issue 21 (Llama-3-8B shape, random weights), on the GPU machine
# after scripts/gpu-build.sh. Usage: bash bench/quant_gpu.sh OUTDIR [single|batch|all]
set -u
cd "$(dirname "$0")/.."
out=${1:?outdir}; what=${2:-all}
mkdir -p "$out"
. .gpu/env.sh
cfg=bench/configs/llama-3-8b.json
b() { local name=$1; shift; local t0=$SECONDS
  timeout 170 build-gpu/cinfer bench --device cuda --random-weights $cfg "$@" > "$out/$name.txt" 2>&1
  echo "$name rc=$? $((SECONDS-t0))s"; tail -4 "$out/$name.txt"; }
if [ "$what" = single ] || [ "$what" = all ]; then
  b q4-decode --quant q4 --prompt 128 --gen 256 --reps 3
  b q8-decode --quant q8 --prompt 128 --gen 256 --reps 3
  b bf16-decode --prompt 128 --gen 256 --reps 3
fi
if [ "$what" = batch ] || [ "$what" = all ]; then
  b q4-c64 --quant q4 --prompt 128 --gen 128 --concurrency 1,64
  b bf16-c64 --prompt 128 --gen 128 --concurrency 1,64
  b q8-c64 --quant q8 --prompt 128 --gen 128 --concurrency 64
fi
