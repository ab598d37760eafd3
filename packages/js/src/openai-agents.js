// `runbook-policy/openai-agents` (Node only): supervise an OpenAI Agents SDK agent (@openai/agents) with a
// runbook, through the SDK's own tool input and output guardrails.
//
//   import { Agent, run } from '@openai/agents';
//   import { load } from 'runbook-policy';
//   import { createRun, endRun, supervise, tool } from 'runbook-policy/openai-agents';
//
//   const agent = new Agent({ name: 'release-bot', model, tools: [readFile, deploy] });
//   const runbook = await createRun(await load(), agent, { document: 'runbook.yaml' });
//   const result = await run(supervise(agent, runbook, { approve: askAPerson }), 'ship the hotfix');
//   const outcome = endRun(runbook); // a no-op when the agent's end already ended it
//
// `supervise(agent, run, {approve})` gives every function tool of the agent (and of the agents it hands off
// to) a tool input guardrail, last, and a tool output guardrail, first. The runner runs the input guardrails
// of a call after the SDK's own `needsApproval` and before the tool's `execute`, and runs nothing of the
// tool when one rejects (runner/toolExecution `runApprovedFunctionTool`), so for each call:
//
// - the input guardrail feeds `invoke {tool, arguments, callId}` (the tool's name, its arguments parsed from
//   the model's JSON, the model's call id) before anything runs;
// - allowed: the tool runs; the output guardrail feeds its return value as the `result`. A throw of an
//   `execute` given to this module's `tool()` (the SDK's `tool()`, its `execute` watched) is fed as an
//   error result, `is_error: true`, with the error's name and message; the SDK still gives the model its
//   tool error text (the tool's `errorFunction`);
// - blocked (`deny`, `halt`): the guardrail answers `rejectContent` with the module's sentence, which the
//   SDK hands to the model as the call's output (through the tool's `errorFunction` for a tool with an
//   `outputSchema`), as it does for any rejected call: the tool never runs;
// - `needs-approval`: the guardrail holds the call until `approve` (the embedding program's callback, never
//   the agent's) answers an ApprovalAnswer, fed as an `approval` bound to the call's hash (docs/spec/run.md#approvals-bound-to-a-call);
//   then the call is decided again. No callback, a refusal, an approval the module does not accept, a
//   callback that throws or answers something else, or no answer within `approvalTimeout` seconds: blocked;
// - arguments that are not a JSON object (or a call the run cannot encode) are fed as a malformed event
//   (`run.feedMalformed`): the run halts (`malformed-event`), the call is blocked, and so is every later one.
//   (For arguments that fail the tool's schema the SDK, unless told to log tool data, hands guardrails the
//   arguments redacted, so they are recorded as "", and shows the model its own redacted tool error.)
// - a run that cannot decide or record (RunBroken, RunOver: a PolicyError) blocks the call; a result that
//   cannot be recorded is not handed to the model.
//
// The agent's end (the AgentHooks `agent_end` event, emitted when `run()` has a final output) feeds
// `final_output` (unless the run is over) and, when the run stands at a terminal of the runbook or the
// module ended it, ends the run (report and receipt written). Away from a terminal it stays open (the program
// may `run()` the conversation again); `endRun` ends it then (outcome `incomplete`). A `run()` that stops on
// an SDK interruption (`needsApproval`) or an error does not end the agent: end the run with `endRun`.
//
// What this adapter cannot see (coverage is `complete` only when every tool call of the run goes through a
// supervised function tool: `coverage(agent)` says which, and `createRun` claims it):
// - hosted tools, run by the model provider and never by the runner: webSearchTool, fileSearchTool,
//   codeInterpreterTool, imageGenerationTool, hostedMcpTool, tool search (`hosted-tools`);
// - the runner's built-in executors, which have no guardrails: computerTool, shellTool, applyPatchTool
//   (`builtin-tools`);
// - tools of the agent's `mcpServers`, listed by the runner at each turn (`mcp-server-tools`);
// - what an agent used as a tool (`agent.asTool()`) does inside: its call is decided, its own tools are
//   not seen (`agent-tool-internals`);
// - a call whose arguments are not JSON at all: the runner answers it with its own parse error before any
//   guardrail or tool runs, so the tool never runs, and nothing is recorded;
// - the error of a tool made with the SDK's own `tool()`: its default `errorFunction` turns the throw into
//   output text before the output guardrail sees it, so it is recorded as that text, not as an error;
// - a result of a call that fails past the `errorFunction` (a tool with `outputSchema` and no
//   `errorFunction`, a timeout with `timeoutBehavior: 'raise_exception'`): `run()` rejects, the run has the
//   call without a result; end it with `endRun`;
// - tools added to the agent after `supervise`, and tool input guardrails placed after this module's.
// Two more things to know: with `toolExecution: {preApprovalInputGuardrails: true}` the runner runs input
// guardrails before its own approval interruption too, so such a call is decided (recorded) twice; and the
// binding is per Agent object (and the agents it hands off to): supervise one run per agent at a time.

