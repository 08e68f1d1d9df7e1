# H200: target set A, then the q4 fold A/B; otherwise: build, GPU suite, Gemma, the q4/q8 fold A/B (CINFER_QNOFOLD=1: qkv_post as before)
set -u
T=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
B="build-gpu/cinfer bench --device cuda"
l4=bench/configs/llama-3-8b-4layers.json; l8=bench/configs/llama-3-8b.json
ab() {
  for r in 1; do for f in 0 1 0; do
    if [ $f = 1 ]; then export CINFER_QNOFOLD=1; else unset CINFER_QNOFOLD; fi
    timeout 40 $B --random-weights $l4 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/l4q4 nofold=$f r=$r /" | cut -c1-175
  done; done; unset CINFER_QNOFOLD
  for f in 0 1; do
    if [ $f = 1 ]; then export CINFER_QNOFOLD=1; else unset CINFER_QNOFOLD; fi
    timeout 80 $B --random-weights $l8 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/8b-q4 nofold=$f /" | cut -c1-175
  done; unset CINFER_QNOFOLD
  echo "ab $((SECONDS-T))s"
}
exec > >(tee $OUT/log.txt) 2>&1
case "$name" in *H200*)
  bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
  . .gpu/env.sh
  (cd build-gpu && timeout 150 ctest -L 'cuda|quant' --output-on-failure --timeout 120) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
  grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -10
  for r in gemma spec q4 engine; do bash bench/gpu_targets.sh $OUT/t $r > /dev/null 2>&1; echo "$r $((SECONDS-T))s"; done
  python3 bench/gpu_targets_summary.py $OUT/t; exit 0 ;;
esac
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 200 ctest -L 'cuda|quant' --output-on-failure --timeout 120) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -10
ab
for r in 1; do timeout 40 $B --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/gemma r=$r /" | cut -c1-175; done
echo total $((SECONDS-T))s
