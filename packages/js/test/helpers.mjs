// Shared by the tests: the CLI every answer is compared with, the examples, temporary directories, and the
// wire -> typed event conversion (so the typed path is checked against the CLI's wire path).
//
// RUNBOOK_HOST names the CLI (the lead's CI sets it to the binary it built); unset, the checkout's
// target/release/runbook-host.

import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const ROOT = resolve(PACKAGE, '..', '..');
export const CLI = process.env.RUNBOOK_HOST || join(ROOT, 'target', 'release', 'runbook-host');

if (!existsSync(CLI)) {
  throw new Error(`no runbook-host at ${CLI}: set RUNBOOK_HOST to the CLI (or build it: cargo build --release -p runbook-host)`);
}

/** Runs the CLI; `{status, stdout, stderr}` as text. */
export function cli(args, options = {}) {
  const r = spawnSync(CLI, args, { cwd: options.cwd ?? ROOT, input: options.input, maxBuffer: 64 << 20, encoding: 'utf8' });
  if (r.error) throw new Error(`cannot run ${CLI}: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** `runbook-host verify DIR --format json`: `{status, result}`. */
export function verify(dir) {
  const r = cli(['verify', dir, '--format', 'json']);
  let result = null;
  try {
    result = JSON.parse(r.stdout);
  } catch {
    // printed nothing parseable: the status and stderr say why
  }
  return { status: r.status, result, stderr: r.stderr };
}

/** Every example document: `{name, path, events: [paths]}` (paths relative to the checkout). */
export function examples() {
  const dir = join(ROOT, 'examples');
  return readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => {
      const files = readdirSync(join(dir, d.name)).sort();
      const doc = files.find((f) => /^runbook\.(ya?ml|json)$/.test(f));
      return { name: d.name, path: `examples/${d.name}/${doc}`, events: files.filter((f) => /^events.*\.ndjson$/.test(f)).map((f) => `examples/${d.name}/${f}`) };
    })
    .filter((e) => e.path.endsWith('.yaml') || e.path.endsWith('.json'));
}

export const read = (rel) => readFileSync(join(ROOT, rel));
export const lines = (text) => text.split('\n').filter((l) => l.trim() !== '');

/** A temporary directory removed after the test. */
export function tempDir(t, prefix = 'runbook-policy-js-') {
  const d = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** The typed event (this package's API) for a wire event line (docs/spec/run.md#events), and its `at`. */
export function typed(line) {
  const e = JSON.parse(line);
  const opt = (o, k, v) => (v === undefined ? o : { ...o, [k]: v });
  // The wire also takes an MCP request id (a number) as `call_id`; the WIT's is a string.
  if (typeof e.call_id === 'number') e.call_id = String(e.call_id);
  switch (e.type) {
    case 'start':
      return [opt({ type: 'start', runId: e.run_id, profile: e.profile, allowlist: e.allowlist, riskCeiling: e.risk_ceiling, coverage: e.coverage, agent: e.agent }, 'available', e.available), e.at];
    case 'invoke':
      return [opt(opt(opt({ type: 'invoke', tool: e.tool, arguments: e.arguments }, 'callId', e.call_id), 'step', e.step), 'guard', e.guard), e.at];
    case 'result':
      return [opt(opt({ type: 'result', tool: e.tool, result: e.result }, 'isError', e.is_error), 'callId', e.call_id), e.at];
    case 'approval':
      return [opt(opt({ type: 'approval', approver: e.approver, granted: e.granted }, 'step', e.step), 'callSha256', e.call_sha256), e.at];
    case 'advance':
      return [{ type: 'advance', step: e.to }, e.at];
    case 'verdict':
      return [{ type: 'verdict', step: e.step, passed: e.outcome === 'pass', by: e.by }, e.at];
    case 'final_output':
    case 'tick':
      return [{ type: e.type }, e.at];
    case 'end':
      return [opt({ type: 'end' }, 'reason', e.reason), e.at];
    default:
      throw new Error(`no typed form for ${line}`);
  }
}

/**
 * Calls `f` from as deep in the JavaScript stack as it can run: one frame at a time up from the limit, the
 * first call whose outcome is not a plain RangeError (the stack ran out before `f` got going) is returned.
 * A call that needs more stack inside the module than the JavaScript around it needs then overflows inside
 * the module: a real trap. Deterministic only with one frame size per function, i.e. in a process run with
 * the interpreter alone (`node --no-opt --no-maglev --no-sparkplug`): see test/fixtures/trap.mjs.
 */
export function atStackLimit(f) {
  let reached = 0;
  const dive = (n, target) => {
    reached = n;
    if (n < target) return dive(n + 1, target);
    try {
      return { value: f() };
    } catch (e) {
      return { error: e };
    }
  };
  let max = 0;
  try {
    dive(0, Infinity);
  } catch {
    max = reached;
  }
  for (let back = 1; back < max; back++) {
    let outcome;
    try {
      outcome = dive(0, max - back);
    } catch {
      continue; // the dive itself overflowed
    }
    if (!(outcome.error instanceof RangeError)) return outcome;
  }
  throw new Error('could not reach the stack limit');
}

/** Runs `node <flags> <script> <args>`; `{status, stdout, stderr}`. */
export function node(flags, script, args = [], options = {}) {
  const r = spawnSync(process.execPath, [...flags, script, ...args], { cwd: options.cwd, encoding: 'utf8', env: { ...process.env, ...options.env }, maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The interpreter alone: every frame of a function the same size, so `atStackLimit` is exact. */
export const INTERPRETER_ONLY = ['--no-opt', '--no-maglev', '--no-sparkplug'];
