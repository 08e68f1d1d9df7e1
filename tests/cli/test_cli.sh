#!/usr/bin/env bash
# test_cli.sh: the CLI contract: --help on every verb exits 0; bad flags and values exit 2 with a
# one-line reason on stderr and nothing on stdout; run --output ids prints one line of ids; bench names its
# decode path and pass length.
# usage: test_cli.sh CINFER_BIN MODEL_DIR (MODEL_DIR may be empty: model-dependent checks are skipped)
set -u
bin=$1
model=${2:-}
fails=0
pass=0
check() { # name expected_status cmd...
  local name=$1 want=$2; shift 2
  local out err st
  out=$("$@" 2>/tmp/cinfer-cli-err.$$); st=$?
  err=$(cat /tmp/cinfer-cli-err.$$)
  if [ "$st" != "$want" ]; then
    echo "FAIL $name: exit $st, want $want; stderr: $err"; fails=$((fails+1)); return
  fi
  if [ "$want" = 2 ]; then
    if [ -n "$out" ] || [ "$(printf '%s\n' "$err" | wc -l)" != 1 ] || [ -z "$err" ]; then
      echo "FAIL $name: want one line on stderr and nothing on stdout; got stdout='$out' stderr='$err'"; fails=$((fails+1)); return
    fi
  fi
  pass=$((pass+1))
}
verbs=$("$bin" --help | awk '/^verbs:/{f=1;next} f && NF {print $1}')
[ -n "$verbs" ] || { echo "FAIL: cinfer --help lists no verbs"; exit 1; }
for v in $verbs; do check "$v --help" 0 "$bin" "$v" --help; check "$v bogus flag" 2 "$bin" "$v" --no-such-flag; done
check "no verb" 2 "$bin"
check "unknown verb" 2 "$bin" frobnicate
if [ -n "$model" ]; then
  check "run bad max-tokens" 2 "$bin" run --model "$model" --prompt-ids 1,2 --max-tokens abc
  check "run zero max-tokens" 2 "$bin" run --model "$model" --prompt-ids 1,2 --max-tokens 0
  check "run bad ids" 2 "$bin" run --model "$model" --prompt-ids 1,x,2
  check "run negative temperature" 2 "$bin" run --model "$model" --prompt-ids 1 --temperature -1
  check "run missing value" 2 "$bin" run --model "$model" --prompt-ids
  check "run bad device" 2 "$bin" run --model "$model" --prompt-ids 1 --device tpu
  check "run bad output" 2 "$bin" run --model "$model" --prompt-ids 1 --output xml
  check "logits no out" 2 "$bin" logits --model "$model" --prompt-ids 1,2
  check "run missing model" 1 "$bin" run --model /nonexistent/model --prompt-ids 1 --output ids
  check "run id out of range" 2 "$bin" run --model "$model" --prompt-ids 1,99999999 --output ids
  out=$("$bin" run --model "$model" --prompt-ids 5,17,30 --max-tokens 7 --temperature 0 --ignore-eos --output ids)
  if [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && [ "$(echo $out | wc -w)" = 7 ] && [[ "$out" =~ ^[0-9\ ]+$ ]]; then pass=$((pass+1)); else echo "FAIL run --output ids printed '$out'"; fails=$((fails+1)); fi
  tmp=$(mktemp)
  if "$bin" logits --model "$model" --prompt-ids 5,17,30 --out "$tmp" && [ $(( $(stat -c %s "$tmp") % 12 )) = 0 ] && [ "$(stat -c %s "$tmp")" -gt 0 ]; then pass=$((pass+1)); else echo "FAIL logits file"; fails=$((fails+1)); fi
  rm -f "$tmp"
  if "$bin" info --model "$model" | grep -q "^architecture:"; then pass=$((pass+1)); else echo "FAIL info"; fails=$((fails+1)); fi
  # bench: the decode path (the CPU picks on the device op by op unless told otherwise) and the pass length
  check "bench bad decode" 2 "$bin" bench --model "$model" --decode gpu
  check "bench chunk too big" 2 "$bin" bench --model "$model" --chunk 5000
  b="--model $model --prompt 12 --gen 4 --reps 1 --threads 1 --json"
  out=$("$bin" bench $b)
  if [[ "$out" == *'"decode_path":"device-eager"'* && "$out" == *'"prefill_chunk":12,'* ]]; then pass=$((pass+1)); else echo "FAIL bench default path: $out"; fails=$((fails+1)); fi
  out=$("$bin" bench $b --decode host --chunk 5)
  if [[ "$out" == *'"decode_path":"host"'* && "$out" == *'"prefill_chunk":5,'* ]]; then pass=$((pass+1)); else echo "FAIL bench --decode host: $out"; fails=$((fails+1)); fi
  out=$("$bin" bench ${b% --json} --decode device)
  if [[ "$out" == *"decode       4 tokens (argmax on the device, op by op)"* && "$out" == *"12 tokens in passes of 12"* ]]; then pass=$((pass+1)); else echo "FAIL bench text: $out"; fails=$((fails+1)); fi
fi
rm -f /tmp/cinfer-cli-err.$$
echo "$pass passed, $fails failed"
[ "$fails" = 0 ]
