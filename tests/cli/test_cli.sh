#!/usr/bin/env bash
# test_cli.sh: the CLI contract: --help on every verb exits 0; usage errors (bad flags and values) exit 2
# with a one-line reason on stderr and nothing on stdout; runtime failures (model, file, device) exit 1
# with a reason on stderr, for every verb; number and id-list flags are parsed strictly; input files are
# regular files of bounded size and outputs never open a FIFO or a directory; run --output ids never
# detokenizes; bench names its decode path and pass length.
# usage: test_cli.sh CINFER_BIN MODEL_DIR (MODEL_DIR may be empty: model-dependent checks are skipped)
set -u
bin=$1
model=${2:-}
fails=0
pass=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { # name expected_status cmd...   (each command gets 20 s: a hang fails as exit 124)
  local name=$1 want=$2; shift 2
  local out err st
  out=$(timeout 20 "$@" 2>"$tmp/err" </dev/null); st=$?
  err=$(cat "$tmp/err")
  if [ "$st" != "$want" ]; then
    echo "FAIL $name: exit $st, want $want; stderr: $err"; fails=$((fails+1)); return
  fi
  if [ "$want" = 2 ]; then
    if [ -n "$out" ] || [ "$(printf '%s\n' "$err" | wc -l)" != 1 ] || [ -z "$err" ]; then
      echo "FAIL $name: want one line on stderr and nothing on stdout; got stdout='$out' stderr='$err'"; fails=$((fails+1)); return
    fi
  fi
  if [ "$want" = 1 ] && [[ "$err" != "cinfer "* ]]; then
    echo "FAIL $name: want a 'cinfer VERB: reason' on stderr, got '$err'"; fails=$((fails+1)); return
  fi
  pass=$((pass+1))
}
verbs=$("$bin" --help | awk '/^verbs:/{f=1;next} f && NF {print $1}')
[ -n "$verbs" ] || { echo "FAIL: cinfer --help lists no verbs"; exit 1; }
for v in $verbs; do check "$v --help" 0 "$bin" "$v" --help; check "$v bogus flag" 2 "$bin" "$v" --no-such-flag; done
check "no verb" 2 "$bin"
check "unknown verb" 2 "$bin" frobnicate

# hostile files: a directory, a FIFO (nothing writes to it: opening it for reading would block), an endless
# device, a sparse file past the input limit
mkdir "$tmp/dir"
mkfifo "$tmp/fifo"
truncate -s 300M "$tmp/huge"
echo '[{"role": "user", "content": "hi"}]' >"$tmp/msgs.json"

