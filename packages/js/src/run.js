// The run driver in Node (DESIGN 11): one supervised run of one document, with the same run bundle as the
// Rust host (host/src/run.rs, host/src/bundle/), so `runbook-host verify` checks a bundle made here.
//
// Each event is one method; each method makes one call into the module (`feed`: the canonical event line,
// the decision, the chain link of DESIGN 9.22, a sentence and the state come back together), appends the
// event and its decision to events.ndjson and fsyncs it, and only then returns the Answer. Files other than
// events.ndjson are replaced atomically (a temporary file, fsync, rename).
//
// Fail closed: when the bundle cannot be written or the module traps, the run is broken: that call and
// every later one throw RunBroken (an adapter blocks the tool), and after a trap the bundle is ended
// without a report (`ended_without_report: host-trap`), which `verify` refuses.

import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inspect } from 'node:util';
import { InvalidDocument, InvalidInput, ModuleTrap, Policy, RunBroken, RunOver, documentBytes, jsonText } from './core.js';

export const HOST_NAME = 'runbook-policy-js';
export const HOST_VERSION = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;

const RUN_SCHEMA = 'runbook-run-bundle/v1';
const RECEIPT_SCHEMA = 'runbook-receipt/v1';
const LATEST_SCHEMA = 'runbook-latest-run/v1';
const HISTORY_SCHEMA = 'runbook-run-history-entry/v1';

/** What each adapter sees, as published in run.json (host/src/bundle/git.rs `adapter_sees`). */
export const ADAPTERS = Object.freeze({
  library: 'what the embedding client feeds',
  'claude-agent-sdk': "every tool call the Claude Agent SDK's agent loop sends through its hooks",
  'pydantic-ai': 'tool calls through the wrapped toolsets of a Pydantic AI agent',
  'mcp-proxy': 'MCP tool calls only',
  hook: 'every tool invocation of the agent CLI, shell included',
  replay: 'a recorded event stream',
});

const sha256Hex = (bytes) => createHash('sha256').update(bytes).digest('hex');
const randomHex = (n) => randomBytes(Math.ceil(n / 2)).toString('hex').slice(0, n);
/** UTC RFC 3339 with milliseconds (`2026-11-30T12:34:56.789Z`). */
const nowRfc3339 = () => new Date().toISOString();

/** A single path component usable as a run id (host/src/bundle/files.rs `is_safe_name`). */
function isSafeName(name) {
  return typeof name === 'string' && name.length > 0 && name.length <= 128 && !name.startsWith('.') && /^[A-Za-z0-9._-]+$/.test(name);
}

/** A new run id: `r-<UTC time, basic format>-<12 random hex>`, never guessable from the time or the pid. */
function newRunId() {
  const t = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
  return `r-${t}-${randomHex(12)}`;
}

/** `runbook.json` when the bytes are JSON (first non-blank byte `{`, after a BOM), else `runbook.yaml`. */
function fileNameFor(bytes) {
  let i = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  // Rust's is_ascii_whitespace: space, tab, line feed, form feed, carriage return.
  while (i < bytes.length && [0x20, 0x09, 0x0a, 0x0c, 0x0d].includes(bytes[i])) i++;
  return bytes[i] === 0x7b ? 'runbook.json' : 'runbook.yaml';
}

/** A reference as it may be written into a bundle: a file by its name only, never a directory. */
function publicReference(reference) {
  return /[/\\]/.test(reference) ? reference.split(/[/\\]/).filter(Boolean).pop() ?? '' : reference;
}

