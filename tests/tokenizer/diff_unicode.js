#!/usr/bin/env node
// diff_unicode.js: every Unicode code point through the components whose behaviour depends on
// Unicode data (regex classes, ByteLevel's GPT-2 split, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer, NFC/NFD/NFKC/NFKD, Lowercase, StripAccents), in HF tokenizers
// 0.23.2 (its Node binding) and in cinfer (test_components checks HF's outputs).
// usage: diff_unicode.js TEST_COMPONENTS   Exits 77 (skipped) when the binding is missing.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');

const binding = path.resolve(__dirname, '..', '..', '.cache', 'tokenizers', 'hf-node');
if (!fs.existsSync(path.join(binding, 'index.js'))) {
  console.log(`SKIP: ${binding} is missing`);
  process.exit(77);
}
const { Tokenizer } = require(binding);
const QWEN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const split = (re) => ({ type: 'Split', pattern: { Regex: re }, behavior: 'Isolated', invert: false });
const configs = [
  ['pre_tokenizer', split(QWEN)], ['pre_tokenizer', split('\\w+|[^\\w\\s]+')], ['pre_tokenizer', split('\\d+|\\D')],
  ['pre_tokenizer', split('\\p{Lu}+|\\p{Ll}+|\\p{Lo}+|\\p{M}+|\\p{P}+|\\p{S}+|\\p{Z}+')],
  ['pre_tokenizer', { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }],
  ['pre_tokenizer', { type: 'Digits', individual_digits: true }], ['pre_tokenizer', { type: 'Punctuation', behavior: 'Isolated' }],
  ['pre_tokenizer', { type: 'Whitespace' }], ['pre_tokenizer', { type: 'WhitespaceSplit' }],
  ['pre_tokenizer', { type: 'BertPreTokenizer' }],
  ...['NFC', 'NFD', 'NFKC', 'NFKD', 'Lowercase', 'StripAccents'].map((t) => ['normalizer', { type: t }]),
];
const seps = ['a', ' ', '1', "'S", '\n', ' x', '\u0301'];
const out = [];
for (const [kind, config] of configs) {
  const tok = Tokenizer.fromString(JSON.stringify({ version: '1.0', added_tokens: [], normalizer: null, pre_tokenizer: null,
    post_processor: null, decoder: null, [kind]: config, model: { type: 'BPE', vocab: {}, merges: [] } }));
  const cases = [];
  for (let base = 0; base < 0x110000; base += 256) {
    let s = '';
    for (let cp = Math.max(base, 1); cp < base + 256 && cp < 0x110000; cp++)
      if (cp < 0xd800 || cp >= 0xe000) s += seps[cp % seps.length] + String.fromCodePoint(cp);
    if (!s) continue;
    cases.push([s, kind === 'normalizer' ? tok.getNormalizer().normalizeString(s)
      : tok.getPreTokenizer().preTokenizeString(s).map(([p]) => p)]);
  }
  out.push(JSON.stringify({ kind, config, cases }));
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'diff_unicode-'));
const file = path.join(tmp, 'unicode.jsonl');
fs.writeFileSync(file, out.join('\n') + '\n');
const r = spawnSync(process.argv[2], [file], { stdio: 'inherit' });
fs.rmSync(tmp, { recursive: true });
process.exit(r.status === null ? 1 : r.status);
