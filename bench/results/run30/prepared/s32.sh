# next stop, first call (after `git apply .gpu/next-both.diff`): CINFER_QEXP=3 (GEMV's x in shared memory) and
# CINFER_QEXP=5 (the quantized GEMM's split at most one wave): correctness, tables, end to end A/B. About 420 s.
set -u
T=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
mkdir -p /tmp/o
bash scripts/gpu-build.sh cinfer cuda_bench test_cuda_ops test_qcuda test_qcuda_ops > /tmp/o/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 /tmp/o/build.txt
. .gpu/env.sh
CINFER_QEXP=3 timeout 60 build-gpu/tests/cuda/test_cuda_ops > /tmp/o/ops-x3.txt 2>&1; echo "ops x3 rc=$? $(tail -1 /tmp/o/ops-x3.txt) $((SECONDS-T))s"
for x in 3 5; do (cd build-gpu && CINFER_QEXP=$x timeout 90 ctest -R "cuda.quant" --output-on-failure) > /tmp/o/ctest-quant-x$x.txt 2>&1; echo "ctest cuda.quant x$x rc=$? $((SECONDS-T))s"; grep -E "tests passed|Failed" /tmp/o/ctest-quant-x$x.txt; done
for x in 0 3 5; do CINFER_QEXP=$x timeout 90 build-gpu/tests/cuda/cuda_bench --qgemv > /tmp/o/qgemv-x$x.txt 2>&1; echo "qgemv x$x rc=$? $((SECONDS-T))s"; grep -E "\| 1 \||\| 64 \|" /tmp/o/qgemv-x$x.txt; done
python3 -c "
import json; d=json.load(open('bench/configs/llama-3-8b.json')); d['num_hidden_layers']=4; json.dump(d,open('/tmp/l4.json','w'))"
B="build-gpu/cinfer bench --device cuda"
for q in q4 q8; do for x in 0 3 0 3; do CINFER_QEXP=$x timeout 40 $B --random-weights /tmp/l4.json --quant $q --prompt 128 --gen 256 --reps 3 > /tmp/o/l4-$q-x$x.txt 2>&1; echo "l4 $q x$x: $(grep -E '^decode' /tmp/o/l4-$q-x$x.txt | sed 's/.*one step ahead)://') $((SECONDS-T))s"; done; done
for x in 0 5 0 5; do CINFER_QEXP=$x timeout 80 $B --random-weights bench/configs/llama-3-8b.json --quant q4 --prompt 128 --gen 128 --concurrency 64 > /tmp/o/q4c64-x$x.txt 2>&1; echo "q4 c64 x$x: $(grep -E '^ *64 ' /tmp/o/q4c64-x$x.txt | head -1) $((SECONDS-T))s"; done
tar czf $OUT/out.tgz -C /tmp o; echo total $((SECONDS-T))s
