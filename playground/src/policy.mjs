// The page's view of the policy component: the JavaScript package runbook-policy (packages/js), its
// browser entry, bundled into app.mjs by esbuild with jco's glue.
//
// The page fetches the component itself (policy.wasm, exactly the bytes `runbook-host module --out`
// writes) and the sha256 playground/build wrote beside it (module.sha256), and gives the bytes to the
// package's `load`, which hashes them with WebCrypto, refuses any bytes but the component it records, and
// compiles the core modules from byte ranges of those verified bytes. The page also holds the digest to
// module.sha256 (what `runbook-host playground` checked before serving), so the footer's claim is exact.

import { ComponentMismatch, InvalidDocument, InvalidInput, load } from '../../packages/js/src/browser.js';

const utf8 = new TextEncoder();

export async function sha256Hex(bytes) {
  if (!globalThis.crypto?.subtle) {
    throw new Error('WebCrypto is unavailable: open the page from https:// or http://127.0.0.1 (a secure context)');
  }
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function utf8Bytes(text) {
  return utf8.encode(text);
}

async function fetchOk(url, what) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`cannot load ${what} (${url}: HTTP ${r.status}); run playground/build`);
  return r;
}

export class ModuleMismatch extends Error {}

/**
 * Loads and verifies the component; returns `{sha256, expected, size, jco, policy}` with `policy` the
 * package's Policy. A component that is not the package's, or not module.sha256's, is a ModuleMismatch
 * whose `info` says what was found.
 */
export async function loadPolicy() {
  const [wasm, expectedText] = await Promise.all([
    fetchOk('policy.wasm', 'the component').then((r) => r.arrayBuffer()),
    fetchOk('module.sha256', 'the expected sha256').then((r) => r.text()),
  ]);
  const bytes = new Uint8Array(wasm);
  const expected = (expectedText.trim().split(/\s+/)[0] || '').toLowerCase();
  let policy;
  try {
    policy = await load({ bytes });
  } catch (e) {
    if (e instanceof ComponentMismatch) {
      const info = { sha256: e.actual, expected: e.expected, size: bytes.length };
      throw Object.assign(new ModuleMismatch(`policy.wasm has sha256 ${e.actual}, but the runbook-policy package runs only ${e.expected}: refusing to run it (run playground/build)`), { info });
    }
    throw e;
  }
  const info = { sha256: policy.sha256, expected, size: policy.size, jco: policy.jco };
  if (policy.sha256 !== expected) {
    throw Object.assign(new ModuleMismatch(`policy.wasm has sha256 ${policy.sha256}, but module.sha256 says ${expected || '(nothing)'}: refusing to run it (run playground/build)`), { info });
  }
  return { ...info, policy };
}

/**
 * The calls the page makes. Document calls run in the package's shared instance (replaced by the package
 * after a trap); every simulated run gets an instance of its own, as the Rust host gives each session its
 * own store.
 */
export class Policy {
  constructor(loaded) {
    this.policy = loaded.policy;
  }

  async version() {
    return this.policy.version();
  }

  /** `{sha256, findings, structure ('P0'..'P2' or null), ok}`. */
  async lint(text) {
    return this.policy.lint(utf8Bytes(text));
  }

  /** `{envelope}` or `{findings}`. */
  async envelope(text) {
    try {
      return { envelope: this.policy.envelope(utf8Bytes(text)) };
    } catch (e) {
      if (e instanceof InvalidDocument) return { findings: e.findings };
      throw e;
    }
  }

  /** The module's one sentence for a wire code of a kind (`refusal`, `reason`, `lint`, ...), or undefined. */
  async explain(kind, code) {
    return this.policy.explain(kind, code) ?? undefined;
  }

  /** `{sha256}` of a call whose arguments are JSON text, or `{error}`. */
  async callSha256(tool, argumentsJson) {
    let args;
    try {
      args = JSON.parse(argumentsJson);
    } catch (e) {
      return { error: `the arguments are not JSON: ${e.message}` };
    }
    try {
      return { sha256: this.policy.callSha256(tool, args) };
    } catch (e) {
      if (e instanceof InvalidInput) return { error: e.detail ?? e.message };
      throw e;
    }
  }

  /** The admission decision line for a `start` line (a short session in the shared instance). */
  async admit(text, startLine) {
    const s = this.policy.session(utf8Bytes(text), { instance: 'shared' });
    try {
      return s.handleLine(startLine);
    } finally {
      s.close();
    }
  }

  /**
   * The module's verification of a run bundle (`verify-bundle`), from its top-level entries: `[name,
   * bytes]` for a file, `[name, count]` for a folder. The package fails a bundle with signed answers or a
   * signed receipt closed: this page cannot check signature bytes.
   */
  async verifyBundle(entries) {
    return this.policy.verifyBundle(entries, this.policy.sha256);
  }

  /** A new run of `text` in an instance of its own. */
  async session(text) {
    return new Run(this.policy.session(utf8Bytes(text)));
  }
}

/** One supervised run: event lines in, canonical decision lines out. */
export class Run {
  constructor(session) {
    this.session = session;
  }

  handleLine(line) {
    return this.session.handleLine(line);
  }

  report() {
    return this.session.report();
  }

  status() {
    return JSON.parse(this.session.status());
  }

  isOver() {
    return this.session.isOver();
  }

  close() {
    try {
      this.session.close();
    } catch {
      // a trapped instance is dropped with the run
    }
  }
}
