# stop 55, call 1 (any card): the committed GEMM (7ef2a1a) through the GPU suite; the staged-x GEMV experiment
# (tuning.qgemv_tc 2) through cuda.quant_ops and cuda.quant, --qgemv beside the tensor-core GEMV, decode of one
# sequence q4 and q8 with 1 and 2 alternated; q4 and bf16 at 64 sequences.
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; git log --oneline -1 2>/dev/null
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -1 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 130 ctest -L 'cuda|quant' --output-on-failure --timeout 110) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test|checks," $OUT/ctest.txt | tail -12
CINFER_QGEMV_TC=2 timeout 60 build-gpu/tests/quant/test_qcuda_ops > $OUT/xs-quant_ops.txt 2>&1; echo "xs cuda.quant_ops rc=$? $((SECONDS-T))s"; grep -E "FAIL|checks" $OUT/xs-quant_ops.txt | head -20
CINFER_QGEMV_TC=2 timeout 60 build-gpu/tests/quant/test_qcuda models/cinfer-tiny /tmp/qcuda-tmp > $OUT/xs-quant.txt 2>&1; echo "xs cuda.quant rc=$? $((SECONDS-T))s"; tail -3 $OUT/xs-quant.txt
timeout 90 build-gpu/tests/cuda/cuda_bench --qgemv > $OUT/qgemv.txt 2>&1; echo "qgemv rc=$? $((SECONDS-T))s"; grep "^|" $OUT/qgemv.txt | head -34
cfg=bench/configs/llama-3-8b.json
b() { local name=$1; shift; local t0=$SECONDS
  timeout 90 build-gpu/cinfer bench --device cuda "$@" > $OUT/$name.txt 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -iE 'decode|roofline' $OUT/$name.txt | head -2 | tr '\n' ' ' | cut -c1-220)"; }
for q in q4 q8; do for v in 1 2; do
  [ $((SECONDS - T)) -lt 420 ] || break 2
  CINFER_QGEMV_TC=$v b $q-tc$v --random-weights $cfg --quant $q --prompt 128 --gen 256 --reps 3
done; done
[ $((SECONDS - T)) -lt 470 ] && b c64-q4 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64
[ $((SECONDS - T)) -lt 520 ] && b c64-bf16 --random-weights $cfg --prompt 128 --gen 128 --concurrency 64
for q in q4 bf16; do
  [ $((SECONDS - T)) -lt 520 ] || break
  qa=""; [ $q = bf16 ] || qa="--quant $q"
  b pf4096-$q --random-weights $cfg $qa --prompt 4096 --gen 8 --reps 2
  grep -iE "prefill|first token" $OUT/pf4096-$q.txt | head -3
done
echo "done $((SECONDS-T))s"
