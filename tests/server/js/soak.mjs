// soak.mjs: 64 clients against one `cinfer serve` for a while (--duration S, default 300), mixing streaming
// and whole replies, chat and completions, long and short prompts, disconnects mid-request and bad requests.
// Fails on any 5xx or request that neither completed nor was cancelled by its client, on resident memory
// that keeps growing after warm-up, and on sequences or KV blocks still held at the end. Prints requests
// served, p50/p99 time to first token and peak memory. `make soak` runs it; ctest runs a short variant.
import assert from 'node:assert/strict';
import { parseArgs } from 'node:util';
import { LONG_PROMPT, metrics, metricValue, modelName, NO_EOS, rssKiB, startServer, stopServer, waitIdle } from './harness.mjs';

const { values: opt } = parseArgs({
  options: {
    duration: { type: 'string', default: '300' },
    clients: { type: 'string', default: '64' },
    seed: { type: 'string', default: '1' },
  },
});
const DURATION_MS = Number(opt.duration) * 1000;
const CLIENTS = Number(opt.clients);

// A small seeded generator so a failing mix can be replayed with --seed.
let rngState = BigInt(Number(opt.seed) >>> 0) || 1n;
function rand() {
  rngState ^= rngState << 13n; rngState &= 0xffffffffffffffffn;
  rngState ^= rngState >> 7n;
  rngState ^= rngState << 17n; rngState &= 0xffffffffffffffffn;
  return Number(rngState & 0xffffffn) / 0x1000000;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const SHORT = ['Tell me a fortune.', 'Tell me a joke.', 'Continue: And it came to pass', 'What is love?', 'Hi'];
const LONGS = [LONG_PROMPT, `${LONG_PROMPT} ${LONG_PROMPT}`, `${LONG_PROMPT} ${LONG_PROMPT} ${LONG_PROMPT}`];
const BAD = [
  ['/v1/chat/completions', '{"messages": ['],
  ['/v1/chat/completions', '{"messages": 5}'],
  ['/v1/completions', '{"prompt": {"a": 1}}'],
  ['/v1/messages', '{"model": "m", "messages": []}'],
  ['/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: -3 })],
  ['/v1/no-such-route', '{}'],
];

const stats = {
  served: 0, completed: 0, cancelled: 0, rejected4xx: 0, busy429: 0, fail5xx: 0, broken: 0,
  byKind: {}, ttft: [], tokens: 0, failures: [],
};
const fail = (kind, why) => { stats.broken++; if (stats.failures.length < 20) stats.failures.push(`${kind}: ${why}`); };

let server;

async function doRequest() {
  const r = rand();
  const route = r < 0.5 ? 'chat' : r < 0.8 ? 'completions' : 'messages';
  const stream = rand() < 0.6;
  const long = rand() < 0.3;
  const prompt = long ? pick(LONGS) : pick(SHORT);
  const maxTokens = 1 + Math.floor(rand() * (rand() < 0.2 ? 200 : 40));
  const disconnect = rand() < 0.12;
  const bad = !disconnect && rand() < 0.08;
  const kind = bad ? 'bad' : `${route}${stream ? '-stream' : ''}${disconnect ? '-abort' : ''}`;
  stats.byKind[kind] = (stats.byKind[kind] || 0) + 1;

  let path;
  let body;
  if (bad) {
    [path, body] = pick(BAD);
  } else {
    const common = { model: modelName, max_tokens: maxTokens, temperature: rand() < 0.5 ? 0 : 0.8, stream };
    if (disconnect) Object.assign(common, { max_tokens: 600, logit_bias: route === 'messages' ? undefined : NO_EOS });
    if (route === 'chat') { path = '/v1/chat/completions'; body = { ...common, messages: [{ role: 'user', content: prompt }] }; }
    else if (route === 'completions') { path = '/v1/completions'; body = { ...common, prompt }; }
    else { path = '/v1/messages'; body = { ...common, messages: [{ role: 'user', content: prompt }] }; }
    if (stream && route !== 'messages') body.stream_options = { include_usage: true };
    body = JSON.stringify(body);
  }

  const ac = new AbortController();
  const t0 = performance.now();
  let res;
  try {
    if (disconnect && !stream) setTimeout(() => ac.abort(), 20 + rand() * 300);
    res = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: ac.signal });
  } catch (e) {
    if (ac.signal.aborted) { stats.cancelled++; return; }
    fail(kind, `fetch failed: ${e.cause?.code || e.message}`);
    return;
  }
  stats.served++;
  if (res.status >= 500) { stats.fail5xx++; fail(kind, `${res.status} ${(await res.text()).slice(0, 200)}`); return; }
  if (res.status === 429) { stats.busy429++; await res.arrayBuffer(); return; }
  if (bad) {
    if (res.status >= 400 && res.status < 500) stats.rejected4xx++; else fail(kind, `bad request answered ${res.status}`);
    await res.arrayBuffer();
    return;
  }
  if (res.status !== 200) { fail(kind, `${res.status} ${(await res.text()).slice(0, 200)}`); return; }

  try {
    if (!stream) {
      const j = await res.json();
      const u = j.usage;
      stats.tokens += u.completion_tokens ?? u.output_tokens;
      if (route === 'messages') assert.ok(j.stop_reason); else assert.ok(j.choices[0].finish_reason);
      stats.completed++;
      return;
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = '';
    let first = true;
    const abortAfter = disconnect ? 1 + Math.floor(rand() * 30) : Infinity;
    let pieces = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const s = dec.decode(value, { stream: true });
      text += s;
      if (first && /"(content|text)":"[^"]|"text_delta"/.test(text)) { stats.ttft.push(performance.now() - t0); first = false; }
      if (++pieces >= abortAfter) { ac.abort(); stats.cancelled++; return; }
    }
    if (route === 'messages') assert.match(text, /event: message_stop\ndata: [^\n]+\n\n$/, 'ends with message_stop');
    else assert.ok(text.endsWith('data: [DONE]\n\n'), 'ends with [DONE]');
    const usage = [...text.matchAll(/"(completion_tokens|output_tokens)":(\d+)/g)].at(-1);
    if (usage) stats.tokens += Number(usage[2]);
    stats.completed++;
  } catch (e) {
    if (ac.signal.aborted) { stats.cancelled++; return; }
    fail(kind, `reading the reply: ${e.message}`);
  }
}

