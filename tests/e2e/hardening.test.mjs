// Issue 18: the server holds hostile clients and load. Exclusive listen, bounded bodies, linear-time JSON,
// every client mistake a 400 (the seeded fuzz is fuzz_requests.test.mjs), key files that cannot fail open, idle and slow connections that
// starve nothing, and a SIGTERM that drains streams. Everything on 127.0.0.1, bounded in time and count.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { startServer, getJson, postJson, waitFor, sleep, MODEL, SERVE } from './harness.mjs';


function assertError(res, status, type, part) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.error.code, status);
  assert.equal(res.body.error.type, type);
  if (part) assert.ok(res.body.error.message.includes(part), res.body.error.message);
}

// Raw TCP: write `text`, resolve with what the server sent until it closed (or `ms` passed).
function raw(port, text, ms = 5000) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    const done = () => { clearTimeout(t); s.destroy(); resolve(got); };
    const t = setTimeout(done, ms);
    s.on('data', (d) => { got += d; });
    s.on('end', done);
    s.on('error', done);
    s.write(text);
  });
}

test('a second server on the same port exits non-zero with E_LISTEN', async () => {
  const server = await startServer();
  try {
    const r = spawnSync(SERVE, ['-m', MODEL, '--host', '127.0.0.1', '--port', String(server.port), '-t', '1'],
      { encoding: 'utf8', timeout: 30000 });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /E_LISTEN/);
    assert.match(r.stderr, new RegExp(`127\\.0\\.0\\.1:${server.port}`));
    assert.match(r.stderr, /Address already in use/);
    assert.equal((await getJson(`${server.url}/health`)).status, 200);  // the first one still serves
  } finally {
    await server.stop();
  }
});

test('-c below a usable per-slot context is refused at start, naming the minimum', () => {
  const r = spawnSync(SERVE, ['-m', MODEL, '--host', '127.0.0.1', '--port', '1', '-np', '2', '-c', '10', '-t', '1'],
    { encoding: 'utf8', timeout: 30000 });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /E_FLAG_VALUE/);
  assert.match(r.stderr, /-c\/--ctx-size/);
  assert.match(r.stderr, /at least 128 tokens/);
  assert.ok(!/^http\s/m.test(r.stdout), 'it listened');
});

