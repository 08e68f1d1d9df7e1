// test_browser.mjs: the chat page at / in Debian's chromium driven by puppeteer-core: it loads without
// errors, a message typed and sent gets a reply that appears piece by piece with a tokens/s figure, and
// Stop ends a reply mid-stream (the text stops growing and the server's sequence is cancelled).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import puppeteer from 'puppeteer-core';
import { metricValue, NO_EOS, startServer, stopServer, waitIdle } from './harness.mjs';

export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let server;
let browser;
let profile;
let page;
const pageErrors = [];

before(async () => {
  server = await startServer();
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'cinfer-chromium-'));
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: profile,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
  });
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
});

after(async () => {
  if (browser) await browser.close();
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  await stopServer(server, assert);
});

// The page's controls, found by role rather than by id so the test follows what a person sees.
async function controls() {
  const input = await page.$('textarea') || await page.$('input[type=text]');
  assert.ok(input, 'a text box to type in');
  const buttons = await page.$$('button');
  const byText = async (re) => {
    for (const b of buttons) if (re.test(await b.evaluate((e) => `${e.textContent} ${e.title} ${e.getAttribute('aria-label') || ''}`))) return b;
    return null;
  };
  return { input, send: await byText(/send/i), stop: await byText(/stop/i) };
}

// The text of the latest assistant message on the page: the last element whose class or data-role names
// the assistant.
const replyText = () => page.evaluate(() => {
  const all = document.querySelectorAll('[data-role="assistant"], .assistant, .msg-assistant, .message.assistant');
  return all.length ? all[all.length - 1].textContent : '';
});
const replyCount = () => page.evaluate(() => document.querySelectorAll('[data-role="assistant"], .assistant, .msg-assistant, .message.assistant').length);

async function send(text) {
  const c = await controls();
  await c.input.click({ clickCount: 3 });
  await c.input.type(text);
  if (c.send) await c.send.click(); else await c.input.press('Enter');
}

test('the page loads without errors', async () => {
  const res = await page.goto(`${server.url}/`, { waitUntil: 'load' });
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /^text\/html/);
  await controls();
  assert.deepEqual(pageErrors, []);
});

test('a sent message gets a streamed reply and a tokens/s figure', async () => {
  const n0 = await replyCount();
  const chunks = [];
  page.on('response', (r) => { if (r.url().endsWith('/v1/chat/completions')) chunks.push(r.headers()['content-type']); });
  await send('Tell me a fortune.');
  const seen = new Set();
  const deadline = Date.now() + 20000;
  let last = '';
  while (Date.now() < deadline) {
    if ((await replyCount()) > n0) {
      last = await replyText();
      if (last) seen.add(last.length);
      const busy = await page.evaluate(() => [...document.querySelectorAll('button')].some((b) => /stop/i.test(b.textContent) && !b.disabled && b.offsetParent !== null));
      if (!busy && last && seen.size > 0 && await page.evaluate(() => /tok(en)?s?\s*\/\s*s/i.test(document.body.innerText))) break;
    }
    await sleep(10);
  }
  assert.ok(last.trim().length > 0, 'the reply shows text');
  assert.ok(seen.size >= 2, `the reply grew in steps (saw lengths ${[...seen].join(', ')})`);
  assert.match(await page.evaluate(() => document.body.innerText), /\d+(\.\d+)?\s*tok(en)?s?\s*\/\s*s/i, 'a tokens/s figure');
  assert.match(chunks[0] || '', /text\/event-stream/, 'the page asked for a stream');
  assert.deepEqual(pageErrors, []);
});

test('Stop ends a reply mid-stream', async () => {
  // A long reply: the page's request is rewritten to forbid the end-of-sequence tokens.
  await page.setRequestInterception(true);
  const rewrite = (req) => {
    if (req.url().endsWith('/v1/chat/completions') && req.method() === 'POST') {
      const body = JSON.parse(req.postData());
      req.continue({ postData: JSON.stringify({ ...body, max_tokens: 900, logit_bias: NO_EOS }) });
    } else req.continue();
  };
  page.on('request', rewrite);
  try {
    const tokens0 = metricValue(await waitIdle(server), /^cinfer_generated_tokens_total$/);
    const n0 = await replyCount();
    await send('Continue: And it came to pass');
    const deadline = Date.now() + 20000;
    while (Date.now() < deadline && ((await replyCount()) <= n0 || (await replyText()).length < 5)) await sleep(5);
    const { stop } = await controls();
    assert.ok(stop, 'a Stop button');
    await stop.click();
    await sleep(100);
    const atStop = await replyText();
    await sleep(1500);
    const later = await replyText();
    assert.equal(later, atStop, 'the reply stopped growing');
    assert.ok(later.length > 0);
    const idle = await waitIdle(server, 3000);
    assert.ok(metricValue(idle, /^cinfer_generated_tokens_total$/) - tokens0 < 800, 'the server stopped generating early');
    assert.deepEqual(pageErrors.filter((e) => !/abort/i.test(e)), []);
  } finally {
    page.off('request', rewrite);
    await page.setRequestInterception(false);
  }
});
