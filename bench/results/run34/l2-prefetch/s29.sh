# op prefetch (CINFER_L2_PREFETCH 0 off / 1 bulk / 2 per line): tests, then decode A/B alternated, traces
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/gpu-build.sh cinfer cupti_trace test_cuda_ops test_cuda_model > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
for x in 1 2; do CINFER_L2_PREFETCH=$x timeout 100 build-gpu/tests/cuda/test_cuda_model > $OUT/model-$x.txt 2>&1; echo "test_cuda_model pf=$x rc=$? $((SECONDS-T))s"; tail -2 $OUT/model-$x.txt; done
B="build-gpu/cinfer bench --device cuda"
g=tests/gemma/gemma4-e4b.json; l4=bench/configs/llama-3-8b-4layers.json
for r in 1 2; do for x in 0 1 2; do
  CINFER_L2_PREFETCH=$x timeout 40 $B --random-weights $g --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/gemma pf=$x r=$r /" | cut -c1-175
  CINFER_L2_PREFETCH=$x timeout 40 $B --random-weights $l4 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/l4q4 pf=$x r=$r /" | cut -c1-175
  CINFER_L2_PREFETCH=$x timeout 40 $B --random-weights $l4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/l4bf16 pf=$x r=$r /" | cut -c1-175
done; echo "round $r $((SECONDS-T))s"; done
for x in 0 1; do
  CINFER_L2_PREFETCH=$x CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=/tmp/g$x.tsv timeout 40 $B --random-weights $g --prompt 128 --gen 64 --reps 1 > /dev/null 2>&1
  python3 tools/trace/summarize.py /tmp/g$x.tsv 16 embed > $OUT/gemma-step-$x.txt 2>&1; echo "trace gemma pf=$x $((SECONDS-T))s"; sed -n 1,13p $OUT/gemma-step-$x.txt | cut -c1-130
  CINFER_L2_PREFETCH=$x CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=/tmp/q$x.tsv timeout 40 $B --random-weights $l4 --quant q4 --prompt 128 --gen 64 --reps 1 > /dev/null 2>&1
  python3 tools/trace/summarize.py /tmp/q$x.tsv 16 embed > $OUT/l4q4-step-$x.txt 2>&1; echo "trace l4q4 pf=$x $((SECONDS-T))s"; sed -n 1,13p $OUT/l4q4-step-$x.txt | cut -c1-130
done
for x in 1 0; do CINFER_L2_PREFETCH=$x timeout 100 $B --random-weights bench/configs/llama-3-8b.json --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/8b-q4 pf=$x /" | cut -c1-175; echo "$((SECONDS-T))s"; done
echo total $((SECONDS-T))s
