# experiment: attn_decode2 (CINFER_ATTN_EXP=1) against attn_decode; tests, Gemma-4-E4B decode alternated, traces
set -u
T=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/o
bash scripts/gpu-build.sh cinfer test_cuda_ops cupti_trace > /tmp/o/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -3 /tmp/o/build.txt
. .gpu/env.sh
for x in 0 1; do CINFER_ATTN_EXP=$x timeout 120 build-gpu/tests/cuda/test_cuda_ops > /tmp/o/ops-$x.txt 2>&1; echo "ops exp=$x rc=$? $((SECONDS-T))s"; grep -iE "attention.*(FAIL|fail)|checks|failed" /tmp/o/ops-$x.txt | tail -3; done
for r in 1 2; do for x in 0 1; do CINFER_ATTN_EXP=$x timeout 60 build-gpu/cinfer bench --device cuda --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 256 --reps 2 > /tmp/o/gemma-$x-$r.txt 2>&1; echo "gemma exp=$x r=$r: $(grep -E '^decode' /tmp/o/gemma-$x-$r.txt | cut -c1-150)"; done; done
for x in 0 1; do CINFER_ATTN_EXP=$x CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=/tmp/g$x.tsv timeout 60 build-gpu/cinfer bench --device cuda --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 64 --reps 1 > /tmp/o/trace-$x.txt 2>&1; python3 tools/trace/summarize.py /tmp/g$x.tsv 16 embed > /tmp/o/step-$x.txt 2>&1; echo "trace exp=$x"; sed -n 1,8p /tmp/o/step-$x.txt | cut -c1-130; done
echo total $((SECONDS-T))s
tar czf $OUT/out.tgz -C /tmp o
