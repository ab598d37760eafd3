// The Claude Agent SDK adapter (runbook-policy/claude-agent-sdk).
//
// End to end: the real SDK loop (`query()` of @anthropic-ai/claude-agent-sdk, a devDependency, with the
// Claude Code CLI of its platform package), offline, its model played by the scripted Messages API on
// loopback (host/tests/claude/messages_api.py, run from there with python3), the hooks installed by
// `runbookHooks`. The runbook is test/claude/greet-and-write.yaml. Then the callbacks one by one, fed hook
// inputs directly. Every bundle a test writes is checked with `$RUNBOOK_HOST verify`.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { query } from '@anthropic-ai/claude-agent-sdk';
import { ADAPTER, COVERAGE, RunbookHooks, createRun, endRun, runbookHooks } from '../src/claude-agent-sdk.js';
import { load } from '../src/node.js';
import { PACKAGE, ROOT, cli, tempDir, verify } from './helpers.mjs';

const RUNBOOK = join(PACKAGE, 'test', 'claude', 'greet-and-write.yaml');
const MESSAGES_API = join(ROOT, 'host', 'tests', 'claude', 'messages_api.py');
const GREETING = { command: 'touch greeting.txt' };

// The model's turns: a command no capability declares (it would create `pwned`), the greeting, the gated
// command (it creates greeting.txt once approved), then the answer.
const SCRIPT = [
  { tool_use: [{ name: 'Bash', input: { command: 'touch pwned' } }] },
  { tool_use: [{ name: 'Bash', input: { command: 'echo hello' } }] },
  { tool_use: [{ name: 'Bash', input: GREETING }] },
  { text: 'Said hello and wrote greeting.txt.' },
];

const policy = await load();

function verified(run) {
  const v = verify(run.dir);
  assert.equal(v.status, 0, `verify ${run.dir}: ${JSON.stringify(v.result)} ${v.stderr}`);
  return v.result;
}

const events = (run) =>
  readFileSync(join(run.dir, 'events.ndjson'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
const report = (run) => JSON.parse(readFileSync(join(run.dir, 'report.json'), 'utf8'));
const invokes = (run, command) => events(run).filter((e) => e.event.type === 'invoke' && e.event.arguments?.command === command);

/** The scripted Messages API playing `turns`, in `scratch`: `{port, log, stop()}`. */
async function scriptedApi(scratch, turns) {
  const script = join(scratch, 'script.json');
  const log = join(scratch, 'requests.ndjson');
  writeFileSync(script, JSON.stringify(turns));
  const child = spawn('python3', [MESSAGES_API, script, log], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`messages_api.py exited ${code} before printing its port`)));
    createInterface({ input: child.stdout }).once('line', (l) => resolve(Number(l)));
  });
  return { port, log, stop: () => child.kill() };
}

/** The tool results the CLI sent back to the model, in order: {id, is_error, content}. */
const toolResults = (log) =>
  readFileSync(log, 'utf8')
    .split('\n')
    .filter(Boolean)
    .flatMap((l) => JSON.parse(l).tool_results ?? []);

/** A scratch project and HOME for one session. */
function scratch(t) {
  const dir = tempDir(t, 'runbook-claude-sdk-');
  const project = join(dir, 'project');
  mkdirSync(project);
  mkdirSync(join(dir, 'home'));
  return { dir, project, home: join(dir, 'home') };
}

