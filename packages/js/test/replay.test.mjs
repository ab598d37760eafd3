// Sessions decide as the CLI does, byte for byte: every example's event streams through the wire path
// (handleLine, feedLine), the typed path (handle, feed) and the replay path, and across a snapshot.

import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { Session, SnapshotRefused, load } from '../src/node.js';
import { cli, examples, lines, read, typed } from './helpers.mjs';

let policy;
before(async () => {
  policy = await load();
});

/** Every example stream with the CLI's decision lines and report. */
function streams() {
  const out = [];
  for (const ex of examples()) {
    for (const events of ex.events) {
      const r = cli(['replay', '--format', 'json', ex.path, events]);
      const printed = lines(r.stdout);
      out.push({ name: events, doc: read(ex.path), events: lines(read(events).toString('utf8')), decisions: printed.slice(0, -1), report: printed.at(-1) });
    }
  }
  assert.ok(out.length >= 9, 'every example stream');
  return out;
}

/** h0 of a document: the envelope's sha256, or the document's when it has none (docs/spec/bundle.md#the-hash-chain). */
async function h0Of(doc) {
  const { createHash } = await import('node:crypto');
  let text;
  try {
    text = policy.envelope(doc);
  } catch {
    return createHash('sha256').update(doc).digest('hex');
  }
  return createHash('sha256').update(text).digest('hex');
}

test('the wire path: handleLine gives the CLI\'s decision lines and report', () => {
  for (const s of streams()) {
    const session = policy.session(s.doc, { instance: 'shared' });
    assert.deepEqual(s.events.map((l) => session.handleLine(l)), s.decisions, s.name);
    assert.equal(session.report(), s.report, `${s.name}: report`);
    assert.equal(session.isOver(), true);
    session.close();
  }
});

test('the typed path: handle and feed decide the same events the same way', async () => {
  for (const s of streams()) {
    const a = policy.session(s.doc);
    const b = policy.session(s.doc, { instance: 'shared' });
    let prev = await h0Of(s.doc);
    s.events.forEach((line, i) => {
      const [event, at] = typed(line);
      const want = JSON.parse(s.decisions[i]);
      const d = a.handle(event, at);
      assert.deepEqual(d, { seq: want.seq, kind: want.decision, step: want.step, deviation: want.deviation, reason: want.reason, refusals: want.refusals }, `${s.name}:${i + 1}`);
      const rec = b.feed(event, at, prev);
      assert.equal(rec.decisionLine, s.decisions[i], `${s.name}:${i + 1} feed`);
      assert.deepEqual(rec.decision, d);
      assert.equal(rec.state.events, i + 1);
      assert.equal(typeof rec.explanation, 'string');
      // The recorded line is the canonical form of the same event.
      assert.equal(rec.eventLine, policy.canonicalize(rec.eventLine));
      assert.equal(rec.link, policy.chainLink(prev, rec.eventLine, rec.decisionLine));
      prev = rec.link;
    });
    assert.equal(a.report(), s.report, `${s.name}: report (handle)`);
    assert.equal(b.report(), s.report, `${s.name}: report (feed)`);
    assert.deepEqual(a.state(), b.state());
    a.close();
    b.close();
  }
});

test('feedLine and replayLine give the same links and decision lines; replay checks what was recorded', async () => {
  for (const s of streams()) {
    const rec = policy.session(s.doc, { instance: 'shared' });
    const rep = policy.session(s.doc, { instance: 'shared' });
    let prev = await h0Of(s.doc);
    for (const [i, line] of s.events.entries()) {
      const r = rec.feedLine(line, prev);
      assert.equal(r.eventLine, line, 'recorded exactly as given');
      assert.equal(r.decisionLine, s.decisions[i]);
      const [decisionLine, link] = rep.replayLine(line, prev);
      assert.equal(decisionLine, r.decisionLine);
      assert.equal(link, r.link);
      prev = link;
    }
    assert.equal(rep.report(), s.report);
  }
});

test('snapshot and restore: a run carried across instances goes on exactly as the whole one', () => {
  for (const s of streams()) {
    for (const k of [0, s.events.length >> 1, s.events.length]) {
      const first = policy.session(s.doc, { instance: 'shared' });
      const got = s.events.slice(0, k).map((l) => first.handleLine(l));
      const snapshot = first.snapshot();
      first.close();
      assert.equal(JSON.parse(snapshot).schema, 'runbook-session-snapshot/v1');
      // Restored in an instance of its own: only the document and the snapshot carry over.
      const second = Session.restore(policy, s.doc, snapshot);
      got.push(...s.events.slice(k).map((l) => second.handleLine(l)));
      assert.deepEqual(got, s.decisions, `${s.name} split at ${k}`);
      assert.equal(second.report(), s.report);
      if (k === s.events.length) assert.equal(second.snapshot(), snapshot, 'restored as written');
      second.close();
    }
  }
});

test('a snapshot for other bytes, or edited, is refused naming the field', () => {
  const [a, b] = [read('examples/rotate-credentials/runbook.yaml'), read('examples/incident-rollback/runbook.yaml')];
  const s = policy.session(a);
  s.handleLine('{"type":"start","at":0,"run_id":"r-1","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a"}');
  const snapshot = s.snapshot();
  assert.throws(() => Session.restore(policy, b, snapshot), (e) => {
    assert.ok(e instanceof SnapshotRefused);
    assert.equal(e.code, 'snapshot-refused');
    assert.match(e.detail, /^snapshot \//, 'the module names the field with a JSON Pointer');
    assert.equal(e.message, `the snapshot is refused: ${e.detail}`);
    return true;
  });
  const edited = snapshot.replace('"phase":"running"', '"phase":"flying"');
  assert.notEqual(edited, snapshot);
  assert.throws(() => Session.restore(policy, a, edited), SnapshotRefused);
  assert.throws(() => Session.restore(policy, a, '{}'), /snapshot \/schema: missing/);
  assert.equal(Session.restore(policy, a, snapshot).snapshot(), snapshot);
});
