# where a q4 (and bf16) Llama-3-8B decode step goes on this card: CUPTI traces, plus the one-row qgemv table
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1
bash scripts/gpu-build.sh cinfer cupti_trace cuda_bench > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -2 $OUT/build.txt
. .gpu/env.sh
cfg=bench/configs/llama-3-8b.json
for q in q4 q8 bf16; do
  qa="--quant $q"; [ $q = bf16 ] && qa=""
  timeout 60 build-gpu/cinfer bench --device cuda --random-weights $cfg $qa --prompt 128 --gen 256 --reps 2 2>&1 | grep -E '^decode' | sed "s/^/$q /" | cut -c1-170
  CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=/tmp/t-$q.tsv timeout 60 build-gpu/cinfer bench --device cuda --random-weights $cfg $qa --prompt 128 --gen 64 --reps 1 > /dev/null 2>&1
  python3 tools/trace/summarize.py /tmp/t-$q.tsv 16 embed > $OUT/step-$q.txt 2>&1; echo "trace $q $((SECONDS-T))s"; sed -n 1,16p $OUT/step-$q.txt | cut -c1-130
done
timeout 120 build-gpu/tests/cuda/cuda_bench --qgemv > $OUT/qgemv.txt 2>&1; echo "qgemv rc=$? $((SECONDS-T))s"
echo total $((SECONDS-T))s
