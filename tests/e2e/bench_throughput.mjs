// Server throughput: bloomery-serve at -np N (default 4) with 4 concurrent streaming completions of
// max_tokens each (ignore_eos), generated tokens per second of wall time, median over rounds. Not a test (not
// *.test.mjs): run by hand to compare two builds, e.g.
//   node tests/e2e/bench_throughput.mjs build/src/server/bloomery-serve tests/fixtures/models/qwen3_next-bf16 256 5
// usage: node bench_throughput.mjs <serve binary> <model folder> [max_tokens=128] [rounds=3] [np=4]
import { spawn } from 'node:child_process';
import net from 'node:net';
const [serve, model, maxTok = '128', rounds = '3', np = '4'] = process.argv.slice(2);
const port = await new Promise((res) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
const proc = spawn(serve, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-t', '2', '-np', np, '-c', String(4 * 2048)], { stdio: ['ignore', 'ignore', 'ignore'] });
const url = `http://127.0.0.1:${port}`;
for (let i = 0; i < 400; i++) { try { const r = await fetch(url + '/health'); if (r.ok) break; } catch {} await new Promise(r => setTimeout(r, 50)); }
async function one(k) {
  const r = await fetch(url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: `Stream ${k}: once upon a time there was`, max_tokens: Number(maxTok), ignore_eos: true, stream: true, temperature: 0.8, seed: k }) });
  let n = 0; const dec = new TextDecoder(); let buf = '';
  for await (const chunk of r.body) { buf += dec.decode(chunk); let i; while ((i = buf.indexOf('\n\n')) >= 0) { const ev = buf.slice(0, i); buf = buf.slice(i + 2); if (ev.startsWith('data: ') && !ev.includes('[DONE]')) n++; } }
  return n;
}
const res = [];
await one(99);  // warm-up
for (let r = 0; r < Number(rounds); r++) {
  const t0 = performance.now();
  const counts = await Promise.all([0, 1, 2, 3].map((k) => one(r * 10 + k)));
  const s = (performance.now() - t0) / 1000;
  const tot = counts.reduce((a, b) => a + b, 0);
  res.push(tot / s);
  console.log(`round ${r}: ${tot} events in ${s.toFixed(3)} s = ${(tot / s).toFixed(1)} tok/s`);
}
res.sort((a, b) => a - b);
console.log(`median ${res[Math.floor(res.length / 2)].toFixed(1)} tok/s`);
proc.kill('SIGTERM');
