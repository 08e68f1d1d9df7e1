# stop 54, call 3 (an H100): the committed GEMM change (7ef2a1a) without the wgmma experiment: GPU suite (with 12 rows
# in cuda.quant_ops), --qgemm, q4 and bf16 at 64 sequences alternated, q4 at 16.
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1 2>/dev/null
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -1 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 130 ctest -L 'cuda|quant' --output-on-failure --timeout 110) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test|checks," $OUT/ctest.txt | tail -12
timeout 60 build-gpu/tests/cuda/cuda_bench --qgemm > $OUT/qgemm.txt 2>&1; echo "qgemm rc=$? $((SECONDS-T))s"; tail -12 $OUT/qgemm.txt
cfg=bench/configs/llama-3-8b.json
b() { local name=$1; shift; local t0=$SECONDS
  timeout 90 build-gpu/cinfer bench --device cuda "$@" > $OUT/$name.txt 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -A1 'concurrency plan' $OUT/$name.txt | tail -1)"; }
b c64-q4 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64
b c64-bf16 --random-weights $cfg --prompt 128 --gen 128 --concurrency 64
[ $((SECONDS - T)) -lt 240 ] && b c16-q4 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 16
echo "done $((SECONDS-T))s"
