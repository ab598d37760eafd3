// The Vercel AI SDK adapter (runbook-policy/ai-sdk), in the real SDK loop (`ai` 7, a devDependency):
// generateText and streamText with the SDK's own scripted model (MockLanguageModelV4 of `ai/test`), which
// answers each step with scripted tool calls, offline. The runbook is the Pydantic AI adapter's
// (packages/python/tests/runbooks/ship-hotfix.yaml): `read_file` of the changelog in `inspect`, then the
// destructive, gated `deploy` of payments-api in `ship`. Every bundle a test writes is checked with
// `$RUNBOOK_HOST verify`.
//
// `ai` 7 needs Node 22 or later: under an older Node every test here is skipped (CI runs this file under
// Node 24 too).

import assert from 'node:assert/strict';
import { readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  ADAPTER,
  PROVIDER_EXECUTED_TOOLS,
  RunbookBlocked,
  TOOLS_WITHOUT_EXECUTE,
  UNSUPERVISED_TOOLS,
  coverage,
  createRun,
  endRun,
  endRunOnFinish,
  finishRun,
  supervise,
} from '../src/ai-sdk.js';
import { RunBroken, load } from '../src/node.js';
import { ROOT, cli, tempDir, verify } from './helpers.mjs';

const SKIP = Number(process.versions.node.split('.')[0]) < 22 ? 'ai 7 needs Node 22 or later' : false;
const { generateText, streamText, stepCountIs, tool } = SKIP ? {} : await import('ai');
const { MockLanguageModelV4, convertArrayToReadableStream } = SKIP ? {} : await import('ai/test');
const { z } = SKIP ? {} : await import('zod');
const { shipHotfix } = SKIP ? {} : await import('../examples/ai-sdk.mjs');

const SHIP = join(ROOT, 'packages', 'python', 'tests', 'runbooks', 'ship-hotfix.yaml');
const CHANGELOG = '## 1.4.1\n- hotfix: stop the payments retry storm\n';
const DEPLOY = { service: 'payments-api' };

const policy = await load();

// -- the scripted model and the agent's tools ---------------------------------------------------------------

const USAGE = { inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined }, outputTokens: { total: 1, text: 1, reasoning: undefined } };
const call = (toolName, input, toolCallId) => ({ type: 'tool-call', toolCallId, toolName, input: typeof input === 'string' ? input : JSON.stringify(input) });
const text = (t) => ({ type: 'text', text: t });

/** The SDK's mock model answering step i with `turns[i]`; `shown(id)`: what it was shown for a call. */
function scripted(turns) {
  let i = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async () => {
      const content = turns[i++] ?? [text('(the script ran out)')];
      const calls = content.some((p) => p.type === 'tool-call');
      return { content, finishReason: { unified: calls ? 'tool-calls' : 'stop', raw: undefined }, usage: USAGE, warnings: [] };
    },
  });
  /** The tool result the model was sent for `toolCallId` (its `output`: `{type, value}`). */
  model.shown = (toolCallId) =>
    model.doGenerateCalls
      .flatMap((c) => c.prompt)
      .filter((m) => m.role === 'tool')
      .flatMap((m) => m.content)
      .find((p) => p.type === 'tool-result' && p.toolCallId === toolCallId)?.output;
  return model;
}

/** The agent's real tools; each records that it ran. */
function agentTools() {
  const ran = [];
  const tools = {
    read_file: tool({
      description: 'Reads a file of the repository.',
      inputSchema: z.object({ path: z.string() }),
      execute: async ({ path }) => {
        ran.push(['read_file', path]);
        return CHANGELOG;
      },
    }),
    deploy: tool({
      description: 'Deploys a service.',
      inputSchema: z.object({ service: z.string() }),
      execute: async ({ service }) => {
        ran.push(['deploy', service]);
        return { status: 'deployed', service };
      },
    }),
    shell: tool({
      description: 'Runs a shell command.',
      inputSchema: z.object({ command: z.string() }),
      execute: async ({ command }) => {
        ran.push(['shell', command]);
        return 'ran';
      },
    }),
    opaque: tool({
      description: 'Takes a value its schema turns into something JSON cannot hold.',
      inputSchema: z.object({ value: z.string().transform((v) => BigInt(v.length)) }),
      execute: async ({ value }) => {
        ran.push(['opaque', value]);
        return 'ran';
      },
    }),
  };
  return { tools, ran };
}