/** One `query()` in the scratch project against the scripted API: `{messages, results, result}`. */
async function session(where, hooks, turns = SCRIPT) {
  const api = await scriptedApi(where.dir, turns);
  const messages = [];
  try {
    // As host/tests/it/common/claude_cli.rs drives the CLI: a scratch HOME, a dummy key, no nonessential
    // traffic, no settings files; the CLI lets Bash run, so what is blocked is blocked by a hook.
    const options = {
      hooks,
      cwd: where.project,
      tools: ['Bash'],
      allowedTools: ['Bash'],
      maxTurns: 10,
      settingSources: [],
      strictMcpConfig: true,
      env: {
        PATH: process.env.PATH,
        HOME: where.home,
        ANTHROPIC_BASE_URL: `http://127.0.0.1:${api.port}`,
        ANTHROPIC_API_KEY: 'sk-ant-scripted-test',
        DISABLE_TELEMETRY: '1',
        DISABLE_AUTOUPDATER: '1',
        DISABLE_ERROR_REPORTING: '1',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      },
    };
    // A session that hangs is stopped (the CLI with it) rather than the test run.
    const abortController = new AbortController();
    const timeout = setTimeout(() => abortController.abort(new Error('the SDK session did not finish within 120 s')), 120_000);
    try {
      for await (const m of query({ prompt: 'Say hello, then write greeting.txt.', options: { ...options, abortController } })) messages.push(m);
    } finally {
      clearTimeout(timeout);
    }
  } finally {
    api.stop();
  }
  const result = messages.filter((m) => m.type === 'result').at(-1);
  return { messages, results: toolResults(api.log), result };
}

const newRun = (t, options = {}) => createRun(policy, { document: RUNBOOK, runsRoot: join(tempDir(t), 'runs'), ...options });
const exists = (where, name) => existsSync(join(where.project, name));

// -- the real SDK loop -------------------------------------------------------------------------------------

test("the runbook is the one the Python adapter's test runs, byte for byte", () => {
  assert.deepEqual(readFileSync(RUNBOOK), readFileSync(join(ROOT, 'packages', 'python', 'tests', 'claude', 'greet-and-write.yaml')));
  assert.equal(cli(['lint', RUNBOOK]).status, 0);
});

test('a real SDK loop: out of scope blocked, the gated call held for the approval callback, the run completes', async (t) => {
  const run = await newRun(t, { agent: 'claude-agent-sdk:test' });
  const where = scratch(t);
  const asked = [];
  const approve = async (request, { signal }) => {
    // Held: the gated command has not run while the approval is pending.
    assert.equal(exists(where, 'greeting.txt'), false);
    assert.equal(signal.aborted, false);
    asked.push(request);
    await new Promise((r) => setTimeout(r, 200)); // a person takes a moment
    return { approver: 'alice', granted: true };
  };
  const s = await session(where, runbookHooks(run, { approve }));
  assert.equal(s.result?.subtype, 'success', JSON.stringify(s.messages.at(-1)));

  // Out of scope: denied before the shell ran it, and the model read the module's explanation.
  assert.equal(exists(where, 'pwned'), false);
  assert.deepEqual(
    s.results.map((r) => r.is_error),
    [true, false, false],
    JSON.stringify(s.results),
  );
  assert.match(s.results[0].content, /undeclared-tool/);
  // The gated call was held for the approval callback, asked once, bound to that call's hash; then it ran.
  const sha = policy.callSha256('Bash', GREETING);
  assert.equal(asked.length, 1);
  assert.deepEqual([asked[0].tool, asked[0].arguments, asked[0].step, asked[0].callSha256, asked[0].toolUseId], ['Bash', GREETING, 'write', sha, 'toolu_script_02_00']);
  assert.equal(exists(where, 'greeting.txt'), true);

  // The bundle: the denied invoke, the approval bound to the call, the gated call decided twice (held, then
  // allowed), the end at the terminal, written by the Stop hook.
  assert.equal(run.finished, true);
  const [denied] = invokes(run, 'touch pwned');
  assert.deepEqual([denied.decision.decision, denied.decision.deviation, denied.event.call_id], ['deny', 'undeclared-tool', 'toolu_script_00_00']);
  assert.deepEqual(
    invokes(run, 'touch greeting.txt').map((e) => e.decision.decision),
    ['needs-approval', 'allow'],
  );
  const approvals = events(run).filter((e) => e.event.type === 'approval');
  assert.deepEqual(
    approvals.map((a) => [a.event.approver, a.event.call_sha256, a.event.granted, a.decision.decision]),
    [['alice', sha, true, 'allow']],
  );
  const kinds = events(run).map((e) => e.event.type);
  assert.deepEqual(kinds, ['start', 'invoke', 'invoke', 'result', 'invoke', 'approval', 'invoke', 'result', 'final_output', 'end']);
  const rep = report(run);
  assert.deepEqual([rep.outcome, rep.terminal, rep.coverage], ['completed', 'written', 'complete']);
  assert.deepEqual(rep.steps, { greet: { assert: 'pass', visits: 1 }, write: { assert: 'pass', visits: 1 } });
  const manifest = JSON.parse(readFileSync(join(run.dir, 'run.json'), 'utf8'));
  assert.deepEqual([manifest.adapter.name, manifest.adapter.coverage], [ADAPTER, 'complete']);
  verified(run);
  assert.equal(endRun(run), 'completed'); // already ended by the Stop hook: nothing more recorded
  assert.equal(events(run).length, kinds.length);
});

