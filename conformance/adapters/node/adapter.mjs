#!/usr/bin/env node
// Conformance adapter: the runbook policy component transpiled by jco, run by Node.
//
// Speaks the protocol of conformance/PROTOCOL.md: one JSON request a line on standard input, one JSON
// response a line on standard output, in order; logs go to standard error. It exits when standard input
// closes.
//
// The component is the file that `runbook-host module --out` wrote. Before anything else the adapter checks
// its sha256 against the expected value and refuses to start (exit 1) when they differ. The JavaScript is
// what `jco transpile --instantiation async` made of that component (conformance/setup puts it in build/
// beside this file, with a stamp naming the component's sha256); every core module it loads must occur
// byte for byte inside the verified component, so the code that runs is the code that was checked.
//
// Environment:
//   RUNBOOK_POLICY_WASM     the component (default: conformance/build/policy.wasm in this checkout)
//   RUNBOOK_POLICY_SHA256   the expected hex sha256 (default: the first word of `<wasm>.sha256`, which
//                           conformance/setup writes from `runbook-host module --sha256`)
//   RUNBOOK_POLICY_JCO_DIR  the transpiled output (default: build/ beside this file)
//
// Every request runs in a fresh instance of the component (as the Rust host gives every document call its
// own store), so a trap cannot leak into the next request; a replay split by a snapshot restores in a
// second one. Node has no fuel: a runaway call is bounded only
// by the runner's time-out.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const IMPLEMENTATION = 'node-jco';
const INTERFACE = 'runbook:policy/policy@1.1.0';
const STRUCTURE = { p0: 'P0', p1: 'P1', p2: 'P2' };
const here = dirname(fileURLToPath(import.meta.url));

function log(msg) {
  process.stderr.write(`${IMPLEMENTATION}: ${msg}\n`);
}

function failStart(msg) {
  log(msg);
  process.exit(1);
}

class AdapterError extends Error {}

class Trapped extends Error {}

function readOrFail(path, what) {
  try {
    return readFileSync(path);
  } catch (e) {
    return failStart(`cannot read ${what} ${path}: ${e.code ?? e.message} (run conformance/setup)`);
  }
}

// ---- start-up: verify the component, then load the transpiled JavaScript --------------------------------

const wasmPath = resolve(process.env.RUNBOOK_POLICY_WASM || join(here, '..', '..', 'build', 'policy.wasm'));
const jcoDir = resolve(process.env.RUNBOOK_POLICY_JCO_DIR || join(here, 'build'));
const component = readOrFail(wasmPath, 'the component');
let expected = (process.env.RUNBOOK_POLICY_SHA256 || '').trim().toLowerCase();
if (!expected) {
  const words = readOrFail(`${wasmPath}.sha256`, 'the expected sha256 (RUNBOOK_POLICY_SHA256 is unset)')
    .toString('utf8').split(/\s+/).filter(Boolean);
  if (words.length === 0) failStart(`no expected sha256: ${wasmPath}.sha256 is empty`);
  expected = words[0].toLowerCase();
}
const actual = createHash('sha256').update(component).digest('hex');
if (actual !== expected) {
  failStart(`refusing to start: ${wasmPath} has sha256 ${actual}, expected ${expected}`);
}

let stamp;
try {
  stamp = JSON.parse(readOrFail(join(jcoDir, 'stamp.json'), 'the transpile stamp').toString('utf8'));
} catch (e) {
  failStart(`the transpile stamp in ${jcoDir} is not JSON: ${e.message} (run conformance/setup)`);
}
if (stamp.component_sha256 !== actual) {
  failStart(`refusing to start: ${jcoDir} was transpiled from component ${stamp.component_sha256}, not ${actual} (run conformance/setup)`);
}

const compiled = new Map();
function getCoreModule(name) {
  let m = compiled.get(name);
  if (!m) {
    if (name.includes('/') || name.includes('\\')) throw new AdapterError(`unexpected core module path ${name}`);
    const bytes = readFileSync(join(jcoDir, name));
    if (component.indexOf(bytes) < 0) {
      throw new AdapterError(`core module ${name} does not occur in the verified component (run conformance/setup)`);
    }
    m = new WebAssembly.Module(bytes);
    compiled.set(name, m);
  }
  return m;
}

const t0 = performance.now();
let transpiled;
try {
  transpiled = await import(pathToFileURL(join(jcoDir, 'policy.js')).href);
} catch (e) {
  failStart(`cannot load the transpiled component from ${jcoDir}: ${e.message} (run conformance/setup)`);
}

async function instantiate() {
  let root;
  try {
    root = await transpiled.instantiate(getCoreModule, {});
  } catch (e) {
    if (e instanceof AdapterError) throw e;
    throw new Trapped(`instantiation failed: ${describe(e)}`);
  }
  const api = root[INTERFACE] ?? root.policy;
  if (!api) throw new AdapterError(`the component does not export \`${INTERFACE}\``);
  return api;
}

