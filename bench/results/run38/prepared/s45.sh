# stop 54, call 2 (an H100): the quantized GEMM with its m16 tiles fixed at compile time (1, 2, 4) and the next k16
# step's weight fragments made before this step's MMAs; wgmma (CINFER_QMMA_WGMMA=1) beside it. Tests, --qgemm, q4 at
# 64 and 16 sequences, q8 at 64 both ways, then the GPU suite.
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -1 $OUT/build.txt
. .gpu/env.sh
timeout 120 build-gpu/tests/quant/test_qcuda_ops > $OUT/quant_ops.txt 2>&1; echo "quant_ops rc=$? $((SECONDS-T))s"; grep -E "FAIL|checks" $OUT/quant_ops.txt | head -10
timeout 120 build-gpu/tests/cuda/cuda_bench --qgemm > $OUT/qgemm.txt 2>&1; echo "qgemm rc=$? $((SECONDS-T))s"; tail -12 $OUT/qgemm.txt
cfg=bench/configs/llama-3-8b.json
b() { local name=$1; shift; local t0=$SECONDS
  timeout 120 build-gpu/cinfer bench --device cuda "$@" > $OUT/$name.txt 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -A1 'concurrency plan' $OUT/$name.txt | tail -1)"; }
b c64-q4-r1 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64
b c16-q4 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 16
for w in 1 0; do CINFER_QMMA_WGMMA=$w b c64-q8-wg$w --random-weights $cfg --quant q8 --prompt 128 --gen 128 --concurrency 64; done
b c64-q4-r2 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64
if [ $((SECONDS - T)) -lt 440 ]; then
  (cd build-gpu && timeout 120 ctest -L 'cuda|quant' --output-on-failure --timeout 100) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
  grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -12
fi
echo "done $((SECONDS-T))s"
