// `verify` agrees with `runbook-host verify --format json`: the same checks on every whole-run vector's
// bundle, the same failure (place and sentence) on a tampered copy, a symbolic link refused, and a bundle
// with signed approvals failing closed at the place the CLI names.

import assert from 'node:assert/strict';
import { cpSync, existsSync, readFileSync, readdirSync, renameSync, statSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { InvalidInput, MAX_BUNDLE_BYTES, Run, load, verify } from '../src/node.js';
import { ROOT, tempDir, verify as cliVerify } from './helpers.mjs';

let policy;
before(async () => {
  policy = await load();
});

const VECTORS = join(ROOT, 'conformance', 'vectors', 'run');

/**
 * Every run directory under conformance/vectors/run/<name>/expected/ (the directories with a run.json); with
 * `refused`, only those of the vectors whose resume was refused (an unended bundle as the agent left it),
 * else only the others.
 */
function bundles(refused = false) {
  const out = [];
  for (const name of readdirSync(VECTORS).sort()) {
    const expected = join(VECTORS, name, 'expected');
    if (!existsSync(expected)) continue;
    const script = JSON.parse(readFileSync(join(VECTORS, name, 'script.json'), 'utf8'));
    if ((script.expect?.resume_refused === true) !== refused) continue;
    for (const d of readdirSync(expected, { withFileTypes: true })) {
      if (d.isDirectory() && existsSync(join(expected, d.name, 'run.json'))) out.push({ name: `${name}/${d.name}`, dir: join(expected, d.name) });
    }
  }
  return out;
}

/** `got` (this package's verify) says what the CLI's JSON `want` says. */
function agrees(got, want, name) {
  assert.equal(got.ok, want.ok, name);
  assert.deepEqual(got.checks, want.checks.map((c) => c.id), name);
  assert.deepEqual(got.failure, want.failure, name);
  assert.equal(got.runId, want.run_id, name);
  if (want.ok) {
    assert.equal(got.outcome, want.outcome, name);
    assert.equal(got.events, want.events, name);
    assert.deepEqual(got.warnings, want.warnings, name);
    assert.deepEqual(got.reasons, want.share_safety.reasons, name);
    assert.equal(got.redacted, !want.replayed, name);
    assert.equal(got.shadow, want.shadow?.forwarded_against_a_decision ?? null, name);
  }
}

/** A copy of a vector's bundle in a temporary directory. */
function copy(t, from) {
  const dir = join(tempDir(t), 'bundle');
  cpSync(from, dir, { recursive: true });
  return dir;
}

test('every whole-run vector\'s bundle verifies, with the checks `runbook-host verify` lists', async () => {
  const all = bundles();
  assert.ok(all.length >= 30, `the vectors' bundles were found (${all.length})`);
  for (const b of all) {
    const want = cliVerify(b.dir);
    assert.equal(want.status, 0, `${b.name}: ${want.stderr} ${JSON.stringify(want.result)}`);
    const got = await verify(b.dir, { policy });
    assert.ok(Object.isFrozen(got) && Object.isFrozen(got.checks), b.name);
    assert.equal(got.ok, true, `${b.name}: ${JSON.stringify(got.failure)}`);
    assert.ok(got.checks.includes('receipt'), b.name);
    assert.deepEqual(got.signedAnswers, [], b.name);
    agrees(got, want.result, b.name);
  }
});

test('a bundle whose resume was refused fails here as it fails `runbook-host verify`', async () => {
  const all = bundles(true);
  assert.ok(all.length >= 2, `the refused resumes' bundles were found (${all.length})`);
  for (const b of all) {
    const want = cliVerify(b.dir);
    assert.equal(want.status, 1, `${b.name}: ${want.stderr}`);
    const got = await verify(b.dir, { policy });
    assert.equal(got.ok, false, b.name);
    agrees(got, want.result, b.name);
  }
});

test('a report whose outcome was edited fails with the CLI\'s place and sentence', async (t) => {
  const [b] = bundles().filter((x) => readFileSync(join(x.dir, 'report.json'), 'utf8').includes('"outcome":"completed"'));
  assert.ok(b, 'a completed vector');
  const dir = copy(t, b.dir);
  const report = join(dir, 'report.json');
  writeFileSync(report, readFileSync(report, 'utf8').replace('"outcome":"completed"', '"outcome":"failed"'));
  const want = cliVerify(dir);
  assert.equal(want.status, 1, want.stderr);
  const got = await verify(dir, { policy });
  assert.equal(got.ok, false);
  assert.equal(typeof got.failure.place, 'string');
  agrees(got, want.result, b.name);
  assert.deepEqual(got.reasons, []);
});

test('a symbolic link in the bundle is never followed: "not a regular file"', async (t) => {
  const [b] = bundles();
  const dir = copy(t, b.dir);
  // The link points at the very bytes that belong there: it is refused for being a link.
  renameSync(join(dir, 'events.ndjson'), join(dir, '..', 'events.ndjson'));
  symlinkSync(join(dir, '..', 'events.ndjson'), join(dir, 'events.ndjson'));
  const got = await verify(dir, { policy });
  assert.equal(got.ok, false);
  assert.deepEqual(got.failure, { place: 'events.ndjson', message: 'not a regular file' });
  agrees(got, cliVerify(dir).result, b.name);
});

test('a bundle of more than 256 MiB is refused unread, as the CLI refuses it', async (t) => {
  const [b] = bundles();
  const dir = copy(t, b.dir);
  // A sparse file: its size counts, and nothing is read.
  writeFileSync(join(dir, 'big.bin'), '');
  truncateSync(join(dir, 'big.bin'), MAX_BUNDLE_BYTES + 1);
  const got = await verify(dir, { policy });
  assert.deepEqual(got.failure, { place: 'big.bin', message: `the bundle holds more than ${MAX_BUNDLE_BYTES} bytes, which verify does not read` });
  assert.deepEqual(got.checks, []);
  agrees(got, cliVerify(dir).result, b.name);
});

test('signed approvals fail closed: this package does not check SSH signatures', async (t) => {
  const root = tempDir(t);
  const run = await Run.create(policy, {
    document: join(ROOT, 'examples', 'rotate-credentials', 'runbook.yaml'),
    agent: 'my-agent', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete', runsRoot: join(root, 'runs'),
  });
  assert.ok(run.invoke('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' }).allowed);
  run.result('Bash', { stdout: 'payments-db-credentials   Opaque   2   97d\n', stderr: '', interrupted: false });
  assert.ok(run.invoke('mcp__vault__read_metadata', { path: 'database/creds/payments-app' }).allowed);
  run.result('mcp__vault__read_metadata', { path: 'database/creds/payments-app', age_days: 97 });
  const asked = run.invoke('Bash', { command: 'vault write -f database/rotate-role/payments-app' });
  assert.equal(asked.kind, 'needs-approval');
  const request = asked.decision.seq;
  const answer = run.approval('alice', true, { step: 'rotate', callSha256: asked.callSha256, request });
  assert.equal(answer.kind, 'allow');
  // The answer's signed payload (docs/spec/run.md#approvals-bound-to-a-call), with signature bytes nobody made.
  const message = `runbook-approval/v2\nrun ${run.runId}\nrequest ${request}\nstep rotate\ncall_sha256 ${asked.callSha256}\nanswer approve\n`;
  const line = policy.signatureLine(answer.decision.seq, request, 'test', message, 'not a signature', 'alice', 'SHA256:none');
  writeFileSync(join(run.dir, 'signatures.ndjson'), line.endsWith('\n') ? line : `${line}\n`);
  run.end('client-closed');

  const got = await verify(run.dir, { policy });
  assert.equal(got.signedAnswers.length, 1);
  assert.equal(got.signedAnswers[0].message, message);
  assert.equal(got.ok, false);
  assert.deepEqual(got.failure, { place: 'signatures.ndjson:1', message: 'the SSH signature is not checked by this package: verify the bundle with runbook-host verify' });
  assert.ok(!got.checks.includes('signatures') && got.checks.includes('replay-decisions'), got.checks.join(' '));
  // The CLI checks the bytes, and refuses these at the same place, after the same checks.
  const want = cliVerify(run.dir);
  assert.equal(want.status, 1, want.stderr);
  assert.equal(want.result.failure.place, got.failure.place);
  assert.match(want.result.failure.message, /signature does not verify/);
  assert.deepEqual(got.checks, want.result.checks.map((c) => c.id));
});

