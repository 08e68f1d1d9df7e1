#!/usr/bin/env bash
# test_bench_cli.sh: `cinfer bench` asked for more positions than the model's context exits 2 with one
# line naming that context (it once read the freed model for it), and a short run within it succeeds.
# usage: test_bench_cli.sh CINFER_BIN MODEL_DIR (a model whose context is 256)
set -u
bin=$1
model=$2
fails=0
err=$("$bin" bench --model "$model" --prompt 300 --gen 4 --reps 1 --threads 1 2>&1 >/dev/null); st=$?
if [ "$st" != 2 ] || [ "$(printf '%s\n' "$err" | wc -l)" != 1 ] || ! printf '%s' "$err" | grep -q "context of 256"; then
  echo "FAIL bench --prompt 300 on a context of 256: exit $st, stderr: $err"; fails=$((fails+1))
fi
out=$("$bin" bench --model "$model" --prompt 8 --gen 4 --reps 1 --threads 1 --json 2>&1); st=$?
if [ "$st" != 0 ] || ! printf '%s' "$out" | grep -q '"prompt_tokens":8'; then
  echo "FAIL bench --prompt 8: exit $st, output: $out"; fails=$((fails+1))
fi
[ "$fails" = 0 ] && echo "bench CLI: ok"
exit $((fails != 0))
