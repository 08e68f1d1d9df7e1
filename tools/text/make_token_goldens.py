#!/usr/bin/env python3
"""make_token_goldens.py: the Hugging Face `tokenizers` (0.23) oracle for src/text/tokenizer*.c.
Run where `tokenizers` is installed (the GPU machine); writes into OUTDIR:
  <name>.gold.gz      for each real tokenizer DIR given with --tok NAME=DIR (tokenizer.json and
                      tokenizer_config.json inside, plain or .gz/.xz), over
                      tests/fixtures/tokenizer/inputs.jsonl.gz
  unit/<name>.gold    for each tests/fixtures/tokenizer/unit/<name>.json over UNIT_INPUTS
  components.jsonl    normalizer / pre-tokenizer / decoder cases (config, input, HF output)
  fixture-<sha>.gold.gz  for each --fixture DIR (a test model's tokenizer), <sha> the first 16 hex
                      digits of the SHA-256 of its tokenizer.json, so a changed file is noticed
  docs.json           for each --doc NAME=FILE and each --tok tokenizer: the number of ids of the
                      whole document (add_special_tokens=True), the CRC-32 of those ids written as
                      "1 2 3", whether decode(ids, skip_special_tokens=True) gives the document back,
                      and HF's encode time in seconds (whole, and line by line)
A .gold file has one line per input, six tab-separated columns:
  1 ids, add_special_tokens=True (specials in the text parsed, HF's default)
  2 ids, add_special_tokens=False
  3 ids, add_special_tokens=True with encode_special_tokens=True ("=" when equal to column 1)
  4 ids, add_special_tokens=False with encode_special_tokens=True ("=" when equal to column 2)
  5 decode(column 1, skip_special_tokens=True) as JSON ("=" when equal to the input)
  6 decode(column 1, skip_special_tokens=False) as JSON ("=" when equal to the input)
Inputs given as {"hex": ...} are decoded with errors="replace" first, as Python would.
make_token_goldens.js does the gold and docs parts with HF's Node binding of the same version, on
any machine with npm (the fixture-*.gold.gz and docs.json in tests/fixtures/tokenizer come from it).
It also compares transformers' AutoTokenizer(text)["input_ids"] with column 1 and prints differences."""
import argparse
import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import sys
import tempfile
import time
import zlib

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizer")


