#!/usr/bin/env bash
# gpu-test.sh: on the GPU machine, after gpu-build.sh: the CUDA tests (ctest -L cuda), the whole suite,
# then compute-sanitizer memcheck and racecheck over the op tests (one cudaMalloc per tensor, so reads
# and writes past a tensor are caught). Logs under $OUT when set. Exit status: 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
. .gpu/env.sh
out=${OUT:-build-gpu}
rc=0
echo "== ctest -L cuda"
(cd build-gpu && ctest -L cuda --output-on-failure --timeout 300) 2>&1 | tee "$out/ctest-cuda.txt" || rc=1
echo "== ctest -LE cuda (the rest of the suite; the CUDA tests run one at a time above, each takes the GPU's memory)"
(cd build-gpu && ctest -LE cuda -j 8 --timeout 300 2>&1 | tail -40) 2>&1 | tee "$out/ctest-rest.txt" || rc=1
grep -q "100% tests passed" "$out/ctest-rest.txt" || rc=1
if command -v compute-sanitizer >/dev/null 2>&1; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool test_cuda_ops"
    CINFER_CUDA_DIRECT_ALLOC=1 timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 build-gpu/tests/cuda/test_cuda_ops \
      > "$out/sanitizer-$tool.txt" 2>&1
    s=$?
    tail -5 "$out/sanitizer-$tool.txt"
    echo "compute-sanitizer $tool: exit $s"
    [ $s -eq 0 ] || rc=1
  done
else
  echo "compute-sanitizer not found"
fi
exit $rc
