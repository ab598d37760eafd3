// Passkeys in a real browser, shared by approvals.test.mjs and viewer.test.mjs: long-running CLI commands
// (`approvers add`, `approvals serve`) started and read, and Chromium's DevTools virtual authenticator.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

/**
 * The helpers for one suite: `cli` the runbook-host binary, `children` the list every started process is
 * pushed on (the suite kills what is left of it), `cwd()` the folder `approvers add` runs in.
 */
export function passkeyHelpers({ cli, children, cwd }) {
  /** Starts a long-running CLI command; resolves with the child and the first line it printed (its URL). */
  function serve(args, dir) {
    const child = spawn(cli, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let stderr = '';
    child.stderr.on('data', (d) => { stderr += d; });
    return new Promise((ok, fail) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        const nl = out.indexOf('\n');
        if (nl >= 0) ok({ child, url: out.slice(0, nl).trim(), output: () => out, stderr: () => stderr });
      });
      child.on('exit', (code) => fail(new Error(`${args.join(' ')} exited ${code}: ${stderr}`)));
    });
  }

  const exited = (child) => new Promise((ok) => (child.exitCode !== null ? ok(child.exitCode) : child.on('exit', ok)));

  /** A page whose browser holds a virtual platform authenticator (user verification as `verified`). */
  async function pageWithAuthenticator(context, verified = true) {
    const page = await context.newPage();
    const cdp = await context.newCDPSession(page);
    await cdp.send('WebAuthn.enable');
    const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
      options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: verified, automaticPresenceSimulation: true },
    });
    return { page, cdp, authenticatorId };
  }

  /** Registers a passkey for `name` through `approvers add`'s page; returns the allowed-signers line. */
  async function register(page, name, signers) {
    const add = await serve(['approvers', 'add', name, '--allowed-signers', signers, '--timeout', '60'], cwd());
    assert.match(add.url, /^http:\/\/localhost:\d+\/register$/);
    await page.goto(add.url);
    await page.getByRole('button', { name: 'Register a passkey' }).click();
    assert.equal(await exited(add.child), 0, add.stderr());
    await page.getByText('Registered:').waitFor();
    return add.output().trim().split('\n').pop();
  }

  return { serve, exited, pageWithAuthenticator, register };
}
