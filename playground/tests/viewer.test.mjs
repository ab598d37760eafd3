// The run viewer (playground/src/viewer.html) in a real browser: Debian's Chromium driven by playwright-core,
// the page served by `runbook-host playground`. Real run bundles are made here, from every recorded event
// stream of examples/*/ (the runbook-policy package's Run, which writes the bytes runbook-host writes: the
// conformance run vectors pin that) and by the CLI itself (`runbook-host hook`, a Claude Code session,
// with and without a receipt signing key); each is opened in the viewer, as a folder or as a .tar.gz, and
// the viewer's verification must equal `runbook-host verify --format json` of the same bundle.
//
//   node --test playground/tests/
//
// Environment: RUNBOOK_HOST, PLAYGROUND_DIST, CHROMIUM as for browser.test.mjs; PLAYGROUND_SCREENSHOTS the
// folder for screenshot-viewer.png (default: the system temp folder; set it to playground/ to refresh the
// picture docs/viewer.md shows). A missing browser is a failure, not a skip.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';
import { passkeyHelpers } from './passkey-helpers.mjs';
import { Run, load } from '../../packages/js/src/node.js';

const here = dirname(fileURLToPath(import.meta.url));
const playground = resolve(here, '..');
const root = resolve(playground, '..');
const CLI = process.env.RUNBOOK_HOST || join(process.env.CARGO_TARGET_DIR || join(root, 'target'), 'release', 'runbook-host');
const DIST = process.env.PLAYGROUND_DIST || join(playground, 'dist');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SCREENSHOTS = process.env.PLAYGROUND_SCREENSHOTS || tmpdir();
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const lines = (text) => text.split('\n').filter((l) => l.trim() !== '');

