#!/usr/bin/env bash
# gpu_targets.sh: every GPU figure the open issues set a target for, in one device call (about 5 minutes after
# `bash scripts/gpu-build.sh`), each printed beside its target: the engine at 1-128 sequences and Gemma-4-E4B's decode
# (issue 18), oracle speculation at k = 1-16 (issue 20), q4 and q8 decode of one sequence and q4 against bf16 at 64
# sequences (issue 21). Llama-3-8B shape, random weights. The outputs stay in OUTDIR, one file a run.
# Usage: bash bench/gpu_targets.sh OUTDIR [RUN...]   (RUN: engine gemma spec q4 q8 q4-c64; default all; the
# summary covers every run whose output is in OUTDIR, so two calls can fill one OUTDIR)
set -u
cd "$(dirname "$0")/.."
out=${1:?outdir}
shift
only=" $* "
mkdir -p "$out"
. .gpu/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/device.txt"
cfg=bench/configs/llama-3-8b.json
run() {  # name timeout args...: one cinfer bench run into $out/name.json (or .txt), its status on stderr
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  [ "$only" = "  " ] || [[ $only == *" ${name%.*} "* ]] || return 0
  timeout "$limit" build-gpu/cinfer bench --device cuda "$@" > "$out/$name" 2> "$out/$name.err"
  echo "$name: rc=$? $((SECONDS - t0)) s" >&2
}
run engine.json 120 --random-weights $cfg --prompt 128 --gen 128 --concurrency 1,8,16,32,64,128 --json
run gemma.json 90 --random-weights tests/gemma/gemma4-e4b.json --prompt 128 --gen 256 --reps 3 --json
run spec.txt 120 --spec oracle --random-weights $cfg --prompt 64 --gen 128 --reps 2
run q4.json 150 --random-weights $cfg --quant q4 --prompt 128 --gen 256 --reps 3 --json
run q8.json 150 --random-weights $cfg --quant q8 --prompt 128 --gen 256 --reps 3 --json
run q4-c64.json 150 --random-weights $cfg --quant q4 --prompt 128 --gen 128 --concurrency 64 --json
python3 bench/gpu_targets_summary.py "$out" | tee "$out/summary.txt"
