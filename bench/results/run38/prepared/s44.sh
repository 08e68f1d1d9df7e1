# stop 54 (any card; an H200 runs the target set s36 first when there is time): the quantized GEMM on wgmma
# (tuning.qmma_wgmma, CINFER_QMMA_WGMMA) against mma.sync: its tests, the --qgemm table (both columns), ncu of both at
# 64 rows, q4 at 64 and 16 sequences through the engine alternated; then the whole GPU suite.
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; git log --oneline -1 2>/dev/null
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
timeout 120 build-gpu/tests/quant/test_qcuda_ops > $OUT/quant_ops.txt 2>&1; echo "quant_ops rc=$? $((SECONDS-T))s"; grep -E "^# backend|FAIL|checks" $OUT/quant_ops.txt | head -30
B=build-gpu/tests/cuda/cuda_bench
timeout 120 $B --qgemm > $OUT/qgemm.txt 2>&1; echo "qgemm rc=$? $((SECONDS-T))s"; tail -14 $OUT/qgemm.txt
cfg=bench/configs/llama-3-8b.json
b() { local name=$1; shift; local t0=$SECONDS
  timeout 120 build-gpu/cinfer bench --device cuda "$@" > $OUT/$name.txt 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'tokens/s' $OUT/$name.txt | tail -2 | tr '\n' ' ')"; }
for round in 1 2; do
  for w in 1 0; do
    CINFER_QMMA_WGMMA=$w b c64-q4-wg$w-r$round --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64
  done
  [ $((SECONDS - T)) -lt 330 ] || break
done
for w in 1 0; do CINFER_QMMA_WGMMA=$w b c16-q4-wg$w --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 16; done
b c64-bf16 --random-weights $cfg --prompt 128 --gen 128 --concurrency 64
base=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_selected_per_warp_active.pct,smsp__warp_issue_stalled_not_selected_per_warp_active.pct,smsp__warp_issue_stalled_membar_per_warp_active.pct,smsp__warp_issue_stalled_dispatch_stall_per_warp_active.pct
for w in 0 1; do
  [ $((SECONDS - T)) -lt 450 ] || break
  CINFER_QMMA_WGMMA=$w timeout 60 ncu --clock-control none --metrics "$base" -k regex:qmma_async --launch-count 10 --csv $B --qprofile 64 > $OUT/ncu-64-wg$w.csv 2> $OUT/ncu-64-wg$w.err
  echo "ncu wg$w rc=$? $((SECONDS-T))s"
done
if [ $((SECONDS - T)) -lt 420 ]; then
  (cd build-gpu && timeout 170 ctest -L 'cuda|quant' --output-on-failure --timeout 150) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
  grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -12
fi
echo "done $((SECONDS-T))s"