test('verifyBundle {moduleResult: true}: the module\'s verification unaltered, for a caller that checks the signatures', async (t) => {
  const root = tempDir(t);
  const run = await Run.create(policy, {
    document: join(ROOT, 'examples', 'rotate-credentials', 'runbook.yaml'),
    agent: 'my-agent', profile: 'R2', riskCeiling: 'destructive', coverage: 'complete', runsRoot: join(root, 'runs'),
  });
  assert.ok(run.invoke('Bash', { command: 'kubectl -n payments get secret payments-db-credentials' }).allowed);
  run.result('Bash', { stdout: 'payments-db-credentials   Opaque   2   97d\n', stderr: '', interrupted: false });
  assert.ok(run.invoke('mcp__vault__read_metadata', { path: 'database/creds/payments-app' }).allowed);
  run.result('mcp__vault__read_metadata', { path: 'database/creds/payments-app', age_days: 97 });
  const asked = run.invoke('Bash', { command: 'vault write -f database/rotate-role/payments-app' });
  const request = asked.decision.seq;
  const answer = run.approval('alice', true, { step: 'rotate', callSha256: asked.callSha256, request });
  const message = `runbook-approval/v2\nrun ${run.runId}\nrequest ${request}\nstep rotate\ncall_sha256 ${asked.callSha256}\nanswer approve\n`;
  const line = policy.signatureLine(answer.decision.seq, request, 'test', message, 'not a signature', 'alice', 'SHA256:none');
  writeFileSync(join(run.dir, 'signatures.ndjson'), line.endsWith('\n') ? line : `${line}\n`);
  run.end('client-closed');
  const entries = readdirSync(run.dir).map((n) => [n, statSync(join(run.dir, n)).isFile() ? new Uint8Array(readFileSync(join(run.dir, n))) : readdirSync(join(run.dir, n)).length]);
  // As before for every current caller: failing closed at the signed answer.
  const closed = policy.verifyBundle(entries, policy.sha256);
  assert.deepEqual(closed, policy.verifyBundle(entries, policy.sha256, null, {}));
  assert.deepEqual(closed, policy.verifyBundle(entries, policy.sha256, null, { moduleResult: false }));
  assert.equal(closed.failure.place, 'signatures.ndjson:1');
  // Unaltered: the module found nothing wrong; its checks go on past `signatures`; the answer is left to check.
  const raw = policy.verifyBundle(entries, policy.sha256, null, { moduleResult: true });
  assert.equal(raw.failure, null);
  assert.equal(raw.ok, true);
  assert.ok(raw.checks.includes('signatures'), raw.checks.join(' '));
  assert.deepEqual(raw.checks.slice(0, closed.checks.length), closed.checks);
  assert.equal(raw.signedAnswers.length, 1);
  assert.deepEqual({ ...raw.signedAnswers[0] }, { place: 'signatures.ndjson:1', principal: 'alice', message, signature: 'not a signature', fingerprint: 'SHA256:none' });
  assert.ok(Object.isFrozen(raw));
  // The CLI, which checks the bytes, fails where the caller must.
  const want = cliVerify(run.dir);
  assert.equal(want.result.failure.place, raw.signedAnswers[0].place);
  // A bundle without signatures: the same result either way.
  const [b] = bundles();
  const plain = readdirSync(b.dir).map((n) => [n, new Uint8Array(readFileSync(join(b.dir, n)))]);
  assert.deepEqual(policy.verifyBundle(plain, policy.sha256, null, { moduleResult: true }), policy.verifyBundle(plain, policy.sha256));
  // The option is checked.
  assert.throws(() => policy.verifyBundle(plain, policy.sha256, null, { moduleresult: true }), InvalidInput);
  assert.throws(() => policy.verifyBundle(plain, policy.sha256, null, { moduleResult: 'yes' }), InvalidInput);
  assert.throws(() => policy.verifyBundle(plain, policy.sha256, null, 'moduleResult'), InvalidInput);
});

