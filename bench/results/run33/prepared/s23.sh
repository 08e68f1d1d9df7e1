# H200: the target set part $1 (s17.sh A or B). Any other GPU: ncu of Gemma-4-E4B's decode attention (head size 256,
# sliding window) and the fused add + norm: where an 11 us launch for a few hundred keys spends its time.
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
case "$name" in *H200*) bash .gpu/s17.sh "${1:-A}"; exit ;; esac
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
bash scripts/gpu-build.sh cinfer > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"
. .gpu/env.sh
g="build-gpu/cinfer bench --device cuda --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 64 --reps 1"
stall=gpu__time_duration.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg,launch__grid_size,launch__registers_per_thread,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_membar_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_selected_per_warp_active.pct,smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_bytes.sum
for k in attn_decode_kernel add_norm_row_kernel qkv_post_kernel; do
  timeout 120 ncu --clock-control none --metrics $stall -k regex:$k --launch-skip 200 --launch-count 6 --csv $g > $OUT/ncu-$k.csv 2> $OUT/ncu-$k.err
  echo "$k rc=$? $((SECONDS-T))s"
done
timeout 150 ncu --clock-control none -k regex:attn_decode_kernel --launch-skip 200 --launch-count 1 --section SourceCounters --section WarpStateStats -o /tmp/attn $g > $OUT/attn-src.log 2>&1
echo "attn source rc=$? $((SECONDS-T))s"
ncu -i /tmp/attn.ncu-rep --page source --csv --print-source sass > $OUT/attn-sass.csv 2>&1
ncu -i /tmp/attn.ncu-rep --page details > $OUT/attn-details.txt 2>&1
echo total $((SECONDS-T))s
