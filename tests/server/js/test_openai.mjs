// test_openai.mjs: `cinfer serve` through the official `openai` Node client: chat and completions, streaming,
// logprobs, n, seeds, stop strings, tools and tool results, usage, and errors as the client's error classes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { detokenize, LONG_PROMPT, modelName, NO_EOS, startServer, stopServer, tokenize, waitFor, waitIdle } from './harness.mjs';

let server;
let client;
const USER = [{ role: 'user', content: 'Tell me a fortune.' }];

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => { await stopServer(server, assert); });

async function greedyChat(extra = {}) {
  return client.chat.completions.create({ model: modelName, messages: USER, max_tokens: 24, temperature: 0, ...extra });
}

describe('chat completions', () => {
  test('non-streaming reply has the OpenAI shape', async () => {
    const r = await greedyChat();
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(typeof r.created, 'number');
    assert.equal(typeof r.system_fingerprint, 'string');
    assert.equal(r.model, modelName);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
    assert.ok(r.usage.prompt_tokens > 0);
    assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 24);
    assert.equal(typeof r.usage.prompt_tokens_details?.cached_tokens, 'number');
  });

  test('greedy is deterministic and content-part arrays are accepted', async () => {
    const a = await greedyChat();
    const b = await greedyChat();
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const parts = await greedyChat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me a fortune.' }] }] });
    assert.equal(parts.choices[0].message.content, a.choices[0].message.content);
    assert.equal(parts.usage.prompt_tokens, a.usage.prompt_tokens);
  });

  test('max_completion_tokens caps the reply like max_tokens', async () => {
    const r = await client.chat.completions.create({ model: modelName, messages: USER, max_completion_tokens: 3, temperature: 0 });
    assert.ok(r.usage.completion_tokens <= 3);
  });

  test('streaming gives the same text as the whole reply, then usage', async () => {
    const whole = await greedyChat();
    const stream = await greedyChat({ stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish = null;
    let usage = null;
    let first = true;
    let id = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      id ??= chunk.id;
      assert.equal(chunk.id, id, 'every chunk carries the same id');
      if (chunk.usage) { usage = chunk.usage; assert.deepEqual(chunk.choices, []); continue; }
      assert.equal(usage, null, 'usage comes last');
      const c = chunk.choices[0];
      if (first) { assert.equal(c.delta.role, 'assistant'); first = false; }
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) { assert.equal(finish, null); finish = c.finish_reason; }
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.deepEqual({ p: usage.prompt_tokens, c: usage.completion_tokens },
      { p: whole.usage.prompt_tokens, c: whole.usage.completion_tokens });
  });

  test('streaming without include_usage sends no usage chunk', async () => {
    const stream = await greedyChat({ stream: true, max_tokens: 4 });
    for await (const chunk of stream) assert.ok(!chunk.usage, 'no usage chunk unless asked');
  });

  test('logprobs and top_logprobs', async () => {
    const r = await greedyChat({ logprobs: true, top_logprobs: 3, max_tokens: 8 });
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, r.usage.completion_tokens);
    let joined = '';
    for (const t of lp) {
      assert.equal(typeof t.token, 'string');
      assert.ok(t.logprob <= 0);
      assert.ok(Array.isArray(t.bytes));
      assert.equal(t.top_logprobs.length, 3);
      for (let i = 1; i < 3; i++) assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob, 'sorted, most likely first');
      assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, 'greedy picks the most likely token');
      joined += t.token;
    }
    if (r.choices[0].finish_reason === 'length') assert.equal(joined, r.choices[0].message.content);
  });

  test('n > 1 gives n choices and their usage', async () => {
    const r = await client.chat.completions.create({ model: modelName, messages: USER, max_tokens: 8, temperature: 1, seed: 7, n: 3 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    for (const c of r.choices) { assert.equal(typeof c.message.content, 'string'); assert.ok(c.finish_reason); }
    const sum = r.usage.completion_tokens;
    assert.ok(sum >= 3 && sum <= 24, `completion_tokens ${sum} counts all choices`);
  });

  test('n > 1 streaming interleaves choices, each finishing once', async () => {
    const stream = await client.chat.completions.create({ model: modelName, messages: USER, max_tokens: 6, temperature: 0, n: 2, stream: true });
    const finish = [null, null];
    const text = ['', ''];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        assert.ok(c.index === 0 || c.index === 1);
        if (c.delta?.content) text[c.index] += c.delta.content;
        if (c.finish_reason) { assert.equal(finish[c.index], null); finish[c.index] = c.finish_reason; }
      }
    }
    assert.ok(finish[0] && finish[1]);
    assert.equal(text[0], text[1], 'greedy copies agree');
  });

  test('a seed reproduces a sampled reply; other seeds differ', async () => {
    const ask = (seed) => client.chat.completions.create({ model: modelName, messages: USER, max_tokens: 24, temperature: 1, seed });
    const a = await ask(1234);
    const b = await ask(1234);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const others = await Promise.all([5, 6, 7].map(ask));
    assert.ok(others.some((o) => o.choices[0].message.content !== a.choices[0].message.content), 'three other seeds all gave the same reply');
  });

  test('stop strings end the reply before the match', async () => {
    const base = (await greedyChat({ max_tokens: 32 })).choices[0].message.content;
    assert.ok(base.length >= 8, `reply too short to cut: ${JSON.stringify(base)}`);
    const stop = base.slice(Math.floor(base.length / 2), Math.floor(base.length / 2) + 3);
    const want = base.slice(0, base.indexOf(stop));
    const r = await greedyChat({ max_tokens: 32, stop: [stop, 'zzzzqqq'] });
    assert.equal(r.choices[0].message.content, want);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await greedyChat({ max_tokens: 32, stop });
    assert.equal(s.choices[0].message.content, want, 'stop as a single string');
  });

  test('sampling fields: top_k 1 and min_p 1 sample the greedy reply; penalties change a repetitive one', async () => {
    const greedy = (await greedyChat({ max_tokens: 48, logprobs: true })).choices[0];
    for (const extra of [{ top_k: 1 }, { min_p: 1 }, { top_p: 1e-6 }]) {
      const r = await greedyChat({ max_tokens: 48, temperature: 1, seed: 99, ...extra });
      assert.equal(r.choices[0].message.content, greedy.message.content, JSON.stringify(extra));
    }
    const tokens = greedy.logprobs.content.map((t) => t.token);
    if (new Set(tokens).size < tokens.length) {
      for (const extra of [{ presence_penalty: 2 }, { frequency_penalty: 2 }, { repetition_penalty: 2 }]) {
        const r = await greedyChat({ max_tokens: 48, ...extra });
        assert.notEqual(r.choices[0].message.content, greedy.message.content, `${JSON.stringify(extra)} changed nothing`);
      }
    }
    const kw = await greedyChat({ max_tokens: 48, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(kw.choices[0].message.content, greedy.message.content, 'a template without the variable ignores it');
  });

  test('logit_bias steers the choice of token', async () => {
    const [id] = await tokenize(server, ' Amen');
    const r = await greedyChat({ max_tokens: 3, logit_bias: { [String(id)]: 100 } });
    assert.equal(r.choices[0].message.content, await detokenize(server, [id, id, id]));
  });
});

