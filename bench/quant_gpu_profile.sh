#!/usr/bin/env bash
# quant_gpu_profile.sh: ncu figures of the quantized decode GEMV against the bf16 one (issue 21), on the GPU machine
# after scripts/gpu-build.sh: a 4-layer Llama-3-8B shape (loads in seconds), 24 decode steps, the kernels of a few
# steps past the prefill. Metrics are named with --metrics (the section form failed to profile inside the recorded
# decode graph); a first pass with the set that worked on 2026-12-04, then the memory and stall set.
# Usage: bash bench/quant_gpu_profile.sh OUTDIR
set -u
cd "$(dirname "$0")/.."
out=${1:?outdir}
mkdir -p "$out"
. .gpu/env.sh
base=gpu__time_duration.sum,dram__bytes_read.sum,sm__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active
mem=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct
for q in q4 bf16; do
  flag=(); [ "$q" = bf16 ] || flag=(--quant "$q")
  for set in base mem; do
    timeout 150 ncu --clock-control none --metrics "${!set}" --launch-skip 150 --launch-count 40 --csv \
      build-gpu/cinfer bench --device cuda --random-weights bench/configs/llama-3-8b-4layers.json --prompt 8 --gen 24 --reps 1 "${flag[@]}" \
      > "$out/ncu-$q-$set.csv" 2> "$out/ncu-$q-$set.err"
    echo "$q $set rc=$?"
  done
done
