// What coding agents and frameworks need, through the real openai client: tool calls in the template's own
// syntax (GLM's arg_key/arg_value, Qwen's XML function tags) with tool_choice required / named / none over a
// multi-turn conversation, streamed and not; structured output by constrained decoding (json_schema over many
// seeds, llama.cpp's grammar field, --grammar-file); n > 1 and several prompts per request. The tiny random
// fixtures write gibberish, so every valid call or document here is the grammar's doing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { writeFileSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import { startServer, postJson, getJson, metric, FIXTURES } from './harness.mjs';

const TEMPLATES = path.resolve(FIXTURES, '../chat_templates');
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] }, days: { type: 'integer' } },
      required: ['city'],
    },
  },
}, {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 5 } }, required: ['tz'] } },
}];

function checkCall(call, name) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  if (name) assert.equal(call.function.name, name);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.ok(['Paris', 'Oslo'].includes(args.city), call.function.arguments);
    if ('days' in args) assert.ok(Number.isInteger(args.days), call.function.arguments);
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.equal(typeof args.tz, 'string');
    assert.ok([...args.tz].length <= 5);
  }
  return args;
}

let glm, xml;
before(async () => {
  [glm, xml] = await Promise.all([
    startServer({ model: path.join(FIXTURES, 'glm5_next-bf16'),
      args: ['-np', '2', '-c', '4096', '--chat-template-file', path.join(TEMPLATES, 'glm_style.jinja')] }),
    startServer({ args: ['-np', '2', '-c', '4096', '--chat-template-file', path.join(TEMPLATES, 'qwen35_style.jinja')] }),
  ]);
});
after(async () => { await Promise.all([glm?.stop(), xml?.stop()]); });

test('multi-turn tool conversation (GLM tags): required, then named, then none, with the results fed back', async () => {
  const client = glm.client();
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  for (let seed = 0; seed < 3; seed++) {
    const r = await client.chat.completions.create({ model: 'm', messages, tools, tool_choice: 'required', max_tokens: 200, temperature: 1, seed });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(r));
    assert.equal(choice.message.tool_calls.length, 1);
    checkCall(choice.message.tool_calls[0]);
    assert.ok(choice.message.content === null || choice.message.content === '', JSON.stringify(choice.message));
  }
  // Turn 2: the assistant's call and the tool's answer go back through the template; force the other tool.
  const first = await client.chat.completions.create({ model: 'm', messages, tools, tool_choice: 'required', max_tokens: 200, seed: 7 });
  const call = first.choices[0].message.tool_calls[0];
  messages.push({ role: 'assistant', content: null, tool_calls: [call] });
  messages.push({ role: 'tool', tool_call_id: call.id, content: '{"temp_c": 18}' });
  messages.push({ role: 'user', content: 'And the time there?' });
  const tpl = await postJson(`${glm.url}/apply-template`, { messages, tools });
  assert.equal(tpl.status, 200);
  assert.match(tpl.body.prompt, /<tool_call>get_weather/);
  assert.match(tpl.body.prompt, /<tool_response>\n\{"temp_c": 18\}/);
  const named = await client.chat.completions.create({ model: 'm', messages, tools, max_tokens: 200, seed: 3,
    tool_choice: { type: 'function', function: { name: 'get_time' } } });
  assert.equal(named.choices[0].finish_reason, 'tool_calls');
  const args = checkCall(named.choices[0].message.tool_calls[0], 'get_time');
  messages.push({ role: 'assistant', content: null, tool_calls: named.choices[0].message.tool_calls });
  messages.push({ role: 'tool', tool_call_id: named.choices[0].message.tool_calls[0].id, content: `12:00 ${args.tz}` });
  // Turn 3: tool_choice none: plain text, nothing parsed as a call.
  const none = await client.chat.completions.create({ model: 'm', messages, tools, tool_choice: 'none', max_tokens: 16, seed: 1 });
  assert.equal(typeof none.choices[0].message.content, 'string');
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.notEqual(none.choices[0].finish_reason, 'tool_calls');
});