describe('tools', () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];

  test('tools are accepted and the reply is a message or tool calls', async () => {
    const r = await greedyChat({ tools, tool_choice: 'auto' });
    const m = r.choices[0].message;
    assert.equal(m.role, 'assistant');
    if (m.tool_calls?.length) {
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      for (const c of m.tool_calls) { assert.equal(c.type, 'function'); JSON.parse(c.function.arguments); }
    } else {
      assert.equal(typeof m.content, 'string');
    }
  });

  test('a tool call and its result round-trip into the next turn', async () => {
    const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } };
    const history = [
      { role: 'user', content: 'What is the weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 21, "sky": "clear"}' },
    ];
    const withResult = await greedyChat({ tools, messages: history });
    assert.equal(withResult.choices[0].message.role, 'assistant');
    const without = await greedyChat({ tools, messages: history.slice(0, 1) });
    assert.ok(withResult.usage.prompt_tokens > without.usage.prompt_tokens + 5,
      `the tool call and result reach the prompt (${withResult.usage.prompt_tokens} vs ${without.usage.prompt_tokens} tokens)`);
    const stream = await greedyChat({ tools, messages: history, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content || '';
    assert.equal(text, withResult.choices[0].message.content ?? '');
  });
});

describe('completions', () => {
  const prompt = 'And God said,';
  const ask = (extra) => client.completions.create({ model: modelName, prompt, max_tokens: 12, temperature: 0, ...extra });

  test('a string prompt', async () => {
    const r = await ask();
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.choices.length, 1);
    assert.equal(typeof r.choices[0].text, 'string');
    assert.ok(r.choices[0].text.length > 0);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  });

  test('a list of prompts, token ids and lists of token ids give the same text as the string', async () => {
    const single = (await ask()).choices[0].text;
    const other = (await ask({ prompt: 'The Lord is my shepherd;' })).choices[0].text;
    const list = await ask({ prompt: [prompt, 'The Lord is my shepherd;'] });
    assert.deepEqual(list.choices.map((c) => [c.index, c.text]), [[0, single], [1, other]]);
    const ids = await tokenize(server, prompt);
    const byIds = await ask({ prompt: ids });
    assert.equal(byIds.choices[0].text, single);
    assert.equal(byIds.usage.prompt_tokens, ids.length);
    const byIdLists = await ask({ prompt: [ids, ids] });
    assert.deepEqual(byIdLists.choices.map((c) => c.text), [single, single]);
  });

  test('echo puts the prompt before the completion', async () => {
    const single = (await ask()).choices[0].text;
    const r = await ask({ echo: true });
    assert.equal(r.choices[0].text, prompt + single);
  });

  test('logprobs as an integer', async () => {
    const r = await ask({ logprobs: 2, max_tokens: 5 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, r.usage.completion_tokens);
    assert.equal(lp.token_logprobs.length, lp.tokens.length);
    assert.equal(lp.top_logprobs.length, lp.tokens.length);
    assert.equal(lp.text_offset.length, lp.tokens.length);
    for (let i = 0; i < lp.tokens.length; i++) {
      assert.ok(lp.token_logprobs[i] <= 0);
      const alts = Object.entries(lp.top_logprobs[i]);
      assert.ok(alts.length >= 1 && alts.length <= 2);
      assert.ok(Math.abs(Math.max(...alts.map(([, v]) => v)) - lp.token_logprobs[i]) < 1e-4);
    }
    for (let i = 1; i < lp.tokens.length; i++) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
  });

  test('streaming completions', async () => {
    const single = (await ask()).choices[0].text;
    const stream = await ask({ stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) text += c.text;
    }
    assert.equal(text, single);
    assert.ok(usage && usage.completion_tokens > 0);
  });
});