test('a real SDK loop: an approval callback that throws blocks the gated call', async (t) => {
  const run = await newRun(t);
  const where = scratch(t);
  const approve = () => {
    throw new Error('the approvals service is down');
  };
  const s = await session(where, runbookHooks(run, { approve }));
  assert.equal(s.result?.subtype, 'success');
  assert.equal(exists(where, 'greeting.txt'), false, 'the gated call ran');
  assert.deepEqual(
    s.results.map((r) => r.is_error),
    [true, false, true],
  );
  assert.match(s.results[2].content, /the approval callback failed \(Error\)/);
  // Recorded: the call held; no approval fed; the Stop found the run at `write`, so it stays open until the
  // program ends it, incomplete.
  assert.deepEqual(
    invokes(run, 'touch greeting.txt').map((e) => e.decision.decision),
    ['needs-approval'],
  );
  assert.equal(events(run).filter((e) => e.event.type === 'approval').length, 0);
  assert.equal(run.finished, false);
  assert.equal(endRun(run), 'incomplete');
  verified(run);
});

class ThrowingHooks extends RunbookHooks {
  preToolUse = async () => {
    throw new Error('the adapter broke');
  };
}

test('a real SDK loop: a hook callback that throws blocks the tool, because onFailure is block', async (t) => {
  const run = await newRun(t);
  const where = scratch(t);
  const hooks = new ThrowingHooks(run).matchers();
  assert.ok(Object.values(hooks).every((ms) => ms.every((m) => m.onFailure === 'block')));
  const s = await session(where, hooks, [SCRIPT[0], { text: 'Blocked.' }]);
  assert.equal(exists(where, 'pwned'), false, 'a throwing PreToolUse callback let the call run');
  assert.equal(s.results.length, 1);
  assert.equal(s.results[0].is_error, true);
  assert.match(s.results[0].content, /onFailure is "block"/);
  endRun(run);
  verified(run);
});

test('the control: the same throwing callback without onFailure lets the call run', async (t) => {
  // What onFailure: 'block' changes: with the SDK's default (continue), a callback that throws counts as no
  // decision and the call runs. So what blocked it above was onFailure.
  const run = await newRun(t);
  const where = scratch(t);
  const loose = { PreToolUse: [{ hooks: [new ThrowingHooks(run).preToolUse] }] };
  await session(where, loose, [SCRIPT[0], { text: 'Ran.' }]);
  assert.equal(exists(where, 'pwned'), true);
  endRun(run);
});

// -- the callbacks, fed directly ---------------------------------------------------------------------------