test('streamed tool calls reassemble into the same call (id and name first, then the arguments)', async () => {
  const client = glm.client();
  const stream = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'weather?' }], tools,
    tool_choice: 'required', max_tokens: 200, seed: 11, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const tc of c.delta?.tool_calls ?? []) {
        calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
        if (tc.id) calls[tc.index].id = tc.id;
        if (tc.function?.name) calls[tc.index].function.name += tc.function.name;
        if (tc.function?.arguments) calls[tc.index].function.arguments += tc.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  checkCall(calls[0]);
  // The same request without streaming gives the same call (same seed, same constrained sampling).
  const r = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'weather?' }], tools,
    tool_choice: 'required', max_tokens: 200, seed: 11 });
  assert.equal(r.choices[0].message.tool_calls[0].function.arguments, calls[0].function.arguments);
});

test('Qwen XML tool syntax (<function=...><parameter=...>) through its template', async () => {
  const client = xml.client();
  for (let seed = 0; seed < 3; seed++) {
    const r = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'time?' }], tools,
      tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200, seed, temperature: 1 });
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r));
    checkCall(r.choices[0].message.tool_calls[0], 'get_weather');
  }
  // A named function that is not among the tools is a 400.
  const bad = await postJson(`${xml.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }], tools,
    tool_choice: { type: 'function', function: { name: 'nope' } } });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error.message, /nope/);
});

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 6 },
    n: { type: 'integer' },
    ok: { type: 'boolean' },
    tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
    color: { enum: ['red', 'green'] },
  },
  required: ['name', 'n', 'ok', 'tags'],
  additionalProperties: false,
};

function validate(v) {
  assert.equal(typeof v, 'object');
  assert.deepEqual(Object.keys(v).filter((k) => !(k in schema.properties)), []);
  for (const k of schema.required) assert.ok(k in v, k);
  assert.equal(typeof v.name, 'string');
  assert.ok([...v.name].length <= 6);
  assert.ok(Number.isInteger(v.n));
  assert.equal(typeof v.ok, 'boolean');
  assert.ok(Array.isArray(v.tags) && v.tags.length <= 3 && v.tags.every((t) => t === 'a' || t === 'b'));
  if ('color' in v) assert.ok(['red', 'green'].includes(v.color));
}

test('response_format json_schema: every seed parses and validates', async () => {
  const client = xml.client();
  for (let seed = 0; seed < 10; seed++) {
    const r = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'A record.' }], max_tokens: 400,
      temperature: 1, seed, response_format: { type: 'json_schema', json_schema: { name: 'rec', schema } } });
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    validate(JSON.parse(r.choices[0].message.content));
  }
  // llama-server's json_schema field and response_format json_object with a schema do the same.
  const a = await postJson(`${xml.url}/completion`, { prompt: 'x', json_schema: schema, n_predict: 400, seed: 5 });
  validate(JSON.parse(a.body.content));
  const b = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 400, seed: 6,
    response_format: { type: 'json_object', schema } });
  validate(JSON.parse(b.choices[0].message.content));
});

test('GBNF grammar field; uncompilable grammars and schemas are 400s naming the construct', async () => {
  for (let seed = 0; seed < 5; seed++) {
    const r = await postJson(`${xml.url}/completion`, { prompt: 'Answer:', grammar: 'root ::= ("yes" | "no") "." [0-9]{2}', n_predict: 64, seed, temperature: 1 });
    assert.equal(r.status, 200);
    assert.match(r.body.content, /^(yes|no)\.[0-9]{2}$/);
  }
  const g = await postJson(`${xml.url}/completion`, { prompt: 'x', grammar: 'root ::= undefined-rule' });
  assert.equal(g.status, 400);
  assert.match(g.body.error.message, /Failed to parse grammar.*undefined-rule/);
  const s = await postJson(`${xml.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { schema: { type: 'string', pattern: '^a+$' } } } });
  assert.equal(s.status, 400);
  assert.equal(s.body.error.type, 'invalid_request_error');
  assert.match(s.body.error.message, /'pattern'/);
  // The server keeps serving.
  const ok = await xml.client().chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
  assert.equal(ok.object, 'chat.completion');
});

