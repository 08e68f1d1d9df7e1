// test_sse.mjs: the streaming responses' bytes as they come off the socket: the content type, `data: ` lines
// each followed by a blank line, OpenAI's closing `data: [DONE]`, Anthropic's `event:` lines naming each
// JSON payload's type, and chunks that reach the client before the reply ends.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { modelName, startServer, stopServer } from './harness.mjs';

let server;
before(async () => { server = await startServer(); });
after(async () => { await stopServer(server, assert); });

// A raw request through node:http: the body's bytes as received, each chunk with its arrival time.
function stream(route, body) {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(JSON.stringify(body));
    const req = http.request({
      host: '127.0.0.1', port: server.port, path: route, method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': payload.length },
    }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push({ t: Date.now(), d }));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, chunks, bytes: Buffer.concat(chunks.map((c) => c.d)) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function checkFraming(r) {
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/event-stream/);
  assert.match(r.headers['cache-control'] || '', /no-cache/);
  const text = r.bytes.toString('utf8');
  assert.ok(Buffer.from(text, 'utf8').equals(r.bytes), 'the stream is valid UTF-8');
  assert.ok(!text.includes('\r'), 'lines end with \\n');
  assert.ok(text.endsWith('\n\n'), 'the last event ends with a blank line');
  const blocks = text.slice(0, -2).split('\n\n');
  for (const b of blocks) assert.ok(b.length > 0, 'no empty event');
  return blocks;
}

test('OpenAI chat stream: data lines, blank-line separators, [DONE] last', async () => {
  const r = await stream('/v1/chat/completions', {
    model: modelName, messages: [{ role: 'user', content: 'Tell me a fortune.' }], max_tokens: 16, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  });
  const blocks = checkFraming(r);
  assert.equal(blocks.at(-1), 'data: [DONE]');
  const payloads = blocks.slice(0, -1).map((b) => {
    assert.match(b, /^data: [^\n]+$/, `one data line per event: ${JSON.stringify(b)}`);
    return JSON.parse(b.slice(6));
  });
  assert.ok(payloads.length >= 3, 'role, content and finish chunks');
  for (const p of payloads) assert.equal(p.object, 'chat.completion.chunk');
  assert.equal(payloads[0].choices[0].delta.role, 'assistant');
  assert.ok(payloads.at(-1).usage, 'usage chunk before [DONE]');
  assert.deepEqual(payloads.at(-1).choices, []);
  assert.ok(payloads.at(-2).choices[0].finish_reason);
  assert.ok(r.chunks.length > 1, 'events reach the client as they are made, not in one write');
});

test('OpenAI completions stream ends with [DONE]', async () => {
  const r = await stream('/v1/completions', { model: modelName, prompt: 'And God said,', max_tokens: 8, temperature: 0, stream: true });
  const blocks = checkFraming(r);
  assert.equal(blocks.at(-1), 'data: [DONE]');
  for (const b of blocks.slice(0, -1)) assert.equal(JSON.parse(b.slice(6)).object, 'text_completion');
});

test('Anthropic stream: an event line naming each data payload\'s type, no [DONE]', async () => {
  const r = await stream('/v1/messages', {
    model: modelName, max_tokens: 16, temperature: 0, stream: true, messages: [{ role: 'user', content: 'Tell me a fortune.' }],
  });
  const blocks = checkFraming(r);
  const names = [];
  for (const b of blocks) {
    const m = /^event: ([a-z_]+)\ndata: ([^\n]+)$/.exec(b);
    assert.ok(m, `event then data line: ${JSON.stringify(b)}`);
    const data = JSON.parse(m[2]);
    assert.equal(data.type, m[1]);
    names.push(m[1]);
  }
  assert.equal(names[0], 'message_start');
  assert.equal(names.at(-1), 'message_stop');
  assert.ok(!r.bytes.includes('[DONE]'));
});

test('errors before a stream starts are plain JSON with their status, not SSE', async () => {
  const r = await stream('/v1/chat/completions', { model: modelName, messages: 'nope', stream: true });
  assert.equal(r.status, 400);
  assert.match(r.headers['content-type'], /^application\/json/);
  assert.equal(typeof JSON.parse(r.bytes.toString()).error.message, 'string');
});
