// The platform-neutral part of the package: loading verified bytes, the policy, sessions, typed events and
// decisions, errors. No Node and no DOM API here: src/node.js and src/browser.js add how bytes are read and
// hashed, src/run.js (Node only) the run bundle.
//
// Instances. jco's glue makes one instance of the component per `instantiate` call (about 20-80 ms here:
// the glue's set-up, not the core modules, which are compiled once by `load`). Stateless calls share one
// instance; each session gets an instance of its own by default, as the Rust host gives each session its
// own store, so that a trap in one run can never touch another. A trap poisons its instance: every session
// in it answers ModuleTrap from then on, and the next stateless call gets a fresh instance.

import { instantiate } from '../dist/policy.js';
import { LAYOUT } from '../dist/layout.js';
import { COMPONENT_SHA256, INTERFACE } from './component.js';

export { COMPONENT_SHA256, INTERFACE };

// ---- errors ---------------------------------------------------------------------------------------------

/** The base of every error this package throws on purpose; `code` says whose fault it is. */
export class PolicyError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** Bytes that are not the component this package was built for (refused at load). */
export class ComponentMismatch extends PolicyError {
  constructor(actual, expected, where) {
    super('component-mismatch', `${where} has sha256 ${actual}, but this package runs only the component ${expected}: refusing to load it`);
    this.actual = actual;
    this.expected = expected;
  }
}

/** A document the module cannot derive an envelope from; `findings` say why, each with its place. */
export class InvalidDocument extends PolicyError {
  constructor(findings) {
    const first = findings[0];
    const where = first ? `: ${first.line}:${first.column} ${first.code}: ${first.message}` : '';
    super('invalid-document', `the document has ${findings.length} finding${findings.length === 1 ? '' : 's'} that prevent an envelope${where}`);
    this.findings = findings;
  }
}

/** A snapshot the module refuses for these document bytes; `detail` is the module's own words. */
export class SnapshotRefused extends PolicyError {
  constructor(detail) {
    super('snapshot-refused', `the snapshot is refused: ${detail}`);
    this.detail = detail;
  }
}

/** The component trapped (or its instance did earlier): the session is unusable, its answers are gone. */
export class ModuleTrap extends PolicyError {
  constructor(message, options) {
    super('module-trap', message, options);
  }
}

/** A run whose evidence could not be written or whose module trapped: every later call throws this. */
export class RunBroken extends PolicyError {
  constructor(message, options) {
    super('run-broken', message, options);
  }
}

/** A run whose bundle is finished (ended, or refused at start): nothing more can be recorded. */
export class RunOver extends PolicyError {
  constructor(message) {
    super('run-over', message);
  }
}

/**
 * Recorded evidence that does not check out (an edited, truncated or forged record; a document or chain
 * `h0` other than run.json's or the pinned one): `place` (`events.ndjson:N`, a file) and `detail` say
 * where and why. Nothing is resumed from it.
 */
export class RunTampered extends PolicyError {
  constructor(place, detail) {
    super('run-tampered', `the run's evidence does not check out: ${place}: ${detail}`);
    this.place = place;
    this.detail = detail;
  }
}

/** An argument of the wrong shape from the calling code (not an event: malformed events are decided). */
export class InvalidInput extends PolicyError {
  constructor(message, detail) {
    super('invalid-input', message);
    if (detail !== undefined) this.detail = detail;
  }
}

/** A session used after `close()`. */
export class SessionClosed extends PolicyError {
  constructor() {
    super('session-closed', 'the session is closed');
  }
}

// ---- small helpers --------------------------------------------------------------------------------------

const utf8 = new TextEncoder();
const HEX64 = /^[0-9a-f]{64}$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const wellFormed = (s) => (typeof s.isWellFormed === 'function' ? s.isWellFormed() : !LONE_SURROGATE.test(s));

export function hex(bytes) {
  let s = '';
  for (const b of bytes) s += b.toString(16).padStart(2, '0');
  return s;
}

/** Document bytes from a Uint8Array (a Buffer too), an ArrayBuffer, or text (encoded as UTF-8). */
export function documentBytes(doc, what = 'the document') {
  if (doc instanceof Uint8Array) return doc;
  if (doc instanceof ArrayBuffer) return new Uint8Array(doc);
  if (ArrayBuffer.isView(doc)) return new Uint8Array(doc.buffer, doc.byteOffset, doc.byteLength);
  if (typeof doc === 'string') {
    // TextEncoder would silently replace a lone surrogate, and the module would hash other bytes.
    if (!wellFormed(doc)) throw new InvalidInput(`${what} is not well-formed text (a lone surrogate): pass its bytes`);
    return utf8.encode(doc);
  }
  throw new InvalidInput(`${what} must be bytes (Uint8Array, ArrayBuffer) or text, not ${kindOf(doc)}`);
}

function kindOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? `an object (${v.constructor?.name ?? 'no prototype'})` : `a ${typeof v}`;
}

function text(v, what) {
  if (typeof v !== 'string') throw new InvalidInput(`${what} must be a string, not ${kindOf(v)}`);
  if (!wellFormed(v)) throw new InvalidInput(`${what} is not well-formed text (a lone surrogate)`);
  return v;
}

