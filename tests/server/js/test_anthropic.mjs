// test_anthropic.mjs: `cinfer serve`'s Messages API through the official `@anthropic-ai/sdk` client:
// replies, streaming events, system prompts, stop sequences, tool definitions and tool results, errors.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { modelName, startServer, stopServer } from './harness.mjs';

let server;
let client;
const USER = [{ role: 'user', content: 'Tell me a fortune.' }];

before(async () => {
  server = await startServer();
  client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => { await stopServer(server, assert); });

const ask = (extra = {}) => client.messages.create({ model: modelName, max_tokens: 24, temperature: 0, messages: USER, ...extra });

describe('messages', () => {
  test('a reply has the Messages shape', async () => {
    const r = await ask();
    assert.equal(r.type, 'message');
    assert.equal(r.role, 'assistant');
    assert.match(r.id, /^msg_/);
    assert.equal(r.model, modelName);
    assert.ok(Array.isArray(r.content));
    assert.equal(r.content[0].type, 'text');
    assert.equal(typeof r.content[0].text, 'string');
    assert.ok(['end_turn', 'max_tokens'].includes(r.stop_reason), r.stop_reason);
    assert.ok(r.usage.input_tokens > 0);
    assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 24);
    if (r.stop_reason === 'max_tokens') assert.equal(r.usage.output_tokens, 24);
  });

  // Anthropic's input_tokens leaves out the prompt tokens read from the cache.
  const promptTokens = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);

  test('a system prompt and content blocks are accepted', async () => {
    const plain = await ask();
    const sys = await ask({ system: 'You are a prophet.' });
    assert.ok(promptTokens(sys.usage) > promptTokens(plain.usage), 'the system prompt reaches the model');
    const blocks = await ask({ system: [{ type: 'text', text: 'You are a prophet.' }] });
    assert.equal(promptTokens(blocks.usage), promptTokens(sys.usage));
    assert.ok(blocks.usage.cache_read_input_tokens > 0, 'the repeated prompt was read from the cache');
    const parts = await ask({ messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me a fortune.' }] }] });
    assert.equal(parts.content[0].text, plain.content[0].text);
  });

  test('streaming events in order, their text equals the whole reply', async () => {
    const whole = await ask();
    const stream = await ask({ stream: true });
    const types = [];
    let text = '';
    let stopReason = null;
    let outputTokens = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'message_start') {
        assert.equal(ev.message.role, 'assistant');
        assert.equal(ev.message.usage.input_tokens, promptTokens(whole.usage), 'message_start counts the prompt');
      }
      if (ev.type === 'content_block_start') assert.equal(ev.content_block.type, 'text');
      if (ev.type === 'content_block_delta') { assert.equal(ev.delta.type, 'text_delta'); text += ev.delta.text; }
      if (ev.type === 'message_delta') {
        stopReason = ev.delta.stop_reason;
        outputTokens = ev.usage.output_tokens;
        assert.equal(promptTokens(ev.usage), promptTokens(whole.usage), 'the prompt\'s tokens in the final usage');
      }
    }
    assert.equal(types[0], 'message_start');
    assert.equal(types[1], 'content_block_start');
    assert.equal(types.at(-3), 'content_block_stop');
    assert.equal(types.at(-2), 'message_delta');
    assert.equal(types.at(-1), 'message_stop');
    for (const t of types.slice(2, -3)) assert.ok(t === 'content_block_delta' || t === 'ping', t);
    assert.equal(text, whole.content[0].text);
    assert.equal(stopReason, whole.stop_reason);
    assert.equal(outputTokens, whole.usage.output_tokens);
  });

  test('the client\'s stream helper assembles the final message', async () => {
    const whole = await ask();
    const final = await client.messages.stream({ model: modelName, max_tokens: 24, temperature: 0, messages: USER }).finalMessage();
    assert.equal(final.content[0].text, whole.content[0].text);
  });

  test('stop_sequences end the reply and name the match', async () => {
    const base = (await ask({ max_tokens: 32 })).content[0].text;
    assert.ok(base.length >= 8, `reply too short to cut: ${JSON.stringify(base)}`);
    const stop = base.slice(Math.floor(base.length / 2), Math.floor(base.length / 2) + 3);
    const r = await ask({ max_tokens: 32, stop_sequences: [stop] });
    assert.equal(r.content[0].text, base.slice(0, base.indexOf(stop)));
    assert.equal(r.stop_reason, 'stop_sequence');
    assert.equal(r.stop_sequence, stop);
  });

  test('tool definitions are accepted; tool_use and tool_result turns round-trip', async () => {
    const tools = [{
      name: 'get_weather',
      description: 'The weather in a city',
      input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    }];
    const r = await ask({ tools });
    for (const b of r.content) assert.ok(b.type === 'text' || b.type === 'tool_use', b.type);
    if (r.content.some((b) => b.type === 'tool_use')) assert.equal(r.stop_reason, 'tool_use');
    const history = [
      { role: 'user', content: 'What is the weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21 degrees, clear' }] },
    ];
    const next = await ask({ tools, messages: history });
    assert.equal(next.role, 'assistant');
    const first = await ask({ tools, messages: history.slice(0, 1) });
    assert.ok(promptTokens(next.usage) > promptTokens(first.usage) + 5,
      `the tool use and result reach the prompt (${promptTokens(next.usage)} vs ${promptTokens(first.usage)})`);
  });
});

describe('errors', () => {
  async function rejectsWith(promise, cls, status) {
    await assert.rejects(promise, (e) => {
      assert.ok(e instanceof cls, `${e?.constructor?.name} (${e?.status}: ${e?.message}) is not a ${cls.name}`);
      assert.equal(e.status, status);
      assert.equal(e.error?.type, 'error', 'an Anthropic error body');
      assert.equal(typeof e.error?.error?.message, 'string');
      return true;
    });
  }

  test('a bad request is a BadRequestError in Anthropic\'s shape', async () => {
    await rejectsWith(client.messages.create({ model: modelName, messages: USER }), Anthropic.BadRequestError, 400);
    await rejectsWith(ask({ messages: 'hello' }), Anthropic.BadRequestError, 400);
    await rejectsWith(ask({ max_tokens: -5 }), Anthropic.BadRequestError, 400);
  });

  test('a wrong x-api-key is an AuthenticationError', async () => {
    const keyed = await startServer({ args: ['--api-key', 'sk-ant-right'] });
    try {
      const wrong = new Anthropic({ baseURL: keyed.url, apiKey: 'sk-ant-wrong', maxRetries: 0 });
      await rejectsWith(wrong.messages.create({ model: modelName, max_tokens: 2, messages: USER }), Anthropic.AuthenticationError, 401);
      const right = new Anthropic({ baseURL: keyed.url, apiKey: 'sk-ant-right', maxRetries: 0 });
      const r = await right.messages.create({ model: modelName, max_tokens: 2, messages: USER });
      assert.equal(r.type, 'message');
    } finally {
      await stopServer(keyed, assert);
    }
  });
});
