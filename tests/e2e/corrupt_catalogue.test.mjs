// Inspect and serve agree (issue 18): corrupt checkpoints generated from the tiny fixtures in a temp dir,
// each run through `bloomery inspect` and `bloomery-serve`; both must refuse it with the same error id, and
// serve must refuse before it listens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FIXTURES, SERVE, freePort } from './harness.mjs';

const CLI = process.env.BLOOMERY_CLI;
const BF16 = path.join(FIXTURES, 'qwen3_next-bf16');
const MIXED = path.join(FIXTURES, 'qwen3_next-modelopt-mixed');
const SHARD1 = 'model-00001-of-00002.safetensors';

// safetensors: 8-byte little-endian header length, the JSON header, the data.
function readST(file) {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  return { header: JSON.parse(buf.subarray(8, 8 + n).toString()), data: buf.subarray(8 + n) };
}
function writeST(file, header, data) {
  const h = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  writeFileSync(file, Buffer.concat([len, h, data]));
}
const names = (header) => Object.keys(header).filter((k) => k !== '__metadata__');
const json = (dir, f) => JSON.parse(readFileSync(path.join(dir, f), 'utf8'));
const putJson = (dir, f, v) => writeFileSync(path.join(dir, f), JSON.stringify(v, null, 1));
const editJson = (f, fn) => (dir) => { const v = json(dir, f); fn(v, dir); putJson(dir, f, v); };
const editConfig = (fn) => editJson('config.json', fn);
const editHeader = (fn) => (dir) => { const st = readST(path.join(dir, SHARD1)); fn(st.header, st, dir); writeST(path.join(dir, SHARD1), st.header, st.data); };
const firstWeight = (h) => names(h).find((k) => h[k].shape.length === 2 && h[k].shape[0] !== h[k].shape[1]);
const scaleOf = (h, suffix) => names(h).find((k) => k.endsWith(suffix));
// Overwrites the F32 value of a one-element tensor.
const setF32 = (suffix, value) => (dir) => {
  const st = readST(path.join(dir, SHARD1));
  const k = scaleOf(st.header, suffix);
  st.data.writeFloatLE(value, st.header[k].data_offsets[0]);
  writeST(path.join(dir, SHARD1), st.header, st.data);
};
const dropTensor = (pick) => (dir) => {
  const st = readST(path.join(dir, SHARD1));
  const k = pick(st.header);
  delete st.header[k];
  writeST(path.join(dir, SHARD1), st.header, st.data);
  const idx = json(dir, 'model.safetensors.index.json');
  delete idx.weight_map[k];
  putJson(dir, 'model.safetensors.index.json', idx);
};
const editTokConfig = (fn) => editJson('tokenizer_config.json', fn);

