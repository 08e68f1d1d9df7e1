#!/usr/bin/env node
// make_unicode_tables.js: writes src/text/tok_unicode_tables.c, the Unicode data that makes the
// tokenizer agree with Hugging Face tokenizers 0.23.2 on every code point. HF mixes several Unicode
// versions (Oniguruma and Rust's standard library: 16; the crates behind its normalizers and
// Punctuation: older), none of which is this system's PCRE2 or utf8proc. So each set is read from HF
// itself, through its Node binding (scripts/fetch-tokenizers.sh), one code point at a time:
//   - for \p{X} in regexes: the members Oniguruma has and PCRE2 does not (unassigned there);
//   - char::is_numeric (Digits), is_punc (Punctuation, BertPreTokenizer), char::is_whitespace and
//     the regex crate's \w (Whitespace, single_word), combining marks (StripAccents) as ranges;
//   - Lowercase: every code point HF's lowercasing changes;
//   - NFD/NFKD/NFC/NFKC: the code points utf8proc rewrites and HF leaves alone (HF's tables are older),
//     and the marks HF's tables give no combining class (so HF never reorders across them).
// It also checks the regex escapes tok_regex.c rewrites (\s, \d, \w, \h) against Oniguruma.
// Needs a C compiler with PCRE2 and utf8proc. usage: node tools/text/make_unicode_tables.js
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const ROOT = path.resolve(__dirname, '..', '..');
const OUT = path.join(ROOT, 'src', 'text', 'tok_unicode_tables.c');
const { Tokenizer } = require(path.join(ROOT, '.cache', 'tokenizers', 'hf-node'));

const PROPS = ['L', 'Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'M', 'Mn', 'Mc', 'Me', 'N', 'Nd', 'Nl', 'No', 'P', 'Pc', 'Pd',
  'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'S', 'Sm', 'Sc', 'Sk', 'So', 'Z', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf', 'Co', 'Alphabetic'];

function allCodePoints() {
  const out = [];
  for (let cp = 1; cp < 0x110000; cp++) if (cp < 0xd800 || cp >= 0xe000) out.push(cp);
  return out;
}
const ALL = allCodePoints();

function tokenizer(parts) {
  return Tokenizer.fromString(JSON.stringify(Object.assign({ version: '1.0', added_tokens: [], normalizer: null,
    pre_tokenizer: null, post_processor: null, decoder: null, model: { type: 'BPE', vocab: {}, merges: [] } }, parts)));
}
const preTok = (cfg) => tokenizer({ pre_tokenizer: cfg }).getPreTokenizer();
const normalizer = (cfg) => tokenizer({ normalizer: cfg }).getNormalizer();
const ch = String.fromCodePoint;

// Code points HF's Oniguruma matches with a one-character pattern: each code point stands between
// two separators the pattern never matches, and a Split with behavior Removed drops the matched ones.
function onig(pattern) {
  const pt = preTok({ type: 'Split', pattern: { Regex: pattern }, behavior: 'Removed', invert: false });
  const sep = pt.preTokenizeString('#').length ? '#' : 'a';
  const out = [];
  for (let base = 0; base < 0x110000; base += 4096) {
    let s = sep;
    const cps = [];
    for (let cp = Math.max(base, 1); cp < base + 4096 && cp < 0x110000; cp++) {
      if (cp >= 0xd800 && cp < 0xe000) continue;
      cps.push(cp);
      s += ch(cp) + sep;
    }
    const kept = new Set(Array.from(pt.preTokenizeString(s).map(([x]) => x).join('')));
    for (const cp of cps) if (!kept.has(ch(cp))) out.push(cp);
  }
  return out;
}

const helperDir = fs.mkdtempSync(path.join(os.tmpdir(), 'unicode-'));
const helper = path.join(helperDir, 'unicode_dump');
execFileSync('cc', ['-O2', '-o', helper, path.join(__dirname, 'unicode_dump.c'), '-lpcre2-8', '-lutf8proc']);
const dump = (...args) => execFileSync(helper, args, { maxBuffer: 1 << 28 }).toString().trim().split('\n').filter((x) => x);

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
function check(what, a, b) {
  if (!same(a, b)) throw new Error(`${what}: Oniguruma differs from what tok_regex.c assumes; update it`);
}
const WS = [9, 10, 11, 12, 13, 32, 0x85, 0xa0, 0x1680, ...Array.from({ length: 11 }, (_, i) => 0x2000 + i), 0x2028,
  0x2029, 0x202f, 0x205f, 0x3000];
check('\\s', onig('\\s'), WS);
check('\\d', onig('\\d'), onig('\\p{Nd}'));
check('\\w', onig('\\w'), onig('[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}]'));
check('\\h', onig('\\h'), onig('[0-9a-fA-F]'));

function ranges(cps) {
  const r = [];
  for (const c of cps) {
    if (r.length && r[r.length - 1][1] === c - 1) r[r.length - 1][1] = c;
    else r.push([c, c]);
  }
  return r;
}
const pcreClass = (cps) => ranges(cps).map(([a, b]) => (a === b ? `\\\\x{${a.toString(16)}}`
  : `\\\\x{${a.toString(16)}}-\\\\x{${b.toString(16)}}`)).join('');
const hex = (x) => '0x' + x.toString(16).toUpperCase();
function rangeTable(name, cps) {
  const r = ranges(cps);
  const body = r.map(([a, b]) => `{${hex(a)}, ${hex(b)}}`);
  const lines = [];
  for (let i = 0; i < body.length; i += 6) lines.push('    ' + body.slice(i, i + 6).join(', ') + ',');
  return `const tk_range ${name}[] = {\n${lines.join('\n')}\n};\nconst size_t ${name}_n = ${r.length};\n`;
}

