#!/usr/bin/env bash
# test_cli.sh: the tokenize/detokenize verbs: ids equal to the HF goldens of the unit byte-level
# tokenizer (--jsonl, --text, --file, --no-special), decode of golden ids, exit status 2 with a
# one-line reason for bad usage, 1 for a missing tokenizer.
# usage: test_cli.sh CLI FIXTURES_TOKENIZER_DIR SCRATCH_DIR   (CLI: a program with those verbs)
set -u
cli="$1"; fix="$2"; tmp="$3"
pass=0; fail=0
check() { # check NAME CONDITION-RESULT
    if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi
}
mkdir -p "$tmp/bl"
cp "$fix/unit/bytelevel.json" "$tmp/bl/tokenizer.json"
python3 -c 'import json,sys; [print(json.dumps(s)) for s in json.load(open(sys.argv[1]))]' "$fix/unit/inputs.json" > "$tmp/in.jsonl"
grep -v "^#" "$fix/unit/bytelevel.gold" | cut -f1 > "$tmp/want1"
grep -v "^#" "$fix/unit/bytelevel.gold" | cut -f2 > "$tmp/want2"

"$cli" tokenize --model "$tmp/bl" --jsonl "$tmp/in.jsonl" > "$tmp/got1"
check "--jsonl ids equal HF's with special tokens" $(cmp -s "$tmp/got1" "$tmp/want1"; echo $?)
"$cli" tokenize --model "$tmp/bl" --jsonl "$tmp/in.jsonl" --no-special > "$tmp/got2"
check "--jsonl --no-special ids equal HF's" $(cmp -s "$tmp/got2" "$tmp/want2"; echo $?)

line=$(grep -n '^"Hello world"$' "$tmp/in.jsonl" | cut -d: -f1)
got=$("$cli" tokenize --model "$tmp/bl" --text "Hello world")
check "--text 'Hello world'" $([ "$got" = "$(sed -n "${line}p" "$tmp/want1")" ]; echo $?)

printf 'hello\r\n' > "$tmp/f.txt"
printf '"hello\\r\\n"\n' > "$tmp/f.jsonl"
check "--file keeps the trailing newline" \
    $([ "$("$cli" tokenize --model "$tmp/bl" --file "$tmp/f.txt")" = "$("$cli" tokenize --model "$tmp/bl" --jsonl "$tmp/f.jsonl")" ]; echo $?)
check "--file differs from the text without its newline" \
    $([ "$("$cli" tokenize --model "$tmp/bl" --file "$tmp/f.txt")" != "$("$cli" tokenize --model "$tmp/bl" --text hello)" ]; echo $?)

ids=$(sed -n "${line}p" "$tmp/want1" | tr ' ' ',')
check "detokenize prints the text" $([ "$("$cli" detokenize --model "$tmp/bl" --ids "$ids")" = "<s> hello world</s>" ]; echo $?)
check "detokenize --skip-special" $([ "$("$cli" detokenize --model "$tmp/bl" --ids "$ids" --skip-special)" = " hello world" ]; echo $?)

usage() { # usage NAME ARGS...: exit status 2 and exactly one line on stderr
    local name="$1"; shift
    "$cli" "$@" > /dev/null 2> "$tmp/err"
    local rc=$?
    check "$name exits 2 (got $rc)" $([ $rc -eq 2 ]; echo $?)
    check "$name prints one line on stderr" $([ "$(wc -l < "$tmp/err")" -eq 1 ]; echo $?)
}
usage "unknown flag" tokenize --model "$tmp/bl" --text x --bogus
usage "missing value" tokenize --model "$tmp/bl" --text
usage "two inputs" tokenize --model "$tmp/bl" --text x --file "$tmp/f.txt"
usage "no input" tokenize --model "$tmp/bl"
usage "bad jsonl line" tokenize --model "$tmp/bl" --jsonl "$tmp/f.txt"
usage "bad ids" detokenize --model "$tmp/bl" --ids 1,x
usage "unknown id" detokenize --model "$tmp/bl" --ids 99999999
"$cli" tokenize --model "$tmp/nowhere" --text x > /dev/null 2> "$tmp/err"
check "missing tokenizer exits 1" $([ $? -eq 1 ] && grep -q tokenizer.json "$tmp/err"; echo $?)
"$cli" tokenize --help > "$tmp/help"
check "--help exits 0 and prints usage" $([ $? -eq 0 ] && grep -q -- --jsonl "$tmp/help"; echo $?)
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