test('verifyBundle takes entries (a browser has no fs); bad arguments are refused', async (t) => {
  const [b] = bundles();
  const entries = readdirSync(b.dir).map((n) => [n, new Uint8Array(readFileSync(join(b.dir, n)))]);
  const got = policy.verifyBundle(entries.reverse(), policy.sha256);
  assert.deepEqual(got, await verify(b.dir, { policy }));
  const more = [...entries, ['sub', 3], ['link', null]];
  assert.deepEqual(policy.verifyBundle(more, policy.sha256, null), policy.verifyBundle(more, policy.sha256));
  // Another module's sha256: the receipt names this one.
  const other = policy.verifyBundle(entries, '0'.repeat(64));
  assert.equal(other.ok, false);
  assert.equal(other.failure.place, 'receipt.json');
  assert.throws(() => policy.verifyBundle([['a', 'text']], policy.sha256), InvalidInput);
  assert.throws(() => policy.verifyBundle([['a', -1]], policy.sha256), InvalidInput);
  assert.throws(() => policy.verifyBundle([['a', null], ['a', 1]], policy.sha256), InvalidInput);
  assert.throws(() => policy.verifyBundle({}, policy.sha256), InvalidInput);
  await assert.rejects(verify(join(tempDir(t), 'none'), { policy }), InvalidInput);
  await assert.rejects(verify(b.dir, {}), InvalidInput);
});

