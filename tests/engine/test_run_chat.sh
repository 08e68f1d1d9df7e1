#!/usr/bin/env bash
# test_run_chat.sh: `cinfer run` and `cinfer chat` end to end: streamed text, stop strings, --stats and
# --logprobs output, chat replies against run --chat, /reset and /exit, and one-line usage errors.
# usage: test_run_chat.sh CINFER_BIN MODEL_DIR   (the model needs a tokenizer and a chat template)
set -u
bin=$1
model=$2
fails=0
pass=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass+1)); }
bad() { echo "FAIL $*"; fails=$((fails+1)); }
# exact stdout of a command (trailing newlines kept) into $tmp/out, stderr into $tmp/err
capture() { "$@" >"$tmp/out" 2>"$tmp/err"; }
usage_error() { # name cmd...: exit 2, one line on stderr, nothing on stdout
  local name=$1; shift
  "$@" >"$tmp/uo" 2>"$tmp/ue"; local st=$?
  if [ $st = 2 ] && [ ! -s "$tmp/uo" ] && [ "$(wc -l <"$tmp/ue")" = 1 ]; then ok; else bad "$name: exit $st, stdout '$(cat "$tmp/uo")', stderr '$(cat "$tmp/ue")'"; fi
}
gen=(--model "$model" --temperature 0 --max-tokens 12 --ignore-eos)

# text streams to stdout, one newline at the end
capture "$bin" run "${gen[@]}" -p "In the beginning" --stats && ok || bad "run -p: $(cat "$tmp/err")"
python3 - "$tmp/out" <<'PY' && ok || bad "run -p output"
import sys; t = open(sys.argv[1], 'rb').read(); sys.exit(0 if len(t) > 1 and t.endswith(b'\n') else 1)
PY
grep -q "12 tokens (completed: length) after a .*-token prompt; TTFT .* decode [0-9.]* tokens/s; plan text:continuous" "$tmp/err" && ok || bad "--stats line: $(cat "$tmp/err")"
cp "$tmp/out" "$tmp/greedy"

# a stop string taken from the greedy text: the output is the text before its first occurrence
python3 - "$tmp/greedy" >"$tmp/stop" <<'PY'
import sys; t = open(sys.argv[1], encoding='utf-8').read()[:-1]; sys.stdout.write(t[4:7])
PY
stop=$(cat "$tmp/stop")
capture "$bin" run "${gen[@]}" -p "In the beginning" --stop "$stop" --stats && ok || bad "run --stop"
python3 - "$tmp/greedy" "$tmp/out" "$stop" <<'PY' && ok || bad "stop '$stop': got '$(cat "$tmp/out")'"
import sys; g = open(sys.argv[1], encoding='utf-8').read()[:-1]; o = open(sys.argv[2], encoding='utf-8').read()
sys.exit(0 if o == g[:g.index(sys.argv[3])] + '\n' else 1)
PY
grep -q "(completed: stop)" "$tmp/err" && ok || bad "stop finish: $(cat "$tmp/err")"

# ids of the same run, and the ids run back through --prompt-ids gives ids on one line
capture "$bin" run "${gen[@]}" -p "In the beginning" --output ids && ok || bad "run --output ids"
[[ "$(cat "$tmp/out")" =~ ^[0-9]+(\ [0-9]+){11}$ ]] && ok || bad "ids line: $(cat "$tmp/out")"

# logprobs: one line per token on stderr, with N alternatives
capture "$bin" run "${gen[@]}" -p "In the beginning" --logprobs 3 && ok || bad "run --logprobs"
[ "$(grep -cP '^\d+\t\d+\t-?[0-9.]+\t.*\ttop -?\d+:-?[0-9.]+ -?\d+:-?[0-9.]+ -?\d+:-?[0-9.]+$' "$tmp/err")" = 12 ] && ok || bad "logprob lines: $(head -3 "$tmp/err")"

