# next stop, first call (any card), after `git apply` of the two diffs here (qdequant-16-byte-loads.diff,
# glu-16-byte-kernel.diff): the long-prefill path (even 128-row dequantized blocks, committed; a 16-byte-load
# dequantizer; a vectorized GLU) through cuda.ops / cuda.quant_ops / cuda.quant, prefill of 4096 q4 vs bf16
# alternated twice, a CUPTI kernel sum of each, prefill of 512 q4 on either path, then c64 q4 and bf16. Copy it to .gpu/
# with ../prefill-trace/kern_sum.py; carry [".gpu"].
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/gpu-build.sh cinfer cupti_trace test_cuda_ops test_qcuda_ops test_qcuda > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -1 $OUT/build.txt
. .gpu/env.sh
timeout 90 build-gpu/tests/cuda/test_cuda_ops > $OUT/cuda_ops.txt 2>&1; echo "cuda.ops rc=$? $((SECONDS-T))s"; grep -E "FAIL|checks" $OUT/cuda_ops.txt | head
timeout 90 build-gpu/tests/quant/test_qcuda_ops > $OUT/quant_ops.txt 2>&1; echo "cuda.quant_ops rc=$? $((SECONDS-T))s"; grep -E "FAIL|checks" $OUT/quant_ops.txt | head
timeout 60 build-gpu/tests/quant/test_qcuda models/cinfer-tiny /tmp/qcuda-tmp > $OUT/quant.txt 2>&1; echo "cuda.quant rc=$? $((SECONDS-T))s"; tail -1 $OUT/quant.txt
cfg=bench/configs/llama-3-8b.json
for q in q4 bf16 q4 bf16; do
  qa=""; [ $q = bf16 ] || qa="--quant $q"
  timeout 100 build-gpu/cinfer bench --device cuda --random-weights $cfg $qa --prompt 4096 --gen 8 --reps 2 > $OUT/pf-$q.txt 2>&1; echo "pf-$q rc=$? $((SECONDS-T))s $(grep prefill $OUT/pf-$q.txt | head -1)"
done
for q in q4 bf16; do
  qa=""; [ $q = bf16 ] || qa="--quant $q"
  CUDA_INJECTION64_PATH=build-gpu/tools/trace/libcupti_trace.so CUPTI_TRACE_OUT=$OUT/t-$q.tsv timeout 100 build-gpu/cinfer bench --device cuda --random-weights $cfg $qa --prompt 4096 --gen 2 --reps 1 > /dev/null 2>&1
  python3 .gpu/kern_sum.py $OUT/t-$q.tsv | c++filt | cut -c1-150; gzip -f $OUT/t-$q.tsv
done
# prompts of a few hundred tokens: dequantize + cuBLAS (rows > 128) against the tensor-core GEMM on packed tiles
for v in 128 4096; do
  [ $((SECONDS - T)) -lt 420 ] || break
  CINFER_QMMA_MAX_ROWS=$v timeout 100 build-gpu/cinfer bench --device cuda --random-weights $cfg --quant q4 --prompt 512 --gen 8 --reps 2 > $OUT/pf512-q4-$v.txt 2>&1; echo "pf512-q4 qmma_max_rows=$v rc=$? $(grep prefill $OUT/pf512-q4-$v.txt | head -1)"
done
timeout 100 build-gpu/cinfer bench --device cuda --random-weights $cfg --prompt 512 --gen 8 --reps 2 > $OUT/pf512-bf16.txt 2>&1; echo "pf512-bf16 rc=$? $(grep prefill $OUT/pf512-bf16.txt | head -1)"
b() { local name=$1; shift; local t0=$SECONDS
  timeout 90 build-gpu/cinfer bench --device cuda "$@" > $OUT/$name.txt 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -A1 'concurrency plan' $OUT/$name.txt | tail -1)"; }
b c64-q4 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64
b c64-bf16 --random-weights $cfg --prompt 128 --gen 128 --concurrency 64
echo "done $((SECONDS-T))s"