import { tool as sdkTool } from '@openai/agents';
import { InvalidInput, PolicyError } from './core.js';
import { Run } from './run.js';
import { isObject } from './shared.js';

export const ADAPTER = 'openai-agents';
/** How long a gated call waits for the approval callback, in seconds. */
export const DEFAULT_APPROVAL_TIMEOUT = 300;
/** The guardrails' name in the SDK's guardrail results. */
export const GUARDRAIL_NAME = 'runbook';

/** What the adapter cannot see (coverage): tools the model provider runs. */
export const HOSTED_TOOLS = 'hosted-tools';
/** The runner's computer, shell and apply_patch executors. */
export const BUILTIN_TOOLS = 'builtin-tools';
/** Tools of the agent's MCP servers. */
export const MCP_SERVER_TOOLS = 'mcp-server-tools';
/** The tool calls inside an agent used as a tool. */
export const AGENT_TOOL_INTERNALS = 'agent-tool-internals';

/** A handoff entry (an Agent, or a Handoff holding one) as its agent. */
const handoffAgent = (h) => (isObject(h) && isObject(h.agent) ? h.agent : h);
/** `agent.asTool()` returns a function tool with an `on` method; plain function tools have none. */
const isAgentTool = (t) => typeof t.on === 'function';

/** The agent and every agent it can hand off to, once each. */
function agentsOf(agent) {
  const seen = new Set();
  const walk = (a) => {
    if (!isObject(a) || seen.has(a)) return;
    seen.add(a);
    for (const h of a.handoffs ?? []) walk(handoffAgent(h));
  };
  walk(agent);
  return [...seen];
}

/**
 * The coverage to claim for `agent` supervised with `supervise`: `'complete'` when every tool of it and of
 * the agents it hands off to is a function tool, with no MCP servers; else the sorted list of what is out
 * of sight (`hosted-tools`, `builtin-tools`, `mcp-server-tools`, `agent-tool-internals`).
 */
export function coverage(agent) {
  if (!isObject(agent) || !Array.isArray(agent.tools)) throw new TypeError('coverage(agent): an Agent of @openai/agents');
  const blind = new Set();
  for (const a of agentsOf(agent)) {
    if ((a.mcpServers ?? []).length > 0) blind.add(MCP_SERVER_TOOLS);
    for (const t of a.tools ?? []) {
      if (t?.type === 'function') {
        if (isAgentTool(t)) blind.add(AGENT_TOOL_INTERNALS);
      } else if (t?.type === 'hosted_tool') blind.add(HOSTED_TOOLS);
      else blind.add(BUILTIN_TOOLS);
    }
  }
  return blind.size === 0 ? 'complete' : [...blind].sort();
}

/**
 * `Run.create` for `agent`, with this adapter's name and the coverage `coverage(agent)` claims; `profile` R2,
 * `riskCeiling` irreversible and `agent` the SDK agent's name unless given.
 */
export function createRun(policy, agent, options) {
  if (options === null || typeof options !== 'object') throw new TypeError('createRun(policy, agent, options): options must be an object');
  for (const k of ['adapter', 'coverage']) {
    if (k in options) throw new TypeError(`createRun: \`${k}\` is this adapter's own (${k === 'adapter' ? ADAPTER : 'coverage(agent)'})`);
  }
  const claim = coverage(agent);
  return Run.create(policy, { profile: 'R2', riskCeiling: 'irreversible', agent: agent.name, ...options, adapter: ADAPTER, coverage: claim });
}

