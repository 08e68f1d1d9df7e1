// harness.mjs: starts `cinfer serve` on the tiny model on a free loopback port for one test file, waits
// for /health, and stops it with SIGTERM (exit status 0 checked); plus the helpers the tests share: raw
// HTTP over a socket, SSE splitting, /metrics parsing, resident memory of the server.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const binary = process.env.CINFER_BIN || path.join(repoRoot, 'build/cinfer');
export const modelDir = process.env.CINFER_MODEL || path.join(repoRoot, 'models/cinfer-tiny');
export const modelName = 'cinfer-tiny';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const LISTEN_RE = /https?:\/\/(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)/;

// Starts a server. opts.args: extra command-line arguments; opts.env: extra environment;
// opts.model: false to leave --model out (the embedded default), a directory otherwise.
export async function startServer(opts = {}) {
  if (!fs.existsSync(binary)) throw new Error(`cinfer binary not found at ${binary} (build first, or set CINFER_BIN)`);
  const args = ['serve', '--host', '127.0.0.1', '--port', '0'];
  if (opts.model !== false) args.push('--model', opts.model || modelDir);
  args.push(...(opts.args || []));
  const child = spawn(binary, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...(opts.env || {}) },
  });
  let log = '';
  let exited = null;
  const exitPromise = new Promise((resolve) => {
    child.on('exit', (code, signal) => { exited = { code, signal }; resolve(exited); });
  });
  const killOnExit = () => { if (!exited) child.kill('SIGKILL'); };
  process.on('exit', killOnExit);

  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening address printed within 30 s; output:\n${log}`)), 30000);
    const onData = (d) => {
      log += d.toString();
      const m = LISTEN_RE.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    exitPromise.then((e) => { clearTimeout(timer); reject(new Error(`cinfer serve exited (${JSON.stringify(e)}) before listening:\n${log}`)); });
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60000;
  for (;;) {
    if (exited) throw new Error(`cinfer serve exited (${JSON.stringify(exited)}) while loading:\n${log}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) break;
      await r.arrayBuffer();
    } catch { /* not accepting yet */ }
    if (Date.now() > deadline) throw new Error(`/health not 200 within 60 s:\n${log}`);
    await sleep(50);
  }
  const server = {
    url, port, pid: child.pid, child,
    baseURL: `${url}/v1`,
    get log() { return log; },
    get exited() { return exited; },
    // SIGTERM, then the exit status: 0 expected. Returns { code, signal, ms }.
    async stop(timeoutMs = 20000) {
      if (exited) return exited;
      const t0 = Date.now();
      child.kill('SIGTERM');
      let timer;
      const res = await Promise.race([exitPromise, new Promise((r) => { timer = setTimeout(() => r(null), timeoutMs); })]);
      clearTimeout(timer);
      process.off('exit', killOnExit);
      if (!res) { child.kill('SIGKILL'); throw new Error(`cinfer serve did not exit within ${timeoutMs} ms of SIGTERM:\n${log.slice(-4000)}`); }
      return { ...res, ms: Date.now() - t0 };
    },
  };
  return server;
}

// Stops the server and fails unless it exited 0 on SIGTERM.
export async function stopServer(server, assert) {
  if (!server) return;
  const r = await server.stop();
  assert.deepEqual({ code: r.code, signal: r.signal }, { code: 0, signal: null },
    `cinfer serve should exit 0 on SIGTERM; output tail:\n${server.log.slice(-4000)}`);
  const report = /runtime error:|ERROR: (Address|Leak|Thread)Sanitizer/.exec(server.log);
  assert.ok(!report, `a sanitizer report in the server's output:\n${server.log.slice(Math.max(0, (report?.index ?? 0) - 200), (report?.index ?? 0) + 3000)}`);
}

