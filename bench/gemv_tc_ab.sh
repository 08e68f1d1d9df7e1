#!/usr/bin/env bash
# gemv_tc_ab.sh: whether the tensor-core GEMV for 2-16 bf16 rows (k_gemv_tc.cu, tuning gemv_tc_max_rows, 16 by
# default) pays on this GPU, against cuBLAS from 2 rows (0), on the GPU machine after `bash scripts/gpu-build.sh`: the
# ops test, the GEMV alone by rows (cuda_bench --gemv), then Llama-3-8B's k = 8 verify step (oracle speculation) and
# the engine at 1 / 8 / 16 sequences, the two settings alternated twice. About 3 minutes on an H100 or H200.
# Usage: bash bench/gemv_tc_ab.sh OUTDIR
set -u
cd "$(dirname "$0")/.."
out=${1:?outdir}
mkdir -p "$out"
. .gpu/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/device.txt"
timeout 200 build-gpu/tests/cuda/test_cuda_ops > "$out/test_cuda_ops.txt" 2>&1
echo "test_cuda_ops rc=$?: $(tail -1 "$out/test_cuda_ops.txt")"
timeout 120 build-gpu/tests/cuda/cuda_bench --gemv > "$out/gemv.txt" 2>&1
echo "cuda_bench --gemv rc=$?"
cfg=bench/configs/llama-3-8b.json
for round in 1 2; do
  for tc in 16 0; do
    CINFER_GEMV_TC_MAX_ROWS=$tc timeout 90 build-gpu/cinfer bench --device cuda --spec oracle --draft-max 8 --random-weights $cfg \
      --prompt 64 --gen 128 --reps 2 > "$out/spec-tc$tc-$round.txt" 2>&1
    echo "verify, gemv_tc_max_rows $tc, round $round: $(awk '$1 == "8" && NF >= 7 {print $7 " a plain step, " $3 " tokens/s"}' "$out/spec-tc$tc-$round.txt" | tail -1)"
    CINFER_GEMV_TC_MAX_ROWS=$tc timeout 90 build-gpu/cinfer bench --device cuda --random-weights $cfg --prompt 128 --gen 128 \
      --concurrency 1,8,16 > "$out/engine-tc$tc-$round.txt" 2>&1
    echo "engine 1 / 8 / 16, gemv_tc_max_rows $tc, round $round: $(grep -E '^ +(1|8|16) ' "$out/engine-tc$tc-$round.txt" | awk '{print $3}' | paste -sd/)"
  done
done
