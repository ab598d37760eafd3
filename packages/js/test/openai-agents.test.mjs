// The OpenAI Agents SDK adapter (runbook-policy/openai-agents).
//
// In the real SDK loop (`run()` of @openai/agents, a devDependency), offline: the model is a scripted
// implementation of the SDK's Model interface, which returns the tool calls of a script and keeps every
// input the runner sends it, so a test sees what the model was shown. Tracing is off. The runbook is the
// Pydantic AI adapter's (packages/python/tests/runbooks/ship-hotfix.yaml): `read_file` of the changelog in
// `inspect`, then `deploy` of payments-api in `ship`, gated. Every bundle is checked with `runbook-host verify`.

import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { Agent, Usage, codeInterpreterTool, handoff, run, setTracingDisabled, shellTool, tool as sdkTool, webSearchTool } from '@openai/agents';
import { z } from 'zod';
import {
  ADAPTER,
  AGENT_TOOL_INTERNALS,
  BUILTIN_TOOLS,
  HOSTED_TOOLS,
  MCP_SERVER_TOOLS,
  coverage,
  createRun,
  endRun,
  supervise,
  tool,
} from '../src/openai-agents.js';
import { RunBroken, load } from '../src/node.js';
import { shipHotfix } from '../examples/openai-agents.mjs';
import { ROOT, cli, tempDir, verify } from './helpers.mjs';

setTracingDisabled(true);

const SHIP = join(ROOT, 'packages', 'python', 'tests', 'runbooks', 'ship-hotfix.yaml');
const CHANGELOG = '## 1.4.1\n- hotfix: stop the payments retry storm\n';
const policy = await load();

/** A scripted model (the SDK's Model interface): one response per turn; it keeps every request's input. */
class ScriptedModel {
  constructor(turns) {
    this.turns = turns;
    this.inputs = [];
  }

  async getResponse(request) {
    this.inputs.push(request.input);
    const output = this.turns[this.inputs.length - 1];
    if (!output) throw new Error(`the script has no turn ${this.inputs.length}`);
    return { usage: new Usage(), output, responseId: `resp_${this.inputs.length}` };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error('the scripted model does not stream');
  }

  /** The output the model was shown for `callId` (the text of the SDK's function_call_result). */
  shown(callId) {
    for (const input of this.inputs) {
      if (!Array.isArray(input)) continue;
      const r = input.find((i) => i.type === 'function_call_result' && i.callId === callId);
      if (r) return typeof r.output === 'string' ? r.output : r.output.text;
    }
    return undefined;
  }
}

const call = (name, args, callId) => ({ type: 'function_call', callId, name, arguments: typeof args === 'string' ? args : JSON.stringify(args), status: 'completed' });
const say = (text) => ({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] });

/** The agent's real tools; each records that it ran. */
function tools(make = tool) {
  const ran = [];
  return {
    ran,
    list: [
      make({
        name: 'read_file',
        description: 'Reads a file of the repository.',
        parameters: z.object({ path: z.string() }),
        execute: async ({ path }) => {
          ran.push(['read_file', path]);
          return CHANGELOG;
        },
      }),
      make({
        name: 'deploy',
        description: 'Deploys a service.',
        parameters: z.object({ service: z.string() }),
        execute: async ({ service }) => {
          ran.push(['deploy', service]);
          return { status: 'deployed', service };
        },
      }),
      make({
        name: 'shell',
        description: 'Runs a shell command.',
        parameters: z.object({ command: z.string() }),
        execute: async ({ command }) => {
          ran.push(['shell', command]);
          return 'ran';
        },
      }),
    ],
  };
}

const newAgent = (model, list) => new Agent({ name: 'release-bot', instructions: 'Ship the hotfix.', model, tools: list });
const newRun = (t, agent, options = {}) => createRun(policy, agent, { document: SHIP, runsRoot: join(tempDir(t, 'runbook-openai-agents-'), 'runs'), ...options });

