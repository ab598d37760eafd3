// Loads the policy component in the browser.
//
// The page fetches the component itself (policy.wasm, exactly the bytes `runbook-host module --out` writes),
// hashes those bytes with WebCrypto and compares the digest with module.sha256 (written by playground/build
// from the same bytes). Only then does it compile the core modules, each a byte range of the verified
// component (cores.json says where; playground/build checked that jco's core modules are exactly those
// ranges), and hands them to jco's `instantiate` through its getCoreModule callback. The JavaScript glue is
// jco's transpilation of the same component (jco/policy.js).

const INTERFACE = 'runbook:policy/policy@1.1.0';
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

/** Whether an exception is the `err` case of a `result` export (jco's ComponentError), not a trap. */
export function isResultErr(e) {
  return e instanceof Error && e.constructor?.name === 'ComponentError' && Object.hasOwn(e, 'payload');
}

export class ModuleMismatch extends Error {}

/**
 * Loads and verifies the component; returns `{sha256, expected, size, jco, instantiate}` where
 * `instantiate()` makes a fresh instance and resolves to the `policy` interface.
 */
export async function loadPolicy() {
  // Everything starts at once: the glue, the bytes, the expected digest, the core module index.
  const glue = import('./jco/policy.js');
  const [wasm, expectedText, index] = await Promise.all([
    fetchOk('policy.wasm', 'the component').then((r) => r.arrayBuffer()),
    fetchOk('module.sha256', 'the expected sha256').then((r) => r.text()),
    fetchOk('cores.json', 'the core module index').then((r) => r.json()),
  ]);
  const bytes = new Uint8Array(wasm);
  const sha256 = await sha256Hex(bytes);
  const expected = (expectedText.trim().split(/\s+/)[0] || '').toLowerCase();
  const info = { sha256, expected, size: bytes.length, jco: index.jco };
  if (sha256 !== expected) {
    throw Object.assign(new ModuleMismatch(`policy.wasm has sha256 ${sha256}, but module.sha256 says ${expected || '(nothing)'}: refusing to run it (run playground/build)`), { info });
  }
  const compiled = new Map();
  for (const [name, c] of Object.entries(index.cores)) {
    if (!(Number.isSafeInteger(c.offset) && Number.isSafeInteger(c.length) && c.offset >= 0 && c.offset + c.length <= bytes.length)) {
      throw new Error(`cores.json names a range outside the component for ${name}`);
    }
    compiled.set(name, WebAssembly.compile(bytes.slice(c.offset, c.offset + c.length)));
  }
  const transpiled = await glue;
  const getCoreModule = (name) => {
    const m = compiled.get(name);
    if (!m) throw new Error(`the glue asks for core module ${name}, which cores.json does not name`);
    return m;
  };
  async function instantiate() {
    const root = await transpiled.instantiate(getCoreModule, {});
    const api = root[INTERFACE] ?? root.policy;
    if (!api) throw new Error(`the component does not export ${INTERFACE}`);
    return api;
  }
  // The first instance proves the component loads at all.
  const first = await instantiate();
  return { ...info, first, instantiate };
}

/**
 * The calls the page makes, over one instance for document calls (replaced after a trap) and a fresh
 * instance for every run, as the Rust host gives each session its own store.
 */
export class Policy {
  constructor(loaded) {
    this.loaded = loaded;
    this.api = loaded.first;
  }

  async docApi() {
    if (!this.api) this.api = await this.loaded.instantiate();
    return this.api;
  }

  /** Runs `f(api)`; a throw that is not a result's `err` poisons the instance. */
  async call(f) {
    const api = await this.docApi();
    try {
      return f(api);
    } catch (e) {
      if (!isResultErr(e)) this.api = undefined;
      throw e;
    }
  }

  async version() {
    return this.call((api) => api.version());
  }

  async lint(text) {
    return this.call((api) => api.lint(utf8Bytes(text)));
  }

  /** `{envelope}` or `{findings}`. */
  async envelope(text) {
    try {
      return { envelope: await this.call((api) => api.envelope(utf8Bytes(text))) };
    } catch (e) {
      if (isResultErr(e)) return { findings: e.payload };
      throw e;
    }
  }

  /** The module's one sentence for a wire code of a kind (`refusal`, `reason`, `lint`, ...), or undefined. */
  async explain(kind, code) {
    return this.call((api) => api.explain(kind, code));
  }

  async callSha256(tool, argumentsJson) {
    try {
      return { sha256: await this.call((api) => api.callSha256(tool, argumentsJson)) };
    } catch (e) {
      if (isResultErr(e)) return { error: String(e.payload) };
      throw e;
    }
  }

  /** A new run of `text` in an instance of its own. */
  async session(text) {
    const api = await this.loaded.instantiate();
    return new Run(api, text);
  }
}

const dispose = Symbol.dispose ?? Symbol.for('dispose');

/** One supervised run: event lines in, canonical decision lines out. */
export class Run {
  constructor(api, text) {
    this.session = new api.Session(utf8Bytes(text));
    this.trapped = null;
  }

  handleLine(line) {
    if (this.trapped) throw new Error(`the module trapped earlier: ${this.trapped}`);
    try {
      return this.session.handleLine(line);
    } catch (e) {
      this.trapped = e?.message ?? String(e);
      throw e;
    }
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
      this.session[dispose]?.();
    } catch {
      // a trapped instance is dropped with the run
    }
  }
}
