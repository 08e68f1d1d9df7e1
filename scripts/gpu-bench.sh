#!/usr/bin/env bash
# gpu-bench.sh: on the GPU machine, after gpu-build.sh: cuda_bench (kernels, copy bandwidth, GEMM rate,
# a Llama-3-8B-shaped decoder from backend ops) and `cinfer bench --random-weights` on the Llama-3-8B
# config. Results to $OUT (or bench/results when OUT is unset), each headed by the command that made it.
set -uo pipefail
cd "$(dirname "$0")/.."
. .gpu/env.sh
out=${OUT:-bench/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv > "$out/gpu.txt"
rc=0
{ echo "\$ build-gpu/tests/cuda/cuda_bench"; build-gpu/tests/cuda/cuda_bench; } 2>&1 | tee "$out/cuda_bench.txt" || rc=1
for args in "--prompt 512 --gen 128" "--prompt 4096 --gen 64"; do
  cmd="build-gpu/cinfer bench --random-weights bench/configs/llama-3-8b.json --device cuda $args --reps 2"
  { echo "\$ $cmd"; $cmd; } 2>&1 | tee -a "$out/cinfer_bench.txt" || rc=1
done
exit $rc