const CASES = [
  // safetensors header
  ['header length past the file', BF16, (d) => { const f = path.join(d, SHARD1); const b = readFileSync(f); b.writeBigUInt64LE(BigInt(b.length * 2), 0); writeFileSync(f, b); }],
  ['header not JSON', BF16, (d) => { const f = path.join(d, SHARD1); const b = readFileSync(f); b.fill(0x7b, 8, 40); writeFileSync(f, b); }],
  ['header length zero', BF16, (d) => { const f = path.join(d, SHARD1); const b = readFileSync(f); b.writeBigUInt64LE(0n, 0); writeFileSync(f, b); }],
  ['shard truncated', BF16, (d) => { const f = path.join(d, SHARD1); const b = readFileSync(f); writeFileSync(f, b.subarray(0, b.length - 1000)); }],
  ['shard empty', BF16, (d) => writeFileSync(path.join(d, SHARD1), Buffer.alloc(0))],
  ['shard of 5 bytes', BF16, (d) => writeFileSync(path.join(d, SHARD1), Buffer.from('abcde'))],
  // offsets
  ['offsets past the data', BF16, editHeader((h, st) => { const k = firstWeight(h); h[k].data_offsets[1] = st.data.length + 64; })],
  ['offsets reversed', BF16, editHeader((h) => { const k = firstWeight(h); h[k].data_offsets = [h[k].data_offsets[1], h[k].data_offsets[0]]; })],
  ['offsets span not the shape', BF16, editHeader((h) => { const k = firstWeight(h); h[k].data_offsets[1] -= 2; })],
  ['offsets not numbers', BF16, editHeader((h) => { const k = firstWeight(h); h[k].data_offsets = ['a', 'b']; })],
  // dtype
  ['dtype unknown', BF16, editHeader((h) => { h[firstWeight(h)].dtype = 'Q9'; })],
  ['dtype F32 for BF16 bytes', BF16, editHeader((h) => { h[firstWeight(h)].dtype = 'F32'; })],
  ['dtype I64', BF16, editHeader((h) => { h[firstWeight(h)].dtype = 'I64'; })],
  ['dtype missing', BF16, editHeader((h) => { delete h[firstWeight(h)].dtype; })],
  // shape against config
  ['weight shape transposed', BF16, editHeader((h) => { const k = firstWeight(h); h[k].shape = [h[k].shape[1], h[k].shape[0]]; })],
  ['shape with a zero', BF16, editHeader((h) => { const k = firstWeight(h); h[k].shape = [0, h[k].shape[1]]; })],
  ['config hidden_size off', BF16, editConfig((c) => { c.hidden_size *= 2; })],
  ['config vocab_size off', BF16, editConfig((c) => { c.vocab_size += 7; })],
  ['config intermediate_size off', BF16, editConfig((c) => { c.moe_intermediate_size = (c.moe_intermediate_size ?? 32) * 2; })],
  // missing and extra tensors
  ['embedding missing', BF16, dropTensor((h) => names(h).find((k) => k.includes('embed_tokens')) ?? firstWeight(h))],
  ['a layer weight missing', BF16, dropTensor((h) => names(h).find((k) => k.includes('layers.0.') && k.endsWith('proj.weight')))],
  ['a norm missing', BF16, dropTensor((h) => names(h).find((k) => k.includes('layernorm')))],
  ['extra tensor not in the index', BF16, editHeader((h, st) => { h['model.layers.99.bogus.weight'] = { dtype: 'BF16', shape: [1], data_offsets: [0, 2] }; })],
  // index
  ['index not JSON', BF16, (d) => writeFileSync(path.join(d, 'model.safetensors.index.json'), '{"weight_map": ')],
  ['index names a missing shard', BF16, editJson('model.safetensors.index.json', (v) => { const k = Object.keys(v.weight_map)[0]; v.weight_map[k] = 'model-00009-of-00009.safetensors'; })],
  ['index puts a tensor in the wrong shard', BF16, editJson('model.safetensors.index.json', (v, d) => { const h = readST(path.join(d, SHARD1)).header; v.weight_map[firstWeight(h)] = 'model-00002-of-00002.safetensors'; })],
  ['index without weight_map', BF16, editJson('model.safetensors.index.json', (v) => { delete v.weight_map; })],
  ['shard file deleted', BF16, (d) => unlinkSync(path.join(d, 'model-00002-of-00002.safetensors'))],
  // quantisation config
  ['hf_quant_config not JSON', MIXED, (d) => writeFileSync(path.join(d, 'hf_quant_config.json'), '{"quantization": [')],
  ['quant_algo unknown', MIXED, editJson('hf_quant_config.json', (v) => { v.quantization.quant_algo = 'FOO_BAR'; })],
  // (config.json's quantization_config is read when there is no hf_quant_config.json.)
  ['config quant_method unknown', MIXED, (d) => { unlinkSync(path.join(d, 'hf_quant_config.json')); editConfig((c) => { c.quantization_config.quant_method = 'nonesuch'; })(d); }],
  ['config quant_algo unknown', MIXED, (d) => { unlinkSync(path.join(d, 'hf_quant_config.json')); editConfig((c) => { c.quantization_config.quant_algo = 'FOO_BAR'; })(d); }],
  // scales
  ['global scale NaN', MIXED, setF32('weight_scale_2', NaN)],
  ['global scale infinite', MIXED, setF32('weight_scale_2', Infinity)],
  ['global scale zero', MIXED, setF32('weight_scale_2', 0)],
  ['global scale negative', MIXED, setF32('weight_scale_2', -1)],
  ['block scales missing', MIXED, dropTensor((h) => scaleOf(h, '.weight_scale'))],
  ['global scale missing', MIXED, dropTensor((h) => scaleOf(h, '.weight_scale_2'))],
  // config fields
  ['config.json not JSON', BF16, (d) => writeFileSync(path.join(d, 'config.json'), '{"model_type": ')],
  ['config.json missing', BF16, (d) => unlinkSync(path.join(d, 'config.json'))],
  ['model_type unknown', BF16, editConfig((c) => { c.model_type = 'llama_of_the_future'; })],
  ['num_hidden_layers missing', BF16, editConfig((c) => { delete c.num_hidden_layers; })],
  ['num_experts_per_tok above num_experts', BF16, editConfig((c) => { c.num_experts_per_tok = c.num_experts + 1; })],
  ['kv heads do not divide heads', BF16, editConfig((c) => { c.num_key_value_heads = 3; })],
  ['hidden_size negative', BF16, editConfig((c) => { c.hidden_size = -64; })],
  ['vocab_size zero', BF16, editConfig((c) => { c.vocab_size = 0; })],
  ['layer_types unknown entry', BF16, editConfig((c) => { c.layer_types[0] = 'quantum_attention'; })],
  ['layer_types wrong length', BF16, editConfig((c) => { c.layer_types.pop(); })],
  ['hidden_size a string', BF16, editConfig((c) => { c.hidden_size = '64'; })],
  // tokenizer
  ['tokenizer.json missing', BF16, (d) => unlinkSync(path.join(d, 'tokenizer.json'))],
  ['tokenizer.json not JSON', BF16, (d) => writeFileSync(path.join(d, 'tokenizer.json'), '{"model": {')],
  ['tokenizer model type unknown', BF16, editJson('tokenizer.json', (v) => { v.model.type = 'Sentencepiece9'; })],
  ['tokenizer_config not JSON', BF16, (d) => writeFileSync(path.join(d, 'tokenizer_config.json'), '{"chat_template": ')],
  // template
  ['template syntax error', BF16, editTokConfig((v) => { v.chat_template = '{% for m in messages %}{{ m.content }'; })],
  ['template unknown tag', BF16, editTokConfig((v) => { v.chat_template = '{% frobnicate %}'; })],
  ['template raises on every conversation', BF16, editTokConfig((v) => { v.chat_template = "{{ raise_exception('no') }}"; })],
];