describe('usage', () => {
  test('a repeated long prompt reports cached prompt tokens', async () => {
    const messages = [{ role: 'user', content: LONG_PROMPT }];
    const first = await client.chat.completions.create({ model: modelName, messages, max_tokens: 2, temperature: 0 });
    const second = await client.chat.completions.create({ model: modelName, messages, max_tokens: 2, temperature: 0 });
    assert.equal(second.usage.prompt_tokens, first.usage.prompt_tokens);
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0 && cached < second.usage.prompt_tokens, `cached_tokens ${cached} of ${second.usage.prompt_tokens}`);
  });
});

describe('models', () => {
  test('the model list names the one model', async () => {
    const list = [];
    for await (const m of client.models.list()) list.push(m);
    assert.equal(list.length, 1);
    assert.equal(list[0].id, modelName);
    assert.equal(list[0].object, 'model');
  });
});

describe('errors surface as the client\'s error classes', () => {
  async function rejectsWith(promise, cls, status, check) {
    await assert.rejects(promise, (e) => {
      assert.ok(e instanceof cls, `${e?.constructor?.name} (${e?.status}: ${e?.message}) is not a ${cls.name}`);
      assert.equal(e.status, status);
      assert.equal(typeof e.error?.message, 'string', 'an OpenAI error body');
      if (check) check(e);
      return true;
    });
  }

  test('400 BadRequestError names the field', async () => {
    await rejectsWith(client.chat.completions.create({ model: modelName, max_tokens: 4 }), OpenAI.BadRequestError, 400,
      (e) => assert.match(`${e.param} ${e.message}`, /messages/));
    await rejectsWith(greedyChat({ temperature: 'hot' }), OpenAI.BadRequestError, 400,
      (e) => assert.match(`${e.param} ${e.message}`, /temperature/));
    await rejectsWith(greedyChat({ max_tokens: -1 }), OpenAI.BadRequestError, 400,
      (e) => assert.match(`${e.param} ${e.message}`, /max_tokens/));
    await rejectsWith(greedyChat({ messages: [{ role: 'wizard', content: 'hi' }] }), OpenAI.BadRequestError, 400);
    await rejectsWith(greedyChat({ n: 0 }), OpenAI.BadRequestError, 400);
    await rejectsWith(greedyChat({ top_logprobs: 1000, logprobs: true }), OpenAI.BadRequestError, 400);
    await rejectsWith(client.completions.create({ model: modelName, prompt: [[1, 2, 999999]], max_tokens: 2 }), OpenAI.BadRequestError, 400);
  });

  test('response_format is refused with a clear message', async () => {
    await rejectsWith(greedyChat({ response_format: { type: 'json_object' } }), OpenAI.BadRequestError, 400,
      (e) => assert.match(e.message, /response_format/));
  });

  test('a prompt longer than the context is a 400', async () => {
    const long = Array(400).fill(LONG_PROMPT).join(' ');
    await rejectsWith(greedyChat({ messages: [{ role: 'user', content: long }] }), OpenAI.BadRequestError, 400);
  });

  test('unknown fields are ignored', async () => {
    const r = await greedyChat({ max_tokens: 2, some_future_field: { x: 1 } });
    assert.equal(r.choices.length, 1);
  });

  test('404 NotFoundError', async () => {
    await rejectsWith(client.get('/no/such/route'), OpenAI.NotFoundError, 404);
  });

  test('405 on a known route with the wrong method', async () => {
    await assert.rejects(client.get('/chat/completions'), (e) => { assert.equal(e.status, 405); return true; });
    const r = await fetch(`${server.baseURL}/chat/completions`, { method: 'GET' });
    assert.equal(r.status, 405);
    assert.match(r.headers.get('allow') || '', /POST/);
  });
});

