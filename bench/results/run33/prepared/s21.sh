# experiment (short): attn_decode2 (CINFER_ATTN_EXP=1) against attn_decode: tests both ways, Gemma decode alternated, one trace each
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/gpu-build.sh cinfer test_cuda_ops cupti_trace > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -3 $OUT/build.txt
. .gpu/env.sh
for x in 0 1; do CINFER_ATTN_EXP=$x timeout 90 build-gpu/tests/cuda/test_cuda_ops > $OUT/ops-$x.txt 2>&1; echo "ops exp=$x rc=$? $((SECONDS-T))s"; grep -iE "fail|checks" $OUT/ops-$x.txt | tail -4; done
for r in 1 2; do for x in 0 1; do CINFER_ATTN_EXP=$x timeout 40 build-gpu/cinfer bench --device cuda --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/exp=$x r=$r /" | cut -c1-160; done; done
for x in 0 1; do CINFER_ATTN_EXP=$x CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=/tmp/g$x.tsv timeout 40 build-gpu/cinfer bench --device cuda --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 64 --reps 1 > /dev/null 2>&1; python3 tools/trace/summarize.py /tmp/g$x.tsv 16 embed > $OUT/step-$x.txt 2>&1; echo "trace exp=$x $((SECONDS-T))s"; sed -n 1,9p $OUT/step-$x.txt | cut -c1-130; done
echo total $((SECONDS-T))s