const signal = () => ({ signal: new AbortController().signal });
const pre = (extra = {}) => ({
  hook_event_name: 'PreToolUse',
  session_id: 's-1',
  cwd: '/somewhere',
  transcript_path: '/somewhere/t.jsonl',
  tool_name: 'Bash',
  tool_input: { command: 'echo hello' },
  tool_use_id: 'toolu_1',
  ...extra,
});
const post = (toolInput, response, id = 'toolu_1') => ({
  hook_event_name: 'PostToolUse',
  session_id: 's-1',
  tool_name: 'Bash',
  tool_input: toolInput,
  tool_response: response,
  tool_use_id: id,
});
const stop = (active = false) => ({ hook_event_name: 'Stop', session_id: 's-1', stop_hook_active: active, last_assistant_message: 'done' });
const HELLO = { stdout: 'hello', stderr: '', interrupted: false };

function denied(answer) {
  const out = answer.hookSpecificOutput;
  assert.deepEqual([out?.hookEventName, out?.permissionDecision], ['PreToolUse', 'deny'], JSON.stringify(answer));
  return out.permissionDecisionReason;
}

async function greet(h) {
  assert.deepEqual(await h.preToolUse(pre(), 'toolu_1', signal()), {});
  assert.deepEqual(await h.postToolUse(post({ command: 'echo hello' }, HELLO), 'toolu_1', signal()), {});
  assert.equal(h.run.state().step, 'write');
}

const gated = (id = 'toolu_2') => pre({ tool_input: GREETING, tool_use_id: id });

test('the matchers match every tool, block on failure, and PreToolUse waits longer than the approval', async (t) => {
  const run = await newRun(t);
  const hooks = runbookHooks(run, { approve: () => ({ approver: 'alice', granted: true }), approvalTimeout: 100, hookTimeout: 20 });
  assert.deepEqual(Object.keys(hooks).sort(), ['PostToolUse', 'PostToolUseFailure', 'PreToolUse', 'Stop']);
  for (const ms of Object.values(hooks)) {
    assert.deepEqual(
      ms.map((m) => [m.matcher, m.onFailure, m.hooks.length]),
      [[undefined, 'block', 1]],
    );
  }
  assert.equal(hooks.PreToolUse[0].timeout, 120);
  assert.equal(hooks.PostToolUse[0].timeout, 20);
  assert.equal(COVERAGE, 'complete');
  assert.throws(() => createRun(policy, { document: RUNBOOK, coverage: ['shell'] }), TypeError);
  endRun(run);
  verified(run);
});

/** A hook input as the adapter records it when it is malformed: JSON, less the keys naming this machine's files. */
function withoutPaths(input) {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) return JSON.stringify(input);
  const { cwd: _c, transcript_path: _t, ...rest } = input;
  return JSON.stringify(rest);
}

for (const [name, bad, why] of [
  ['no tool_name', { hook_event_name: 'PreToolUse', session_id: 's-1', tool_input: { command: 'echo hello' } }, 'no `tool_name` string'],
  ['tool_name not text', pre({ tool_name: 7 }), 'no `tool_name` string'],
  ['tool_input a list', pre({ tool_input: ['echo', 'hello'] }), '`tool_input` is not an object'],
  ['tool_input a string', pre({ tool_input: 'echo hello' }), '`tool_input` is not an object'],
  ['tool_use_id not text', pre({ tool_use_id: 5 }), '`tool_use_id` is not a string'],
  ['not an object', 'not an object', 'not an object'],
]) {
  test(`a malformed PreToolUse input (${name}) is a recorded halt, never an allow`, async (t) => {
    const run = await newRun(t);
    const h = new RunbookHooks(run);
    const reason = denied(await h.preToolUse(bad, 'toolu_1', signal()));
    assert.ok(reason.includes('malformed') && reason.includes(why), reason);
    const last = events(run).at(-1);
    assert.deepEqual([last.decision.decision, last.decision.reason], ['halt', 'malformed-event']);
    // What was recorded (run.feedMalformed: a line that is no event, stored as a JSON string) names the
    // hook and why, then holds the raw input, less this machine's paths: the Python twin's line, byte for byte.
    assert.equal(last.event, `malformed Claude Agent SDK PreToolUse hook input (${why}): ${withoutPaths(bad)}`);
    assert.doesNotMatch(JSON.stringify(last.event), /somewhere/);
    // After the halt nothing is allowed, even a call the runbook allows; it is recorded, answered halt.
    assert.match(denied(await h.preToolUse(pre(), 'toolu_2', signal())), /^runbook:/);
    assert.deepEqual([events(run).at(-1).decision.decision, events(run).at(-1).event.type], ['halt', 'invoke']);
    endRun(run);
    assert.notEqual(report(run).outcome, 'completed');
    verified(run);
  });
}

