set -u
T=$SECONDS
bash scripts/gpu-build.sh cinfer >/dev/null 2>&1; . .gpu/env.sh; echo "build $((SECONDS-T))s"
cmake --build build-gpu --target test_cuda_fold test_cuda_model test_qcuda >/dev/null 2>&1; echo "tests built $((SECONDS-T))s"
build-gpu/tests/cuda/test_cuda_fold > $OUT/fold.txt 2>&1; echo "fold rc=$?"; grep -cE "^ok" $OUT/fold.txt; grep -E "FAIL|FATAL" $OUT/fold.txt | head -5
(cd build-gpu && timeout 60 ctest -R "fold" --timeout 50) > $OUT/ctest-fold.txt 2>&1; grep -E "tests passed|Failed" $OUT/ctest-fold.txt
c4=bench/configs/llama-3-8b-4layers.json
for q in q4 bf16; do qa=""; [ $q = bf16 ] || qa="--quant $q"
for f in 1 0 1 0; do CINFER_RESIDUAL_FOLD_ROWS=$f timeout 30 build-gpu/cinfer bench --device cuda --random-weights $c4 $qa --prompt 128 --gen 256 --reps 3 2>&1 | grep -E "^decode" | sed "s/^/$q fold$f /"; done; done
echo "done $((SECONDS-T))s"
