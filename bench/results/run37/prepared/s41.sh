# stop 53, call 1 (any card; on an H200 the target set s36 first). Build, GPU suite (the cluster split-k GEMM, the
# residual fold), the batched-decode GEMM table, q4 and bf16 at 64 sequences, then the fold's A/B (CINFER_RESIDUAL_FOLD_ROWS
# 1 = on, 0 = off) on the 4-layer shape (bf16, q4, q8, alternated) and on Llama-3-8B q4.
set -u
T=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$name" in *H200*) bash .gpu/s36.sh; exit ;; esac
exec > >(tee $OUT/log.txt) 2>&1
echo "$name"; git log --oneline -1 2>/dev/null
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 170 ctest -L 'cuda|quant' --output-on-failure --timeout 150) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -12
build-gpu/tests/cuda/test_cuda_fold > $OUT/fold.txt 2>&1; echo "fold rc=$?"; grep -c "^ok" $OUT/fold.txt; grep FAIL $OUT/fold.txt | head
timeout 100 build-gpu/tests/cuda/cuda_bench --qgemm > $OUT/qgemm.txt 2>&1; echo "qgemm rc=$? $((SECONDS-T))s"; cat $OUT/qgemm.txt | tail -14
cfg=bench/configs/llama-3-8b.json; c4=bench/configs/llama-3-8b-4layers.json
b() { local name=$1; shift; local t0=$SECONDS
  timeout 120 build-gpu/cinfer bench --device cuda "$@" > $OUT/$name.txt 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'tokens/s' $OUT/$name.txt | tail -2 | tr '\n' ' ')"; }
b c64-q4 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64
b c64-bf16 --random-weights $cfg --prompt 128 --gen 128 --concurrency 64
for round in 1 2; do
  for q in bf16 q4 q8; do
    qa=""; [ $q = bf16 ] || qa="--quant $q"
    for f in 1 0; do
      CINFER_RESIDUAL_FOLD_ROWS=$f b l4-$q-fold$f-r$round --random-weights $c4 $qa --prompt 128 --gen 256 --reps 3
    done
  done
  [ $((SECONDS - T)) -lt 420 ] || break
done
for f in 1 0; do
  [ $((SECONDS - T)) -lt 480 ] || break
  CINFER_RESIDUAL_FOLD_ROWS=$f b l32-q4-fold$f --random-weights $cfg --quant q4 --prompt 128 --gen 256 --reps 3
done
echo "done $((SECONDS-T))s"