test('a malformed PostToolUse input is a recorded halt', async (t) => {
  const run = await newRun(t);
  const h = new RunbookHooks(run);
  assert.deepEqual(await h.preToolUse(pre(), 'toolu_1', signal()), {});
  const { tool_response: _, ...bad } = post({ command: 'echo hello' }, HELLO);
  const answer = await h.postToolUse(bad, 'toolu_1', signal());
  assert.equal(answer.decision, 'block');
  assert.match(answer.reason, /malformed/);
  const last = events(run).at(-1);
  assert.equal(last.decision.reason, 'malformed-event');
  assert.equal(last.event, `malformed Claude Agent SDK PostToolUse hook input (no \`tool_response\`): ${withoutPaths(bad)}`);
  // The run is halted: the next call is denied, recorded as a halt.
  assert.match(denied(await h.preToolUse(pre({ tool_use_id: 'toolu_2' }), 'toolu_2', signal())), /^runbook:/);
  assert.equal(events(run).at(-1).decision.decision, 'halt');
  endRun(run);
  verified(run);
});

test('a malformed Stop input is a recorded halt, and the run ends', async (t) => {
  const run = await newRun(t);
  const h = new RunbookHooks(run);
  assert.match((await h.stop(['not', 'an object'], undefined, signal())).systemMessage, /ended: failed/);
  const last = events(run).at(-1);
  assert.deepEqual([last.decision.decision, last.decision.reason], ['halt', 'malformed-event']);
  assert.equal(last.event, 'malformed Claude Agent SDK Stop hook input (not an object): ["not","an object"]');
  assert.match(denied(await h.preToolUse(pre(), 'toolu_1', signal())), /is over/);
  verified(run);
});

test('PostToolUseFailure is a result with is_error', async (t) => {
  const run = await newRun(t);
  const h = new RunbookHooks(run);
  assert.deepEqual(await h.preToolUse(pre(), 'toolu_1', signal()), {});
  const failure = {
    hook_event_name: 'PostToolUseFailure',
    session_id: 's-1',
    tool_name: 'Bash',
    tool_input: { command: 'echo hello' },
    tool_use_id: 'toolu_1',
    error: 'Exit code 3',
    is_interrupt: false,
  };
  await h.postToolUseFailure(failure, 'toolu_1', signal());
  const last = events(run).at(-1).event;
  assert.deepEqual([last.type, last.result, last.is_error, last.call_id], ['result', 'Exit code 3', true, 'toolu_1']);
  endRun(run);
  verified(run);
});

test('an approval is bound to the call: the callback sees its hash, the call is decided again and allowed', async (t) => {
  const run = await newRun(t);
  const seen = [];
  const h = new RunbookHooks(run, {
    approve: (request) => {
      seen.push(request);
      return { approver: 'alice', granted: true }; // a plain function answers too
    },
  });
  await greet(h);
  assert.deepEqual(await h.preToolUse(gated(), 'toolu_2', signal()), {});
  assert.equal(seen[0].callSha256, run.callSha256('Bash', GREETING));
  assert.equal(seen[0].callSha256, policy.callSha256('Bash', GREETING));
  assert.deepEqual([seen[0].step, seen[0].runId, seen[0].toolUseId], ['write', run.runId, 'toolu_2']);
  endRun(run);
  verified(run);
});

