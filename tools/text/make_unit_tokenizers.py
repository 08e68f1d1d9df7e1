#!/usr/bin/env python3
"""make_unit_tokenizers.py: writes the small hand-made tokenizer.json files under
tests/fixtures/tokenizer/unit/ that the tokenizer unit tests and goldens use. Each exercises a
different part of the pipeline (byte-level BPE with added-token flags, SentencePiece-style BPE with
byte fallback, Metaspace with unk fusing, word suffix/prefix BPE with Whitespace). Vocabularies come
from a tiny deterministic BPE trainer run over a fixed text, so the files are reproducible."""
import collections
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "unit")

TEXT = """The quick brown fox jumps over the lazy dog. Hello world, hello there!
It's a test of the tokenizer: numbers 12345 and 67890, words like running, jumped, tokenization.
Don't stop believing; we'll see what they've done. Ünïcödé café naïve résumé 你好世界 日本語
   indented line\twith tab\nnew line  two spaces    four spaces. MIXED case Text HERE.
"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train(words, base, n_merges, join=lambda a, b: a + b):
    """words: list of symbol lists. Returns merges (list of pairs) learned greedily, ties broken by
    the pair's text so the result does not depend on dict order. join makes the merged symbol."""
    vocab = collections.Counter(tuple(w) for w in words)
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in vocab.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        nv = collections.Counter()
        for w, c in vocab.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(join(w[i], w[i + 1]))
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nv[tuple(out)] += c
        vocab = nv
    return merges


def build_vocab(specials, base, merges, join=lambda a, b: a + b):
    vocab = {}
    for t in specials + base + [join(a, b) for a, b in merges]:
        if t not in vocab:
            vocab[t] = len(vocab)
    return vocab


def added(id_, content, special=True, lstrip=False, rstrip=False, single_word=False, normalized=None):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": (not special) if normalized is None else normalized, "special": special}


def tokenizer(model, added_tokens=(), normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def bpe(vocab, merges, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": merges}
    m.update(kw)
    return m


def template(single, specials):
    return {"type": "TemplateProcessing", "single": single,
            "pair": single + [{"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in specials}}


def bytelevel_tok():
    b2u = bytes_to_unicode()
    base = [b2u[b] for b in range(256)]
    words = []
    for w in TEXT.replace("\n", " ").split(" "):
        words.append([b2u[b] for b in (" " + w).encode()])
    merges = train(words, base, 220)
    vocab = build_vocab([], base, merges)
    n = len(vocab)
    toks = [added(n, "<s>"), added(n + 1, "</s>"), added(n + 2, "<|special|>"),
            added(n + 3, "[L]", special=True, lstrip=True), added(n + 4, "[R]", special=True, rstrip=True),
            added(n + 5, "word", special=False, single_word=True, normalized=False),
            added(n + 6, "MiXeD", special=False, normalized=True),
            added(n + 7, "<plain>", special=False, normalized=False),
            added(n + 8, "[LR]", special=False, lstrip=True, rstrip=True, normalized=False),
            added(n + 9, "<|special|>x", special=False, normalized=False)]
    bos = [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
           {"SpecialToken": {"id": "</s>", "type_id": 0}}]
    return tokenizer(bpe(vocab, [[a, b] for a, b in merges]), toks,
                     normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
                     pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                    "use_regex": True},
                     post_processor={"type": "Sequence", "processors": [
                         {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                         template(bos, [("<s>", n), ("</s>", n + 1)])]},
                     decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                              "use_regex": True})


def spm_tok(byte_fallback=True, legacy_merges=False):
    chars = sorted(set(TEXT.replace(" ", "▁")) - {"\n", "\t"})
    words = [list("▁" + w) for w in TEXT.split()]
    merges = train(words, chars, 150)
    specials = ["<unk>", "<s>", "</s>"]
    bytes_ = ["<0x%02X>" % b for b in range(256)] if byte_fallback else []
    vocab = build_vocab(specials + bytes_, chars, merges)
    toks = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"),
            added(len(vocab), "<end_of_turn>"), added(len(vocab) + 1, "\n\n", special=False, normalized=False)]
    bos = [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    mj = ["%s %s" % (a, b) for a, b in merges] if legacy_merges else [[a, b] for a, b in merges]
    return tokenizer(bpe(vocab, mj, unk_token="<unk>", fuse_unk=True, byte_fallback=byte_fallback), toks,
                     normalizer={"type": "Sequence", "normalizers": [
                         {"type": "Prepend", "prepend": "▁"},
                         {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
                     post_processor=template(bos, [("<s>", 1)]),
                     decoder={"type": "Sequence", "decoders": [
                         {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                         {"type": "ByteFallback"}, {"type": "Fuse"},
                         {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})


def metaspace_tok():
    chars = sorted(set(TEXT.replace(" ", "▁").lower()) - {"\n", "\t", "你", "好", "世", "界", "日", "本", "語"})
    words = [list("▁" + w) for w in TEXT.lower().split()]
    merges = train(words, chars, 120)
    vocab = build_vocab(["<unk>", "<s>", "</s>"], chars, merges)
    toks = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"),
            added(len(vocab), "<mask>", special=True, lstrip=True),
            added(len(vocab) + 1, "[sep]", special=False, rstrip=True, normalized=True)]
    return tokenizer(bpe(vocab, [[a, b] for a, b in merges], unk_token="<unk>", fuse_unk=True), toks,
                     normalizer={"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                                                     {"type": "Strip", "strip_left": False,
                                                                      "strip_right": True}]},
                     pre_tokenizer={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                                    "split": True},
                     post_processor={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                                     "trim_offsets": True, "add_prefix_space": True},
                     decoder={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True})


def suffix_tok():
    join = lambda a, b: a + b[2:]
    words = []
    for w in TEXT.split():
        words.append([("##" if i else "") + c + ("</w>" if i == len(w) - 1 else "") for i, c in enumerate(w)])
    sym = sorted({x for w in words for x in w})
    merges = train(words, sym, 150, join)
    vocab = build_vocab(["[UNK]", "[CLS]", "[SEP]"], sym, merges, join)
    toks = [added(0, "[UNK]"), added(1, "[CLS]"), added(2, "[SEP]")]
    return tokenizer(bpe(vocab, [[a, b] for a, b in merges], unk_token="[UNK]", continuing_subword_prefix="##",
                         end_of_word_suffix="</w>", ignore_merges=True), toks,
                     pre_tokenizer={"type": "Sequence", "pretokenizers": [
                         {"type": "Whitespace"}, {"type": "Digits", "individual_digits": True}]},
                     post_processor={"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
                     decoder={"type": "BPEDecoder", "suffix": "</w>"})


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, tok in [("bytelevel", bytelevel_tok()), ("spm", spm_tok()), ("spm_legacy", spm_tok(False, True)),
                      ("metaspace", metaspace_tok()), ("suffix", suffix_tok())]:
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print("make_unit_tokenizers: wrote", OUT)


if __name__ == "__main__":
    main()