// regex properties
const extraRows = [];
for (const p of PROPS) {
  const o = onig(`\\p{${p}}`);
  const c = new Set(dump('pcre', `\\p{${p}}`).map(Number));
  const extra = o.filter((x) => !c.has(x));
  if (extra.length) extraRows.push(`    {"${p}", "${pcreClass(extra)}"},`);
  console.log(`\\p{${p}}: ${extra.length} code points added`);
}

// character predicates, each probed through the component that uses it
function probe(pt, build, test) {
  const out = [];
  for (const cp of ALL) if (test(pt.preTokenizeString(build(cp)).map(([x]) => x), cp)) out.push(cp);
  return out;
}
const numeric = probe(preTok({ type: 'Digits', individual_digits: true }), (cp) => 'a' + ch(cp) + 'a', (p) => p.length === 3);
const punct = probe(preTok({ type: 'Punctuation', behavior: 'Isolated' }), (cp) => 'a' + ch(cp) + 'a', (p) => p.length === 3);
const space = probe(preTok({ type: 'WhitespaceSplit' }), (cp) => 'a' + ch(cp) + 'a', (p) => p.length === 2);
const word = probe(preTok({ type: 'Whitespace' }), (cp) => 'a' + ch(cp), (p, cp) => p.length === 1 && p[0] === 'a' + ch(cp));
const strip = normalizer({ type: 'StripAccents' });
const mark = ALL.filter((cp) => strip.normalizeString('a' + ch(cp)) === 'a');
check('char::is_whitespace', space, WS);

const lower = normalizer({ type: 'Lowercase' });
const lowerRows = [];
for (const cp of ALL) {
  const l = Array.from(lower.normalizeString(ch(cp))).map((c) => c.codePointAt(0));
  if (l.length !== 1 || l[0] !== cp) {
    if (l.length > 2) throw new Error(`lowercase of ${cp} has ${l.length} characters`);
    lowerRows.push(`{${hex(cp)}, ${hex(l[0])}, ${l.length > 1 ? hex(l[1]) : 0}}`);
  }
}

// normalization forms: where utf8proc changes a code point alone and HF does not
const keep = {};
for (const form of ['NFC', 'NFD', 'NFKC', 'NFKD']) {
  const nz = normalizer({ type: form });
  keep[form] = [];
  for (const line of dump('nf', form)) {
    const [cp, ...ours] = line.split(' ').map(Number);
    const hf = Array.from(nz.normalizeString(ch(cp))).map((c) => c.codePointAt(0));
    if (same(hf, ours)) continue;
    if (hf.length !== 1 || hf[0] !== cp) throw new Error(`${form} of ${cp}: HF and utf8proc differ otherwise than by HF keeping it`);
    keep[form].push(cp);
  }
  console.log(`${form}: HF keeps ${keep[form].length} code points utf8proc rewrites`);
}
// marks utf8proc reorders and HF treats as starters: a mark of class c moves before U+0345 (class
// 240) when 0 < c < 240 and after U+0334 (class 1) when c > 1, so HF gives class 0 when neither moves
const nfd = normalizer({ type: 'NFD' }), nfkd = normalizer({ type: 'NFKD' });
const starters = [];
for (const cp of dump('ccc', '-').map(Number)) {
  const alone = nfd.normalizeString(ch(cp));
  if (nfd.normalizeString('a\u0345' + ch(cp)) !== 'a\u0345' + alone) continue;
  if (nfd.normalizeString('a' + ch(cp) + '\u0334') !== 'a' + alone + '\u0334') continue;
  if (alone !== ch(cp) || nfkd.normalizeString(ch(cp)) !== ch(cp)) throw new Error(`mark ${cp} decomposes in HF`);
  starters.push(cp);
}
console.log(`${starters.length} marks have no combining class in HF`);
for (const form of Object.keys(keep)) keep[form] = [...new Set([...keep[form], ...starters])].sort((a, b) => a - b);
fs.rmSync(helperDir, { recursive: true });

const lrows = [];
for (let i = 0; i < lowerRows.length; i += 4) lrows.push('    ' + lowerRows.slice(i, i + 4).join(', ') + ',');
fs.writeFileSync(OUT, `/* tok_unicode_tables.c: generated by tools/text/make_unicode_tables.js from Hugging Face tokenizers
 * 0.23.2; do not edit. The Unicode data of HF's components, code point by code point (see the
 * generator for what each table is). */
#include <string.h>

#include "text/tok_impl.h"

static const struct {
    const char *prop, *ranges;
} extra[] = {
${extraRows.join('\n')}
};

const char *tk_onig_extra(const char *prop, size_t len) {
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
        if (strlen(extra[i].prop) == len && memcmp(extra[i].prop, prop, len) == 0) return extra[i].ranges;
    return "";
}

${rangeTable('tk_numeric', numeric)}
${rangeTable('tk_punct', punct)}
${rangeTable('tk_word', word)}
${rangeTable('tk_mark', mark)}
${rangeTable('tk_keep_nfc', keep.NFC)}
${rangeTable('tk_keep_nfd', keep.NFD)}
${rangeTable('tk_keep_nfkc', keep.NFKC)}
${rangeTable('tk_keep_nfkd', keep.NFKD)}
const tk_lower tk_lowercase[] = {
${lrows.join('\n')}
};
const size_t tk_lowercase_n = ${lowerRows.length};
`.replace(/\{\n\n\};/g, '{{0, 0}};'));
console.log(`wrote ${OUT}`);
