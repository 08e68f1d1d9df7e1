#!/usr/bin/env bash
# quant_gpu_profile.sh: ncu figures of the quantized decode GEMV against the bf16 one (issue 21), on the GPU machine
# after scripts/gpu-build.sh: `cuda_bench --qprofile` launches each of Llama-3-8B's one-row products twice with
# 4-bit, 8-bit and bf16 weights (no model to build, so it profiles in seconds); ncu takes every GEMV launch. Two
# passes: time, bytes, occupancy and issue; then the stall reasons. Metrics are named with --metrics. Last, the
# instruction mix of the 4- and 8-bit gate + up launches (bench/ncu_sass_mix.py; bench/results run29 read it).
# Usage: bash bench/quant_gpu_profile.sh OUTDIR
set -u
cd "$(dirname "$0")/.."
out=${1:?outdir}
mkdir -p "$out"
. .gpu/env.sh
base=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
stall=gpu__time_duration.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_not_selected_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_selected_per_warp_active.pct
for set in base stall; do
  timeout 150 ncu --clock-control none --metrics "${!set}" -k regex:gemv --csv build-gpu/tests/cuda/cuda_bench --qprofile \
    > "$out/ncu-$set.csv" 2> "$out/ncu-$set.err"
  echo "$set rc=$?"
done
# Then the instruction mix of the 4-bit and 8-bit gate + up launches (the tensor-core GEMV's 6th and 16th launch in
# --qprofile): the SASS page of a SourceCounters report, summed by bench/ncu_sass_mix.py.
for skip in 5 15; do
  timeout 150 ncu --clock-control none -k regex:qgemv_tc --launch-skip $skip --launch-count 1 --section SourceCounters \
    --section WarpStateStats --section LaunchStats -o "$out/gateup-$skip" build-gpu/tests/cuda/cuda_bench --qprofile \
    > "$out/gateup-$skip.log" 2>&1
  echo "gate+up launch $skip rc=$?"
  ncu -i "$out/gateup-$skip.ncu-rep" --page source --csv --print-source sass > "$out/gateup-$skip-sass.csv" 2>&1
  python3 bench/ncu_sass_mix.py "$out/gateup-$skip-sass.csv" | tee "$out/gateup-$skip-mix.txt"
  rm -f "$out/gateup-$skip.ncu-rep"
done
