# stop 54, call 3, lean (little device time left): the committed GEMM (7ef2a1a) on the GPU: cuda.quant_ops (with its
# new 12-row case), cuda.quant, then q4 at 64 sequences.
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1 2>/dev/null
bash scripts/gpu-build.sh cinfer test_qcuda_ops test_qcuda > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -1 $OUT/build.txt
. .gpu/env.sh
timeout 60 build-gpu/tests/quant/test_qcuda_ops > $OUT/quant_ops.txt 2>&1; echo "cuda.quant_ops rc=$? $((SECONDS-T))s"; grep -E "FAIL|checks" $OUT/quant_ops.txt | head
timeout 60 build-gpu/tests/quant/test_qcuda models/cinfer-tiny /tmp/qcuda-tmp > $OUT/quant.txt 2>&1; echo "cuda.quant rc=$? $((SECONDS-T))s"; tail -2 $OUT/quant.txt
[ $((SECONDS - T)) -lt 130 ] && { timeout 60 build-gpu/cinfer bench --device cuda --random-weights bench/configs/llama-3-8b.json --quant q4 --prompt 128 --gen 128 --concurrency 64 > $OUT/c64-q4.txt 2>&1; echo "c64-q4 rc=$? $(grep -A1 'concurrency plan' $OUT/c64-q4.txt | tail -1)"; }
echo "done $((SECONDS-T))s"
