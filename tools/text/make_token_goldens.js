#!/usr/bin/env node
// make_token_goldens.js: the Hugging Face tokenizers 0.23.2 oracle through its official Node binding
// (npm "tokenizers", fetched by scripts/fetch-tokenizers.sh into .cache/tokenizers/hf-node), so
// goldens can be made on any machine. Writes the same .gold format as make_token_goldens.py:
//   node make_token_goldens.js gold DIR INPUTS OUT.gold.gz   one line per input of INPUTS, 6 columns
//   node make_token_goldens.js docs OUT.json NAME=DIR... -- DOC=FILE...
// The binding cannot set encode_special_tokens; columns 3 and 4 are made by encoding with a copy of
// the tokenizer whose special added tokens are left out, which is the same thing when every special
// token is in the model's vocabulary (so no id moves) and no other added token overlaps one. A
// tokenizer without that property is refused.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const ROOT = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(process.env.HF_TOKENIZERS_NODE || path.join(ROOT, '.cache', 'tokenizers', 'hf-node'));

function readInputs(file) {
  let text = fs.readFileSync(file);
  if (file.endsWith('.gz')) text = zlib.gunzipSync(text);
  text = text.toString('utf8').trim();
  const values = text.startsWith('[') ? JSON.parse(text) : text.split('\n').map((l) => JSON.parse(l));
  // {"hex": ...}: bytes, read as Python's bytes.decode("utf-8", "replace") (Node's decoder agrees)
  return values.map((v) => (typeof v === 'string' ? v : Buffer.from(v.hex, 'hex').toString('utf8')));
}

function withoutSpecials(json) {
  const t = JSON.parse(json);
  const vocab = t.model.vocab;
  const specials = t.added_tokens.filter((a) => a.special);
  for (const s of specials)
    if (!(s.content in vocab) || vocab[s.content] !== s.id)
      throw new Error(`special token ${s.content} is not in the model vocabulary: columns 3-4 need Python`);
  for (const a of t.added_tokens)
    if (!a.special && specials.some((s) => s.content.includes(a.content) || a.content.includes(s.content)))
      throw new Error(`added token ${a.content} overlaps a special token: columns 3-4 need Python`);
  t.added_tokens = t.added_tokens.filter((a) => !a.special);
  return Tokenizer.fromString(JSON.stringify(t));
}

// FNV-1a 64 of tokenizer.json: test_golden and test_doc compare it with the file they load.
function fnv1a64(buf) {
  let h = 0xcbf29ce484222325n;
  for (const byte of buf) h = ((h ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return h.toString(16).padStart(16, '0');
}

const ids = (e) => Array.from(e.getIds()).join(' ');

async function gold(dir, inputs, out) {
  const json = fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8');
  const tok = Tokenizer.fromString(json);
  const plain = withoutSpecials(json);
  const lines = ['#fnv1a64=' + fnv1a64(fs.readFileSync(path.join(dir, 'tokenizer.json')))];
  for (const t of readInputs(inputs)) {
    const a = await tok.encode(t, null, { addSpecialTokens: true });
    const b = await tok.encode(t, null, { addSpecialTokens: false });
    const c = ids(await plain.encode(t, null, { addSpecialTokens: true }));
    const d = ids(await plain.encode(t, null, { addSpecialTokens: false }));
    const e = await tok.decode(Array.from(a.getIds()), true);
    const f = await tok.decode(Array.from(a.getIds()), false);
    lines.push([ids(a), ids(b), c === ids(a) ? '=' : c, d === ids(b) ? '=' : d,
      e === t ? '=' : JSON.stringify(e), f === t ? '=' : JSON.stringify(f)].join('\t'));
  }
  fs.writeFileSync(out, zlib.gzipSync(lines.join('\n') + '\n', { level: 9 }));
  console.log(`${out}: ${lines.length - 1} lines`);
}

function crc32(buf) {
  let c, crc = 0xffffffff;
  for (const byte of buf) {
    c = (crc ^ byte) & 0xff;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    crc = (crc >>> 8) ^ c;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

async function docs(out, toks, files) {
  const result = {};
  for (const [name, dir] of toks) {
    const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
    result[name] = { tokenizer_fnv1a64: fnv1a64(fs.readFileSync(path.join(dir, 'tokenizer.json'))) };
    for (const [dname, file] of files) {
      const text = fs.readFileSync(file).toString('utf8');
      const t0 = process.hrtime.bigint();
      const e = await tok.encode(text, null, { addSpecialTokens: true });
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      const list = Array.from(e.getIds());
      const back = await tok.decode(list, true);
      result[name][dname] = { bytes: Buffer.byteLength(text), tokens: list.length,
        crc32: crc32(Buffer.from(list.join(' '))), roundtrip: back === text, hf_seconds: Math.round(dt * 1000) / 1000 };
      console.log(name, dname, JSON.stringify(result[name][dname]));
    }
  }
  fs.writeFileSync(out, JSON.stringify(result, null, 1) + '\n');
}

async function main() {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === 'gold' && args.length === 3) return gold(...args);
  if (mode === 'docs' && args.includes('--')) {
    const k = args.indexOf('--');
    const pairs = (xs) => xs.map((s) => [s.slice(0, s.indexOf('=')), s.slice(s.indexOf('=') + 1)]);
    return docs(args[0], pairs(args.slice(1, k)), pairs(args.slice(k + 1)));
  }
  console.error('usage: make_token_goldens.js gold DIR INPUTS OUT.gold.gz | docs OUT.json NAME=DIR... -- DOC=FILE...');
  process.exit(2);
}

main().catch((e) => { console.error(e.message); process.exit(1); });
