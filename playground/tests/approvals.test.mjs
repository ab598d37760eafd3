// Passkey approvals in a real browser: Debian's Chromium with the DevTools virtual authenticator, driven by
// playwright-core. `runbook-host approvers add` registers a passkey from its page; a gated call of a
// command-hook session waits; `runbook-host approvals serve` shows it; the passkey approves; the call runs;
// `verify` names the passkey. Then the attacks: an authenticator without user verification, a client that
// does not ask for it, a replayed assertion, an assertion for another request, a page without the
// authenticator, an unsigned answer, another origin. Last, the same approval in a real Claude Code session
// (the bundled CLI of host/tests/claude, a scripted model on loopback).
//
//   node --test playground/tests/approvals.test.mjs
//
// Environment: RUNBOOK_HOST, CHROMIUM as in browser.test.mjs; PLAYGROUND_SCREENSHOTS, the folder for
// screenshot-approvals.png (default: the system temp folder).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { passkeyHelpers } from './passkey-helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const CLI = process.env.RUNBOOK_HOST || join(process.env.CARGO_TARGET_DIR || join(root, 'target'), 'release', 'runbook-host');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SCREENSHOTS = process.env.PLAYGROUND_SCREENSHOTS || tmpdir();
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const RUNBOOK = join(root, 'host/tests/claude/gated-hello.yaml');
const CLAUDE = join(root, 'host/tests/claude/.venv/bin/claude');

let browser;
let work;
const children = [];

const { serve, exited, pageWithAuthenticator, register } = passkeyHelpers({ cli: CLI, children, cwd: () => work });

/** One command-hook event of session `s` (Claude Code's payloads), in `cwd`. */
function hook(cwd, payload, signers) {
  const r = spawnSync(CLI, ['hook', '--runbook', 'runbook.yaml', '--allowed-signers', signers], { cwd, input: JSON.stringify(payload) });
  return { status: r.status, stdout: r.stdout.toString(), stderr: r.stderr.toString(), json: r.stdout.length ? JSON.parse(r.stdout) : null };
}
const base = (s, event) => ({ session_id: s, transcript_path: '~/.claude/projects/t/s.jsonl', cwd: '.', permission_mode: 'default', hook_event_name: event });
const start = (s) => ({ ...base(s, 'SessionStart'), source: 'startup' });
const pre = (s, id) => ({ ...base(s, 'PreToolUse'), tool_name: 'Bash', tool_input: { command: 'echo hello' }, tool_use_id: id });
const post = (s, id) => ({ ...pre(s, id), hook_event_name: 'PostToolUse', tool_response: { stdout: 'hello\n', stderr: '', interrupted: false, isImage: false } });
const denied = (r) => r.json?.hookSpecificOutput?.permissionDecision === 'deny' ? r.json.hookSpecificOutput.permissionDecisionReason : null;

function project(name) {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  copyFileSync(RUNBOOK, join(dir, 'runbook.yaml'));
  return dir;
}

function runDirOf(dir, s) {
  const r = JSON.parse(readFileSync(join(dir, '.runbook/runs/.hook', `${s}.json`), 'utf8'));
  return join(dir, '.runbook/runs', r.run_id);
}

const files = (d) => (existsSync(d) ? readdirSync(d) : []);