function u64(v, what) {
  if (typeof v === 'bigint' && v >= 0n && v < 1n << 64n) return v;
  if (Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  throw new InvalidInput(`${what} must be a non-negative integer, not ${typeof v === 'number' ? v : kindOf(v)}`);
}

function texts(v, what) {
  if (!Array.isArray(v)) throw new InvalidInput(`${what} must be a list of strings, not ${kindOf(v)}`);
  return v.map((x, i) => text(x, `${what}[${i}]`));
}

/** JSON text for the module: text as it is, any other value as its JSON form. */
function jsonArg(v, what) {
  return typeof v === 'string' ? text(v, what) : jsonText(v, what);
}

function link(v, what) {
  if (typeof v !== 'string' || !HEX64.test(v)) throw new InvalidInput(`${what} must be 64 lowercase hex digits (a chain link), not ${JSON.stringify(v) ?? kindOf(v)}`);
  return v;
}

/**
 * JSON text of a value for the module: any JSON value. What JSON cannot hold faithfully (a bigint, a cycle,
 * a number that is not finite, undefined at the top) is refused: silently writing `null` for NaN would
 * record and decide a call other than the one made. Throws a TypeError saying why.
 */
function stringifyStrict(value) {
  // JSON.stringify writes `null` for NaN and the infinities: without a `null` in the text there was none,
  // and only then is the slower walk with a replacer needed to tell a real null from a lost number.
  let out = JSON.stringify(value);
  if (out === undefined) throw new TypeError(`${kindOf(value)} has no JSON form`);
  if (out.includes('null')) {
    out = JSON.stringify(value, (k, v) => {
      if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`${v} at ${k === '' ? 'the top' : `key ${JSON.stringify(k)}`} is not a JSON number`);
      return v;
    });
  }
  if (!wellFormed(out)) throw new TypeError('it holds a lone surrogate');
  return out;
}

/** `stringifyStrict`, refusing with InvalidInput (arguments from the calling code). */
export function jsonText(value, what) {
  try {
    return stringifyStrict(value);
  } catch (e) {
    throw new InvalidInput(`${what} is not JSON-able: ${e.message}`);
  }
}

// ---- the wire codes and the WIT's -----------------------------------------------------------------------

const PROFILE_TO_WIT = { R0: 'r0', R1: 'r1', R2: 'r2' };
const STRUCTURE_FROM_WIT = { p0: 'P0', p1: 'P1', p2: 'P2' };
const RISKS = new Set(['read-only', 'mutating', 'destructive', 'irreversible']);
const END_REASONS = new Set(['normal', 'client-closed', 'server-exited', 'interrupted', 'approval-timeout']);

/** The event types and the keys each may have (besides `type`). */
const EVENT_KEYS = {
  start: ['runId', 'profile', 'allowlist', 'riskCeiling', 'coverage', 'agent', 'available'],
  invoke: ['tool', 'arguments', 'callId', 'step', 'guard'],
  result: ['tool', 'result', 'isError', 'callId'],
  approval: ['approver', 'granted', 'step', 'callSha256', 'request'],
  advance: ['step'],
  verdict: ['step', 'passed', 'by'],
  final_output: [],
  tick: [],
  end: ['reason'],
};

/** Why a typed event cannot be given to the module: the place and the reason, for a recorded halt. */
class Malformed extends Error {}

// Callers test first and build the message only on failure: the typed path runs once per decision.
function bad(place, why) {
  throw new Malformed(`${place}: ${why}`);
}

function got(v) {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}

function reqStr(e, key, place) {
  const v = e[key];
  if (typeof v !== 'string') bad(`${place}.${key}`, `expected a string, got ${got(v)}`);
  if (!wellFormed(v)) bad(`${place}.${key}`, 'not well-formed text (a lone surrogate)');
  return v;
}

function optStr(e, key, place) {
  const v = e[key];
  if (v === undefined || v === null) return undefined;
  return reqStr(e, key, place);
}

function reqBool(e, key, place, dflt) {
  const v = e[key];
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== 'boolean') bad(`${place}.${key}`, `expected a boolean, got ${got(v)}`);
  return v;
}

function strList(v, place) {
  if (!Array.isArray(v)) bad(place, `expected a list of strings, got ${got(v)}`);
  v.forEach((x, i) => {
    if (typeof x !== 'string') bad(`${place}[${i}]`, `expected a string, got ${got(x)}`);
    if (!wellFormed(x)) bad(`${place}[${i}]`, 'not well-formed text (a lone surrogate)');
  });
  return [...v];
}

function jsonOf(e, key, place) {
  if (!(Object.hasOwn(e, key) && e[key] !== undefined)) bad(`${place}.${key}`, 'missing (any JSON value, null included)');
  try {
    return stringifyStrict(e[key]);
  } catch (err) {
    throw new Malformed(`${place}.${key}: not JSON-able: ${err.message}`);
  }
}

function atOf(at) {
  if (typeof at === 'bigint') {
    if (!(at >= 0n && at < 1n << 64n)) bad('at', 'out of the range of u64');
    return at;
  }
  if (!(Number.isSafeInteger(at) && at >= 0)) bad('at', `expected a non-negative integer (milliseconds since the run began), got ${typeof at === 'number' ? at : got(at)}`);
  return BigInt(at);
}