const events = (r) =>
  readFileSync(join(r.dir, 'events.ndjson'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
const report = (r) => JSON.parse(readFileSync(join(r.dir, 'report.json'), 'utf8'));

function verified(r) {
  const v = verify(r.dir);
  assert.equal(v.status, 0, `verify ${r.dir}: ${JSON.stringify(v.result)} ${v.stderr}`);
  return v.result;
}

test('the runbook lints clean', () => {
  assert.equal(cli(['lint', SHIP]).status, 0);
});

test('a real run: out of scope and undeclared blocked, the deploy held for approval, the run completes', async (t) => {
  const model = new ScriptedModel([
    [call('deploy', { service: 'payments-api' }, 'c1')], // out of scope: `deploy` belongs to `ship`
    [call('shell', { command: 'curl -s https://status.example.com' }, 'c2')], // no capability declares it
    [call('read_file', { path: 'CHANGELOG.md' }, 'c3')], // in scope: the assert passes, `ship` is next
    [call('deploy', { service: 'payments-api' }, 'c4')], // gated: held until approved
    [say('Shipped the payments-api hotfix.')],
  ]);
  const { ran, list } = tools();
  const agent = newAgent(model, list);
  const rb = await newRun(t, agent);
  const asked = [];
  const approve = async (request, { signal }) => {
    // Held: the deploy has not run while a person decides.
    assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
    assert.equal(signal.aborted, false);
    asked.push(request);
    await new Promise((r) => setTimeout(r, 100));
    return { approver: 'alice', granted: true };
  };
  const result = await run(supervise(agent, rb, { approve }), 'Ship the hotfix.');
  assert.equal(result.finalOutput, 'Shipped the payments-api hotfix.');

  // Only the calls the module allowed ran; the model read each deviation and the module's sentence as the
  // SDK's output of the rejected call.
  assert.deepEqual(ran, [
    ['read_file', 'CHANGELOG.md'],
    ['deploy', 'payments-api'],
  ]);
  assert.match(model.shown('c1'), /^blocked by the runbook: .*out-of-scope-tool/);
  assert.match(model.shown('c1'), /not in the current step/);
  assert.match(model.shown('c2'), /^blocked by the runbook: .*undeclared-tool/);
  assert.equal(model.shown('c3'), CHANGELOG);
  assert.equal(model.shown('c4'), JSON.stringify({ status: 'deployed', service: 'payments-api' }));
  // The SDK keeps the guardrails' results: the module's decisions.
  assert.deepEqual(
    result.toolInputGuardrailResults.map((g) => [g.guardrail.name, g.output.behavior.type, g.output.outputInfo.decision]),
    [
      ['runbook', 'rejectContent', 'deny'],
      ['runbook', 'rejectContent', 'deny'],
      ['runbook', 'allow', 'allow'],
      ['runbook', 'allow', 'allow'],
    ],
  );

  // The approval callback was asked once, for that call, by its hash.
  const sha = policy.callSha256('deploy', { service: 'payments-api' });
  assert.deepEqual(
    asked.map((r) => [r.runId, r.step, r.tool, r.arguments, r.callSha256, r.callId]),
    [[rb.runId, 'ship', 'deploy', { service: 'payments-api' }, sha, 'c4']],
  );

  // The bundle, ended by the agent's end at the terminal.
  assert.equal(rb.finished, true);
  assert.deepEqual(
    events(rb).map((e) => [e.event.type, e.event.call_id ?? null, e.decision.decision, e.decision.deviation ?? e.decision.reason ?? null]),
    [
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
    ],
  );
  const approval = events(rb)[6].event;
  assert.deepEqual([approval.approver, approval.granted, approval.step, approval.call_sha256], ['alice', true, 'ship', sha]);
  assert.deepEqual(events(rb)[8].event.result, { status: 'deployed', service: 'payments-api' });
  const rep = report(rb);
  assert.deepEqual([rep.outcome, rep.terminal, rep.coverage], ['completed', 'shipped', 'complete']);
  const manifest = JSON.parse(readFileSync(join(rb.dir, 'run.json'), 'utf8'));
  assert.deepEqual([manifest.adapter.name, manifest.adapter.coverage], [ADAPTER, 'complete']);
  const v = verified(rb);
  assert.deepEqual([v.outcome, v.events], ['completed', 11]);
  assert.equal(endRun(rb), 'completed'); // ended already: nothing more recorded
  assert.equal(events(rb).length, 11);
});

const gatedScript = () => [[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [call('deploy', { service: 'payments-api' }, 'c2')], [say('done')]];

for (const [name, approve, problem] of [
  ['no callback', null, /no approval callback was given/],
  ['a callback that throws', () => {
    throw new Error('pager down');
  }, /the approval callback failed \(Error\)/],
  ['a rejected promise', () => Promise.reject(new TypeError('nope')), /the approval callback failed \(TypeError\)/],
  ['a callback that answers nonsense', () => true, /answered no \{approver, granted\}/],
  ['a person who says no', () => ({ approver: 'bob', granted: false }), /bob refused to approve this call/],
  ['the agent approving itself', () => ({ approver: 'release-bot', granted: true }), /the approval was not accepted/],
  ['a callback that never answers', () => new Promise(() => {}), /no approval came within 0.2 s/],
]) {
  test(`a gated call without a valid approval never runs (${name})`, async (t) => {
    const model = new ScriptedModel(gatedScript());
    const { ran, list } = tools();
    const agent = newAgent(model, list);
    const rb = await newRun(t, agent);
    const result = await run(supervise(agent, rb, { approve, approvalTimeout: 0.2 }), 'Ship the hotfix.');
    assert.equal(result.finalOutput, 'done');
    assert.deepEqual(ran, [['read_file', 'CHANGELOG.md']]);
    const shown = model.shown('c2');
    assert.match(shown, /^blocked by the runbook: .*needs-approval/);
    assert.match(shown, problem);
    // Never an allow recorded for the deploy; the agent ended away from a terminal, so the run stays open
    // until the program ends it: incomplete.
    assert.deepEqual(
      events(rb)
        .filter((e) => e.event.type === 'invoke' && e.event.tool === 'deploy')
        .map((e) => e.decision.decision),
      ['needs-approval'],
    );
    assert.equal(rb.finished, false);
    assert.equal(events(rb).at(-1).event.type, 'final_output');
    assert.equal(endRun(rb), 'incomplete');
    verified(rb);
  });
}

test('arguments that are not a JSON object are a recorded halt, and nothing runs after', async (t) => {
  const model = new ScriptedModel([
    [call('read_file', '["CHANGELOG.md"]', 'c1')],
    [call('read_file', { path: 'CHANGELOG.md' }, 'c2')],
    [say('gave up')],
  ]);
  const { ran, list } = tools();
  const agent = newAgent(model, list);
  const rb = await newRun(t, agent);
  await run(supervise(agent, rb), 'Ship the hotfix.');
  assert.deepEqual(ran, []);
  // Arguments that fail the tool's schema: the SDK (by default) hides them from guardrails and shows the
  // model its own redacted tool error instead of the rejection's text.
  assert.equal(model.shown('c1'), 'Tool execution failed. Error details are redacted.');
  assert.match(model.shown('c2'), /^blocked by the runbook: The run halted/);
  const ev = events(rb);
  assert.equal(ev[1].event, 'malformed invoke of tool "read_file" (the arguments are not a JSON object): ""');
  assert.deepEqual([ev[1].decision.decision, ev[1].decision.reason], ['halt', 'malformed-event']);
  assert.deepEqual([ev[2].event.type, ev[2].event.call_id, ev[2].decision.decision], ['invoke', 'c2', 'halt']);
  // The module ended the run at the halt: the agent's end finished the bundle.
  assert.equal(rb.finished, true);
  assert.equal(endRun(rb), 'failed');
  verified(rb);
});

test('arguments that are not JSON never reach a tool: the SDK answers its parse error, nothing is recorded', async (t) => {
  const model = new ScriptedModel([[call('deploy', '{"service": "payments-api"', 'c1')], [say('gave up')]]);
  const { ran, list } = tools();
  const agent = newAgent(model, list);
  const rb = await newRun(t, agent);
  await run(supervise(agent, rb), 'Ship the hotfix.');
  assert.deepEqual(ran, []);
  assert.match(model.shown('c1'), /error occurred while parsing tool arguments/);
  // The documented blind spot: the runner answered it before any guardrail ran.
  assert.deepEqual(
    events(rb).map((e) => e.event.type),
    ['start', 'final_output'],
  );
  assert.equal(endRun(rb), 'incomplete');
  verified(rb);
});

test("a tool that throws is recorded as an error result, and the model gets the SDK's tool error", async (t) => {
  const model = new ScriptedModel([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [say('stopped')]]);
  const readFile = tool({
    name: 'read_file',
    description: 'Reads a file.',
    parameters: z.object({ path: z.string() }),
    execute: async () => {
      throw new Error('no such file');
    },
  });
  const agent = newAgent(model, [readFile]);
  const rb = await newRun(t, agent);
  assert.equal((await run(supervise(agent, rb), 'x')).finalOutput, 'stopped');
  assert.equal(model.shown('c1'), 'An error occurred while running the tool. Please try again.');
  const [result] = events(rb).filter((e) => e.event.type === 'result');
  assert.deepEqual([result.event.result, result.event.is_error, result.event.call_id], ['Error: no such file', true, 'c1']);
  // The step's assert (`is_error` false) failed: the module routes the run accordingly.
  endRun(rb);
  verified(rb);
});

test("a tool made with the SDK's own tool() is supervised too; its error is seen as the SDK's text", async (t) => {
  const model = new ScriptedModel([
    [call('deploy', { service: 'payments-api' }, 'c1')],
    [call('read_file', { path: 'CHANGELOG.md' }, 'c2')],
    [say('stopped')],
  ]);
  const { ran, list } = tools(sdkTool);
  const failing = sdkTool({
    name: 'read_file',
    description: 'Reads a file.',
    parameters: z.object({ path: z.string() }),
    execute: async () => {
      throw new Error('no such file');
    },
  });
  const agent = newAgent(model, [list[1], failing]);
  const rb = await newRun(t, agent);
  await run(supervise(agent, rb), 'x');
  assert.deepEqual(ran, []);
  assert.match(model.shown('c1'), /out-of-scope-tool/);
  const [result] = events(rb).filter((e) => e.event.type === 'result');
  assert.deepEqual([result.event.result, result.event.is_error], ['An error occurred while running the tool. Please try again.', false]);
  endRun(rb);
  verified(rb);
});

test('a run that cannot record blocks every call', async (t) => {
  const model = new ScriptedModel([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [say('stopped')]]);
  const { ran, list } = tools();
  const agent = newAgent(model, list);
  const rb = await newRun(t, agent);
  // The bundle's directory is gone: the end cannot be written, and the run is broken from then on.
  rmSync(rb.dir, { recursive: true });
  assert.throws(() => endRun(rb), RunBroken);
  await run(supervise(agent, rb), 'x');
  assert.deepEqual(ran, []);
  assert.match(model.shown('c1'), /^blocked: the runbook supervisor cannot decide this call \(run .* is broken/);
  assert.ok(rb.broken instanceof RunBroken);
});

test('after the run has ended, every call is blocked and nothing more is recorded', async (t) => {
  const model = new ScriptedModel([[call('read_file', { path: 'CHANGELOG.md' }, 'c1')], [say('stopped')]]);
  const { ran, list } = tools();
  const agent = newAgent(model, list);
  const rb = await newRun(t, agent);
  endRun(rb, 'interrupted');
  const n = events(rb).length;
  await run(supervise(agent, rb), 'x');
  assert.deepEqual(ran, []);
  assert.match(model.shown('c1'), /cannot decide this call .*is over/);
  assert.equal(events(rb).length, n);
  verified(rb);
});

test('supervising again binds the agent to the new run: one guardrail per tool, the original tools untouched', async (t) => {
  const { list } = tools();
  const agent = newAgent(new ScriptedModel([]), list);
  const first = await newRun(t, agent);
  const second = await newRun(t, agent);
  supervise(agent, first);
  supervise(agent, second);
  for (const [i, t2] of agent.tools.entries()) {
    assert.deepEqual(
      t2.inputGuardrails.map((g) => g.name),
      ['runbook'],
    );
    assert.deepEqual(
      t2.outputGuardrails.map((g) => g.name),
      ['runbook'],
    );
    assert.equal(list[i].inputGuardrails.length, 0);
  }
  assert.equal(agent.eventEmitter.listenerCount('agent_end'), 1); // the first run's listener was removed
  for (const r of [first, second]) {
    endRun(r);
    verified(r);
  }
});

test('coverage is complete only when every tool is a function tool the supervisor sees', async (t) => {
  const { list } = tools();
  const model = new ScriptedModel([]);
  assert.equal(coverage(newAgent(model, list)), 'complete');
  assert.deepEqual(coverage(newAgent(model, [...list, webSearchTool()])), [HOSTED_TOOLS]);
  assert.deepEqual(coverage(newAgent(model, [...list, codeInterpreterTool()])), [HOSTED_TOOLS]);
  const shell = shellTool({ shell: { run: async () => ({ output: [] }) } });
  assert.deepEqual(coverage(newAgent(model, [...list, shell])), [BUILTIN_TOOLS]);
  const helper = new Agent({ name: 'helper', model, tools: [] });
  assert.deepEqual(coverage(newAgent(model, [...list, helper.asTool({ toolName: 'helper', toolDescription: 'Helps.' })])), [AGENT_TOOL_INTERNALS]);
  const withMcp = new Agent({ name: 'mcp-bot', model, tools: list, mcpServers: [{ name: 'fake', cacheToolsList: false }] });
  assert.deepEqual(coverage(withMcp), [MCP_SERVER_TOOLS]);
  // Agents it hands off to count, as agents or as handoffs.
  const researcher = new Agent({ name: 'researcher', model, tools: [webSearchTool()] });
  assert.deepEqual(coverage(new Agent({ name: 'lead', model, tools: list, handoffs: [researcher] })), [HOSTED_TOOLS]);
  assert.deepEqual(coverage(new Agent({ name: 'lead', model, tools: list, handoffs: [handoff(researcher)] })), [HOSTED_TOOLS]);

  // A blind claim may not run destructive work: the module refuses the run up front.
  const rb = await newRun(t, newAgent(model, [...list, webSearchTool()]));
  assert.equal(rb.over, true);
  assert.deepEqual(rb.start.decision.refusals, ['coverage-incomplete']);
  verified(rb);
  assert.throws(() => createRun(policy, newAgent(model, list), { document: SHIP, coverage: 'complete' }), /adapter's own/);
});

test('a handoff agent is supervised with the same run, and its end ends the run', async (t) => {
  const { ran, list } = tools();
  const model = new ScriptedModel([
    [call('transfer_to_deployer', {}, 'h1')],
    [call('read_file', { path: 'CHANGELOG.md' }, 'c1')],
    [call('deploy', { service: 'payments-api' }, 'c2')],
    [say('Shipped.')],
  ]);
  const deployer = new Agent({ name: 'deployer', model, tools: list });
  const lead = new Agent({ name: 'lead', model, tools: [], handoffs: [deployer] });
  const rb = await newRun(t, lead);
  await run(supervise(lead, rb, { approve: () => ({ approver: 'alice', granted: true }) }), 'Ship the hotfix.');
  assert.deepEqual(ran, [
    ['read_file', 'CHANGELOG.md'],
    ['deploy', 'payments-api'],
  ]);
  assert.equal(rb.finished, true);
  assert.equal(report(rb).outcome, 'completed');
  verified(rb);
});

test("the README's example runs with a scripted model, and its bundle verifies", async (t) => {
  const repo = join(tempDir(t), 'repo');
  mkdirSync(repo);
  writeFileSync(join(repo, 'CHANGELOG.md'), CHANGELOG);
  const model = new ScriptedModel([
    [call('read_file', { path: 'CHANGELOG.md' }, 'c1')],
    [call('deploy', { service: 'payments-api' }, 'c2')],
    [say('Shipped the payments-api hotfix.')],
  ]);
  const asked = [];
  const approve = (request) => {
    asked.push(request.tool);
    return { approver: 'alice', granted: true };
  };
  const out = await shipHotfix(model, { repo, approve, document: SHIP, runsRoot: join(tempDir(t), 'runs') });
  assert.deepEqual([out.output, out.outcome, asked], ['Shipped the payments-api hotfix.', 'completed', ['deploy']]);
  assert.equal(verify(out.dir).status, 0);
  // What the README shows is the file, at most 25 lines.
  const lines = readFileSync(new URL('../examples/openai-agents.mjs', import.meta.url), 'utf8').trimEnd().split('\n');
  assert.ok(lines.length <= 25, `${lines.length} lines`);
});
