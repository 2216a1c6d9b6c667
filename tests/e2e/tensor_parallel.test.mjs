// bloomery-serve with tensor parallelism on CPU ranks (serving.md §1.3, R-5): --tp 2 in one process and
// --nodes over 127.0.0.1 (one process per rank) give --tp 1's greedy text, with drafting too; a rank killed mid-stream or
// stalled while idle is named, /health and new requests turn 503, the stream in flight ends with an error
// event, and SIGTERM then ends rank 0 with status 1; a stalled rank 0 is named by its follower.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { SERVE, MODEL, FIXTURES, freePort, startServer, getJson, postJson, waitFor } from './harness.mjs';

const PROMPT = { prompt: 'The quick brown fox', n_predict: 24, temperature: 0, ignore_eos: true };

// A --nodes rank > 0: no HTTP, so the harness's port wait does not apply.
function startFollower(args) {
  const proc = spawn(SERVE, ['-m', MODEL, '-t', '1', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let exited = null;
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  proc.on('exit', (code, sig) => { exited = { code, sig }; });
  return { proc, output: () => out, exited: () => exited };
}

async function nodes(extra = []) {
  const p0 = await freePort();
  const p1 = await freePort();
  const list = `127.0.0.1:${p0},127.0.0.1:${p1}`;
  const follower = startFollower(['--nodes', list, '--node-rank', '1', ...extra]);
  const server = await startServer({ args: ['--nodes', list, '--node-rank', '0', ...extra] });
  return { server, follower };
}

async function greedy(server) {
  const r = await postJson(`${server.url}/completion`, PROMPT);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.tokens_predicted, PROMPT.n_predict);
  return r.body.content;
}

// The greedy text of a one-rank server on `options` (started and stopped here): what TP must reproduce.
async function greedyAlone(options = {}) {
  const one = await startServer(options);
  try {
    return await greedy(one);
  } finally {
    await one.stop();
  }
}

test('--tp 2 and -sm tensor --tp 2 give --tp 1 greedy text; /props reports tp', async () => {
  const expected = await greedyAlone();
  for (const args of [['--tp', '2'], ['-sm', 'tensor', '--tp', '2']]) {
    const s = await startServer({ args });
    try {
      assert.match(s.output(), /tensor parallel over 2 CPU ranks/);
      assert.equal(await greedy(s), expected, args.join(' '));
      // Two requests at once share steps through the ranks and still match.
      const both = await Promise.all([greedy(s), greedy(s)]);
      assert.deepEqual(both, [expected, expected]);
      const props = await getJson(`${s.url}/props`);
      assert.equal(props.body.bloomery.tp, 2);
    } finally {
      await s.stop();
    }
    assert.equal(s.exited().code, 0, s.output());
  }
});

test('every fixture whose shapes divide: serve --tp N gives --tp 1 greedy text', async () => {
  // The cuts docs/serving.md lists as running (the others are refused by E_TP_CUT).
  const runs = [['qwen3_next-modelopt-mixed', [2]], ['qwen4_exp-bf16', [2]], ['qwen4_exp-modelopt-mixed', [2]],
    ['glm5_next-bf16', [2, 4]], ['glm5_next-modelopt-mixed', [2]]];
  for (const [name, tps] of runs) {
    const model = path.join(FIXTURES, name);
    const expected = await greedyAlone({ model });
    for (const tp of tps) {
      const s = await startServer({ model, args: ['--tp', String(tp)] });
      try {
        assert.equal(await greedy(s), expected, `${name} --tp ${tp}`);
      } finally {
        await s.stop();
      }
    }
  }
});

// Drafting under TP: every rank runs the draft layer on its shard and takes rank 0's drafts; verify commits
// go to every rank. Lossless: the greedy text equals --tp 1 without drafting, with drafts really made.
const TRAINED = path.join(FIXTURES, '..', 'trained');
async function draftedGreedy(server) {
  const r = await postJson(`${server.url}/completion`, PROMPT);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.tokens_predicted, PROMPT.n_predict);
  return { text: r.body.content, t: r.body.timings };
}

test('--tp 2 --spec-type draft-mtp|ngram-simple: greedy text equals --tp 1 without drafting, drafts made', async () => {
  const runs = [[path.join(FIXTURES, 'qwen3_next-bf16'), 'draft-mtp'], [path.join(FIXTURES, 'glm5_next-bf16'), 'draft-mtp'],
    [path.join(TRAINED, 'qwen4_exp-bf16'), 'draft-mtp'], [path.join(FIXTURES, 'qwen4_exp-bf16'), 'ngram-simple']];
  let accepted = 0;
  for (const [model, type] of runs) {
    const expected = await greedyAlone({ model });
    const s = await startServer({ model, args: ['--tp', '2', '-np', '2', '--spec-type', type, '--draft-max', '3'] });
    try {
      const one = await draftedGreedy(s);
      assert.equal(one.text, expected, `${model} ${type}`);
      assert.ok(one.t.draft_n > 0, `${model}: draft_n ${one.t.draft_n}`);
      accepted += one.t.draft_n_accepted;
      // Two requests at once: each drafts and verifies in the shared steps, each equal to its serial run.
      const both = await Promise.all([draftedGreedy(s), draftedGreedy(s)]);
      assert.deepEqual(both.map((b) => b.text), [expected, expected]);
    } finally {
      await s.stop();
    }
    assert.equal(s.exited().code, 0, s.output());
  }
  assert.ok(accepted > 0, 'no draft was accepted in any run');
});