for (const [name, approve, says] of [
  ['no callback', null, /no approval callback/],
  ['declined', () => ({ approver: 'bob', granted: false }), /bob refused to approve this call/],
  ['self-approval', () => ({ approver: 'claude-agent-sdk', granted: true }), /was not accepted/],
  ['no answer', () => undefined, /answered no \{approver, granted\}/],
  ['a boolean', () => true, /answered no \{approver, granted\}/],
  ['a rejected promise', () => Promise.reject(new TypeError('nope')), /the approval callback failed \(TypeError\)/],
]) {
  test(`a gated call without a valid grant is denied (${name})`, async (t) => {
    const run = await newRun(t);
    const h = new RunbookHooks(run, { approve });
    await greet(h);
    const reason = denied(await h.preToolUse(gated(), 'toolu_2', signal()));
    assert.match(reason, says);
    assert.ok(reason.includes(run.callSha256('Bash', GREETING)), reason);
    // Never a second invoke of the call, so never an allow recorded for it.
    assert.deepEqual(
      invokes(run, GREETING.command).map((e) => e.decision.decision),
      ['needs-approval'],
    );
    endRun(run);
    verified(run);
  });
}

test('an approval that does not come in time denies the call, and the callback is told to stop waiting', async (t) => {
  const run = await newRun(t);
  let aborted = null;
  const h = new RunbookHooks(run, {
    approvalTimeout: 0.2,
    approve: (request, { signal: s }) =>
      new Promise((resolve) => {
        s.addEventListener('abort', () => {
          aborted = true;
          resolve({ approver: 'alice', granted: true }); // too late: never fed
        });
      }),
  });
  await greet(h);
  const t0 = Date.now();
  assert.match(denied(await h.preToolUse(gated(), 'toolu_2', signal())), /no approval came within 0.2 s/);
  assert.ok(Date.now() - t0 < 5000);
  await new Promise((r) => setImmediate(r));
  assert.equal(aborted, true);
  assert.equal(events(run).filter((e) => e.event.type === 'approval').length, 0);
  endRun(run);
  verified(run);
});

test('when the client stops waiting (its signal aborts), nothing more is fed for the call', async (t) => {
  const run = await newRun(t);
  const client = new AbortController();
  const h = new RunbookHooks(run, {
    approve: async () => {
      client.abort(); // the CLI's matcher timeout, while a person was still deciding
      return { approver: 'alice', granted: true };
    },
  });
  await greet(h);
  const n = events(run).length;
  denied(await h.preToolUse(gated(), 'toolu_2', { signal: client.signal }));
  assert.equal(events(run).length, n + 1, 'only the held invoke is recorded');
  endRun(run);
  verified(run);
});

test('Stop away from a terminal keeps the run open, and keepWorking blocks it once', async (t) => {
  const run = await newRun(t);
  const h = new RunbookHooks(run, { keepWorking: true });
  const answer = await h.stop(stop(), undefined, signal());
  assert.equal(answer.decision, 'block');
  assert.match(answer.reason, /at step `greet`/);
  assert.equal(run.finished, false);
  // The model stopped again after being told to go on: not blocked twice.
  assert.ok('systemMessage' in (await h.stop(stop(true), undefined, signal())));
  assert.deepEqual(
    events(run).map((e) => e.event.type),
    ['start', 'final_output', 'final_output'],
  );
  assert.equal(endRun(run), 'incomplete');
  verified(run);
});

test('after the run has ended every call is denied and nothing more is recorded', async (t) => {
  const run = await newRun(t);
  const h = new RunbookHooks(run);
  endRun(run);
  const n = events(run).length;
  assert.match(denied(await h.preToolUse(pre(), 'toolu_1', signal())), /is over/);
  assert.equal((await h.postToolUse(post({ command: 'echo hello' }, HELLO), 'toolu_1', signal())).decision, 'block');
  assert.deepEqual(await h.stop(stop(), undefined, signal()), {});
  assert.equal(events(run).length, n);
  verified(run);
});
