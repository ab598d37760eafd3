#!/usr/bin/env node
// Conformance adapter: the runbook policy component as the JavaScript package `runbook-policy`
// (packages/js: jco's transpilation, run by Node) gives it to its users, through its public API.
//
// Speaks the protocol of conformance/PROTOCOL.md: one JSON request a line on standard input, one JSON
// response a line on standard output, in order; logs go to standard error. It exits when standard input
// closes.
//
// The component is the file RUNBOOK_POLICY_WASM names (the runner's: conformance/build/policy.wasm, what
// `runbook-host module --out` wrote), else the package's own policy.wasm. `load` refuses any bytes whose
// sha256 is not the one the package records (so a component the package was not built for fails here, at
// start, exit 1), and compiles the core modules from byte ranges of the very bytes it hashed.
//
// Environment:
//   RUNBOOK_POLICY_WASM     the component file (default: the package's policy.wasm)
//   RUNBOOK_POLICY_SHA256   the expected hex sha256; when set, the loaded component must have it too
//
// Requests run as the Rust host runs them: document calls in one shared instance (replaced by the package
// after a trap), a whole replay in a session of that instance, and the second half of a replay split by a
// snapshot in a session restored into an instance of its own, as another process would restore it (only
// the document and the snapshot carry over). Node has no fuel: a runaway call is bounded only by the
// runner's time-out.

const IMPLEMENTATION = 'node-jco';

function log(msg) {
  process.stderr.write(`${IMPLEMENTATION}: ${msg}\n`);
}

function failStart(msg) {
  log(msg);
  process.exit(1);
}

class AdapterError extends Error {}

// ---- start-up: load and verify the component -------------------------------------------------------------

const t0 = performance.now();
// The package's Node entry (what `import ... from 'runbook-policy'` resolves to in Node), by its path in
// this checkout: nothing to install here, only the package's own `npm ci` (which builds its dist/).
let pkg;
try {
  pkg = await import('../../../packages/js/src/node.js');
} catch (e) {
  failStart(`cannot load the runbook-policy package (packages/js): ${e.message} (run conformance/setup: \`npm ci\` in packages/js builds it)`);
}
const { InvalidDocument, ModuleTrap, Session, SnapshotRefused, load } = pkg;
const wasmPath = process.env.RUNBOOK_POLICY_WASM || undefined;
let policy;
try {
  policy = await load(wasmPath === undefined ? {} : { path: wasmPath });
} catch (e) {
  failStart(`refusing to start: ${e.message}${e.code === 'component-mismatch' ? ' (the package runbook-policy runs one component: update packages/js/policy.wasm and its recorded sha256)' : ''}`);
}
const expected = (process.env.RUNBOOK_POLICY_SHA256 || '').trim().toLowerCase();
if (expected && expected !== policy.sha256) {
  failStart(`refusing to start: ${wasmPath ?? 'the package\'s policy.wasm'} has sha256 ${policy.sha256}, expected ${expected}`);
}
log(`runbook-policy (jco ${policy.jco}), node ${process.version}, module ${policy.sha256}, loaded in ${(performance.now() - t0).toFixed(0)} ms`);

// ---- requests -------------------------------------------------------------------------------------------

function describe(e) {
  if (e instanceof Error) return `${e.constructor?.name ?? 'Error'}: ${e.message}`;
  return String(e);
}

/** A trap's message: the package's ModuleTrap says where the module trapped and how. */
function trapOf(e) {
  if (e instanceof ModuleTrap) return e.message;
  throw e;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function documentBytes(req) {
  const doc = req.document;
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new AdapterError('`document` must be an object with exactly one of `text` or `base64`');
  }
  const keys = Object.keys(doc);
  if (keys.length === 1 && keys[0] === 'text') {
    if (typeof doc.text !== 'string') throw new AdapterError('`document.text` must be a string');
    if (LONE_SURROGATE.test(doc.text)) {
      throw new AdapterError('`document.text` is not valid Unicode (a lone surrogate): send `base64`');
    }
    return new Uint8Array(Buffer.from(doc.text, 'utf8'));
  }
  if (keys.length === 1 && keys[0] === 'base64') {
    const b64 = doc.base64;
    if (typeof b64 !== 'string') throw new AdapterError('`document.base64` must be a string');
    const raw = Buffer.from(b64, 'base64');
    if (!BASE64.test(b64) || raw.toString('base64') !== b64) {
      throw new AdapterError('`document.base64` is not standard base64 with padding');
    }
    return new Uint8Array(raw);
  }
  throw new AdapterError('`document` must have exactly one of `text` or `base64`');
}

function eventLines(req) {
  const events = req.events;
  if (!Array.isArray(events) || !events.every((e) => typeof e === 'string')) {
    throw new AdapterError('`events` must be a list of strings');
  }
  events.forEach((e, i) => {
    if (LONE_SURROGATE.test(e)) throw new AdapterError(`\`events[${i}]\` is not valid Unicode (a lone surrogate)`);
  });
  return events;
}