test('--tp 2 --spec-type draft-mtp: a draft layer whose formats cannot take the cut is refused at start by name', async () => {
  const model = path.join(FIXTURES, 'qwen4_exp-modelopt-mixed');
  const s = spawn(SERVE, ['-m', model, '-t', '1', '--port', String(await freePort()), '--tp', '2', '--spec-type', 'draft-mtp'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  s.stdout.on('data', (d) => { out += d; });
  s.stderr.on('data', (d) => { out += d; });
  const code = await new Promise((resolve) => s.on('exit', resolve));
  assert.notEqual(code, 0, out);
  assert.match(out, /E_SPEC_NO_DRAFT/);
  assert.match(out, /cannot be cut over 2 ranks/);
  assert.match(out, /mtp\.layers\.0\.mlp\.experts/);
});

test('--nodes over 127.0.0.1: two processes give one process greedy text; the follower stops with rank 0', async () => {
  const expected = await greedyAlone();
  const { server, follower } = await nodes(['--spec-type', 'draft-mtp']);
  try {
    assert.match(server.output(), /rank 0 of 2/);
    const drafted = await draftedGreedy(server);  // the draft plans over the socket too
    assert.equal(drafted.text, expected);
    assert.ok(drafted.t.draft_n > 0, `draft_n ${drafted.t.draft_n}`);
    assert.equal(await greedy(server), expected);  // freed states are dropped on the follower too
  } finally {
    await server.stop();
    await waitFor(() => follower.exited() !== null, 10000, 'the follower to exit').catch(() => follower.proc.kill('SIGKILL'));
  }
  assert.equal(server.exited().code, 0, server.output());
  assert.equal(follower.exited().code, 0, follower.output());
  assert.match(follower.output(), /rank 1 stopped/);
});

// The bloomery-serve processes whose parent is `pid` (the ranks --tp-launch processes started).
function childRanks(pid) {
  const kids = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) kids.push(Number(d));
    } catch { /* gone meanwhile */ }
  }
  return kids;
}
const alive = (pid) => existsSync(`/proc/${pid}`) && !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');

test('--tp 2 --tp-launch processes: rank 1 is a child process, greedy text equals --tp 1, it ends with rank 0', async () => {
  const expected = await greedyAlone();
  const s = await startServer({ args: ['--tp', '2', '--tp-launch', 'processes'] });
  let kids = [];
  try {
    assert.match(s.output(), /rank 0 of 2 over --nodes 127\.0\.0\.1:\d+,127\.0\.0\.1:\d+ \(serves HTTP\)/);
    assert.match(s.output(), /ranks 1-1 started as processes \(--tp-launch processes\)/);
    kids = childRanks(s.proc.pid);
    assert.equal(kids.length, 1, `rank processes: ${kids}`);
    assert.equal(await greedy(s), expected);
    const both = await Promise.all([greedy(s), greedy(s)]);
    assert.deepEqual(both, [expected, expected]);
  } finally {
    await s.stop();
  }
  assert.equal(s.exited().code, 0, s.output());
  assert.match(s.output(), /rank 1 stopped \(rank 0 is done\)/);
  for (const k of kids) assert.ok(!alive(k), `rank process ${k} outlived rank 0`);
});

test('--tp-launch processes: a killed rank process is named, /health 503; a killed rank 0 takes its ranks along', async () => {
  const timeout = 1000;
  let s = await startServer({ args: ['--tp', '2', '--tp-launch', 'processes', '--collective-timeout-ms', String(timeout)] });
  try {
    await greedy(s);
    const [kid] = childRanks(s.proc.pid);
    process.kill(kid, 'SIGKILL');
    await waitFor(async () => (await fetch(`${s.url}/health`)).status === 503, 30000, '/health 503');
    const h = await getJson(`${s.url}/health`);
    assert.match(h.body.error.message, /Engine failed: .*rank 1/);
  } finally {
    await s.stop();
  }
  assert.equal(s.exited().code, 1, s.output());
  // Rank 0 killed outright: its rank processes get SIGTERM from the kernel (PR_SET_PDEATHSIG) and end.
  s = await startServer({ args: ['--tp', '2', '--tp-launch', 'processes'] });
  const kids = childRanks(s.proc.pid);
  assert.equal(kids.length, 1);
  s.proc.kill('SIGKILL');
  await waitFor(() => kids.every((k) => !alive(k)), 10000, 'the rank process to end with rank 0');
});

