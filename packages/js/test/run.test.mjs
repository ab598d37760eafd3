// The Run writes the Rust host's bundle: every bundle made here is checked with `runbook-host verify`
// (exit 0), a tampered byte fails it, and a broken run (a failed write, a trap) leaves one it refuses.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
import { before, test } from 'node:test';
import { HOST_NAME, HOST_VERSION, InvalidInput, ModuleTrap, Run, RunBroken, RunOver, load } from '../src/node.js';
import { INTERPRETER_ONLY, PACKAGE, ROOT, cli, examples, lines, node, read, tempDir, verify } from './helpers.mjs';

let policy;
before(async () => {
  policy = await load();
});

/** The Run's options for the start claim of a wire stream. */
function claimOf(line) {
  const e = JSON.parse(line);
  return { profile: e.profile, allowlist: e.allowlist, riskCeiling: e.risk_ceiling, coverage: e.coverage, agent: e.agent, available: e.available };
}

/** Feeds one wire event through the Run's method for it; the decision line the bundle recorded for it. */
function drive(run, line) {
  const e = JSON.parse(line);
  const callId = e.call_id === undefined ? undefined : String(e.call_id);
  switch (e.type) {
    case 'invoke':
      return run.invoke(e.tool, e.arguments, { callId, step: e.step }).decisionLine;
    case 'result':
      return run.result(e.tool, e.result, { isError: e.is_error, callId }).decisionLine;
    case 'approval':
      return run.approval(e.approver, e.granted, { step: e.step, callSha256: e.call_sha256 }).decisionLine;
    case 'advance':
      return run.advance(e.to).decisionLine;
    case 'verdict':
      return run.verdict(e.step, e.outcome === 'pass', e.by).decisionLine;
    case 'final_output':
      return run.finalOutput().decisionLine;
    case 'tick':
      return run.tick().decisionLine;
    case 'end':
      run.end(e.reason);
      return records(run.dir).at(-1).decision;
    default:
      throw new Error(`unexpected event ${line}`);
  }
}

/** events.ndjson as `{h, decision, event}` texts (the decision and event as stored). */
function records(dir) {
  return lines(readFileSync(join(dir, 'events.ndjson'), 'utf8')).map((l) => {
    const v = JSON.parse(l);
    return { h: v.h, decision: JSON.stringify(v.decision), event: typeof v.event === 'string' ? v.event : JSON.stringify(v.event), raw: l };
  });
}

const json = (dir, name) => JSON.parse(readFileSync(join(dir, name), 'utf8'));

/** verify exits 0 and says so; returns its result. */
function verified(dir, what = dir) {
  const v = verify(dir);
  assert.equal(v.status, 0, `${what}: verify exit ${v.status}: ${JSON.stringify(v.result)} ${v.stderr}`);
  assert.equal(v.result.ok, true);
  assert.equal(v.result.replayed, true);
  return v.result;
}

test('runs of the example streams: the CLI\'s decisions, its report, and a bundle `runbook-host verify` accepts', async (t) => {
  const runs = tempDir(t);
  // Streams whose decisions do not depend on the time (the Run's clock is the real one).
  const streams = examples().flatMap((ex) => ex.events.map((ev) => ({ doc: ex.path, events: ev }))).filter((s) => !s.events.includes('certificate-renewal'));
  assert.ok(streams.length >= 7);
  for (const s of streams) {
    const stream = lines(read(s.events).toString('utf8'));
    const replay = lines(cli(['replay', '--format', 'json', s.doc, s.events]).stdout);
    const run = await Run.create(policy, { document: join(ROOT, s.doc), runsRoot: runs, ...claimOf(stream[0]) });
    assert.equal(run.start.decisionLine, replay[0], `${s.events}: start`);
    if (run.start.allowed) {
      stream.slice(1).forEach((line, i) => assert.equal(drive(run, line), replay[i + 1], `${s.events}:${i + 2}`));
    } else {
      // A refused run is finished at once: nothing more is recorded.
      assert.equal(run.over, true);
      assert.throws(() => run.invoke('x', {}), (e) => e instanceof RunOver && e.code === 'run-over');
    }
    assert.equal(run.end(), JSON.parse(replay.at(-1)).outcome);
    // The report is the CLI's but for the run id, which the Run chose.
    const report = readFileSync(join(run.dir, 'report.json'), 'utf8');
    const want = JSON.parse(replay.at(-1));
    want.run_id = run.runId;
    want.events = records(run.dir).length;
    assert.equal(report, policy.canonicalize(JSON.stringify(want)), `${s.events}: report`);
    assert.equal(report, run.report());
    const v = verified(run.dir, s.events);
    assert.equal(v.outcome, want.outcome);
    assert.equal(v.events, records(run.dir).length);
  }
});