// -- reading the bundle --------------------------------------------------------------------------------------

const records = (run) =>
  readFileSync(join(run.dir, 'events.ndjson'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
const report = (run) => JSON.parse(readFileSync(join(run.dir, 'report.json'), 'utf8'));
const invokes = (run, tool) => records(run).filter((r) => r.event.type === 'invoke' && r.event.tool === tool);

function verified(run) {
  const v = verify(run.dir);
  assert.equal(v.status, 0, `verify ${run.dir}: ${JSON.stringify(v.result)} ${v.stderr}`);
  return v.result;
}

const runsRoot = (t) => join(tempDir(t, 'runbook-ai-sdk-'), 'runs');
/** A run of ship-hotfix claiming the coverage of the agent's tools (of `options.tools`, else agentTools()). */
const newRun = async (t, options = {}) =>
  createRun(policy, { document: SHIP, runsRoot: runsRoot(t), agent: 'release-bot', ...('tools' in options || 'coverage' in options ? {} : { tools: agentTools().tools }), ...options });

/** One generateText loop over the supervised tools, ended by the adapter's onFinish. */
async function loop(run, tools, model, options = {}) {
  const { approve, approvalTimeout, ...rest } = options;
  return generateText({
    model,
    tools: supervise(tools, run, { approve, ...(approvalTimeout ? { approvalTimeout } : {}) }),
    stopWhen: stepCountIs(10),
    prompt: 'Ship the payments-api hotfix.',
    onFinish: endRunOnFinish(run),
    ...rest,
  });
}

const errorText = (output) => {
  assert.equal(output?.type, 'error-text', JSON.stringify(output));
  return output.value;
};

// -- the whole loop --------------------------------------------------------------------------------------------

test('the test runbook lints clean', { skip: SKIP }, () => {
  assert.equal(cli(['lint', SHIP]).status, 0);
});

test('the README example: blocked calls never run, the gated deploy waits for a person, the run completes', { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  const model = scripted([
    [call('deploy', DEPLOY, 'c1')], // out of scope: `deploy` belongs to `ship`
    [call('shell', { command: 'curl -s https://status.example.com' }, 'c2')], // undeclared
    [call('read_file', { path: 'CHANGELOG.md' }, 'c3')], // in scope: the assert passes, `ship` is next
    [call('deploy', DEPLOY, 'c4')], // gated: held until approved
    [text('Shipped the payments-api hotfix.')],
  ]);
  const asked = [];
  const approve = async (request, { signal }) => {
    // Held: nothing has deployed while a person decides.
    assert.equal(ran.some(([name]) => name === 'deploy'), false);
    assert.equal(signal.aborted, false);
    asked.push(request);
    await new Promise((r) => setTimeout(r, 50));
    return { approver: 'alice', granted: true };
  };
  const { run, text: answer, outcome } = await shipHotfix(model, tools, { approve, document: SHIP, runsRoot: runsRoot(t) });
  assert.equal(answer, 'Shipped the payments-api hotfix.');
  assert.equal(outcome, 'completed');

  // Only what the module allowed ran.
  assert.deepEqual(ran, [
    ['read_file', 'CHANGELOG.md'],
    ['deploy', 'payments-api'],
  ]);
  // The model was shown the SDK's own tool error with the module's sentence for each blocked call.
  assert.match(errorText(model.shown('c1')), /^RunbookBlocked: blocked by the runbook: .*out-of-scope-tool/);
  assert.match(errorText(model.shown('c2')), /^RunbookBlocked: blocked by the runbook: .*undeclared-tool/);
  assert.deepEqual(model.shown('c3'), { type: 'text', value: CHANGELOG });
  assert.deepEqual(model.shown('c4'), { type: 'json', value: { status: 'deployed', service: 'payments-api' } });
  // The approval callback was asked once, for that call, by its hash.
  const sha = policy.callSha256('deploy', DEPLOY);
  assert.deepEqual(
    asked.map((r) => [r.runId, r.step, r.tool, r.arguments, r.callSha256, r.toolCallId]),
    [[run.runId, 'ship', 'deploy', DEPLOY, sha, 'c4']],
  );

  // The bundle: each call decided with the SDK's toolCallId, before it ran; the approval bound to the call.
  const kinds = records(run).map((r) => [r.event.type, r.event.call_id ?? null, r.decision.decision, r.decision.deviation ?? r.decision.reason ?? null]);
  assert.deepEqual(kinds, [
    ['start', null, 'allow', null],
    ['invoke', 'c1', 'deny', 'out-of-scope-tool'],
    ['invoke', 'c2', 'deny', 'undeclared-tool'],
    ['invoke', 'c3', 'allow', null],
    ['result', 'c3', 'allow', null],
    ['invoke', 'c4', 'needs-approval', 'awaiting-approval'],
    ['approval', null, 'allow', null],
    ['invoke', 'c4', 'allow', null],
    ['result', 'c4', 'allow', null],
    ['final_output', null, 'allow', null],
    ['end', null, 'halt', 'run-ended'],
  ]);
  const approval = records(run)[6].event;
  assert.deepEqual([approval.approver, approval.granted, approval.step, approval.call_sha256], ['alice', true, 'ship', sha]);
  assert.deepEqual(records(run)[8].event.result, { status: 'deployed', service: 'payments-api' });
  const manifest = JSON.parse(readFileSync(join(run.dir, 'run.json'), 'utf8'));
  assert.deepEqual([manifest.adapter.name, manifest.adapter.coverage], [ADAPTER, 'complete']);
  const rep = report(run);
  assert.deepEqual([rep.outcome, rep.terminal], ['completed', 'shipped']);
  assert.deepEqual(
    rep.deviations.map((d) => d.class),
    ['out-of-scope-tool', 'undeclared-tool'],
  );
  const v = verified(run);
  assert.deepEqual([v.outcome, v.events], ['completed', 11]);
});

test('the README example is at most 25 lines', { skip: SKIP }, () => {
  const example = readFileSync(new URL('../examples/ai-sdk.mjs', import.meta.url), 'utf8');
  assert.ok(example.split('\n').filter((l) => l.trim() !== '').length <= 25);
});

const gatedScript = () =>
  scripted([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [call('deploy', DEPLOY, 'c2')], [text('done')]]);

for (const [name, approve, says] of [
  ['no callback', undefined, /no approval callback was given/],
  ['a callback that throws', () => {
    throw new Error('pager down');
  }, /the approval callback failed \(Error\)/],
  ['a rejected promise', () => Promise.reject(new TypeError('nope')), /the approval callback failed \(TypeError\)/],
  ['an answer that is no answer', () => true, /answered no \{approver, granted\}/],
  ['a person who says no', () => ({ approver: 'bob', granted: false }), /bob refused to approve this call/],
  ['the agent approving itself', () => ({ approver: 'release-bot', granted: true }), /the approval was not accepted: .*self-approval/],
  ['a callback that never answers', () => new Promise(() => {}), /no approval came within 0.2 s/],
]) {
  test(`a gated call without a valid grant never runs (${name})`, { skip: SKIP }, async (t) => {
    if (name === 'a callback that throws' || name === 'a rejected promise') t.mock.method(process, 'emitWarning', () => {});
    const { tools, ran } = agentTools();
    const model = gatedScript();
    const run = await newRun(t);
    const result = await loop(run, tools, model, { approve, approvalTimeout: 0.2 });
    assert.equal(result.text, 'done');
    assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
    const shown = errorText(model.shown('c2'));
    assert.match(shown, /^RunbookBlocked: blocked by the runbook: /);
    assert.match(shown, says);
    // The SDK's own record of the step: a tool-error whose error is the RunbookBlocked.
    const error = result.steps[1].content.find((p) => p.type === 'tool-error');
    assert.ok(error.error instanceof RunbookBlocked);
    assert.equal(shown, `RunbookBlocked: ${error.error.message}`);
    // Never an allow for the deploy; the answer recorded, then the run ended at `ship`, incomplete.
    assert.ok(invokes(run, 'deploy').every((r) => r.decision.decision === 'needs-approval'));
    assert.equal(run.finished, true);
    assert.equal(report(run).outcome, 'incomplete');
    verified(run);
  });
}

test('a sync callback may grant: the call is decided again and runs', { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  const run = await newRun(t);
  await loop(run, tools, gatedScript(), { approve: () => ({ approver: 'alice', granted: true }) });
  assert.deepEqual(ran, [
    ['read_file', 'CHANGELOG.md'],
    ['deploy', 'payments-api'],
  ]);
  assert.deepEqual(
    invokes(run, 'deploy').map((r) => r.decision.decision),
    ['needs-approval', 'allow'],
  );
  assert.equal(report(run).outcome, 'completed');
  verified(run);
});

test('the loop aborted while a person decides: the call stays blocked, nothing more is fed', { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  const run = await newRun(t);
  const abort = new AbortController();
  const approve = async () => {
    abort.abort(new Error('the user left'));
    return { approver: 'alice', granted: true }; // too late
  };
  await assert.rejects(loop(run, tools, gatedScript(), { approve, abortSignal: abort.signal }));
  assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
  assert.deepEqual(
    records(run).map((r) => r.event.type),
    ['start', 'invoke', 'result', 'invoke'],
  );
  // generateText threw, so its onFinish never came: the program ends the run.
  assert.equal(run.finished, false);
  assert.equal(endRun(run, 'interrupted'), 'incomplete');
  verified(run);
});

test('an input with no JSON form is a recorded halt: the tool never runs, nor does any later call', { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  const model = scripted([[call('opaque', { value: 'x' }, 'c1')], [call('read_file', { path: 'CHANGELOG.md' }, 'c2')], [text('gave up')]]);
  const run = await newRun(t);
  await loop(run, tools, model);
  assert.deepEqual(ran, []);
  assert.match(errorText(model.shown('c1')), /malformed-event|malformed/);
  assert.match(errorText(model.shown('c1')), /no JSON form/);
  assert.match(errorText(model.shown('c2')), /^RunbookBlocked: blocked by the runbook: .*halt/);
  const recs = records(run);
  assert.equal(typeof recs[1].event, 'string');
  assert.ok(recs[1].event.startsWith('malformed invoke of tool "opaque" (AI SDK tool call c1): its input has no JSON form'), recs[1].event);
  assert.deepEqual([recs[1].decision.decision, recs[1].decision.reason], ['halt', 'malformed-event']);
  assert.deepEqual([recs[2].event.type, recs[2].event.call_id, recs[2].decision.decision], ['invoke', 'c2', 'halt']);
  assert.equal(report(run).outcome, 'failed');
  verified(run);
});

test('input the model wrote that is not JSON is refused by the SDK itself: nothing runs, nothing is decided', { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  const model = scripted([[call('read_file', '{"path": CHANGELOG', 'c1')], [text('sorry')]]);
  const run = await newRun(t);
  const result = await loop(run, tools, model);
  assert.deepEqual(ran, []);
  assert.match(errorText(model.shown('c1')), /InvalidToolInputError/);
  assert.ok(result.steps[0].content.some((p) => p.type === 'tool-call' && p.invalid));
  assert.deepEqual(
    records(run).map((r) => r.event.type),
    ['start', 'final_output', 'end'],
  );
  verified(run);
});

test('a tool that throws: an error result recorded, and the SDK shows the model its own tool error', { skip: SKIP }, async (t) => {
  const { tools } = agentTools();
  tools.read_file = tool({
    inputSchema: z.object({ path: z.string() }),
    execute: async () => {
      throw new Error('no such file');
    },
  });
  const model = scripted([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [text('stopped')]]);
  const run = await newRun(t);
  await loop(run, tools, model);
  assert.equal(errorText(model.shown('c1')), 'Error: no such file');
  const result = records(run).find((r) => r.event.type === 'result');
  assert.deepEqual([result.event.result, result.event.is_error, result.event.call_id], ['Error: no such file', true, 'c1']);
  assert.equal(report(run).outcome, 'failed'); // the `inspect` assert wants is_error false: fail closed
  verified(run);
});

test('a broken run blocks every call', { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  const model = scripted([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [text('stopped')]]);
  const run = await newRun(t);
  // Its bundle moved away: the run cannot finish it, and is broken from then on.
  renameSync(run.dir, `${run.dir}.moved`);
  assert.throws(() => run.end(), RunBroken);
  t.mock.method(process, 'emitWarning', () => {}); // onFinish cannot end a broken run: it says so
  await loop(run, tools, model);
  assert.deepEqual(ran, []);
  assert.match(errorText(model.shown('c1')), /cannot decide this call/);
  assert.ok(run.broken instanceof RunBroken);
});

test('after the run has ended every call is blocked and nothing more is recorded', { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  const run = await newRun(t);
  endRun(run);
  const n = records(run).length;
  const model = scripted([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [text('stopped')]]);
  await loop(run, tools, model);
  assert.deepEqual(ran, []);
  assert.match(errorText(model.shown('c1')), /is over and its evidence is sealed/);
  assert.equal(records(run).length, n);
  verified(run);
});

// -- streamText, streaming tools, the SDK's own approvals ----------------------------------------------------

test('streamText with a streaming tool: its outputs stream through, the last one is the result', { skip: SKIP }, async (t) => {
  const ran = [];
  const tools = {
    read_file: tool({
      inputSchema: z.object({ path: z.string() }),
      async *execute({ path }) {
        ran.push(path);
        yield 'reading';
        yield CHANGELOG;
      },
    }),
  };
  const finish = (unified) => ({ type: 'finish', finishReason: { unified, raw: undefined }, usage: USAGE });
  const turns = [
    [{ type: 'stream-start', warnings: [] }, call('read_file', { path: 'CHANGELOG.md' }, 'c1'), finish('tool-calls')],
    [{ type: 'stream-start', warnings: [] }, { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'read it' }, { type: 'text-end', id: 't' }, finish('stop')],
  ];
  let i = 0;
  const model = new MockLanguageModelV4({ doStream: async () => ({ stream: convertArrayToReadableStream(turns[i++]) }) });
  const run = await newRun(t);
  const stream = streamText({ model, tools: supervise(tools, run), stopWhen: stepCountIs(5), prompt: 'Read the changelog.', onFinish: endRunOnFinish(run) });
  const parts = [];
  for await (const p of stream.fullStream) parts.push(p);
  assert.deepEqual(ran, ['CHANGELOG.md']);
  assert.deepEqual(
    parts.filter((p) => p.type === 'tool-result').map((p) => [p.output, p.preliminary ?? false]),
    [
      ['reading', true],
      [CHANGELOG, true],
      [CHANGELOG, false],
    ],
  );
  assert.equal(await stream.text, 'read it');
  const recs = records(run);
  assert.deepEqual(
    recs.map((r) => r.event.type),
    ['start', 'invoke', 'result', 'final_output', 'end'],
  );
  assert.equal(recs[2].event.result, CHANGELOG);
  assert.equal(run.finished, true);
  assert.equal(report(run).outcome, 'incomplete'); // `ship` was never reached
  verified(run);
});

test("the SDK's own needsApproval: the loop stops waiting, the run stays open, and the resumed call is decided", { skip: SKIP }, async (t) => {
  const { tools, ran } = agentTools();
  tools.deploy = tool({ ...tools.deploy, needsApproval: true });
  const run = await newRun(t);
  const supervised = supervise(tools, run, { approve: () => ({ approver: 'alice', granted: true }) });
  const model = scripted([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [call('deploy', DEPLOY, 'c2')], [text('shipped')]]);
  const onFinish = endRunOnFinish(run);
  const first = await generateText({ model, tools: supervised, stopWhen: stepCountIs(10), prompt: 'Ship it.', onFinish });
  const request = first.content.find((p) => p.type === 'tool-approval-request');
  assert.ok(request, 'the SDK asks its own approval');
  // The loop stopped on a call waiting for the program: the run is open, the deploy not yet decided.
  assert.equal(run.finished, false);
  assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
  assert.equal(invokes(run, 'deploy').length, 0);
  // The program resumes with the SDK approval granted: the call reaches `execute`, the run decides it.
  const messages = [
    { role: 'user', content: 'Ship it.' },
    ...first.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: true }] },
  ];
  await generateText({ model, tools: supervised, stopWhen: stepCountIs(10), messages, onFinish });
  assert.deepEqual(ran.at(-1), ['deploy', 'payments-api']);
  assert.deepEqual(
    invokes(run, 'deploy').map((r) => [r.event.call_id, r.decision.decision]),
    [
      ['c2', 'needs-approval'],
      ['c2', 'allow'],
    ],
  );
  assert.equal(report(run).outcome, 'completed');
  verified(run);
});

