// The prompt cache through the server (--cache-prompt, on by default): the next turn of a conversation, given
// as token ids to /completion, reads only what follows the kept history (or, when it leaves the last answer,
// what follows the last prompt's snapshot), answers as a full read does, and reports what it took in
// timings.cache_n and prompt_n; "cache_prompt": false and --no-cache-prompt read it all. The same with --tp 2.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson } from './harness.mjs';

const servers = [];
after(async () => { for (const s of servers) await s.stop(); });

const first = [9, 120, 33, 7, 81, 14, 260, 5, 71, 42, 18, 3];
const greedy = { n_predict: 6, temperature: 0, return_tokens: true, ignore_eos: true };

async function complete(server, prompt, extra = {}) {
  const r = await postJson(`${server.url}/completion`, { prompt, ...greedy, ...extra });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

for (const tp of [[], ['--tp', '2']]) test(`the next turn reads only its new tokens and answers as a full read does ${tp.join(' ')}`, async () => {
  // Under --tp every rank keeps, snapshots and restores its own shard of the state (step plans).
  const server = await startServer({ args: ['-np', '1', '-c', '512', ...tp] });
  servers.push(server);
  const a = await complete(server, first);
  assert.equal(a.tokens.length, 6);
  assert.equal(a.timings.cache_n, 0);
  // The kept state consumed the prompt and every answer token but the last (sampled, never fed).
  const second = [...first, ...a.tokens, 64, 11];
  const b = await complete(server, second);
  assert.equal(b.timings.cache_n, first.length + a.tokens.length - 1);
  assert.equal(b.timings.prompt_n, second.length - b.timings.cache_n);
  const full = await complete(server, second, { cache_prompt: false });
  assert.equal(full.timings.cache_n, 0);
  assert.equal(full.timings.prompt_n, second.length);
  assert.deepEqual(b.tokens, full.tokens);
  // A prompt that leaves the kept history (the last answer edited) reads it all.
  const edited = [...first, (a.tokens[0] + 1) % 200, 64, 11];
  const e = await complete(server, edited);
  assert.equal(e.timings.cache_n, 0);
  // A prompt that extends that prompt but not its answer resumes from the snapshot at the prompt's end.
  const retry = [...edited, 5, 6, 7];
  const r = await complete(server, retry);
  assert.equal(r.timings.cache_n, edited.length);
  const rFull = await complete(server, retry, { cache_prompt: false });
  assert.deepEqual(r.tokens, rFull.tokens);
});

test('--no-cache-prompt reads every prompt whole', async () => {
  const server = await startServer({ args: ['-np', '1', '-c', '512', '--no-cache-prompt'] });
  servers.push(server);
  const a = await complete(server, first);
  const b = await complete(server, [...first, ...a.tokens, 64, 11]);
  assert.equal(b.timings.cache_n, 0);
  assert.equal(b.timings.prompt_n, first.length + a.tokens.length + 2);
});
