#!/usr/bin/env bash
# test_chat_template_cli.sh CINFER FIXTURES: the chat-template verb's contract — help, usage errors
# (exit 2, one line), and the exact bytes of a render against the jinja2 golden.
set -uo pipefail
bin="$1"; fix="$2/templates"; fail=0
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail + 1)); fi; }

"$bin" chat-template --help >"$tmp/help" 2>&1; check "help exits 0" '[ $? -eq 0 ] && grep -q -- --messages "$tmp/help"'
"$bin" chat-template --bogus >/dev/null 2>"$tmp/err"; rc=$?
check "bad flag exits 2 with one line" '[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]'
"$bin" chat-template --model "$tmp" >/dev/null 2>"$tmp/err"; rc=$?
check "missing --messages exits 2" '[ $rc -eq 2 ] && grep -q -- --messages "$tmp/err"'

mkdir -p "$tmp/model"
cp "$fix/qwen3.jinja" "$tmp/model/chat_template.jinja"
echo '{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}' >"$tmp/model/tokenizer_config.json"
python3 - "$fix/goldens.json" "$tmp" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
inp = g["inputs"]["tool_call_dict_args"]
open(sys.argv[2] + "/messages.json", "w").write(inp["messages"])
open(sys.argv[2] + "/tools.json", "w").write(inp["tools"])
open(sys.argv[2] + "/want", "wb").write(g["results"]["qwen3"]["tool_call_dict_args"]["out"].encode())
PY
"$bin" chat-template --model "$tmp/model" --messages "$tmp/messages.json" --tools "$tmp/tools.json" \
    --add-generation-prompt --kwargs '{"enable_thinking": true}' >"$tmp/got"; rc=$?
check "render exits 0" '[ $rc -eq 0 ]'
check "render matches the jinja2 golden byte for byte" 'cmp -s "$tmp/got" "$tmp/want"'
echo '[{"role": "user", "content": 1}]' >"$tmp/bad.json"
"$bin" chat-template --model "$tmp/model" --messages "$tmp/bad.json" >/dev/null 2>"$tmp/err"; rc=$?
check "template error exits 1 naming the line" '[ $rc -eq 1 ] && grep -q "template line" "$tmp/err"'
echo "$((7 - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
