// Server throughput: bloomery-serve at -np N (default 4) with N concurrent streaming completions of
// max_tokens each (ignore_eos), generated tokens per second of wall time, median over rounds. Not a test (not
// *.test.mjs): run by hand to compare two builds or two settings, e.g.
//   node tests/e2e/bench_throughput.mjs build/src/server/bloomery-serve tests/fixtures/models/qwen3_next-bf16 256 5
//   node tests/e2e/bench_throughput.mjs <serve> <trained folder> 64 3 16 0 -- --spec-type draft-mtp
// usage: node bench_throughput.mjs <serve binary> <model folder> [max_tokens=128] [rounds=3] [np=4]
//        [temperature=0.8] [-- extra server flags…]
// Prints each stream's drafted / accepted counts from its final timings when the server drafts.
import { spawn } from 'node:child_process';
import net from 'node:net';
const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const extra = dash >= 0 ? argv.slice(dash + 1) : [];
const [serve, model, maxTok = '128', rounds = '3', np = '4', temp = '0.8'] = dash >= 0 ? argv.slice(0, dash) : argv;
const n = Number(np);
const port = await new Promise((res) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
const proc = spawn(serve, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-t', '2', '-np', np, '-c', String(n * 2048), ...extra], { stdio: ['ignore', 'ignore', 'inherit'] });
const url = `http://127.0.0.1:${port}`;
for (let i = 0; i < 400; i++) { try { const r = await fetch(url + '/health'); if (r.ok) break; } catch {} await new Promise(r => setTimeout(r, 50)); }
const prompts = ['In the beginning God created', 'And the LORD spake unto Moses, saying,', 'Blessed is the man that', 'Now these are the generations of'];
async function one(k) {
  const r = await fetch(url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: `${prompts[k % prompts.length]} ${k}`, max_tokens: Number(maxTok), ignore_eos: true, stream: true, temperature: Number(temp), seed: k }) });
  let events = 0, predicted = 0, drafted = 0, accepted = 0; const dec = new TextDecoder(); let buf = '';
  for await (const chunk of r.body) {
    buf += dec.decode(chunk); let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev.includes('[DONE]')) continue;
      events++;
      const t = JSON.parse(ev.slice(6)).timings;
      if (t && t.predicted_n !== undefined) predicted = t.predicted_n;
      if (t && t.draft_n !== undefined) { drafted = t.draft_n; accepted = t.draft_n_accepted; }
    }
  }
  return { events: predicted || events, drafted, accepted };  // tokens: timings.predicted_n where sent
}
const res = [];
await one(99);  // warm-up
for (let r = 0; r < Number(rounds); r++) {
  const t0 = performance.now();
  const out = await Promise.all(Array.from({ length: n }, (_, k) => one(r * 100 + k)));
  const s = (performance.now() - t0) / 1000;
  const tot = out.reduce((a, b) => a + b.events, 0);
  const dr = out.reduce((a, b) => a + b.drafted, 0), ac = out.reduce((a, b) => a + b.accepted, 0);
  res.push(tot / s);
  console.log(`round ${r}: ${tot} events in ${s.toFixed(3)} s = ${(tot / s).toFixed(1)} tok/s; drafted ${dr}, accepted ${ac}`);
}
res.sort((a, b) => a - b);
console.log(`median ${res[Math.floor(res.length / 2)].toFixed(1)} tok/s`);
proc.kill('SIGTERM');