test('a killed rank mid-stream: the stream gets an error event, /health 503 names it, SIGTERM exits 1', async () => {
  const timeout = 1000;
  const { server, follower } = await nodes(['-np', '1', '-c', '32768', '--collective-timeout-ms', String(timeout)]);
  try {
    const res = await fetch(`${server.url}/completion`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'x', n_predict: 30000, temperature: 0, ignore_eos: true, stream: true }),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    let text = '';
    const dec = new TextDecoder();
    while (!text.includes('data: ')) text += dec.decode((await reader.read()).value);  // decoding runs
    follower.proc.kill('SIGKILL');
    const t0 = Date.now();
    await waitFor(async () => (await fetch(`${server.url}/health`)).status === 503, 30000, '/health 503');
    const detected = Date.now() - t0;
    assert.ok(detected <= timeout + 2000, `detected after ${detected} ms`);
    const h = await getJson(`${server.url}/health`);
    assert.equal(h.body.error.type, 'unavailable_error');
    assert.match(h.body.error.message, /Engine failed: .*rank 1/);
    // The stream ends (no hang) with an error event, not a normal stop.
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    const last = text.trim().split('\n').filter((l) => l.length).at(-1);
    assert.match(last, /^error: .*"code":503.*rank 1/, last);
    assert.ok(!text.includes('"stop":true'), 'the stream did not end as a finished generation');
    const again = await postJson(`${server.url}/completion`, PROMPT);
    assert.equal(again.status, 503);
    assert.match(again.body.error.message, /Engine failed/);
  } finally {
    await server.stop();
    follower.proc.kill('SIGKILL');
  }
  assert.equal(server.exited().code, 1, server.output());
  assert.match(server.output(), /engine failed: .*rank 1/);
});

test('a rank stalled while idle is found by the heartbeat within the deadline', async () => {
  const timeout = 1000;
  const { server, follower } = await nodes(['--collective-timeout-ms', String(timeout)]);
  try {
    await greedy(server);
    follower.proc.kill('SIGSTOP');
    const t0 = Date.now();
    await waitFor(async () => (await fetch(`${server.url}/health`)).status === 503, 30000, '/health 503');
    const detected = Date.now() - t0;
    // A heartbeat every half deadline, then the deadline itself.
    assert.ok(detected <= 2 * timeout + 2000, `detected after ${detected} ms`);
    const h = await getJson(`${server.url}/health`);
    assert.match(h.body.error.message, /E_TP_TIMEOUT.*rank 1/);
  } finally {
    await server.stop();
    follower.proc.kill('SIGKILL');
  }
  assert.equal(server.exited().code, 1, server.output());
});

test('a stalled rank 0 is named by its follower, which waits for plans under the deadline', async () => {
  const timeout = 1000;
  const { server, follower } = await nodes(['--collective-timeout-ms', String(timeout)]);
  try {
    await greedy(server);
    await new Promise((r) => setTimeout(r, 3 * timeout));  // idle: rank 0's heartbeats keep the follower waiting
    assert.equal(follower.exited(), null, follower.output());
    server.proc.kill('SIGSTOP');
    const t0 = Date.now();
    await waitFor(() => follower.exited() !== null, 30000, 'the follower to exit');
    assert.ok(Date.now() - t0 <= timeout + 2000, `named after ${Date.now() - t0} ms`);
    assert.equal(follower.exited().code, 1);
    assert.match(follower.output(), /E_TP_TIMEOUT: field 'step plan'.*rank 0 did not arrive/);
  } finally {
    server.proc.kill('SIGKILL');
    follower.proc.kill('SIGKILL');
  }
});

test('TP flag errors name the flag: -sm none with --tp 2, --node-rank, CUDA ranks, drafting, --nodes count, --tp 3 cut', async () => {
  const run = (args) => new Promise((resolve) => {
    const p = spawn(SERVE, ['-m', MODEL, '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    p.on('exit', (code) => resolve({ code, out }));
  });
  let r = await run(['-sm', 'none', '--tp', '2']);
  assert.equal(r.code, 2, r.out);
  assert.match(r.out, /-sm\/--split-mode.*expected tensor with --tp 2.*found 'none'/);
  r = await run(['--node-rank', '1']);
  assert.equal(r.code, 2, r.out);
  assert.match(r.out, /--node-rank/);
  r = await run(['--tp', '2', '--tp-launch', 'fork']);
  assert.equal(r.code, 2, r.out);
  assert.match(r.out, /--tp-launch.*expected auto, threads or processes.*found 'fork'/);
  for (const [args, want] of [
    [['--tp', '3', '--nodes', '127.0.0.1:1,127.0.0.1:2'], /E_TP_NODES: field '--tp': expected --tp equal to the 2 --nodes, found 3/],
    [['--nodes', '127.0.0.1:1,127.0.0.1:2', '--node-rank', '2'], /E_TP_NODES: field '--node-rank'/],
  ]) {
    r = await run(args);
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, want);
  }
  r = await run(['--tp', '3', '--port', String(await freePort())]);
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /E_TP_CUT/);
});