def load_inputs():
    out = []
    with gzip.open(os.path.join(FIX, "inputs.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            v = json.loads(line)
            out.append(bytes.fromhex(v["hex"]).decode("utf-8", "replace") if isinstance(v, dict) else v)
    return out


def fnv1a64(path):
    """The checksum test_golden and test_doc compare with the tokenizer.json they load."""
    h = 0xcbf29ce484222325
    with open(path, "rb") as f:
        for b in f.read():
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def header(tokenizer_json):
    return "#fnv1a64=" + fnv1a64(tokenizer_json)


def ids_str(ids):
    return " ".join(map(str, ids))


def gold_lines(tok, texts):
    lines = []
    for t in texts:
        tok.encode_special_tokens = False
        a = tok.encode(t, add_special_tokens=True).ids
        b = tok.encode(t, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        c = tok.encode(t, add_special_tokens=True).ids
        d = tok.encode(t, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        e = tok.decode(a, skip_special_tokens=True)
        f = tok.decode(a, skip_special_tokens=False)
        cols = [ids_str(a), ids_str(b), "=" if c == a else ids_str(c), "=" if d == b else ids_str(d),
                "=" if e == t else json.dumps(e, ensure_ascii=False),
                "=" if f == t else json.dumps(f, ensure_ascii=False)]
        lines.append("\t".join(cols))
    return lines


def write_gz(path, text):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def open_tokenizer_dir(d):
    """A temporary copy of d with .gz and .xz files expanded (HF wants plain files)."""
    tmp = tempfile.mkdtemp()
    for fn in os.listdir(d):
        src = os.path.join(d, fn)
        if fn.endswith(".gz") or fn.endswith(".xz"):
            with (gzip.open if fn.endswith(".gz") else lzma.open)(src, "rb") as fi, \
                    open(os.path.join(tmp, fn[:-3]), "wb") as fo:
                shutil.copyfileobj(fi, fo)
        elif os.path.isfile(src) and fn.startswith("tokenizer"):
            shutil.copy(src, tmp)
    return tmp


def real_tokenizer(name, d, texts, outdir):
    tmp = open_tokenizer_dir(d)
    tok = Tokenizer.from_file(os.path.join(tmp, "tokenizer.json"))
    lines = gold_lines(tok, texts)
    write_gz(os.path.join(outdir, name + ".gold.gz"),
             "\n".join([header(os.path.join(tmp, "tokenizer.json"))] + lines) + "\n")
    print("%s: %d lines, %d tokens" % (name, len(lines), sum(len(l.split("\t")[0].split()) for l in lines)))
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(tmp)
        diffs = 0
        for t, l in zip(texts, lines):
            want = l.split("\t")[0]
            got = ids_str(at(t)["input_ids"])
            if got != want:
                if diffs < 3:
                    print("  transformers differs on %r: %s vs tokenizers %s" % (t[:60], got[:80], want[:80]))
                diffs += 1
        print("  transformers %s: %d of %d lines differ from tokenizers" % (type(at).__name__, diffs, len(texts)))
    except Exception as e:  # the comparison is informative only
        print("  transformers comparison failed: %r" % (e,))
    shutil.rmtree(tmp)


UNIT_INPUTS = [
    "", " ", "Hello world", "hello HELLO Hello", "The quick brown fox", "<s>", "</s>", "<s>hi</s>",
    "<|special|>", "<|special|>x", "a<|special|>b", "x [L] y", "x   [L]   y", "[L]", "  [L]", "[R]   after",
    "b [R]\n\nz", "[LR]", "  [LR]  z", "a[LR]b", "word", "a word here", "swordfish", "word!", "_word_",
    "wordword", "word word", "éword", "MiXeD", "mixed", "MIXED case", "xMIXEDx", "<plain>", "<plain>x<plain>",
    "<end_of_turn>", "\n\n", "a\n\nb", "\n\n\n", "\n", "<mask>", "x <mask>", "x    <mask> y", "[sep]",
    "[SEP]", "a [sep]   b", "[CLS] x [SEP]", "Ünïcödé", "你好世界", "日本語です", "emoji 👍🏽", "tab\there",
    "  spaces  ", "12345", "a1b22", "running jumped", "Don't stop", "it's tokenization", "café", "cafe\u0301",
    "\u00a0", "zzz qqq", "x" * 50, "hello\r\n", "▁hello", "▁", "<0x41>", "\x00", "\ufffd", "ﬁne ①",
    "The quick brown fox jumps over the lazy dog. Hello world, hello there!",
    "   indented line\twith tab\nnew line  two spaces    four spaces.",
]

NORM_INPUTS = ["", " ", "Hello World", "  padded  ", "\t\ttabs\n", "e\u0301", "Å", "ﬁ", "①", "ｆｕｌｌ", "x²",
               "İstanbul", "ΣΑΣ", "ǅ", "ẞß", "Ⅻ", "\u1e9b\u0323", "한국어", "\u1100\u1161\u11a8", "a  b   c",
               "▁x", "café naïve", "\u00a0nbsp\u00a0", "\u3000ideo\u3000", "x\u0085y", "ÀÉÎÕÜ", "Ωmega", "ﬀ",
               "\u212a", "\u212b", "\u0344", "Ǆ", "ŉ", "ΐ", "aab abab", "\ufeffbom", "x\u200by"]
PRE_INPUTS = ["", " ", "Hello world", "Hello  world ", " leading", "a\tb\nc", "I'm 42 years old!",
              "don't STOP'S", "12345 apples", "x1y22z333", "Hello, world... (test) [ok]?", "你好世界 hello",
              "emoji 👍🏽 here", "  multiple   spaces  ", "▁already▁there", "a▁b c", "\n\n", "tab\t\tend\t",
              "¿Qué? ¡Sí!", "price: $9.99", "e\u0301 combining", "٣٤٥ digits", "a-b_c.d", "\u00a0nbsp",
              "x\u3000y", "abab cab", "xx yxx", "a\r\n\r\nb  \n c"]
DEC_INPUTS = [["Ġhello", "Ġworld"], ["Hello", "Ġ", "Ġworld", "Ċ"], ["<0xE2>", "<0x82>", "<0xAC>"],
              ["<0xE2>", "<0x82>"], ["<0xE2>", "a", "<0xAC>"], ["<0xFF>"], ["<0x41>", "<0x42>"], ["<0x4g>"],
              ["<0x+A>"], ["<0x0a>"], ["▁Hello", "▁world", "!"], ["▁", "▁", "Hi"], ["Hello"], [],
              ["ĠÃ©", "Ã"], ["Ã"], ["<|im_end|>"], ["<s>", "▁Hi"], ["He", "llo</w>", "world</w>"], ["##ing"],
              ["  x  "], ["▁▁a▁"], ["Ġ", "ðŁĳ", "į"], ["a\u00a0b"], ["日本"],
              ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "▁ok"], ["xxHixx", "x"], ["a▁b", "▁c▁"]]

BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
QWEN_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def normalizer_configs():
    rep = lambda p, c, kind="String": {"type": "Replace", "pattern": {kind: p}, "content": c}
    return [{"type": t} for t in ["NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents"]] + [
        {"type": "Strip", "strip_left": l, "strip_right": r} for l, r in [(True, True), (True, False), (False, True)]
    ] + [rep(" ", "▁"), rep("ab", "X"), rep(" {2,}", " ", "Regex"), rep(r"\s+", "_", "Regex"),
         rep("(?<=a)b", "B", "Regex"), rep("x*", "-", "Regex"), {"type": "Prepend", "prepend": "▁"},
         {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, rep(" ", "▁")]},
         {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]},
         {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                              {"type": "Strip", "strip_left": True, "strip_right": True}]}]


