# op prefetch A/B (CINFER_L2_PREFETCH 0 off / 1 on; CINFER_PF_HINTS 1 after attention, 2 + next q/k/v before Gemma's PLE
# block, 3 + next q/k/v after every FFN); on an H200 also the target set's engine/gemma/spec figures without prefetch;
# then the GPU suite with prefetch on (hints 2)
set -u
T=$SECONDS
exec > >(tee $OUT/log.txt) 2>&1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"
bash scripts/gpu-build.sh > $OUT/build.txt 2>&1; echo "build rc=$? $((SECONDS-T))s"; tail -1 $OUT/build.txt
. .gpu/env.sh
B="build-gpu/cinfer bench --device cuda"
g=tests/gemma/gemma4-e4b.json; l4=bench/configs/llama-3-8b-4layers.json
d() { grep -E '^decode' | sed "s/^/$1 /" | sed -E 's/decode +256 tokens \(argmax on the device, step replayed as a graph, one step ahead\)://' | cut -c1-150; }
for v in "0 1" "1 1" "1 2" "1 3" "0 1"; do set -- $v
  CINFER_L2_PREFETCH=$1 CINFER_PF_HINTS=$2 timeout 40 $B --random-weights $g --prompt 128 --gen 256 --reps 2 2>&1 | d "gemma pf=$1 h=$2" | tee -a $OUT/gemma-ab.txt
done
gain=$(python3 -c "
import re; r={}
for l in open('$OUT/gemma-ab.txt'):
    m=re.match(r'gemma pf=(\d) h=(\d)\s+([\d.]+)', l)
    if m: r.setdefault((m[1],m[2]),[]).append(float(m[3]))
base=max(r.get(('0','1'),[1e9])); best=max([max(v) for k,v in r.items() if k[0]=='1'] or [0])
print(1 if best > base*1.005 else 0)")
echo "prefetch gains on gemma: $gain"
for v in "0 1" "1 1" "1 3"; do set -- $v
  CINFER_L2_PREFETCH=$1 CINFER_PF_HINTS=$2 timeout 40 $B --random-weights $l4 --quant q4 --prompt 128 --gen 256 --reps 2 2>&1 | d "l4q4 pf=$1 h=$2"
  CINFER_L2_PREFETCH=$1 CINFER_PF_HINTS=$2 timeout 40 $B --random-weights $l4 --prompt 128 --gen 256 --reps 2 2>&1 | d "l4bf16 pf=$1 h=$2"
done
echo "ab $((SECONDS-T))s"
case "$name" in *H200*) CINFER_L2_PREFETCH=0 bash bench/gpu_targets.sh $OUT/t engine gemma spec; echo "targets $((SECONDS-T))s" ;; esac
[ "$gain" = 1 ] && (cd build-gpu && CINFER_PF_HINTS=2 timeout 220 ctest -L 'cuda|quant' --output-on-failure --timeout 120) > $OUT/ctest.txt 2>&1; echo "ctest rc=$? $((SECONDS-T))s"
grep -E "tests passed|Failed|\*\*\*" $OUT/ctest.txt | tail -10
echo total $((SECONDS-T))s
