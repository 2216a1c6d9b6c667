// The OpenAI and llama.cpp routes through the real openai client: chat and completions, streaming and not,
// stop strings, usage, logprobs, seeds, reasoning split, and the llama.cpp side routes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, getJson, postJson } from './harness.mjs';

let server, client;
before(async () => {
  server = await startServer({ args: ['-np', '2', '-c', '2048', '--metrics'] });
  client = server.client();
});
after(async () => { await server?.stop(); });

const chat = [{ role: 'user', content: 'Say something.' }];

test('chat completion, non-streaming: shape, usage, finish_reason', async () => {
  const r = await client.chat.completions.create({ model: 'anything', messages: chat, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, 'anything');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 8);
  // The prompt is the checkpoint's own template rendered and tokenised.
  const tpl = await postJson(`${server.url}/apply-template`, { messages: chat });
  assert.equal(tpl.status, 200);
  assert.equal(tpl.body.prompt, '<|im_start|>user\nSay something.<|im_end|>\n<|im_start|>assistant\n');
  const tok = await postJson(`${server.url}/tokenize`, { content: tpl.body.prompt });
  assert.equal(r.usage.prompt_tokens, tok.body.tokens.length);
});

test('greedy is deterministic and streaming carries the same text', async () => {
  const a = await client.chat.completions.create({ model: 'm', messages: chat, max_tokens: 12, temperature: 0 });
  const b = await client.chat.completions.create({ model: 'm', messages: chat, max_tokens: 12, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const stream = await client.chat.completions.create({
    model: 'm', messages: chat, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', ids = new Set(), finish = null, usage = null, first = true, created = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    created.add(chunk.created);
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (first) { assert.equal(chunk.choices[0].delta.role, 'assistant'); first = false; }
    if (chunk.choices.length === 0) { usage = chunk.usage; continue; }
    text += chunk.choices[0].delta.content ?? '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(ids.size, 1);
  assert.equal(created.size, 1);
  assert.equal(text, a.choices[0].message.content);
  assert.equal(finish, a.choices[0].finish_reason);
  assert.deepEqual(usage.completion_tokens, a.usage.completion_tokens);
  assert.deepEqual(usage.prompt_tokens, a.usage.prompt_tokens);
});

test('seeded sampling repeats; max_completion_tokens limits', async () => {
  const req = { model: 'm', messages: chat, max_completion_tokens: 10, temperature: 1.0, top_k: 0, top_p: 1, min_p: 0, seed: 1234 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.ok(a.usage.completion_tokens <= 10);
});

test('completions, streaming and not', async () => {
  const r = await client.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 6, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  const s = await client.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 6, temperature: 0, stream: true });
  let text = '', finish = null;
  for await (const c of s) {
    assert.equal(c.object, 'text_completion');
    text += c.choices[0]?.text ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, r.choices[0].finish_reason);
  // A token-id prompt works too.
  const tok = await postJson(`${server.url}/tokenize`, { content: 'Once upon a time' });
  const t = await client.completions.create({ model: 'm', prompt: tok.body.tokens, max_tokens: 6, temperature: 0 });
  assert.equal(t.choices[0].text, r.choices[0].text);
});

test('stop strings end generation and are never emitted, not even partly', async () => {
  // Greedy output without a stop, then a stop string taken from its middle: the output must end right before it.
  const base = await client.completions.create({ model: 'm', prompt: 'The weather', max_tokens: 40, temperature: 0, ignore_eos: true });
  const text = base.choices[0].text;
  assert.ok(text.length >= 8, `need some text to cut, got ${JSON.stringify(text)}`);
  const at = Math.floor(text.length / 2);
  const stop = text.slice(at, at + 3);
  const expected = text.slice(0, text.indexOf(stop));
  const r = await client.completions.create({ model: 'm', prompt: 'The weather', max_tokens: 40, temperature: 0, ignore_eos: true, stop: [stop] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.completions.create({ model: 'm', prompt: 'The weather', max_tokens: 40, temperature: 0, ignore_eos: true, stop, stream: true });
  let streamed = '';
  for await (const c of s) streamed += c.choices[0]?.text ?? '';
  assert.equal(streamed, expected);
  assert.ok(!streamed.includes(stop));
  // llama.cpp's /completion reports the stopping word.
  const l = await postJson(`${server.url}/completion`, { prompt: 'The weather', n_predict: 40, temperature: 0, ignore_eos: true, stop: [stop] });
  assert.equal(l.body.content, expected);
  assert.equal(l.body.stop_type, 'word');
  assert.equal(l.body.stopping_word, stop);
});

test('logprobs and top_logprobs', async () => {
  // ignore_eos: an EOS is counted in completion_tokens but carries no text, hence no logprobs entry.
  const r = await client.chat.completions.create({ model: 'm', messages: chat, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const e of lp) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    assert.ok(Array.isArray(e.bytes));
  }
  const c = await client.completions.create({ model: 'm', prompt: 'Hello', max_tokens: 3, temperature: 0, logprobs: 2, ignore_eos: true });
  assert.equal(c.choices[0].logprobs.tokens.length, c.usage.completion_tokens);
  assert.ok(c.choices[0].logprobs.token_logprobs.every((x) => x <= 0));
  // {token text: logprob}: two alternatives, fewer only when both decode to the same text (e.g. U+FFFD).
  for (const m of c.choices[0].logprobs.top_logprobs) {
    const n = Object.keys(m).length;
    assert.ok(n >= 1 && n <= 2, `top_logprobs entry with ${n} keys`);
  }
});

test('presence and frequency penalties are accepted and change greedy output eventually', async () => {
  const a = await client.completions.create({ model: 'm', prompt: 'a a a', max_tokens: 24, temperature: 0, ignore_eos: true });
  const b = await client.completions.create({ model: 'm', prompt: 'a a a', max_tokens: 24, temperature: 0, ignore_eos: true, frequency_penalty: 2, presence_penalty: 2 });
  assert.equal(a.usage.completion_tokens, 24);
  assert.equal(b.usage.completion_tokens, 24);
  assert.notEqual(a.choices[0].text, b.choices[0].text);
});

test('llama.cpp /completion streaming: per-token events then a final stop event, no [DONE]', async () => {
  const r = await fetch(`${server.url}/completion`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'Hello', n_predict: 5, temperature: 0, stream: true, ignore_eos: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const body = await r.text();
  assert.ok(!body.includes('[DONE]'));
  const events = body.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
  const last = events.at(-1);
  assert.equal(last.stop, true);
  assert.equal(last.tokens_predicted, 5);
  assert.equal(last.stop_type, 'limit');
  assert.equal(events.slice(0, -1).reduce((n, e) => n + e.tokens.length, 0), 5);
});

test('tokenize, detokenize, models, props, slots', async () => {
  const t = await postJson(`${server.url}/tokenize`, { content: 'hello world', with_pieces: true });
  assert.equal(t.status, 200);
  const ids = t.body.tokens.map((x) => x.id);
  assert.equal(t.body.tokens.map((x) => x.piece).join(''), 'hello world');
  const d = await postJson(`${server.url}/detokenize`, { tokens: ids });
  assert.equal(d.body.content, 'hello world');
  const models = await client.models.list();
  const list = [];
  for await (const m of models) list.push(m);
  assert.equal(list.length, 1);
  assert.equal(list[0].object, 'model');
  const props = await getJson(`${server.url}/props`);
  assert.equal(props.body.total_slots, 2);
  assert.equal(props.body.default_generation_settings.n_ctx, 1024);
  assert.match(props.body.chat_template, /im_start/);
  const slots = await getJson(`${server.url}/slots`);
  assert.equal(slots.body.length, 2);
  assert.equal(slots.body[0].n_ctx, 1024);
});

test('reasoning_content is split from content when the template has think tags', async () => {
  // Force <think> (id 3 in the fixture vocabulary) as every output token: the first opens the think block, the
  // others are its text; nothing reaches content.
  const b = await client.chat.completions.create({
    model: 'm', messages: chat, max_tokens: 3, temperature: 0, logit_bias: { 3: 100 },
  });
  assert.equal(b.choices[0].message.content, '');
  assert.equal(b.choices[0].message.reasoning_content, '<think><think>');
  // The same through the stream: reasoning_content deltas only.
  const s = await client.chat.completions.create({
    model: 'm', messages: chat, max_tokens: 3, temperature: 0, logit_bias: { 3: 100 }, stream: true,
  });
  let reasoning = '', content = '';
  for await (const c of s) {
    reasoning += c.choices[0]?.delta?.reasoning_content ?? '';
    content += c.choices[0]?.delta?.content ?? '';
  }
  assert.equal(reasoning, '<think><think>');
  assert.equal(content, '');
});
