// Sessions fail closed: a malformed typed event is a recorded halt (never an allow, never a throw past
// its decision); a trap ends the session (ModuleTrap from then on) without touching other instances.

import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { join } from 'node:path';
import { InvalidInput, PolicyError, Session, SessionClosed, load } from '../src/node.js';
import { INTERPRETER_ONLY, PACKAGE, lines, node, read } from './helpers.mjs';

let policy;
const DOC = read('examples/rotate-credentials/runbook.yaml');
const START = { type: 'start', runId: 'r-1', profile: 'R2', allowlist: ['*'], riskCeiling: 'irreversible', coverage: 'complete', agent: 'agent-1' };
const READ = { type: 'invoke', tool: 'Bash', arguments: { command: 'kubectl -n payments get secret payments-db-credentials' } };
const H0 = '0'.repeat(64);

before(async () => {
  policy = await load();
});

function started() {
  const s = policy.session(DOC, { instance: 'shared' });
  assert.equal(s.handle(START, 0).kind, 'allow');
  return s;
}

test('an allowed call, a denied one, the end: typed decisions and state', () => {
  const s = started();
  assert.deepEqual(s.handle(READ, 5), { seq: 1, kind: 'allow', step: 'inspect', deviation: null, reason: null, refusals: [] });
  const d = s.handle({ type: 'invoke', tool: 'Write', arguments: { path: '/etc/passwd' } }, 6);
  assert.equal(d.kind, 'deny');
  assert.equal(d.deviation, 'undeclared-tool');
  const st = s.state();
  assert.equal(st.phase, 'running');
  assert.equal(st.step, 'inspect');
  assert.deepEqual(st.scopeTools, ['Bash']);
  assert.equal(st.events, 3);
  assert.equal(st.outcome, null);
  assert.equal(s.isOver(), false);
  assert.equal(JSON.parse(s.status()).step, 'inspect');
  assert.equal(s.handle({ type: 'end' }, 7).kind, 'halt');
  assert.equal(s.isOver(), true);
  assert.equal(s.state().outcome, 'incomplete');
  assert.equal(JSON.parse(s.report()).outcome, 'incomplete');
});

test('malformed typed events are decided `halt` (malformed-event) and recorded as such, never thrown', () => {
  const cyclic = {};
  cyclic.self = cyclic;
  const cases = [
    [{ ...READ, tool: 42 }, /invoke\.tool: expected a string, got number/],
    [{ ...READ, callID: 't1' }, /invoke\.callID: not a key of a invoke event/],
    [{ ...READ, arguments: { n: NaN } }, /invoke\.arguments: not JSON-able: NaN at key "n"/],
    [{ ...READ, arguments: { n: 10n } }, /invoke\.arguments: not JSON-able/],
    [{ ...READ, arguments: cyclic }, /invoke\.arguments: not JSON-able/],
    [{ type: 'invoke', tool: 'Bash' }, /invoke\.arguments: missing/],
    [{ ...READ, guard: 'yes' }, /invoke\.guard: expected a boolean/],
    [{ type: 'launch' }, /event\.type: expected one of start, invoke/],
    [null, /event: expected an object/],
    [{ type: 'end', reason: 'bored' }, /end\.reason: expected one of normal/],
    [{ type: 'result', tool: 'Bash', result: 1, isError: 'no' }, /result\.isError: expected a boolean/],
    [{ type: 'approval', approver: 'alice', granted: 1 }, /approval\.granted: expected a boolean/],
    [{ ...READ, tool: 'Bash\uD800' }, /invoke\.tool: not well-formed text/],
  ];
  for (const [event, why] of cases) {
    const s = started();
    const rec = s.feed(event, 1, H0);
    assert.equal(rec.decision.kind, 'halt', JSON.stringify(why.source));
    assert.equal(rec.decision.reason, 'malformed-event');
    assert.match(rec.eventLine, /^malformed typed event: /);
    assert.match(rec.eventLine, why);
    assert.ok(!rec.eventLine.includes('\n'));
    assert.equal(rec.state.phase, 'over');
    assert.equal(rec.state.outcome, 'failed');
    // The typed path without the record decides the same.
    const t = started();
    assert.deepEqual(t.handle(event, 1), rec.decision);
    // Every later event is answered `halt`.
    assert.equal(s.handle(READ, 2).kind, 'halt');
  }
  // A bad `at` is malformed too; a lower one than the last is the module's own malformed-event.
  assert.equal(started().handle(READ, -1).reason, 'malformed-event');
  assert.equal(started().handle(READ, 1.5).reason, 'malformed-event');
  const s = started();
  assert.equal(s.handle(READ, 10).kind, 'allow');
  assert.equal(s.handle(READ, 9).reason, 'malformed-event');
});

