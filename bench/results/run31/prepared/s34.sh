# stop 45 (short budget): on an H200 the GPU suite + engine / spec / Gemma figures (issues 18, 20); else the A/B of
# CINFER_QEXP=8 (3 + 5: GEMV x in shared memory, the quantized GEMM's split at most one wave). About 300-380 s.
set -u
T=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
mkdir -p /tmp/o
case $name in *H200*)
  bash scripts/gpu-build.sh cinfer > /tmp/o/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 /tmp/o/build.txt
  . .gpu/env.sh
  B="build-gpu/cinfer bench --device cuda"; cfg=bench/configs/llama-3-8b.json
  timeout 110 $B --random-weights $cfg --prompt 128 --gen 128 --concurrency 1,64,128 > /tmp/o/engine.txt 2>&1; echo "engine rc=$? $((SECONDS-T))s"; grep -E "^ *(1|64|128) " /tmp/o/engine.txt
  timeout 80 $B --spec oracle --random-weights $cfg --prompt 64 --gen 128 --reps 2 > /tmp/o/spec.txt 2>&1; echo "spec rc=$? $((SECONDS-T))s"; grep -iE "verify|oracle|k = " /tmp/o/spec.txt | head -12
  timeout 60 $B --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 256 --reps 3 > /tmp/o/gemma.txt 2>&1; echo "gemma rc=$? $((SECONDS-T))s"; grep -E "^decode" /tmp/o/gemma.txt
  tar czf $OUT/out.tgz -C /tmp o; echo total $((SECONDS-T))s; exit 0 ;;
esac
bash scripts/gpu-build.sh cinfer cuda_bench test_qcuda test_qcuda_ops > /tmp/o/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 /tmp/o/build.txt
. .gpu/env.sh
(cd build-gpu && CINFER_QEXP=8 timeout 90 ctest -R "cuda.quant" --output-on-failure) > /tmp/o/ctest-quant-x8.txt 2>&1; echo "ctest cuda.quant x8 rc=$? $((SECONDS-T))s"; grep -E "tests passed|Failed" /tmp/o/ctest-quant-x8.txt
for x in 0 8; do CINFER_QEXP=$x timeout 60 build-gpu/tests/cuda/cuda_bench --qgemv > /tmp/o/qgemv-x$x.txt 2>&1; echo "qgemv x$x rc=$? $((SECONDS-T))s"; grep -E "\| 1 \||\| 64 \|" /tmp/o/qgemv-x$x.txt; done
python3 -c "
import json; d=json.load(open('bench/configs/llama-3-8b.json')); d['num_hidden_layers']=4; json.dump(d,open('/tmp/l4.json','w'))"
B="build-gpu/cinfer bench --device cuda"
for q in q4; do for x in 0 8 0 8; do CINFER_QEXP=$x timeout 30 $B --random-weights /tmp/l4.json --quant $q --prompt 128 --gen 256 --reps 3 > /tmp/o/l4-$q-x$x.txt 2>&1; echo "l4 $q x$x: $(grep -E '^decode' /tmp/o/l4-$q-x$x.txt | sed 's/.*one step ahead)://') $((SECONDS-T))s"; done; done
for x in 0 8; do CINFER_QEXP=$x timeout 70 $B --random-weights bench/configs/llama-3-8b.json --quant q4 --prompt 128 --gen 128 --concurrency 64 > /tmp/o/q4c64-x$x.txt 2>&1; echo "q4 c64 x$x: $(grep -E '^ *64 ' /tmp/o/q4c64-x$x.txt | head -1) $((SECONDS-T))s"; done
tar czf $OUT/out.tgz -C /tmp o; echo total $((SECONDS-T))s