test('the bundle\'s files: run.json, events.ndjson, report and receipt, latest.json and history.ndjson', async (t) => {
  const runs = join(tempDir(t), 'nested', 'runs');
  const run = await Run.create(policy, {
    document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'),
    runsRoot: runs,
    agent: 'claude-code',
    profile: 'R2',
    riskCeiling: 'destructive',
    coverage: 'complete',
  });
  assert.match(run.runId, /^r-\d{8}T\d{6}Z-[0-9a-f]{12}$/);
  assert.equal(run.dir, join(runs, run.runId));
  const m0 = json(run.dir, 'run.json');
  assert.equal(m0.adapter.coverage, 'complete', 'the start claim\'s coverage, written at admission');
  assert.deepEqual(m0.lifecycle.map((l) => l.event), ['created', 'admitted']);
  assert.equal(m0.outcome, null);
  assert.equal(existsSync(join(run.dir, 'report.json')), false, 'no report before the end');
  const read1 = run.invoke('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' }, { callId: 't1' });
  assert.equal(read1.allowed, true);
  assert.equal(read1.kind, 'allow');
  assert.equal(read1.state.step, 'inspect');
  assert.match(read1.explanation, /Allowed/);
  // Each answer's event is on disk, chained, before the answer returns.
  const recs = records(run.dir);
  assert.equal(recs.length, 2);
  assert.equal(recs[1].h, read1.link);
  assert.equal(recs[1].event, read1.eventLine);
  assert.equal(recs[1].decision, read1.decisionLine);
  assert.equal(recs[1].raw, `{"h":"${read1.link}","decision":${read1.decisionLine},"event":${read1.eventLine}}`);
  assert.equal(recs[1].h, policy.chainLink(recs[0].h, recs[1].event, recs[1].decision));
  assert.equal(run.head, read1.link);
  assert.equal(run.end('client-closed'), 'incomplete');
  assert.equal(run.end(), 'incomplete', 'end is idempotent');
  assert.throws(() => run.tick(), RunOver);

  const m = json(run.dir, 'run.json');
  assert.equal(readFileSync(join(run.dir, 'run.json'), 'utf8'), `${JSON.stringify(m, Object.keys(flatKeys(m)).sort(), 2)}\n`, 'pretty, keys sorted');
  assert.deepEqual(m.host, { name: HOST_NAME, version: HOST_VERSION });
  assert.equal(m.host.name, 'runbook-policy-js');
  assert.equal(m.host.version, JSON.parse(readFileSync(join(PACKAGE, 'package.json'), 'utf8')).version);
  assert.deepEqual(m.adapter, { name: 'library', sees: 'what the embedding client feeds', coverage: 'complete' });
  assert.deepEqual(m.document, {
    reference: 'runbook.yaml',
    trust: 'T1',
    sha256: policy.lint(read('examples/rotate-credentials/runbook.yaml')).sha256,
    pinned_sha256: null,
    file: 'runbook.yaml',
    runbook_id: 'rotate-credentials',
    version: '1.3.0',
    provenance: { kind: 'file', registry: null, from_cache: null, signed_by: null, signature_expires: null },
  });
  assert.deepEqual(m.lifecycle.map((l) => l.event), ['created', 'admitted', 'ended']);
  for (const l of m.lifecycle) assert.match(l.at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(m.outcome, 'incomplete');
  assert.equal(m.module_sha256, policy.sha256);
  assert.deepEqual(m.channels, { pending: 'pending', approvals: 'approvals', consumed: 'consumed' });
  assert.ok(['clean', 'dirty', 'not-a-checkout', 'unavailable'].includes(m.source.git.status));
  assert.equal(readFileSync(join(run.dir, 'runbook.yaml'), 'utf8'), read('examples/rotate-credentials/runbook.yaml').toString('utf8'));
  assert.equal(readFileSync(join(run.dir, 'envelope.json'), 'utf8'), policy.envelope(read('examples/rotate-credentials/runbook.yaml')));
  const receipt = readFileSync(join(run.dir, 'receipt.json'), 'utf8');
  assert.equal(receipt, policy.canonicalize(receipt), 'the receipt is canonical JSON');
  const r = JSON.parse(receipt);
  assert.deepEqual(r.host, m.host);
  assert.equal(r.chain_head, records(run.dir).at(-1).h);
  assert.deepEqual(Object.keys(r.artifacts).sort(), ['envelope.json', 'events.ndjson', 'report.json', 'run.json', 'runbook.yaml']);
  assert.equal(JSON.stringify(r.report), readFileSync(join(run.dir, 'report.json'), 'utf8'));
  // No absolute path anywhere in the metadata, and no temporary file left behind.
  for (const f of ['run.json', 'receipt.json', 'report.json']) assert.ok(!readFileSync(join(run.dir, f), 'utf8').includes(runs), f);
  assert.deepEqual(readdirSync(run.dir).filter((f) => f.startsWith('.')), []);
  assert.deepEqual(json(runs, 'latest.json'), { path: run.runId, run_id: run.runId, schema: 'runbook-latest-run/v1', updated_at: m.lifecycle[2].at });
  const history = lines(readFileSync(join(runs, 'history.ndjson'), 'utf8')).map((l) => JSON.parse(l));
  assert.deepEqual(history.map((h) => [h.event, h.run_id]), [['created', run.runId], ['ended', run.runId]]);
  assert.deepEqual(history[0], { adapter: 'library', at: m.lifecycle[0].at, event: 'created', path: run.runId, reference: 'runbook.yaml', run_id: run.runId, schema: 'runbook-run-history-entry/v1', trust: 'T1' });
  assert.equal(history[1].outcome, 'incomplete');
  verified(run.dir);
  // `verify latest`, as a person would name it.
  assert.equal(cli(['verify', join(runs, 'latest')]).status, 0);
});

/** Every key of every object in `v` (for JSON.stringify's key list). */
function flatKeys(v, out = {}) {
  if (Array.isArray(v)) v.forEach((x) => flatKeys(x, out));
  else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) flatKeys(x, Object.assign(out, { [k]: true }));
  return out;
}

