# the target set in two calls: A = build, GPU suite (cuda|quant), engine + gemma + spec; B = build cinfer, q4 q8 q4-c64
set -u
T=$SECONDS
exec > >(tee $OUT/log-$1.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
git log --oneline -1
if [ "$1" = A ]; then
  bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -3 $OUT/build.txt
  . .gpu/env.sh
  (cd build-gpu && timeout 200 ctest -L 'cuda|quant' --output-on-failure --timeout 120) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
  grep -E "tests passed|Failed|\*\*\*" $OUT/ctest.txt | tail -10
  bash bench/gpu_targets.sh $OUT/t engine gemma spec; echo "A total $((SECONDS-T))s"
else
  bash scripts/gpu-build.sh cinfer > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -3 $OUT/build.txt
  bash bench/gpu_targets.sh $OUT/t q4 q8 q4-c64; echo "B total $((SECONDS-T))s"
fi
