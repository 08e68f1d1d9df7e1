#!/usr/bin/env node
// diff_hf.js: differential test of cinfer's tokenizer against Hugging Face tokenizers 0.23.2 (its
// Node binding, fetched by scripts/fetch-tokenizers.sh): seeded random strings mixing scripts,
// whitespace, digits, emoji, combining marks and the tokenizer's own added tokens, encoded by both
// (ids with special tokens, as tokenizer(text)["input_ids"]) and compared.
// usage: diff_hf.js CLI TOKENIZER_DIR COUNT SEED   (CLI: a program with the tokenize verb)
// Exits 77 (skipped) when the binding or the tokenizer is missing.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const [cli, dir, count, seed] = process.argv.slice(2);
const { hfTokenizerClass, seeded } = require('./hf_oracle');
const Tokenizer = hfTokenizerClass([path.join(dir, 'tokenizer.json')]);
const { rand, pick } = seeded(seed);

const POOLS = [
  'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', ' ', '   \t\n\r',
  '.,;:!?\'"()[]{}<>|/\\-_=+*&^%$#@~`', '\u00a0\u2003\u3000\u0085\u200b\ufeff\u2028\u2029\u180e\u202f',
  'éèêëàâäôöûüçñßøåæœİıŉǅ', '\u0301\u0300\u0308\u0327\u0303\u0344', '你好世界中文字符测试漢字',
  '日本語カタカナひらがなー', '한국어문장각', 'Привет мир', 'ελληνικάΣσς', 'עברית', 'العربية٣٤٥',
  'हिन्दी१२३', 'ไทย', ['😀', '👍🏽', '❤️', '🇺🇸', '\u200d', '🏳️‍🌈', '👨‍👩‍👧', '🫠', '1️⃣'],
  '▁', '①②½²ﬁＡ１', ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", '’s'], ['<0x41>', '<0xZZ>', '<unk>'],
];
const tokJson = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
const added = (tokJson.added_tokens || []).map((a) => a.content);

function randomText() {
  const pools = [];
  for (let k = 1 + Math.floor(rand() * 4); k > 0; k--) pools.push(pick(POOLS));
  let s = '';
  for (let n = 1 + Math.floor(rand() * (rand() < 0.1 ? 400 : 60)); n > 0; n--) {
    const r = rand();
    if (r < 0.03 && added.length) s += pick(added);
    else if (r < 0.04 && added.length) s += pick(added).slice(0, -1); // a near miss
    else s += pick(Array.from(pick(pools)));
  }
  return s;
}

(async () => {
  const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const texts = [];
  for (let i = 0; i < Number(count); i++) texts.push(randomText());
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'diff_hf-'));
  const jsonl = path.join(tmp, 'in.jsonl');
  fs.writeFileSync(jsonl, texts.map((t) => JSON.stringify(t)).join('\n') + '\n');
  const ours = execFileSync(cli, ['tokenize', '--model', dir, '--jsonl', jsonl], { maxBuffer: 1 << 30 })
    .toString().split('\n');
  fs.rmSync(tmp, { recursive: true });
  let pass = 0, fail = 0;
  for (let i = 0; i < texts.length; i++) {
    const want = Array.from((await tok.encode(texts[i], null, { addSpecialTokens: true })).getIds()).join(' ');
    if (ours[i] === want) pass++;
    else if (fail++ < 5) console.log(`FAIL: ${JSON.stringify(texts[i])}\n  ours ${ours[i]}\n  HF   ${want}`);
  }
  console.log(`${pass} passed, ${fail} failed`);
  process.exit(fail ? 1 : 0);
})();
