// Run.resume: a run reopened in another process by a replay the module checks (host/src/run.rs
// `Run::resume`). A run that exited without `end` and was resumed writes the bundle one Run would have,
// byte for byte; edited evidence, a swapped document and a finished run are refused.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { HOST_NAME, InvalidInput, Run, RunBroken, RunOver, RunTampered, SessionClosed, load } from '../src/node.js';
import { ROOT, lines, read, tempDir, verify } from './helpers.mjs';

let policy;
before(async () => {
  policy = await load();
});

const DOC = join(ROOT, 'examples/rotate-credentials/runbook.yaml');
const STREAM = lines(read('examples/rotate-credentials/events.ndjson').toString('utf8')).map((l) => JSON.parse(l));
const T0 = 1796169600000;
const RUN_ID = 'r-resume';
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

/** A clock set to T0 + an event's `at` before the event: the same times whichever process feeds it. */
function clock() {
  let now = T0;
  return { clock: () => now, at: (at) => (now = T0 + at) };
}

function create(runsRoot, c) {
  const s = STREAM[0];
  return Run.create(policy, {
    document: DOC, runsRoot, runId: RUN_ID, clock: c.clock, host: { name: HOST_NAME, version: '0' }, git: { status: 'not-a-checkout' },
    agent: s.agent, profile: s.profile, allowlist: s.allowlist, riskCeiling: s.risk_ceiling, coverage: s.coverage,
  });
}

/** Feeds wire events (docs/spec/run.md#events) through the Run's methods, each at its own `at`. */
function feed(run, c, events) {
  for (const e of events) {
    c.at(e.at);
    if (e.type === 'invoke') run.invoke(e.tool, e.arguments, { callId: e.call_id });
    else if (e.type === 'result') run.result(e.tool, e.result, { isError: e.is_error, callId: e.call_id });
    else if (e.type === 'approval') run.approval(e.approver, e.granted, { step: e.step, callSha256: e.call_sha256 });
    else if (e.type === 'final_output') run.finalOutput();
    else if (e.type === 'end') run.end(e.reason);
    else throw new Error(`unexpected ${e.type}`);
  }
}

const files = (dir, sub = '') => readdirSync(join(dir, sub), { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? files(dir, join(sub, d.name)) : [join(sub, d.name)])).sort();

/** A run left without `end` after `n` events of the stream (the process that ran it exited). */
async function abandoned(t, n) {
  const runs = tempDir(t);
  const c = clock();
  const run = await create(runs, c);
  feed(run, c, STREAM.slice(1, n + 1));
  return { runs, c, dir: run.dir, t0: run.t0, pin: run.pin, head: run.head, state: run.state() };
}

test('a run resumed after its process exited writes the bundle one Run writes, byte for byte, and it verifies', async (t) => {
  const one = tempDir(t);
  const c1 = clock();
  feed(await create(one, c1), c1, STREAM.slice(1));

  // Left after the call that needs approval: the pending request must come back from the replay.
  const { runs, c, dir, t0, pin, head, state } = await abandoned(t, 5);
  assert.equal(t0, T0);
  assert.equal(state.approvalRequests.length, 1);
  const run = Run.resume(policy, RUN_ID, { runsRoot: runs, t0, pin, clock: c.clock });
  assert.equal(run.start, null);
  assert.equal(run.head, head);
  assert.deepEqual(run.state(), state);
  assert.equal(run.over, false);
  feed(run, c, STREAM.slice(6));
  assert.equal(run.finished, true);

  assert.deepEqual(files(runs), files(one));
  for (const f of files(one)) assert.ok(readFileSync(join(runs, f)).equals(readFileSync(join(one, f))), `${f} differs`);
  const v = verify(dir);
  assert.equal(v.status, 0, `${JSON.stringify(v.result)} ${v.stderr}`);
  assert.deepEqual([v.result.outcome, v.result.events], ['completed', STREAM.length]);
});

test('session.replayEvents: the head, count and last `at` of the records; an edited record is RunTampered', async (t) => {
  const { dir, head } = await abandoned(t, 3);
  const events = readFileSync(join(dir, 'events.ndjson'));
  const { chain_h0: h0 } = JSON.parse(readFileSync(join(dir, 'run.json'), 'utf8'));
  const r = policy.session(readFileSync(DOC)).replayEvents(events, h0);
  assert.deepEqual(r, { head, events: 4, lastAt: STREAM[3].at });
  assert.ok(Object.isFrozen(r));
  const edited = Buffer.from(events.toString('utf8').replace('database/creds/payments-app', 'database/creds/payments-ap'));
  const session = policy.session(readFileSync(DOC));
  assert.throws(() => session.replayEvents(edited, h0), (e) => e instanceof RunTampered && e.code === 'run-tampered' && e.place === 'events.ndjson:4' && e.message.includes('events.ndjson:4'));
  assert.throws(() => session.state(), SessionClosed);
});

