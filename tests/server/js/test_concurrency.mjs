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
  const idle = await waitIdle(server, 5000);
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