test('n > 1 and several prompts in one /v1/completions request', async () => {
  const client = xml.client();
  const r = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], n: 3, max_tokens: 12, temperature: 1, seed: 42 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  // (This template opens a think block, so the text is in reasoning_content.)
  const said = (c) => (c.message.reasoning_content ?? '') + (c.message.content ?? '');
  assert.ok(new Set(r.choices.map(said)).size > 1, 'the choices should differ by seed');
  const one = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 12, temperature: 1, seed: 42 });
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);  // the prompt is counted once
  assert.equal(said(r.choices[0]), said(one.choices[0]));  // choice 0 uses the seed as given
  // Streaming: chunks carry each choice's index and every choice finishes.
  const stream = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], n: 2, max_tokens: 6, stream: true, seed: 1 });
  const text = ['', ''];
  const finished = [null, null];
  for await (const chunk of stream)
    for (const c of chunk.choices) {
      text[c.index] += c.delta?.content ?? '';
      if (c.finish_reason) finished[c.index] = c.finish_reason;
    }
  assert.ok(finished.every((f) => f === 'stop' || f === 'length'), JSON.stringify(finished));
  // Several prompts, each with n choices: prompt i's choices are indices i*n .. i*n+n-1.
  const c = await client.completions.create({ model: 'm', prompt: ['One', 'Two words'], n: 2, max_tokens: 4, seed: 3 });
  assert.equal(c.choices.length, 4);
  assert.deepEqual(c.choices.map((x) => x.index), [0, 1, 2, 3]);
  const p1 = await client.completions.create({ model: 'm', prompt: 'One', max_tokens: 1 });
  const p2 = await client.completions.create({ model: 'm', prompt: 'Two words', max_tokens: 1 });
  assert.equal(c.usage.prompt_tokens, p1.usage.prompt_tokens + p2.usage.prompt_tokens);
  const again = await client.completions.create({ model: 'm', prompt: 'Two words', max_tokens: 4, seed: 3 });
  assert.equal(c.choices[2].text, again.choices[0].text);
});

for (const tp of [[], ['--tp', '2']]) test(`n > 1 choices share one prefill: the prompt is read once, each choice is its own seed's sample ${tp.join(' ')}`, async () => {
  // Under --tp every rank copies its own shard of the leader's state (a step plan).
  const s = await startServer({ args: ['-np', '3', '-c', '1024', '--metrics', ...tp] });
  try {
    const prompt = 'The quick brown fox jumps over the lazy dog, and then';
    const tokensRead = async () => metric((await getJson(`${s.url}/metrics`)).body, 'llamacpp:prompt_tokens_total');
    const before = await tokensRead();
    const r = await postJson(`${s.url}/completion`, { prompt, n_cmpl: 3, n_predict: 8, temperature: 1, seed: 5 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.length, 3);
    const n = r.body[0].tokens_evaluated;
    assert.ok(n > 5);
    // llama-server's timings: one choice evaluated the prompt, the two others took it from that prefill.
    const split = r.body.map((c) => [c.timings.prompt_n, c.timings.cache_n]).sort((a, b) => b[0] - a[0]);
    assert.deepEqual(split, [[n, 0], [0, n], [0, n]]);
    assert.equal(await tokensRead() - before, n, 'the prompt is read once for three choices');
    // Each choice is exactly what its seed gives alone (choice i has seed + i), and the samples differ.
    for (let i = 0; i < 3; i++) {
      const one = await postJson(`${s.url}/completion`, { prompt, n_predict: 8, temperature: 1, seed: 5 + i });
      assert.equal(r.body[i].content, one.body.content, `choice ${i}`);
      assert.equal(one.body.timings.cache_n, 0);
    }
    assert.ok(new Set(r.body.map((c) => c.content)).size > 1, 'different seeds should give different samples');
    // Greedy: n identical choices, still from one read; usage counts the prompt once.
    const b2 = await tokensRead();
    const g = await s.client().chat.completions.create({ model: 'm', messages: [{ role: 'user', content: prompt }], n: 3, max_tokens: 8, temperature: 0 });
    const said = (c) => (c.message.reasoning_content ?? '') + (c.message.content ?? '');
    assert.equal(new Set(g.choices.map(said)).size, 1);
    assert.equal(await tokensRead() - b2, g.usage.prompt_tokens);
  } finally {
    await s.stop();
  }
});

test('--grammar-file constrains every request that brings no grammar of its own', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bloomery-g-'));
  const file = path.join(dir, 'abc.gbnf');
  writeFileSync(file, 'root ::= [abc]{3} "!"\n');
  const s = await startServer({ args: ['-np', '1', '-c', '1024', '--grammar-file', file] });
  try {
    for (let seed = 0; seed < 3; seed++) {
      const r = await s.client().completions.create({ model: 'm', prompt: 'x', max_tokens: 32, seed, temperature: 1 });
      assert.match(r.choices[0].text, /^[abc]{3}!$/);
    }
  } finally {
    await s.stop();
  }
});
