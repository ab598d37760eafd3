// Document calls agree with the CLI byte for byte: lint findings, the envelope (or the findings that
// prevent it), and the call hash an approval binds to.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { InvalidDocument, InvalidInput, load } from '../src/node.js';
import { cli, examples, lines, read, tempDir } from './helpers.mjs';

let policy;
before(async () => {
  policy = await load();
});

const sha256 = (text) => createHash('sha256').update(text).digest('hex');

/** Every example, plus documents with a misspelt key, a YAML parse error and a JSON one. */
function documents(t) {
  const dir = tempDir(t);
  const extra = {
    'misspelt.yaml': 'runbook_id: typo\nversion: 1.0.0\ncapabilities: [db.read]\nsteps:\n  - id: read\n    tool: db.read\n    nxet: done\nterminals: [done]\n',
    'unparsable.yaml': 'runbook_id: [unclosed\n',
    'unparsable.json': '{"runbook_id": "x", "version": }',
    'unicode.yaml': 'runbook_id: ünï\nversion: 1.0.0\ntitle: "naïve — ✓"\n',
  };
  const docs = examples().map((e) => ({ name: e.path, path: e.path, bytes: read(e.path) }));
  for (const [name, text] of Object.entries(extra)) {
    const path = join(dir, name);
    writeFileSync(path, text);
    docs.push({ name, path, bytes: Buffer.from(text) });
  }
  return docs;
}

test('lint: sha256, structure, ok and every finding equal `runbook-host lint --format json`', (t) => {
  for (const doc of documents(t)) {
    const want = JSON.parse(cli(['lint', '--format', 'json', doc.path]).stdout);
    const got = policy.lint(doc.bytes);
    assert.deepEqual(got, { sha256: want.sha256, findings: want.findings, structure: want.structure, ok: want.ok }, doc.name);
    // Text in, the same answer: text is its UTF-8 bytes.
    assert.deepEqual(policy.lint(doc.bytes.toString('utf8')), got, `${doc.name} as text`);
  }
});

test('envelope: the bytes of `runbook-host envelope`, or InvalidDocument with its findings', (t) => {
  let refused = 0;
  for (const doc of documents(t)) {
    const r = cli(['envelope', '--format', 'json', doc.path]);
    if (r.status === 0) {
      assert.equal(policy.envelope(doc.bytes), r.stdout, doc.name);
    } else {
      refused += 1;
      assert.equal(r.status, 1, doc.name);
      assert.throws(() => policy.envelope(doc.bytes), (e) => {
        assert.ok(e instanceof InvalidDocument);
        assert.equal(e.code, 'invalid-document');
        const want = JSON.parse(r.stdout);
        assert.equal(want.envelope, null);
        assert.deepEqual(e.findings, want.findings, doc.name);
        assert.match(e.message, /^the document has \d+ findings? that prevent an envelope: \d+:\d+ /);
        return true;
      });
    }
  }
  assert.ok(refused >= 3, 'documents without an envelope were checked');
});

test('callSha256: the hash the CLI accepted for a call-bound approval, and sha256 of the canonical call', () => {
  // examples/rotate-credentials: alice approves the rotation command bound to its hash; the CLI's replay
  // accepts the approval (and the call is allowed), so that hash is the CLI's.
  const events = lines(read('examples/rotate-credentials/events.ndjson').toString('utf8')).map((l) => JSON.parse(l));
  const approval = events.find((e) => e.type === 'approval' && e.call_sha256);
  const call = events.slice(events.indexOf(approval)).find((e) => e.type === 'invoke');
  assert.equal(policy.callSha256(call.tool, call.arguments), approval.call_sha256);
  const report = JSON.parse(lines(cli(['replay', 'examples/rotate-credentials/runbook.yaml', 'examples/rotate-credentials/events.ndjson']).stdout).at(-1));
  assert.ok(report.approvals.some((a) => a.call_sha256 === approval.call_sha256 && a.accepted));
  // The definition (docs/spec/run.md#approvals-bound-to-a-call): sha256 of canonical {"arguments":..,"tool":..}, keys sorted at every level.
  assert.equal(policy.callSha256('db.write', { z: 1, a: [true, null, 'é'] }), sha256('{"arguments":{"a":[true,null,"é"],"z":1},"tool":"db.write"}'));
  assert.equal(policy.callSha256('t', 1.5e3), sha256('{"arguments":1500,"tool":"t"}'));
  // What JSON cannot hold is refused, never hashed as something else.
  assert.throws(() => policy.callSha256('t', { x: NaN }), InvalidInput);
  assert.throws(() => policy.callSha256('t', { x: 1n }), InvalidInput);
  assert.throws(() => policy.callSha256('t', undefined), InvalidInput);
});

test('canonicalize, explain, prose, encodeEvent and chainLink', () => {
  assert.equal(policy.canonicalize('{"b": [1.0, 2e1], "a": "\\u00e9"}'), '{"a":"é","b":[1,20]}');
  assert.throws(() => policy.canonicalize('{"x":'), (e) => e.code === 'invalid-input' && /line 1, column 6/.test(e.detail));
  assert.equal(typeof policy.explain('decision', 'allow'), 'string');
  assert.equal(policy.explain('decision', 'no-such-code'), null);
  const prose = JSON.parse(policy.prose(read('examples/rotate-credentials/runbook.yaml')));
  assert.equal(typeof prose.runbook.title, 'string');
  assert.equal(policy.prose('[unclosed'), null);
  const line = policy.encodeEvent({ type: 'invoke', tool: 'db.read', arguments: { b: 1, a: 2 }, callId: 'c1' }, 10);
  assert.equal(line, '{"arguments":{"a":2,"b":1},"at":10,"call_id":"c1","tool":"db.read","type":"invoke"}');
  assert.equal(policy.encodeEvent({ type: 'verdict', step: 's', passed: false, by: 'bob' }, 1n), '{"at":1,"by":"bob","outcome":"fail","step":"s","type":"verdict"}');
  assert.throws(() => policy.encodeEvent({ type: 'invoke', tool: 'x', arguments: {}, callID: 'typo' }, 1), /invoke\.callID: not a key of a invoke event/);
  const decision = '{"decision":"allow","deviation":null,"reason":null,"refusals":[],"seq":0,"step":null}';
  const l1 = policy.chainLink('0'.repeat(64), line, decision);
  assert.match(l1, /^[0-9a-f]{64}$/);
  assert.notEqual(policy.chainLink('1'.repeat(64), line, decision), l1);
  assert.throws(() => policy.chainLink('xyz', line, decision), InvalidInput);
});
