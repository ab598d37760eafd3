#!/usr/bin/env node
// The JS package's runner of the whole-run vectors (conformance/vectors/run/README.md):
//
//   node conformance/vectors/run/runners/js.mjs SCRIPT_DIR OUT_DIR
//
// Drives SCRIPT_DIR/script.json through packages/js's `Run` with OUT_DIR as the runs root and a manual
// clock: `t0` when the run is created, `t0 + at` from each step on. The run id, the host's name and version
// and the git state are the script's. Steps after the bundle is finished (a refusal at admission, an end)
// are not taken. Exits 0 when the script ran to its end (a refusal or a deny is an answer), 1 when a step
// failed (the error on stderr), 2 for a script it cannot read.
//
// The guard's needles are the package's own (`runbook-host`, the package's directory, the runs root and
// the run's directory): no vector names a path of an implementation's own.

import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Run, RunTampered, load } from '../../../../packages/js/src/node.js';

function usage(message) {
  process.stderr.write(`js.mjs: ${message}\nusage: node js.mjs SCRIPT_DIR OUT_DIR\n`);
  process.exit(2);
}

const [scriptDir, outDir] = process.argv.slice(2);
if (!scriptDir || !outDir || process.argv.length !== 4) usage('expected two arguments');
let script;
try {
  script = JSON.parse(readFileSync(join(scriptDir, 'script.json'), 'utf8'));
} catch (e) {
  usage(`cannot read ${join(scriptDir, 'script.json')}: ${e.message}`);
}
const { facts, claim } = script;
if (!Number.isSafeInteger(facts?.t0) || claim === null || typeof claim !== 'object' || !Array.isArray(script.steps)) {
  usage('script.json needs `facts.t0` (Unix milliseconds), `claim` and `steps`');
}

// The run's clock: set by the script, read by the run.
let now = facts.t0;
const clock = () => now;
// An optional text of a step (`call_id`, `step`, `call_sha256`): absent unless it is text (an MCP request
// id, a number, names no call here), as every driver of the vectors reads it.
const opt = (v) => (typeof v === 'string' ? v : undefined);

/**
 * A `resume` step: this process lets the run go (unended) and a new Run resumes it from the bundle, with the
 * pin the first kept (`"pin": "kept"`), another (`"another"`) or none; first, with `swap_document`, the
 * agent's edit: the bundle's document replaced by that file's bytes and run.json's text edited to match.
 * With `refused`, the resume must be refused as tampered with that place and a reason starting with that
 * text; null then.
 */
function resume(policy, run, r) {
  const pin = { kept: run.pin, another: { documentSha256: '0'.repeat(64), chainH0: '0'.repeat(64) } }[r.pin] ?? null;
  const runId = run.runId;
  if (typeof r.swap_document === 'string') {
    const dir = join(outDir, runId);
    const manifest = readFileSync(join(dir, 'run.json'), 'latin1');
    const name = JSON.parse(manifest).artifacts.document;
    const [old, next] = [readFileSync(join(dir, name)), readFileSync(join(scriptDir, r.swap_document))];
    const sha = (b) => createHash('sha256').update(b).digest('hex');
    writeFileSync(join(dir, name), next);
    writeFileSync(join(dir, 'run.json'), manifest.replaceAll(sha(old), sha(next)), 'latin1');
  }
  const want = r.refused ?? null;
  let resumed;
  try {
    resumed = Run.resume(policy, runId, { runsRoot: outDir, t0: facts.t0, pin, clock });
  } catch (e) {
    if (want !== null && e instanceof RunTampered && e.place === want.place && e.detail.startsWith(want.reason)) return null;
    throw e;
  }
  if (want !== null) throw new Error(`the resume was not refused (${JSON.stringify(want)})`);
  return resumed;
}

/** One step: one call on the Run. */
function step(run, s) {
  if (!Number.isSafeInteger(s.at) || s.at < 0) throw new Error(`a step needs \`at\` (milliseconds since t0): ${JSON.stringify(s)}`);
  now = facts.t0 + s.at;
  const kinds = Object.keys(s).filter((k) => k !== 'at');
  if (kinds.length !== 1) throw new Error(`a step is one of invoke, result, approval, advance, verdict, final_output, tick, line, leave, end: ${JSON.stringify(s)}`);
  const [kind] = kinds;
  const v = s[kind];
  switch (kind) {
    case 'invoke':
      return run.invoke(v.tool, v.arguments, { callId: opt(v.call_id), step: opt(v.step) });
    case 'result':
      return run.result(v.tool, v.result, { isError: v.is_error ?? false, callId: opt(v.call_id) });
    case 'approval':
      return run.approval(v.approver, v.granted, { step: opt(v.step), callSha256: opt(v.call_sha256) });
    case 'advance':
      return run.advance(v);
    case 'verdict':
      return run.verdict(v.step, v.pass, v.by);
    case 'final_output':
      return run.finalOutput();
    case 'tick':
      return run.tick();
    case 'line':
      return run.feedLine(v);
    case 'leave': {
      // The module's leaving rule: `final_output` first when it says so, then the end with its reason.
      const l = run.leaving(v.calls_in_flight ?? 0, v.last_call_timed_out ?? false);
      if (l.finalOutput) run.finalOutput();
      return run.end(l.reason);
    }
    case 'end':
      return run.end(v);
    default:
      throw new Error(`unknown step \`${kind}\``);
  }
}

try {
  const policy = await load();
  let run = await Run.create(policy, {
    document: join(scriptDir, script.document),
    runsRoot: outDir,
    runId: facts.run_id,
    reference: facts.reference,
    adapter: script.adapter ?? 'library',
    clock,
    host: facts.host,
    git: facts.git,
    agent: claim.agent,
    profile: claim.profile,
    allowlist: claim.allowlist,
    riskCeiling: claim.risk_ceiling,
    coverage: claim.coverage !== null && typeof claim.coverage === 'object' && !Array.isArray(claim.coverage) ? claim.coverage.blind : claim.coverage,
    available: claim.available,
  });
  for (const [i, s] of script.steps.entries()) {
    // A run whose bundle is finished (refused at admission, or ended) takes no more steps.
    if (run.finished) break;
    try {
      if (Object.hasOwn(s, 'resume')) {
        now = facts.t0 + s.at;
        run = resume(policy, run, s.resume);
        if (run === null) break;
        continue;
      }
      step(run, s);
    } catch (e) {
      throw new Error(`step ${i + 1}: ${e.message}`, { cause: e });
    }
  }
} catch (e) {
  process.stderr.write(`js.mjs: ${scriptDir}: ${e.message}\n`);
  process.exit(1);
}