/** Ends `run` (`reason`, default normal) unless it has ended; returns the outcome. */
export function endRun(run, reason = 'normal') {
  return run.end(reason);
}

// Throws of a watched `execute`, by run context and call id, until the output guardrail reads them.
const failures = new WeakMap();

/**
 * The SDK's `tool(options)` with its `execute` watched: a throw is remembered for the output guardrail,
 * which records it as an error result, and rethrown, so the SDK answers the model as it always does.
 */
export function tool(options) {
  if (!isObject(options) || typeof options.execute !== 'function') return sdkTool(options);
  const { execute } = options;
  const watched = async function (input, runContext, details) {
    try {
      return await execute(input, runContext, details);
    } catch (e) {
      const callId = details?.toolCall?.callId;
      if (isObject(runContext) && typeof callId === 'string') {
        if (!failures.has(runContext)) failures.set(runContext, new Map());
        failures.get(runContext).set(callId, e);
      }
      throw e;
    }
  };
  // The SDK names a tool without `name` after its execute function.
  Object.defineProperty(watched, 'name', { value: execute.name });
  return sdkTool({ ...options, execute: watched });
}

function takeFailure(runContext, callId) {
  const m = isObject(runContext) ? failures.get(runContext) : undefined;
  if (!m || typeof callId !== 'string' || !m.has(callId)) return undefined;
  const e = m.get(callId);
  m.delete(callId);
  return { error: e };
}

const errorText = (e) => (e instanceof Error ? `${e.name}: ${e.message}` : `${typeof e}: ${String(e)}`);

// The supervised copy of a tool -> the tool it was made from, so `supervise` again rebinds, never stacks.
const originals = new WeakMap();
// A supervised agent -> its agent_end listener.
const listeners = new WeakMap();

/**
 * Supervises `agent` with `run`: every function tool of it and of the agents it hands off to is replaced
 * (in a new `tools` array) by a copy carrying this module's guardrails, and the agents' `agent_end` ends the
 * run at a terminal. Supervising the agent again (another run) replaces the binding. Returns `agent`.
 *
 * options: `approve` (the embedding program's approval callback: (ApprovalRequest, {signal}) =>
 * ApprovalAnswer), `approvalTimeout` (seconds, default 300).
 */
export function supervise(agent, run, options = {}) {
  if (!(run instanceof Run)) throw new TypeError('supervise(agent, run): `run` is a Run (createRun)');
  const supervisor = new Supervisor(run, options);
  for (const a of agentsOf(agent)) {
    if (!Array.isArray(a.tools) || typeof a.on !== 'function') throw new TypeError('supervise(agent, run): an Agent of @openai/agents');
    a.tools = a.tools.map((t) => (t?.type === 'function' ? supervisor.wrap(originals.get(t) ?? t) : t));
    const previous = listeners.get(a);
    if (previous) a.off('agent_end', previous);
    const onEnd = () => supervisor.agentEnd();
    listeners.set(a, onEnd);
    a.on('agent_end', onEnd);
  }
  return agent;
}

/** One run's guardrails and end handling (what `supervise` installs). */
export class Supervisor {
  constructor(run, { approve = null, approvalTimeout = DEFAULT_APPROVAL_TIMEOUT } = {}) {
    if (approve !== null && typeof approve !== 'function') throw new TypeError('`approve` must be a function');
    if (typeof approvalTimeout !== 'number' || !(approvalTimeout > 0) || !Number.isFinite(approvalTimeout)) {
      throw new TypeError('`approvalTimeout` must be a positive number of seconds');
    }
    this.run = run;
    this.approve = approve;
    this.approvalTimeout = approvalTimeout;
  }

