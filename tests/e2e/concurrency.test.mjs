// Slots under load: more concurrent requests than slots queue and all finish; a client that aborts mid-stream
// frees its slot; /metrics counters move.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, getJson, metric, waitFor, sleep } from './harness.mjs';

let server, client;
before(async () => {
  server = await startServer({ args: ['-np', '2', '-c', '4096', '--metrics', '-ub', '16'] });
  client = server.client();
});
after(async () => { await server?.stop(); });

const msg = (i) => [{ role: 'user', content: `Request number ${i}, please answer.` }];

test('more concurrent requests than slots: all complete, and they queued', async () => {
  const before = await getJson(`${server.url}/metrics`);
  let sawDeferred = false;
  const poll = (async () => {
    for (let i = 0; i < 200 && !sawDeferred; ++i) {
      const m = await getJson(`${server.url}/metrics`);
      if (metric(m.body, 'llamacpp:requests_deferred') > 0) sawDeferred = true;
      await sleep(10);
    }
  })();
  const rs = await Promise.all(Array.from({ length: 7 }, (_, i) =>
    client.chat.completions.create({ model: 'm', messages: msg(i), max_tokens: 24, temperature: 0, ignore_eos: true })));
  await poll;
  for (const r of rs) {
    assert.equal(r.usage.completion_tokens, 24);
    assert.equal(r.choices[0].finish_reason, 'length');
  }
  assert.ok(sawDeferred, 'no request was ever deferred with 7 requests on 2 slots');
  const after = await getJson(`${server.url}/metrics`);
  const d = (name) => metric(after.body, name) - metric(before.body, name);
  assert.equal(d('llamacpp:tokens_predicted_total'), 7 * 24);
  assert.ok(d('llamacpp:prompt_tokens_total') >= 7 * 5);
  assert.ok(d('llamacpp:n_decode_total') > 0);
  // Two slots decoding together: more than one busy slot per pass on average over this burst.
  assert.ok(metric(after.body, 'llamacpp:n_busy_slots_per_decode') > 1.0);
  assert.equal(metric(after.body, 'llamacpp:requests_processing'), 0);
  assert.equal(metric(after.body, 'llamacpp:requests_deferred'), 0);
});

test('streams run interleaved: a long prompt does not stop another stream', async () => {
  const long = 'lorem ipsum dolor sit amet '.repeat(60);  // hundreds of tokens, read in ubatches of 16
  const s1 = await client.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 400, temperature: 0, ignore_eos: true, stream: true });
  const it = s1[Symbol.asyncIterator]();
  await it.next();  // s1 is decoding
  const longReq = client.completions.create({ model: 'm', prompt: long, max_tokens: 1, temperature: 0 });
  let during = 0, done = false;
  longReq.then(() => { done = true; });
  while (!done) {
    const n = await it.next();
    if (n.done) break;
    during++;
  }
  await longReq;
  assert.ok(during >= 3, `only ${during} tokens of the other stream arrived while the long prompt was read`);
  await it.return?.();
  // Leaving the stream cancels s1 once the server's next write fails. Wait for that here, so the next test's
  // cancellation count sees only its own request (on a loaded machine s1's cancel could land inside it).
  await waitFor(async () => {
    const s = await getJson(`${server.url}/slots`);
    return s.body.every((x) => !x.is_processing);
  }, 5000, 'every slot idle after leaving the stream');
});

test('a client that aborts mid-stream frees its slot', async () => {
  const before = await getJson(`${server.url}/metrics`);
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model: 'm', messages: msg(99), max_tokens: 3000, temperature: 0, ignore_eos: true, stream: true },
    { signal: ac.signal });
  let got = 0;
  // Depending on timing the client either ends the iteration quietly or raises an abort error.
  try {
    for await (const c of stream) {
      if (++got === 5) {
        ac.abort();
        break;
      }
    }
  } catch (e) {
    assert.ok(ac.signal.aborted, `unexpected error ${e}`);
  }
  assert.ok(got >= 5);
  // The slot goes idle quickly (the server notices at its next write) and its request counts as cancelled.
  await waitFor(async () => {
    const s = await getJson(`${server.url}/slots`);
    return s.body.every((x) => !x.is_processing);
  }, 5000, 'every slot idle after the abort');
  const after = await getJson(`${server.url}/metrics`);
  assert.equal(metric(after.body, 'bloomery:requests_cancelled_total') - metric(before.body, 'bloomery:requests_cancelled_total'), 1);
  assert.ok(metric(after.body, 'llamacpp:tokens_predicted_total') - metric(before.body, 'llamacpp:tokens_predicted_total') < 3000);
  // And the server still answers.
  const r = await client.chat.completions.create({ model: 'm', messages: msg(1), max_tokens: 2 });
  assert.equal(r.object, 'chat.completion');
});