/** axe-core's serious and critical violations on the page as it stands. */
const seriousViolations = (page) => page.evaluate(async (src) => {
  // eslint-disable-next-line no-eval
  (0, eval)(src);
  const r = await globalThis.axe.run(document, { resultTypes: ['violations'] });
  return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.help}`);
}, AXE);

before(async () => {
  work = mkdtempSync(join(tmpdir(), 'runbook-approvals-'));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
});

after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill();
  await browser?.close();
  rmSync(work, { recursive: true, force: true });
});

describe('passkey approvals from the approval page', () => {
  let context;
  let auth;
  let signers;
  let dir;
  let page;
  before(async () => {
    context = await browser.newContext();
    auth = await pageWithAuthenticator(context);
    page = auth.page;
    dir = project('hook');
    signers = join(dir, 'allowed_signers');
  });
  after(async () => context?.close());

  test('approvers add writes the passkey into the allowed signers file, beside SSH keys', async () => {
    writeFileSync(signers, '# approvers\n');
    const line = await register(page, 'alice', signers);
    assert.match(line, /^alice namespaces="runbook-approval@runbook-host" sk-ecdsa-sha2-nistp256@openssh\.com AAAA\S+ passkey:[A-Za-z0-9_-]+$/);
    assert.equal(readFileSync(signers, 'utf8'), `# approvers\n${line}\n`);
    // The registration page, as it stands after registering.
    assert.deepEqual(await seriousViolations(page), []);
  });

  test('a gated call waits; the page shows it; the passkey approves; the call runs; verify names the passkey', async () => {
    const s = 'sess-page-1';
    assert.equal(hook(dir, start(s), signers).status, 0);
    const reason = denied(hook(dir, pre(s, 't1'), signers));
    assert.match(reason ?? '', /needs-approval/);
    const runDir = runDirOf(dir, s);
    const [pendingFile] = files(join(runDir, 'pending'));
    const request = JSON.parse(readFileSync(join(runDir, 'pending', pendingFile), 'utf8'));

    const srv = await serve(['approvals', 'serve', '--runs', join(dir, '.runbook/runs'), '--allowed-signers', signers], dir);
    assert.match(srv.url, /^http:\/\/localhost:\d+\/approvals$/);
    await page.goto(srv.url);
    const card = page.locator(`[data-request="${request.id}"]`);
    await card.waitFor();
    const text = await card.innerText();
    assert.ok(text.includes(request.call_sha256), text);
    assert.ok(text.includes('"command": "echo hello"'), text);
    assert.match(text, /untrusted/);
    assert.ok(text.includes('Print hello with `echo hello`, once a human approved it.'), text);
    const run = await page.locator(`[data-run]`).innerText();
    assert.match(run, /Current step\s+greet/);

    assert.deepEqual(await seriousViolations(page), []);
    await page.screenshot({ path: join(SCREENSHOTS, 'screenshot-approvals.png'), fullPage: true });

    const posted = page.waitForRequest((r) => r.url().endsWith('/approvals/api/answer'));
    await card.getByRole('button', { name: 'Approve with passkey' }).click();
    const body = (await posted).postData();
    await card.getByText(/approved by alice \(passkey SHA256:/).waitFor();
    const grant = JSON.parse(readFileSync(join(runDir, 'approvals', `${request.id}.json`), 'utf8'));
    assert.equal(grant.approver, 'alice');
    assert.equal(grant.granted, true);
    assert.ok(grant.signature.startsWith('-----BEGIN RUNBOOK PASSKEY ASSERTION-----'), grant.signature);

    // The same assertion posted again: the request is answered once.
    const replay = await page.evaluate(async (b) => {
      const r = await fetch('/approvals/api/answer', { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });
      return { status: r.status, body: await r.json() };
    }, body);
    assert.equal(replay.status, 409, JSON.stringify(replay));

    // The retried call runs; its result completes the run.
    assert.equal(denied(hook(dir, pre(s, 't2'), signers)), null);
    assert.equal(hook(dir, post(s, 't2'), signers).status, 0);
    assert.equal(hook(dir, base(s, 'SessionEnd'), signers).status, 0);
    const v = spawnSync(CLI, ['verify', runDir, '--format', 'json', '--allowed-signers', signers]);
    const verdict = JSON.parse(v.stdout.toString());
    assert.equal(v.status, 0, v.stdout.toString() + v.stderr.toString());
    const sigs = readFileSync(join(runDir, 'signatures.ndjson'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(sigs.length, 1);
    assert.equal(sigs[0].principal, 'alice');
    assert.match(sigs[0].fingerprint, /^SHA256:/);
    assert.ok(verdict.checks.some((c) => c.id === 'signatures' && c.ok), JSON.stringify(verdict));
    assert.deepEqual(verdict.approvals_signed_by, [{ place: 'signatures.ndjson:1', principal: 'alice', kind: 'passkey', fingerprint: sigs[0].fingerprint, allowed_signers_given: true }]);
    const text2 = spawnSync(CLI, ['verify', runDir, '--allowed-signers', signers]).stdout.toString();
    assert.ok(text2.includes(`signed by alice with passkey ${sigs[0].fingerprint}`), text2);
    srv.child.kill();
  });

  test('what the page refuses: no user verification, another request, a replay, no authenticator, no signature, another origin', async () => {
    // Two runs, each with a gated call waiting.
    const [a, b] = ['sess-attack-a', 'sess-attack-b'];
    for (const s of [a, b]) {
      assert.equal(hook(dir, start(s), signers).status, 0);
      assert.match(denied(hook(dir, pre(s, 't1'), signers)) ?? '', /needs-approval/);
    }
    const srv = await serve(['approvals', 'serve', '--runs', join(dir, '.runbook/runs'), '--allowed-signers', signers], dir);
    await page.goto(srv.url);
    const pending = await page.evaluate(async () => (await fetch('/approvals/api/pending')).json());
    const reqs = pending.runs.flatMap((r) => r.requests);
    const [ra, rb] = [a, b].map((s) => reqs.find((q) => q.run_id === runDirOf(dir, s).split('/').pop()));
    assert.ok(ra && rb, JSON.stringify(pending));

    /** A client of the attacker's making: any challenge, any user-verification setting, posted as any request. */
    const forge = (signPayload, answerAs, uv) => page.evaluate(async ({ signPayload, answerAs, uv, ids }) => {
      const b64u = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
      const dec = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
      const cred = await navigator.credentials.get({ publicKey: { rpId: 'localhost', challenge: new TextEncoder().encode(signPayload), allowCredentials: ids.map((id) => ({ type: 'public-key', id: dec(id) })), userVerification: uv, timeout: 10000 } });
      const body = { run_id: answerAs.run_id, id: answerAs.id, granted: true, credential_id: b64u(cred.rawId), authenticator_data: b64u(cred.response.authenticatorData), client_data_json: b64u(cred.response.clientDataJSON), signature: b64u(cred.response.signature) };
      const r = await fetch('/approvals/api/answer', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    }, { signPayload, answerAs, uv, ids: pending.passkeys });

    // An assertion over request A's payload, posted as the answer to request B.
    let r = await forge(ra.payload.approve, rb, 'required');
    assert.equal(r.status, 403, JSON.stringify(r));
    assert.match(r.body.error, /does not match/);
    // An assertion over the deny payload, posted as an approval.
    r = await forge(ra.payload.deny, ra, 'required');
    assert.equal(r.status, 403, JSON.stringify(r));

    // The authenticator stops verifying the user: the honest page gets no assertion at all, and a client
    // that does not ask for verification gets one the host refuses.
    await auth.cdp.send('WebAuthn.setUserVerified', { authenticatorId: auth.authenticatorId, isUserVerified: false });
    r = await forge(ra.payload.approve, ra, 'discouraged');
    assert.equal(r.status, 403, JSON.stringify(r));
    assert.match(r.body.error, /without verifying the user/);
    const card = page.locator(`[data-request="${ra.id}"]`);
    await card.getByRole('button', { name: 'Approve with passkey' }).click();
    await card.getByText(/Not answered|Refused/).waitFor();
    await auth.cdp.send('WebAuthn.setUserVerified', { authenticatorId: auth.authenticatorId, isUserVerified: true });

    // A page opened by a script, in a browser without the person's authenticator.
    const bare = await browser.newContext();
    const lone = await bare.newPage();
    await lone.goto(srv.url);
    const loneCard = lone.locator(`[data-request="${rb.id}"]`);
    await loneCard.getByRole('button', { name: 'Approve with passkey' }).click();
    // No authenticator answers: the page waits for one (the person's), and nothing is posted.
    await loneCard.getByText('Waiting for your passkey').waitFor();
    await lone.waitForTimeout(3000);
    assert.equal(await loneCard.locator('.status').innerText(), 'Waiting for your passkey…');
    assert.deepEqual(files(join(runDirOf(dir, b), 'approvals')), []);
    // An answer without an assertion, and one from another origin.
    const unsigned = await lone.evaluate(async (q) => {
      const r = await fetch('/approvals/api/answer', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ run_id: q.run_id, id: q.id, granted: true }) });
      return r.status;
    }, rb);
    assert.equal(unsigned, 400);
    const port = new URL(srv.url).port;
    const foreign = await fetch(`http://127.0.0.1:${port}/approvals/api/answer`, { method: 'POST', headers: { 'content-type': 'application/json', origin: 'http://evil.localhost:1' }, body: '{}' });
    assert.equal(foreign.status, 403);
    // A DNS-rebound name (fetch cannot set Host, node:http can).
    const rebound = await new Promise((ok, fail) => {
      http.get({ host: '127.0.0.1', port, path: '/approvals/api/pending', headers: { host: `attacker.example:${port}` } }, (res) => { res.resume(); ok(res.statusCode); }).on('error', fail);
    });
    assert.equal(rebound, 421);
    await bare.close();

    // Nothing was answered, and both calls are still refused.
    for (const s of [a, b]) {
      assert.deepEqual(files(join(runDirOf(dir, s), 'approvals')), []);
      assert.match(denied(hook(dir, pre(s, 't2'), signers)) ?? '', /needs-approval/);
    }
    // The request answered once, for real, by the passkey with user verification.
    r = await forge(ra.payload.approve, ra, 'required');
    assert.equal(r.status, 200, JSON.stringify(r));
    r = await forge(ra.payload.approve, ra, 'required');
    assert.equal(r.status, 409, JSON.stringify(r));
    srv.child.kill();
  });
});

