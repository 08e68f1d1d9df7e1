#!/usr/bin/env bash
# test_bench_cli.sh: `cinfer bench` asked for more positions than the model's context exits 2 with one
# line naming that context (it once read the freed model for it), and a short run within it succeeds;
# --concurrency drives the engine: one JSON run per concurrency, every session's tokens counted, the rate while all
# sessions decode reported, and a bad list is a usage error; --requests streams requests through the clients.
# usage: test_bench_cli.sh CINFER_BIN MODEL_DIR (a model whose context is 256)
set -u
bin=$1
model=$2
fails=0
err=$("$bin" bench --model "$model" --prompt 300 --gen 4 --reps 1 --threads 1 2>&1 >/dev/null); st=$?
if [ "$st" != 2 ] || [ "$(printf '%s\n' "$err" | wc -l)" != 1 ] || ! printf '%s' "$err" | grep -q "context of 256"; then
  echo "FAIL bench --prompt 300 on a context of 256: exit $st, stderr: $err"; fails=$((fails+1))
fi
out=$("$bin" bench --model "$model" --prompt 8 --gen 4 --reps 3 --threads 1 --json 2>&1); st=$?
if [ "$st" != 0 ] || ! printf '%s' "$out" | grep -q '"prompt_tokens":8'; then
  echo "FAIL bench --prompt 8: exit $st, output: $out"; fails=$((fails+1))
fi
# the roofline fraction (on the CPU the median of the reps' own, each against the read passes around it) and the
# bandwidth are finite and positive
ok=$(printf '%s' "$out" | python3 -c 'import json,math,sys; d=json.load(sys.stdin); f=d["roofline_fraction"]; b=d["bandwidth_gb_s"]; print(int(math.isfinite(f) and f > 0 and math.isfinite(b) and b > 0 and d["bandwidth_kind"] == "read"))' 2>&1)
[ "$ok" = 1 ] || { echo "FAIL bench --prompt 8: roofline fraction or bandwidth: $ok, output: $out"; fails=$((fails+1)); }
# the overlap checks run random weights of a model (tests/model/llama-8m.json) whose steps take about 20 times the
# fixture's ~25 us: on the fixture a loaded CI run decoded a whole session of 128 tokens before the bench's thread had
# opened the next, so the sessions never decoded together (a much larger model, tried first, slowed the tests that
# ran beside it too much)
mid=$(cd "$(dirname "$0")" && pwd)/llama-8m.json
out=$("$bin" bench --random-weights "$mid" --prompt 8 --gen 128 --threads 1 --concurrency 1,3 --json 2>&1); st=$?
# the rate while all sessions decode: one session's is its decode rate; three sessions' decoding overlaps (their
# prompts fit one step)
runs=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%d:%s:%d:%d" % (r["concurrency"], r["plan"], r["decode_tokens_per_s"] > 0, r["all_decoding_tokens_per_s"] > 0 and (r["concurrency"] > 1 or r["all_decoding_tokens_per_s"] == r["decode_tokens_per_s"])) for r in d["runs"]))' 2>&1)
if [ "$st" != 0 ] || [ "$runs" != "1:text:continuous:1:1 3:text:continuous:1:1" ]; then
  echo "FAIL bench --concurrency 1,3: exit $st, runs '$runs', output: $out"; fails=$((fails+1))
fi
for bad in 0 1,,2 -1 2000 x; do
  "$bin" bench --model "$model" --concurrency "$bad" >/dev/null 2>&1; st=$?
  [ "$st" = 2 ] || { echo "FAIL bench --concurrency '$bad': exit $st (want 2)"; fails=$((fails+1)); }
done
# engine parameters: --max-batch 2 runs 3 sessions, two at a time, in a KV memory of 1 MiB
out=$("$bin" bench --model "$model" --threads 1 --prompt 8 --gen 4 --concurrency 3 --max-batch 2 --kv-memory 1 --json 2>&1); st=$?
if [ "$st" != 0 ] || ! printf '%s' "$out" | grep -q '"concurrency":3,"requests":3,"plan":"text:continuous"'; then
  echo "FAIL bench --concurrency 3 --max-batch 2 --kv-memory 1: exit $st: $out"; fails=$((fails+1))
fi
err=$("$bin" bench --model "$model" --threads 1 --max-batch 2 2>&1 >/dev/null); st=$?
if [ "$st" != 2 ] || ! printf '%s' "$err" | grep -q "go with --concurrency"; then
  echo "FAIL --max-batch without --concurrency: exit $st: $err"; fails=$((fails+1))
fi

# a stream of requests (--requests): each run reports them, and while both clients have a request running (they
# take turns opening the next of 6) the steady rate is measured
out=$("$bin" bench --random-weights "$mid" --prompt 8 --gen 32 --threads 1 --concurrency 2 --requests 6 --json 2>&1); st=$?
runs=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%d:%d:%d:%d" % (r["concurrency"], r["requests"], r["decode_tokens_per_s"] > 0, r["all_decoding_tokens_per_s"] > 0) for r in d["runs"]))' 2>&1)
if [ "$st" != 0 ] || [ "$runs" != "2:6:1:1" ]; then
  echo "FAIL bench --concurrency 2 --requests 6: exit $st, runs '$runs', output: $out"; fails=$((fails+1))
fi
for args in "--requests 4" "--concurrency 2,8 --requests 4" "--concurrency 2 --requests 0"; do
  "$bin" bench --model "$model" $args >/dev/null 2>&1; st=$?
  [ "$st" = 2 ] || { echo "FAIL bench $args: exit $st (want 2)"; fails=$((fails+1)); }
done
# a model whose weights hold NaN: greedy `run` and `bench` fail at run time (exit 1) naming the non-finite
# logits, instead of emitting token 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -rL "$model" "$tmp/nan"
python3 - "$tmp/nan/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for name, t in h.items():
    if name != "__metadata__" and t["dtype"] == "F32" and "norm" in name:
        s, e = t["data_offsets"]
        b[8 + n + s:8 + n + e] = struct.pack("<f", float("nan")) * ((e - s) // 4)
open(p, "wb").write(b)
PY
for args in "run --prompt-ids 1,2,3 --max-tokens 3 --temperature 0 --output ids" "bench --prompt 4 --gen 2 --reps 1"; do
  err=$("$bin" $args --model "$tmp/nan" --threads 1 2>&1 >/dev/null); st=$?
  if [ "$st" != 1 ] || ! printf '%s' "$err" | grep -q "non-finite"; then
    echo "FAIL $args on NaN weights: exit $st (want 1), stderr: $err"; fails=$((fails+1))
  fi
done
[ "$fails" = 0 ] && echo "bench CLI: ok"
exit $((fails != 0))
