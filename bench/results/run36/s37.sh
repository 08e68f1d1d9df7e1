# stop 52 call 1: build, GPU suite at the mend (8d32a8e + the experiment switch, default path), the quant tests with
# CINFER_QEXP=1; then qgemv_tc's occupancy/split A/B: QEXP 0 as main, 1 = 5 blocks an SM (not group 32) + splits while
# the doubled grid fits one wave (occupancy API), 2 = 5 blocks an SM with main's split rule
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 150 ctest -L 'cuda|quant' --output-on-failure --timeout 120) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -10
(cd build-gpu && CINFER_QEXP=1 timeout 60 ctest -L 'cuda' -R 'quant' --output-on-failure --timeout 90) > $OUT/ctest-qexp1.txt 2>&1; echo "ctest qexp1 rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest-qexp1.txt | tail -6
B="build-gpu/cinfer bench --device cuda"
l4=bench/configs/llama-3-8b-4layers.json; l8=bench/configs/llama-3-8b.json
for x in 0 1 2 0 1 2; do
  CINFER_QEXP=$x timeout 40 $B --random-weights $l4 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/l4q4 x=$x /" | cut -c1-175
done
echo "l4 $((SECONDS-T))s"
for x in 1 0; do
  CINFER_QEXP=$x timeout 80 $B --random-weights $l8 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/8b-q4 x=$x /" | cut -c1-175
done
echo "8b $((SECONDS-T))s"
for x in 0 1 2; do
  [ $((SECONDS - T)) -lt 420 ] || break
  CINFER_QEXP=$x timeout 60 build-gpu/tests/cuda/cuda_bench --qgemv > $OUT/qgemv-x$x.txt 2>&1; echo "qgemv x=$x rc=$? $((SECONDS-T))s"
done
echo total $((SECONDS-T))s
