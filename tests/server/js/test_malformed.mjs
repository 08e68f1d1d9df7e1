// test_malformed.mjs: a battery of bad requests, each answered with a 4xx in the API's error shape (or, where
// no answer can be sent, a closed connection; each case says which), after each of which /health still
// answers: wrong types, huge numbers, invalid UTF-8, 100k-deep JSON, a 64 MB body refused before it is
// read, truncated chunked bodies, slow headers that hold no worker.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { getFresh, modelName, rawHttp, startServer, stopServer, waitIdle } from './harness.mjs';

const TIMEOUT_S = 2;
let server;
before(async () => { server = await startServer({ args: ['--timeout', String(TIMEOUT_S), '--header-timeout', String(TIMEOUT_S)] }); });
after(async () => {
  await waitIdle(server);
  await stopServer(server, assert);
});

// /health on a connection of its own: the server here closes idle connections after TIMEOUT_S.
async function healthy() {
  const t0 = Date.now();
  const r = await getFresh(server, '/health');
  assert.equal(r.status, 200);
  return Date.now() - t0;
}

function request(route, body, headers = {}) {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
  const head = `POST ${route} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${buf.length}\r\nConnection: close\r\n` +
    Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n';
  return rawHttp(server.port, [Buffer.concat([Buffer.from(head), buf])], { untilComplete: true });
}

async function expect4xx(route, body, status, why) {
  const r = await request(route, body);
  if (status) assert.equal(r.status, status, `${why}: got ${r.status} ${r.body.slice(0, 300)}`);
  else assert.ok(r.status >= 400 && r.status < 500, `${why}: got ${r.status} ${r.body.slice(0, 300)}`);
  const err = JSON.parse(r.body);
  if (route === '/v1/messages') assert.equal(err.type, 'error', 'Anthropic\'s error shape');
  const message = err.error.message;
  assert.equal(typeof message, 'string');
  assert.ok(message.length > 0);
  await healthy();
  return { r, message, param: err.error.param };
}

const chat = (o) => JSON.stringify({ model: modelName, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...o });

describe('wrong types and values: 400 naming the field', () => {
  const cases = [
    ['messages is a number', { messages: 5 }, 'messages'],
    ['content is a number', { messages: [{ role: 'user', content: 5 }] }, 'content'],
    ['message without a role', { messages: [{ content: 'hi' }] }, 'role'],
    ['max_tokens is a string', { max_tokens: 'ten' }, 'max_tokens'],
    ['stream is a string', { stream: 'yes' }, 'stream'],
    ['temperature below 0', { temperature: -1 }, 'temperature'],
    ['top_p above 1', { top_p: 2 }, 'top_p'],
    ['stop is a number', { stop: 5 }, 'stop'],
    ['n is fractional', { n: 1.5 }, 'n'],
    ['logit_bias is a list', { logit_bias: [1, 2] }, 'logit_bias'],
    ['logit_bias names no token', { logit_bias: { 99999999: 5 } }, 'logit_bias'],
    ['tools is an object', { tools: { type: 'function' } }, 'tools'],
    ['seed is a string', { seed: 'abc' }, 'seed'],
  ];
  for (const [name, fields, param] of cases) {
    test(name, async () => {
      const { message, param: p } = await expect4xx('/v1/chat/completions', chat(fields), 400, name);
      assert.match(`${p ?? ''} ${message}`, new RegExp(param), `the error names ${param}`);
    });
  }
  test('Anthropic: messages missing, max_tokens missing', async () => {
    await expect4xx('/v1/messages', JSON.stringify({ model: modelName, max_tokens: 2 }), 400, 'no messages');
    await expect4xx('/v1/messages', JSON.stringify({ model: modelName, messages: [{ role: 'user', content: 'hi' }] }), 400, 'no max_tokens');
  });
  test('completions: prompt is an object, token id out of the vocabulary', async () => {
    await expect4xx('/v1/completions', JSON.stringify({ model: modelName, prompt: { a: 1 } }), 400, 'prompt object');
    await expect4xx('/v1/completions', JSON.stringify({ model: modelName, prompt: [5, -1], max_tokens: 2 }), 400, 'negative id');
  });
});

