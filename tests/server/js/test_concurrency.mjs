// test_concurrency.mjs: 32 simultaneous streaming greedy requests give the same text as each run alone; a
// stream does not wait for another; clients that disconnect mid-stream leave the server healthy with no
// running sequence and all KV memory available.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { metricValue, modelName, NO_EOS, startServer, stopServer, waitIdle } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => { await stopServer(server, assert); });

const generations = (samples, outcome) => samples.filter((s) => s.name === 'cinfer_generations_total' && s.labels.outcome === outcome)
  .reduce((a, s) => a + s.value, 0);

const PROMPTS = [
  'Tell me a fortune.', 'Continue: And it came to pass', 'Continue: The committee met on Tuesday',
  'Tell me a joke.', 'Continue: Blessed are the meek', 'What is a computer?', 'Continue: In the year 1961',
  'Tell me a riddle.',
];

async function streamText(messages, maxTokens, extra = {}) {
  const s = await client.chat.completions.create({ model: modelName, messages, max_tokens: maxTokens, temperature: 0, stream: true, ...extra });
  let text = '';
  let finish = null;
  for await (const chunk of s) {
    const c = chunk.choices[0];
    if (c?.delta?.content) text += c.delta.content;
    if (c?.finish_reason) finish = c.finish_reason;
  }
  return { text, finish };
}

test('32 simultaneous greedy streams equal each run alone', async () => {
  const jobs = Array.from({ length: 32 }, (_, i) => ({
    messages: [{ role: 'user', content: `${PROMPTS[i % PROMPTS.length]}${i >= PROMPTS.length ? ` (${i})` : ''}` }],
    maxTokens: 16 + (i % 4) * 8,
  }));
  const alone = [];
  for (const j of jobs) alone.push(await streamText(j.messages, j.maxTokens));
  const together = await Promise.all(jobs.map((j) => streamText(j.messages, j.maxTokens)));
  for (let i = 0; i < jobs.length; i++) assert.deepEqual(together[i], alone[i], `request ${i} differs when batched`);
  await waitIdle(server);
});

test('a short stream finishes while a long one is still running', async () => {
  let longDone = false;
  const long = streamText([{ role: 'user', content: 'Continue: And it came to pass' }], 900, { logit_bias: NO_EOS }).then((r) => { longDone = true; return r; });
  await new Promise((r) => setTimeout(r, 200));
  await streamText([{ role: 'user', content: 'Tell me a fortune.' }], 4);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
  assert.equal(longDone, false, 'the short request waited for the long one');
  await long;
});

test('clients disconnecting mid-stream cancel their sequences', async () => {
  const before0 = await waitIdle(server);
  const cancelled0 = generations(before0, 'cancelled');
  const aborts = Array.from({ length: 8 }, async (_, i) => {
    const ac = new AbortController();
    const s = await client.chat.completions.create({
      model: modelName, messages: [{ role: 'user', content: `Continue: And it came to pass (${i})` }],
      max_tokens: 900, temperature: 0, stream: true, logit_bias: NO_EOS,
    }, { signal: ac.signal });
    let n = 0;
    try {
      for await (const chunk of s) {
        if (chunk.choices[0]?.delta?.content && ++n === 3 + i) ac.abort();
      }
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
    }
    assert.ok(ac.signal.aborted, `stream ${i} ended after ${n} pieces, before the client hung up`);
  });
  await Promise.all(aborts);
  // The engine is idle a moment before the last cancelled generation is counted.
  let idle = await waitIdle(server, 5000);
  for (let t = Date.now(); generations(idle, 'cancelled') - cancelled0 < 8 && Date.now() - t < 5000;) {
    await new Promise((r) => setTimeout(r, 20));
    idle = await waitIdle(server, 5000);
  }
  assert.equal(metricValue(idle, /^cinfer_kv_blocks_used$/), 0, 'no KV block held');
  assert.equal(generations(idle, 'cancelled') - cancelled0, 8, 'eight generations cancelled');
  const r = await client.chat.completions.create({ model: modelName, messages: [{ role: 'user', content: 'Tell me a fortune.' }], max_tokens: 4 });
  assert.equal(r.choices.length, 1, 'the server still answers');
});

test('a non-streaming client that disconnects cancels its generation', async () => {
  const tokens0 = metricValue(await waitIdle(server), /^cinfer_generated_tokens_total$/);
  const ac = new AbortController();
  const p = client.chat.completions.create({
    model: modelName, messages: [{ role: 'user', content: 'Continue: The committee met on Tuesday' }], max_tokens: 900, temperature: 0, logit_bias: NO_EOS,
  }, { signal: ac.signal });
  await new Promise((r) => setTimeout(r, 300));
  ac.abort();
  await assert.rejects(p);
  const idle = await waitIdle(server, 5000);
  assert.equal(metricValue(idle, /^cinfer_kv_blocks_used$/), 0, 'no KV block held');
  assert.ok(metricValue(idle, /^cinfer_generated_tokens_total$/) - tokens0 < 800, 'the generation stopped early');
});

test('SIGTERM with requests in flight: they end, the server exits 0 at once', async () => {
  const busy = await startServer();
  const c = new OpenAI({ baseURL: busy.baseURL, apiKey: 'unused', maxRetries: 0 });
  const body = { model: modelName, messages: [{ role: 'user', content: 'Continue: And it came to pass' }], max_tokens: 900, temperature: 0, logit_bias: NO_EOS };
  let started = 0;
  const streams = Array.from({ length: 4 }, async () => {
    const s = await c.chat.completions.create({ ...body, stream: true });
    let n = 0;
    for await (const chunk of s) if (chunk.choices[0]?.delta?.content && ++n === 2) started++;
    return n;
  }).map((p) => p.then((value) => ({ value }), (reason) => ({ reason })));
  const whole = c.chat.completions.create(body).then((value) => ({ value }), (reason) => ({ reason }));
  const deadline = Date.now() + 10000;
  while (started < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  assert.equal(started, 4, 'the streams started');
  const t0 = Date.now();
  await stopServer(busy, assert);
  assert.ok(Date.now() - t0 < 5000, `stopped in ${Date.now() - t0} ms`);
  for (const r of await Promise.all(streams)) {
    if (r.reason) assert.ok(r.reason instanceof OpenAI.APIError, String(r.reason));
    else assert.ok(r.value < 900, 'a stream cut short');
  }
  const w = await whole;
  if (w.reason) {
    assert.ok(w.reason instanceof OpenAI.APIError, String(w.reason));
    assert.ok(w.reason.status === 503 || w.reason instanceof OpenAI.APIConnectionError, String(w.reason));
  } else assert.ok(w.value.usage.completion_tokens < 900);
});
