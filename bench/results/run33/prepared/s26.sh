# the GPU suite (ctest -L 'cuda|quant') at HEAD
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
(cd build-gpu && timeout 300 ctest -L 'cuda|quant' --output-on-failure --timeout 150) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*|Total Test" $OUT/ctest.txt | tail -12
