// The LangGraph adapter (runbook-policy/langgraph), in real LangGraph graphs, offline.
//
// The agents are LangGraph's own: `createReactAgent` (through the README example, examples/langgraph.mjs)
// and a hand-built StateGraph with a model node and the RunbookToolNode. The model is a small BaseChatModel
// of @langchain/core that plays a script of AIMessages with tool calls (the shipped fake chat models of
// @langchain/core/utils/testing answer text only) and keeps every ToolMessage it is shown. The tools are
// @langchain/core `tool()`s with zod schemas, each recording that it ran. The runbook is the Python
// adapter's test runbook, packages/python/tests/runbooks/ship-hotfix.yaml. Every bundle a test ends is
// checked with `$RUNBOOK_HOST verify`.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { BaseChatModel } from '@langchain/core/language_models/chat_models';
import { AIMessage, isAIMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { END, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { createReactAgent, toolsCondition } from '@langchain/langgraph/prebuilt';
import { z } from 'zod';
import { shipHotfix } from '../examples/langgraph.mjs';
import { ADAPTER, NATIVE_TOOLS, RunbookTool, RunbookToolNode, ToolBlocked, UNWRAPPED_TOOLS, coverage, createRun, endRun, runbookTools } from '../src/langgraph.js';
import { load } from '../src/node.js';
import { ROOT, cli, tempDir, verify } from './helpers.mjs';

const SHIP = join(ROOT, 'packages', 'python', 'tests', 'runbooks', 'ship-hotfix.yaml');
const DEPLOY = { service: 'payments-api' };
const CHANGELOG = '## 1.4.1\n- hotfix: stop the payments retry storm\n';

const policy = await load();

/** A chat model playing `turns` (each a list of tool calls `[name, args, id]`, or the answer's text). */
class ScriptedChatModel extends BaseChatModel {
  constructor(turns) {
    super({});
    this.turns = turns;
    /** Every ToolMessage the model was shown, in order. */
    this.seen = [];
    /** The names of the tools it was offered (bindTools). */
    this.offered = [];
  }

  _llmType() {
    return 'scripted';
  }

  bindTools(tools) {
    this.offered = tools.map((t) => t.name);
    return this;
  }

  async _generate(messages) {
    const ids = new Set(this.seen.map((m) => m.tool_call_id));
    for (const m of messages) if (m.getType() === 'tool' && !ids.has(m.tool_call_id)) this.seen.push(m);
    const turn = this.turns[messages.filter((m) => isAIMessage(m)).length];
    if (turn === undefined) throw new Error('the script has no more turns');
    const message = typeof turn === 'string' ? new AIMessage(turn) : turn instanceof AIMessage ? turn : new AIMessage({ content: '', tool_calls: turn.map(([name, args, id]) => ({ name, args, id, type: 'tool_call' })) });
    return { generations: [{ message, text: typeof turn === 'string' ? turn : '' }] };
  }

  /** The ToolMessage answering call `id`. */
  shown(id) {
    const m = this.seen.find((x) => x.tool_call_id === id);
    assert.ok(m, `the model was shown no ToolMessage for ${id}`);
    return m;
  }
}

/** The agent's real tools; each records that it ran. */
function makeTools({ readFails = false } = {}) {
  const ran = [];
  const tools = [
    tool(
      async ({ path }) => {
        ran.push(['read_file', path]);
        if (readFails) throw new Error('disk on fire');
        return CHANGELOG;
      },
      { name: 'read_file', description: 'Reads a file of the repository.', schema: z.object({ path: z.string() }) },
    ),
    tool(
      async ({ service }) => {
        ran.push(['deploy', service]);
        return { status: 'deployed', service };
      },
      { name: 'deploy', description: 'Deploys a service.', schema: z.object({ service: z.string() }) },
    ),
    tool(
      async ({ command }) => {
        ran.push(['shell', command]);
        return 'ran';
      },
      { name: 'shell', description: 'Runs a shell command.', schema: z.object({ command: z.string() }) },
    ),
  ];
  return { tools, ran };
}

const newRun = (t, options = {}) => createRun(policy, { document: SHIP, runsRoot: join(tempDir(t), 'runs'), agent: 'release-bot', coverage: coverage({ everyToolWrapped: true }), ...options });

const events = (run) =>
  readFileSync(join(run.dir, 'events.ndjson'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
/** `[type, call_id, decision, deviation or reason]` of every recorded event. */
const kinds = (run) => events(run).map(({ event: e, decision: d }) => [typeof e === 'string' ? 'malformed' : e.type, e.call_id ?? null, d.decision, d.deviation ?? d.reason ?? null]);
const report = (run) => JSON.parse(readFileSync(join(run.dir, 'report.json'), 'utf8'));

function verified(run) {
  const v = verify(run.dir);
  assert.equal(v.status, 0, `verify ${run.dir}: ${JSON.stringify(v.result)} ${v.stderr}`);
  return v.result;
}

function assertBlocked(message, ...says) {
  assert.equal(message.status, 'error', JSON.stringify(message));
  assert.match(message.content, /^blocked by the runbook: /);
  for (const s of says) assert.ok(message.content.includes(s), `${JSON.stringify(message.content)} does not say ${s}`);
}

/** The ReAct agent of the tests (as the example builds it) for an existing run. */
async function react(run, model, tools, options = {}) {
  const agent = createReactAgent({ llm: model, tools: new RunbookToolNode(tools, { run, ...options }) });
  return agent.invoke({ messages: [{ role: 'user', content: 'Ship the payments-api hotfix.' }] });
}

test('the test runbook lints clean', () => {
  const r = cli(['lint', '--format', 'json', SHIP]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout).structure, 'P2');
});

test('the README example: blocked out of scope and undeclared, the gated deploy waits for approval, the run completes', async (t) => {
  const { tools, ran } = makeTools();
  const model = new ScriptedChatModel([
    [['deploy', DEPLOY, 'c1']], // out of scope: `deploy` belongs to `ship`
    [['shell', { command: 'curl -s https://status.example.com' }, 'c2']], // undeclared
    [['read_file', { path: 'CHANGELOG.md' }, 'c3']], // in scope: the assert passes, `ship` is next
    [['deploy', DEPLOY, 'c4']], // gated: held until approved
    'Shipped the payments-api hotfix.',
  ]);
  const asked = [];
  const approve = async (request, { signal }) => {
    // Held: nothing has deployed while the approval is pending.
    assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
    assert.equal(signal.aborted, false);
    asked.push(request);
    await new Promise((r) => setTimeout(r, 100)); // a person takes a moment
    return { approver: 'alice', granted: true };
  };
  const { run, result, outcome } = await shipHotfix(model, tools, { approve, document: SHIP, runsRoot: join(tempDir(t), 'runs') });
  assert.equal(outcome, 'completed');
  assert.equal(result.messages.at(-1).content, 'Shipped the payments-api hotfix.');
  // The model was offered the tools under their own names; only the calls the module allowed ran.
  assert.deepEqual(model.offered, ['read_file', 'deploy', 'shell']);
  assert.deepEqual(ran, [['read_file', 'CHANGELOG.md'], ['deploy', 'payments-api']]);
  // The model read each deviation and the module's sentence as a ToolMessage with status error.
  assertBlocked(model.shown('c1'), 'out-of-scope-tool', 'not in the current step');
  assertBlocked(model.shown('c2'), 'undeclared-tool');
  assert.deepEqual([model.shown('c3').status, model.shown('c3').content], ['success', CHANGELOG]);
  assert.deepEqual([model.shown('c4').status, JSON.parse(model.shown('c4').content)], ['success', { status: 'deployed', service: 'payments-api' }]);
  // Asked once, for that call, by its hash and the model's tool-call id.
  const sha = policy.callSha256('deploy', DEPLOY);
  assert.deepEqual(
    asked.map((r) => [r.runId, r.step, r.tool, r.arguments, r.callSha256, r.toolCallId]),
    [[run.runId, 'ship', 'deploy', DEPLOY, sha, 'c4']],
  );
  assert.deepEqual(kinds(run), [
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
  const recorded = events(run);
  assert.deepEqual([recorded[6].event.approver, recorded[6].event.granted, recorded[6].event.call_sha256], ['alice', true, sha]);
  // The result is what the tool returned (the object), not the text the model was shown.
  assert.deepEqual(recorded[8].event.result, { status: 'deployed', service: 'payments-api' });
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
  assert.equal(endRun(run, result), 'completed'); // ended already: nothing more recorded
  assert.equal(events(run).length, 11);
});

const GATED = [[['read_file', { path: 'CHANGELOG.md' }, 'c1']], [['deploy', DEPLOY, 'c2']], 'done'];

for (const [name, approve, says] of [
  ['no callback', null, 'no approval callback was given'],
  [
    'a callback that throws',
    () => {
      throw new TypeError('pager down');
    },
    'the approval callback failed (TypeError)',
  ],
  [
    'an async callback that rejects',
    async () => {
      throw new RangeError('no');
    },
    'the approval callback failed (RangeError)',
  ],
  ['a callback that answers nonsense', () => true, 'answered no {approver, granted}'],
  ['a person who says no', () => ({ approver: 'alice', granted: false }), 'alice refused to approve this call'],
  ['the agent approving itself', () => ({ approver: 'release-bot', granted: true }), 'the approval was not accepted'],
  ['a callback that never answers', () => new Promise(() => {}), 'no approval came within 0.2 s'],
]) {
  test(`a gated call without a valid approval never runs: ${name}`, async (t) => {
    t.mock.method(process, 'emitWarning', () => {}); // the warning a throwing callback gets
    const run = await newRun(t);
    const { tools, ran } = makeTools();
    const model = new ScriptedChatModel(GATED);
    await react(run, model, tools, { approve, approvalTimeout: 0.2 });
    assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
    assertBlocked(model.shown('c2'), 'awaiting-approval', says);
    assert.equal(endRun(run, { messages: [new AIMessage('done')] }), 'incomplete');
    assert.ok(!events(run).some((e) => e.event.type === 'invoke' && e.event.tool === 'deploy' && e.decision.decision === 'allow'));
    verified(run);
  });
}

test('a hand-built StateGraph: the tool node decides, a tool that throws is recorded as an error result', async (t) => {
  const run = await newRun(t);
  const { tools, ran } = makeTools({ readFails: true });
  const model = new ScriptedChatModel([[['read_file', { path: 'CHANGELOG.md' }, 'c1']], 'The changelog could not be read.']);
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('agent', async (state) => ({ messages: [await model.bindTools(tools).invoke(state.messages)] }))
    .addNode('tools', new RunbookToolNode(tools, { run }))
    .addEdge(START, 'agent')
    .addConditionalEdges('agent', toolsCondition, ['tools', END])
    .addEdge('tools', 'agent')
    .compile();
  const result = await graph.invoke({ messages: [{ role: 'user', content: 'Read the changelog.' }] });
  assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
  // The ToolNode's own error message reached the model; the run recorded the error as the result.
  assert.equal(model.shown('c1').status, 'error');
  assert.match(model.shown('c1').content, /disk on fire/);
  const last = events(run).filter((e) => e.event.type === 'result').at(-1);
  assert.deepEqual([last.event.call_id, last.event.is_error, last.event.result], ['c1', true, 'Error: disk on fire']);
  // The runbook judges that result: the `inspect` assert fails, and the run fails closed.
  assert.equal(endRun(run, result), 'failed');
  assert.equal(report(run).steps.inspect.assert, 'fail');
  verified(run);
});

test('arguments JSON cannot hold: recorded as malformed, the run halts, no tool runs again', async (t) => {
  const run = await newRun(t);
  const { tools, ran } = makeTools();
  const model = new ScriptedChatModel([[['read_file', { path: 10n }, 'c1']], [['read_file', { path: 'CHANGELOG.md' }, 'c2']], 'stopped']);
  const result = await react(run, model, tools);
  assert.deepEqual(ran, []);
  assertBlocked(model.shown('c1'), 'malformed');
  assertBlocked(model.shown('c2'));
  // The run records what it cannot take as a line that is no event (naming the arguments), and halts.
  assert.deepEqual(kinds(run).slice(1), [
    ['malformed', null, 'halt', 'malformed-event'],
    ['invoke', 'c2', 'halt', 'halted'],
  ]);
  assert.match(events(run)[1].event, /arguments/);
  assert.equal(endRun(run, result), 'failed');
  verified(run);
});

test("the model's tool calls whose arguments did not parse (invalid_tool_calls) are recorded as malformed", async (t) => {
  const bad = { name: 'deploy', args: '{"service": "payments-', id: 'c9', error: 'Unexpected end of JSON input', type: 'invalid_tool_call' };
  await t.test('beside a valid call: the tool node records it first, so the valid call is halted too', async (t) => {
    const run = await newRun(t);
    const { tools, ran } = makeTools();
    const mixed = new AIMessage({ content: '', tool_calls: [{ name: 'read_file', args: { path: 'CHANGELOG.md' }, id: 'c1', type: 'tool_call' }], invalid_tool_calls: [bad] });
    const model = new ScriptedChatModel([mixed, 'stopped']);
    const result = await react(run, model, tools);
    assert.deepEqual(ran, []);
    assertBlocked(model.shown('c9'), 'malformed');
    assertBlocked(model.shown('c1'));
    const [first] = events(run).slice(1);
    assert.equal(first.decision.reason, 'malformed-event');
    assert.match(first.event, /^malformed LangGraph tool call \(arguments that are not JSON: Unexpected end of JSON input\): \{"name":"deploy"/);
    assert.equal(endRun(run, result), 'failed');
    verified(run);
  });
  await t.test('alone: the agent stops on it, and endRun records it', async (t) => {
    const run = await newRun(t);
    const { tools, ran } = makeTools();
    const model = new ScriptedChatModel([new AIMessage({ content: '', invalid_tool_calls: [bad] })]);
    const result = await react(run, model, tools);
    assert.deepEqual(ran, []);
    assert.equal(endRun(run, result), 'failed');
    assert.deepEqual(kinds(run).at(-1).slice(2), ['halt', 'malformed-event']);
    assert.ok(!events(run).some((e) => e.event.type === 'final_output'));
    verified(run);
  });
});

test('a call to a tool the node does not have is decided and recorded too', async (t) => {
  const run = await newRun(t);
  const { tools, ran } = makeTools();
  const model = new ScriptedChatModel([[['rm_rf', { path: '/' }, 'c1']], 'ok']);
  const result = await react(run, model, tools);
  assert.deepEqual(ran, []);
  assertBlocked(model.shown('c1'), 'undeclared-tool');
  assert.deepEqual(kinds(run)[1], ['invoke', 'c1', 'deny', 'undeclared-tool']);
  endRun(run, result);
  verified(run);
});

test('parallel tool calls of one message, each sent to the node on its own (createReactAgent v2)', async (t) => {
  const run = await newRun(t);
  const { tools, ran } = makeTools();
  const model = new ScriptedChatModel([
    [
      ['read_file', { path: 'CHANGELOG.md' }, 'c1'],
      ['shell', { command: 'rm -rf /' }, 'c2'],
    ],
    'read it',
  ]);
  const agent = createReactAgent({ llm: model, tools: new RunbookToolNode(tools, { run }), version: 'v2' });
  const result = await agent.invoke({ messages: [{ role: 'user', content: 'go' }] });
  assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
  assert.equal(model.shown('c1').status, 'success');
  assertBlocked(model.shown('c2'), 'undeclared-tool');
  assert.deepEqual(
    kinds(run)
      .filter((k) => k[0] === 'invoke')
      .map((k) => k.slice(1, 3))
      .sort(),
    [
      ['c1', 'allow'],
      ['c2', 'deny'],
    ],
  );
  endRun(run, result);
  verified(run);
});

test('a wrapped tool invoked directly: allowed runs and is recorded, blocked throws ToolBlocked', async (t) => {
  const run = await newRun(t);
  const { tools, ran } = makeTools();
  const [read, deploy] = runbookTools(tools, { run });
  assert.ok(read instanceof RunbookTool);
  assert.deepEqual([read.name, read.description, read.schema], [tools[0].name, tools[0].description, tools[0].schema]);
  await assert.rejects(deploy.invoke(DEPLOY), (e) => e instanceof ToolBlocked && /out-of-scope-tool/.test(e.message));
  assert.equal(await read.invoke({ path: 'CHANGELOG.md' }), CHANGELOG);
  assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
  assert.deepEqual(kinds(run).slice(1), [
    ['invoke', null, 'deny', 'out-of-scope-tool'],
    ['invoke', null, 'allow', null],
    ['result', null, 'allow', null],
  ]);
  assert.equal(events(run).at(-1).event.result, CHANGELOG);
  endRun(run, null);
  verified(run);
});

test('arguments the tool schema refuses, in a call the runbook allows: an error result, the function never runs', async (t) => {
  const run = await newRun(t);
  const ran = [];
  // The runbook's `when` reads /path only; the schema also wants `lines`.
  const strict = tool(async () => ran.push('strict'), { name: 'read_file', description: 'Reads lines.', schema: z.object({ path: z.string(), lines: z.number() }) });
  const model = new ScriptedChatModel([[['read_file', { path: 'CHANGELOG.md' }, 'c1']], 'gave up']);
  const result = await react(run, model, [strict]);
  assert.deepEqual(ran, []);
  assert.equal(model.shown('c1').status, 'error');
  assert.match(model.shown('c1').content, /did not match expected schema/);
  const last = events(run).filter((e) => e.event.type === 'result').at(-1);
  assert.deepEqual([last.event.call_id, last.event.is_error], ['c1', true]);
  assert.match(last.event.result, /^ToolInputParsingException: Received tool input did not match expected schema/);
  assert.equal(endRun(run, result), 'failed'); // the step's assert judged the error
  verified(run);
});

test('coverage: complete only when every tool is wrapped and none is native; anything else is refused destructive work', async (t) => {
  assert.equal(coverage({ everyToolWrapped: true }), 'complete');
  assert.deepEqual(coverage({ everyToolWrapped: false }), [UNWRAPPED_TOOLS]);
  assert.deepEqual(coverage({ everyToolWrapped: true, nativeTools: true }), [NATIVE_TOOLS]);
  assert.throws(() => coverage({}), TypeError);
  assert.throws(() => createRun(policy, { document: SHIP, agent: 'a' }), /give `coverage`/);
  assert.throws(() => createRun(policy, { document: SHIP, agent: 'a', coverage: 'complete', adapter: 'x' }), TypeError);
  assert.throws(() => new RunbookToolNode([], {}), /`run` must be the Run/);
  // ship-hotfix deploys (destructive): a blind supervisor is refused at the start.
  const run = await newRun(t, { coverage: coverage({ everyToolWrapped: false }) });
  assert.equal(run.over, true);
  assert.ok(run.start.decision.refusals.some((r) => /coverage/.test(JSON.stringify(r))), JSON.stringify(run.start.decision));
  assert.equal(endRun(run), 'refused');
  verified(run);
});

test('endRun without a result (the graph threw) ends the run interrupted', async (t) => {
  const run = await newRun(t);
  const { tools } = makeTools();
  const model = new ScriptedChatModel([[['read_file', { path: 'CHANGELOG.md' }, 'c1']]]); // then no more turns: the model throws
  await assert.rejects(react(run, model, tools), /no more turns/);
  assert.equal(endRun(run), 'incomplete');
  assert.deepEqual(events(run).at(-1).event, { type: 'end', reason: 'interrupted', at: events(run).at(-1).event.at });
  verified(run);
});
