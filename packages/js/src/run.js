// The run driver in Node (docs/spec/README.md#architecture): one supervised run of one document, with the same run bundle as the
// Rust host (host/src/run.rs, host/src/bundle/), so `runbook-host verify` checks a bundle made here.
//
// An IO shell over the module: every byte of the bundle is composed by the module (`bundleCreate`,
// `bundleChange`, `bundleEnd`, and each event's `recordLine`). This file measures what the module cannot
// (the clock, the git state, the hashes of the files it wrote) and carries out the effects the module
// returns, in order, under the runs root: create a directory; replace a file atomically (a temporary file,
// fsync, rename); append one whole record and fsync it. Given the same facts, it writes what the Rust host
// writes, byte for byte.
//
// Each event is one method; each method makes one call into the module (`feed`: the decision, the chain
// link of docs/spec/bundle.md#the-hash-chain, the events.ndjson record, a sentence and the state come back together), appends the
// record to events.ndjson and fsyncs it, and only then returns the Answer.
//
// Fail closed: when the bundle cannot be written or the module traps, the run is broken: that call and
// every later one throw RunBroken (an adapter blocks the tool), and the bundle is ended without a report
// (`ended_without_report`: `bundle-unwritable`, or `host-trap` after a trap), which `verify` refuses.

import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inspect } from 'node:util';
import { InvalidInput, ModuleTrap, Policy, RunBroken, RunOver, RunTampered, documentBytes } from './core.js';
import { isObject } from './shared.js';

export const HOST_NAME = 'runbook-policy-js';
export const HOST_VERSION = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;

const SIGNATURES = 'signatures.ndjson';
const SHADOW = 'shadow.ndjson';
/** Where a document read from a path came from (host/src/registry.rs `Provenance` of a local file). */
const LOCAL_FILE = Object.freeze({ kind: 'file', registry: null, from_cache: null, signed_by: null, signature_expires: null });

const sha256Hex = (bytes) => createHash('sha256').update(bytes).digest('hex');
const randomHex = (n) => randomBytes(Math.ceil(n / 2)).toString('hex').slice(0, n);
const utf8 = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');

/** Runs `f` for what it owes after a failure; the first failure is the one reported, not this one. */
function quietly(f) {
  try {
    f();
  } catch {
    // the first error is what the caller hears about
  }
}

/** A single path component usable as a run id (host/src/bundle/files.rs `is_safe_name`). */
function isSafeName(name) {
  return typeof name === 'string' && name.length > 0 && name.length <= 128 && !name.startsWith('.') && /^[A-Za-z0-9._-]+$/.test(name);
}

/** Unix milliseconds from a clock, or InvalidInput. */
function unixMs(v) {
  if (typeof v === 'number' && v >= 0 && v <= 8.64e15) return Math.floor(v);
  throw new InvalidInput(`the run's clock must return Unix milliseconds (a non-negative number), not ${typeof v === 'number' ? v : typeof v}`);
}

/** A new run id: `r-<UTC time, basic format>-<12 random hex>`, never guessable from the time or the pid. */
function newRunId(ms) {
  const t = new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
  return `r-${t}-${randomHex(12)}`;
}

/** The name the module stores document bytes under (`runbook.json` for JSON, else `runbook.yaml`): the
 * reference of a document given as bytes without one. */
function fileNameFor(bytes) {
  let i = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  // Rust's is_ascii_whitespace: space, tab, line feed, form feed, carriage return.
  while (i < bytes.length && [0x20, 0x09, 0x0a, 0x0c, 0x0d].includes(bytes[i])) i++;
  return bytes[i] === 0x7b ? 'runbook.json' : 'runbook.yaml';
}

// ---- files ----------------------------------------------------------------------------------------------

function writeAll(fd, bytes) {
  let off = 0;
  while (off < bytes.length) off += fs.writeSync(fd, bytes, off, bytes.length - off);
}