test('a gated call: needs-approval with the call\'s hash, a human\'s approval bound to it, then allowed', async (t) => {
  const runs = tempDir(t);
  const run = await Run.create(policy, { document: read('examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'claude-code', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete', reference: 'rotate/runbook.yaml' });
  const stream = lines(read('examples/rotate-credentials/events.ndjson').toString('utf8'));
  for (const line of stream.slice(1, 5)) drive(run, line);
  const rotate = JSON.parse(stream[5]);
  const asked = run.invoke(rotate.tool, rotate.arguments, { callId: rotate.call_id });
  assert.equal(asked.kind, 'needs-approval');
  assert.equal(asked.allowed, false);
  assert.equal(asked.callSha256, run.callSha256(rotate.tool, rotate.arguments));
  // The agent approving itself is refused; a human's approval of that very call is accepted.
  assert.equal(run.approval('claude-code', true, { step: 'rotate', callSha256: asked.callSha256 }).kind, 'deny');
  const granted = run.approval('alice', true, { step: 'rotate', callSha256: asked.callSha256 });
  assert.equal(granted.kind, 'allow');
  assert.equal(JSON.parse(granted.eventLine).request, asked.decision.seq, 'the module names the request the answer answers (its ledger)');
  const again = run.invoke(rotate.tool, rotate.arguments, { callId: rotate.call_id });
  assert.equal(again.kind, 'allow');
  assert.equal(again.callSha256, null);
  run.end();
  const m = json(run.dir, 'run.json');
  assert.equal(m.document.reference, 'runbook.yaml', 'a reference is a file name, never a directory');
  verified(run.dir);
});

// -- invokeWithApproval: the gated call every adapter shares -----------------------------------------------

/**
 * A rotate-credentials run fed the example's first `upTo` events (the start included; by default up to its
 * gated call, `vault write`): `{run, tool, args, n}`, the gated call's tool and arguments, `n` the records so far.
 */
async function atTheGate(t, upTo = 5) {
  const run = await Run.create(policy, { document: read('examples/rotate-credentials/runbook.yaml'), runsRoot: tempDir(t), agent: 'claude-code', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  const stream = lines(read('examples/rotate-credentials/events.ndjson').toString('utf8'));
  for (const line of stream.slice(1, upTo)) drive(run, line);
  const rotate = JSON.parse(stream[5]);
  return { run, tool: rotate.tool, args: rotate.arguments, n: records(run.dir).length };
}

/** What was recorded after the first `n` records: `[event type, decision]` each. */
const since = (run, n) => records(run.dir).slice(n).map((r) => [JSON.parse(r.event).type, JSON.parse(r.decision).decision]);

/** A blocked call's message is one sentence: the module's explanation, a semicolon, the problem, one full stop. */
function oneSentence(g) {
  assert.equal(g.message, `${g.answer.explanation.replace(/\.$/, '')}; ${g.problem.replace(/\.$/, '')}.`);
  assert.ok(!g.message.includes('.;') && !g.message.endsWith('..'), g.message);
}

const never = () => new Promise(() => {});
for (const [name, approve, problem, more = {}] of [
  ['no callback', undefined, 'no approval callback was given, so the call stays blocked'],
  ['a callback that throws', () => {
    throw new Error('the pager is down');
  }, 'the approval callback failed (Error), so the call stays blocked'],
  ['a rejected promise', () => Promise.reject(new TypeError('nope')), 'the approval callback failed (TypeError), so the call stays blocked'],
  ['no answer in time', never, 'no approval came within 0.05 s, so the call stays blocked', { approvalTimeout: 0.05 }],
  ['no answer at all', () => undefined, 'the approval callback answered no {approver, granted}, so the call stays blocked'],
  ['a boolean', () => true, 'the approval callback answered no {approver, granted}, so the call stays blocked'],
  ['an empty approver', async () => ({ approver: '', granted: true }), 'the approval callback answered no {approver, granted}, so the call stays blocked'],
  ['granted not a boolean', () => ({ approver: 'alice', granted: 'yes' }), 'the approval callback answered no {approver, granted}, so the call stays blocked'],
  ['an approver the module cannot take', () => ({ approver: 'al\ud800ice', granted: true }), 'the approval callback answered no {approver, granted}, so the call stays blocked'],
  ['a getter that throws', () => ({ approver: 'alice', get granted() {
    throw new Error('no');
  } }), 'the approval callback answered no {approver, granted}, so the call stays blocked'],
]) {
  test(`invokeWithApproval: nothing is fed and the call stays blocked (${name})`, async (t) => {
    const warnings = t.mock.method(process, 'emitWarning', () => {});
    const { run, tool, args, n } = await atTheGate(t);
    const g = await run.invokeWithApproval(tool, args, { callId: 'toolu_03', approve, ...more });
    assert.ok(Object.isFrozen(g));
    assert.deepEqual([g.allowed, g.answer.kind, g.answer.allowed, g.approval, g.problem], [false, 'needs-approval', false, null, problem]);
    assert.equal(g.answer.callSha256, run.callSha256(tool, args));
    oneSentence(g);
    // Recorded: the held invoke only; never an approval, never a second invoke.
    assert.deepEqual(since(run, n), [['invoke', 'needs-approval']]);
    // A callback that failed is a warning naming the call; nothing else warns.
    const warned = warnings.mock.calls.map((c) => String(c.arguments[0]));
    if (/failed/.test(problem)) assert.deepEqual(warned, [`runbook: the approval callback threw (${problem.match(/\((\w+)\)/)[1]}); the call ${g.answer.callSha256} is blocked`]);
    else assert.deepEqual(warned, []);
    run.end('interrupted');
    verified(run.dir);
  });
}

test('invokeWithApproval: a call that needs no approval is decided once, the callback never asked', async (t) => {
  const { run } = await atTheGate(t, 1); // at the first step, where reading the secret is in scope
  const asked = [];
  const approve = (r) => asked.push(r);
  const n = records(run.dir).length;
  const allowed = await run.invokeWithApproval('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' }, { approve });
  assert.deepEqual([allowed.allowed, allowed.answer.kind, allowed.approval, allowed.problem, allowed.message], [true, 'allow', null, null, '']);
  const denied = await run.invokeWithApproval('Bash', { command: 'rm -rf /' }, { approve });
  assert.deepEqual([denied.allowed, denied.answer.kind, denied.approval, denied.problem], [false, 'deny', null, null]);
  assert.equal(denied.message, denied.answer.explanation);
  assert.deepEqual(asked, []);
  assert.deepEqual(since(run, n), [
    ['invoke', 'allow'],
    ['invoke', 'deny'],
  ]);
  run.end();
  verified(run.dir);
});

test('invokeWithApproval: a refusal is fed, bound to the call, and the call stays blocked', async (t) => {
  const { run, tool, args, n } = await atTheGate(t);
  const g = await run.invokeWithApproval(tool, args, { callId: 'toolu_03', approve: () => ({ approver: 'bob', granted: false }) });
  assert.deepEqual([g.allowed, g.answer.kind, g.approval.kind, g.problem], [false, 'needs-approval', 'allow', 'bob refused to approve this call']);
  oneSentence(g);
  assert.deepEqual(since(run, n), [
    ['invoke', 'needs-approval'],
    ['approval', 'allow'],
  ]);
  const fed = JSON.parse(records(run.dir).at(-1).event);
  assert.deepEqual([fed.approver, fed.granted, fed.step, fed.call_sha256, fed.request], ['bob', false, 'rotate', g.answer.callSha256, g.answer.decision.seq]);
  run.end('interrupted');
  verified(run.dir);
});

test('invokeWithApproval: an approval the module does not accept (the agent itself) is fed, and the call stays blocked', async (t) => {
  const { run, tool, args, n } = await atTheGate(t);
  const g = await run.invokeWithApproval(tool, args, { approve: () => ({ approver: 'claude-code', granted: true }) });
  assert.deepEqual([g.allowed, g.answer.kind, g.approval.kind], [false, 'needs-approval', 'deny']);
  assert.equal(g.problem, `the approval was not accepted: ${g.approval.explanation}`);
  oneSentence(g);
  assert.deepEqual(since(run, n), [
    ['invoke', 'needs-approval'],
    ['approval', 'deny'],
  ]);
  run.end('interrupted');
  verified(run.dir);
});

test('invokeWithApproval: a grant is fed bound to the call, which is decided again and allowed', async (t) => {
  for (const sync of [true, false]) {
    const { run, tool, args, n } = await atTheGate(t);
    const asked = [];
    let during;
    const approve = (request, { signal }) => {
      asked.push([request, signal]);
      during = signal.aborted;
      const answer = { approver: 'alice', granted: true };
      return sync ? answer : new Promise((r) => setTimeout(() => r(answer), 20));
    };
    const g = await run.invokeWithApproval(tool, args, { callId: 'toolu_03', approve, approvalTimeout: 5, request: { toolUseId: 'toolu_03' } });
    assert.deepEqual([g.allowed, g.answer.kind, g.approval.kind, g.problem, g.message], [true, 'allow', 'allow', null, '']);
    // The request: the call, its hash and the module's sentence, with the adapter's own field; frozen.
    assert.equal(asked.length, 1);
    const [request, signal] = asked[0];
    const sha = run.callSha256(tool, args);
    assert.deepEqual(request, { runId: run.runId, step: 'rotate', tool, arguments: args, callSha256: sha, explanation: request.explanation, toolUseId: 'toolu_03' });
    assert.match(request.explanation, /needs-approval/);
    assert.ok(Object.isFrozen(request));
    // The callback's signal is live while it decides, aborted once the wait is over.
    assert.deepEqual([during, signal.aborted], [false, true]);
    assert.deepEqual(since(run, n), [
      ['invoke', 'needs-approval'],
      ['approval', 'allow'],
      ['invoke', 'allow'],
    ]);
    const recs = records(run.dir).slice(n).map((r) => JSON.parse(r.event));
    assert.deepEqual([recs[1].approver, recs[1].granted, recs[1].call_sha256, recs[1].request], ['alice', true, sha, JSON.parse(records(run.dir)[n].decision).seq]);
    assert.deepEqual([recs[0].call_id, recs[2].call_id], ['toolu_03', 'toolu_03']);
    run.end();
    verified(run.dir);
  }
});

test('invokeWithApproval: the timeout aborts the callback\'s signal, and a late answer is never fed', async (t) => {
  const { run, tool, args, n } = await atTheGate(t);
  let late = null;
  const approve = (request, { signal }) =>
    new Promise((resolve) => {
      signal.addEventListener('abort', () => {
        late = signal.aborted;
        resolve({ approver: 'alice', granted: true });
      });
    });
  const t0 = Date.now();
  const g = await run.invokeWithApproval(tool, args, { approve, approvalTimeout: 0.05 });
  assert.ok(Date.now() - t0 < 5000);
  assert.equal(g.problem, 'no approval came within 0.05 s, so the call stays blocked');
  await new Promise((r) => setImmediate(r));
  assert.equal(late, true);
  assert.deepEqual(since(run, n), [['invoke', 'needs-approval']]);
  run.end('interrupted');
  verified(run.dir);
});

test('invokeWithApproval: the framework\'s signal aborting ends the wait; nothing more is fed', async (t) => {
  const { run, tool, args, n } = await atTheGate(t);
  // Aborted while a person decides (their answer comes, too late).
  const client = new AbortController();
  let seen;
  const approve = async (request, { signal }) => {
    client.abort(new Error('the client left'));
    seen = [signal.aborted, signal.reason?.message];
    return { approver: 'alice', granted: true };
  };
  const g = await run.invokeWithApproval(tool, args, { approve, signal: client.signal });
  assert.equal(g.problem, 'the wait for approval was aborted, so the call stays blocked');
  assert.deepEqual(seen, [true, 'the client left']);
  // Aborted already: no one is asked.
  let asked = 0;
  const again = await run.invokeWithApproval(tool, args, { approve: () => ++asked, signal: client.signal });
  assert.deepEqual([again.allowed, again.problem, asked], [false, 'the wait for approval was aborted, so the call stays blocked', 0]);
  // A wait the signal ends before any answer.
  const late = new AbortController();
  setTimeout(() => late.abort(), 20);
  const third = await run.invokeWithApproval(tool, args, { approve: never, signal: late.signal });
  assert.equal(third.problem, 'the wait for approval was aborted, so the call stays blocked');
  assert.deepEqual(since(run, n), [
    ['invoke', 'needs-approval'],
    ['invoke', 'needs-approval'],
    ['invoke', 'needs-approval'],
  ]);
  run.end('interrupted');
  verified(run.dir);
});

test('invokeWithApproval: a run finished while the call waited rejects with RunOver, and nothing more is fed', async (t) => {
  const { run, tool, args } = await atTheGate(t);
  const approve = () => {
    run.end('interrupted'); // the program ended the run meanwhile
    return { approver: 'alice', granted: true };
  };
  await assert.rejects(run.invokeWithApproval(tool, args, { approve }), (e) => e instanceof RunOver && e.message.includes(run.runId));
  assert.deepEqual(records(run.dir).slice(-2).map((r) => JSON.parse(r.event).type), ['invoke', 'end']);
  verified(run.dir);
});

test('invokeWithApproval checks its options before feeding anything', async (t) => {
  const { run, tool, args, n } = await atTheGate(t);
  for (const [opts, says] of [
    [{ approve: 'alice' }, /`approve` must be a function/],
    [{ approvalTimeout: 0 }, /`approvalTimeout` must be a positive number/],
    [{ approvalTimeout: Infinity }, /`approvalTimeout` must be a positive number/],
    [{ approvalTimeout: '5' }, /`approvalTimeout` must be a positive number/],
    [{ signal: {} }, /`signal` must be an AbortSignal/],
    [{ request: 'x' }, /`request` must be an object/],
    [{ request: { runId: 'other' } }, /`request` may not set `runId`/],
    [{ request: { callSha256: '0'.repeat(64) } }, /`request` may not set `callSha256`/],
    [{ timeout: 5 }, /unknown option `timeout`/],
  ]) {
    await assert.rejects(run.invokeWithApproval(tool, args, opts), (e) => e instanceof InvalidInput && says.test(e.message), JSON.stringify(opts));
  }
  assert.equal(records(run.dir).length, n);
  run.end('interrupted');
  verified(run.dir);
});

test('a tampered byte fails verify: in the events, the report, the receipt, the document', async (t) => {
  const runs = tempDir(t);
  const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  run.invoke('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' });
  run.invoke('Bash', { command: 'rm -rf /' });
  run.end();
  verified(run.dir);
  const cases = [
    ['events.ndjson', (b) => b.toString('utf8').replace('rm -rf /', 'rm -rf .')],
    ['events.ndjson', (b) => b.toString('utf8').replace('"decision":"deny"', '"decision":"allow"')],
    ['report.json', (b) => b.toString('utf8').replace('"incomplete"', '"completed"')],
    ['receipt.json', (b) => b.toString('utf8').replace(HOST_VERSION, `${HOST_VERSION}9`)],
    ['runbook.yaml', (b) => Buffer.concat([b, Buffer.from('\n')])],
    ['run.json', (b) => b.toString('utf8').replace('"library"', '"librarx"')],
  ];
  for (const [file, change] of cases) {
    const copy = join(tempDir(t), run.runId);
    cpSync(run.dir, copy, { recursive: true });
    const before = readFileSync(join(copy, file));
    const after = Buffer.from(change(before));
    assert.notDeepEqual(after, before, `${file}: the change applies`);
    writeFileSync(join(copy, file), after);
    const v = verify(copy);
    assert.equal(v.status, 1, `${file}: verify must refuse the tampered copy (${JSON.stringify(v.result)})`);
    assert.equal(v.result.ok, false);
  }
  // The original is untouched and still verifies.
  verified(run.dir);
});

test('a refused start is a recorded run: halt with the refusals, finished, verified; later calls throw run-over', async (t) => {
  const runs = tempDir(t);
  const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R0', riskCeiling: 'read-only', coverage: ['shell'] });
  assert.equal(run.start.kind, 'halt');
  assert.equal(run.start.decision.reason, 'refused');
  assert.deepEqual(run.start.decision.refusals, ['coverage-incomplete', 'profile-too-low', 'risk-above-ceiling']);
  assert.equal(run.over, true);
  assert.equal(run.finished, true);
  assert.equal(run.state().outcome, 'refused');
  assert.throws(() => run.invoke('Bash', { command: 'ls' }), (e) => e instanceof RunOver && e.code === 'run-over' && e.message.includes(run.runId));
  assert.equal(run.end(), 'refused');
  const m = json(run.dir, 'run.json');
  assert.deepEqual(m.lifecycle.map((l) => l.event), ['created', 'refused', 'ended']);
  assert.deepEqual(m.adapter.coverage, ['shell']);
  assert.equal(verified(run.dir).outcome, 'refused');
  // A document without an envelope: refused with invalid-document, the bundle has no envelope.json.
  const broken = await Run.create(policy, { document: join(ROOT, 'examples/broken/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'irreversible', coverage: 'complete' });
  assert.deepEqual(broken.start.decision.refusals, ['invalid-document']);
  assert.equal(existsSync(join(broken.dir, 'envelope.json')), false);
  const bm = json(broken.dir, 'run.json');
  assert.equal(bm.artifacts.envelope, null);
  assert.equal(bm.chain_h0, bm.document.sha256);
  assert.equal(verified(broken.dir).outcome, 'refused');
});

test('the guard: calls naming the runs directory (or a guarded path) are recorded with guard and denied', async (t) => {
  const base = tempDir(t);
  const cwd = process.cwd();
  // The agent works in `base`: it names the runs directory relative to it, the hook-style absolute path too.
  process.chdir(base);
  t.after(() => process.chdir(cwd));
  const runs = join(base, 'agent-runs');
  const secret = join(base, 'allowed_signers');
  const run = await Run.create(policy, { document: join(ROOT, 'examples/read-only-investigation/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R0', riskCeiling: 'read-only', coverage: 'complete', guardPaths: [secret] });
  assert.equal(run.start.allowed, true);
  for (const [tool, args] of [
    ['Bash', { command: `cat ${runs}/latest.json` }],
    ['Bash', { command: 'ls agent-runs/' }],
    ['Read', { file_path: join(run.dir, 'events.ndjson') }],
    ['Bash', { command: 'runbook-host approve latest -' }],
    ['Edit', { nested: [{ 'allowed_signers': 1 }] }],
    ['Bash', { command: `cat ${join(PACKAGE, 'src', 'run.js')}` }],
  ]) {
    const a = run.invoke(tool, args);
    assert.equal(a.kind, 'deny', `${JSON.stringify(args)} is guarded`);
    assert.equal(a.decision.reason, 'guarded');
    assert.equal(JSON.parse(a.eventLine).guard, true);
  }
  const plain = run.invoke('Bash', { command: 'du -sh /var' });
  assert.equal(JSON.parse(plain.eventLine).guard, undefined, 'an unguarded call carries no guard flag');
  assert.ok(run.guard.needles.includes('runbook-host'));
  assert.ok(run.guard.needles.includes('agent-runs'), 'the runs directory relative to the working directory');
  run.end();
  verified(run.dir);
});

test('malformed input from the framework is a recorded halt, and the bundle still verifies', async (t) => {
  const runs = tempDir(t);
  const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  const a = run.invoke(42, { command: 'ls' });
  assert.equal(a.kind, 'halt');
  assert.equal(a.decision.reason, 'malformed-event');
  assert.equal(a.allowed, false);
  assert.match(a.eventLine, /^malformed typed event: invoke\.tool: expected a string, got number$/);
  assert.equal(run.over, true);
  // Later calls are answered halt (recorded), never allowed.
  assert.equal(run.invoke('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' }).kind, 'halt');
  assert.equal(run.result('Bash', { n: NaN }).kind, 'halt');
  assert.equal(run.end(), 'failed');
  const recs = records(run.dir);
  assert.equal(JSON.parse(recs[1].raw).event, a.eventLine, 'a line that is not JSON is stored as a JSON string');
  const v = verified(run.dir);
  assert.ok(v.share_safety.reasons.some((r) => r.code === 'RAW_EVENT_TEXT'));
  // Options are the calling code's, not the framework's: a wrong one is thrown, and nothing is recorded.
  const b = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  assert.throws(() => b.invoke('Bash', {}, { callID: 'x' }), /unknown option `callID`/);
  assert.equal(records(b.dir).length, 1);
  b.end();
  verified(b.dir);
});

test('feedMalformed records the framework\'s text as a halt, stored as a JSON string, and the bundle verifies', async (t) => {
  const runs = tempDir(t);
  const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  const get = { command: 'kubectl -n payments get secret payments-db-credentials' };
  assert.equal(run.invoke('Bash', get, { callId: 't1' }).allowed, true);
  const text = 'a hook input (`tool_input` is not an object): {"tool_name":"Bash","tool_input":"ls"}';
  const a = run.feedMalformed(text);
  assert.deepEqual([a.kind, a.decision.reason, a.allowed], ['halt', 'malformed-event', false]);
  assert.equal(a.eventLine, text);
  assert.equal(a.state.outcome, 'failed');
  assert.equal(run.over, true);
  const raw = records(run.dir).at(-1).raw;
  assert.equal(JSON.parse(raw).event, text);
  assert.ok(raw.endsWith(`,"event":${JSON.stringify(text)}}`), raw);
  // Every later call is denied, even one the runbook allows, and so is a second malformed one.
  const later = run.invoke('Bash', get, { callId: 't2' });
  assert.deepEqual([later.kind, later.decision.reason], ['halt', 'halted']);
  assert.equal(run.feedMalformed('again').decision.reason, 'halted');
  assert.equal(run.end(), 'failed');
  verified(run.dir);
  assert.throws(() => run.feedMalformed('after the end'), RunOver);
});

for (const [name, text, line] of [
  // A payload that is an event object the module would decide (an allowed call) never goes as it is.
  ['an event object', '{"type":"invoke","at":1,"tool":"Bash","arguments":{"command":"kubectl -n payments get secret x"}}', null],
  ['an event object after a BOM', ' \ufeff{"type":"final_output","at":1}', null],
  ['empty', '', 'malformed event: '],
  ['line breaks', 'two\nlines\r\nand\u2028three', 'two lines and three'],
  ['a lone surrogate', 'lone \ud800 surrogate', 'lone \ufffd surrogate'],
  ['not text', { tool_name: 7 }, 'malformed event: { tool_name: 7 }'],
  ['undefined', undefined, 'undefined'],
  ['too long', 'x'.repeat(5000), `${'x'.repeat(4096)} ... (904 more characters not recorded)`],
]) {
  test(`feedMalformed makes any text one line that is no event (${name})`, async (t) => {
    const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: tempDir(t), agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
    const a = run.feedMalformed(text);
    assert.deepEqual([a.kind, a.decision.reason], ['halt', 'malformed-event'], a.eventLine);
    assert.equal(a.eventLine, line ?? `malformed event: ${text}`);
    assert.equal(JSON.parse(records(run.dir).at(-1).raw).event, a.eventLine);
    assert.equal(run.invoke('Bash', { command: 'kubectl -n payments get secret x' }).allowed, false);
    if (typeof text === 'string' && text.startsWith('{"type":"invoke"')) {
      // The control: as it is, the same text is an event, which a session allows.
      const s = policy.session(readFileSync(join(ROOT, 'examples/rotate-credentials/runbook.yaml')));
      s.handle({ type: 'start', runId: 'r-1', profile: 'R2', allowlist: ['*'], riskCeiling: 'destructive', coverage: 'complete', agent: 'a' }, 0);
      assert.equal(JSON.parse(s.handleLine(text)).decision, 'allow');
    }
    run.end();
    verified(run.dir);
  });
}

test('a checkpoint deadline: msUntilDeadline counts down, tickIfDue feeds the tick once it passed', async (t) => {
  const runs = tempDir(t);
  const doc = JSON.stringify({
    runbook_id: 'deadline',
    version: '1.0.0',
    checkpoints: [{ id: 'cp-read', kind: 'tool_call', required: true, match: { tool: 'db.read' }, timeout_ms: 150 }],
    completion: { condition: 'final_output', receipt: true },
  });
  const run = await Run.create(policy, { document: new TextEncoder().encode(doc), runsRoot: runs, agent: 'a', profile: 'R1', riskCeiling: 'mutating', coverage: 'complete' });
  assert.equal(run.start.allowed, true, run.start.decisionLine);
  assert.equal(json(run.dir, 'run.json').document.file, 'runbook.json', 'JSON bytes are stored as runbook.json');
  assert.equal(json(run.dir, 'run.json').document.reference, 'runbook.json');
  const wait = run.msUntilDeadline();
  assert.ok(wait > 0 && wait <= 150, `a deadline ahead (${wait} ms)`);
  assert.equal(run.tickIfDue(), null, 'nothing due yet');
  await new Promise((r) => setTimeout(r, wait + 20));
  const tick = run.tickIfDue();
  assert.ok(tick, 'a tick once the deadline passed');
  assert.equal(tick.kind, 'halt');
  assert.equal(tick.decision.reason, 'checkpoint-timeout');
  assert.equal(run.msUntilDeadline(), null);
  assert.equal(run.end(), 'failed');
  const at = records(run.dir).map((r) => JSON.parse(r.event).at);
  assert.ok(at[1] >= 150, `the tick's at (${at[1]}) is past the deadline`);
  verified(run.dir);
});

test('two runs in one runs directory: latest.json names the newer one, history has both', async (t) => {
  const runs = tempDir(t);
  const claim = { agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' };
  const first = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, runId: 'r-first', ...claim });
  const second = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, runId: 'r-second', ...claim });
  first.end();
  assert.equal(json(runs, 'latest.json').run_id, 'r-second', 'ending an older run does not take latest.json back');
  second.end();
  const history = lines(readFileSync(join(runs, 'history.ndjson'), 'utf8')).map((l) => JSON.parse(l));
  assert.deepEqual(history.map((h) => `${h.event} ${h.run_id}`), ['created r-first', 'created r-second', 'ended r-first', 'ended r-second']);
  verified(first.dir);
  verified(second.dir);
  // An existing run id is refused, never overwritten.
  await assert.rejects(Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, runId: 'r-first', ...claim }), (e) => e instanceof RunBroken && /EEXIST/.test(e.message));
  verified(first.dir);
});