/** The WIT `event` of a typed event object; throws Malformed with the place. */
function toWit(event, at) {
  const when = atOf(at);
  if (!(event !== null && typeof event === 'object' && !Array.isArray(event))) bad('event', `expected an object with a \`type\`, got ${got(event)}`);
  const type = event.type;
  if (!(typeof type === 'string' && Object.hasOwn(EVENT_KEYS, type))) bad('event.type', `expected one of ${Object.keys(EVENT_KEYS).join(', ')}, got ${JSON.stringify(type) ?? got(type)}`);
  const place = type;
  for (const k of Object.keys(event)) {
    // A misspelt key (`callID`) must not silently drop what it carries, e.g. the pairing of a result.
    if (!(k === 'type' || EVENT_KEYS[type].includes(k))) bad(`${place}.${k}`, `not a key of a ${type} event (${EVENT_KEYS[type].join(', ') || 'none'})`);
  }
  switch (type) {
    case 'start': {
      const profile = PROFILE_TO_WIT[event.profile];
      if (profile === undefined) bad(`${place}.profile`, `expected R0, R1 or R2, got ${JSON.stringify(event.profile) ?? got(event.profile)}`);
      if (!RISKS.has(event.riskCeiling)) bad(`${place}.riskCeiling`, `expected one of ${[...RISKS].join(', ')}, got ${JSON.stringify(event.riskCeiling) ?? got(event.riskCeiling)}`);
      const c = event.coverage;
      if (!(c === 'complete' || Array.isArray(c))) bad(`${place}.coverage`, `expected "complete" or a list of what the adapter cannot see, got ${JSON.stringify(c) ?? got(c)}`);
      const coverage = c === 'complete' ? { tag: 'complete' } : { tag: 'blind', val: strList(c, `${place}.coverage`) };
      const available = event.available === undefined || event.available === null ? undefined : strList(event.available, `${place}.available`);
      return {
        at: when,
        kind: {
          tag: 'start',
          val: {
            runId: reqStr(event, 'runId', place),
            profile,
            allowlist: strList(event.allowlist, `${place}.allowlist`),
            riskCeiling: event.riskCeiling,
            coverage,
            agent: reqStr(event, 'agent', place),
            available,
          },
        },
      };
    }
    case 'invoke':
      return {
        at: when,
        kind: {
          tag: 'invoke',
          val: {
            tool: reqStr(event, 'tool', place),
            arguments: jsonOf(event, 'arguments', place),
            callId: optStr(event, 'callId', place),
            step: optStr(event, 'step', place),
            guard: reqBool(event, 'guard', place, false),
          },
        },
      };
    case 'result':
      return {
        at: when,
        kind: {
          tag: 'result',
          val: {
            tool: reqStr(event, 'tool', place),
            result: jsonOf(event, 'result', place),
            isError: reqBool(event, 'isError', place, false),
            callId: optStr(event, 'callId', place),
          },
        },
      };
    case 'approval':
      return {
        at: when,
        kind: {
          tag: 'approval',
          val: {
            step: optStr(event, 'step', place),
            callSha256: optStr(event, 'callSha256', place),
            approver: reqStr(event, 'approver', place),
            granted: reqBool(event, 'granted', place),
            request: event.request === undefined || event.request === null ? undefined : atOf(event.request),
          },
        },
      };
    case 'advance':
      return { at: when, kind: { tag: 'advance', val: reqStr(event, 'step', place) } };
    case 'verdict':
      return { at: when, kind: { tag: 'verdict', val: { step: reqStr(event, 'step', place), pass: reqBool(event, 'passed', place), by: reqStr(event, 'by', place) } } };
    case 'final_output':
      return { at: when, kind: { tag: 'final-output' } };
    case 'tick':
      return { at: when, kind: { tag: 'tick' } };
    case 'end': {
      const reason = event.reason ?? 'normal';
      if (!END_REASONS.has(reason)) bad(`${place}.reason`, `expected one of ${[...END_REASONS].join(', ')}, got ${JSON.stringify(reason) ?? got(reason)}`);
      return { at: when, kind: { tag: 'end', val: reason } };
    }
  }
  /* c8 ignore next */
  throw new Malformed('event.type: unknown');
}

/**
 * The line a host gives the module for a typed event it cannot encode: not JSON, so the module halts the
 * run with `malformed-event` and the line is recorded as it is (the module writes the same kind of line,
 * `malformed typed event: ...`, for typed fields it cannot read itself).
 */
function malformedLine(why) {
  return `malformed typed event: ${why}`.replace(/[\r\n]/g, ' ').slice(0, 4096);
}

function fromWitDecision(d) {
  return {
    seq: Number(d.seq),
    kind: d.kind,
    step: d.step ?? null,
    deviation: d.deviation ?? null,
    reason: d.reason ?? null,
    refusals: [...d.refusals],
  };
}

/** A Decision from a canonical decision line (the wire form carries the same fields). */
export function decisionFromLine(line) {
  const d = JSON.parse(line);
  return { seq: d.seq, kind: d.decision, step: d.step, deviation: d.deviation, reason: d.reason, refusals: d.refusals };
}

function fromWitState(s) {
  return {
    phase: s.phase,
    step: s.step ?? null,
    atTerminal: s.atTerminal,
    scope: [...s.scope],
    scopeTools: [...s.scopeTools],
    gated: s.gated,
    approved: s.approved,
    callApprovals: s.callApprovals,
    awaitingVerdict: s.awaitingVerdict,
    outcome: s.outcome ?? null,
    events: Number(s.events),
    nextDeadline: s.nextDeadline === undefined ? null : Number(s.nextDeadline),
    approvalRequests: s.approvalRequests.map((r) => ({ seq: Number(r.seq), callSha256: r.callSha256 })),
  };
}

function fromWitRecorded(r) {
  return {
    eventLine: r.eventLine,
    decision: fromWitDecision(r.decision),
    decisionLine: r.decisionLine,
    link: r.link,
    recordLine: r.recordLine,
    explanation: r.explanation,
    state: fromWitState(r.state),
  };
}

/** The effects of a bundle change (WIT `effect`): `{op, path, bytes}`, carried out in order by a host. */
function fromWitEffects(effects) {
  return effects.map((e) => ({ op: e.op, path: e.path, bytes: e.bytes }));
}

// ---- verify ---------------------------------------------------------------------------------------------

/** Why `verify` of this package is not `ok` for a bundle with signed answers (it cannot check SSH signatures). */
const SIGNATURE_UNCHECKED = 'the SSH signature is not checked by this package: verify the bundle with runbook-host verify';
const RECEIPT_SIGNATURE_UNCHECKED = "the receipt's signature is not checked by this package: verify the bundle with runbook-host verify";

