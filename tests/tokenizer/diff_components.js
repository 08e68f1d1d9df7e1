#!/usr/bin/env node
// diff_components.js: differential test of the normalizers, pre-tokenizers and decoders against
// Hugging Face tokenizers 0.23.2 (its Node binding): seeded random strings through every
// configuration of components.jsonl.gz, HF's outputs written as a components file that
// test_components then checks.
// usage: diff_components.js TEST_COMPONENTS COMPONENTS_FILE COUNT SEED
// Exits 77 (skipped) when the binding is missing.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const zlib = require('zlib');
const { spawnSync } = require('child_process');

const [testBin, componentsFile, count, seed] = process.argv.slice(2);
const { hfTokenizerClass, seeded } = require('./hf_oracle');
const Tokenizer = hfTokenizerClass();
const { rand, pick } = seeded(seed);
const POOL = Array.from('abcXYZ019 \t\n\r.,;!?\'"-_()[]$+<>|@#\u00a0\u2003\u3000\u0085\u200b\ufeff\u180e\u2028' +
  'éÅßİıŉǅǄΣσςΐﬁﬀ①½²Ⅻｆ１\u0301\u0308\u0327\u0344\u1100\u1161\u11a8한국你好日本語カ٣४ไ▁😀👍🏽\u200d❤️');
const TOKENS = ['<0x41>', '<0xE2>', '<0x82>', '<0xAC>', '<0xZZ>', '<0x+A>', '▁', '▁▁', 'Ġ', 'Ċ', 'ĠÃ©', 'Ã', '</w>',
  'x', '##', '<s>', ' ', ''];
const randomText = () => Array.from({ length: Math.floor(rand() * 24) }, () => pick(POOL)).join('');
const randomTokens = () => Array.from({ length: Math.floor(rand() * 8) }, () =>
  (rand() < 0.5 ? pick(TOKENS) : Array.from(randomText()).slice(0, 4).join('')));

function shell(kind, cfg) {
  return Tokenizer.fromString(JSON.stringify({ version: '1.0', added_tokens: [], normalizer: null, pre_tokenizer: null,
    post_processor: null, decoder: null, [kind]: cfg, model: { type: 'BPE', vocab: {}, merges: [] } }));
}

(async () => {
  const lines = zlib.gunzipSync(fs.readFileSync(componentsFile)).toString('utf8').trim().split('\n').map((l) => JSON.parse(l));
  const out = [];
  for (const { kind, config } of lines) {
    const tok = shell(kind, config);
    const cases = [];
    for (let i = 0; i < Number(count); i++) {
      try {
        if (kind === 'normalizer') {
          const x = randomText();
          cases.push([x, tok.getNormalizer().normalizeString(x)]);
        } else if (kind === 'pre_tokenizer') {
          const x = randomText();
          cases.push([x, tok.getPreTokenizer().preTokenizeString(x).map(([p]) => p)]);
        } else {
          let x = randomTokens();
          // HF's Strip decoder panics (and the binding aborts) on a token shorter than it cuts
          for (const d of config.type === 'Sequence' ? config.decoders : [config])
            if (d.type === 'Strip') x = x.filter((t) => Array.from(t).length >= d.start + d.stop);
          cases.push([x, tok.getDecoder().decode(x)]);
        }
      } catch (e) { /* HF failed on this input (a panic): nothing to compare */ }
    }
    out.push(JSON.stringify({ kind, config, cases }));
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'diff_components-'));
  const file = path.join(tmp, 'random.jsonl');
  fs.writeFileSync(file, out.join('\n') + '\n');
  const r = spawnSync(testBin, [file], { stdio: 'inherit' });
  fs.rmSync(tmp, { recursive: true });
  process.exit(r.status === null ? 1 : r.status);
})();