# --output ids never detokenizes: the logprob lines keep an empty text column
capture "$bin" run "${gen[@]}" -p "In the beginning" --output ids --logprobs 2 && ok || bad "run --output ids --logprobs"
[ "$(grep -cP '^\d+\t\d+\t-?[0-9.]+\t\ttop -?\d+:-?[0-9.]+ -?\d+:-?[0-9.]+$' "$tmp/err")" = 12 ] && ok || bad "ids logprob lines: $(head -3 "$tmp/err")"

# chat: a reply equals run --chat on the same message; /reset forgets; /exit stops
capture "$bin" run "${gen[@]}" --chat -p "Hello there" && ok || bad "run --chat"
cp "$tmp/out" "$tmp/reply"
printf 'Hello there\n' | "$bin" chat "${gen[@]}" >"$tmp/out" 2>"$tmp/err" && ok || bad "chat: $(cat "$tmp/err")"
cmp -s "$tmp/out" "$tmp/reply" && ok || bad "chat reply '$(cat "$tmp/out")' != run --chat '$(cat "$tmp/reply")'"
printf 'Hello there\n/reset\nHello there\nAnd then?\n/exit\nHello there\n' | "$bin" chat "${gen[@]}" --stats >"$tmp/out" 2>"$tmp/err" && ok || bad "chat with /reset"
cat "$tmp/reply" "$tmp/reply" >"$tmp/two"
head -c "$(stat -c %s "$tmp/two")" "$tmp/out" | cmp -s - "$tmp/two" && ok || bad "after /reset the same reply: '$(cat "$tmp/out")'"
mapfile -t prompts < <(grep -o 'after a [0-9]*-token prompt' "$tmp/err" | grep -o '[0-9]*')
printf 'And then?\n' | "$bin" chat "${gen[@]}" --stats >/dev/null 2>"$tmp/err"
alone=$(grep -o 'after a [0-9]*-token prompt' "$tmp/err" | grep -o '[0-9]*')
# equal after /reset; the third turn carries the first exchange (its user turn alone is 5+ tokens)
if [ "${#prompts[@]}" = 3 ] && [ "${prompts[0]}" = "${prompts[1]}" ] && [ "${prompts[2]}" -gt $((alone + 5)) ]; then ok; else bad "chat prompts ${prompts[*]}, alone $alone (want equal after /reset, then growing with the history; none after /exit)"; fi
printf 'Hi\n' | "$bin" chat "${gen[@]}" --system "Answer briefly." --stats >/dev/null 2>"$tmp/err" && ok || bad "chat --system"
sys_prompt=$(grep -o 'after a [0-9]*-token prompt' "$tmp/err" | grep -o '[0-9]*')
printf 'Hi\n' | "$bin" chat "${gen[@]}" --stats >/dev/null 2>"$tmp/err"
[ "$sys_prompt" -gt "$(grep -o 'after a [0-9]*-token prompt' "$tmp/err" | grep -o '[0-9]*')" ] && ok || bad "--system adds a message"

usage_error "run without prompt" "$bin" run --model "$model"
usage_error "run with two prompts" "$bin" run --model "$model" -p x --prompt-ids 1
usage_error "run bad top-k" "$bin" run --model "$model" -p x --top-k abc
usage_error "run negative temperature" "$bin" run --model "$model" -p x --temperature -1
usage_error "run top-p 0" "$bin" run --model "$model" -p x --top-p 0
usage_error "run repeat-penalty 0" "$bin" run --model "$model" -p x --repeat-penalty 0
usage_error "run presence-penalty 5" "$bin" run --model "$model" -p x --presence-penalty 5
usage_error "run logprobs 21" "$bin" run --model "$model" -p x --logprobs 21
usage_error "run empty stop" "$bin" run --model "$model" -p x --stop ""
usage_error "run seed -3" "$bin" run --model "$model" -p x --seed -3
usage_error "run --chat with ids" "$bin" run --model "$model" --chat --prompt-ids 1,2
usage_error "run temperature nan" "$bin" run --model "$model" -p x --temperature nan
usage_error "chat max-tokens 0" "$bin" chat --model "$model" --max-tokens 0
usage_error "chat stray argument" "$bin" chat --model "$model" hello

echo "$pass passed, $fails failed"
[ "$fails" = 0 ]