  /** A copy of the function tool `t` with the input guardrail last and the output guardrail first. */
  wrap(t) {
    const name = t.name;
    const input = { type: 'tool_input', name: GUARDRAIL_NAME, run: ({ toolCall }) => this.decide(name, toolCall) };
    const output = { type: 'tool_output', name: GUARDRAIL_NAME, run: ({ context, toolCall, output: o }) => this.record(name, context, toolCall, o) };
    const copy = { ...t, inputGuardrails: [...(t.inputGuardrails ?? []), input], outputGuardrails: [output, ...(t.outputGuardrails ?? [])] };
    originals.set(copy, t);
    return copy;
  }

  /** The input guardrail: the call decided (held for approval when gated); a rejection carries why. */
  async decide(tool, toolCall) {
    const callId = typeof toolCall?.callId === 'string' ? toolCall.callId : null;
    try {
      let args;
      try {
        args = JSON.parse(toolCall?.arguments);
      } catch {
        args = undefined;
      }
      if (!isObject(args)) return this.#malformed(tool, toolCall, 'the arguments are not a JSON object');
      let gated;
      try {
        gated = await this.run.invokeWithApproval(tool, args, { callId, approve: this.approve, approvalTimeout: this.approvalTimeout, request: { callId } });
      } catch (e) {
        // Text the module cannot take (a lone surrogate) in the call: nothing was fed; it is recorded as
        // malformed. (An approval answer the module cannot take is no answer: the call stays blocked.)
        if (e instanceof InvalidInput) return this.#malformed(tool, toolCall, e.message);
        throw e;
      }
      return gated.allowed ? allow(gated.answer) : reject(gated.answer, gated.message);
    } catch (e) {
      if (!(e instanceof PolicyError)) throw e;
      // The run cannot decide or record (broken, sealed): nothing runs unrecorded.
      return { outputInfo: { decision: null }, behavior: { type: 'rejectContent', message: `blocked: the runbook supervisor cannot decide this call (${e.message})` } };
    }
  }

  #malformed(tool, toolCall, why) {
    const a = this.run.feedMalformed(`malformed invoke of tool ${JSON.stringify(tool)} (${why}): ${JSON.stringify(toolCall?.arguments ?? null)}`);
    return reject(a, a.explanation);
  }

  /** The output guardrail: the call's result (an error result when a watched execute threw). */
  async record(tool, context, toolCall, output) {
    const callId = typeof toolCall?.callId === 'string' ? toolCall.callId : null;
    const failed = takeFailure(context, callId);
    const value = failed ? errorText(failed.error) : output === undefined ? null : output;
    try {
      let a;
      try {
        a = this.run.result(tool, value, { isError: Boolean(failed), callId });
      } catch (e) {
        if (!(e instanceof InvalidInput)) throw e;
        // A return value JSON cannot hold (a bigint, a cycle): recorded as malformed, the run halts.
        a = this.run.feedMalformed(`malformed result of tool ${JSON.stringify(tool)} (${e.message})`);
      }
      return { outputInfo: info(a), behavior: { type: 'allow' } };
    } catch (e) {
      if (!(e instanceof PolicyError)) throw e;
      // Every result is on the record before the model sees it.
      return { outputInfo: { decision: null }, behavior: { type: 'rejectContent', message: `blocked: the runbook supervisor cannot record this call's result (${e.message})` } };
    }
  }

  /** `agent_end`: the final output; at a terminal (or once over) the run ends. Never throws into the SDK. */
  agentEnd() {
    const run = this.run;
    try {
      if (run.finished) return;
      if (!run.over) run.tickIfDue();
      if (!run.over) run.finalOutput();
      if (run.over || run.state().atTerminal) run.end('normal');
    } catch (e) {
      // A broken run throws again at `endRun`, where the program hears of it.
      process.emitWarning(`runbook: run ${run.runId} could not record the agent's end (${e?.message ?? e})`);
    }
  }
}

/** What the guardrails put in the SDK's guardrail results: the module's decision. */
const info = (a) => ({ decision: a.kind, step: a.decision.step, deviation: a.decision.deviation, reason: a.decision.reason });

function allow(a) {
  return { outputInfo: info(a), behavior: { type: 'allow' } };
}

function reject(a, why) {
  return { outputInfo: info(a), behavior: { type: 'rejectContent', message: `blocked by the runbook: ${why}` } };
}