test('resuming after an edited events.ndjson line is refused, naming the line; nothing is appended', async (t) => {
  const { runs, c, dir, t0, pin } = await abandoned(t, 4);
  const file = join(dir, 'events.ndjson');
  const recs = readFileSync(file, 'utf8').split('\n');
  // The result of the first call, its output edited (the record stays JSON, its link no longer fits).
  recs[2] = recs[2].replace('97d', '12d');
  writeFileSync(file, recs.join('\n'));
  const before = readFileSync(file);
  assert.throws(
    () => Run.resume(policy, RUN_ID, { runsRoot: runs, t0, pin, clock: c.clock }),
    (e) => e instanceof RunTampered && e.place === 'events.ndjson:3' && /events\.ndjson:3: /.test(e.message),
  );
  assert.ok(readFileSync(file).equals(before));
});

test('a swapped document is refused: by the pin, by run.json\'s chain_h0, and by the replay', async (t) => {
  const { runs, c, dir, t0, pin } = await abandoned(t, 2);
  const other = read('examples/incident-rollback/runbook.yaml');
  const h0 = sha256(Buffer.from(policy.envelope(other), 'utf8'));
  writeFileSync(join(dir, 'runbook.yaml'), other);
  const manifest = readFileSync(join(dir, 'run.json'), 'utf8');
  const resume = (p) => () => Run.resume(policy, RUN_ID, { runsRoot: runs, t0, pin: p, clock: c.clock });
  // run.json's document sha256 edited to match, its chain_h0 not.
  writeFileSync(join(dir, 'run.json'), manifest.replaceAll(pin.documentSha256, sha256(other)));
  assert.throws(resume(null), (e) => e instanceof RunTampered && e.place === 'run.json' && /chain_h0/.test(e.message));
  // Both edited to match: the pin kept when the run began says it is not the document.
  writeFileSync(join(dir, 'run.json'), manifest.replaceAll(pin.documentSha256, sha256(other)).replaceAll(pin.chainH0, h0));
  assert.throws(resume(pin), (e) => e instanceof RunTampered && e.place === 'runbook.yaml' && /not the one pinned/.test(e.message));
  assert.throws(resume({ documentSha256: sha256(other), chainH0: pin.chainH0 }), (e) => e instanceof RunTampered && /not the one pinned/.test(e.message));
  // Without a pin the records do not link from the new h0.
  assert.throws(resume(undefined), (e) => e instanceof RunTampered && e.place === 'events.ndjson:1');
  // The document alone swapped: its sha256 is not run.json's.
  writeFileSync(join(dir, 'run.json'), manifest);
  assert.throws(resume(pin), (e) => e instanceof RunTampered && e.place === 'runbook.yaml' && /sha256/.test(e.message));
});

test('a finished run is not resumed; bad options and a missing run are refused', async (t) => {
  const runs = tempDir(t);
  const c = clock();
  const run = await create(runs, c);
  run.end('client-closed');
  assert.throws(() => Run.resume(policy, RUN_ID, { runsRoot: runs, t0: run.t0, pin: run.pin }), (e) => e instanceof RunOver && e.code === 'run-over' && /finished/.test(e.message));
  assert.throws(() => Run.resume(policy, RUN_ID, { runsRoot: runs }), (e) => e instanceof InvalidInput && /`t0`/.test(e.message));
  assert.throws(() => Run.resume(policy, RUN_ID, { runsRoot: runs, t0: 0, pin: 'x' }), (e) => e instanceof InvalidInput && /`pin`/.test(e.message));
  assert.throws(() => Run.resume(policy, '../x', { runsRoot: runs, t0: 0 }), InvalidInput);
  assert.throws(() => Run.resume(policy, 'r-missing', { runsRoot: runs, t0: 0 }), (e) => e instanceof RunBroken && /cannot open/.test(e.message));
});

test('a run that takes signed approvals is not resumed here (this package checks no SSH signature)', async (t) => {
  const { runs, dir, t0, pin } = await abandoned(t, 1);
  const m = JSON.parse(readFileSync(join(dir, 'run.json'), 'utf8'));
  m.approvals = { signed: true, allowed_signers_sha256: '0'.repeat(64) };
  writeFileSync(join(dir, 'run.json'), JSON.stringify(m));
  assert.throws(() => Run.resume(policy, RUN_ID, { runsRoot: runs, t0, pin }), (e) => e instanceof RunBroken && /signed approvals/.test(e.message));
});
