#!/usr/bin/env bash
# vs_llamacpp.sh: cinfer against llama.cpp on this machine's CPU, side by side: the same model shape
# (a bench/configs/ file), random weights in each engine's format, both engines run alternately round by round
# so that drift of a shared machine hits both; medians reported, then each round's pair.
#
#   bench/vs_llamacpp.sh LLAMA_CPP_SRC [--config bench/configs/llama-3.2-1b.json] [--threads N] [--rounds N]
#                        [--types bf16,q8,q4] [--prompt 128] [--gen 64] [--depth 1024]
#
# LLAMA_CPP_SRC: a llama.cpp source tree (issue 22 used upstream master 81ff7abe5). It is built once, CPU only,
# into $CACHE/llama.cpp-build (CACHE defaults to ~/.cache/cinfer-bench), with llama-bench and llama-quantize;
# the GGUFs (tools/gguf_random.py, then llama-quantize to BF16, Q8_0 and Q4_0) are kept there too.
# cinfer's side: build/cinfer bench --random-weights CONFIG [--quant q8|q4]: bf16 pairs with llama.cpp BF16,
# q8 (MLX affine 8-bit, group 64) with Q8_0, q4 (4-bit, group 64) with Q4_0.
# Needs python3 with numpy (Debian: python3-numpy) for the GGUF writer.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,14p "$0"; exit 2; }
src=$(cd "$1" && pwd); shift
config=bench/configs/llama-3.2-1b.json threads=$(nproc) rounds=5 types=bf16,q8,q4 prompt=128 gen=64 depth=1024
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=$2 ;; --threads) threads=$2 ;; --rounds) rounds=$2 ;; --types) types=$2 ;;
    --prompt) prompt=$2 ;; --gen) gen=$2 ;; --depth) depth=$2 ;;
    *) echo "vs_llamacpp: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
cache=${CACHE:-$HOME/.cache/cinfer-bench}
bld=$cache/llama.cpp-build
py=python3
$py -c "import numpy" 2>/dev/null || py=/usr/bin/python3
$py -c "import numpy" 2>/dev/null || { echo "vs_llamacpp: python3 needs numpy (apt-get install python3-numpy)" >&2; exit 1; }
[ -x build/cinfer ] || { echo "vs_llamacpp: build cinfer first (make build)" >&2; exit 1; }

if [ ! -x "$bld/bin/llama-bench" ] || [ ! -x "$bld/bin/llama-quantize" ]; then
  echo "building llama.cpp from $src into $bld (CPU only; several minutes)" >&2
  cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CUDA=OFF >/dev/null
  cmake --build "$bld" -j "$(nproc)" --target llama-bench llama-quantize >/dev/null
fi

name=$(basename "$config" .json)
f16=$cache/$name-f16.gguf
if [ ! -f "$f16" ]; then
  echo "writing $f16" >&2
  PYTHONPATH=$src/gguf-py $py tools/gguf_random.py "$config" "$f16.tmp" && mv "$f16.tmp" "$f16"