// The first instance proves the component loads at all.
let spare;
try {
  spare = await instantiate();
} catch (e) {
  failStart(`cannot instantiate the component: ${e.message}`);
}
log(`jco ${stamp.jco ?? '?'}, node ${process.version}, module ${actual}, loaded in ${(performance.now() - t0).toFixed(0)} ms`);

// One instance serves every request that needs no fresh one (lint, envelope, the first part of a replay):
// jco's glue costs about 25 ms per instantiation of this component, more than a whole replay. Sessions are
// resources, each dropped after its request, so nothing carries over but the allocator's state; after a
// trap the instance is never entered again (`poison`).
let shared;
async function sharedInstance() {
  shared ??= await freshInstance();
  return shared;
}
function poison() {
  shared = undefined;
}

/** A fresh instance for one request. */
async function freshInstance() {
  if (spare) {
    const api = spare;
    spare = undefined;
    return api;
  }
  return instantiate();
}

// ---- calls into the component ---------------------------------------------------------------------------

function describe(e) {
  if (e instanceof Error) return `${e.constructor?.name ?? 'Error'}: ${e.message}`;
  return String(e);
}

/** Whether an exception is the `err` case of a `result` export (jco's ComponentError), not a trap. */
function isResultErr(e) {
  return e instanceof Error && e.constructor?.name === 'ComponentError' && Object.hasOwn(e, 'payload');
}

/** Calls into the component; any exception is a trap (the module has no other way to throw). */
function call(f) {
  try {
    return f();
  } catch (e) {
    throw new Trapped(describe(e));
  }
}

function finding(f) {
  return {
    code: f.code,
    severity: f.severity,
    line: f.line,
    column: f.column,
    pointer: f.pointer,
    message: f.message,
  };
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
    const api = await sharedInstance();
    r = call(() => api.lint(document));
  } catch (e) {
    poison();
    if (e instanceof Trapped) return { trap: e.message };
    throw e;
  }
  return {
    sha256: r.sha256,
    structure: r.structure === undefined ? null : STRUCTURE[r.structure],
    findings: r.findings.map(finding),
  };
}

async function opEnvelope(req) {
  const document = documentBytes(req);
  let api;
  try {
    api = await sharedInstance();
  } catch (e) {
    poison();
    if (e instanceof Trapped) return { trap: e.message };
    throw e;
  }
  try {
    return { envelope: api.envelope(document), findings: [] };
  } catch (e) {
    // result<string, list<finding>>: jco throws the `err` case as a ComponentError carrying the payload.
    if (isResultErr(e)) return { envelope: null, findings: e.payload.map(finding) };
    poison();
    return { trap: describe(e) };
  }
}

const dispose = Symbol.dispose ?? Symbol.for('dispose');

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

/** Frees a session resource (runs the guest's destructor). */
function drop(session) {
  try {
    session[dispose]();
  } catch (e) {
    log(`dropping the session failed: ${describe(e)}`);
  }
}

// With `snapshot_after` k: the first k events go to a new session, which is snapshotted and dropped; a
// session restored from the snapshot, in a fresh instance (as another process would have: only the
// document and the snapshot carry over), answers the rest and gives the report.
//
// With `chain_h0`: every event goes in by `feed-line` with the previous link (the first with chain_h0),
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
    if (h0 === undefined) return call(() => session.handleLine(line));
    const r = call(() => session.feedLine(line, prev));
    prev = r.link;
    extra.links.push(r.link);
    return r.decisionLine;
  };
  try {
    let api = await sharedInstance();
    let session = call(() => new api.Session(document));
    for (const line of events.slice(0, split)) decisions.push(feed(session, line));
    if (k !== undefined) {
      const snapshot = call(() => session.snapshot());
      extra.snapshot = snapshot;
      drop(session);
      // The restored session lives in a fresh instance: only the document and the snapshot carry over.
      api = await freshInstance();
      try {
        session = api.Session.restore(document, snapshot);
      } catch (e) {
        // result<session, string>: jco throws the `err` case (the module's refusal) as a ComponentError.
        if (isResultErr(e)) return { decisions, report: null, ...extra, restore_error: String(e.payload) };
        throw new Trapped(describe(e));
      }
    }
    for (const line of events.slice(split)) decisions.push(feed(session, line));
    const report = call(() => session.report());
    drop(session);
    return { decisions, report, ...extra };
  } catch (e) {
    // A trapped instance, and the session in it, are never entered again.
    poison();
    if (e instanceof Trapped) return { decisions, trap: e.message, ...extra };
    throw e;
  }
}

const OPS = {
  hello: async () => ({ implementation: IMPLEMENTATION, module_sha256: actual }),
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