describe('huge numbers: 400', () => {
  const cases = [
    ['max_tokens 1e300', '{"max_tokens": 1e300}'],
    ['max_tokens past 2^64', '{"max_tokens": 99999999999999999999999}'],
    ['max_tokens above the cap', '{"max_tokens": 10000000}'],
    ['n of a million', '{"max_tokens": 2, "n": 1000000}'],
    ['top_logprobs 1e9', '{"max_tokens": 2, "logprobs": true, "top_logprobs": 1000000000}'],
    ['temperature 1e400 (infinity)', '{"max_tokens": 2, "temperature": 1e400}'],
    ['top_k 2^40', '{"max_tokens": 2, "top_k": 1099511627776}'],
  ];
  for (const [name, extra] of cases) {
    test(name, async () => {
      const body = `{"model": "${modelName}", "messages": [{"role": "user", "content": "hi"}], ${extra.slice(1)}`;
      assert.doesNotThrow(() => JSON.parse(body.replace('1e400', '1')));
      await expect4xx('/v1/chat/completions', body, 400, name);
    });
  }
});

describe('bytes that are not JSON: 400', () => {
  test('invalid UTF-8 in a string', async () => {
    const body = Buffer.concat([Buffer.from('{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"a'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]);
    await expect4xx('/v1/chat/completions', body, 400, 'invalid UTF-8');
  });
  test('an overlong UTF-8 encoding of "/"', async () => {
    const body = Buffer.concat([Buffer.from('{"max_tokens":2,"messages":[{"role":"user","content":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}]}')]);
    await expect4xx('/v1/chat/completions', body, 400, 'overlong UTF-8');
  });
  test('a lone surrogate escape is no 5xx', async () => {
    const r = await request('/v1/chat/completions', chat({}).replace('"hi"', '"\\ud800x"'));
    assert.ok(r.status === 200 || r.status === 400, `got ${r.status}`);
    await healthy();
  });
  test('truncated, empty and non-object JSON', async () => {
    await expect4xx('/v1/chat/completions', '{"messages": [', 400, 'truncated JSON');
    await expect4xx('/v1/chat/completions', '', 400, 'empty body');
    await expect4xx('/v1/chat/completions', '[1,2,3]', 400, 'an array');
    await expect4xx('/v1/completions', 'null', 400, 'null');
  });
  test('100k-deep arrays and objects', async () => {
    await expect4xx('/v1/chat/completions', '['.repeat(100000) + ']'.repeat(100000), 400, 'deep arrays');
    await expect4xx('/v1/chat/completions', '{"a":'.repeat(100000) + '1' + '}'.repeat(100000), 400, 'deep objects');
    const deepField = chat({}).slice(0, -1) + ',"tools":' + '['.repeat(100000) + ']'.repeat(100000) + '}';
    await expect4xx('/v1/chat/completions', deepField, 400, 'a deep field');
    await expect4xx('/v1/messages', '{"x":'.repeat(100000) + '1' + '}'.repeat(100000), 400, 'deep objects to Messages');
  });
});

// Writes a head then up to `total` body bytes, respecting back-pressure, until the server answers or
// closes. Returns the status, the bytes written and whether the server closed the connection.
function pushBody(head, total, chunked) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: '127.0.0.1', port: server.port });
    const chunk = Buffer.alloc(1 << 20, 'a');
    let written = 0;
    let got = '';
    let settled = false;
    const done = (closed) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ status: Number(/^HTTP\/1\.\d (\d+)/.exec(got)?.[1] || 0), written, closed, response: got });
    };
    const timer = setTimeout(() => done(false), 20000);
    sock.on('data', (d) => { got += d.toString('latin1'); if (/\r\n\r\n/.test(got)) done(false); });
    sock.on('close', () => done(true));
    sock.on('error', (e) => { if (['EPIPE', 'ECONNRESET'].includes(e.code)) done(true); else if (!settled) { settled = true; reject(e); } });
    const pump = () => {
      while (!settled && written < total) {
        const piece = chunked ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]) : chunk;
        written += chunk.length;
        if (!sock.write(piece)) { sock.once('drain', pump); return; }
      }
    };
    // The head and a first piece, then a pause for the answer, as a client sending `Expect: 100-continue`
    // would: a server that answers and closes while the rest is in flight resets the connection, and the
    // reset can destroy its answer in the client's socket before it is read.
    sock.on('connect', () => {
      sock.write(head);
      sock.write(chunked ? `${(65536).toString(16)}\r\n${'a'.repeat(65536)}\r\n` : 'a'.repeat(65536));
      written += 65536;
      setTimeout(pump, 500);
    });
  });
}