test('a signed receipt fails closed here (this package cannot check it) and the CLI refuses a forged one', async (t) => {
  const [b] = bundles();
  const dir = copy(t, b.dir);
  writeFileSync(join(dir, 'receipt.dsse.json'), '{"payloadType":"x","payload":"","signatures":[]}');
  const got = await verify(dir, { policy });
  assert.equal(got.receiptSigned, true);
  assert.equal(got.ok, false);
  assert.equal(got.failure.place, 'receipt.dsse.json');
  const want = cliVerify(dir);
  assert.equal(want.status, 1, want.stderr);
  assert.ok(['receipt.dsse.json', 'run.json'].includes(want.result.failure.place), JSON.stringify(want.result.failure));
});

test('a traffic.ndjson line holds digests only and links as the module says (sha256 of prev and the line without its link)', async () => {
  const { createHash } = await import('node:crypto');
  const entry = { n: 1, at: 5, direction: 'to-server', server: 's', method: 'resources/read', params: { uri: 'secret://x' }, answer: { contents: [] } };
  const [line, link] = policy.trafficLine('h0', JSON.stringify(entry));
  assert.ok(line.endsWith('\n') && !line.includes('secret://x'), line);
  const parsed = JSON.parse(line);
  assert.equal(parsed.link, link);
  const { link: _, ...unlinked } = parsed;
  const sorted = Object.fromEntries(Object.keys(unlinked).sort().map((k) => [k, unlinked[k]]));
  assert.equal(createHash('sha256').update('h0' + JSON.stringify(sorted)).digest('hex'), link);
  assert.equal(parsed.params_sha256, createHash('sha256').update('{"uri":"secret://x"}').digest('hex'));
  assert.throws(() => policy.trafficLine('h0', JSON.stringify({ ...entry, direction: 'sideways' })), InvalidInput);
});