async function opLint(req) {
  const document = documentBytes(req);
  let r;
  try {
    r = policy.lint(document);
  } catch (e) {
    return { trap: trapOf(e) };
  }
  return { sha256: r.sha256, structure: r.structure, findings: r.findings };
}

async function opEnvelope(req) {
  const document = documentBytes(req);
  try {
    return { envelope: policy.envelope(document), findings: [] };
  } catch (e) {
    if (e instanceof InvalidDocument) return { envelope: null, findings: e.findings };
    return { trap: trapOf(e) };
  }
}

function snapshotAfter(req, count) {
  if (!Object.hasOwn(req, 'snapshot_after')) return undefined;
  const k = req.snapshot_after;
  if (!Number.isSafeInteger(k) || k < 0 || k > count) {
    throw new AdapterError(`\`snapshot_after\` must be an integer from 0 to ${count} (the number of events), not ${JSON.stringify(k)}`);
  }
  return k;
}

const HEX64 = /^[0-9a-f]{64}$/;

function chainH0(req) {
  if (!Object.hasOwn(req, 'chain_h0')) return undefined;
  const h0 = req.chain_h0;
  if (typeof h0 !== 'string' || !HEX64.test(h0)) {
    throw new AdapterError(`\`chain_h0\` must be 64 lowercase hex digits, not ${JSON.stringify(h0)}`);
  }
  return h0;
}

// With `snapshot_after` k: the first k events go to a new session, which is snapshotted and closed; a
// session restored from the snapshot, in an instance of its own (as another process would have: only the
// document and the snapshot carry over), answers the rest and gives the report.
//
// With `chain_h0`: every event goes in by `feedLine` with the previous link (the first with chain_h0),
// kept here, across the restore too; one link per event is answered in `links` (none after a trap).
async function opReplay(req) {
  const document = documentBytes(req);
  const events = eventLines(req);
  const k = snapshotAfter(req, events.length);
  const h0 = chainH0(req);
  const split = k ?? events.length;
  const decisions = [];
  const extra = {};
  if (h0 !== undefined) extra.links = [];
  let prev = h0;
  const feed = (session, line) => {
    if (h0 === undefined) return session.handleLine(line);
    const r = session.feedLine(line, prev);
    prev = r.link;
    extra.links.push(r.link);
    return r.decisionLine;
  };
  let session;
  try {
    // The whole run, or its first part, in the shared instance: a session costs no instantiation there.
    session = policy.session(document, { instance: 'shared' });
    for (const line of events.slice(0, split)) decisions.push(feed(session, line));
    if (k !== undefined) {
      const snapshot = session.snapshot();
      extra.snapshot = snapshot;
      session.close();
      try {
        session = Session.restore(policy, document, snapshot);
      } catch (e) {
        // The module's own refusal, word for word (the runner compares it across implementations).
        if (e instanceof SnapshotRefused) return { decisions, report: null, ...extra, restore_error: e.detail };
        throw e;
      }
    }
    for (const line of events.slice(split)) decisions.push(feed(session, line));
    return { decisions, report: session.report(), ...extra };
  } catch (e) {
    return { decisions, trap: trapOf(e), ...extra };
  } finally {
    // A trapped session's instance is never entered again, not even to drop it (the package sees to it).
    try {
      session?.close();
    } catch (e) {
      log(`closing the session failed: ${describe(e)}`);
    }
  }
}

const OPS = {
  hello: async () => ({ implementation: IMPLEMENTATION, module_sha256: policy.sha256 }),
  lint: opLint,
  envelope: opEnvelope,
  replay: opReplay,
};

// ---- the request loop -----------------------------------------------------------------------------------

const utf8 = new TextDecoder('utf-8', { fatal: true });

async function serve(raw) {
  let id = null;
  let response;
  try {
    let req;
    try {
      req = JSON.parse(utf8.decode(raw));
    } catch (e) {
      throw new AdapterError(`the request is not a JSON line: ${e.message}`);
    }
    if (req === null || typeof req !== 'object' || Array.isArray(req)) {
      throw new AdapterError('the request is not a JSON object');
    }
    if (typeof req.id !== 'string') throw new AdapterError('the request has no string `id`');
    id = req.id;
    const op = typeof req.op === 'string' && Object.hasOwn(OPS, req.op) ? OPS[req.op] : undefined;
    if (!op) throw new AdapterError(`unknown op ${JSON.stringify(req.op)}`);
    response = { id, ok: true, result: await op(req) };
  } catch (e) {
    const error = e instanceof AdapterError ? e.message : `adapter failure: ${describe(e)}`;
    response = { id, ok: false, error };
  }
  process.stdout.write(`${JSON.stringify(response)}\n`);
}

let pending = Buffer.alloc(0);
for await (const chunk of process.stdin) {
  pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
  let nl;
  while ((nl = pending.indexOf(0x0a)) >= 0) {
    const line = pending.subarray(0, nl);
    pending = pending.subarray(nl + 1);
    if (line.toString('latin1').trim() !== '') await serve(line);
  }
}
if (pending.toString('latin1').trim() !== '') await serve(pending);