test('Run.create checks its options before writing anything', async (t) => {
  const runs = join(tempDir(t), 'runs');
  const ok = { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' };
  const bad = [
    [{ profile: 'R9' }, /start\.profile: expected R0, R1 or R2/],
    [{ coverage: 'most' }, /start\.coverage/],
    [{ agent: undefined }, /start\.agent: expected a string/],
    [{ allowlist: 'Bash' }, /start\.allowlist: expected a list/],
    [{ runId: '../escape' }, /not a usable run id/],
    [{ document: 'runbook_id: x\nversion: 1.0.0\n' }, /for document text pass/],
    [{ document: join(ROOT, 'no/such/runbook.yaml') }, /ENOENT/],
    [{ adapter: '' }, /adapter/],
    [{ runs: 'x' }, /unknown option `runs`/],
  ];
  for (const [change, why] of bad) {
    await assert.rejects(Run.create(policy, { ...ok, ...change }), (e) => e instanceof InvalidInput && why.test(e.message), JSON.stringify(change));
  }
  assert.equal(existsSync(runs), false, 'nothing was written');
  await assert.rejects(Run.create({}, ok), /needs the Policy from load/);
});

test('git state: counts only, as host/src/bundle/git.rs counts them', async (t) => {
  const repo = tempDir(t);
  const git = (...args) => {
    const r = spawnSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...args], { cwd: repo, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  };
  git('init', '-q');
  for (const f of ['a.txt', 'b.txt', 'c.txt']) writeFileSync(join(repo, f), `${f}\n`);
  git('add', '.');
  git('commit', '-q', '-m', 'init');
  writeFileSync(join(repo, 'a.txt'), 'changed\n'); // unstaged
  writeFileSync(join(repo, 'd.txt'), 'new\n');
  git('add', 'd.txt'); // staged
  git('mv', 'b.txt', 'e.txt'); // staged rename (two fields in -z output)
  writeFileSync(join(repo, 'c.txt'), 'both\n');
  git('add', 'c.txt');
  writeFileSync(join(repo, 'c.txt'), 'both, again\n'); // staged and unstaged
  writeFileSync(join(repo, 'u1.txt'), 'u\n');
  mkdirSync(join(repo, 'dir'));
  writeFileSync(join(repo, 'dir', 'u2.txt'), 'u\n'); // untracked
  const cwd = process.cwd();
  process.chdir(repo);
  t.after(() => process.chdir(cwd));
  // The runs directory inside the checkout is not counted (`:(exclude).runbook`, and measured before it exists).
  const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  assert.ok(!isAbsolute(relative(repo, run.dir)) && run.dir.startsWith('.runbook'), 'the default runs directory is .runbook/runs');
  assert.deepEqual(json(run.dir, 'run.json').source.git, { status: 'dirty', staged: 3, unstaged: 2, untracked: 2, total: 6 });
  run.end();
  verified(join(repo, run.dir));
  process.chdir(cwd);
  const plain = tempDir(t);
  process.chdir(plain);
  const outside = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  assert.deepEqual(json(outside.dir, 'run.json').source.git, { status: 'not-a-checkout' });
  outside.end();
  process.chdir(cwd);
});

test('run-broken after a write failure: that call and every later one throw, and verify refuses the bundle', { skip: process.platform === 'win32' && 'needs ulimit -f' }, (t) => {
  const runs = tempDir(t);
  // 24 KiB per file: the bundle's files fit, a 64 KiB tool result does not (EFBIG).
  const r = spawnSync('bash', ['-c', `trap '' XFSZ; ulimit -f 24; exec "$0" "$@"`, process.execPath, join(PACKAGE, 'test', 'fixtures', 'write-failure.mjs'), runs], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const steps = Object.fromEntries(lines(r.stdout).map((l) => JSON.parse(l)).map((o) => [o.step, o]));
  assert.equal(steps.invoke.ok, 'allow');
  assert.equal(steps.result.code, 'run-broken', JSON.stringify(steps.result));
  assert.equal(steps.result.cause, 'EFBIG');
  assert.match(steps.result.message, /cannot record the event in .*events\.ndjson: EFBIG/);
  for (const k of ['tick', 'state', 'end']) {
    assert.equal(steps[k].code, 'run-broken', k);
    assert.match(steps[k].message, /is broken and records nothing more/);
  }
  assert.deepEqual(steps.over.ok, [true, 'run-broken']);
  const v = verify(steps.dir.ok);
  assert.equal(v.status, 1, 'a bundle whose event could not be written does not verify');
  assert.equal(existsSync(join(steps.dir.ok, 'report.json')), false);
  // The record written in part was cut off again, and run.json says why the bundle ended (as the Rust host's).
  assert.ok(readFileSync(join(steps.dir.ok, 'events.ndjson'), 'utf8').endsWith('\n'));
  assert.equal(records(steps.dir.ok).length, 2, 'the start and the allowed call, whole');
  assert.equal(json(steps.dir.ok, 'run.json').ended_without_report, 'bundle-unwritable');
});

test('run-broken after a trap: the bundle ends without a report (host-trap), which verify refuses', (t) => {
  const runs = tempDir(t);
  const r = node(INTERPRETER_ONLY, join(PACKAGE, 'test', 'fixtures', 'trap.mjs'), ['run', runs]);
  assert.equal(r.status, 0, r.stderr);
  const steps = Object.fromEntries(lines(r.stdout).map((l) => JSON.parse(l)).map((o) => [o.step, o]));
  assert.equal(steps.invoke.ok, 'allow');
  for (const k of ['end', 'tick after', 'end after']) {
    assert.equal(steps[k].code, 'run-broken', `${k}: ${JSON.stringify(steps[k])}`);
    assert.match(steps[k].message, /the policy module trapped/);
  }
  assert.deepEqual(steps.over.ok, [true, true, 'run-broken', 'host-trap']);
  const dir = steps.dir.ok;
  const m = json(dir, 'run.json');
  assert.equal(m.ended_without_report, 'host-trap');
  assert.equal(m.outcome, null);
  assert.equal(m.lifecycle.at(-1).event, 'ended');
  const ended = lines(readFileSync(join(runs, 'history.ndjson'), 'utf8')).map((l) => JSON.parse(l)).at(-1);
  assert.deepEqual([ended.event, ended.outcome, ended.ended_without_report], ['ended', null, 'host-trap']);
  assert.equal(existsSync(join(dir, 'report.json')), false, 'no report is made up');
  assert.equal(verify(dir).status, 1);
});

test('run-broken when the bundle cannot be finished (its directory is gone)', async (t) => {
  const runs = tempDir(t);
  const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  assert.equal(run.invoke('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' }).kind, 'allow');
  renameSync(run.dir, `${run.dir}.moved`);
  assert.throws(() => run.end(), (e) => e instanceof RunBroken && e.code === 'run-broken' && /cannot finish the bundle: ENOENT/.test(e.message));
  assert.throws(() => run.tick(), (e) => e instanceof RunBroken && /records nothing more/.test(e.message));
  assert.throws(() => run.state(), RunBroken);
  assert.equal(run.over, true);
  assert.ok(run.broken instanceof RunBroken);
  assert.ok(!(run.broken.cause instanceof ModuleTrap));
});

test('the facts a bundle records are the options\': a fixed clock, host and git give every time, `at` and name', async (t) => {
  const runs = tempDir(t);
  let now = 1796169600000;
  const run = await Run.create(policy, {
    document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'),
    runsRoot: runs,
    runId: 'r-fixed',
    clock: () => now,
    host: { name: HOST_NAME, version: '9.9.9' },
    git: { status: 'clean', staged: 0, unstaged: 0, untracked: 0, total: 0 },
    agent: 'a',
    profile: 'R2',
    riskCeiling: 'destructive',
    coverage: 'complete',
  });
  now += 1250;
  run.invoke('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' });
  now += 10;
  assert.equal(run.end('client-closed'), 'incomplete');
  const m = json(run.dir, 'run.json');
  assert.deepEqual(m.lifecycle, [
    { event: 'created', at: '2026-12-02T00:00:00.000Z' },
    { event: 'admitted', at: '2026-12-02T00:00:00.000Z' },
    { event: 'ended', at: '2026-12-02T00:00:01.260Z' },
  ]);
  assert.deepEqual(m.host, { name: HOST_NAME, version: '9.9.9' });
  assert.deepEqual(m.source.git, { status: 'clean', staged: 0, unstaged: 0, untracked: 0, total: 0 });
  assert.deepEqual(records(run.dir).map((r) => JSON.parse(r.event).at), [0, 1250, 1260]);
  assert.deepEqual(JSON.parse(readFileSync(join(run.dir, 'receipt.json'), 'utf8')).host, m.host);
  // What the Run appended is the module's record of each event, byte for byte.
  const recs = records(run.dir);
  assert.equal(`${recs[1].raw}\n`, policy.recordLine(recs[1].h, recs[1].event, recs[1].decision));
  verified(run.dir);
  // A clock that is no clock is refused before anything is written.
  await assert.rejects(Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: join(runs, 'x'), agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete', clock: () => 'now' }), (e) => e instanceof InvalidInput && /Unix milliseconds/.test(e.message));
  await assert.rejects(Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: join(runs, 'x'), agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete', host: { name: 'h' } }), /`host` must be/);
  assert.equal(existsSync(join(runs, 'x')), false);
});

test('feedLine feeds an event line as it is; leaving is the module\'s rule for a client that leaves', async (t) => {
  const runs = tempDir(t);
  const run = await Run.create(policy, { document: join(ROOT, 'examples/rotate-credentials/runbook.yaml'), runsRoot: runs, agent: 'a', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete' });
  // Not the canonical form (keys out of order): recorded exactly as given, and decided as the event it is.
  const line = '{"type":"invoke","at":1,"tool":"Bash","arguments":{"command":"kubectl -n payments get secret payments-db-credentials"},"call_id":"t1"}';
  const a = run.feedLine(line);
  assert.equal(a.kind, 'allow');
  assert.equal(a.eventLine, line);
  assert.equal(records(run.dir).at(-1).raw, `{"h":"${a.link}","decision":${a.decisionLine},"event":${line}}`);
  assert.throws(() => run.feedLine('lone \ud800'), InvalidInput);
  assert.throws(() => run.feedLine(7), InvalidInput);
  assert.equal(records(run.dir).length, 2, 'nothing recorded for input refused before the module');
  assert.deepEqual(run.leaving(1, false), { reason: 'client-closed', finalOutput: false });
  assert.deepEqual(run.leaving(0, true), { reason: 'approval-timeout', finalOutput: true });
  assert.deepEqual(run.leaving(0, false), { reason: 'normal', finalOutput: true });
  assert.throws(() => run.leaving(-1, false), InvalidInput);
  // A needle added to the guard after the start reaches the module before the next call.
  run.guard.addName('secret-vault-path');
  const guarded = run.invoke('Bash', { command: 'cat secret-vault-path' });
  assert.deepEqual([guarded.kind, guarded.decision.reason, JSON.parse(guarded.eventLine).guard], ['deny', 'guarded', true]);
  run.end();
  verified(run.dir);
});

test('the whole-run vector runner: the same script writes the same bundle, byte for byte, and it verifies', (t) => {
  const vector = tempDir(t);
  writeFileSync(join(vector, 'runbook.yaml'), read('examples/rotate-credentials/runbook.yaml'));
  const stream = lines(read('examples/rotate-credentials/events.ndjson').toString('utf8')).map((l) => JSON.parse(l));
  const steps = stream.slice(1, 9).map((e) => {
    const { type, at, ...rest } = e;
    if (type === 'invoke') return { at, invoke: { step: null, ...rest } };
    if (type === 'result') return { at, result: rest };
    if (type === 'approval') return { at, approval: rest };
    throw new Error(type);
  });
  steps.push({ at: 43000, tick: true });
  steps.push({ at: 43100, line: 'not an event' });
  steps.push({ at: 43200, leave: { calls_in_flight: 0, last_call_timed_out: false } });
  const script = {
    document: 'runbook.yaml',
    adapter: 'library',
    facts: { run_id: 'r-20261202T000000Z-000000000001', t0: 1796169600000, host: { name: HOST_NAME, version: '0' }, git: { status: 'not-a-checkout' }, reference: 'runbook.yaml' },
    claim: { agent: 'claude-code', profile: 'R2', allowlist: ['*'], risk_ceiling: 'destructive', coverage: 'complete', available: null },
    steps,
  };
  writeFileSync(join(vector, 'script.json'), JSON.stringify(script));
  const runner = join(ROOT, 'conformance', 'vectors', 'run', 'runners', 'js.mjs');
  const outs = [join(tempDir(t), 'out'), join(tempDir(t), 'out')];
  for (const out of outs) {
    const r = node([], runner, [vector, out]);
    assert.equal(r.status, 0, r.stderr);
  }
  const files = (dir, sub = '') => readdirSync(join(dir, sub), { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? files(dir, join(sub, d.name)) : [join(sub, d.name)])).sort();
  assert.deepEqual(files(outs[0]), ['history.ndjson', 'latest.json', ...['envelope.json', 'events.ndjson', 'receipt.json', 'report.json', 'run.json', 'runbook.yaml'].map((f) => join(script.facts.run_id, f))]);
  assert.deepEqual(files(outs[1]), files(outs[0]));
  for (const f of files(outs[0])) assert.ok(readFileSync(join(outs[0], f)).equals(readFileSync(join(outs[1], f))), `${f} differs`);
  const dir = join(outs[0], script.facts.run_id);
  const recs = records(dir);
  assert.deepEqual(recs.map((r) => JSON.parse(r.decision).decision), ['allow', 'allow', 'allow', 'allow', 'allow', 'needs-approval', 'allow', 'allow', 'allow', 'allow', 'halt', 'halt']);
  assert.equal(JSON.parse(recs[10].raw).event, 'not an event');
  // `leave` after the halt: the final output the leaving rule asks for is recorded (halted), and no `end`.
  assert.deepEqual([JSON.parse(recs[11].event).type, JSON.parse(recs[11].decision).reason], ['final_output', 'halted']);
  assert.equal(json(dir, 'run.json').lifecycle.at(-1).at, '2026-12-02T00:00:43.200Z');
  assert.equal(verified(dir).outcome, 'failed');
  // A script it cannot read: exit 2, and nothing written.
  const bad = node([], runner, [join(vector, 'missing'), join(tempDir(t), 'out')]);
  assert.equal(bad.status, 2);
});
