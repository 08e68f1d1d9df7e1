# H200: target set part A; otherwise: attn_decode_kernel pre-wait experiment (CINFER_QEXP 0 main / 1 new loads / 2 + pre-wait)
set -u
T=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
case "$name" in *H200*) bash .gpu/s17.sh A; exit 0 ;; esac
exec > >(tee $OUT/log.txt) 2>&1
bash scripts/gpu-build.sh cinfer cupti_trace test_cuda_ops > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
for x in 2 1; do CINFER_QEXP=$x timeout 120 build-gpu/tests/cuda/test_cuda_ops > $OUT/ops-$x.txt 2>&1; echo "test_cuda_ops qexp=$x rc=$? $((SECONDS-T))s"; tail -2 $OUT/ops-$x.txt; done
CINFER_QEXP2=1 CINFER_ATTN_GROUP_SPLITS=8 timeout 120 build-gpu/tests/cuda/test_cuda_ops > $OUT/ops-cl.txt 2>&1; echo "test_cuda_ops group cluster rc=$? $((SECONDS-T))s"; tail -2 $OUT/ops-cl.txt
B="build-gpu/cinfer bench --device cuda"
g=tests/gemma/gemma4-e4b.json; l4=bench/configs/llama-3-8b-4layers.json
for r in 1 2; do for x in 0 1 2; do
  CINFER_QEXP=$x timeout 40 $B --random-weights $g --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/gemma qexp=$x r=$r /" | cut -c1-175
done; echo "round $r $((SECONDS-T))s"; done
for s in 16 8 4; do CINFER_QEXP=2 CINFER_ATTN_GROUP_SPLITS=$s timeout 40 $B --random-weights $g --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/gemma qexp=2 splits=$s /" | cut -c1-175; done
for s in 64 8 4; do for c in 0 1; do CINFER_QEXP2=$c CINFER_ATTN_GROUP_SPLITS=$s timeout 40 $B --random-weights $l4 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/l4q4 splits=$s cluster=$c /" | cut -c1-175; done; done
echo "benches $((SECONDS-T))s"
for x in 0 2; do
  CINFER_QEXP=$x CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=/tmp/g$x.tsv timeout 40 $B --random-weights $g --prompt 128 --gen 64 --reps 1 > /dev/null 2>&1
  python3 tools/trace/summarize.py /tmp/g$x.tsv 16 embed > $OUT/gemma-step-$x.txt 2>&1; echo "trace gemma qexp=$x $((SECONDS-T))s"; sed -n 1,13p $OUT/gemma-step-$x.txt | cut -c1-130
done
echo total $((SECONDS-T))s
