// Speculative decoding through the real `openai` client: with --spec-type draft-mtp the greedy text of
// concurrent requests equals the same requests on a server without drafting, timings carry draft_n /
// draft_n_accepted, /slots and /metrics count drafts; a checkpoint without its draft layer is refused at start,
// naming the folder and the missing tensors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, getJson, postJson, metric, waitFor, MODEL, SERVE } from './harness.mjs';
import { spawn } from 'node:child_process';

let off, on;
before(async () => {
  [off, on] = await Promise.all([
    startServer({ args: ['-np', '1', '-c', '2048'] }),
    startServer({ args: ['-np', '3', '-c', '6144', '--metrics', '--spec-type', 'draft-mtp', '--draft-max', '3'] }),
  ]);
});
after(async () => { await Promise.all([off?.stop(), on?.stop()]); });

const prompts = ['Tell me a story about a dragon.', 'List three prime numbers.', 'What is the capital of France?'];
const ask = (server, p) => server.client().completions.create({ model: 'm', prompt: p, max_tokens: 48, temperature: 0, ignore_eos: true });

test('greedy text with drafting equals without, concurrent slots each equal to their serial run', async () => {
  const want = [];
  for (const p of prompts) want.push((await ask(off, p)).choices[0].text);
  const got = await Promise.all(prompts.map((p) => ask(on, p)));
  for (let i = 0; i < prompts.length; ++i) {
    assert.equal(got[i].choices[0].text, want[i], `prompt ${i}`);
    assert.equal(got[i].usage.completion_tokens, 48);
  }
  const t = (await postJson(`${on.url}/completion`, { prompt: prompts[0], n_predict: 24, temperature: 0 })).body.timings;
  assert.ok(t, 'no timings in /completion');
  assert.ok(Number.isInteger(t.draft_n) && t.draft_n > 0, `draft_n ${t.draft_n}`);
  assert.ok(Number.isInteger(t.draft_n_accepted) && t.draft_n_accepted <= t.draft_n);
  // llama-server's per-request limits: speculative.n_max 0 drafts nothing for this request, the same text.
  const none = (await postJson(`${on.url}/completion`, { prompt: prompts[0], n_predict: 24, temperature: 0, 'speculative.n_max': 0 })).body;
  assert.equal(none.timings.draft_n, 0, 'speculative.n_max 0 still drafted');
  const some = (await postJson(`${on.url}/completion`, { prompt: prompts[0], n_predict: 24, temperature: 0 })).body;
  assert.equal(none.content, some.content);
  const bad = await postJson(`${on.url}/completion`, { prompt: prompts[0], n_predict: 4, 'speculative.n_max': 'x' });
  assert.equal(bad.status, 400);
  assert.match(JSON.stringify(bad.body), /speculative\.n_max/);
  const m = (await getJson(`${on.url}/metrics`)).body;
  assert.ok(metric(m, 'bloomery:draft_tokens_total') >= t.draft_n);
  assert.match(m, /bloomery:draft_tokens_by_position_total\{position="0",outcome="drafted"\} [1-9]/);
  const slots = (await getJson(`${on.url}/slots`)).body;
  assert.equal(slots[0].speculative, true);
  assert.equal(slots[0].params['speculative.n_max'], 3);
});

// The fixture's shards with every mtp.* tensor left out (safetensors: 8-byte header length, JSON, data).
function withoutDraft() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bloomery-nodraft-'));
  for (const f of readdirSync(MODEL)) {
    const src = path.join(MODEL, f);
    if (f.endsWith('.safetensors')) {
      const buf = readFileSync(src);
      const n = Number(buf.readBigUInt64LE(0));
      const head = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
      const parts = [], out = {};
      let off = 0;
      for (const [k, v] of Object.entries(head)) {
        if (k === '__metadata__') { out[k] = v; continue; }
        if (k.startsWith('mtp.')) continue;
        const [a, b] = v.data_offsets;
        parts.push(buf.subarray(8 + n + a, 8 + n + b));
        out[k] = { ...v, data_offsets: [off, off + (b - a)] };
        off += b - a;
      }
      const json = Buffer.from(JSON.stringify(out));
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(json.length));
      writeFileSync(path.join(dir, f), Buffer.concat([len, json, ...parts]));
    } else if (f === 'model.safetensors.index.json') {
      const idx = JSON.parse(readFileSync(src, 'utf8'));
      idx.weight_map = Object.fromEntries(Object.entries(idx.weight_map).filter(([k]) => !k.startsWith('mtp.')));
      writeFileSync(path.join(dir, f), JSON.stringify(idx));
    } else {
      symlinkSync(src, path.join(dir, f));
    }
  }
  return dir;
}

test('draft-mtp on a checkpoint without its draft layer is refused at start, naming folder and tensors', async () => {
  const dir = withoutDraft();
  const proc = spawn(SERVE, ['-m', dir, '--host', '127.0.0.1', '--port', '0', '-t', '2', '--spec-type', 'draft-mtp'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  let code = null;
  proc.on('exit', (c) => { code = c; });
  await waitFor(() => code !== null, 60000, 'the refusing server to exit');
  assert.notEqual(code, 0);
  assert.match(out, /E_SPEC_NO_DRAFT/);
  assert.ok(out.includes(dir), `the folder is not named:\n${out}`);
  assert.match(out, /mtp\.fc\.weight/);
});
