// test_browser.mjs: the chat page at / in Debian's chromium driven by puppeteer-core: it loads without
// errors, a message typed and sent gets a reply that appears piece by piece (the exact text the API gives)
// with a tokens/s figure, and Stop ends a reply mid-stream (the text stops growing and the server cancels
// the generation).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import puppeteer from 'puppeteer-core';
import { metricValue, modelName, NO_EOS, postJSON, startServer, stopServer, waitIdle } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
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
  // Failed loads are judged by their address below (a browser asks for /favicon.ico on its own).
  page.on('console', (m) => { if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) pageErrors.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400 && new URL(r.url()).pathname !== '/favicon.ico') pageErrors.push(`${r.status()} ${r.url()}`); });
  // The tiny model may end a reply after a few tokens: the page's requests are rewritten to forbid its
  // end-of-sequence tokens, so replies run to the page's max tokens.
  await page.setRequestInterception(true);
  page.on('request', (req) => {
    if (req.url().endsWith('/v1/chat/completions') && req.method() === 'POST') {
      req.continue({ postData: JSON.stringify({ ...JSON.parse(req.postData()), logit_bias: NO_EOS }) });
    } else req.continue();
  });
});

after(async () => {
  if (browser) await browser.close();
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  await stopServer(server, assert);
});

// Records the length of the last reply's text at every change, in the page.
const watchReply = () => page.evaluate(() => {
  window.__lengths = [];
  new MutationObserver(() => {
    const all = document.querySelectorAll('.msg.assistant .text');
    if (all.length) window.__lengths.push(all[all.length - 1].textContent.length);
  }).observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
});
const replyText = () => page.evaluate(() => {
  const all = document.querySelectorAll('.msg.assistant .text');
  return all.length ? all[all.length - 1].textContent : null;
});
const busy = () => page.$eval('#stop', (b) => !b.disabled);

async function setField(sel, value) {
  await page.$eval(sel, (e, v) => { e.value = v; }, String(value));
}

async function send(text) {
  await page.click('#input');
  await page.type('#input', text);
  await page.click('#send');
}

async function waitFor(cond, ms, what) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

test('the page loads without errors', async () => {
  const res = await page.goto(`${server.url}/`, { waitUntil: 'networkidle0' });
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /^text\/html/);
  for (const sel of ['#input', '#send', '#stop']) assert.ok(await page.$(sel), `${sel} on the page`);
  assert.equal(await page.$eval('#model', (e) => e.textContent), modelName, 'the page shows the model');
  assert.equal(await busy(), false, 'Stop is disabled while idle');
  assert.deepEqual(pageErrors, []);
});

test('a sent message gets a streamed reply, the API\'s text, and a tokens/s figure', async () => {
  await setField('#max-tokens', 300);
  await setField('#temperature', 0);
  await watchReply();
  await send('Tell me a fortune.');
  await waitFor(async () => (await replyText()) !== null, 5000, 'the reply to appear');
  await waitFor(async () => !(await busy()), 60000, 'the reply to end');
  const shown = await replyText();
  const lengths = await page.evaluate(() => window.__lengths);
  const steps = new Set(lengths.filter((n) => n > 0 && n < shown.length));
  assert.ok(steps.size >= 2, `the reply grew in steps before it ended (lengths ${[...new Set(lengths)].join(', ')})`);
  const direct = await postJSON(server, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'Tell me a fortune.' }], max_tokens: 300, temperature: 0, logit_bias: NO_EOS,
  });
  assert.equal(shown, direct.json.choices[0].message.content, 'the page shows the text the API gives');
  const stats = await page.$eval('#stats', (e) => e.textContent);
  assert.match(stats, /^300 tokens\b/, stats);
  assert.match(stats, /\d+(\.\d+)? tokens\/s/, stats);
  assert.deepEqual(pageErrors, []);
});

test('Stop ends a reply mid-stream and the server cancels it', async () => {
  const replies = () => page.$$eval('.msg.assistant .text', (all) => all.map((e) => e.textContent.length));
  // The tiny model writes 900 tokens in about a second; on a loaded machine the click can come after the
  // reply has ended (the stats then say "900 tokens"), so that case is tried again, at most three times.
  let atStop, tokens0, cancelled0;
  for (let attempt = 1; ; attempt++) {
    tokens0 = metricValue(await waitIdle(server), /^cinfer_generated_tokens_total$/);
    cancelled0 = metricValue((await waitIdle(server)).filter((s) => s.labels.outcome === 'cancelled'), /^cinfer_generations_total$/);
    await page.click('#clear');
    assert.equal(await replyText(), null, 'New chat empties the conversation');
    await setField('#max-tokens', 900);
    const n0 = (await replies()).length;
    await send('Continue: And it came to pass');
    await waitFor(async () => { const r = await replies(); return r.length > n0 && r.at(-1) >= 5; }, 10000, 'the reply to start');
    await page.click('#stop');
    await waitFor(async () => !(await busy()), 5000, 'the page to leave the busy state');
    atStop = await replyText();
    const stats = await page.$eval('#stats', (e) => e.textContent);
    if (/stopped/.test(stats) || !/^900 tokens\b/.test(stats) || attempt === 3) break;
  }
  await sleep(1000);
  assert.equal(await replyText(), atStop, 'the reply stopped growing');
  assert.ok(atStop.length > 0);
  assert.equal(await page.$$eval('.msg.error', (e) => e.length), 0, 'no error shown');
  assert.match(await page.$eval('#stats', (e) => e.textContent), /stopped/);
  let idle = await waitIdle(server, 3000);
  const cancelled = () => metricValue(idle.filter((s) => s.labels.outcome === 'cancelled'), /^cinfer_generations_total$/) - cancelled0;
  for (let t = Date.now(); cancelled() < 1 && Date.now() - t < 5000;) { await sleep(20); idle = await waitIdle(server, 3000); }
  assert.ok(metricValue(idle, /^cinfer_generated_tokens_total$/) - tokens0 < 800, 'the server stopped generating early');
  assert.equal(cancelled(), 1, 'the generation was cancelled');
  assert.deepEqual(pageErrors.filter((e) => !/abort/i.test(e)), []);
});