describe('a gated call in a Claude Code session, approved from the page with a passkey', () => {
  test('the call waits for the page, the passkey approves it, it runs, and verify names the passkey', { timeout: 180000 }, async () => {
    assert.ok(existsSync(CLAUDE), `the Claude Code CLI is not installed (${CLAUDE}): run \`bash host/tests/claude/setup\``);
    const context = await browser.newContext();
    try {
      const { page } = await pageWithAuthenticator(context);
      const dir = project('claude');
      const scratch = join(work, 'claude-scratch');
      mkdirSync(join(scratch, 'home'), { recursive: true });
      const signers = join(scratch, 'allowed_signers');
      await register(page, 'carol', signers);
      const install = spawnSync(CLI, ['hook', '--runbook', 'runbook.yaml', '--allowed-signers', signers, 'install', '--mode', 'command'], { cwd: dir });
      assert.equal(install.status, 0, install.stderr.toString());

      // The model asks for `echo hello`, is told it needs a human's approval, and asks again once the
      // test's hand saw the approval land (the scripted API holds its answer until `approved` exists).
      const approved = join(scratch, 'approved');
      const wait = `for i in $(seq 1200); do [ -e '${approved}' ] && exit 0; sleep 0.1; done; exit 1`;
      const script = [
        { tool_use: [{ name: 'Bash', input: { command: 'echo hello' } }] },
        { before: ['sh', '-c', wait], tool_use: [{ name: 'Bash', input: { command: 'echo hello' } }] },
        { text: 'Said hello, once approved.' },
      ];
      writeFileSync(join(scratch, 'script.json'), JSON.stringify(script));
      const api = spawn('python3', [join(root, 'host/tests/claude/messages_api.py'), join(scratch, 'script.json'), join(scratch, 'requests.ndjson')], { stdio: ['ignore', 'pipe', 'inherit'] });
      children.push(api);
      const port = await new Promise((ok) => api.stdout.once('data', (d) => ok(String(d).trim())));
      const claude = spawn(CLAUDE, ['-p', 'Say hello through the shell.', '--output-format', 'json', '--max-turns', '10', '--tools', 'Bash', '--allowedTools', 'Bash', '--permission-prompts', 'none', '--strict-mcp-config'], {
        cwd: dir,
        env: {
          PATH: process.env.PATH, HOME: join(scratch, 'home'), ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}`, ANTHROPIC_API_KEY: 'sk-ant-scripted-test',
          DISABLE_TELEMETRY: '1', DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(claude);
      let out = '';
      let err = '';
      claude.stdout.on('data', (d) => { out += d; });
      claude.stderr.on('data', (d) => { err += d; });
      const done = exited(claude);

      // The approver's side: the page shows the session's gated call; the passkey approves it.
      const srv = await serve(['approvals', 'serve', '--runs', join(dir, '.runbook/runs'), '--allowed-signers', signers], dir);
      await page.goto(srv.url);
      const card = page.locator('[data-request]');
      await card.waitFor({ timeout: 60000 });
      assert.match(await card.innerText(), /"command": "echo hello"/);
      await card.getByRole('button', { name: 'Approve with passkey' }).click();
      await card.getByText(/approved by carol \(passkey SHA256:/).waitFor();
      writeFileSync(approved, '');

      assert.equal(await done, 0, `${out}\n${err}`);
      const result = JSON.parse(out.trim());
      assert.equal(result.subtype, 'success', out);
      const results = readFileSync(join(scratch, 'requests.ndjson'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).flatMap((r) => r.tool_results ?? []);
      assert.equal(results.length, 2, JSON.stringify(results));
      assert.equal(results[0].is_error, true);
      assert.match(JSON.stringify(results[0].content), /needs-approval/);
      assert.notEqual(results[1].is_error, true, JSON.stringify(results[1]));
      assert.match(JSON.stringify(results[1].content), /hello/);

      const latest = JSON.parse(readFileSync(join(dir, '.runbook/runs/latest.json'), 'utf8'));
      const runDir = join(dir, '.runbook/runs', latest.path);
      const v = spawnSync(CLI, ['verify', runDir, '--format', 'json', '--allowed-signers', signers]);
      assert.equal(v.status, 0, v.stdout.toString() + v.stderr.toString());
      const verdict = JSON.parse(v.stdout.toString());
      assert.equal(verdict.outcome, 'completed');
      assert.equal(verdict.approvals_signed_by.length, 1);
      assert.equal(verdict.approvals_signed_by[0].principal, 'carol');
      assert.equal(verdict.approvals_signed_by[0].kind, 'passkey');
      srv.child.kill();
    } finally {
      await context.close();
    }
  });
});

/** Reads stderr of a started command until `pattern` matches; resolves with the match. */
function stderrMatch(child, pattern, what) {
  return new Promise((ok, fail) => {
    let err = '';
    const timer = setTimeout(() => fail(new Error(`${what}: no match for ${pattern} in 60 s:\n${err}`)), 60000);
    child.stderr.on('data', (d) => {
      err += d;
      const m = err.match(pattern);
      if (m) { clearTimeout(timer); ok(m); }
    });
    child.on('exit', (code) => fail(new Error(`${what} exited ${code}:\n${err}`)));
  });
}

/** One JSON-RPC message to a Streamable HTTP endpoint; the answer's JSON (from JSON or an SSE stream). */
async function rpc(url, session, message) {
  const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' };
  if (session) headers['mcp-session-id'] = session;
  const r = await fetch(url, { method: 'POST', headers, body: JSON.stringify(message) });
  const text = await r.text();
  const data = r.headers.get('content-type')?.includes('text/event-stream')
    ? text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).filter((l) => l).map((l) => JSON.parse(l)).find((m) => m.id === message.id)
    : (text ? JSON.parse(text) : null);
  return { status: r.status, session: r.headers.get('mcp-session-id'), data };
}

describe('the same page on the resident hook server and the HTTP proxy', () => {
  test('the hook server serves the approval page where approvals are signed', async () => {
    const context = await browser.newContext();
    try {
      const { page } = await pageWithAuthenticator(context);
      const dir = project('hook-server');
      const signers = join(dir, 'allowed_signers');
      await register(page, 'dave', signers);
      const server = spawn(CLI, ['hook', 'serve', '--port', '0', '--runbook', 'runbook.yaml', '--allowed-signers', signers], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
      children.push(server);
      const [, url] = await stderrMatch(server, /the approval page: (http:\/\/localhost:\d+\/approvals)/, 'hook serve');
      // A gated call of a command-hook session in the same runs folder is waiting.
      const s = 'sess-server-1';
      assert.equal(hook(dir, start(s), signers).status, 0);
      assert.match(denied(hook(dir, pre(s, 't1'), signers)) ?? '', /needs-approval/);
      await page.goto(url);
      const card = page.locator('[data-request]');
      await card.getByRole('button', { name: 'Approve with passkey' }).click();
      await card.getByText(/approved by dave \(passkey SHA256:/).waitFor();
      assert.equal(denied(hook(dir, pre(s, 't2'), signers)), null);
      server.kill();
    } finally {
      await context.close();
    }
  });

  test('the HTTP proxy serves it beside /mcp: a gated tools/call waits, the passkey approves, the call runs', { timeout: 120000 }, async () => {
    const everything = join(root, 'host/tests/mcp/node_modules/.bin/mcp-server-everything');
    assert.ok(existsSync(everything), `no ${everything}: run \`bash host/tests/mcp/setup\``);
    const context = await browser.newContext();
    try {
      const { page } = await pageWithAuthenticator(context);
      const dir = project('proxy');
      const signers = join(dir, 'allowed_signers');
      await register(page, 'erin', signers);
      writeFileSync(join(dir, 'echo-gated.yaml'), [
        'runbook_id: echo-gated', 'version: 1.0.0', 'title: Echo once a human approved it', 'execution: human-with-agent',
        'capabilities:', '  - {name: echo, tool: echo, risk: read-only}',
        'steps:', '  - id: say', '    tool: echo', '    requires_approval: true', '    body: Echo the message, once approved.',
        '    assert:', '      - {path: /is_error, op: equals, value: false}', '    next: said',
        'terminals: [said]', '',
      ].join('\n'));
      const proxy = spawn(CLI, ['run', 'echo-gated.yaml', '--listen', '127.0.0.1:0', '--allowed-signers', signers, '--approval-timeout', '60s', '--', everything], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
      children.push(proxy);
      const [, pageUrl] = await stderrMatch(proxy, /the approval page: (http:\/\/localhost:\d+\/approvals)/, 'run --listen');
      const mcp = pageUrl.replace('/approvals', '/mcp');
      const init = await rpc(mcp, null, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'approvals-test', version: '1' } } });
      assert.equal(init.status, 200, JSON.stringify(init));
      await rpc(mcp, init.session, { jsonrpc: '2.0', method: 'notifications/initialized' });
      // The gated call is held by the proxy while the person decides.
      const call = rpc(mcp, init.session, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { message: 'approved by a passkey' } } });
      await page.goto(pageUrl);
      const card = page.locator('[data-request]');
      await card.waitFor({ timeout: 30000 });
      assert.match(await card.innerText(), /"message": "approved by a passkey"/);
      await card.getByRole('button', { name: 'Approve with passkey' }).click();
      await card.getByText(/approved by erin \(passkey SHA256:/).waitFor();
      const answer = await call;
      assert.equal(answer.data?.result?.isError ?? false, false, JSON.stringify(answer));
      assert.match(JSON.stringify(answer.data.result.content), /approved by a passkey/);
      proxy.kill();
    } finally {
      await context.close();
    }
  });
});