/** Makes a rename or a new file in `dir` durable. Not every system can sync a directory; the data is. */
function syncDir(dir) {
  if (process.platform === 'win32') return;
  let fd;
  try {
    fd = fs.openSync(dir, 'r');
    fs.fsyncSync(fd);
  } catch {
    // e.g. EINVAL on file systems without directory fsync: the file's own fsync already ran
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** Writes `name` in `dir` atomically: a temporary file, fsync, rename (host/src/bundle/files.rs). */
function writeAtomic(dir, name, bytes) {
  const tmp = path.join(dir, `.${name}.${randomHex(8)}.tmp`);
  try {
    const fd = fs.openSync(tmp, 'wx', 0o644);
    try {
      writeAll(fd, bytes);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, path.join(dir, name));
  } catch (e) {
    // Nothing half written stays behind: the old file (if any) is untouched, the temporary one goes.
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  syncDir(dir);
}

/**
 * Appends one whole record to the open file `fd` in one write and fsyncs it. A disk that fills up or fails
 * mid-record has the partial record cut off again, so the file ends at its last whole record.
 */
function appendWhole(fd, bytes) {
  const whole = fs.fstatSync(fd).size;
  try {
    writeAll(fd, bytes);
    fs.fdatasyncSync(fd);
  } catch (e) {
    quietly(() => {
      fs.ftruncateSync(fd, whole);
      fs.fdatasyncSync(fd);
    });
    throw e;
  }
}

/**
 * Carries out the module's effects under `root`, in order, stopping at the first that fails: `{done,
 * error}`. A path is taken only when it is one or two components, each a safe name (never absolute, never
 * `..`): the module never names another, and a host never follows one.
 */
function apply(root, effects) {
  for (let i = 0; i < effects.length; i++) {
    const e = effects[i];
    try {
      const parts = e.path.split('/');
      if (parts.length > 2 || !parts.every(isSafeName)) throw new Error(`the module named the path \`${e.path}\``);
      const file = path.join(root, ...parts);
      switch (e.op) {
        case 'create-dir':
          fs.mkdirSync(file); // not recursive: an existing run directory is refused
          break;
        case 'write':
          writeAtomic(path.dirname(file), parts.at(-1), e.bytes);
          break;
        case 'append': {
          const fd = fs.openSync(file, 'a', 0o644);
          try {
            appendWhole(fd, e.bytes);
          } finally {
            fs.closeSync(fd);
          }
          break;
        }
        case 'sign':
          // Only a run.json that names a receipt key asks for a signature; this package holds none.
          throw new Error(`run.json names a receipt key, and this host holds none: cannot write ${e.path}`);
        default:
          throw new Error(`the module asked for an effect this host does not know (${e.op})`);
      }
    } catch (error) {
      return { done: i, error };
    }
  }
  return { done: effects.length, error: null };
}

// ---- git state ------------------------------------------------------------------------------------------

/**
 * Runs `git status --porcelain=v1 -z` in the working directory, bounded in time (host/src/bundle/git.rs):
 * `[exit code (null when it could not run or finish), output]`, which the module turns into counts only.
 */
function gitStatus() {
  return new Promise((resolve) => {
    execFile(
      'git',
      // No fsmonitor hook: reading the state of a checkout must not run a program its config names.
      ['-c', 'core.fsmonitor=false', 'status', '--porcelain=v1', '-z', '--', ':/', ':(exclude).runbook'],
      { env: { ...process.env, GIT_OPTIONAL_LOCKS: '0' }, encoding: 'buffer', timeout: 10_000, maxBuffer: 256 << 20, windowsHide: true },
      (err, stdout) => {
        const code = !err ? 0 : typeof err.code === 'number' && !err.killed ? err.code : null;
        resolve([code, stdout ?? Buffer.alloc(0)]);
      },
    );
  });
}

// ---- the guard ------------------------------------------------------------------------------------------

/**
 * What names the run's evidence or the supervisor itself (docs/spec/run.md#guarded-calls): the needles, each path in the forms
 * an agent may write it (as given, absolute, relative to the working directory). The module applies its
 * matching rule to them (`session.setGuard`): an invocation whose tool name or arguments (keys and values)
 * contain a needle is recorded with `guard: true`, and denied. Needles: `runbook-host`, this package's
 * directory, the runs directory and the run's.
 */
export class Guard {
  #needles = ['runbook-host'];

  /** Adds a path as given (without a leading `./`), canonical, and relative to the working directory. */
  addPath(p) {
    const given = String(p).replace(/^(\.\/)+/, '').replace(/\/+$/, '');
    const forms = [given];
    const real = (x) => {
      try {
        return fs.realpathSync(x);
      } catch {
        return undefined;
      }
    };
    const canonical = real(p);
    if (canonical) forms.push(canonical);
    if (path.isAbsolute(String(p))) {
      const cwd = process.cwd();
      for (const base of [cwd, real(cwd)].filter(Boolean)) {
        for (const full of [String(p), canonical].filter(Boolean)) {
          const rel = path.relative(base, full);
          if (rel && !rel.startsWith('..') && !path.isAbsolute(rel)) forms.push(rel);
        }
      }
    }
    // A form of 3 characters or fewer would match innocent text.
    for (const f of forms) if (f.length > 3 && !this.#needles.includes(f)) this.#needles.push(f);
    return this;
  }

  /** Adds a literal needle (a name that is not a path). */
  addName(name) {
    if (typeof name === 'string' && name.length > 3 && !this.#needles.includes(name)) this.#needles.push(name);
    return this;
  }

  get needles() {
    return [...this.#needles];
  }
}

const PACKAGE_DIR = path.dirname(fileURLToPath(new URL('../package.json', import.meta.url)));

// ---- the bundle -----------------------------------------------------------------------------------------

/** A run bundle being written (host/src/bundle/mod.rs `Bundle`): it carries out the module's effects. */
class Bundle {
  #policy;
  #now;
  #events = null;

  constructor(policy, now, root, runId, manifest) {
    this.#policy = policy;
    this.#now = now;
    this.root = root;
    this.runId = runId;
    this.dir = path.join(root, runId);
    /** run.json as last written: what the module changes next. */
    this.manifest = manifest;
    this.head = JSON.parse(manifest).chain_h0;
    this.lines = 0;
    /** The first recorded event line (the `start` claim), whose coverage run.json publishes on admission. */
    this.startLine = null;
    this.finished = false;
  }

  /**
   * Creates `<root>/<runId>/` (refusing an existing one) and the rest of the module's `bundle-create`
   * effects. `root` is created when missing. Until run.json is written the directory is no bundle, and one
   * that cannot be completed goes again; after that, it is ended without a report where the disk takes it.
   */
  static create(policy, now, root, runId, document, facts) {
    const effects = policy.bundleCreate(document, facts);
    const manifestAt = effects.findIndex((e) => e.op === 'write' && e.path === `${runId}/run.json`);
    if (manifestAt < 0) throw new Error('the module wrote no run.json');
    fs.mkdirSync(root, { recursive: true });
    const { done, error } = apply(root, effects);
    const bundle = () => new Bundle(policy, now, root, runId, utf8(effects[manifestAt].bytes));
    if (error) {
      if (done > manifestAt) quietly(() => bundle().endWithoutReport('bundle-unwritable'));
      else if (done > 0) fs.rmSync(path.join(root, runId), { recursive: true, force: true });
      throw error;
    }
    const b = bundle();
    try {
      b.#events = fs.openSync(path.join(b.dir, 'events.ndjson'), 'a');
    } catch (e) {
      quietly(() => b.endWithoutReport('bundle-unwritable'));
      throw e;
    }
    return b;
  }

  /**
   * Reopens `<root>/<runId>/` that another process created (host/src/bundle/mod.rs `Bundle::open`): run.json
   * as written, the document's bytes (`document`, under `documentFile`). The head stays run.json's
   * `chain_h0` until the caller has the records checked and continues the chain (`resumeChain`). A bundle
   * that ended (an outcome, `ended_without_report` or a receipt) opens as finished.
   */
  static open(policy, now, root, runId) {
    const dir = path.join(root, runId);
    const manifest = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(fs.readFileSync(path.join(dir, 'run.json')));
    const m = JSON.parse(manifest);
    if (!(isObject(m) && m.schema === 'runbook-run-bundle/v1' && m.run_id === runId)) throw new Error(`run.json is not the runbook-run-bundle/v1 of run ${runId}`);
    const b = new Bundle(policy, now, root, runId, manifest);
    b.documentFile = m.artifacts?.document;
    if (!['runbook.yaml', 'runbook.json'].includes(b.documentFile)) throw new Error('run.json names no document');
    b.document = new Uint8Array(fs.readFileSync(path.join(dir, b.documentFile)));
    b.finished = (m.outcome ?? null) !== null || Object.hasOwn(m, 'ended_without_report') || fs.existsSync(path.join(dir, 'receipt.json'));
    return b;
  }

  /** Continues the chain after `lines` records ending in `head` (checked by the module) and opens events.ndjson to append. */
  resumeChain(head, lines) {
    this.#events = fs.openSync(path.join(this.dir, 'events.ndjson'), fs.constants.O_WRONLY | fs.constants.O_APPEND);
    this.head = head;
    this.lines = lines;
  }

  /** Appends the module's record of one event (whose link is `h`) in one write, fsync'd before returning. */
  append(eventLine, recordLine, h) {
    if (this.finished) throw new Error('the bundle is finished');
    appendWhole(this.#events, Buffer.from(recordLine, 'utf8'));
    if (this.lines === 0) this.startLine = eventLine;
    this.head = h;
    this.lines += 1;
  }

  /** Records admission or refusal in run.json's lifecycle, with the `start` claim's coverage. */
  admitted(yes) {
    this.#carryOut(this.#policy.bundleChange(this.manifest, { lifecycle: yes ? 'admitted' : 'refused', at: this.#now(), start: this.startLine }));
  }

  /**
   * Ends the bundle with the module's report: report.json, run.json, receipt.json, latest.json (when it
   * still names this run) and the `ended` history line, from the hashes of the files as written.
   */
  finish(report) {
    if (this.finished) throw new Error('the bundle is already finished');
    const artifacts = JSON.parse(this.manifest).artifacts;
    const files = [artifacts.document, 'events.ndjson'];
    if (typeof artifacts.envelope === 'string') files.push('envelope.json');
    for (const f of [SIGNATURES, SHADOW]) if (fs.existsSync(path.join(this.dir, f))) files.push(f);
    const hashes = {};
    for (const f of files) {
      if (!isSafeName(f)) throw new Error(`run.json names the file \`${f}\``);
      hashes[f] = sha256Hex(fs.readFileSync(path.join(this.dir, f)));
    }
    this.#end(report, { at: this.#now(), chain_head: this.head, hashes, latest: this.#latest() });
  }

  /** Ends a bundle with no report to end with: `verify` refuses it, the events stay. */
  endWithoutReport(code) {
    if (this.finished) throw new Error('the bundle is already finished');
    this.#end(null, { at: this.#now(), ended_without_report: code, latest: this.#latest() });
  }

  hasReceipt() {
    return fs.existsSync(path.join(this.dir, 'receipt.json'));
  }

  #end(report, facts) {
    let error = null;
    try {
      this.#carryOut(this.#policy.bundleEnd(this.manifest, report, facts));
    } catch (e) {
      error = e;
    }
    // Once run.json says the run ended, it has: a later failure (latest.json, history) does not reopen it.
    if (error === null || JSON.parse(this.manifest).lifecycle.some((l) => l.event === 'ended')) {
      this.finished = true;
      if (this.#events !== null) {
        const fd = this.#events;
        this.#events = null;
        fs.closeSync(fd);
      }
    }
    if (error !== null) throw error;
  }

  /** Carries out effects; run.json is then what the last one carried out wrote. */
  #carryOut(effects) {
    const { done, error } = apply(this.root, effects);
    const written = effects.slice(0, done).findLast((e) => e.path === `${this.runId}/run.json`);
    if (written) this.manifest = utf8(written.bytes);
    if (error) throw error;
  }

  #latest() {
    try {
      return fs.readFileSync(path.join(this.root, 'latest.json'), 'utf8');
    } catch {
      return null;
    }
  }
}

// ---- malformed events -----------------------------------------------------------------------------------

/** The most characters of a malformed event's text that are recorded (the module's own limit on a line is
 * 1 MiB, beyond which it halts with reason `limit` instead of `malformed-event`). */
const MALFORMED_MAX_CHARS = 4096;
const MALFORMED_PREFIX = 'malformed event: ';

/** The event line `run.feedMalformed(text)` feeds: one line, at most MALFORMED_MAX_CHARS characters of the
 * text, never a JSON object. */
function malformedLine(text) {
  let line;
  if (typeof text === 'string') line = text;
  else {
    try {
      line = inspect(text, { depth: 6, breakLength: Infinity, maxStringLength: MALFORMED_MAX_CHARS, maxArrayLength: 100 });
    } catch (e) {
      line = `<a ${typeof text} that cannot be shown: ${e?.name ?? 'error'}>`;
    }
  }
  // A lone surrogate has no UTF-8 form: U+FFFD stands for it (as the string crosses into the module anyway).
  line = line.toWellFormed();
  // One line, whoever reads it: every line break (\r\n, \n, \r, U+2028, ...) is a space.
  line = line.split(/\r\n|[\n\v\f\r\x1c-\x1e\x85\u2028\u2029]/).join(' ');
  if (line.length > MALFORMED_MAX_CHARS) {
    line = `${line.slice(0, MALFORMED_MAX_CHARS).toWellFormed()} ... (${line.length - MALFORMED_MAX_CHARS} more characters not recorded)`;
  }
  // The module decides a line that is a JSON object as the event it may be: such a text never goes as it is.
  if (/^[\s\ufeff]*(\{|$)/.test(line)) line = MALFORMED_PREFIX + line;
  return line;
}

// ---- the run --------------------------------------------------------------------------------------------

const TOKEN = Symbol('runbook-policy run');

function answerOf(rec, callSha256 = null) {
  return Object.freeze({
    decision: rec.decision,
    kind: rec.decision.kind,
    allowed: rec.decision.kind === 'allow',
    explanation: rec.explanation,
    state: rec.state,
    eventLine: rec.eventLine,
    decisionLine: rec.decisionLine,
    link: rec.link,
    callSha256,
  });
}

function options(opts, keys, what) {
  if (opts === undefined) return {};
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) throw new InvalidInput(`${what}: the options must be an object`);
  for (const k of Object.keys(opts)) if (!keys.includes(k)) throw new InvalidInput(`${what}: unknown option \`${k}\` (${keys.join(', ')})`);
  return opts;
}


/** The options Run.create and Run.resume share: the clock, the runs root, and the guard they make. */
function common(o, what) {
  const clock = o.clock ?? Date.now;
  if (typeof clock !== 'function') throw new InvalidInput(`${what}: \`clock\` must be a function returning Unix milliseconds`);
  const runsRoot = o.runsRoot ?? path.join('.runbook', 'runs');
  if (typeof runsRoot !== 'string' || runsRoot === '') throw new InvalidInput(`${what}: \`runsRoot\` must be a path`);
  const guardPaths = o.guardPaths ?? [];
  if (!Array.isArray(guardPaths) || !guardPaths.every((p) => typeof p === 'string')) throw new InvalidInput(`${what}: \`guardPaths\` must be a list of paths`);
  const guardFor = (dir) => {
    const guard = new Guard().addPath(PACKAGE_DIR).addPath(runsRoot).addPath(dir);
    for (const p of guardPaths) guard.addPath(p);
    return guard;
  };
  return { now: () => unixMs(clock()), runsRoot, guardFor };
}

// ---- a gated call ---------------------------------------------------------------------------------------

const TIMED_OUT = Symbol('timed out');
const ABORTED = Symbol('aborted');
/** The longest wait setTimeout takes (about 24.8 days); a longer `approvalTimeout` waits that long. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** What an approval request always holds: `request` (the adapter's own fields) may not set these. */
const REQUEST_FIELDS = ['runId', 'step', 'tool', 'arguments', 'callSha256', 'explanation'];

/** `parts` as one sentence: the module's explanation (with its full stop) and what followed, joined by semicolons, one full stop at the end. */
const sentence = (parts) => (parts.length === 1 ? parts[0] : `${parts.map((p) => p.trimEnd().replace(/\.$/, '')).join('; ')}.`);

/** A Gated: how a call that may need approval was decided (see `Run.invokeWithApproval`). */
function gated(answer, approval = null, problem = null) {
  const message = answer.allowed ? '' : sentence(problem === null ? [answer.explanation] : [answer.explanation, problem]);
  return Object.freeze({ answer, approval, problem, allowed: answer.allowed, message });
}

/** The name of what an approval callback threw (its `name`, else its type), never throwing itself. */
function thrownName(e) {
  try {
    return e?.name ?? typeof e;
  } catch {
    return typeof e;
  }
}

/** `{approver, granted}` of an approval callback's answer, each read once; null when it is no such answer. */
function approvalAnswer(got) {
  if (!isObject(got)) return null;
  try {
    const { approver, granted } = got;
    // An approver the module could not take (a lone surrogate) is no answer either: nothing is fed.
    if (typeof approver !== 'string' || approver === '' || !approver.isWellFormed() || typeof granted !== 'boolean') return null;
    return { approver, granted };
  } catch {
    return null; // a getter that throws
  }
}

/** One supervised run with its bundle. Made by `await Run.create(policy, options)` or `Run.resume(policy, runId, options)`. */
export class Run {
  #policy;
  #session;
  #bundle;
  #guard;
  /** Unix milliseconds from the run's clock. */
  #now;
  #t0;
  #lastAt = 0;
  /** How many of the guard's needles the session was given. */
  #guarded;
  #broken = null;
  // Set first, by plain assignments, when the run breaks: near the stack limit (or out of memory) even
  // building the error can fail, and the run must stay broken whatever happens after these two lines.
  #poisoned = false;
  #cause = undefined;
  #what = '';
  #state = null;
  #start = null;

  constructor(token, fields) {
    if (token !== TOKEN) throw new TypeError('a Run is made by Run.create() or Run.resume()');
    this.#policy = fields.policy;
    this.#session = fields.session;
    this.#bundle = fields.bundle;
    this.#guard = fields.guard;
    this.#guarded = fields.guard.needles.length;
    this.#now = fields.now;
    this.#t0 = fields.t0 ?? fields.now();
    this.#lastAt = fields.lastAt ?? 0;
  }

  /**
   * Creates the bundle under `runsRoot` and feeds the `start` claim. A refused run is a run too: its bundle
   * is finished (outcome `refused`), `run.start` is the `halt` with the refusals and `run.over` is true.
   *
   * options: `document` (bytes, or a path as a string or file: URL), `agent`, `profile` (R0|R1|R2),
   * `riskCeiling`, `coverage` ("complete" or the list of what the adapter cannot see), and optionally
   * `allowlist` (["*"]), `available`, `runsRoot` (".runbook/runs"), `runId` (a new one), `reference` (the
   * document's file name), `adapter` ("library"), `guardPaths` (more paths the agent must not touch).
   * The facts a bundle records, fixed by tests and the conformance vectors so that every host writes the
   * same bytes: `clock` (a function returning Unix milliseconds; Date.now), which gives the bundle's times
   * and every event's `at` (milliseconds since the run began); `host` ({name, version}; this package's);
   * `git` (the `source.git` object; measured with `git status` in the working directory).
   */
  static async create(policy, opts) {
    if (!(policy instanceof Policy)) throw new InvalidInput('Run.create needs the Policy from load()');
    const o = options(
      opts,
      ['document', 'agent', 'profile', 'riskCeiling', 'coverage', 'allowlist', 'available', 'runsRoot', 'runId', 'reference', 'adapter', 'guardPaths', 'clock', 'host', 'git'],
      'Run.create',
    );
    // The document: bytes, or a path (its reference, which the module cuts to the file's name).
    let bytes;
    let fileReference = null;
    if (typeof o.document === 'string' || o.document instanceof URL) {
      const file = o.document instanceof URL ? fileURLToPath(o.document) : o.document;
      if (typeof o.document === 'string' && o.document.includes('\n')) {
        throw new InvalidInput('Run.create: `document` is a path (a string) or bytes; for document text pass new TextEncoder().encode(text)');
      }
      try {
        bytes = new Uint8Array(fs.readFileSync(file));
      } catch (e) {
        throw new InvalidInput(`Run.create: cannot read the document ${file}: ${e.code ?? e.message}`);
      }
      fileReference = file;
    } else {
      bytes = documentBytes(o.document, 'Run.create: `document`');
    }
    if (o.reference !== undefined && (typeof o.reference !== 'string' || o.reference === '')) throw new InvalidInput('Run.create: `reference` must be a non-empty string');
    const reference = o.reference ?? fileReference ?? fileNameFor(bytes);
    const { now, runsRoot, guardFor } = common(o, 'Run.create');
    const host = o.host ?? { name: HOST_NAME, version: HOST_VERSION };
    if (!(isObject(host) && typeof host.name === 'string' && host.name !== '' && typeof host.version === 'string' && host.version !== '')) {
      throw new InvalidInput('Run.create: `host` must be {name, version}, two non-empty strings');
    }
    if (o.git !== undefined && !isObject(o.git)) throw new InvalidInput('Run.create: `git` must be an object (the `source.git` of run.json)');
    const runId = o.runId ?? newRunId(now());
    if (!isSafeName(runId)) throw new InvalidInput(`Run.create: \`${runId}\` is not a usable run id (letters, digits, . _ -, not starting with .)`);
    const adapterName = o.adapter ?? 'library';
    if (typeof adapterName !== 'string' || adapterName === '') throw new InvalidInput('Run.create: `adapter` must be a non-empty string');
    // The claim is the embedder's configuration: a malformed one is refused before anything is written.
    const start = { type: 'start', runId, profile: o.profile, allowlist: o.allowlist ?? ['*'], riskCeiling: o.riskCeiling, coverage: o.coverage, agent: o.agent, available: o.available };
    try {
      policy.encodeEvent(start, 0);
    } catch (e) {
      if (e instanceof InvalidInput) throw new InvalidInput(`Run.create: the start claim is malformed: ${e.message.replace(/^malformed event: /, '')}`);
      throw e;
    }

    // Measured before the bundle exists, so the run's own files do not count.
    const git = o.git ?? JSON.parse(policy.gitState(...(await gitStatus())));
    const facts = {
      run_id: runId,
      at: now(),
      reference,
      trust: 'T1',
      pinned_sha256: null,
      provenance: LOCAL_FILE,
      module_sha256: policy.sha256,
      host: { name: host.name, version: host.version },
      adapter: adapterName,
      git,
    };
    let bundle;
    try {
      bundle = Bundle.create(policy, now, runsRoot, runId, bytes, facts);
    } catch (e) {
      throw new RunBroken(`cannot create the run bundle under ${runsRoot}: ${e.message}`, { cause: e });
    }
    const guard = guardFor(bundle.dir);
    let session;
    try {
      session = policy.session(bytes);
      session.setGuard(guard.needles);
    } catch (e) {
      quietly(() => bundle.endWithoutReport('host-trap'));
      throw new RunBroken(`run ${runId}: the policy module cannot start a session: ${e.message}`, { cause: e });
    }
    const run = new Run(TOKEN, { policy, session, bundle, guard, now });
    const answer = run.#feed(start);
    try {
      bundle.admitted(answer.allowed);
    } catch (e) {
      run.#endUnwritable();
      throw run.#fail(e, 'cannot record the admission in run.json');
    }
    run.#start = answer;
    if (!answer.allowed) run.#finish();
    return run;
  }

  /**
   * Reopens the run `runId` under `runsRoot` in another process (this one may have exited without `end`),
   * as host/src/run.rs `Run::resume` does, so that later events and `end` write what one Run would have:
   * the module derives the chain's h0 again from the document (never read from run.json) and checks that
   * run.json's `document.sha256` and `chain_h0` and the `pin` kept when the run began (`run.pin`) name it
   * (`session.chainStart`); then the module replays every record of events.ndjson, checking its form,
   * link and decision, and the run goes on from its head. Throws RunTampered for evidence that does not
   * check out, RunOver for a finished bundle, RunBroken when the bundle cannot be read or its run takes
   * signed approvals or a signed receipt (this package checks no SSH signature and holds no key).
   *
   * options: `t0` (required): the run's wall-clock start in Unix milliseconds, `run.t0` of the Run that
   * created it (every event's `at` counts from it); `runsRoot`, `clock`, `guardPaths` as for `create`;
   * `pin`: `{documentSha256, chainH0}`. `run.start` is null.
   */
  static resume(policy, runId, opts) {
    if (!(policy instanceof Policy)) throw new InvalidInput('Run.resume needs the Policy from load()');
    const o = options(opts, ['runsRoot', 't0', 'pin', 'clock', 'guardPaths'], 'Run.resume');
    const { now, runsRoot, guardFor } = common(o, 'Run.resume');
    if (!isSafeName(runId)) throw new InvalidInput(`Run.resume: \`${runId}\` is not a usable run id`);
    if (!(Number.isSafeInteger(o.t0) && o.t0 >= 0)) throw new InvalidInput("Run.resume: `t0` must be the run's start in Unix milliseconds (`run.t0`)");
    const pin = o.pin ?? null;
    if (!(pin === null || (isObject(pin) && typeof pin.documentSha256 === 'string' && typeof pin.chainH0 === 'string'))) throw new InvalidInput('Run.resume: `pin` must be {documentSha256, chainH0}');
    let bundle;
    let events;
    try {
      bundle = Bundle.open(policy, now, runsRoot, runId);
      events = fs.readFileSync(path.join(bundle.dir, 'events.ndjson'));
    } catch (e) {
      throw new RunBroken(`run ${runId}: cannot open the run bundle under ${runsRoot}: ${e.message}`, { cause: e });
    }
    if (bundle.finished) throw new RunOver(`run ${runId} is finished and its evidence is sealed: it cannot be resumed; start a new run`);
    const m = JSON.parse(bundle.manifest);
    // Fail closed: this package neither checks SSH signatures nor holds a receipt key.
    if (m.approvals?.signed === true || (m.receipt_signature ?? null) !== null) throw new RunBroken(`run ${runId} takes signed approvals or a signed receipt, which this package cannot check or make: resume it with runbook-host`);
    const session = policy.session(bundle.document);
    const guard = guardFor(bundle.dir);
    let replayed;
    let state;
    try {
      // The module checks that run.json (and the pin) name this document and derives h0, then checks
      // every record (its form, its link, its decision) in one call.
      const h0 = session.chainStart(bundle.manifest, pin === null ? null : [pin.documentSha256, pin.chainH0]);
      replayed = session.replayEvents(events, h0);
      session.setGuard(guard.needles);
      state = session.state();
      bundle.resumeChain(replayed.head, replayed.events);
    } catch (e) {
      session.close();
      if (e instanceof RunTampered || e instanceof ModuleTrap) throw e;
      throw new RunBroken(`run ${runId}: cannot resume: ${e.message}`, { cause: e });
    }
    const run = new Run(TOKEN, { policy, session, bundle, guard, now, t0: o.t0, lastAt: replayed.lastAt });
    run.#state = state;
    return run;
  }

  /** The answer to the `start` claim (a `halt` with `refusals` when the run was refused); null when resumed. */
  get start() {
    return this.#start;
  }

  get runId() {
    return this.#bundle.runId;
  }

  /** The run's directory (`<runsRoot>/<runId>`). */
  get dir() {
    return this.#bundle.dir;
  }

  /** The run's wall-clock start (Unix ms): every `at` counts from it; `Run.resume` takes it again. */
  get t0() {
    return this.#t0;
  }

  /** What to keep outside the bundle to resume the run (`Run.resume`'s `pin`): the document's sha256, the chain's h0. */
  get pin() {
    const m = JSON.parse(this.#bundle.manifest);
    return Object.freeze({ documentSha256: m.document.sha256, chainH0: m.chain_h0 });
  }

  /** The chain's head so far (the last recorded link). */
  get head() {
    return this.#bundle.head;
  }

  get guard() {
    return this.#guard;
  }

  /** True once the run halted or ended (or was refused), or broke. */
  get over() {
    return this.#poisoned || this.#bundle.finished || this.#state?.phase === 'over';
  }

  /** True once the bundle is finished (report and receipt written, or ended without a report). */
  get finished() {
    return this.#bundle.finished;
  }

  /** Why the run broke (a RunBroken), or null. */
  get broken() {
    return this.#poisoned ? this.#settle() : null;
  }

  /** Milliseconds since the start, never lower than the last event's. */
  #nowAt() {
    const at = Math.max(this.#now() - this.#t0, this.#lastAt);
    this.#lastAt = at;
    return at;
  }

  /** Breaks the run: marks it (assignments only), then settles it; returns the RunBroken to throw. */
  #fail(e, what) {
    this.#poisoned = true;
    this.#cause ??= e;
    if (!this.#what) this.#what = what;
    return this.#settle();
  }

  /**
   * What a broken run owes, tried again at every later call until it is done: after a trap (the session's
   * instance is marked), the bundle ends without a report; the RunBroken names why.
   */
  #settle() {
    const e = this.#cause;
    const trapped = e instanceof ModuleTrap || this.#session.trapped;
    // verify refuses a bundle without a report either way; the trap is what the caller hears about.
    if (trapped && !this.#bundle.finished) quietly(() => this.#bundle.endWithoutReport('host-trap'));
    if (this.#broken) return this.#broken;
    const why = trapped ? 'the policy module trapped' : this.#what || 'a call failed part way';
    this.#broken = new RunBroken(`run ${this.runId}: ${why}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    return this.#broken;
  }

  /**
   * After a write of the evidence failed: the bundle is ended without a report where the disk still takes
   * it (`bundle-unwritable`), unless its receipt was written already (the receipt pins run.json).
   */
  #endUnwritable() {
    if (!this.#bundle.finished && !this.#bundle.hasReceipt()) quietly(() => this.#bundle.endWithoutReport('bundle-unwritable'));
  }

  #check() {
    if (this.#poisoned) throw new RunBroken(`run ${this.runId} is broken and records nothing more (${this.#settle().message})`, { cause: this.#broken });
  }

  /** One event: one call into the module, then the record, fsync'd, then the answer. */
  #feed(event, callSha256 = () => null) {
    return this.#record(event.type, (prev) => this.#session.feed(event, this.#nowAt(), prev), callSha256);
  }

  /** One event line (the wire path): one call into the module, then the record, then the answer. */
  #feedLine(what, line) {
    return this.#record(what, (prev) => this.#session.feedLine(line, prev));
  }

  #record(what, call, callSha256 = () => null) {
    this.#check();
    if (this.#bundle.finished) throw new RunOver(`run ${this.runId} is over and its evidence is sealed; start a new run`);
    let rec;
    try {
      rec = call(this.#bundle.head);
    } catch (e) {
      // The calling code's mistake (text the module cannot take, a clock that is no clock): nothing was fed.
      if (e instanceof InvalidInput) throw e;
      // No module to vouch for a report or a link: after a trap the bundle ends without one (verify
      // refuses it). Any other failure inside the call may have left the session a step ahead of the
      // bundle: broken too.
      throw this.#fail(e, `the policy module failed on the ${what} event`);
    }
    try {
      this.#bundle.append(rec.eventLine, rec.recordLine, rec.link);
    } catch (e) {
      this.#endUnwritable();
      throw this.#fail(e, `cannot record the event in ${path.join(this.dir, 'events.ndjson')}`);
    }
    this.#state = rec.state;
    return answerOf(rec, rec.decision.kind === 'needs-approval' ? callSha256() : null);
  }

  /**
   * A tool call, before it runs. The guard (docs/spec/run.md#guarded-calls) is applied by the module, to the needles of
   * `run.guard`. Run the tool only when `answer.allowed`; a `needs-approval` answer carries the
   * `callSha256` an approval bound to it names.
   */
  invoke(tool, args, opts) {
    const { callId, step } = options(opts, ['callId', 'step'], 'invoke');
    const event = { type: 'invoke', tool, arguments: args, callId, step };
    return this.#record(
      'invoke',
      (prev) => {
        // Needles added to `run.guard` since the last call go to the module first.
        const needles = this.#guard.needles;
        if (needles.length !== this.#guarded) {
          this.#session.setGuard(needles);
          this.#guarded = needles.length;
        }
        return this.#session.feed(event, this.#nowAt(), prev);
      },
      () => this.callSha256(tool, args),
    );
  }

  /** The tool's result (what the adapter observes, docs/spec/adapters.md#observations-per-adapter). */
  result(tool, result, opts) {
    const { isError, callId } = options(opts, ['isError', 'callId'], 'result');
    return this.#feed({ type: 'result', tool, result, isError: isError ?? false, callId });
  }

  /**
   * Records an event of the framework that is not of the shape it promised (a hook input without a tool
   * name, arguments that are not an object, ...): `text` is fed to the module as an event line (the
   * session's `feedLine`), which the module decides `halt` with reason `malformed-event` (`halted` once the
   * run is over), never an allow. It is recorded in events.ndjson as any event is (a line that is not a
   * JSON object is stored as a JSON string holding it), so `runbook-host verify` replays it to the same
   * decision.
   *
   * `text` is the framework's input as it came (JSON-encoded, or inspected, when it is not text; anything
   * else given is inspected here), best preceded by why it is malformed. It is made one line (line breaks
   * become spaces, a lone surrogate U+FFFD) of at most MALFORMED_MAX_CHARS characters (longer text is cut,
   * and says so); an empty text, or one that begins with `{`, is prefixed with `malformed event: `, so that
   * no payload can be read as an event object and decided as one. Throws RunBroken as every event does
   * when the run cannot record.
   */
  feedMalformed(text) {
    return this.#feedLine('malformed', malformedLine(text));
  }

  /**
   * The wire path: one event line (docs/spec/run.md#events), fed and recorded exactly as given, whatever it holds (a
   * line that is not an event halts the run with `malformed-event`). For a host that replays lines or
   * speaks the wire format; the guard's needles apply to typed calls only (`invoke`). Text that has no
   * UTF-8 form (a lone surrogate) is refused with InvalidInput, and nothing is recorded.
   */
  feedLine(line) {
    if (typeof line !== 'string') throw new InvalidInput(`feedLine: the line must be a string, not ${typeof line}`);
    return this.#feedLine('line', line);
  }

  /**
   * A human's approval (never the agent's: the module refuses those), of a step or of one call. `request`:
   * the `seq` of the module's `needs-approval` decision the answer answers (for a call-bound answer without
   * one, the module names its pending request for the call, docs/spec/run.md#approvals-bound-to-a-call).
   */
  approval(approver, granted, opts) {
    const { step, callSha256, request } = options(opts, ['step', 'callSha256', 'request'], 'approval');
    return this.#feed({ type: 'approval', approver, granted, step, callSha256, request });
  }

  /** R1: the client moves the run to `step`. */
  advance(step) {
    return this.#feed({ type: 'advance', step });
  }

  /** A human's ruling on an unevaluable step. */
  verdict(step, passed, by) {
    return this.#feed({ type: 'verdict', step, passed, by });
  }

  /** The model's final answer was given. */
  finalOutput() {
    return this.#feed({ type: 'final_output' });
  }

  /** Time passed (checkpoint deadlines). */
  tick() {
    return this.#feed({ type: 'tick' });
  }

  /** A `tick` when a checkpoint deadline has passed, else null (for adapters without a timer). */
  tickIfDue() {
    const wait = this.msUntilDeadline();
    return wait !== null && wait <= 0 ? this.tick() : null;
  }

  /** Milliseconds until a checkpoint deadline passes (then call `tick`), or null when none is pending. */
  msUntilDeadline() {
    this.#check();
    if (this.#bundle.finished) return null;
    const due = this.state().nextDeadline;
    if (due === null) return null;
    return due - Math.max(this.#now() - this.#t0, this.#lastAt);
  }

  /**
   * Ends the run: `end {reason}` unless the module already ended it, then the bundle is finished with the
   * report and the receipt. Returns the outcome. Idempotent.
   */
  end(reason = 'normal') {
    this.#check();
    if (!this.#bundle.finished) {
      if (this.state().phase !== 'over') this.#feed({ type: 'end', reason });
      this.#finish();
    }
    return this.state().outcome;
  }

  #finish() {
    let report;
    try {
      report = this.#session.report();
    } catch (e) {
      throw this.#fail(e, 'cannot finish the bundle');
    }
    try {
      this.#bundle.finish(report);
    } catch (e) {
      this.#endUnwritable();
      throw this.#fail(e, 'cannot finish the bundle');
    }
  }

  /** The typed state after the last event. */
  state() {
    this.#check();
    this.#state ??= this.#session.state();
    return this.#state;
  }

  /** The run report (canonical JSON; final once the run has ended). */
  report() {
    this.#check();
    return this.#session.report();
  }

  /** Which of `offered` a client may see now (the module's rule; see `Session.visibleTools`). */
  visibleTools(offered, wholeAllowlist = false) {
    this.#check();
    return this.#session.visibleTools(offered, wholeAllowlist);
  }

  /**
   * How the run ends when its client leaves (the module's rule, docs/spec/adapters.md#adapter-duties): `{reason, finalOutput}`.
   * Feed `finalOutput()` first when it says so and the run is not over, then `end(reason)`.
   */
  leaving(callsInFlight = 0, lastCallTimedOut = false) {
    this.#check();
    if (!(Number.isSafeInteger(callsInFlight) && callsInFlight >= 0)) throw new InvalidInput('leaving: `callsInFlight` must be a non-negative integer');
    return this.#session.leaving(Math.min(callsInFlight, 2 ** 32 - 1), lastCallTimedOut);
  }

  /** The exit code of a process that ran this run (the module's rule: 0 only when it completed). */
  exitCode() {
    return this.#session.exitCode(false);
  }

  /** The hash an approval bound to this call names (docs/spec/run.md#approvals-bound-to-a-call). */
  callSha256(tool, args) {
    return this.#policy.callSha256(tool, args);
  }

  // ---- a gated call, for adapters ----

  /**
   * A tool call that may be held for a person (the one implementation every adapter uses): `invoke`; on
   * `needs-approval` the embedding program's `approve(request, {signal})` is asked (sync or async), its
   * `{approver, granted}` is fed as an approval bound to this call's hash (and to the module's request,
   * its `seq`), and a granted, accepted approval is followed by the same `invoke` again, which the module
   * now decides. Resolves to a frozen Gated `{answer, approval, problem, allowed, message}`.
   *
   * Fail closed: no callback, a callback that throws or rejects, no answer within `approvalTimeout`
   * seconds, `signal` aborting while it waits, or an answer that is not `{approver, granted}` (an approver
   * a non-empty string, `granted` a boolean): nothing is fed, the call stays blocked. A refusal, or an
   * approval the module does not accept, is fed and the call stays blocked. The callback's `signal` aborts
   * once the wait is over, whatever ended it; an answer after that is never fed. Throws what `invoke` and
   * `approval` throw (RunBroken, InvalidInput, ...), and RunOver when the run was finished while the call
   * waited (nothing more is fed then).
   *
   * options: `callId`, `step` (as for `invoke`); `approve` (null: no callback); `approvalTimeout` (seconds;
   * null or absent: no limit); `signal` (the framework's AbortSignal, when it may give up on the call);
   * `request` (the adapter's own fields for the request, such as the framework's call id, beside
   * `runId`, `step`, `tool`, `arguments`, `callSha256` and `explanation`, which it may not set).
   */
  async invokeWithApproval(tool, args, opts) {
    const what = 'invokeWithApproval';
    const o = options(opts, ['callId', 'step', 'approve', 'approvalTimeout', 'signal', 'request'], what);
    const approve = o.approve ?? null;
    const timeout = o.approvalTimeout ?? null;
    const signal = o.signal ?? null;
    const extra = o.request ?? {};
    if (approve !== null && typeof approve !== 'function') throw new InvalidInput(`${what}: \`approve\` must be a function`);
    if (timeout !== null && !(typeof timeout === 'number' && timeout > 0 && Number.isFinite(timeout))) {
      throw new InvalidInput(`${what}: \`approvalTimeout\` must be a positive number of seconds`);
    }
    if (signal !== null && !(typeof signal === 'object' && typeof signal.aborted === 'boolean' && typeof signal.addEventListener === 'function')) {
      throw new InvalidInput(`${what}: \`signal\` must be an AbortSignal`);
    }
    if (!isObject(extra)) throw new InvalidInput(`${what}: \`request\` must be an object`);
    for (const k of REQUEST_FIELDS) if (Object.hasOwn(extra, k)) throw new InvalidInput(`${what}: \`request\` may not set \`${k}\` (the request's own)`);

    const first = this.invoke(tool, args, { callId: o.callId, step: o.step });
    if (first.kind !== 'needs-approval') return gated(first);
    const blocked = (problem) => gated(first, null, `${problem}, so the call stays blocked`);
    if (approve === null) return blocked('no approval callback was given');
    // The framework gave up on the call before anyone was asked.
    if (signal?.aborted) return blocked('the wait for approval was aborted');
    const step = first.decision.step;
    const sha = first.callSha256;
    const request = Object.freeze({ runId: this.runId, step, tool, arguments: args, callSha256: sha, explanation: first.explanation, ...extra });
    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let timer;
    let got;
    try {
      const waits = [
        (async () => approve(request, { signal: ctrl.signal }))(),
        // Registered after the callback ran: it may have aborted the framework's signal already.
        new Promise((resolve) => (ctrl.signal.aborted ? resolve(ABORTED) : ctrl.signal.addEventListener('abort', () => resolve(ABORTED), { once: true }))),
      ];
      if (timeout !== null) {
        waits.push(
          new Promise((resolve) => {
            timer = setTimeout(() => resolve(TIMED_OUT), Math.min(timeout * 1000, MAX_TIMER_MS));
          }),
        );
      }
      got = await Promise.race(waits);
    } catch (e) {
      // The embedding program's callback failed: block, never allow.
      const name = thrownName(e);
      process.emitWarning(`runbook: the approval callback threw (${name}); the call ${sha} is blocked`);
      return blocked(`the approval callback failed (${name})`);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      ctrl.abort();
    }
    // The framework stopped waiting (it blocked the call on its side): nothing more is fed.
    if (got === ABORTED || signal?.aborted) return blocked('the wait for approval was aborted');
    if (got === TIMED_OUT) return blocked(`no approval came within ${timeout} s`);
    const answer = approvalAnswer(got);
    if (answer === null) return blocked('the approval callback answered no {approver, granted}');
    if (this.finished) throw new RunOver(`run ${this.runId} is over and its evidence is sealed; start a new run`);
    const approval = this.approval(answer.approver, answer.granted, { step, callSha256: sha, request: first.decision.seq ?? null });
    if (!approval.allowed) return gated(first, approval, `the approval was not accepted: ${approval.explanation}`);
    if (!answer.granted) return gated(first, approval, `${answer.approver} refused to approve this call`);
    return gated(this.invoke(tool, args, { callId: o.callId, step: o.step }), approval);
  }
}
