// Every error case in OpenAI format with the right status, and /health while loading and after.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, getJson, postJson, waitReady } from './harness.mjs';

function assertError(res, status, type, messagePart) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.error.code, status);
  assert.equal(res.body.error.type, type);
  if (messagePart) assert.ok(res.body.error.message.includes(messagePart), res.body.error.message);
}

test('/health is 503 while loading, 200 when ready; other routes 503 meanwhile', async () => {
  const server = await startServer({ args: ['--load-delay-ms', '1500'], waitReady: false });
  try {
    const h = await getJson(`${server.url}/health`);
    assertError(h, 503, 'unavailable_error', 'Loading model');
    const c = await postJson(`${server.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }] });
    assertError(c, 503, 'unavailable_error');
    await waitReady(server);
    const ok = await getJson(`${server.url}/health`);
    assert.equal(ok.status, 200);
    assert.deepEqual(ok.body, { status: 'ok' });
  } finally {
    await server.stop();
  }
});

test('400, 404 and context errors; the server keeps serving', async () => {
  const server = await startServer({ args: ['-np', '2', '-c', '256'] });
  try {
    const client = server.client();
    const u = `${server.url}/v1/chat/completions`;
    assertError(await postJson(u, '{"messages": [', {}), 400, 'invalid_request_error', 'JSON');
    assertError(await postJson(u, '[1,2]'), 400, 'invalid_request_error');
    assertError(await postJson(u, {}), 400, 'invalid_request_error', 'messages');
    assertError(await postJson(u, { messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }), 400,
      'invalid_request_error', "'temperature'");
    assertError(await postJson(u, { messages: [{ role: 'wizard', content: 'x' }] }), 400, 'invalid_request_error',
      'messages[0].role');
    assertError(await postJson(u, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }),
      400, 'invalid_request_error', 'image_url');
    assertError(await postJson(u, { messages: [{ role: 'user', content: 'x' }], n: 0 }), 400, 'invalid_request_error', "'n'");
    assertError(await postJson(u, { messages: [{ role: 'user', content: 'x' }], top_p: 3 }), 400, 'invalid_request_error', "'top_p'");
    assertError(await postJson(u, { messages: [{ role: 'user', content: 'x' }], mirostat: 2 }), 400, 'invalid_request_error', 'mirostat');
    assertError(await postJson(`${server.url}/v1/completions`, { prompt: 'x', max_tokens: -3 }), 400,
      'invalid_request_error', "'max_tokens'");
    assertError(await postJson(`${server.url}/v1/completions`, { prompt: [999999] }), 400, 'invalid_request_error', "'prompt'");
    // Unknown route.
    assertError(await getJson(`${server.url}/v1/nothing-here`), 404, 'not_found_error');
    assertError(await postJson(`${server.url}/v2/chat`, {}), 404, 'not_found_error');
    // Prompt longer than the slot's context (256 / 2 = 128 tokens per slot).
    const long = 'word '.repeat(400);
    const e = await postJson(`${server.url}/v1/completions`, { prompt: long, max_tokens: 1 });
    assertError(e, 400, 'exceed_context_size_error');
    assert.equal(e.body.error.n_ctx, 128);
    assert.ok(e.body.error.n_prompt_tokens > 128);
    // The same errors through the openai client raise APIError with the status and body.
    await assert.rejects(client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: long }] }),
      (err) => err.status === 400 && err.error?.type === 'exceed_context_size_error');
    await assert.rejects(client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], top_logprobs: 50, logprobs: true }),
      (err) => err.status === 400 && /top_logprobs/.test(err.message));
    // Disabled endpoints answer 501.
    assertError(await getJson(`${server.url}/metrics`), 501, 'not_supported_error', 'metrics');
    assertError(await postJson(`${server.url}/v1/embeddings`, { input: 'x' }), 501, 'not_supported_error');
    // Still serving.
    const ok = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
    assert.equal(ok.object, 'chat.completion');
  } finally {
    await server.stop();
  }
});

test('401 without or with a wrong API key; /health stays public', async () => {
  const server = await startServer({ args: ['--api-key', 'sekret'] });
  try {
    const u = `${server.url}/v1/chat/completions`;
    const body = { messages: [{ role: 'user', content: 'x' }], max_tokens: 2 };
    assertError(await postJson(u, body), 401, 'authentication_error', 'Invalid API Key');
    assertError(await postJson(u, body, { authorization: 'Bearer wrong' }), 401, 'authentication_error');
    assert.equal((await getJson(`${server.url}/health`)).status, 200);
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.chat.completions.create({ model: 'm', ...body }), (err) => err.status === 401);
    const good = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sekret', maxRetries: 0 });
    const r = await good.chat.completions.create({ model: 'm', ...body });
    assert.equal(r.object, 'chat.completion');
  } finally {
    await server.stop();
  }
});

test('flag errors come before any model read, with a suggestion', async () => {
  const { spawnSync } = await import('node:child_process');
  const r = spawnSync(process.env.BLOOMERY_SERVE, ['-m', '/nonexistent/folder', '--ctx-sise', '8'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /E_FLAG_UNKNOWN/);
  assert.match(r.stderr, /did you mean --ctx-size\?/);
  const q = spawnSync(process.env.BLOOMERY_SERVE, ['-m', '/nonexistent/folder', '-ctk', 'q8_0'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(q.status, 2);
  assert.match(q.stderr, /E_FLAG_REFUSED.*quantized KV/s);
  const h = spawnSync(process.env.BLOOMERY_SERVE, ['--help'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(h.status, 0);
  assert.match(h.stdout, /--ctx-size/);
});

test('flags from the environment: --chat-template-file and -np via BLOOMERY_ARG_*', async () => {
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(`${tmpdir()}/bloomery-e2e-`);
  const tpl = `${dir}/plain.jinja`;
  writeFileSync(tpl, "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] ");
  const server = await startServer({ env: { BLOOMERY_ARG_CHAT_TEMPLATE_FILE: tpl, BLOOMERY_ARG_PARALLEL: '3' } });
  try {
    const t = await postJson(`${server.url}/apply-template`, { messages: [{ role: 'developer', content: 'be brief' }, { role: 'user', content: 'hi' }] });
    assert.equal(t.body.prompt, '[system] be brief\n[user] hi\n[assistant] ');
    const props = await getJson(`${server.url}/props`);
    assert.equal(props.body.total_slots, 3);
    assert.match(server.output(), /--parallel from BLOOMERY_ARG_PARALLEL/);
  } finally {
    await server.stop();
  }
});