/** JSON with every object's keys sorted (serde_json's maps): `indent` 2 for run.json and latest.json. */
function sortedJson(value, indent) {
  const sort = (v) => {
    if (Array.isArray(v)) return v.map(sort);
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sort(v[k])]));
    return v;
  };
  return JSON.stringify(sort(value), null, indent);
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
function writeAtomic(dir, name, data) {
  const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  const tmp = path.join(dir, `.${name}.${randomHex(8)}.tmp`);
  const fd = fs.openSync(tmp, 'wx', 0o644);
  try {
    writeAll(fd, bytes);
    fs.fsyncSync(fd);
  } catch (e) {
    fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  fs.closeSync(fd);
  try {
    fs.renameSync(tmp, path.join(dir, name));
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  syncDir(dir);
}

function appendSynced(file, line) {
  const fd = fs.openSync(file, 'a', 0o644);
  try {
    writeAll(fd, Buffer.from(line, 'utf8'));
    fs.fdatasyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The text stored under a key of an events.ndjson line (host/src/bundle/chain.rs `embed`): the line itself
 * when it is a JSON object without a newline, else the JSON string holding it.
 */
function embed(raw) {
  if (raw.trimStart().startsWith('{') && !raw.includes('\n')) {
    try {
      JSON.parse(raw);
      return raw;
    } catch {
      // not JSON: stored as a string
    }
  }
  return JSON.stringify(raw);
}

function eventRecordLine(h, eventLine, decisionLine) {
  return `{"h":"${h}","decision":${embed(decisionLine)},"event":${embed(eventLine)}}\n`;
}

// ---- git state ------------------------------------------------------------------------------------------

/**
 * The working directory's git state as counts only, never a branch, a file name or a path
 * (host/src/bundle/git.rs): `clean`, `dirty` with counts, `not-a-checkout`, or `unavailable`.
 */
function gitState(cwd = process.cwd()) {
  return new Promise((resolve) => {
    execFile(
      'git',
      // No fsmonitor hook: reading the state of a checkout must not run a program its config names.
      ['-c', 'core.fsmonitor=false', 'status', '--porcelain=v1', '-z', '--', ':/', ':(exclude).runbook'],
      { cwd, env: { ...process.env, GIT_OPTIONAL_LOCKS: '0' }, encoding: 'buffer', timeout: 10_000, maxBuffer: 256 << 20, windowsHide: true },
      (err, stdout) => {
        if (err) return resolve({ status: err.code === 128 ? 'not-a-checkout' : 'unavailable' });
        let staged = 0;
        let unstaged = 0;
        let untracked = 0;
        let total = 0;
        const fields = stdout.toString('latin1').split('\0').filter((f) => f !== '');
        for (let i = 0; i < fields.length; i++) {
          const f = fields[i];
          if (f.length < 3) continue;
          const [x, y] = [f[0], f[1]];
          total += 1;
          if (x === '?') {
            untracked += 1;
            continue;
          }
          if (x !== ' ') staged += 1;
          if (y !== ' ') unstaged += 1;
          if (x === 'R' || x === 'C') i += 1; // the rename's source
        }
        resolve({ status: total === 0 ? 'clean' : 'dirty', staged, unstaged, untracked, total });
      },
    );
  });
}

// ---- the guard ------------------------------------------------------------------------------------------

/**
 * What names the run's evidence or the supervisor itself (DESIGN 9.20): an invocation whose tool name or
 * arguments (keys and values) contain a needle is recorded with `guard: true`, and the module denies it.
 * Needles: `runbook-host`, this package's directory, the runs directory and the run's, each path in the
 * forms an agent may write it (as given, absolute, relative to the working directory).
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

  /** Whether the tool's name or any string of its arguments (a JSON value) names a needle. */
  names(tool, args) {
    const hit = (s) => this.#needles.some((n) => s.includes(n));
    const any = (v) => {
      if (typeof v === 'string') return hit(v);
      if (Array.isArray(v)) return v.some(any);
      if (v !== null && typeof v === 'object') return Object.entries(v).some(([k, x]) => hit(k) || any(x));
      return false;
    };
    return (typeof tool === 'string' && hit(tool)) || any(args);
  }
}

const PACKAGE_DIR = path.dirname(fileURLToPath(new URL('../package.json', import.meta.url)));

// ---- the bundle -----------------------------------------------------------------------------------------

/** A run bundle being written (host/src/bundle/mod.rs `Bundle`). */
class Bundle {
  constructor(fields) {
    Object.assign(this, fields);
  }

  /**
   * Creates `<runsRoot>/<runId>/` (refusing an existing one) with run.json, the document's exact bytes,
   * envelope.json (when there is one) and an empty events.ndjson; points latest.json at it and appends a
   * `created` line to history.ndjson. `runsRoot` is created when missing.
   */
  static create({ runsRoot, runId, doc, envelope, moduleSha256, adapter, git }) {
    fs.mkdirSync(runsRoot, { recursive: true });
    const dir = path.join(runsRoot, runId);
    fs.mkdirSync(dir); // not recursive: an existing run directory is refused
    const created = nowRfc3339();
    writeAtomic(dir, doc.file, doc.bytes);
    if (envelope !== null) writeAtomic(dir, 'envelope.json', envelope);
    const eventsFd = fs.openSync(path.join(dir, 'events.ndjson'), 'ax', 0o644);
    fs.fsyncSync(eventsFd);
    let runbookId = null;
    let version = null;
    if (envelope !== null) {
      const e = JSON.parse(envelope);
      runbookId = e.document.runbook_id;
      version = e.document.version;
    }
    const envelopeSha = envelope === null ? null : sha256Hex(Buffer.from(envelope, 'utf8'));
    const h0 = envelopeSha ?? doc.sha256;
    const manifest = {
      schema: RUN_SCHEMA,
      run_id: runId,
      artifacts: { run: 'run.json', document: doc.file, envelope: envelope === null ? null : 'envelope.json', events: 'events.ndjson', report: 'report.json', receipt: 'receipt.json' },
      // The Rust host's approval channel directories (the schema requires them); this host feeds approvals
      // through `run.approval()` and never reads them.
      channels: { pending: 'pending', approvals: 'approvals', consumed: 'consumed' },
      document: { reference: doc.reference, trust: 'T1', sha256: doc.sha256, pinned_sha256: null, file: doc.file, runbook_id: runbookId, version },
      envelope_sha256: envelopeSha,
      chain_h0: h0,
      module_sha256: moduleSha256,
      host: { name: HOST_NAME, version: HOST_VERSION },
      adapter: { name: adapter.name, sees: adapter.sees, coverage: null },
      lifecycle: [{ event: 'created', at: created }],
      outcome: null,
      source: { git },
    };
    const b = new Bundle({ root: runsRoot, dir, runId, eventsFd, head: h0, lines: 0, manifest, documentFile: doc.file, hasEnvelope: envelope !== null, finished: false });
    b.writeManifest();
    b.writeLatest(created);
    b.appendHistory({ schema: HISTORY_SCHEMA, event: 'created', run_id: runId, at: created, path: runId, reference: doc.reference, trust: 'T1', adapter: adapter.name });
    return b;
  }

  /** Appends one event and its decision, chained, in one write, fsync'd before returning. */
  recordLinked(eventLine, decisionLine, h) {
    if (this.finished) throw new Error('the bundle is finished');
    writeAll(this.eventsFd, Buffer.from(eventRecordLine(h, eventLine, decisionLine), 'utf8'));
    fs.fdatasyncSync(this.eventsFd);
    this.head = h;
    this.lines += 1;
    if (this.lines === 1) {
      // The start claim's coverage goes into run.json's adapter (written at the next lifecycle change).
      try {
        const ev = JSON.parse(eventLine);
        if (ev.type === 'start') this.manifest.adapter.coverage = ev.coverage;
      } catch {
        // a malformed first line claims nothing
      }
    }
  }

  admitted(yes) {
    this.manifest.lifecycle.push({ event: yes ? 'admitted' : 'refused', at: nowRfc3339() });
    this.writeManifest();
  }

  /**
   * Ends the bundle: report.json (the report's exact bytes), run.json (ended, outcome), receipt.json,
   * latest.json (when it still points here) and an `ended` line in history.ndjson.
   */
  finish(policy, report) {
    if (this.finished) throw new Error('the bundle is already finished');
    const outcome = JSON.parse(report).outcome ?? null;
    const ended = nowRfc3339();
    writeAtomic(this.dir, 'report.json', report);
    this.manifest.lifecycle.push({ event: 'ended', at: ended });
    this.manifest.outcome = outcome;
    this.writeManifest();
    writeAtomic(this.dir, 'receipt.json', this.receipt(policy, report));
    this.finished = true;
    this.closeEvents();
    if (this.latestIsMe()) this.writeLatest(ended);
    this.appendHistory({ schema: HISTORY_SCHEMA, event: 'ended', run_id: this.runId, at: ended, path: this.runId, outcome });
  }

  /** Ends a bundle with no report to end with (the module trapped): `verify` refuses it, the events stay. */
  endWithoutReport(code) {
    if (this.finished) throw new Error('the bundle is already finished');
    const ended = nowRfc3339();
    this.manifest.lifecycle.push({ event: 'ended', at: ended });
    this.manifest.ended_without_report = code;
    this.writeManifest();
    this.finished = true;
    this.closeEvents();
    if (this.latestIsMe()) this.writeLatest(ended);
    this.appendHistory({ schema: HISTORY_SCHEMA, event: 'ended', run_id: this.runId, at: ended, path: this.runId, outcome: null, ended_without_report: code });
  }

  closeEvents() {
    if (this.eventsFd === null) return;
    const fd = this.eventsFd;
    this.eventsFd = null;
    fs.closeSync(fd);
  }

  /** runbook-receipt/v1: the report, its sha256, the chain's head, and the sha256 of every other file as on disk. */
  receipt(policy, report) {
    const files = ['run.json', this.documentFile, 'events.ndjson', 'report.json'];
    if (this.hasEnvelope) files.push('envelope.json');
    const artifacts = {};
    for (const f of files) artifacts[f] = sha256Hex(fs.readFileSync(path.join(this.dir, f)));
    const text =
      `{"artifacts":${JSON.stringify(artifacts)},"chain_head":"${this.head}","host":${JSON.stringify({ name: HOST_NAME, version: HOST_VERSION })},` +
      `"module_sha256":${JSON.stringify(this.manifest.module_sha256)},"report":${report},"report_sha256":"${sha256Hex(Buffer.from(report, 'utf8'))}",` +
      `"schema":"${RECEIPT_SCHEMA}"}`;
    return policy.canonicalize(text);
  }

  writeManifest() {
    writeAtomic(this.dir, 'run.json', `${sortedJson(this.manifest, 2)}\n`);
  }

  latestIsMe() {
    try {
      return JSON.parse(fs.readFileSync(path.join(this.root, 'latest.json'), 'utf8')).run_id === this.runId;
    } catch {
      return false;
    }
  }

  writeLatest(at) {
    writeAtomic(this.root, 'latest.json', `${sortedJson({ schema: LATEST_SCHEMA, run_id: this.runId, path: this.runId, updated_at: at }, 2)}\n`);
  }

  appendHistory(entry) {
    appendSynced(path.join(this.root, 'history.ndjson'), `${sortedJson(entry)}\n`);
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

/** One supervised run with its bundle. Made by `await Run.create(policy, options)`. */
export class Run {
  #policy;
  #session;
  #bundle;
  #guard;
  #t0;
  #lastAt = 0;
  #broken = null;
  // Set first, by plain assignments, when the run breaks: near the stack limit (or out of memory) even
  // building the error can fail, and the run must stay broken whatever happens after these two lines.
  #poisoned = false;
  #cause = undefined;
  #what = '';
  #state = null;
  #start = null;

  constructor(token, fields) {
    if (token !== TOKEN) throw new TypeError('a Run is made by Run.create()');
    this.#policy = fields.policy;
    this.#session = fields.session;
    this.#bundle = fields.bundle;
    this.#guard = fields.guard;
    this.#t0 = performance.now();
  }

  /**
   * Creates the bundle under `runsRoot` and feeds the `start` claim. A refused run is a run too: its bundle
   * is finished (outcome `refused`), `run.start` is the `halt` with the refusals and `run.over` is true.
   *
   * options: `document` (bytes, or a path as a string or file: URL), `agent`, `profile` (R0|R1|R2),
   * `riskCeiling`, `coverage` ("complete" or the list of what the adapter cannot see), and optionally
   * `allowlist` (["*"]), `available`, `runsRoot` (".runbook/runs"), `runId` (a new one), `reference` (the
   * document's file name), `adapter` ("library"), `guardPaths` (more paths the agent must not touch).
   */
  static async create(policy, opts) {
    if (!(policy instanceof Policy)) throw new InvalidInput('Run.create needs the Policy from load()');
    const o = options(
      opts,
      ['document', 'agent', 'profile', 'riskCeiling', 'coverage', 'allowlist', 'available', 'runsRoot', 'runId', 'reference', 'adapter', 'guardPaths'],
      'Run.create',
    );
    // The document: bytes, or a path.
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
      fileReference = path.basename(file);
    } else {
      bytes = documentBytes(o.document, 'Run.create: `document`');
    }
    const docFile = fileNameFor(bytes);
    if (o.reference !== undefined && (typeof o.reference !== 'string' || o.reference === '')) throw new InvalidInput('Run.create: `reference` must be a non-empty string');
    const reference = publicReference(o.reference ?? fileReference ?? docFile);
    if (!reference) throw new InvalidInput('Run.create: `reference` names no file');
    const runId = o.runId ?? newRunId();
    if (!isSafeName(runId)) throw new InvalidInput(`Run.create: \`${runId}\` is not a usable run id (letters, digits, . _ -, not starting with .)`);
    const adapterName = o.adapter ?? 'library';
    if (typeof adapterName !== 'string' || adapterName === '') throw new InvalidInput('Run.create: `adapter` must be a non-empty string');
    const runsRoot = o.runsRoot ?? path.join('.runbook', 'runs');
    if (typeof runsRoot !== 'string' || runsRoot === '') throw new InvalidInput('Run.create: `runsRoot` must be a path');
    const guardPaths = o.guardPaths ?? [];
    if (!Array.isArray(guardPaths) || !guardPaths.every((p) => typeof p === 'string')) throw new InvalidInput('Run.create: `guardPaths` must be a list of paths');
    // The claim is the embedder's configuration: a malformed one is refused before anything is written.
    const start = { type: 'start', runId, profile: o.profile, allowlist: o.allowlist ?? ['*'], riskCeiling: o.riskCeiling, coverage: o.coverage, agent: o.agent, available: o.available };
    try {
      policy.encodeEvent(start, 0);
    } catch (e) {
      if (e instanceof InvalidInput) throw new InvalidInput(`Run.create: the start claim is malformed: ${e.message.replace(/^malformed event: /, '')}`);
      throw e;
    }

    let envelope = null;
    try {
      envelope = policy.envelope(bytes);
    } catch (e) {
      // No envelope: the module refuses the start (`invalid-document`), and the refused run is recorded.
      if (!(e instanceof InvalidDocument)) throw e;
    }
    // Measured before the bundle exists, so the run's own files do not count.
    const git = await gitState();
    let bundle;
    try {
      bundle = Bundle.create({
        runsRoot,
        runId,
        doc: { bytes, sha256: sha256Hex(bytes), reference, file: docFile },
        envelope,
        moduleSha256: policy.sha256,
        adapter: { name: adapterName, sees: ADAPTERS[adapterName] ?? 'unknown' },
        git,
      });
    } catch (e) {
      throw new RunBroken(`cannot create the run bundle under ${runsRoot}: ${e.message}`, { cause: e });
    }
    const guard = new Guard().addPath(PACKAGE_DIR).addPath(runsRoot).addPath(bundle.dir);
    for (const p of guardPaths) guard.addPath(p);
    let session;
    try {
      session = policy.session(bytes);
    } catch (e) {
      try {
        bundle.endWithoutReport('host-trap');
      } catch {
        // the trap is what the caller hears about
      }
      throw new RunBroken(`run ${runId}: the policy module cannot start a session: ${e.message}`, { cause: e });
    }
    const run = new Run(TOKEN, { policy, session, bundle, guard });
    const answer = run.#feed(start);
    try {
      bundle.admitted(answer.allowed);
    } catch (e) {
      throw run.#fail(e, 'cannot record the admission in run.json');
    }
    run.#start = answer;
    if (!answer.allowed) run.#finish();
    return run;
  }

  /** The answer to the `start` claim (a `halt` with `refusals` when the run was refused). */
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
    const at = Math.max(Math.floor(performance.now() - this.#t0), this.#lastAt);
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
   * What a broken run owes, done at most once, and again at the next call if it failed part way: after a
   * trap (the session's instance is marked), the bundle ends without a report; the RunBroken names why.
   */
  #settle() {
    if (this.#broken) return this.#broken;
    const e = this.#cause;
    const trapped = e instanceof ModuleTrap || this.#session.trapped;
    if (trapped && !this.#bundle.finished) {
      try {
        this.#bundle.endWithoutReport('host-trap');
      } catch {
        // the trap is what the caller hears about; verify refuses a bundle without a report either way
      }
    }
    const why = trapped ? 'the policy module trapped' : this.#what || 'a call failed part way';
    this.#broken = new RunBroken(`run ${this.runId}: ${why}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    return this.#broken;
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
      // No module to vouch for a report or a link: after a trap the bundle ends without one (verify
      // refuses it). Any other failure inside the call may have left the session a step ahead of the
      // bundle: broken too.
      throw this.#fail(e, `the policy module failed on the ${what} event`);
    }
    try {
      this.#bundle.recordLinked(rec.eventLine, rec.decisionLine, rec.link);
    } catch (e) {
      throw this.#fail(e, `cannot record the event in ${path.join(this.dir, 'events.ndjson')}`);
    }
    this.#state = rec.state;
    return answerOf(rec, rec.decision.kind === 'needs-approval' ? callSha256() : null);
  }

  /**
   * A tool call, before it runs. The guard flag is set here (DESIGN 9.20). Run the tool only when
   * `answer.allowed`; a `needs-approval` answer carries the `callSha256` an approval bound to it names.
   */
  invoke(tool, args, opts) {
    const { callId, step } = options(opts, ['callId', 'step'], 'invoke');
    let guard = false;
    try {
      // What is recorded is the JSON form of the arguments: the guard looks at that same form.
      if (typeof tool === 'string') guard = this.#guard.names(tool, JSON.parse(jsonText(args, 'arguments')));
    } catch {
      // Arguments with no JSON form: the module halts on the malformed event.
    }
    return this.#feed({ type: 'invoke', tool, arguments: args, callId, step, guard }, () => this.callSha256(tool, args));
  }

  /** The tool's result (what the adapter observes, DESIGN 9.23). */
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

  /** A human's approval (never the agent's: the module refuses those), of a step or of one call. */
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
    return due - Math.max(Math.floor(performance.now() - this.#t0), this.#lastAt);
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
    try {
      this.#bundle.finish(this.#policy, this.#session.report());
    } catch (e) {
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

  /** The exit code of a process that ran this run (the module's rule: 0 only when it completed). */
  exitCode() {
    return this.#session.exitCode(false);
  }

  /** The hash an approval bound to this call names (DESIGN 9.19). */
  callSha256(tool, args) {
    return this.#policy.callSha256(tool, args);
  }
}