// Prometheus text format -> array of { name, labels, value }.
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)(\s+\d+)?$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${JSON.stringify(line)}`);
    const labels = {};
    if (m[3]) for (const kv of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// GET on a connection of its own (a pooled keep-alive connection can be closed by the server's idle timeout
// just as it is reused). Returns { status, body }.
export function getFresh(server, path) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port: server.port, path, agent: false }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    }).on('error', reject);
  });
}

export async function metrics(server) {
  const r = await getFresh(server, '/metrics');
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
  return parseMetrics(r.body);
}

// The sum of the samples whose name matches re (a gauge has one).
export function metricValue(samples, re) {
  const hits = samples.filter((s) => re.test(s.name));
  if (!hits.length) throw new Error(`no metric matches ${re}; names: ${[...new Set(samples.map((s) => s.name))].join(' ')}`);
  return hits.reduce((a, s) => a + s.value, 0);
}

// Waits until /metrics shows `running` sequences, `queued` requests and, unless kv is null, `kv` KV blocks
// held. Returns the last samples.
export async function waitFor(server, running, queued, kv = null, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await metrics(server);
    const r = metricValue(s, RUNNING_RE), q = metricValue(s, QUEUED_RE), k = metricValue(s, KV_USED_RE);
    if (r === running && q === queued && (kv === null || k === kv)) return s;
    if (Date.now() > deadline) {
      throw new Error(`not ${running} running, ${queued} queued${kv === null ? '' : `, ${kv} KV blocks`} after ${timeoutMs} ms: ` +
        `running ${r}, queued ${q}, KV blocks held ${k}`);
    }
    await sleep(50);
  }
}

// Waits until /metrics shows no running sequence, no queued request and no KV block held (a cancelled
// stream settles within a step or so, not at once). Returns the last samples.
export async function waitIdle(server, timeoutMs = 10000) {
  return waitFor(server, 0, 0, 0, timeoutMs);
}
export const KV_USED_RE = /^cinfer_kv_blocks_used$/;
export const RUNNING_RE = /^cinfer_running_sequences$/;
export const QUEUED_RE = /^cinfer_queue_depth$/;

export function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

// Sends bytes (string, Buffer or an array of them written with pauses of opts.gapMs) over a fresh socket and
// reads until the server closes or opts.timeoutMs passes. Returns { status, headers, body, raw, closed, ms }.
export function rawHttp(port, chunks, opts = {}) {
  const timeoutMs = opts.timeoutMs ?? 10000;
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const sock = net.connect({ host: '127.0.0.1', port });
    const parts = [];
    let closed = false;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const raw = Buffer.concat(parts);
      resolve({ ...parseResponse(raw), raw, closed, ms: Date.now() - t0 });
    };
    const timer = setTimeout(finish, timeoutMs);
    sock.on('data', (d) => {
      parts.push(d);
      if (opts.untilComplete && responseComplete(Buffer.concat(parts))) finish();
    });
    sock.on('end', () => { closed = true; finish(); });
    sock.on('close', () => { closed = true; finish(); });
    sock.on('error', (e) => { if (e.code === 'ECONNRESET' || e.code === 'EPIPE') { closed = true; finish(); } else if (!done) { done = true; clearTimeout(timer); reject(e); } });
    sock.on('connect', async () => {
      const list = Array.isArray(chunks) ? chunks : [chunks];
      for (let i = 0; i < list.length && !done; i++) {
        if (i && opts.gapMs) await sleep(opts.gapMs);
        if (done || sock.destroyed) break;
        sock.write(list[i]);
      }
      if (opts.end && !sock.destroyed) sock.end();
    });
  });
}

function parseResponse(raw) {
  const s = raw.toString('latin1');
  const he = s.indexOf('\r\n\r\n');
  if (!s.startsWith('HTTP/1.') || he < 0) return { status: 0, headers: {}, body: '' };
  const lines = s.slice(0, he).split('\r\n');
  const status = Number(lines[0].split(' ')[1]);
  const headers = {};
  for (const l of lines.slice(1)) {
    const c = l.indexOf(':');
    headers[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
  }
  let bodyBuf = raw.subarray(Buffer.byteLength(s.slice(0, he + 4), 'latin1'));
  if (/chunked/i.test(headers['transfer-encoding'] || '')) bodyBuf = dechunk(bodyBuf);
  return { status, headers, body: bodyBuf.toString('utf8') };
}

function dechunk(buf) {
  const out = [];
  let i = 0;
  while (i < buf.length) {
    const e = buf.indexOf('\r\n', i);
    if (e < 0) break;
    const n = parseInt(buf.subarray(i, e).toString('latin1'), 16);
    if (!(n > 0)) break;
    out.push(buf.subarray(e + 2, e + 2 + n));
    i = e + 2 + n + 2;
  }
  return Buffer.concat(out);
}

function responseComplete(raw) {
  const r = parseResponse(raw);
  if (!r.status) return false;
  const cl = r.headers['content-length'];
  if (cl !== undefined) return Buffer.byteLength(r.body) >= Number(cl);
  return raw.includes('\r\n0\r\n\r\n');
}

// Splits an SSE body into events: [{ event, data }], data lines joined with \n.
export function sseEvents(text) {
  const events = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    const ev = { event: null, data: null };
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) ev.event = line.slice(7);
      else if (line.startsWith('data: ')) ev.data = ev.data === null ? line.slice(6) : `${ev.data}\n${line.slice(6)}`;
    }
    events.push(ev);
  }
  return events;
}

export async function tokenize(server, content) {
  const r = await fetch(`${server.url}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content, add_special: false }),
  });
  if (r.status !== 200) throw new Error(`/tokenize answered ${r.status}: ${await r.text()}`);
  return (await r.json()).tokens;
}

export async function postJSON(server, route, body, headers = {}) {
  const r = await fetch(`${server.url}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

export const LONG_PROMPT = 'In the beginning God created the heaven and the earth. And the earth was without form, and void; ' +
  'and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. ' +
  'And God said, Let there be light: and there was light. And God saw the light, that it was good: and God ' +
  'divided the light from the darkness. And God called the light Day, and the darkness he called Night.';

export async function detokenize(server, tokens) {
  const r = await fetch(`${server.url}/detokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ tokens }),
  });
  if (r.status !== 200) throw new Error(`/detokenize answered ${r.status}: ${await r.text()}`);
  return (await r.json()).content;
}

// logit_bias that keeps the tiny model from ending a reply (<|endoftext|> 0 and <|im_end|> 2).
export const NO_EOS = { 0: -100, 2: -100 };