/** Order by UTF-8 bytes (Unicode scalar values), as the Rust host sorts names; not by UTF-16 code units. */
function byScalars(a, b) {
  const x = utf8.encode(a);
  const y = utf8.encode(b);
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/** The WIT `list<tuple<string, bundle-item>>` of `[name, Uint8Array | number | null]` entries, sorted by name. */
function bundleItems(entries) {
  if (!Array.isArray(entries)) throw new InvalidInput(`entries must be a list of [name, item], not ${kindOf(entries)}`);
  const seen = new Set();
  const out = entries.map((e, i) => {
    if (!(Array.isArray(e) && e.length === 2)) throw new InvalidInput(`entries[${i}] must be [name, item], not ${kindOf(e)}`);
    const [name, item] = e;
    text(name, `entries[${i}][0]`);
    if (seen.has(name)) throw new InvalidInput(`entries name ${JSON.stringify(name)} twice`);
    seen.add(name);
    if (item === null) return [name, { tag: 'other' }];
    if (typeof item === 'number') {
      if (!(Number.isInteger(item) && item >= 0 && item <= 0xffffffff)) throw new InvalidInput(`entries[${i}][1]: a directory's entry count must be an integer from 0 to 2^32-1, not ${item}`);
      return [name, { tag: 'directory', val: item }];
    }
    if (item instanceof Uint8Array || item instanceof ArrayBuffer || ArrayBuffer.isView(item)) return [name, { tag: 'file', val: documentBytes(item, `entries[${i}][1]`) }];
    throw new InvalidInput(`entries[${i}][1] must be a file's bytes (Uint8Array), a directory's entry count (a number) or null (anything else), not ${kindOf(item)}`);
  });
  // The order a directory lists its entries in is the file system's; the module's answer must not be.
  return out.sort((a, b) => byScalars(a[0], b[0]));
}

/**
 * What `verifyBundle` returns, frozen; a bundle with signed answers fails closed (SIGNATURE_UNCHECKED),
 * unless `unaltered` (the module's result as it is, for a caller that checks the signatures itself).
 */
function fromWitVerification(v, unaltered = false) {
  let checks = [...v.checks];
  let failure = v.failure === undefined ? null : { place: v.failure[0], message: v.failure[1] };
  let reasons = v.reasons.map(([code, message]) => Object.freeze({ code, message }));
  const signedAnswers = v.signedAnswers.map((a) => Object.freeze({ place: a.place, principal: a.principal, message: a.message, signature: a.signature, fingerprint: a.fingerprint }));
  if (unaltered) {
    // nothing changed: the caller checks the signatures
  } else if (failure === null && signedAnswers.length > 0) {
    // As runbook-host does when a signature does not verify: the failure comes before any later check.
    const at = checks.indexOf('signatures');
    if (at >= 0) checks = checks.slice(0, at);
    failure = { place: signedAnswers[0].place, message: SIGNATURE_UNCHECKED };
    reasons = [];
  } else if (failure === null && v.receiptSigned) {
    failure = { place: 'receipt.dsse.json', message: RECEIPT_SIGNATURE_UNCHECKED };
    reasons = [];
  }
  return Object.freeze({
    ok: failure === null,
    checks: Object.freeze(checks),
    failure: failure === null ? null : Object.freeze(failure),
    runId: v.runId ?? null,
    outcome: v.outcome ?? null,
    events: Number(v.events),
    reasons: Object.freeze(reasons),
    warnings: Object.freeze([...v.warnings]),
    redacted: v.redacted,
    shadow: v.shadow === undefined ? null : Number(v.shadow),
    signedAnswers: Object.freeze(signedAnswers),
    receiptSigned: v.receiptSigned,
  });
}

/** A `verifyBundle` result for a bundle that failed before the module saw it (it could not be read). */
export function unread(place, message) {
  return fromWitVerification({ checks: [], failure: [place, message], runId: undefined, outcome: undefined, events: 0n, reasons: [], warnings: [], redacted: false, shadow: undefined, signedAnswers: [], receiptSigned: false });
}

function finding(f) {
  return { code: f.code, severity: f.severity, line: f.line, column: f.column, pointer: f.pointer, message: f.message };
}

// ---- instances and calls --------------------------------------------------------------------------------

function describe(e) {
  if (e instanceof Error) return `${e.constructor?.name ?? 'Error'}: ${e.message}`;
  return String(e);
}

/**
 * Whether an exception is the `err` case of a `result` export (jco's ComponentError, which carries it as
 * its own `payload`), not a trap. Not by the class's name: a bundler's minifier renames classes.
 */
function isResultErr(e) {
  return e instanceof Error && Object.hasOwn(e, 'payload');
}

const dispose = Symbol.dispose ?? Symbol.for('dispose');

/** One instance of the component; `trapped` once any call into it threw. */
class Instance {
  constructor(modules) {
    const getCoreModule = (name) => {
      const m = modules.get(name);
      if (!m) throw new Error(`the glue asks for core module ${name}, which dist/layout.js does not name (rebuild: npm run build)`);
      return m;
    };
    let root;
    try {
      root = instantiate(getCoreModule, {});
    } catch (e) {
      throw new ModuleTrap(`the component cannot be instantiated: ${describe(e)}`, { cause: e });
    }
    this.api = root[INTERFACE] ?? root.policy;
    if (!this.api) throw new ModuleTrap(`the component does not export ${INTERFACE}`);
    this.trapped = null;
  }

  /**
   * Runs `f(api)`: one call into the module. With `result`, the `err` case of a WIT result comes back as
   * `{err: payload}`; any other throw is a trap and poisons the instance (a trap can leave the module's
   * memory half-updated, so nothing in this instance is trusted again).
   */
  call(what, f, result = false) {
    if (this.trapped) throw new ModuleTrap(`the policy module trapped earlier (${this.trapped}); ${what} cannot run in that instance`);
    try {
      return result ? { ok: f(this.api) } : f(this.api);
    } catch (e) {
      // Marked first, with no call that could itself throw (near the stack limit anything can): whatever
      // happens next, this instance is never trusted again unless this was a WIT result's `err`.
      this.trapped = 'a call into the module threw';
      if (result && isResultErr(e)) {
        this.trapped = null;
        return { err: e.payload };
      }
      this.trapped = describe(e);
      throw new ModuleTrap(`the policy module trapped in ${what}: ${this.trapped}`, { cause: e });
    }
  }
}

// ---- loading --------------------------------------------------------------------------------------------

const TOKEN = Symbol('runbook-policy internal');
/** Each policy's way to restore a session into an instance of its own (for Session.restore). */
const RESTORE = new WeakMap();

/**
 * A Policy of `bytes` after checking them: `hashHex(bytes)` (a promise of the hex sha256) must be the
 * recorded sha256. The core modules are compiled from byte ranges of these very bytes (dist/layout.js), so
 * what runs is what was hashed. `where` names the bytes in errors.
 */
export async function loadVerified(bytes, hashHex, where) {
  const actual = await hashHex(bytes);
  if (actual !== COMPONENT_SHA256) throw new ComponentMismatch(actual, COMPONENT_SHA256, where);
  if (LAYOUT.component_sha256 !== COMPONENT_SHA256) {
    throw new ComponentMismatch(LAYOUT.component_sha256, COMPONENT_SHA256, "dist/ (the package's transpiled glue)");
  }
  const modules = new Map();
  await Promise.all(
    Object.entries(LAYOUT.cores).map(async ([name, c]) => {
      if (!(Number.isSafeInteger(c.offset) && Number.isSafeInteger(c.length) && c.offset >= 0 && c.offset + c.length <= bytes.length)) {
        throw new Error(`dist/layout.js names a range outside the component for ${name} (rebuild: npm run build)`);
      }
      modules.set(name, await WebAssembly.compile(bytes.subarray(c.offset, c.offset + c.length)));
    }),
  );
  const policy = new Policy(TOKEN, modules, { sha256: actual, size: bytes.length, jco: LAYOUT.jco });
  // The first instance proves the component instantiates at all, at load rather than at the first call.
  policy.version();
  return policy;
}

// ---- the policy -----------------------------------------------------------------------------------------

/** The loaded, verified component: document calls, and sessions. Made by `load()`. */
export class Policy {
  #modules;
  #doc = null;
  #info;

  constructor(token, modules, info) {
    if (token !== TOKEN) throw new TypeError('a Policy is made by load()');
    this.#modules = modules;
    this.#info = Object.freeze(info);
    RESTORE.set(this, (bytes, snapshot, options) => {
      const inst = this.#instanceFor(options);
      const r = inst.call('restore', (api) => api.Session.restore(bytes, snapshot), true);
      if (Object.hasOwn(r, 'err')) throw new SnapshotRefused(String(r.err));
      return new Session(TOKEN, inst, r.ok);
    });
  }

  /** Hex sha256 of the component's bytes (what `runbook-host module --sha256` prints). */
  get sha256() {
    return this.#info.sha256;
  }

  /** The component's size in bytes. */
  get size() {
    return this.#info.size;
  }

  /** The version of jco that transpiled the glue. */
  get jco() {
    return this.#info.jco;
  }

  /** The instance of stateless calls, replaced after a trap. */
  #shared() {
    if (!this.#doc || this.#doc.trapped) this.#doc = new Instance(this.#modules);
    return this.#doc;
  }

  #instanceFor(options) {
    if (options !== undefined && (options === null || typeof options !== 'object')) throw new InvalidInput('session options must be an object');
    const which = options?.instance ?? 'own';
    if (which === 'own') return new Instance(this.#modules);
    if (which === 'shared') return this.#shared();
    throw new InvalidInput(`options.instance must be "own" or "shared", not ${JSON.stringify(which)}`);
  }

  #call(what, f, result = false) {
    return this.#shared().call(what, f, result);
  }

  /** Parses and lints a document: `{sha256, findings, structure, ok}`. */
  lint(document) {
    const bytes = documentBytes(document);
    const r = this.#call('lint', (api) => api.lint(bytes));
    return { sha256: r.sha256, findings: r.findings.map(finding), structure: r.structure === undefined ? null : STRUCTURE_FROM_WIT[r.structure], ok: r.ok };
  }

  /** The canonical `runbook-policy-envelope/v1`; throws InvalidDocument with the findings that prevent it. */
  envelope(document) {
    const bytes = documentBytes(document);
    const r = this.#call('envelope', (api) => api.envelope(bytes), true);
    if (Object.hasOwn(r, 'err')) throw new InvalidDocument(r.err.map(finding));
    return r.ok;
  }

  /** Hex sha256 of canonical `{"arguments":..,"tool":..}`: what an approval bound to one call names. */
  callSha256(tool, args) {
    const argsText = jsonText(args, 'arguments');
    text(tool, 'tool');
    const r = this.#call('call-sha256', (api) => api.callSha256(tool, argsText), true);
    if (Object.hasOwn(r, 'err')) throw new InvalidInput(`the call cannot be hashed: ${r.err}`, r.err);
    return r.ok;
  }

  /** The RFC 8785 canonical form of JSON text; throws InvalidInput (with the module's `detail`). */
  canonicalize(json) {
    text(json, 'json');
    const r = this.#call('canonicalize', (api) => api.canonicalize(json), true);
    if (Object.hasOwn(r, 'err')) throw new InvalidInput(`not canonicalizable JSON: ${r.err}`, r.err);
    return r.ok;
  }

  /** The canonical event line a typed event stands for (what a host records); InvalidInput when malformed. */
  encodeEvent(event, at) {
    let wit;
    try {
      wit = toWit(event, at);
    } catch (e) {
      if (e instanceof Malformed) throw new InvalidInput(`malformed event: ${e.message}`);
      throw e;
    }
    const r = this.#call('encode-event', (api) => api.encodeEvent(wit), true);
    if (Object.hasOwn(r, 'err')) throw new InvalidInput(`malformed event: ${r.err}`, r.err);
    return r.ok;
  }

  /** The hash-chain link of docs/spec/bundle.md#the-hash-chain for one recorded line (what `verify` recomputes). */
  chainLink(prev, eventLine, decisionLine, digested = false) {
    link(prev, 'prev');
    text(eventLine, 'eventLine');
    text(decisionLine, 'decisionLine');
    if (typeof digested !== 'boolean') throw new InvalidInput('digested must be a boolean');
    return this.#call('chain-link', (api) => api.chainLink(prev, eventLine, decisionLine, digested));
  }

  /** The module's one sentence for a wire code of a kind (`decision`, `reason`, `lint`, ...), or null. */
  explain(kind, code) {
    text(kind, 'kind');
    text(code, 'code');
    return this.#call('explain', (api) => api.explain(kind, code)) ?? null;
  }

  /** The module's own version (the crate version). */
  version() {
    return this.#call('version', (api) => api.version());
  }

  /** The document's prose as canonical JSON, or null when it does not parse. Never a decision input. */
  prose(document) {
    const bytes = documentBytes(document);
    return this.#call('prose', (api) => api.prose(bytes)) ?? null;
  }

  // ---- run bundles (docs/spec/bundle.md and docs/spec/README.md#architecture): the module composes every byte, a host carries the effects out ----

  /**
   * A new run's bundle: the effects (`{op, path, bytes}`, `op` one of `create-dir`, `write`, `append`,
   * `sign`; `path` relative to the runs root) that create `<run_id>/` with the document, its envelope, an
   * empty events.ndjson and run.json, point latest.json at it and append history.ndjson's `created` line.
   * `facts` (JSON text or a value): `{run_id, at, reference, trust, pinned_sha256?, provenance?,
   * module_sha256, host: {name, version}, adapter, git, shadow?, receipt_key?}`, every `at` Unix
   * milliseconds. Throws InvalidInput naming the fact the module refuses.
   */
  bundleCreate(document, facts) {
    const bytes = documentBytes(document);
    const f = jsonArg(facts, 'facts');
    return this.#effects('bundle-create', (api) => api.bundleCreate(bytes, f));
  }

  /**
   * One change to run.json (`manifest`: its text as last written): `{lifecycle: "admitted"|"refused", at,
   * start?: <the start event line>}`, `{approvals_signed}`, `{receipt_key: {key_id, public_key}}` or
   * `{shadow: true}`. The effects write run.json (and shadow.ndjson for `shadow`).
   */
  bundleChange(manifest, change) {
    text(manifest, 'manifest');
    const c = jsonArg(change, 'change');
    return this.#effects('bundle-change', (api) => api.bundleChange(manifest, c));
  }

  /**
   * The end of a run: report.json, run.json, receipt.json (and its `sign` effect when run.json names a
   * receipt key), latest.json when it still names this run, history.ndjson's `ended` line. `report` null:
   * the run ends without one (`facts.ended_without_report` says why) and no receipt is written. `facts`:
   * `{at, chain_head, hashes: {<file>: sha256}, latest?: <latest.json's text>, ended_without_report?}`.
   */
  bundleEnd(manifest, report, facts) {
    text(manifest, 'manifest');
    const r = report === null || report === undefined ? undefined : text(report, 'report');
    const f = jsonArg(facts, 'facts');
    return this.#effects('bundle-end', (api) => api.bundleEnd(manifest, r, f));
  }

  #effects(what, f) {
    const r = this.#call(what, f, true);
    if (Object.hasOwn(r, 'err')) throw new InvalidInput(`${what}: ${r.err}`, r.err);
    return fromWitEffects(r.ok);
  }

  /** The events.ndjson record of an event line and its decision line (what `recorded.recordLine` is). */
  recordLine(link_, eventLine, decisionLine) {
    link(link_, 'link');
    text(eventLine, 'eventLine');
    text(decisionLine, 'decisionLine');
    return this.#call('record-line', (api) => api.recordLine(link_, eventLine, decisionLine));
  }

  /** A line of signatures.ndjson: one signed answer (`seq`, the approval event's) to the request `request`. */
  signatureLine(seq, request, channelId, message, signature, principal, fingerprint) {
    const a = [u64(seq, 'seq'), u64(request, 'request')];
    const t = [[channelId, 'channelId'], [message, 'message'], [signature, 'signature'], [principal, 'principal'], [fingerprint, 'fingerprint']].map(([v, w]) => text(v, w));
    return this.#call('signature-line', (api) => api.signatureLine(a[0], a[1], ...t));
  }

  /** A line of shadow.ndjson: a call of a shadow run forwarded although the module did not allow it. */
  shadowLine(seq, tool, callSha256, decision) {
    const s = u64(seq, 'seq');
    text(tool, 'tool');
    text(callSha256, 'callSha256');
    text(decision, 'decision');
    return this.#call('shadow-line', (api) => api.shadowLine(s, tool, callSha256, decision));
  }

  /**
   * A line of traffic.ndjson and its link (docs/spec/adapters.md#mcp-beyond-tools): MCP traffic besides tool calls that a proxy
   * passed on. `prev` is the previous line's link (run.json's `chain_h0` for the first), `entryJson` the
   * JSON text of `{n, at, direction, server, method, params, answer | error_code}`. Returns `[line, link]`;
   * the line holds digests, never the content. InvalidInput names a malformed entry.
   */
  trafficLine(prev, entryJson) {
    text(prev, 'prev');
    text(entryJson, 'entryJson');
    const r = this.#call('traffic-line', (api) => api.trafficLine(prev, entryJson), true);
    if (Object.hasOwn(r, 'err')) throw new InvalidInput(`not a traffic entry: ${r.err}`, r.err);
    return r.ok;
  }

  /**
   * The guard's matching rule (docs/spec/run.md#guarded-calls): whether the tool name or any string of the arguments (JSON
   * text; keys included) contains one of `needles`. Arguments that are not JSON are matched as text.
   */
  guardNames(tool, argumentsJson, needles) {
    text(tool, 'tool');
    text(argumentsJson, 'argumentsJson');
    const n = texts(needles, 'needles');
    return this.#call('guard-names', (api) => api.guardNames(tool, argumentsJson, n));
  }

  /**
   * The working directory's git state as counts only (JSON text: what `bundleCreate`'s `git` fact holds),
   * from the exit code of `git status --porcelain=v1 -z` (null: it did not run or finish) and its output.
   */
  gitState(exitCode, porcelain) {
    if (!(exitCode === null || exitCode === undefined || (Number.isInteger(exitCode) && exitCode >= -(2 ** 31) && exitCode < 2 ** 31))) {
      throw new InvalidInput(`exitCode must be an integer or null, not ${kindOf(exitCode)}`);
    }
    const bytes = documentBytes(porcelain, 'porcelain');
    return this.#call('git-state', (api) => api.gitState(exitCode ?? undefined, bytes));
  }

  /**
   * `verify` of a run bundle (docs/spec/bundle.md#what-verify-checks and docs/spec/README.md#architecture): every consistency check of its bytes, run by the module
   * (WIT `verify-bundle`), in order, stopping at the first failure. `entries`: every top-level entry of
   * the bundle directory as `[name, item]`, `item` a regular file's bytes (Uint8Array), a directory's
   * entry count (a number) or null for anything else (a symbolic link, a device: never read); they are
   * sorted by name here. `moduleSha256`: the sha256 of the module that replays the bundle (`policy.sha256`;
   * the receipt must name it); `signersSha256`: the sha256 of the allowed signers the verifier trusts, if
   * any.
   *
   * Returns a frozen `{ok, checks, failure: {place, message} | null, runId, outcome, events, reasons:
   * [{code, message}], warnings, redacted, shadow, signedAnswers}`. Fail closed: this package cannot
   * check the bytes of an SSH signature, so a bundle with signed answers (`signedAnswers`, whose payloads
   * the module checked) is not `ok`: `failure` names the first answer's place and says to verify the
   * bundle with `runbook-host verify`, and, as there, the checks stop before `signatures`. The receipt's
   * DSSE signature (`receipt.dsse.json`) is not checked here either. In Node, `verify(runDir, {policy})`
   * reads the entries.
   *
   * `options.moduleResult: true`: the module's result unaltered, for a caller that checks the signatures
   * itself (as the run viewer does, with WebCrypto): `failure` is only the module's, `checks` include
   * `signatures` when the module checked the signed answers' payloads, and `ok` is true even though the
   * bytes of `signedAnswers[].signature` and of `receipt.dsse.json` (`receiptSigned`) are not checked.
   */
  verifyBundle(entries, moduleSha256, signersSha256, options) {
    const items = bundleItems(entries);
    text(moduleSha256, 'moduleSha256');
    const signers = signersSha256 === null || signersSha256 === undefined ? undefined : text(signersSha256, 'signersSha256');
    let unaltered = false;
    if (options !== undefined && options !== null) {
      if (typeof options !== 'object' || Array.isArray(options)) throw new InvalidInput(`verifyBundle options must be an object, not ${kindOf(options)}`);
      const { moduleResult, ...rest } = options;
      const unknown = Object.keys(rest);
      if (unknown.length) throw new InvalidInput(`verifyBundle options: unknown option ${unknown.map((k) => `\`${k}\``).join(', ')} (moduleResult)`);
      if (moduleResult !== undefined && typeof moduleResult !== 'boolean') throw new InvalidInput(`verifyBundle options: \`moduleResult\` must be a boolean, not ${kindOf(moduleResult)}`);
      unaltered = moduleResult === true;
    }
    const v = this.#call('verify-bundle', (api) => api.verifyBundle(items, moduleSha256, signers));
    return fromWitVerification(v, unaltered);
  }

  /**
   * A new supervised run of `document` (feed the `start` claim first). `options.instance`: `"own"` (the
   * default: an instance of its own, about 20-80 ms to make; a trap there touches no other session) or
   * `"shared"` (the instance of the stateless calls: no set-up cost, and a trap there ends every session
   * sharing it).
   */
  session(document, options) {
    const bytes = documentBytes(document);
    const inst = this.#instanceFor(options);
    const res = inst.call('session', (api) => new api.Session(bytes));
    return new Session(TOKEN, inst, res);
  }

}