async function client(deadline) {
  while (performance.now() < deadline) await doRequest();
}

function pct(a, p) {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))];
}

async function main() {
  server = await startServer();
  const t0 = performance.now();
  const deadline = t0 + DURATION_MS;
  const rss = [];
  const sampler = setInterval(() => rss.push({ t: performance.now() - t0, kib: rssKiB(server.pid) }), 500);
  await Promise.all(Array.from({ length: CLIENTS }, () => client(deadline)));
  clearInterval(sampler);
  const elapsed = (performance.now() - t0) / 1000;

  const idle = await waitIdle(server, 10000);
  const kvTotal = metricValue(idle, /^cinfer_kv_blocks_total$/);
  const kvUsed = metricValue(idle, /^cinfer_kv_blocks_used$/);
  const h = await fetch(`${server.url}/health`);
  assert.equal(h.status, 200);
  const m = await metrics(server);
  const ok = await stopServer(server, assert).then(() => true);

  // Memory: after a warm-up of a quarter of the run, the peak of the last third may not pass the peak of
  // the first third after warm-up by more than max(16 MiB, 10%).
  const warm = rss.filter((s) => s.t > DURATION_MS / 4);
  const third = Math.max(1, Math.floor(warm.length / 3));
  const early = Math.max(...warm.slice(0, third).map((s) => s.kib));
  const late = Math.max(...warm.slice(-third).map((s) => s.kib));
  const peak = Math.max(...rss.map((s) => s.kib));

  const summary = {
    seconds: Number(elapsed.toFixed(1)), clients: CLIENTS,
    requests_served: stats.served, completed: stats.completed, cancelled_by_client: stats.cancelled,
    bad_requests_rejected_4xx: stats.rejected4xx, busy_429: stats.busy429, server_errors_5xx: stats.fail5xx,
    broken: stats.broken, generated_tokens: stats.tokens,
    ttft_ms_p50: Number(pct(stats.ttft, 50).toFixed(1)), ttft_ms_p99: Number(pct(stats.ttft, 99).toFixed(1)),
    rss_mib_peak: Number((peak / 1024).toFixed(1)), rss_mib_after_warmup: Number((early / 1024).toFixed(1)),
    rss_mib_at_end: Number((late / 1024).toFixed(1)),
    kv_blocks_used_at_end: `${kvUsed} of ${kvTotal}`,
    server_requests_total: metricValue(m, /^cinfer_requests_total$/),
    by_kind: stats.byKind,
  };
  console.log(JSON.stringify(summary, null, 2));
  if (stats.failures.length) console.log(`failures:\n  ${stats.failures.join('\n  ')}`);
  assert.equal(stats.fail5xx, 0, 'no 5xx');
  assert.equal(stats.broken, 0, 'every request completed or was cancelled by its client');
  assert.ok(stats.completed > CLIENTS, 'requests completed');
  assert.ok(stats.cancelled > 0, 'some requests were cancelled');
  assert.ok(stats.rejected4xx > 0, 'bad requests were sent and refused');
  assert.ok(late <= early + Math.max(16 * 1024, early * 0.1), `resident memory grew after warm-up: ${early} -> ${late} KiB`);
  assert.equal(kvUsed, 0, 'all KV blocks released');
  assert.ok(ok);
}

main().catch(async (e) => {
  console.error(e);
  if (server && !server.exited) await server.stop().catch(() => {});
  process.exit(1);
});
