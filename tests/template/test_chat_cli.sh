#!/usr/bin/env bash
# test_chat_cli.sh: `cinfer run --chat` and `cinfer chat` print replies through the chat parser. On a copy
# of the embedded model whose template opens <think> in the generation prompt (as DeepSeek-R1's does),
# the reply is reasoning: each line prefixed "thinking> " in a pipe, the same text as the raw run of the
# rendered prompt; with --chat-template-kwargs '{"enable_thinking": false}' it is plain content; chat
# prints what run --chat prints, and its history keeps the content only (not the reasoning).
# usage: test_chat_cli.sh CINFER_BIN MODEL_DIR
set -u
bin=$1
model=$2
fails=0
pass=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass+1)); }
bad() { echo "FAIL $*"; fails=$((fails+1)); }

cp -r "$model" "$tmp/think"
python3 - "$tmp/think/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["chat_template"] = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n"
                      "{% if enable_thinking is defined and not enable_thinking %}</think>\n\n{% endif %}{% endif %}")
json.dump(c, open(sys.argv[1], "w"))
PY
gen=(--model "$tmp/think" --temperature 0 --max-tokens 24 --ignore-eos)
prompt=$'<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'

"$bin" run "${gen[@]}" -p "$prompt<think>"$'\n' >"$tmp/raw" 2>"$tmp/err" && ok || bad "raw run: $(cat "$tmp/err")"
"$bin" run "${gen[@]}" --chat -p hi >"$tmp/chat" 2>"$tmp/err" && ok || bad "run --chat: $(cat "$tmp/err")"
python3 - "$tmp/raw" "$tmp/chat" <<'PY' && ok || bad "reasoning lines: raw '$(cat "$tmp/raw")', run --chat '$(cat "$tmp/chat")'"
import sys
raw = open(sys.argv[1], encoding="utf-8").read()[:-1].lstrip(" \n\t\r")
want = "".join("thinking> " + line for line in raw.splitlines(keepends=True)) + "\n"
got = open(sys.argv[2], encoding="utf-8").read()
sys.exit(0 if raw and "</think>" not in raw and got == want else 1)
PY

"$bin" run "${gen[@]}" -p "$prompt<think>"$'\n</think>\n\n' >"$tmp/raw_off" 2>"$tmp/err" && ok || bad "raw run, thinking off"
"$bin" run "${gen[@]}" --chat -p hi --chat-template-kwargs '{"enable_thinking": false}' >"$tmp/off" 2>"$tmp/err" && ok || bad "run --chat thinking off: $(cat "$tmp/err")"
cmp -s "$tmp/raw_off" "$tmp/off" && ok || bad "thinking off: '$(cat "$tmp/off")' != raw '$(cat "$tmp/raw_off")'"

printf 'hi\n' | "$bin" chat "${gen[@]}" >"$tmp/c1" 2>"$tmp/err" && ok || bad "chat: $(cat "$tmp/err")"
cmp -s "$tmp/c1" "$tmp/chat" && ok || bad "chat '$(cat "$tmp/c1")' != run --chat '$(cat "$tmp/chat")'"

# Two turns: the second prompt holds the first reply's content (empty: it was all reasoning).
printf 'hi\nhi\n' | "$bin" chat "${gen[@]}" --stats >/dev/null 2>"$tmp/err" && ok || bad "two turns: $(cat "$tmp/err")"
second=$(grep -o 'after a [0-9]*-token prompt' "$tmp/err" | sed -n 2p | grep -o '[0-9]*')
history=$'<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n'"$prompt<think>"$'\n'
"$bin" run "${gen[@]}" --max-tokens 1 -p "$history" --stats >/dev/null 2>"$tmp/err"
want=$(grep -o 'after a [0-9]*-token prompt' "$tmp/err" | grep -o '[0-9]*')
[ -n "$second" ] && [ "$second" = "$want" ] && ok || bad "the second turn's prompt has $second tokens, want $want (content only in the history)"

# --output ids prints the ids, as before the parser
"$bin" run "${gen[@]}" --chat -p hi --output ids >"$tmp/ids" 2>"$tmp/err" && ok || bad "run --chat --output ids"
[[ "$(cat "$tmp/ids")" =~ ^[0-9]+(\ [0-9]+){23}$ ]] && ok || bad "ids line: $(cat "$tmp/ids")"

"$bin" run "${gen[@]}" -p hi --chat-template-kwargs '{}' >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "needs --chat" "$tmp/err" && ok || bad "kwargs without --chat: $(cat "$tmp/err")"
"$bin" run "${gen[@]}" --chat -p hi --chat-template-kwargs '[1]' >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "template_kwargs_json is not a JSON object" "$tmp/err" && ok || bad "bad kwargs: $(cat "$tmp/err")"

echo "$pass passed, $fails failed"
[ "$fails" = 0 ]
