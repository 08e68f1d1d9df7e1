// hf_oracle.js: what the differential tests share: Hugging Face tokenizers' Node binding (fetched by
// scripts/fetch-tokenizers.sh into .cache/tokenizers/hf-node) and a seeded generator (mulberry32).
'use strict';
const fs = require('fs');
const path = require('path');

const bindingDir = path.resolve(__dirname, '..', '..', '.cache', 'tokenizers', 'hf-node');

// The binding's Tokenizer class; exits 77 (skipped) when it, or any of the required files, is missing.
function hfTokenizerClass(required = []) {
  const missing = [path.join(bindingDir, 'index.js'), ...required].filter((f) => !fs.existsSync(f));
  if (missing.length) {
    console.log(`SKIP: missing ${missing.join(', ')}`);
    process.exit(77);
  }
  return require(bindingDir).Tokenizer;
}

function seeded(seed) {
  let state = Number(seed) >>> 0;
  const rand = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { rand, pick: (xs) => xs[Math.floor(rand() * xs.length)] };
}

module.exports = { hfTokenizerClass, seeded };
