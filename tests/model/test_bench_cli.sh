#!/usr/bin/env bash
# test_bench_cli.sh: `cinfer bench` asked for more positions than the model's context exits 2 with one
# line naming that context (it once read the freed model for it), and a short run within it succeeds;
# --concurrency drives the engine: one JSON run per concurrency, every session's tokens counted, and a bad
# list is a usage error.
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
out=$("$bin" bench --model "$model" --prompt 8 --gen 6 --threads 1 --concurrency 1,3 --json 2>&1); st=$?
runs=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%d:%s:%d" % (r["concurrency"], r["plan"], r["decode_tokens_per_s"] > 0) for r in d["runs"]))' 2>&1)
if [ "$st" != 0 ] || [ "$runs" != "1:text:serial:1 3:text:serial:1" ]; then
  echo "FAIL bench --concurrency 1,3: exit $st, runs '$runs', output: $out"; fails=$((fails+1))
fi
for bad in 0 1,,2 -1 2000 x; do
  "$bin" bench --model "$model" --concurrency "$bad" >/dev/null 2>&1; st=$?
  [ "$st" = 2 ] || { echo "FAIL bench --concurrency '$bad': exit $st (want 2)"; fails=$((fails+1)); }
done
[ "$fails" = 0 ] && echo "bench CLI: ok"
exit $((fails != 0))
