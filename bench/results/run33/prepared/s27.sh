# attn_decode_kernel's key splits merged in a thread block cluster (CINFER_ATTN_CLUSTER=1) or through global memory (0)
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1
bash scripts/gpu-build.sh cinfer test_cuda_ops cupti_trace > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
for x in 1 0; do CINFER_ATTN_CLUSTER=$x timeout 90 build-gpu/tests/cuda/test_cuda_ops > $OUT/ops-$x.txt 2>&1; echo "ops cluster=$x rc=$? $((SECONDS-T))s"; grep -iE "fail|checks" $OUT/ops-$x.txt | tail -4; done
for r in 1 2; do for x in 1 0; do CINFER_ATTN_CLUSTER=$x timeout 40 build-gpu/cinfer bench --device cuda --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/cluster=$x r=$r /" | cut -c1-170; done; done
for x in 1 0; do CINFER_ATTN_CLUSTER=$x CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=/tmp/g$x.tsv timeout 40 build-gpu/cinfer bench --device cuda --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 64 --reps 1 > /dev/null 2>&1; python3 tools/trace/summarize.py /tmp/g$x.tsv 16 embed > $OUT/step-$x.txt 2>&1; echo "trace cluster=$x $((SECONDS-T))s"; sed -n 1,9p $OUT/step-$x.txt | cut -c1-130; done
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
CINFER_CUDA_DIRECT_ALLOC=1 timeout 150 $cs --tool racecheck --error-exitcode 9 build-gpu/tests/cuda/test_cuda_ops --quick > $OUT/racecheck.txt 2>&1
echo "racecheck rc=$? $((SECONDS-T))s"; grep -E "RACECHECK SUMMARY|checks," $OUT/racecheck.txt | tail -3; grep "Race reported" $OUT/racecheck.txt | grep -vc nvjet_
echo total $((SECONDS-T))s
