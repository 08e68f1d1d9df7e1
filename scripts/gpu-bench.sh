#!/usr/bin/env bash
# gpu-bench.sh: on the GPU machine, after gpu-build.sh. Parts (all by default, or those named):
#   kernels  cuda_bench: copy bandwidth, GEMM rate, GEMV and attention kernels, and a Llama-3-8B-shaped
#            decoder built from backend ops (decode with graphs, prefill)
#   model    cinfer bench --random-weights CONFIG --device cuda (the model code's path): Llama-3-8B (128-token
#            prompt + 256 decoded, and a 4096-token prefill), Qwen3-8B, Gemma-4-E4B
# Results go to $OUT (or bench/results), each file headed by the command that produced it.
set -uo pipefail
cd "$(dirname "$0")/.."
. .gpu/env.sh
out=${OUT:-bench/results}
mkdir -p "$out"
parts=${*:-kernels model}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv > "$out/gpu.txt"
rc=0
for part in $parts; do
  case $part in
  kernels)
    { echo "\$ build-gpu/tests/cuda/cuda_bench"; build-gpu/tests/cuda/cuda_bench; } > "$out/cuda_bench.txt" 2>&1 || rc=1
    cat "$out/cuda_bench.txt"
    ;;
  model)
    : > "$out/cinfer_bench.txt"
    for args in "bench/configs/llama-3-8b.json --prompt 128 --gen 256 --reps 3" "bench/configs/llama-3-8b.json --prompt 4096 --gen 32 --reps 2" \
                "bench/configs/qwen3-8b.json --prompt 128 --gen 256 --reps 3" "tests/gemma/gemma4-e4b.json --prompt 128 --gen 256 --reps 3"; do
      cmd="build-gpu/cinfer bench --device cuda --random-weights $args"
      { echo "\$ $cmd"; $cmd; echo; } >> "$out/cinfer_bench.txt" 2>&1 || rc=1
    done
    cat "$out/cinfer_bench.txt"
    ;;
  *) echo "gpu-bench: unknown part '$part'"; rc=1 ;;
  esac
done
exit $rc