test('the calling code\'s mistakes are InvalidInput, before anything reaches the module', () => {
  const s = started();
  assert.throws(() => s.feed(READ, 1, 'not-a-link'), InvalidInput);
  assert.throws(() => s.handleLine(42), InvalidInput);
  assert.throws(() => s.replayLine('{}', H0.slice(1)), InvalidInput);
  assert.throws(() => policy.lint(42), (e) => e instanceof PolicyError && e.code === 'invalid-input' && /bytes .* or text, not a number/.test(e.message));
  assert.throws(() => policy.lint('bad \uDC00 text'), /lone surrogate/);
  assert.throws(() => policy.session(DOC, { instance: 'mine' }), /"own" or "shared"/);
  assert.throws(() => Session.restore({}, DOC, '{}'), /needs the Policy from load/);
  assert.throws(() => new Session(), TypeError);
  // Still running: none of that was an event.
  assert.equal(s.state().events, 1);
});

test('a closed session answers SessionClosed; close is idempotent', () => {
  const s = policy.session(DOC);
  s.close();
  s.close();
  assert.throws(() => s.handle(START, 0), (e) => e instanceof SessionClosed && e.code === 'session-closed');
  assert.throws(() => s.report(), SessionClosed);
  // The Symbol.dispose form, for `using`.
  const t = policy.session(DOC);
  t[Symbol.dispose ?? Symbol.for('dispose')]();
  assert.throws(() => t.state(), SessionClosed);
});

test('a trap (a stack overflow inside the module) ends its session and its instance-mates, nothing else', () => {
  // In a process of its own with the interpreter alone, so that the overflow is placed exactly (see
  // test/fixtures/trap.mjs): the calls then are real calls of the component that overflow inside it.
  const r = node(INTERPRETER_ONLY, join(PACKAGE, 'test', 'fixtures', 'trap.mjs'), ['session']);
  assert.equal(r.status, 0, r.stderr);
  const steps = Object.fromEntries(lines(r.stdout).map((l) => JSON.parse(l)).map((o) => [o.step, o]));
  // A stateless call traps; the next one runs in a fresh instance.
  assert.equal(steps.lint.code, 'module-trap', JSON.stringify(steps.lint));
  assert.match(steps.lint.message, /trapped in lint: RangeError: Maximum call stack size exceeded/);
  assert.equal(steps['lint after'].ok, true);
  // A session traps: no answer is made up from then on, in it or in its instance.
  assert.equal(steps.report.code, 'module-trap', JSON.stringify(steps.report));
  assert.equal(steps.trapped.ok, true);
  for (const k of ['state after', 'handle after', 'mate after']) {
    assert.equal(steps[k].code, 'module-trap', k);
    assert.match(steps[k].message, /trapped earlier/);
  }
  // A session in its own instance, and new sessions, go on.
  assert.equal(steps['own after'].ok, 'allow');
  assert.match(steps['new session after'].ok, /"decision":"allow"/);
});

test('the adapters\' rules come from the module: visible tools, leaving, the exit code, the approval ledger', () => {
  const s = started();
  const offered = ['mcp__slack__post_message', 'Bash', 'Write'];
  // The step `inspect` scopes Bash only; the whole allowlist is every declared tool, in the servers' order.
  assert.deepEqual(s.visibleTools(offered), ['Bash']);
  assert.deepEqual(s.visibleTools(offered, true), ['mcp__slack__post_message', 'Bash']);
  assert.deepEqual(s.leaving(1, false), { reason: 'client-closed', finalOutput: false });
  assert.deepEqual(s.leaving(0, true), { reason: 'approval-timeout', finalOutput: true });
  assert.deepEqual(s.leaving(0, false), { reason: 'normal', finalOutput: true });
  assert.equal(s.exitCode(), 1);
  assert.equal(s.exitCode(true), 3);
  assert.deepEqual(s.state().approvalRequests, []);
  // docs/spec/run.md#approvals-bound-to-a-call: an approval that answers no request is refused.
  const d = s.handle({ type: 'approval', step: 'inspect', approver: 'alice', granted: true, request: 1 }, 8);
  assert.equal(d.kind, 'deny');
  assert.equal(d.reason, 'no-pending');
  assert.equal(s.handle({ type: 'end' }, 9).kind, 'halt');
  assert.deepEqual(s.visibleTools(offered, true), []);
});

test('docs/spec/runbook.md#exact-numbers: a call whose arguments hold a number with no exact canonical form is denied', () => {
  const s = started();
  // 2^53 + 1 as JSON text: a JS number cannot hold it, so it is given as the arguments' text through the wire path.
  const line = '{"type":"invoke","at":5,"tool":"Bash","arguments":{"command":"kubectl -n payments get secret payments-db-credentials","n":9007199254740993}}';
  const d = JSON.parse(s.handleLine(line));
  assert.deepEqual([d.decision, d.deviation, d.reason], ['deny', null, 'inexact-number']);
  // A JS number is a double, which prints as its own exact text: 2^53 stays hashable.
  assert.match(policy.callSha256('Bash', { n: 9007199254740992 }), /^[0-9a-f]{64}$/);
});