def pre_tokenizer_configs():
    out = [{"type": "ByteLevel", "add_prefix_space": a, "trim_offsets": True, "use_regex": r}
           for a in (True, False) for r in (True, False)]
    for pat in [r"\s+", r" ?\p{L}+|\p{N}+", r"\d", r"(?i:'s|'t|'m)", "x*", r"\s*"]:
        for b in BEHAVIORS:
            for inv in (False, True):
                out.append({"type": "Split", "pattern": {"Regex": pat}, "behavior": b, "invert": inv})
    for pat in [" ", "ab", "▁"]:
        for b in BEHAVIORS:
            for inv in (False, True):
                out.append({"type": "Split", "pattern": {"String": pat}, "behavior": b, "invert": inv})
    for pat in [QWEN_RE, LLAMA3_RE]:
        out.append({"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False})
    for scheme in ("always", "first", "never"):
        for split in (True, False):
            out.append({"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split})
    out.append({"type": "Metaspace", "replacement": "_", "prepend_scheme": "always", "split": True})
    out += [{"type": "Digits", "individual_digits": True}, {"type": "Digits", "individual_digits": False}]
    out += [{"type": "Punctuation", "behavior": b} for b in BEHAVIORS]
    out += [{"type": "Whitespace"}, {"type": "WhitespaceSplit"}, {"type": "BertPreTokenizer"},
            {"type": "CharDelimiterSplit", "delimiter": "-"},
            {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                   {"type": "Metaspace", "replacement": "▁",
                                                    "prepend_scheme": "first", "split": True}]},
            {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                   {"type": "Punctuation", "behavior": "Isolated"}]},
            {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}]
    return out


def decoder_configs():
    rep = lambda p, c, kind="String": {"type": "Replace", "pattern": {kind: p}, "content": c}
    return [{"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            {"type": "ByteFallback"}, {"type": "Fuse"}] + [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": s, "split": True}
        for s in ("always", "first", "never")] + [
        rep("▁", " "), rep(r"\s+", "_", "Regex"), {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        {"type": "Strip", "content": "▁", "start": 1, "stop": 1}, {"type": "Strip", "content": "x", "start": 0, "stop": 2},
        {"type": "BPEDecoder", "suffix": "</w>"},
        {"type": "Sequence", "decoders": [rep("▁", " "), {"type": "ByteFallback"}, {"type": "Fuse"},
                                          {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                          {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                           "split": True}]}]


def shell(**parts):
    t = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "pre_tokenizer": None, "post_processor": None, "decoder": None,
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": {},
                   "merges": []}}
    t.update(parts)
    return Tokenizer.from_str(json.dumps(t))


def components(outdir):
    lines = []

    def run(kind, cfg, inputs, fn):
        cases = []
        try:
            tok = shell(**{kind: cfg})
        except Exception as e:
            lines.append(json.dumps({"kind": kind, "config": cfg, "load_error": str(e)}, ensure_ascii=False))
            return
        for x in inputs:
            try:
                cases.append([x, fn(tok, x)])
            except BaseException as e:  # a Rust panic surfaces as PanicException
                cases.append([x, {"error": str(e)}])
        lines.append(json.dumps({"kind": kind, "config": cfg, "cases": cases}, ensure_ascii=False))

    for cfg in normalizer_configs():
        run("normalizer", cfg, NORM_INPUTS, lambda tok, x: tok.normalizer.normalize_str(x))
    for cfg in pre_tokenizer_configs():
        run("pre_tokenizer", cfg, PRE_INPUTS, lambda tok, x: [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(x)])
    for cfg in decoder_configs():
        run("decoder", cfg, DEC_INPUTS, lambda tok, x: tok.decoder.decode(x))
    with open(os.path.join(outdir, "components.jsonl"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("components: %d configs" % len(lines))


def unit(outdir):
    d = os.path.join(FIX, "unit")
    os.makedirs(os.path.join(outdir, "unit"), exist_ok=True)
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".json") or fn == "inputs.json":
            continue
        tok = Tokenizer.from_file(os.path.join(d, fn))
        lines = gold_lines(tok, UNIT_INPUTS)
        with open(os.path.join(outdir, "unit", fn[:-5] + ".gold"), "w", encoding="utf-8") as f:
            f.write("\n".join([header(os.path.join(d, fn))] + lines) + "\n")
        print("unit %s: %d lines" % (fn, len(lines)))
    with open(os.path.join(outdir, "unit", "inputs.json"), "w", encoding="utf-8") as f:
        json.dump(UNIT_INPUTS, f, ensure_ascii=False, indent=0)


def fixture_name(d):
    with open(os.path.join(d, "tokenizer.json"), "rb") as f:
        return "fixture-" + hashlib.sha256(f.read()).hexdigest()[:16]


def read_doc(path):
    opener = gzip.open if path.endswith(".gz") else lzma.open if path.endswith(".xz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def documents(toks, docs, outdir):
    out = {}
    for name, d in toks:
        tmp = open_tokenizer_dir(d)
        tok = Tokenizer.from_file(os.path.join(tmp, "tokenizer.json"))
        out[name] = {"tokenizer_fnv1a64": fnv1a64(os.path.join(tmp, "tokenizer.json"))}
        shutil.rmtree(tmp)
        for dname, path in docs:
            text = read_doc(path)
            t0 = time.perf_counter()
            ids = tok.encode(text, add_special_tokens=True).ids
            dt = time.perf_counter() - t0
            back = tok.decode(ids, skip_special_tokens=True)
            t0 = time.perf_counter()
            for line in text.splitlines(keepends=True):
                tok.encode(line, add_special_tokens=True)
            dl = time.perf_counter() - t0
            out[name][dname] = {"bytes": len(text.encode("utf-8")), "tokens": len(ids),
                                "crc32": zlib.crc32(ids_str(ids).encode()), "roundtrip": back == text,
                                "hf_seconds": round(dt, 3), "hf_lines_seconds": round(dl, 3)}
            print("doc %s %s: %s" % (name, dname, out[name][dname]))
    with open(os.path.join(outdir, "docs.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--tok", action="append", default=[], help="NAME=DIR")
    ap.add_argument("--fixture", action="append", default=[], help="DIR of a test model's tokenizer")
    ap.add_argument("--doc", action="append", default=[], help="NAME=FILE, a whole document")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    import tokenizers
    print("tokenizers", tokenizers.__version__)
    components(a.outdir)
    unit(a.outdir)
    texts = load_inputs()
    toks = [spec.split("=", 1) for spec in a.tok]
    for name, d in toks:
        real_tokenizer(name, d, texts, a.outdir)
    for d in a.fixture:
        real_tokenizer(fixture_name(d), d, texts, a.outdir)
    if a.doc:
        documents(toks, [spec.split("=", 1) for spec in a.doc], a.outdir)


if __name__ == "__main__":
    sys.exit(main())
