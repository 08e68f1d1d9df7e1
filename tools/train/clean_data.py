#!/usr/bin/env python3
"""Builds the training text for the default models (models/README.md): King James Bible chapters,
Brown corpus files (POS tags stripped, detokenized) and non-offensive fortunes, one document per unit,
split into train/valid by a seeded hash of each document's name. Writes train.txt.gz, valid.txt.gz and
stats.json; documents are separated by a line holding only <|endoftext|>."""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import subprocess

SEP = "\n<|endoftext|>\n"
# Fortune files left out: names that suggest offensive or adult content, and ascii art (no prose).
FORTUNE_SKIP = {"drugs", "ethnic", "men-women", "politics", "sex", "ascii-art"}
FORTUNE_SKIP_WORDS = ("off", "sex", "drug", "ethnic", "racis", "porn", "insult", "women", "politic")
# A fortune is dropped when it holds one of these (crude, sexual or slur words), or IRC-style "<|".
FORTUNE_BAD = re.compile(r"(?i)\b(fuck\w*|shit\w*|cunt\w*|nigg\w*|whore\w*|bitch\w*|rap(e|ed|ist)|p[o0]rn\w*|"
                         r"sex\w*|penis\w*|vagina\w*|orgasm\w*|dick|cock\w*|pussy|tits?|boobs?|nude\w*|"
                         r"naked|prostitut\w*|fag\w*|queer|retard\w*|kill yourself|suicid\w*)\b|<\|")


def is_valid(name, seed, frac):
    h = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64 < frac


def kjv_docs(bible_cmd):
    text = subprocess.run([bible_cmd, "gen1:1-rev22:21"], check=True, capture_output=True,
                          text=True).stdout
    lines = text.split("\n")
    header = re.compile(r"^((?:[123] )?[A-Z][A-Za-z ]+) (\d+)$")
    docs, title, verses = [], None, []

    def flush():
        if title is not None and verses:
            docs.append((f"kjv/{title}", title + "\n\n" + "\n".join(verses)))

    for i, line in enumerate(lines):
        prev_blank = i == 0 or lines[i - 1].strip() == ""
        next_blank = i + 1 >= len(lines) or lines[i + 1].strip() == ""
        if prev_blank and next_blank and header.match(line):
            flush()
            title, verses = line, []
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            verses.append(m.group(2).strip())
        elif line.strip():
            if not verses:
                raise SystemExit(f"kjv: text before the first verse at line {i + 1}: {line!r}")
            verses[-1] += " " + line.strip()
    flush()
    return docs


NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "''", "'", "]", "}"}
NO_SPACE_AFTER = {"(", "``", "[", "{"}


def detok(words):
    out = []
    glue = True
    for w in words:
        if w == "." and out and out[-1].endswith("."):
            continue
        text = {"``": '"', "''": '"'}.get(w, w)
        if not glue and w not in NO_SPACE_BEFORE:
            out.append(" ")
        out.append(text)
        glue = w in NO_SPACE_AFTER
    return "".join(out)


def brown_sentence(line):
    """Returns the detokenized sentence and whether it is a headline (every tag ends in -hl)."""
    words, headline = [], True
    for tok in line.split():
        word, tag = tok.rsplit("/", 1) if "/" in tok else (tok, "")
        headline = headline and tag.endswith("-hl")
        if word:
            words.append(word)
    return detok(words), headline


def brown_docs(folder):
    files = sorted(f for f in glob.glob(os.path.join(folder, "c[a-r][0-9][0-9]")))
    if len(files) != 500:
        raise SystemExit(f"brown: expected 500 files in {folder}, found {len(files)}")
    docs = []
    for path in files:
        raw = open(path, "rb").read().decode("latin-1")
        paras = []
        for block in re.split(r"\n\s*\n", raw):
            lines, body = [], []
            for sent, headline in (brown_sentence(l) for l in block.split("\n") if l.strip()):
                if headline:
                    if body:
                        lines.append(" ".join(body))
                        body = []
                    lines.append(sent)
                elif sent:
                    body.append(sent)
            if body:
                lines.append(" ".join(body))
            if lines:
                paras.append("\n".join(lines))
        docs.append((f"brown/{os.path.basename(path)}", "\n\n".join(paras)))
    return docs


def fortune_files(folder):
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*"))):
        name = os.path.basename(path)
        if not os.path.isfile(path) or os.path.islink(path) or "." in name:
            continue
        if name in FORTUNE_SKIP or any(w in name.lower() for w in FORTUNE_SKIP_WORDS):
            continue
        out.append(path)
    return out


def fortune_docs(folder):
    docs = []
    for path in fortune_files(folder):
        raw = open(path, "rb").read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        name = os.path.basename(path)
        for k, entry in enumerate(re.split(r"(?m)^%\s*$", text)):
            lines = [l.expandtabs(4).rstrip() for l in entry.strip("\n").split("\n")]
            body = "\n".join(lines).strip("\n")
            if body.strip() and not FORTUNE_BAD.search(body):
                docs.append((f"fortune/{name}/{k}", body))
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brown", required=True, help="folder holding the Brown files c[a-r]NN")
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--bible", default="bible")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--valid-frac", type=float, default=0.02)
    args = ap.parse_args()

    sources = {"kjv": kjv_docs(args.bible), "brown": brown_docs(args.brown),
               "fortunes": fortune_docs(args.fortunes)}
    if len(sources["kjv"]) != 1189:
        raise SystemExit(f"kjv: expected 1189 chapters, found {len(sources['kjv'])}")
    split = {"train": [], "valid": []}
    stats = {"seed": args.seed, "valid_frac": args.valid_frac,
             "fortune_files": [os.path.basename(p) for p in fortune_files(args.fortunes)]}
    for src, docs in sources.items():
        for name, text in docs:
            if "<|" in text:
                raise SystemExit(f"{name}: contains '<|'")
            split["valid" if is_valid(name, args.seed, args.valid_frac) else "train"].append(text)
        n_valid = sum(1 for name, _ in docs if is_valid(name, args.seed, args.valid_frac))
        stats[src] = {"docs": len(docs), "valid_docs": n_valid,
                      "chars": sum(len(t) for _, t in docs)}
    os.makedirs(args.out, exist_ok=True)
    for part, docs in split.items():
        with gzip.GzipFile(os.path.join(args.out, f"{part}.txt.gz"), "wb", mtime=0) as f:
            f.write(SEP.join(docs).encode("utf-8"))
        stats[part] = {"docs": len(docs), "chars": sum(len(t) for t in docs)}
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps({k: v for k, v in stats.items() if k != "fortune_files"}))


if __name__ == "__main__":
    main()
