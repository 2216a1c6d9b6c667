// Starts bloomery-serve on a free 127.0.0.1 port with a fixture model and gives tests its URL, an openai
// client and its resident memory. Every wait is bounded.
import { spawn } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import OpenAI from 'openai';

export const SERVE = process.env.BLOOMERY_SERVE;
export const FIXTURES = process.env.BLOOMERY_FIXTURES ??
  path.resolve(path.dirname(new URL(import.meta.url).pathname), '../fixtures/models');
export const MODEL = path.join(FIXTURES, 'qwen3_next-bf16');

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Resolves when `pred()` is true; throws after `ms`.
export async function waitFor(pred, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return;
    await sleep(25);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

export async function startServer({ args = [], env = {}, waitReady = true, model = MODEL } = {}) {
  if (!SERVE || !existsSync(SERVE)) throw new Error(`BLOOMERY_SERVE (${SERVE}) is not a built bloomery-serve`);
  const port = await freePort();
  const proc = spawn(SERVE, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-t', '2', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  let exited = null;
  proc.on('exit', (code, sig) => { exited = { code, sig }; });
  const url = `http://127.0.0.1:${port}`;
  const server = {
    url, port, proc,
    output: () => out,
    exited: () => exited,
    client: (opts = {}) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000, ...opts }),
    rssKiB: () => {
      const m = readFileSync(`/proc/${proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
      return m ? Number(m[1]) : NaN;
    },
    async stop() {
      if (exited) return;
      proc.kill('SIGTERM');
      await waitFor(() => exited !== null, 10000, 'server exit').catch(() => proc.kill('SIGKILL'));
    },
  };
  // Up: the port answers (any status).
  await waitFor(async () => {
    if (exited) throw new Error(`bloomery-serve exited (${JSON.stringify(exited)}):\n${out}`);
    try { await fetch(`${url}/health`); return true; } catch { return false; }
  }, 30000, 'the HTTP port');
  if (waitReady) await waitReady_(server);
  return server;
}

async function waitReady_(server) {
  await waitFor(async () => {
    if (server.exited()) throw new Error(`bloomery-serve exited:\n${server.output()}`);
    const r = await fetch(`${server.url}/health`);
    return r.status === 200;
  }, 60000, '/health 200');
}
export { waitReady_ as waitReady };

export async function getJson(url, init) {
  const r = await fetch(url, init);
  const text = await r.text();
  let body;
  try { body = JSON.parse(text); } catch { body = text; }
  return { status: r.status, body, headers: r.headers };
}

export function postJson(url, body, headers = {}) {
  return getJson(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

// The metric's value from Prometheus text.
export function metric(text, name) {
  const m = text.match(new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} ([0-9.eE+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}
