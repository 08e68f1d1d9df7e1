// http_vs_lib.mjs: decode tokens/s of one greedy stream through `cinfer serve` (SSE over loopback, timed by
// the client from the first to the last token's chunk) against the library directly (`cinfer run --stats`,
// the engine's own figure), same model, prompt and length, end-of-sequence ignored; alternated --rounds
// times, medians and their ratio printed.
// usage: node bench/http_vs_lib.mjs [--bin build/cinfer] [--model DIR] [--gen 256] [--rounds 5] [--threads N] [--device cpu|cuda] [--json]
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    bin: { type: 'string' }, model: { type: 'string' },
    gen: { type: 'string', default: '256' }, rounds: { type: 'string', default: '5' },
    prompt: { type: 'string', default: 'And God said, Let there be light: and there was light.' },
    threads: { type: 'string' }, device: { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});
if (opt.bin) process.env.CINFER_BIN = opt.bin;
if (opt.model) process.env.CINFER_MODEL = opt.model;
// the harness reads CINFER_BIN and CINFER_MODEL when it loads
const { binary, modelDir, startServer } = await import('../tests/server/js/harness.mjs');
const GEN = Number(opt.gen);
const threadArgs = [...(opt.threads ? ['--threads', opt.threads] : []), ...(opt.device ? ['--device', opt.device] : [])];
const ROUNDS = Number(opt.rounds);

function library() {
  const r = spawnSync(binary, ['run', '--model', modelDir, '--prompt', opt.prompt, '--max-tokens', String(GEN),
    '--ignore-eos', '--temperature', '0', '--stats', ...threadArgs], { encoding: 'utf8' });
  const m = /(\d+) tokens .*decode ([\d.]+) tokens\/s/.exec(r.stderr);
  if (r.status !== 0 || !m) throw new Error(`cinfer run failed (${r.status}): ${r.stderr}`);
  if (Number(m[1]) !== GEN) throw new Error(`cinfer run made ${m[1]} tokens, not ${GEN}`);
  return { tps: Number(m[2]), text: r.stdout };
}

async function http(server, extra) {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: opt.prompt, max_tokens: GEN, temperature: 0, stream: true, stream_options: { include_usage: true }, ...extra }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let first = null;
  let last = null;
  let tokens = null;
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) tokens = j.usage.completion_tokens;
      if (j.choices?.[0]?.text) { const t = performance.now(); first ??= t; last = t; text += j.choices[0].text; }
    }
  }
  return { tokens, tps: (tokens - 1) / ((last - first) / 1000), text };
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };

const server = await startServer({ args: threadArgs });
try {
  // ignore_eos as llama-server and vLLM take it; a logit_bias against the end tokens when it is not honoured.
  let extra = { ignore_eos: true };
  const probe = await http(server, extra);
  if (probe.tokens !== GEN) extra = { logit_bias: { 0: -100, 2: -100 } };
  const lib = [];
  const web = [];
  let same = null;
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 ? ['http', 'lib'] : ['lib', 'http'];
    for (const which of order) {
      if (which === 'lib') lib.push(library());
      else {
        const h = await http(server, extra);
        if (h.tokens !== GEN) throw new Error(`the server made ${h.tokens} tokens, not ${GEN}`);
        web.push(h);
      }
    }
    if (!opt.json) console.log(`round ${r + 1}: library ${lib.at(-1).tps.toFixed(1)} tok/s, HTTP ${web.at(-1).tps.toFixed(1)} tok/s`);
  }
  same = lib[0].text.startsWith(web[0].text) || web[0].text === lib[0].text.trimEnd();
  const ml = median(lib.map((x) => x.tps));
  const mh = median(web.map((x) => x.tps));
  const out = {
    model: modelDir, prompt: opt.prompt, gen: GEN, rounds: ROUNDS, eos_suppressed_by: Object.keys(extra)[0],
    library_decode_tps_median: Number(ml.toFixed(1)), http_decode_tps_median: Number(mh.toFixed(1)),
    ratio_http_over_library: Number((mh / ml).toFixed(4)), lost_percent: Number((100 * (1 - mh / ml)).toFixed(2)),
    same_text: same,
  };
  if (opt.json) console.log(JSON.stringify(out));
  else {
    console.log(`median decode: library ${out.library_decode_tps_median} tok/s, HTTP ${out.http_decode_tps_median} tok/s, ` +
      `ratio ${out.ratio_http_over_library} (${out.lost_percent}% lost); same text: ${same}`);
  }
} finally {
  await server.stop();
}