// ---- sessions -------------------------------------------------------------------------------------------

/** One supervised run of one document in the module: event in, decision out. Made by `policy.session`. */
export class Session {
  #inst;
  #res;

  constructor(token, inst, res) {
    if (token !== TOKEN) throw new TypeError('a Session is made by policy.session() or Session.restore()');
    this.#inst = inst;
    this.#res = res;
  }

  /**
   * A session of `document` in the state `snapshot` describes (what `snapshot()` wrote for these exact
   * bytes); throws SnapshotRefused naming the field. Restore only a snapshot kept out of the agent's reach.
   */
  static restore(policy, document, snapshot, options) {
    const restore = RESTORE.get(policy);
    if (!restore) throw new InvalidInput('Session.restore needs the Policy from load()');
    return restore(documentBytes(document), text(snapshot, 'snapshot'), options);
  }

  #call(what, f, result = false) {
    if (!this.#res) throw new SessionClosed();
    return this.#inst.call(what, () => f(this.#res), result);
  }

  /** The typed path: one event in (at = ms since the run began), one Decision out. */
  handle(event, at) {
    let wit;
    try {
      wit = toWit(event, at);
    } catch (e) {
      if (!(e instanceof Malformed)) throw e;
      return decisionFromLine(this.#call('handle-line', (s) => s.handleLine(malformedLine(e.message))));
    }
    return fromWitDecision(this.#call('handle', (s) => s.handle(wit)));
  }

  /**
   * The typed path with the record: the canonical event line, the Decision and its line, the chain link
   * from `prev` (the chain's h0 for the start), a sentence, and the state after the event. A malformed
   * event is recorded as such and halts the run, never throws past its decision.
   */
  feed(event, at, prev) {
    link(prev, 'prev');
    let wit;
    try {
      wit = toWit(event, at);
    } catch (e) {
      if (!(e instanceof Malformed)) throw e;
      return fromWitRecorded(this.#call('feed-line', (s) => s.feedLine(malformedLine(e.message), prev)));
    }
    return fromWitRecorded(this.#call('feed', (s) => s.feed(wit, prev)));
  }

  /** The wire path: one event line in, one canonical decision line out (a malformed line halts the run). */
  handleLine(line) {
    text(line, 'line');
    return this.#call('handle-line', (s) => s.handleLine(line));
  }

  /** The wire path with the record (see `feed`); the event line is recorded exactly as given. */
  feedLine(line, prev) {
    text(line, 'line');
    link(prev, 'prev');
    return fromWitRecorded(this.#call('feed-line', (s) => s.feedLine(line, prev)));
  }

  /** The replay path: a recorded line and the previous link in; `[decisionLine, link]` out. */
  replayLine(line, prev) {
    text(line, 'line');
    link(prev, 'prev');
    const [decisionLine, l] = this.#call('replay-line', (s) => s.replayLine(line, prev));
    return [decisionLine, l];
  }

  /**
   * The resume path: every record of `events.ndjson` (its bytes) replayed into this new session from
   * `prev` (the chain's h0), the module checking each one's form, link and decision. Returns a frozen
   * `{head, events, lastAt}` (the last link, how many records, the last event's `at`). A record that does
   * not check out throws RunTampered (`place`: `events.ndjson:N`), and the session is closed.
   */
  replayEvents(events, prev) {
    const bytes = documentBytes(events, 'events');
    link(prev, 'prev');
    const r = this.#call('replay-events', (s) => s.replayEvents(bytes, prev), true);
    if (Object.hasOwn(r, 'err')) {
      this.close();
      throw new RunTampered(r.err[0], r.err[1]);
    }
    return Object.freeze({ head: r.ok.head, events: Number(r.ok.events), lastAt: Number(r.ok.lastAt) });
  }

  /**
   * The resume path's first check, before `replayEvents`: that `runJson` (run.json's text) is a run of this
   * session's document (its `document.sha256` and its `chain_h0`, which the module derives) and, with `pin`
   * (`[documentSha256, chainH0]` kept when the run began), the pinned one. Returns the chain's h0; throws
   * RunTampered (`place`: `run.json` or the document's file) when it is not.
   */
  chainStart(runJson, pin = null) {
    text(runJson, 'runJson');
    if (!(pin === null || (Array.isArray(pin) && pin.length === 2 && pin.every((x) => typeof x === 'string')))) {
      throw new InvalidInput('chainStart: `pin` must be [documentSha256, chainH0] or null');
    }
    const r = this.#call('chain-start', (s) => s.chainStart(runJson, pin ?? undefined), true);
    if (Object.hasOwn(r, 'err')) throw new RunTampered(r.err[0], r.err[1]);
    return r.ok;
  }

  /** The typed state: phase, step, scope and its tools, what awaits a human, outcome, next deadline. */
  state() {
    return fromWitState(this.#call('state', (s) => s.state()));
  }

  /** The `runbook-run-report/v1` as canonical JSON; final once the run has ended. */
  report() {
    return this.#call('report', (s) => s.report());
  }

  /**
   * The guard's needles (docs/spec/run.md#guarded-calls): what names the run's evidence, its approval channel, the registry
   * or the host, in every form the host knows them. A typed `invoke` whose tool name or any string of
   * whose arguments (keys included) contains one is fed as `guard: true`, and so recorded. Host
   * configuration, not run state: set it again after `restore`.
   */
  setGuard(needles) {
    const n = texts(needles, 'needles');
    this.#call('set-guard', (s) => s.setGuard(n));
  }

  /** Which of `offered` (the tools behind an adapter, in their order) a client may see now: the module's
   * rule (none once over; every declared tool at R0 or with `wholeAllowlist`; else the current step's). */
  visibleTools(offered, wholeAllowlist = false) {
    return this.#call('visible-tools', (s) => s.visibleTools(strList(offered, 'offered'), Boolean(wholeAllowlist)));
  }

  /** How the run ends when its client leaves (docs/spec/adapters.md#adapter-duties): `{ reason, finalOutput }`. */
  leaving(callsInFlight, lastCallTimedOut) {
    const l = this.#call('leaving', (s) => s.leaving(callsInFlight >>> 0, Boolean(lastCallTimedOut)));
    return { reason: l.reason, finalOutput: l.finalOutput };
  }

  /** The exit code of a process that ran this run: 0 only when it completed, 3 for a shadow run, else 1. */
  exitCode(shadow = false) {
    return this.#call('exit-code', (s) => s.exitCode(Boolean(shadow)));
  }

  /** The current step, what is in scope and what awaits a human, as canonical JSON. */
  status() {
    return this.#call('status', (s) => s.status());
  }

  /** True once the run has halted or ended. */
  isOver() {
    return this.#call('is-over', (s) => s.isOver());
  }

  /** The whole state as canonical JSON (`runbook-session-snapshot/v1`), for `Session.restore`. */
  snapshot() {
    return this.#call('snapshot', (s) => s.snapshot());
  }

  /** Whether the session's instance trapped (every call then throws ModuleTrap). */
  get trapped() {
    return this.#inst.trapped !== null;
  }

  /** Frees the session in the module (its own instance goes with it). Idempotent. */
  close() {
    const res = this.#res;
    if (!res) return;
    this.#res = null;
    // A trapped instance is never entered again, not even for a destructor: it is dropped whole.
    if (!this.#inst.trapped) this.#inst.call('drop', () => res[dispose]());
  }

  [dispose]() {
    this.close();
  }
}
