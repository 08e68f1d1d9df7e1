# stop 54, call 1 (an H100): where the batched 4/8-bit GEMM (qmma_async_kernel) spends its time at 64 and 16 rows:
# ncu base + stall metrics of every qmma launch of `cuda_bench --qprofile ROWS`, the SASS mix of the q4 q/o and gate+up
# launches at 64 rows, and the --qgemm table.
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1 2>/dev/null
bash scripts/gpu-build.sh cuda_bench > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
B=build-gpu/tests/cuda/cuda_bench
base=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_bytes.sum,sm__cycles_elapsed.avg
stall=gpu__time_duration.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_not_selected_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_selected_per_warp_active.pct,smsp__warp_issue_stalled_dispatch_stall_per_warp_active.pct,smsp__warp_issue_stalled_tex_throttle_per_warp_active.pct,smsp__warp_issue_stalled_membar_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct,smsp__warp_issue_stalled_drain_per_warp_active.pct,smsp__warp_issue_stalled_imc_miss_per_warp_active.pct,smsp__warp_issue_stalled_branch_resolving_per_warp_active.pct
for rows in 64 16; do
  for set in base stall; do
    timeout 100 ncu --clock-control none --metrics "${!set}" -k regex:qmma --csv $B --qprofile $rows > $OUT/ncu-$rows-$set.csv 2> $OUT/ncu-$rows-$set.err
    echo "$rows $set rc=$? $((SECONDS-T))s"
  done
done
# SASS mix: q4 launches of qmma_async at 64 rows: q/o twice (skip 1 = second), k/v, gate+up (skip 5), down
for skip in 1 5; do
  timeout 100 ncu --clock-control none -k regex:qmma_async --launch-skip $skip --launch-count 1 --section SourceCounters \
    --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats -o $OUT/q4-$skip $B --qprofile 64 > $OUT/q4-$skip.log 2>&1
  echo "sass $skip rc=$? $((SECONDS-T))s"
  ncu -i $OUT/q4-$skip.ncu-rep --page source --csv --print-source sass > $OUT/q4-$skip-sass.csv 2>&1
  python3 bench/ncu_sass_mix.py $OUT/q4-$skip-sass.csv > $OUT/q4-$skip-mix.txt 2>&1
  ncu -i $OUT/q4-$skip.ncu-rep --page details --csv > $OUT/q4-$skip-details.csv 2>&1
  gzip -f $OUT/q4-$skip-sass.csv; rm -f $OUT/q4-$skip.ncu-rep
done
timeout 100 $B --qgemm > $OUT/qgemm.txt 2>&1; echo "qgemm rc=$? $((SECONDS-T))s"; tail -14 $OUT/qgemm.txt
echo "done $((SECONDS-T))s"