describe('API key', () => {
  let keyed;
  before(async () => { keyed = await startServer({ args: ['--api-key', 'sk-right-key'] }); });
  after(async () => { await stopServer(keyed, assert); });

  test('a wrong or missing key is an AuthenticationError; the right one works; /health needs none', async () => {
    const wrong = new OpenAI({ baseURL: keyed.baseURL, apiKey: 'sk-wrong-key', maxRetries: 0 });
    await assert.rejects(wrong.chat.completions.create({ model: modelName, messages: USER, max_tokens: 2 }),
      (e) => { assert.ok(e instanceof OpenAI.AuthenticationError, String(e)); assert.equal(e.status, 401); return true; });
    const none = await fetch(`${keyed.baseURL}/models`);
    assert.equal(none.status, 401);
    const right = new OpenAI({ baseURL: keyed.baseURL, apiKey: 'sk-right-key', maxRetries: 0 });
    const r = await right.chat.completions.create({ model: modelName, messages: USER, max_tokens: 2 });
    assert.equal(r.choices.length, 1);
    assert.equal((await fetch(`${keyed.url}/health`)).status, 200);
  });

  test('the key from CINFER_API_KEY', async () => {
    const envKeyed = await startServer({ env: { CINFER_API_KEY: 'sk-from-env' } });
    try {
      const right = new OpenAI({ baseURL: envKeyed.baseURL, apiKey: 'sk-from-env', maxRetries: 0 });
      assert.equal((await right.models.list()).data.length, 1);
      assert.equal((await fetch(`${envKeyed.baseURL}/models`)).status, 401);
    } finally {
      await stopServer(envKeyed, assert);
    }
  });
});

describe('the embedded default model', () => {
  test('`cinfer serve` with no --model answers', async () => {
    const dflt = await startServer({ model: false });
    try {
      const c = new OpenAI({ baseURL: dflt.baseURL, apiKey: 'unused', maxRetries: 0 });
      const r = await c.chat.completions.create({ model: modelName, messages: USER, max_tokens: 4 });
      assert.equal(r.choices[0].message.role, 'assistant');
    } finally {
      await stopServer(dflt, assert);
    }
  });
});

describe('a full queue', () => {
  test('requests past the queue get a RateLimitError (429); the rest are served', async () => {
    const small = await startServer({ args: ['--max-batch', '1', '--max-queued', '1'] });
    try {
      const c = new OpenAI({ baseURL: small.baseURL, apiKey: 'unused', maxRetries: 0 });
      const ask = () => c.chat.completions.create({ model: modelName, messages: USER, max_tokens: 300, temperature: 0, logit_bias: NO_EOS });
      // one running and one waiting first (a request counts as waiting until the scheduler admits it, so six
      // sent at once could all find the first still waiting), then four more
      const first = ask();
      await waitFor(small, 1, 0);
      const second = ask();
      await waitFor(small, 1, 1);
      const results = await Promise.allSettled([first, second, ...Array.from({ length: 4 }, ask)]);
      const ok = results.filter((r) => r.status === 'fulfilled');
      const refused = results.filter((r) => r.status === 'rejected');
      for (const r of refused) {
        assert.ok(r.reason instanceof OpenAI.RateLimitError, String(r.reason));
        assert.equal(r.reason.status, 429);
      }
      assert.ok(ok.length >= 2, `${ok.length} served: the running one and the queued one`);
      assert.ok(refused.length >= 1, 'some were refused');
      for (const r of ok) assert.equal(r.value.usage.completion_tokens, 300);
      await waitIdle(small);
    } finally {
      await stopServer(small, assert);
    }
  });
});