if [ -n "$model" ]; then
  nomodel=/nonexistent/model
  # every verb: a usage error exits 2, a runtime failure exits 1
  check "run usage" 2 "$bin" run --model "$model" --prompt-ids 1,2 --max-tokens abc
  check "run no model" 1 "$bin" run --model $nomodel --prompt-ids 1 --output ids
  check "chat usage" 2 "$bin" chat --model "$model" --top-k x
  check "chat no model" 1 "$bin" chat --model $nomodel
  check "logits usage" 2 "$bin" logits --model "$model" --prompt-ids 1,2
  check "logits no model" 1 "$bin" logits --model $nomodel --prompt-ids 1,2 --out "$tmp/l.f32"
  check "info usage" 2 "$bin" info --model "$model" --context 0
  check "info no model" 1 "$bin" info --model $nomodel
  check "bench usage" 2 "$bin" bench --model "$model" --decode gpu
  check "bench no model" 1 "$bin" bench --model $nomodel --prompt 4 --gen 2 --reps 1
  check "tokenize usage" 2 "$bin" tokenize --model "$model"
  check "tokenize no model" 1 "$bin" tokenize --model $nomodel --text hi
  check "detokenize usage" 2 "$bin" detokenize --model "$model"
  check "detokenize no model" 1 "$bin" detokenize --model $nomodel --ids 1
  check "chat-template usage" 2 "$bin" chat-template --model "$model"
  check "chat-template no messages file" 1 "$bin" chat-template --model "$model" --messages "$tmp/none.json"
  mkdir "$tmp/notemplate" && echo '{}' >"$tmp/notemplate/tokenizer_config.json"
  check "chat-template model without a template" 1 "$bin" chat-template --model "$tmp/notemplate" --messages "$tmp/msgs.json"
  check "chat-template no such --template" 2 "$bin" chat-template --model "$model" --messages "$tmp/msgs.json" --template nope

  check "run bad max-tokens" 2 "$bin" run --model "$model" --prompt-ids 1,2 --max-tokens abc
  check "run zero max-tokens" 2 "$bin" run --model "$model" --prompt-ids 1,2 --max-tokens 0
  check "run bad ids" 2 "$bin" run --model "$model" --prompt-ids 1,x,2
  check "run negative temperature" 2 "$bin" run --model "$model" --prompt-ids 1 --temperature -1
  check "run missing value" 2 "$bin" run --model "$model" --prompt-ids
  check "run bad device" 2 "$bin" run --model "$model" --prompt-ids 1 --device tpu
  check "run bad output" 2 "$bin" run --model "$model" --prompt-ids 1 --output xml
  check "logits no out" 2 "$bin" logits --model "$model" --prompt-ids 1,2
  check "run id out of range" 2 "$bin" run --model "$model" --prompt-ids 1,99999999 --output ids

  # one strict id-list parser: the same lists are refused by every verb that takes ids
  for ids in "5,,6" ",5" "5," "+5" "-1" "5 6" " 5" "5, 6" "99999999999" "2147483648" "5x" "0x5" ""; do
    check "run --prompt-ids '$ids'" 2 "$bin" run --model "$model" --prompt-ids "$ids" --output ids --max-tokens 1
    check "detokenize --ids '$ids'" 2 "$bin" detokenize --model "$model" --ids "$ids"
    check "logits --prompt-ids '$ids'" 2 "$bin" logits --model "$model" --prompt-ids "$ids" --out "$tmp/l.f32"
  done
  check "detokenize 5,6" 0 "$bin" detokenize --model "$model" --ids 5,6
  timeout 20 "$bin" detokenize --model "$model" --ids 5,,6 2>"$tmp/err" >/dev/null
  grep -q "empty" "$tmp/err" && pass=$((pass+1)) || { echo "FAIL the message for 5,,6 names the empty item: $(cat "$tmp/err")"; fails=$((fails+1)); }
  # numbers: no leading space or sign where none belongs, no hex, no trailing junk, no overflow, no NaN or inf
  for v in " 3" "+3" "3 " "3x" "0x3" "99999999999999999999" "-3" ""; do
    check "run --max-tokens '$v'" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens "$v"
    check "run --seed '$v'" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --seed "$v"
  done
  for v in nan NaN inf -inf infinity 1e999 -1e999 0.5x " 1" "0x1p-1" "" "." "1e" "--1"; do
    check "run --temperature '$v'" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --temperature "$v"
    check "run --top-p '$v'" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --top-p "$v"
  done
  check "run --repeat-penalty -1" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --repeat-penalty -1
  check "run --top-p 1.5" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --top-p 1.5
  check "run --logprobs 21" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --logprobs 21
  check "run --threads 0" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --threads 0
  check "run --top-k -1" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --top-k -1
  check "run --temperature 0.5" 0 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --temperature 0.5 --seed 3
  check "run --temperature 1e-3" 0 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --temperature 1e-3 --seed 3
  check "info --context ' 5'" 2 "$bin" info --model "$model" --context " 5"
  check "chat-template --now '+5'" 2 "$bin" chat-template --model "$model" --messages "$tmp/msgs.json" --now +5
  check "bench --prompt 0x10" 2 "$bin" bench --model "$model" --prompt 0x10

  # input files: only regular files, bounded; outputs: never a FIFO or a directory
  check "tokenize --file /dev/zero" 1 "$bin" tokenize --model "$model" --file /dev/zero
  check "tokenize --file a directory" 1 "$bin" tokenize --model "$model" --file "$tmp/dir"
  check "tokenize --file a FIFO" 1 "$bin" tokenize --model "$model" --file "$tmp/fifo"
  check "tokenize --file past the limit" 1 "$bin" tokenize --model "$model" --file "$tmp/huge"
  check "tokenize --jsonl /dev/zero" 1 "$bin" tokenize --model "$model" --jsonl /dev/zero
  check "tokenize --jsonl a directory" 1 "$bin" tokenize --model "$model" --jsonl "$tmp/dir"
  check "tokenize --jsonl a FIFO" 1 "$bin" tokenize --model "$model" --jsonl "$tmp/fifo"
  check "tokenize --jsonl past the limit" 1 "$bin" tokenize --model "$model" --jsonl "$tmp/huge"
  check "chat-template --messages a FIFO" 1 "$bin" chat-template --model "$model" --messages "$tmp/fifo"
  check "chat-template --messages a directory" 1 "$bin" chat-template --model "$model" --messages "$tmp/dir"
  check "chat-template --messages /dev/zero" 1 "$bin" chat-template --model "$model" --messages /dev/zero
  check "chat-template --tools a FIFO" 1 "$bin" chat-template --model "$model" --messages "$tmp/msgs.json" --tools "$tmp/fifo"
  check "chat-template --tools past the limit" 1 "$bin" chat-template --model "$model" --messages "$tmp/msgs.json" --tools "$tmp/huge"
  check "logits --out a directory" 1 "$bin" logits --model "$model" --prompt-ids 5 --out "$tmp/dir"
  check "logits --out a FIFO" 1 "$bin" logits --model "$model" --prompt-ids 5 --out "$tmp/fifo"
  timeout 20 "$bin" tokenize --model "$model" --file /dev/zero 2>"$tmp/err" >/dev/null
  grep -q "regular file" "$tmp/err" && pass=$((pass+1)) || { echo "FAIL the /dev/zero message says why: $(cat "$tmp/err")"; fails=$((fails+1)); }
  printf 'hello' >"$tmp/t.txt"
  check "tokenize --file a regular file" 0 "$bin" tokenize --model "$model" --file "$tmp/t.txt"
  ln -s "$tmp/t.txt" "$tmp/link.txt"
  check "tokenize --file a symlink to a regular file" 0 "$bin" tokenize --model "$model" --file "$tmp/link.txt"

  out=$("$bin" run --model "$model" --prompt-ids 5,17,30 --max-tokens 7 --temperature 0 --ignore-eos --output ids)
  if [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && [ "$(echo $out | wc -w)" = 7 ] && [[ "$out" =~ ^[0-9\ ]+$ ]]; then pass=$((pass+1)); else echo "FAIL run --output ids printed '$out'"; fails=$((fails+1)); fi
  # --output ids never detokenizes: the same run on a copy of the model whose tokenizer lacks the generated
  # ids (a padded vocabulary) prints the same ids
  mkdir "$tmp/padded"
  for f in "$model"/*; do [ "$(basename "$f")" = tokenizer.json ] || ln -s "$(readlink -f "$f")" "$tmp/padded/"; done
  python3 - "$model/tokenizer.json" "$tmp/padded/tokenizer.json" $out <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
drop = {int(i) for i in sys.argv[3:]}
vocab = t['model']['vocab']
gone = {tok for tok, i in vocab.items() if i in drop}
t['model']['vocab'] = {tok: i for tok, i in vocab.items() if i not in drop}
t['added_tokens'] = [a for a in t['added_tokens'] if a['id'] not in drop]
pair = lambda m: m.split(' ') if isinstance(m, str) else m
t['model']['merges'] = [m for m in t['model']['merges'] if not (set(pair(m)) & gone or ''.join(pair(m)) in gone)]
json.dump(t, open(sys.argv[2], 'w'))
PY
  got=$("$bin" run --model "$tmp/padded" --prompt-ids 5,17,30 --max-tokens 7 --temperature 0 --ignore-eos --output ids 2>"$tmp/err")
  if [ "$got" = "$out" ]; then pass=$((pass+1)); else echo "FAIL run --output ids on a padded vocabulary printed '$got': $(cat "$tmp/err")"; fails=$((fails+1)); fi
  check "run --output ids with --stop" 2 "$bin" run --model "$model" --prompt-ids 5 --max-tokens 1 --output ids --stop x

  check "logits to a regular file" 0 "$bin" logits --model "$model" --prompt-ids 5,17,30 --out "$tmp/l.f32"
  if [ $(( $(stat -c %s "$tmp/l.f32") % 12 )) = 0 ] && [ "$(stat -c %s "$tmp/l.f32")" -gt 0 ]; then pass=$((pass+1)); else echo "FAIL logits file"; fails=$((fails+1)); fi
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
  # speculative decoding: flags, and the same output with and without drafts
  check "run --spec bogus" 2 "$bin" run --model "$model" --prompt-ids 5 --spec medusa
  check "run --draft-max 0" 2 "$bin" run --model "$model" --prompt-ids 5 --spec ngram --draft-max 0
  check "run --spec draft without a draft model" 2 "$bin" run --model "$model" --prompt-ids 5 --spec draft
  check "bench --spec bogus" 2 "$bin" bench --model "$model" --spec medusa
  check "bench --draft-max without --spec" 2 "$bin" bench --model "$model" --draft-max 4
  check "bench --spec oracle with --concurrency" 2 "$bin" bench --model "$model" --spec oracle --concurrency 1
  check "bench --spec draft without a draft model" 2 "$bin" bench --model "$model" --spec draft
  check "bench --draft-model without --spec draft" 2 "$bin" bench --model "$model" --spec ngram --draft-model "$model"
  plain=$("$bin" run --model "$model" --prompt-ids 5,6,7,5,6,7,5,6 --max-tokens 24 --output ids --ignore-eos 2>/dev/null)
  spec=$("$bin" run --model "$model" --prompt-ids 5,6,7,5,6,7,5,6 --max-tokens 24 --output ids --ignore-eos --spec ngram --draft-max 3 2>/dev/null)
  if [ -n "$plain" ] && [ "$plain" = "$spec" ]; then pass=$((pass+1)); else echo "FAIL run --spec ngram: '$spec' vs plain '$plain'"; fails=$((fails+1)); fi
  out=$("$bin" bench --model "$model" --prompt 12 --gen 6 --reps 1 --threads 1 --spec ngram 2>&1)
  if [[ "$out" == *"ngram tok/s"* && "$out" == *"copy-heavy"* ]]; then pass=$((pass+1)); else echo "FAIL bench --spec ngram: $out"; fails=$((fails+1)); fi
  # the embedded model with its draft (the default pairing): drafts proposed on the open-ended prompt, and the
  # speculative output the plain one (the bench fails otherwise on the CPU)
  out=$("$bin" bench --prompt 12 --gen 24 --reps 1 --threads 1 --spec draft --draft-max 4 2>&1); st=$?
  drafted=$(printf '%s\n' "$out" | awk '/^open-ended \(/ {print $(NF-2)}')
  if [ "$st" = 0 ] && [[ "$out" == *"cinfer-tiny-draft"* && "$out" == *"draft tok/s"* ]] && [ "${drafted:-0}" -gt 0 ]; then pass=$((pass+1)); else echo "FAIL bench --spec draft: exit $st: $out"; fails=$((fails+1)); fi
  out=$("$bin" bench --model "$model" --prompt 12 --gen 6 --reps 1 --threads 1 --spec oracle --draft-max 2 2>&1)
  if [[ "$out" == *"oracle tok/s"* && "$out" == *"cost vs plain"* ]]; then pass=$((pass+1)); else echo "FAIL bench --spec oracle: $out"; fails=$((fails+1)); fi
fi
echo "$pass passed, $fails failed"
[ "$fails" = 0 ]
