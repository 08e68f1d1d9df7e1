#!/usr/bin/env bash
# test_cuda_cli.sh: `cinfer run --device cuda` prints the same greedy ids as `--device cpu` for a fixture
# model (32 tokens, EOS ignored). Exit 77 when the CUDA backend finds no GPU.
# Usage: test_cuda_cli.sh CINFER_BIN FIXTURE_DIR
set -u
bin=$1 dir=$2
args=(run --model "$dir" --prompt-ids 1,5,9,13,17,21 --output ids --temperature 0 --ignore-eos --max-tokens 32)
cpu=$("$bin" "${args[@]}" --device cpu) || { echo "FAIL: cpu run failed"; exit 1; }
gpu=$("$bin" "${args[@]}" --device cuda 2>/tmp/cinfer_cuda_cli.$$)
rc=$?
err=$(cat /tmp/cinfer_cuda_cli.$$); rm -f /tmp/cinfer_cuda_cli.$$
if [ $rc -ne 0 ]; then
  case "$err" in *"no usable CUDA device"*|*"no CUDA device"*) echo "SKIP: $err"; exit 77;; esac
  echo "FAIL: cuda run failed: $err"; exit 1
fi
echo "cpu:  $cpu"
echo "cuda: $gpu"
[ "$cpu" = "$gpu" ] && { echo "ok: identical"; exit 0; }
echo "FAIL: greedy ids differ"; exit 1
