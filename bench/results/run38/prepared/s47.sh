# next stop (any card): why q4's prefill of many prompts is slower than bf16's (run38: time to first token p50 366-380
# ms against 257 at 64 x 128 tokens). Prefill alone, q4 against bf16, 512 and 4096 tokens, then nsys's kernel summary
# of one q4 prefill of 4096 tokens (dequantize + cuBLAS above qmma_max_rows rows) beside bf16's.
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/gpu-build.sh cinfer > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"
. .gpu/env.sh
cfg=bench/configs/llama-3-8b.json
for p in 512 4096; do
  for q in q4 bf16; do
    qa=""; [ $q = bf16 ] || qa="--quant $q"
    timeout 100 build-gpu/cinfer bench --device cuda --random-weights $cfg $qa --prompt $p --gen 8 --reps 2 > $OUT/pf$p-$q.txt 2>&1
    echo "pf$p-$q rc=$? $(grep -i prefill $OUT/pf$p-$q.txt | head -2 | tr '\n' ' ')"
  done
done
for q in q4 bf16; do
  qa=""; [ $q = bf16 ] || qa="--quant $q"
  timeout 120 nsys profile -o $OUT/pf-$q --force-overwrite true build-gpu/cinfer bench --device cuda --random-weights $cfg $qa --prompt 4096 --gen 2 --reps 1 > /dev/null 2>&1
  nsys stats --report cuda_gpu_kern_sum --format csv $OUT/pf-$q.nsys-rep > $OUT/pf-$q-kern.csv 2>/dev/null; rm -f $OUT/pf-$q.nsys-rep $OUT/pf-$q.sqlite
  head -15 $OUT/pf-$q-kern.csv | cut -c1-200
done
echo "done $((SECONDS-T))s"