// -- the pieces --------------------------------------------------------------------------------------------------

test('coverage: complete only when every tool goes through supervise and none is provider-executed', { skip: SKIP }, async (t) => {
  const { tools } = agentTools();
  const webSearch = { type: 'provider', id: 'openai.web_search', args: {}, isProviderExecuted: true, inputSchema: z.object({}) };
  const clientSide = tool({ inputSchema: z.object({ question: z.string() }) }); // answered by the UI
  assert.equal(coverage(tools), 'complete');
  assert.deepEqual(coverage({ ...tools, web_search: webSearch }), [PROVIDER_EXECUTED_TOOLS]);
  assert.deepEqual(coverage({ ...tools, ask: clientSide, web_search: webSearch }), [PROVIDER_EXECUTED_TOOLS, TOOLS_WITHOUT_EXECUTE]);
  assert.deepEqual(coverage(tools, { everyToolSupervised: false }), [UNSUPERVISED_TOOLS]);
  // A blind adapter may not run destructive work: the module refuses the run up front.
  const run = await newRun(t, { tools: { ...tools, web_search: webSearch } });
  assert.equal(run.over, true);
  assert.deepEqual(run.start.decision.refusals, ['coverage-incomplete']);
  const manifest = JSON.parse(readFileSync(join(run.dir, 'run.json'), 'utf8'));
  assert.deepEqual(manifest.adapter.coverage, [PROVIDER_EXECUTED_TOOLS]);
  verified(run);
  // What supervise cannot intercept it passes on untouched.
  const open = await newRun(t);
  const supervised = supervise({ ...tools, web_search: webSearch, ask: clientSide }, open);
  assert.equal(supervised.web_search, webSearch);
  assert.equal(supervised.ask, clientSide);
  endRun(open);
});

