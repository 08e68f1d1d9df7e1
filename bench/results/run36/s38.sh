# stop 52 call 2: build HEAD (+ the MINB-4-when-unsplit switch), the GPU suite at the committed default, the quantized
# tests with the switch, then CINFER_QEXP=1 (4 blocks an SM for products that do not split) against the default
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -1 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 150 ctest -L 'cuda|quant' --output-on-failure --timeout 120) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -10
(cd build-gpu && CINFER_QEXP=1 timeout 40 ctest -L 'cuda' -R 'quant' --output-on-failure --timeout 40) > $OUT/ctest-qexp1.txt 2>&1; echo "ctest qexp1 rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|Total Test" $OUT/ctest-qexp1.txt | tail -3
B="build-gpu/cinfer bench --device cuda"
l4=bench/configs/llama-3-8b-4layers.json; l8=bench/configs/llama-3-8b.json
for x in 0 1 0 1; do
  CINFER_QEXP=$x timeout 30 $B --random-weights $l4 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/l4q4 x=$x /" | cut -c1-175
done
echo "l4 $((SECONDS-T))s"
for x in 1 0; do
  [ $((SECONDS - T)) -lt 240 ] || break
  CINFER_QEXP=$x timeout 60 $B --random-weights $l8 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/8b-q4 x=$x /" | cut -c1-175
done
echo total $((SECONDS-T))s
