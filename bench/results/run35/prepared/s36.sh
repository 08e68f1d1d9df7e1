# the whole target set in one call on an H200 (about 450 s after the start): build, GPU suite, then the figures in
# order of need (gemma, spec, q4, engine, q8, q4-c64), each into $OUT/t; any other GPU: the suite, Gemma, q4 and q8.
# Copy to .gpu/ (bash scripts/gpu-build.sh here first) and run with carry [".gpu"].
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; git log --oneline -1
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 150 ctest -L 'cuda|quant' --output-on-failure --timeout 120) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -10
case "$name" in *H200*) runs="gemma spec q4 engine q8 q4-c64" ;; *) runs="gemma q4 q8" ;; esac
for r in $runs; do
  [ $((SECONDS - T)) -lt 430 ] || { echo "out of time before $r"; break; }
  bash bench/gpu_targets.sh $OUT/t $r > /dev/null 2>&1; echo "$r $((SECONDS-T))s"
done
python3 bench/gpu_targets_summary.py $OUT/t