test('a body over --http-max-body is 413 before it is sent; RSS stays bounded', async () => {
  const server = await startServer({ args: ['--http-max-body', '1'] });
  try {
    const rss0 = server.rssKiB();
    // 50 GB announced, nothing sent: the answer comes without the body.
    const got = await raw(server.port,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      'Content-Length: 50000000000\r\n\r\n{"messages":', 5000);
    assert.match(got, /^HTTP\/1\.1 413/);
    assert.match(got, /"type":"invalid_request_error"/);
    assert.match(got, /--http-max-body 1/);
    // 2 MiB sent in full: 413 too, in the OpenAI format.
    const big = await postJson(`${server.url}/tokenize`, JSON.stringify({ content: 'x'.repeat(2 << 20) }));
    assertError(big, 413, 'invalid_request_error', 'limit is 1048576 bytes');
    // A chunked body (no length to check first) past the limit is cut off, not buffered.
    const chunk = 'a'.repeat(1 << 16);
    const chunked = await new Promise((resolve) => {
      const s = net.connect(server.port, '127.0.0.1');
      let got2 = '';
      s.on('data', (d) => { got2 += d; });
      s.on('close', () => resolve(got2));
      s.on('error', () => {});
      s.write('POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
      let sent = 0;
      const pump = () => {
        while (sent < 64 && s.writable) { s.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`); sent++; }
      };
      pump();
      setTimeout(() => s.destroy(), 5000);
    });
    assert.ok(!/^HTTP\/1\.1 200/.test(chunked), chunked.slice(0, 200));
    assert.ok(server.rssKiB() - rss0 < 64 * 1024, `RSS grew ${server.rssKiB() - rss0} KiB`);
    assert.equal((await getJson(`${server.url}/health`)).status, 200);
  } finally {
    await server.stop();
  }
});

test('JSON bodies parse in linear time: 200k keys cost about 10x 20k keys, not 100x', async () => {
  const server = await startServer();
  try {
    const body = (n) => {
      const parts = ['"content":"x"'];
      for (let i = 0; i < n; i++) parts.push(`"k${i}":${i}`);
      return `{${parts.join(',')}}`;
    };
    const time = async (text) => {
      let best = Infinity;
      for (let r = 0; r < 3; r++) {
        const t0 = process.hrtime.bigint();
        const res = await postJson(`${server.url}/tokenize`, text);
        assert.equal(res.status, 200);
        best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e6);
      }
      return best;
    };
    const small = body(20000), large = body(200000);
    await time(small);  // warm
    const t20 = await time(small), t200 = await time(large);
    console.log(`JSON keys: 20k ${t20.toFixed(1)} ms, 200k ${t200.toFixed(1)} ms, ratio ${(t200 / t20).toFixed(1)}`);
    // Linear is 10x; the old quadratic parser was 100x. 35 leaves room for a noisy 2-core CI machine.
    assert.ok(t200 / t20 < 35, `ratio ${t200 / t20}`);
    const deep = '['.repeat(200) + ']'.repeat(200);
    assertError(await postJson(`${server.url}/tokenize`, `{"content":"x","d":${deep}}`), 400, 'invalid_request_error',
      'deeper than 128');
  } finally {
    await server.stop();
  }
});

test('key files: empty or comment-only refuse to start; comments, spaces and commas trimmed; keys never shown', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'bloomery-keys-'));
  const refuse = (content) => {
    const f = path.join(dir, `k${Math.random()}`);
    writeFileSync(f, content);
    const r = spawnSync(SERVE, ['-m', MODEL, '--port', '1', '--api-key-file', f], { encoding: 'utf8', timeout: 20000 });
    assert.notEqual(r.status, 0, `started with key file ${JSON.stringify(content)}`);
    assert.match(r.stderr, /E_FLAG_VALUE/);
    assert.match(r.stderr, /--api-key-file/);
  };
  refuse('');
  refuse('\n\n   \n');
  refuse('# only a comment\n   # another\n');
  refuse(' , ,\n');
  const r = spawnSync(SERVE, ['-m', MODEL, '--port', '1', '--api-key-file', path.join(dir, 'missing')], { encoding: 'utf8', timeout: 20000 });
  assert.notEqual(r.status, 0);

  const f = path.join(dir, 'keys');
  writeFileSync(f, '# team keys\n  alpha  # laptop\nbeta,gamma \n\n\tdel#ta\n');
  const server = await startServer({ args: ['--api-key-file', f, '--api-key', ' K1 , K2 '] });
  try {
    const out = server.output();
    assert.match(out, /API keys: 6 loaded/);
    for (const k of ['alpha', 'beta', 'gamma', 'del#ta', 'K1', 'K2']) assert.ok(!out.includes(k), `start screen shows ${k}`);
    const u = `${server.url}/v1/chat/completions`;
    const body = { messages: [{ role: 'user', content: 'x' }], max_tokens: 1 };
    for (const k of ['alpha', 'beta', 'gamma', 'del#ta', 'K1', 'K2'])
      assert.equal((await postJson(u, body, { authorization: `Bearer ${k}` })).status, 200, k);
    for (const k of ['alpha  # laptop', ' K2', 'del', '# team keys', ''])
      assertError(await postJson(u, body, { authorization: `Bearer ${k}` }), 401, 'authentication_error');
    // llama-server keeps the model list public.
    assert.equal((await getJson(`${server.url}/v1/models`)).status, 200);
    assert.equal((await getJson(`${server.url}/props`)).status, 401);
  } finally {
    await server.stop();
  }
});

// Every field type mistake the attack found (500s before), each a 400 naming the field.
const MISTAKES = [
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], reasoning_format: 5 }, 'reasoning_format'],
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], reasoning_format: 'loud' }, 'reasoning_format'],
  ['/completion', { prompt: 'x', return_tokens: 'yes' }, 'return_tokens'],
  ['/tokenize', { content: 'x', add_special: 1 }, 'add_special'],
  ['/tokenize', { content: 'x', parse_special: 'no' }, 'parse_special'],
  ['/tokenize', { content: 'x', with_pieces: [] }, 'with_pieces'],
  ['/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"temperature":1e999}', 'temperature'],
  ['/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"top_p":-1e400}', 'top_p'],
  ['/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"seed":18446744073709551615}', 'seed'],
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { messages: [] } }, 'chat_template_kwargs.messages'],
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { add_generation_prompt: false } }, 'chat_template_kwargs.add_generation_prompt'],
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { bos_token: 'x' } }, 'chat_template_kwargs.bos_token'],
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: 3 }, 'chat_template_kwargs'],
  ['/v1/completions', { prompt: 'x', max_tokens: 1.5 }, 'max_tokens'],
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], stream: 'yes' }, 'stream'],
  ['/detokenize', { tokens: [1, 'a'] }, 'tokens'],
];

test('client mistakes are 400s naming the field; no library text leaks', async () => {
  const server = await startServer();
  try {
    for (const [route, body, field] of MISTAKES) {
      const res = await postJson(`${server.url}${route}`, body);
      assertError(res, 400, 'invalid_request_error', `'${field}'`);
      assert.ok(!/\[json\.exception|type_error|parse_error/.test(res.body.error.message), res.body.error.message);
    }
    const syntax = await postJson(`${server.url}/v1/chat/completions`, '{"messages": [tru');
    assertError(syntax, 400, 'invalid_request_error', 'syntax error at byte');
    assert.ok(!syntax.body.error.message.includes('json.exception'));
  } finally {
    await server.stop();
  }
});

test('1,000 idle keep-alive + 200 slow-header connections: 64 openai chats complete, /health p99 <= 100 ms', { timeout: 240000 }, async () => {
  const server = await startServer({ args: ['-np', '4', '-c', '4096'] });
  const socks = [];
  try {
    const open = (payload) => new Promise((resolve) => {
      const s = net.connect(server.port, '127.0.0.1', () => { s.write(payload); resolve(s); });
      s.on('error', () => {});
      s.on('data', () => {});  // flowing, so the server's close shows as 'close'
      s.on('close', () => { s.closedAt = Date.now(); });
      socks.push(s);
    });
    // Idle keep-alive: a complete request answered, then the connection left open and silent.
    for (let i = 0; i < 1000; i++) await open('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    // Slow headers: half a request, then one header line a second.
    const slow = [];
    for (let i = 0; i < 200; i++) slow.push(await open('GET /health HTTP/1.1\r\nHost'));
    const drip = setInterval(() => { for (const s of slow) if (!s.destroyed) s.write(`\r\nX-Drip: ${Date.now()}`); }, 1000);
    try {
      await sleep(500);
      const client = server.client({ timeout: 120000 });
      const chats = Array.from({ length: 64 }, (_, i) => client.chat.completions.create({
        model: 'm', messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 8,
      }));
      const lat = [];
      const health = (async () => {
        for (let i = 0; i < 200; i++) {
          const t0 = process.hrtime.bigint();
          const r = await fetch(`${server.url}/health`);
          await r.text();
          assert.equal(r.status, 200);
          lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
          await sleep(10);
        }
      })();
      const done = await Promise.all(chats);
      await health;
      for (const r of done) assert.equal(r.object, 'chat.completion');
      lat.sort((a, b) => a - b);
      const p99 = lat[Math.floor(lat.length * 0.99) - 1];
      console.log(`starvation: 64 chats done; /health p50 ${lat[lat.length >> 1].toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`);
      assert.ok(p99 <= 100, `p99 ${p99} ms`);
    } finally {
      clearInterval(drip);
    }
    // The drip cannot hold a connection past the header deadline (10 s by default).
    await waitFor(() => slow.every((s) => s.closedAt), 20000, 'slow-header connections closed');
  } finally {
    for (const s of socks) s.destroy();
    await server.stop();
  }
});

test('past --http-max-connections a new connection gets 503 at once', async () => {
  const server = await startServer({ args: ['--http-max-connections', '20'] });
  const socks = [];
  try {
    // The harness's own /health polls left a keep-alive connection open, which counts against the cap until
    // the server closes it (keep-alive 5 s).
    await sleep(5500);
    // Each held connection first gets one full answer, which proves the server has accepted it (a probe sent
    // while some were still in the accept backlog would take a slot and push a held one past the cap), then
    // sends half of a second request, so it stays open under the header deadline (10 s) instead of the
    // keep-alive time.
    await Promise.all(Array.from({ length: 20 }, () => new Promise((resolve, reject) => {
      const s = net.connect(server.port, '127.0.0.1', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
      let got = '';
      s.on('error', reject);
      s.on('data', (d) => {
        got += d;
        if (!s.held && /\r\n\r\n[\s\S]*"status"/.test(got)) {
          s.held = true;
          s.write('GET /health HTTP/1.1\r\n');
          resolve();
        }
      });
      s.on('close', () => { s.closedAt = Date.now(); reject(new Error(`a held connection closed before its answer: ${got}`)); });
      socks.push(s);
    })));
    let got = '', took = 0;
    const end = Date.now() + 5000;
    while (Date.now() < end) {
      const t0 = Date.now();
      got = await raw(server.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n', 3000);
      took = Date.now() - t0;
      if (/^HTTP\/1\.1 503/.test(got)) break;
      await sleep(100);
    }
    assert.match(got, /^HTTP\/1\.1 503/, `${socks.filter((s) => s.closedAt).length} of the 20 held connections were closed`);
    assert.match(got, /"type":"unavailable_error"/);
    // "At once" means without waiting for a held connection to end (they are held past the header deadline,
    // 10 s): a loaded 2-core CI machine has taken just over 1 s to start the refusing thread, so the bound
    // leaves room for that and stays far below what a queued connection would take.
    assert.ok(took < 2500, `503 took ${took} ms`);
    for (const s of socks) s.destroy();
    await waitFor(async () => (await fetch(`${server.url}/health`).catch(() => ({ status: 0 }))).status === 200, 5000, 'served again');
  } finally {
    for (const s of socks) s.destroy();
    await server.stop();
  }
});

test('SIGTERM drains a stream in progress; a second signal exits at once', async () => {
  const server = await startServer({ args: ['-np', '2', '-c', '4096'] });
  const client = server.client({ timeout: 60000 });
  const stream = await client.chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: 'go' }], max_tokens: 1500, ignore_eos: true, stream: true,
  });
  let n = 0;
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  server.proc.kill('SIGTERM');
  await waitFor(async () => (await getJson(`${server.url}/health`)).status === 503, 2000, '/health 503 "Shutting down"');
  // New work is refused while the stream goes on.
  assertError(await postJson(`${server.url}/v1/completions`, { prompt: 'x', max_tokens: 1 }), 503, 'unavailable_error');
  let finish = null;
  for (let r = await it.next(); !r.done; r = await it.next()) { n++; finish = r.value.choices[0]?.finish_reason ?? finish; }
  assert.equal(finish, 'length', 'the stream ran to its end');
  await waitFor(() => server.exited() !== null, 10000, 'exit after the drain');
  assert.equal(server.exited().code, 0);

  const second = await startServer({ args: ['-np', '2', '-c', '4096', '--shutdown-timeout', '60'] });
  const c2 = second.client({ timeout: 60000 });
  const s2 = await c2.chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: 'go' }], max_tokens: 4000, ignore_eos: true, stream: true,
  });
  const it2 = s2[Symbol.asyncIterator]();
  await it2.next();
  second.proc.kill('SIGTERM');
  await sleep(200);
  const t0 = Date.now();
  second.proc.kill('SIGTERM');
  await waitFor(() => second.exited() !== null, 3000, 'exit on the second signal');
  assert.ok(Date.now() - t0 < 3000);
  assert.notEqual(second.exited().code, 0);
});
