// Seeded fuzz of request bodies (issue 18): 100,000 mutations of valid bodies over every JSON route, through
// HTTP on 127.0.0.1. Every answer is 2xx or 4xx, never 500, and the server keeps serving. Its own file so
// ctest runs it beside the other e2e files (it takes a few minutes on 2 cores).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, getJson } from './harness.mjs';

const FUZZ_REQUESTS = Number(process.env.BLOOMERY_FUZZ_REQUESTS ?? 100000);
const FUZZ_CONCURRENCY = 32;

// Seeded mutations of valid bodies: types swapped, fields dropped or duplicated, bytes flipped, numbers
// pushed out of range. Every answer is 2xx or 4xx, never 500, and the server serves to the end.
test(`fuzz: ${FUZZ_REQUESTS} mutated request bodies, 0 responses of 500`, { timeout: 600000 }, async () => {
  const server = await startServer({ args: ['-np', '4', '-c', '2048', '-n', '2'] });
  try {
    let seed = 0x2545f491;
    const rand = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 2 ** 32; };
    const pick = (a) => a[Math.floor(rand() * a.length)];
    const values = [null, true, false, 0, -1, 1.5, 1e308, -7, 2 ** 63, 'x', '', '1e999', [], [1], ['a'], {}, { a: 1 },
      [[1, 2]], 'none', 'auto', 'text', { type: 'text' }, { type: 3 }, [{ role: 'user', content: 'x' }]];
    const seeds = [
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, temperature: 0.5, top_p: 0.9, stop: ['a'], logit_bias: { 5: 1 }, stream: false, chat_template_kwargs: { enable_thinking: false }, reasoning_format: 'auto', logprobs: true, top_logprobs: 2 }],
      ['/v1/completions', { prompt: 'hi', max_tokens: 2, seed: 3, logprobs: 2, stop: 'x', echo: false }],
      ['/completion', { prompt: [1, 2, 3], n_predict: 2, return_tokens: true, n_probs: 1, id_slot: -1 }],
      ['/tokenize', { content: 'hi <|im_end|>', add_special: true, with_pieces: true, parse_special: false }],
      ['/detokenize', { tokens: [1, 2, 3] }],
      ['/apply-template', { messages: [{ role: 'system', content: 'a' }, { role: 'user', content: [{ type: 'text', text: 'b' }] }] }],
    ];
    const mutate = (v, depth = 0) => {
      if (v === null || typeof v !== 'object' || depth > 3) return rand() < 0.5 ? pick(values) : v;
      const out = Array.isArray(v) ? [...v] : { ...v };
      const keys = Object.keys(out);
      const n = 1 + Math.floor(rand() * 3);
      for (let i = 0; i < n && keys.length; i++) {
        const k = pick(keys);
        const r = rand();
        if (r < 0.4) out[k] = pick(values);
        else if (r < 0.6) delete out[k];
        else out[k] = mutate(out[k], depth + 1);
      }
      return out;
    };
    const text = (body) => {
      let t = JSON.stringify(body);
      const r = rand();
      if (r < 0.1) t = t.slice(0, Math.floor(rand() * t.length));  // truncated
      else if (r < 0.2) { const i = Math.floor(rand() * t.length); t = t.slice(0, i) + pick(['"', '{', ']', ',', '\\u', '\x00', '1e999', 'ÿ']) + t.slice(i + 1); }
      else if (r < 0.25) t = t.replace(/\d+(\.\d+)?/, '1e999');
      return t;
    };
    const statuses = {};
    let next = 0, fivehundreds = 0;
    const examples = [];
    const t0 = Date.now();
    await Promise.all(Array.from({ length: FUZZ_CONCURRENCY }, async () => {
      while (next < FUZZ_REQUESTS) {
        next++;
        const [route, body] = pick(seeds);
        const b = text(mutate(body));
        const res = await fetch(`${server.url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });
        const reply = await res.text();
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
        if (res.status >= 500) { fivehundreds++; if (examples.length < 5) examples.push(`${route} ${b} -> ${reply}`); }
      }
    }));
    console.log(`fuzz: ${FUZZ_REQUESTS} requests in ${((Date.now() - t0) / 1000).toFixed(1)} s, statuses ${JSON.stringify(statuses)}`);
    assert.equal(fivehundreds, 0, examples.join('\n'));
    assert.equal((await getJson(`${server.url}/health`)).status, 200);
  } finally {
    await server.stop();
  }
});