describe('bodies past the limit: 413 before they are read', () => {
  const SIZE = 64 << 20;
  test('a 64 MB body with Content-Length', async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${SIZE}\r\n\r\n`;
    const r = await pushBody(head, SIZE, false);
    assert.equal(r.status, 413, `got ${r.response.slice(0, 200)}`);
    assert.ok(r.written < SIZE, 'answered before the whole body was sent');
    await healthy();
  });
  test('a 64 MB chunked body', async () => {
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
    const r = await pushBody(head, SIZE, true);
    assert.ok(r.status === 413 || (r.closed && r.status === 0), `413, or a closed connection: got ${r.response.slice(0, 200)}`);
    assert.ok(r.written < SIZE, 'stopped before the whole body was sent');
    await healthy();
  });
});

describe('connections that never finish a request', () => {
  test('a truncated chunked body, then the client closes: connection closed, no answer owed', async () => {
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
    const r = await rawHttp(server.port, [head + '20\r\n{"messages": [{"role": "user",'], { end: true, timeoutMs: 5000 });
    assert.ok(r.closed, 'the server closes its side');
    assert.ok(r.status === 0 || (r.status >= 400 && r.status < 500), `no answer or a 4xx, got ${r.status}`);
    await healthy();
  });
  test('a truncated chunked body left open: closed by the idle timeout', async () => {
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
    const r = await rawHttp(server.port, [head + '40\r\n{"messages": [{"role"'], { timeoutMs: (TIMEOUT_S + 5) * 1000 });
    assert.ok(r.closed, `not closed within ${TIMEOUT_S + 5} s`);
    assert.ok(r.status === 0 || r.status === 408 || r.status === 400, `got ${r.status}`);
    await healthy();
  });
  test('a Content-Length longer than the body sent, then close', async () => {
    const r = await rawHttp(server.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"prompt": "a"'], { end: true, timeoutMs: 5000 });
    assert.ok(r.closed);
    assert.ok(r.status === 0 || (r.status >= 400 && r.status < 500), `got ${r.status}`);
    await healthy();
  });
  test('slow headers (a byte a second) are cut off and hold no worker', async () => {
    const line = 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ' + 'a'.repeat(60);
    const slow = Array.from({ length: 24 }, () => rawHttp(server.port, [...line], { gapMs: 1000, timeoutMs: (TIMEOUT_S + 8) * 1000 }));
    await new Promise((r) => setTimeout(r, 1500));
    for (let i = 0; i < 3; i++) assert.ok((await healthy()) < 1000, '/health answers at once while slow clients trickle');
    const res = await Promise.all(slow);
    for (const r of res) {
      assert.ok(r.closed, 'the server closes a connection whose headers never end');
      assert.ok(r.ms < (TIMEOUT_S + 3) * 1000, `closed after ${r.ms} ms; the header deadline is ${TIMEOUT_S} s`);
      assert.ok(r.status === 0 || r.status === 408 || r.status === 400 || r.status === 431, `got ${r.status}`);
    }
    await healthy();
  });
  test('garbage instead of a request line: 400 or closed', async () => {
    const r = await rawHttp(server.port, ['\x16\x03\x01\x02\x00 hello\r\n\r\n'], { timeoutMs: 5000 });
    assert.ok(r.closed);
    assert.ok(r.status === 0 || r.status === 400, `got ${r.status}`);
    await healthy();
  });
  test('a 200 KB header: 4xx or closed', async () => {
    const r = await rawHttp(server.port, [`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(200000)}\r\n\r\n`], { timeoutMs: 5000 });
    assert.ok(r.status === 0 || (r.status >= 400 && r.status < 500), `got ${r.status}`);
    await healthy();
  });
});