fi
gguf_of() {  # bf16|q8|q4 -> the GGUF of llama.cpp's matching type
  local t=${1/bf16/BF16}; t=${t/q8/Q8_0}; t=${t/q4/Q4_0}
  local f=$cache/$name-$t.gguf
  [ -f "$f" ] || "$bld/bin/llama-quantize" "$f16" "$f" "$t" "$threads" >/dev/null 2>&1
  echo "$f"
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
IFS=, read -ra tlist <<< "$types"
for r in $(seq 1 "$rounds"); do
  for t in "${tlist[@]}"; do
    g=$(gguf_of "$t")
    q=(); [ "$t" = bf16 ] || q=(--quant "$t")
    echo "round $r/$rounds: $t" >&2
    # decode after the prompt, prefill of the prompt; then decode after $depth tokens
    "$bld/bin/llama-bench" -m "$g" -t "$threads" -p "$prompt" -n "$gen" -r 1 -o jsonl >> "$out/llama-$t.jsonl" 2>/dev/null
    "$bld/bin/llama-bench" -m "$g" -t "$threads" -p 0 -n "$gen" -d "$depth" -r 1 -o jsonl >> "$out/llama-$t-depth.jsonl" 2>/dev/null
    build/cinfer bench --random-weights "$config" "${q[@]}" --threads "$threads" --prompt "$prompt" --gen "$gen" --reps 1 --json \
      >> "$out/cinfer-$t.jsonl" 2>/dev/null
    build/cinfer bench --random-weights "$config" "${q[@]}" --threads "$threads" --prompt "$depth" --gen "$gen" --reps 1 --json \
      >> "$out/cinfer-$t-depth.jsonl" 2>/dev/null
  done
done

$py - "$out" "$types" "$threads" "$rounds" "$config" "$prompt" "$gen" "$depth" <<'PY'
import json, statistics, sys
d, types, threads, rounds, config, prompt, gen, depth = sys.argv[1:]
def rows(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []
def med(v):
    return statistics.median(v) if v else float("nan")
print(f"{config}, {threads} threads, {rounds} rounds alternating, medians (tokens/s); prompt {prompt}, generated {gen}")
print()
print("| type | cinfer decode | llama.cpp decode | ratio | cinfer prefill | llama.cpp prefill | ratio | "
      f"cinfer decode after {depth} | llama.cpp decode after {depth} | ratio | cinfer roofline fraction | bandwidth GB/s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in types.split(","):
    c, cd = rows(f"{d}/cinfer-{t}.jsonl"), rows(f"{d}/cinfer-{t}-depth.jsonl")
    l, ld = rows(f"{d}/llama-{t}.jsonl"), rows(f"{d}/llama-{t}-depth.jsonl")
    cdec, cpre = med([x["decode_tokens_per_s"] for x in c]), med([x["prefill_tokens_per_s"] for x in c])
    cdep = med([x["decode_tokens_per_s"] for x in cd])
    ldec = med([x["avg_ts"] for x in l if x["n_gen"] > 0])
    lpre = med([x["avg_ts"] for x in l if x["n_prompt"] > 0 and x["n_gen"] == 0])
    ldep = med([x["avg_ts"] for x in ld if x["n_gen"] > 0])
    roof, bw = med([x["roofline_fraction"] for x in c]), med([x["bandwidth_gb_s"] for x in c])
    print(f"| {t} | {cdec:.1f} | {ldec:.1f} | {cdec/ldec:.2f} | {cpre:.1f} | {lpre:.1f} | {cpre/lpre:.2f} | {cdep:.1f} | {ldep:.1f} | "
          f"{cdep/ldep:.2f} | {roof:.1%} | {bw:.1f} |")
# Each round's pair, in order: on a shared machine the spread says how far to trust the medians.
print()
print(f"each round, cinfer / llama.cpp (tokens/s), in the order run:")
print()
print(f"| type | decode | prefill | decode after {depth} |")
print("|---|---|---|---|")
for t in types.split(","):
    c, cd = rows(f"{d}/cinfer-{t}.jsonl"), rows(f"{d}/cinfer-{t}-depth.jsonl")
    l, ld = rows(f"{d}/llama-{t}.jsonl"), rows(f"{d}/llama-{t}-depth.jsonl")
    pairs = lambda a, b: ", ".join(f"{x:.1f} / {y:.1f}" for x, y in zip(a, b))
    print(f"| {t} | {pairs([x['decode_tokens_per_s'] for x in c], [x['avg_ts'] for x in l if x['n_gen'] > 0])} | "
          f"{pairs([x['prefill_tokens_per_s'] for x in c], [x['avg_ts'] for x in l if x['n_prompt'] > 0 and x['n_gen'] == 0])} | "
          f"{pairs([x['decode_tokens_per_s'] for x in cd], [x['avg_ts'] for x in ld if x['n_gen'] > 0])} |")
PY