test('supervise keeps every property of a tool but execute, and supervises a tool once', { skip: SKIP }, async (t) => {
  const run = await newRun(t);
  const base = tool({ description: 'd', inputSchema: z.object({}), needsApproval: true, execute: async () => 'x' });
  Object.defineProperty(base, 'hidden', { value: 42, enumerable: false });
  const { a } = supervise({ a: base }, run);
  assert.notEqual(a.execute, base.execute);
  assert.deepEqual([a.description, a.inputSchema, a.needsApproval, a.hidden], ['d', base.inputSchema, true, 42]);
  assert.throws(() => supervise({ a }, run), /supervised already/);
  assert.throws(() => createRun(policy, { document: SHIP, tools: {}, coverage: 'complete' }), /not both/);
  assert.throws(() => createRun(policy, { document: SHIP, tools: {}, adapter: 'x' }), /adapter/);
  endRun(run);
});

test('finishRun: a loop that stopped without an answer ends the run without a final output', { skip: SKIP }, async (t) => {
  const { tools } = agentTools();
  const run = await newRun(t);
  // The step limit cut the loop after a tool step: no final answer.
  const model = scripted([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [text('never asked')]]);
  const result = await generateText({ model, tools: supervise(tools, run), stopWhen: stepCountIs(1), prompt: 'Read.' });
  assert.equal(run.finished, false);
  assert.equal(finishRun(run, result), 'incomplete');
  assert.deepEqual(
    records(run).map((r) => r.event.type),
    ['start', 'invoke', 'result', 'end'],
  );
  assert.equal(finishRun(run, result), 'incomplete'); // once over, nothing more
  verified(run);
});

test('finishRun: an event not of the SDK shape is a recorded halt, and the run ends', { skip: SKIP }, async (t) => {
  const run = await newRun(t);
  assert.equal(finishRun(run, { text: 'no steps' }), 'failed');
  // The halt ended the run: the malformed event is the last one recorded.
  const last = records(run).at(-1);
  assert.ok(String(last.event).startsWith('malformed AI SDK onFinish event (no last step with a finishReason): '), JSON.stringify(last.event));
  assert.deepEqual([last.decision.decision, last.decision.reason], ['halt', 'malformed-event']);
  assert.equal(run.finished, true);
  verified(run);
});