/** Runs the CLI; returns {status, stdout (text), stderr}. */
function cli(args, opts = {}) {
  const r = spawnSync(CLI, args, { cwd: opts.cwd ?? root, input: opts.input, maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`cannot run ${CLI}: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8') };
}

/** `runbook-host verify DIR --format json`, parsed. */
function verify(dir) {
  const r = cli(['verify', dir, '--format', 'json']);
  assert.ok(r.status === 0 || r.status === 1, `verify ${dir}: exit ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

let work;
let policy;
const children = [];
const { serve, register, pageWithAuthenticator } = passkeyHelpers({ cli: CLI, children, cwd: () => work });

/**
 * The bundle of one recorded event stream of an example: the runbook-policy package's Run (its bytes are
 * runbook-host's) fed the stream's `start` claim and then every line as it is, with the run's clock at each
 * event's `at`; ended (`normal`) when the stream leaves it open. Returns the bundle's folder.
 */
async function exampleBundle(example, eventsFile, runsRoot) {
  const dir = join(root, 'examples', example);
  const doc = readdirSync(dir).find((f) => /^runbook\.(ya?ml|json)$/.test(f));
  const stream = lines(readFileSync(join(dir, eventsFile), 'utf8'));
  const start = JSON.parse(stream[0]);
  const t0 = Date.UTC(2026, 11, 2);
  let now = t0;
  const run = await Run.create(policy, {
    document: join(dir, doc),
    runsRoot,
    runId: `${example}-${basename(eventsFile, '.ndjson')}`,
    reference: doc,
    clock: () => now,
    git: { status: 'not-a-checkout' },
    agent: start.agent,
    profile: start.profile,
    allowlist: start.allowlist,
    riskCeiling: start.risk_ceiling,
    coverage: start.coverage !== null && typeof start.coverage === 'object' && !Array.isArray(start.coverage) ? start.coverage.blind : start.coverage,
    available: start.available ?? null,
  });
  for (const line of stream.slice(1)) {
    if (run.finished) break;
    const at = JSON.parse(line).at;
    if (Number.isSafeInteger(at)) now = t0 + at;
    run.feedLine(line);
  }
  if (!run.finished) run.end();
  return run.dir;
}

const hookBase = (session, event) => ({ session_id: session, transcript_path: 't.jsonl', cwd: '.', permission_mode: 'default', hook_event_name: event });
const pre = (s, tool, input, id) => ({ ...hookBase(s, 'PreToolUse'), tool_name: tool, tool_input: input, tool_use_id: id });
const post = (s, tool, input, response, id) => ({ ...pre(s, tool, input, id), hook_event_name: 'PostToolUse', tool_response: response });
const out = (stdout) => ({ stdout, stderr: '', interrupted: false, isImage: false });

/**
 * A bundle the CLI itself writes: `runbook-host hook` (one process per Claude Code hook event) through
 * examples/rotate-credentials: an allowed read, a shell command no capability declares (denied, a
 * deviation), the vault metadata, a call out of scope, then the session's end. `flags`: more hook options
 * (`--signing-key`). Returns the bundle's folder.
 */
function hookBundle(name, flags = []) {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  cpSync(join(root, 'examples/rotate-credentials/runbook.yaml'), join(dir, 'runbook.yaml'));
  for (const k of flags.filter((f) => f.endsWith('.pem'))) assert.equal(cli(['keygen', '--out', k], { cwd: dir }).status, 0);
  const s = `viewer-${name}`;
  const get = { command: 'kubectl -n payments get secret payments-db-credentials' };
  const meta = { path: 'database/creds/payments-app' };
  for (const payload of [
    { ...hookBase(s, 'SessionStart'), source: 'startup' },
    pre(s, 'Bash', get, 't1'),
    post(s, 'Bash', get, out('payments-db-credentials   Opaque   2   97d\n'), 't1'),
    pre(s, 'Bash', { command: 'rm -rf /var/lib/postgres <b>now</b>' }, 't2'),
    pre(s, 'mcp__vault__read_metadata', meta, 't3'),
    post(s, 'mcp__vault__read_metadata', meta, { age_days: 97 }, 't3'),
    pre(s, 'mcp__slack__post_message', { channel: '#x', text: 'done' }, 't4'),
    { ...hookBase(s, 'SessionEnd'), reason: 'other' },
  ]) {
    const r = cli(['hook', '--runbook', 'runbook.yaml', '--runs', 'runs', ...flags], { cwd: dir, input: JSON.stringify(payload) });
    assert.equal(r.status, 0, `hook ${payload.hook_event_name}: ${r.stderr}`);
  }
  const runs = readdirSync(join(dir, 'runs')).filter((n) => n.startsWith('r-'));
  assert.equal(runs.length, 1, `one run under ${dir}/runs: ${runs}`);
  return join(dir, 'runs', runs[0]);
}

const RUNBOOK_GATED = join(root, 'host/tests/claude/gated-hello.yaml');
const gbase = (s, event) => ({ session_id: s, transcript_path: 't.jsonl', cwd: '.', permission_mode: 'default', hook_event_name: event });
const gpre = (s, id) => ({ ...gbase(s, 'PreToolUse'), tool_name: 'Bash', tool_input: { command: 'echo hello' }, tool_use_id: id });
const gpost = (s, id) => ({ ...gpre(s, id), hook_event_name: 'PostToolUse', tool_response: out('hello\n') });

/** A project with the gated-hello runbook (one step, gated on a human's approval). */
function gatedProject(name) {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  cpSync(RUNBOOK_GATED, join(dir, 'runbook.yaml'));
  return dir;
}

function gatedHook(dir, payload, flags) {
  const r = cli(['hook', '--runbook', 'runbook.yaml', ...flags], { cwd: dir, input: JSON.stringify(payload) });
  assert.equal(r.status, 0, `hook ${payload.hook_event_name}: ${r.stderr}`);
  return r.stdout ? JSON.parse(r.stdout) : null;
}

/** Session `s` up to its gated call, which waits: the run's folder, the pending request and its number. */
function toTheGatedCall(dir, s, flags) {
  gatedHook(dir, { ...gbase(s, 'SessionStart'), source: 'startup' }, flags);
  const denied = gatedHook(dir, gpre(s, 't1'), flags);
  assert.match(denied?.hookSpecificOutput?.permissionDecisionReason ?? '', /needs-approval/);
  const runId = JSON.parse(readFileSync(join(dir, '.runbook/runs/.hook', `${s}.json`), 'utf8')).run_id;
  const runDir = join(dir, '.runbook/runs', runId);
  const [file] = readdirSync(join(runDir, 'pending'));
  const pending = JSON.parse(readFileSync(join(runDir, 'pending', file), 'utf8'));
  const request = lines(readFileSync(join(runDir, 'events.ndjson'), 'utf8')).map((l) => JSON.parse(l)).find((r) => r.decision.decision === 'needs-approval').decision.seq;
  return { runDir, pending, request };
}

/** The approved call retried (allowed now), its result, the session's end. */
function finishGated(dir, s, flags) {
  const again = gatedHook(dir, gpre(s, 't2'), flags);
  assert.notEqual(again?.hookSpecificOutput?.permissionDecision, 'deny', JSON.stringify(again));
  gatedHook(dir, gpost(s, 't2'), flags);
  gatedHook(dir, gbase(s, 'SessionEnd'), flags);
}

/**
 * A bundle with one signed approval of `kind`: the viewer's verdict is the CLI's (who signed included);
 * then one byte of the signature changed, in the folder: both fail at signatures.ndjson:1, with the same words.
 */
async function signedApprovalChecks(runDir, kind) {
  const want = verify(runDir);
  assert.equal(want.ok, true, JSON.stringify(want));
  assert.ok(want.checks.some((c) => c.id === 'signatures'));
  const got = await openFolder(runDir);
  sameAsCli(got, want, `${kind}-signed approval`);
  assert.deepEqual(got.approvals_signed_by, want.approvals_signed_by.map(({ place, principal, kind: k, fingerprint }) => ({ place, principal, kind: k, fingerprint })));
  assert.equal(got.approvals_signed_by[0].kind, kind);
  assert.deepEqual(await signatureItems(), [{ place: 'signatures.ndjson:1', status: 'verified' }]);
  assert.match(await page.$eval('#approvals', (e) => e.textContent), /verified in this page by the key it carries/);
  // One byte of the signature: the last byte of the SSHSIG blob (ECDSA's s), or of the passkey's signature.
  const bad = join(work, `${kind}-tampered`);
  cpSync(runDir, bad, { recursive: true });
  const line = JSON.parse(readFileSync(join(bad, 'signatures.ndjson'), 'utf8').trim());
  const armor = line.signature.trim().split('\n');
  const body = Buffer.from(armor.slice(1, -1).join(''), 'base64');
  let inner;
  if (kind === 'ssh') {
    body[body.length - 1] ^= 1;
    inner = body;
  } else {
    const a = JSON.parse(body.toString('utf8'));
    const sig = Buffer.from(a.signature, 'base64url');
    sig[sig.length - 1] ^= 1;
    a.signature = sig.toString('base64url');
    inner = Buffer.from(JSON.stringify(a));
  }
  const b64 = inner.toString('base64');
  line.signature = [armor[0], ...(b64.match(/.{1,70}/g)), armor[armor.length - 1]].join('\n') + '\n';
  writeFileSync(join(bad, 'signatures.ndjson'), `${JSON.stringify(line)}\n`);
  const wantBad = verify(bad);
  assert.equal(wantBad.ok, false);
  assert.equal(wantBad.failure.place, 'signatures.ndjson:1', JSON.stringify(wantBad.failure));
  const gotBad = await openFolder(bad);
  sameAsCli(gotBad, wantBad, `${kind}: a signature byte changed`);
  assert.equal(await page.$eval('#failure-message', (e) => e.textContent), wantBad.failure.message);
  assert.deepEqual(await signatureItems(), [{ place: 'signatures.ndjson:1', status: 'failed' }]);
}

/** A .tar.gz of `dir` as `tar -czf` writes it (the run's folder inside). */
function tarGz(dir, file) {
  const r = spawnSync('tar', ['-C', dirname(dir), '-czf', file, basename(dir)]);
  assert.equal(r.status, 0, r.stderr?.toString());
  return file;
}

/** One ustar header block (for archives `tar` will not write: a name that climbs out). */
function ustar(name, size, type = '0') {
  const b = Buffer.alloc(512);
  b.write(name, 0, 100, 'utf8');
  b.write('0000644\0', 100);
  b.write('0000000\0', 108);
  b.write('0000000\0', 116);
  b.write(`${size.toString(8).padStart(11, '0')}\0`, 124);
  b.write('00000000000\0', 136);
  b.write('        ', 148);
  b.write(type, 156);
  b.write('ustar\0', 257);
  b.write('00', 263);
  let sum = 0;
  for (const x of b) sum += x;
  b.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  return b;
}

function handTar(entries, file) {
  const parts = [];
  for (const [name, body] of entries) {
    const data = Buffer.from(body);
    parts.push(ustar(name, data.length), data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  writeFileSync(file, gzipSync(Buffer.concat(parts)));
  return file;
}

let server;
let context;
let page;
let userData;
let origin;
const pageErrors = [];

async function startServer() {
  server = spawn(CLI, ['playground', '--dir', DIST, '--port', '0'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  server.stderr.on('data', (d) => {
    err += d;
  });
  return new Promise((ok, fail) => {
    let text = '';
    const timer = setTimeout(() => fail(new Error(`runbook-host playground printed no URL in 30 s; stderr: ${err}`)), 30_000);
    server.stdout.on('data', (d) => {
      text += d;
      const nl = text.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        ok(text.slice(0, nl).trim());
      }
    });
    server.on('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`runbook-host playground exited with ${code}: ${err}`));
    });
  });
}

async function opening(action) {
  const before = Number(await page.evaluate(() => document.body.dataset.opened ?? '0'));
  await action();
  await page.waitForFunction((g) => Number(document.body.dataset.opened ?? '0') > g, before, { timeout: 60_000 });
  return JSON.parse(await page.$eval('#verdict', (e) => e.dataset.verification));
}

const openFolder = (dir) => opening(() => page.setInputFiles('#bundle-dir', dir));
const openTar = (file) => opening(() => page.setInputFiles('#bundle-tar', file));

/** The signature items the verification panel lists: `{place, status}`. */
const signatureItems = () => page.$$eval('#unchecked [data-signature]', (els) => els.map((e) => ({ place: e.dataset.signature, status: e.dataset.status })));

/** The viewer's verification against the CLI's JSON: checks, failure, events, outcome, run id, share safety. */
function sameAsCli(got, want, what) {
  assert.deepEqual(got.checks, want.checks.map((c) => c.id), `${what}: checks`);
  assert.deepEqual(got.failure, want.failure, `${what}: failure`);
  assert.equal(got.events, want.events, `${what}: events`);
  assert.equal(got.outcome, want.outcome, `${what}: outcome`);
  assert.equal(got.run_id, want.run_id, `${what}: run id`);
  assert.deepEqual(got.share_safety, want.share_safety, `${what}: share safety`);
  assert.deepEqual(got.warnings, want.warnings, `${what}: warnings`);
}

before(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`no browser at ${CHROMIUM}: install Debian's Chromium with \`apt-get install -y chromium\` (or set CHROMIUM)`);
  if (!existsSync(CLI)) throw new Error(`no CLI at ${CLI}: build it (cargo build --release -p runbook-host) or set RUNBOOK_HOST`);
  if (!existsSync(join(DIST, 'viewer.html'))) throw new Error(`no viewer in ${DIST}: run playground/build`);
  work = mkdtempSync(join(tmpdir(), 'runbook-viewer-test-'));
  policy = await load();
  origin = await startServer();
  userData = mkdtempSync(join(tmpdir(), 'runbook-viewer-chromium-'));
  context = await chromium.launchPersistentContext(userData, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1400, height: 1000 } });
  page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(new URL('viewer.html', origin).href);
  await page.waitForFunction(() => document.body.dataset.ready === 'yes' || document.body.dataset.failed === 'yes', null, { timeout: 60_000 });
  assert.equal(await page.evaluate(() => document.body.dataset.ready), 'yes', await page.$eval('#load-status', (e) => e.textContent));
});

after(async () => {
  await context?.close();
  server?.kill();
  for (const c of children) if (c.exitCode === null) c.kill();
  for (const d of [userData, work]) if (d) rmSync(d, { recursive: true, force: true });
});

describe('the run viewer in Chromium', () => {
  test('the playground links to the viewer', async () => {
    const p = await context.newPage();
    try {
      await p.goto(new URL('index.html', origin).href);
      assert.equal(await p.getAttribute('a[href="viewer.html"]', 'href'), 'viewer.html');
    } finally {
      await p.close();
    }
  });

  test('every recorded stream of examples/*/, as a bundle folder: the verification of `runbook-host verify`, and every panel from its files', async () => {
    const runsRoot = join(work, 'examples');
    let opened = 0;
    for (const example of readdirSync(join(root, 'examples')).filter((n) => existsSync(join(root, 'examples', n, 'events.ndjson'))).sort()) {
      for (const events of readdirSync(join(root, 'examples', example)).filter((f) => /^events.*\.ndjson$/.test(f)).sort()) {
        const what = `${example}/${events}`;
        const dir = await exampleBundle(example, events, runsRoot);
        const want = verify(dir);
        const got = await openFolder(dir);
        sameAsCli(got, want, what);
        assert.equal(got.failure, null, `${what}: a bundle as written verifies`);
        // The timeline: one entry per record, each with the recorded decision and a sentence.
        const recs = lines(readFileSync(join(dir, 'events.ndjson'), 'utf8')).map((l) => JSON.parse(l));
        const shown = await page.$$eval('#timeline > li', (els) => els.map((e) => ({ decision: e.querySelector('[data-decision]')?.dataset.decision, sentence: e.querySelector('.sentence')?.textContent ?? '' })));
        assert.deepEqual(shown.map((s) => s.decision), recs.map((r) => r.decision.decision), `${what}: the timeline's decisions`);
        assert.ok(shown.every((s) => s.sentence.length > 10), `${what}: every decision has its sentence`);
        // The path taken: the step after each event, repeats folded.
        const path = [];
        for (const r of recs) if (r.decision.step && path[path.length - 1] !== r.decision.step) path.push(r.decision.step);
        assert.deepEqual(JSON.parse(await page.$eval('#path', (e) => e.dataset.path)), path, `${what}: path`);
        // The step graph, when the bundle has an envelope with steps.
        const env = existsSync(join(dir, 'envelope.json')) ? JSON.parse(readFileSync(join(dir, 'envelope.json'), 'utf8')) : null;
        assert.equal(await page.$$eval('#picture svg', (s) => s.length), env ? 1 : 0, `${what}: the picture`);
        // Deviations, approvals, checkpoints, budgets: a row each, from the report.
        const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8'));
        const rows = (id) => page.$$eval(`#${id} tbody tr`, (r) => r.length);
        assert.equal(await rows('deviations'), report.deviations.length, `${what}: deviations`);
        assert.equal(await rows('approvals'), report.approvals.length, `${what}: approvals`);
        assert.equal(await rows('checkpoints'), Object.keys(report.checkpoints).length, `${what}: checkpoints`);
        assert.equal(await rows('budgets'), Object.keys(report.budgets).length, `${what}: budgets`);
        assert.equal(await page.$eval('#share-code', (e) => e.textContent), want.share_safety.status, `${what}: share safety shown`);
        opened += 1;
      }
    }
    assert.ok(opened >= 9, `${opened} example streams`);
  });

  test('a bundle runbook-host writes (hook), and its redacted export as a .tar.gz: the CLI\'s verification', async () => {
    const dir = hookBundle('hooked');
    const want = verify(dir);
    assert.equal(want.ok, true, JSON.stringify(want));
    const got = await openFolder(dir);
    sameAsCli(got, want, 'hook bundle');
    assert.ok((await page.$$eval('#deviations tbody tr', (r) => r.length)) >= 1, 'the undeclared shell command is a deviation');
    // The redacted derivative `runbook-host export` writes, archived with tar -czf.
    const r = cli(['export', dir, '--out', join(work, 'redacted'), '--format', 'json']);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    const exported = join(work, 'redacted', basename(dir));
    const wantRedacted = verify(exported);
    assert.equal(wantRedacted.share_safety.status, 'share_ready');
    const gotTar = await openTar(tarGz(exported, join(work, 'exported.tar.gz')));
    sameAsCli(gotTar, wantRedacted, 'the exported .tar.gz');
    assert.equal(gotTar.redacted, true);
    // The raw bundle as an archive too (the approval channel's folders inside are counted, not read).
    sameAsCli(await openTar(tarGz(dir, join(work, 'raw.tar.gz'))), want, 'the raw .tar.gz');
  });

  test('a tampered decision: the CLI and the viewer fail at the same place with the same words', async () => {
    const src = await exampleBundle('rotate-credentials', 'events-deviations.ndjson', join(work, 'tamper-src'));
    const dir = join(work, 'tampered');
    cpSync(src, dir, { recursive: true });
    const file = join(dir, 'events.ndjson');
    const text = readFileSync(file, 'utf8');
    // One byte of one decision: the fourth record's `"decision":"allow"` or `"deny"` changes letter.
    const recs = text.split('\n');
    const n = 3;
    const changed = recs[n].replace(/"decision":"(allow|deny)"/, (_, k) => `"decision":"${k === 'allow' ? 'alloW' : 'denY'}"`);
    assert.notEqual(changed, recs[n]);
    recs[n] = changed;
    writeFileSync(file, recs.join('\n'));
    const want = verify(dir);
    assert.equal(want.ok, false);
    assert.match(want.failure.place, /^events\.ndjson:\d+$/);
    const got = await openFolder(dir);
    sameAsCli(got, want, 'tampered folder');
    assert.equal(await page.$eval('#failure-place', (e) => e.textContent), want.failure.place);
    assert.equal(await page.$eval('#failure-message', (e) => e.textContent), want.failure.message);
    assert.equal(await page.$eval('#verdict', (e) => e.dataset.ok), 'no');
    // The same tampered bundle as a .tar.gz.
    sameAsCli(await openTar(tarGz(dir, join(work, 'tampered.tar.gz'))), want, 'tampered archive');
    // A byte of an event (an argument) instead: the chain breaks where the CLI says.
    const dir2 = join(work, 'tampered-event');
    cpSync(src, dir2, { recursive: true });
    const t2 = readFileSync(join(dir2, 'events.ndjson'), 'utf8');
    writeFileSync(join(dir2, 'events.ndjson'), t2.replace('payments-db-credentials', 'payments-db-credentialz'));
    const want2 = verify(dir2);
    assert.equal(want2.ok, false);
    sameAsCli(await openFolder(dir2), want2, 'tampered event');
  });

  test('an archive: a name that climbs out is refused, a symbolic link is passed as one (as the CLI)', async () => {
    const evil = handTar([['r/run.json', '{}'], ['r/../../evil.txt', 'x']], join(work, 'evil.tar.gz'));
    const got = await openTar(evil);
    assert.ok(got.refused?.includes('..'), JSON.stringify(got));
    assert.match(await page.$eval('#open-error', (e) => e.textContent), /climbs out/);
    const abs = handTar([['/etc/run.json', '{}']], join(work, 'abs.tar.gz'));
    assert.ok((await openTar(abs)).refused?.includes('absolute'));
    // events.ndjson a symbolic link in the run's folder: the CLI refuses it without following; so does the page.
    const src = await exampleBundle('certificate-renewal', 'events.ndjson', join(work, 'link-src'));
    const dir = join(work, 'linked', basename(src));
    cpSync(src, dir, { recursive: true });
    cpSync(join(dir, 'events.ndjson'), join(work, 'outside.ndjson'));
    rmSync(join(dir, 'events.ndjson'));
    symlinkSync(join(work, 'outside.ndjson'), join(dir, 'events.ndjson'));
    const want = verify(dir);
    assert.equal(want.ok, false);
    assert.equal(want.failure.place, 'events.ndjson');
    sameAsCli(await openTar(tarGz(dir, join(work, 'linked.tar.gz'))), want, 'symbolic link in an archive');
  });

  test('a signed receipt: checked in the page as the CLI checks it; one byte of its envelope changed fails at the same place', async () => {
    const dir = hookBundle('signed', ['--signing-key', 'host.pem']);
    assert.ok(existsSync(join(dir, 'receipt.dsse.json')));
    const want = verify(dir);
    assert.equal(want.ok, true, JSON.stringify(want));
    assert.ok(want.checks.some((c) => c.id === 'receipt-signature'));
    const got = await openFolder(dir);
    sameAsCli(got, want, 'signed receipt');
    assert.equal(got.receipt_signed, true);
    assert.equal(got.receipt_key_id, JSON.parse(readFileSync(join(dir, 'run.json'), 'utf8')).receipt_signature.key_id);
    assert.equal(await page.$eval('#verdict', (e) => e.dataset.ok), 'yes');
    assert.doesNotMatch(await page.$eval('#verdict', (e) => e.textContent), /NOT VERIFIED/);
    assert.deepEqual(await signatureItems(), [{ place: 'receipt.dsse.json', status: 'verified' }]);
    // One byte of the envelope's signature.
    const bad = join(work, 'signed-tampered');
    cpSync(dir, bad, { recursive: true });
    const env = JSON.parse(readFileSync(join(bad, 'receipt.dsse.json'), 'utf8'));
    const sig = Buffer.from(env.signatures[0].sig, 'base64');
    sig[10] ^= 1;
    env.signatures[0].sig = sig.toString('base64');
    writeFileSync(join(bad, 'receipt.dsse.json'), `${JSON.stringify(env)}\n`);
    const wantBad = verify(bad);
    assert.equal(wantBad.ok, false);
    assert.equal(wantBad.failure.place, 'receipt.dsse.json');
    const gotBad = await openFolder(bad);
    sameAsCli(gotBad, wantBad, 'tampered receipt envelope');
    assert.equal(await page.$eval('#failure-message', (e) => e.textContent), wantBad.failure.message);
    // One byte of the envelope's payload (its text, base64 of the statement), and a second signature.
    const bad2 = join(work, 'signed-tampered-2');
    cpSync(dir, bad2, { recursive: true });
    const text = readFileSync(join(dir, 'receipt.dsse.json'), 'utf8');
    const at = text.indexOf('"payload":"') + 30;
    writeFileSync(join(bad2, 'receipt.dsse.json'), text.slice(0, at) + (text[at] === 'A' ? 'B' : 'A') + text.slice(at + 1));
    sameAsCli(await openFolder(bad2), verify(bad2), 'tampered receipt payload');
    const env2 = JSON.parse(text);
    env2.signatures.push({ keyid: 'sha256:other', sig: env2.signatures[0].sig });
    writeFileSync(join(bad2, 'receipt.dsse.json'), `${JSON.stringify(env2)}\n`);
    const want3 = verify(bad2);
    assert.equal(want3.ok, false);
    sameAsCli(await openFolder(bad2), want3, 'a second signature in the receipt envelope');
    assert.equal((await openFolder(bad2)).failure.message, want3.failure.message);
  });

  test('an SSH-signed approval (ecdsa, ssh-keygen -Y sign): the CLI\'s verdict; one signature byte changed fails at the same place', async () => {
    const dir = gatedProject('ssh');
    const key = join(dir, 'alice-key');
    const kg = spawnSync('ssh-keygen', ['-q', '-t', 'ecdsa', '-b', '256', '-N', '', '-C', 'alice', '-f', key]);
    assert.equal(kg.status, 0, kg.stderr?.toString());
    const pub = readFileSync(`${key}.pub`, 'utf8').trim().split(/\s+/).slice(0, 2).join(' ');
    const signers = join(dir, 'allowed_signers');
    writeFileSync(signers, `alice namespaces="runbook-approval@runbook-host" ${pub}\n`);
    const flags = ['--allowed-signers', signers, '--allow-software-keys'];
    const s = 'viewer-ssh';
    const { runDir, pending, request } = toTheGatedCall(dir, s, flags);
    // The answer a human's own tooling makes: the payload signed by `ssh-keygen -Y sign`, in the grant file.
    const message = `runbook-approval/v2\nrun ${basename(runDir)}\nrequest ${request}\nstep ${pending.step}\ncall_sha256 ${pending.call_sha256}\nanswer approve\n`;
    const signed = spawnSync('ssh-keygen', ['-Y', 'sign', '-n', 'runbook-approval@runbook-host', '-f', key], { input: message });
    assert.equal(signed.status, 0, signed.stderr?.toString());
    mkdirSync(join(runDir, 'approvals'), { recursive: true });
    const grant = { schema: 'runbook-approval-grant/v1', id: pending.id, step: pending.step, tool: pending.tool, call_sha256: pending.call_sha256, approver: 'alice', granted: true, at: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), signature: signed.stdout.toString() };
    writeFileSync(join(runDir, 'approvals', `${pending.id}.json`), `${JSON.stringify(grant, null, 2)}\n`);
    finishGated(dir, s, flags);
    assert.equal(readFileSync(join(runDir, 'signatures.ndjson'), 'utf8').trim().split('\n').length, 1);
    await signedApprovalChecks(runDir, 'ssh');
  });

  test('a passkey-signed approval (Chromium\'s virtual authenticator, approvals serve): the CLI\'s verdict; one signature byte changed fails at the same place', { timeout: 120_000 }, async () => {
    const dir = gatedProject('passkey');
    const signers = join(dir, 'allowed_signers');
    const flags = ['--allowed-signers', signers];
    const s = 'viewer-passkey';
    let runDir;
    // The approver's browser, apart from the viewer's, with the virtual authenticator.
    const approverBrowser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
    const approver = await approverBrowser.newContext();
    try {
      const { page: p } = await pageWithAuthenticator(approver);
      await register(p, 'alice', signers);
      const gated = toTheGatedCall(dir, s, flags);
      runDir = gated.runDir;
      const srv = await serve(['approvals', 'serve', '--runs', join(dir, '.runbook/runs'), '--allowed-signers', signers], dir);
      await p.goto(srv.url);
      const card = p.locator(`[data-request="${gated.pending.id}"]`);
      await card.getByRole('button', { name: 'Approve with passkey' }).click();
      await card.getByText(/approved by alice \(passkey SHA256:/).waitFor();
      srv.child.kill();
    } finally {
      await approverBrowser.close();
    }
    finishGated(dir, s, flags);
    await signedApprovalChecks(runDir, 'passkey');
  });

  test('runbook-host playground --runs DIR: the viewer lists the runs and opens one from that server only', async () => {
    const runs = join(work, 'served-runs');
    mkdirSync(runs, { recursive: true });
    const signedDir = hookBundle('served', ['--signing-key', 'host.pem']);
    cpSync(signedDir, join(runs, basename(signedDir)), { recursive: true });
    const older = await exampleBundle('rotate-credentials', 'events-deviations.ndjson', join(work, 'served-src'));
    cpSync(older, join(runs, basename(older)), { recursive: true });
    const past = new Date(Date.now() - 3600_000);
    utimesSync(join(runs, basename(older), 'run.json'), past, past);
    // Not listed: a symbolic link to a run, and a folder without a run.json.
    symlinkSync(join(runs, basename(older)), join(runs, 'r-linked'));
    mkdirSync(join(runs, 'not-a-run'));
    const { url } = await serve(['playground', '--dir', DIST, '--port', '0', '--runs', runs], root);
    const p = await context.newPage();
    const requests = [];
    p.on('request', (r) => requests.push(r.url()));
    try {
      await p.goto(new URL('viewer.html', url).href);
      await p.waitForFunction(() => document.body.dataset.ready === 'yes', null, { timeout: 60_000 });
      const listed = await p.$$eval('#server-runs-list [data-run]', (els) => els.map((e) => e.dataset.run));
      assert.deepEqual(listed, [basename(signedDir), basename(older)], 'newest first; no link, no folder without run.json');
      for (const [dir, id] of [[signedDir, basename(signedDir)], [older, basename(older)]]) {
        const before = Number(await p.evaluate(() => document.body.dataset.opened ?? '0'));
        await p.click(`#server-runs-list [data-run="${id}"]`);
        await p.waitForFunction((g) => Number(document.body.dataset.opened ?? '0') > g, before, { timeout: 60_000 });
        const got = JSON.parse(await p.$eval('#verdict', (e) => e.dataset.verification));
        sameAsCli(got, verify(dir), `served run ${id}`);
        assert.equal(got.failure, null);
      }
      const here = new URL(url).origin;
      assert.ok(requests.length > 5 && requests.every((r) => r.startsWith(`${here}/`)), requests.filter((r) => !r.startsWith(`${here}/`)).join(' '));
      assert.ok(requests.some((r) => r.endsWith(`/runs/${basename(signedDir)}/receipt.dsse.json`)));
      // Only through this server's names, and never a link or a climb out (raw HTTP: a browser normalises `..`).
      const port = new URL(url).port;
      const raw = (target, host = `127.0.0.1:${port}`) => new Promise((ok, fail) => {
        http.get({ host: '127.0.0.1', port, path: target, headers: { host } }, (res) => { res.resume(); ok(res.statusCode); }).on('error', fail);
      });
      assert.equal(await raw(`/runs/${basename(older)}/run.json`), 200);
      assert.equal(await raw('/runs/r-linked/run.json'), 404);
      assert.equal(await raw(`/runs/${basename(older)}/../../secret`), 404);
      assert.equal(await raw('/runs/index.json', `attacker.example:${port}`), 421);
    } finally {
      await p.close();
    }
    // The page served without --runs lists none.
    assert.equal(await page.$eval('#server-runs', (e) => e.hidden), true);
  });

  test('text from the bundle is text: markup in arguments is shown, never parsed', async () => {
    const dir = hookBundle('markup');
    await openFolder(dir);
    const shown = await page.$eval('#timeline', (e) => e.textContent);
    assert.ok(shown.includes('rm -rf /var/lib/postgres <b>now</b>'), 'the argument as written');
    assert.equal(await page.$$eval('#timeline b, #timeline img, #timeline script', (els) => els.length), 0);
  });

  test('keyboard: both inputs are labelled and reachable with Tab', async () => {
    for (const id of ['bundle-dir', 'bundle-tar']) {
      assert.ok(await page.$eval(`label[for="${id}"]`, (l) => l.textContent.trim().length > 0), id);
    }
    await page.goto(new URL('viewer.html', origin).href);
    await page.waitForFunction(() => document.body.dataset.ready === 'yes', null, { timeout: 60_000 });
    const reached = [];
    for (let i = 0; i < 8; i++) {
      await page.keyboard.press('Tab');
      reached.push(await page.evaluate(() => document.activeElement?.id || document.activeElement?.tagName));
    }
    assert.ok(reached.includes('bundle-dir') && reached.includes('bundle-tar'), reached.join(', '));
  });

  test('accessibility with a bundle loaded: axe-core finds no serious or critical violation; a screenshot', async (t) => {
    await page.setViewportSize({ width: 1400, height: 1000 });
    const dir = await exampleBundle('rotate-credentials', 'events-deviations.ndjson', join(work, 'axe'));
    await openFolder(dir);
    await page.evaluate(AXE);
    const violations = await page.evaluate(async () => (await globalThis.axe.run(document, { resultTypes: ['violations'] })).violations
      .map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5) })));
    for (const v of violations) t.diagnostic(`${v.impact} ${v.id}: ${v.help} (${v.nodes.join(', ')})`);
    assert.deepEqual(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical'), []);
    await page.evaluate(() => {
      document.activeElement?.blur();
      window.scrollTo(0, 0);
    });
    const shot = await page.screenshot({ path: join(SCREENSHOTS, 'screenshot-viewer.png'), animations: 'disabled' });
    assert.ok(shot.length > 20_000);
    assert.deepEqual(pageErrors, []);
  });
});