const errorId = (text) => (text.match(/\b(E_[A-Z0-9_]+)\b/) ?? [])[1] ?? null;

async function serveRefusal(dir) {
  const port = await freePort();
  return new Promise((resolve) => {
    const p = spawn(SERVE, ['-m', dir, '-dev', 'none', '--host', '127.0.0.1', '--port', String(port), '-t', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    let listened = false;
    p.stdout.on('data', (d) => { out += d; if (/^http\s/m.test(out)) listened = true; });
    p.stderr.on('data', (d) => { err += d; });
    const t = setTimeout(() => p.kill('SIGKILL'), 20000);
    p.on('exit', (code) => { clearTimeout(t); resolve({ code, err, listened, id: code === 0 || code === null ? null : errorId(err) }); });
    // A folder serve accepts: stop it once it listens.
    const poll = setInterval(() => { if (listened) { clearInterval(poll); p.kill('SIGKILL'); } }, 50);
    p.on('exit', () => clearInterval(poll));
  });
}

test(`inspect and serve refuse ${CASES.length} corrupt checkpoints with the same error id`, { timeout: 300000 }, async (t) => {
  assert.ok(CLI, 'BLOOMERY_CLI is not set');
  const root = mkdtempSync(path.join(tmpdir(), 'bloomery-corrupt-'));
  const rows = [];
  try {
    let i = 0;
    for (const [name, base, corrupt] of CASES) {
      const dir = path.join(root, `case${i++}`);
      cpSync(base, dir, { recursive: true });
      corrupt(dir);
      const ins = spawnSync(CLI, ['inspect', dir], { encoding: 'utf8', timeout: 20000 });
      const insId = ins.status === 0 ? null : errorId(ins.stderr);
      const srv = await serveRefusal(dir);
      rows.push({ name, inspect: insId, serve: srv.id, listened: srv.listened, inspectStatus: ins.status });
      rmSync(dir, { recursive: true, force: true });
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  for (const r of rows) console.log(`${r.name.padEnd(42)} inspect ${r.inspect ?? 'accepted'}  serve ${r.serve ?? 'accepted'}`);
  const bad = rows.filter((r) => !r.inspect || r.inspect !== r.serve || r.listened);
  assert.deepEqual(bad, [], 'cases where inspect and serve disagree or one accepts');
  assert.ok(rows.length >= 40);
});
