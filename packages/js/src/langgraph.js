// `runbook-policy/langgraph` (Node only): supervise the tool calls of a LangGraph agent
// (@langchain/langgraph, @langchain/core) with a runbook, in the program's own process.
//
//   import { load } from 'runbook-policy';
//   import { RunbookToolNode, coverage, createRun, endRun } from 'runbook-policy/langgraph';
//   import { createReactAgent } from '@langchain/langgraph/prebuilt';
//
//   const run = await createRun(await load(), { document: 'runbook.yaml', agent: 'release-bot', coverage: coverage({ everyToolWrapped: true }) });
//   const agent = createReactAgent({ llm, tools: new RunbookToolNode([readFile, deploy], { run, approve: askAPerson }) });
//   const result = await agent.invoke({ messages: [{ role: 'user', content: 'Ship the hotfix.' }] });
//   const outcome = endRun(run, result);
//
// The interception point: LangGraph 1.7's prebuilt ToolNode has no hook around a tool call, so each tool
// is wrapped (`RunbookTool`, a StructuredTool with the wrapped tool's name, description and schema, so the
// model is offered the same tool) and its `invoke` decides the call before anything runs.
// `RunbookToolNode` is a ToolNode of such tools that also decides the calls no wrapped tool answers.
// For each call of a wrapped tool:
//
// - the call (the model's arguments, before the tool's schema parses them) is fed to the run as an `invoke`
//   with the model's tool-call id as `callId`;
// - allowed: the tool runs; what its function returns (the value itself, not the text the model is
//   shown) is fed as a `result`; an error it throws, as an error result (`Name: message`), and rethrown, so
//   the ToolNode answers with its own error message. Arguments its schema refuses are an error result too.
//   A LangGraph interrupt (`interrupt()` inside the tool) is rethrown unrecorded: the node runs again when
//   the graph resumes, and the call is decided again then;
// - blocked (`deny`, `halt`): the tool never runs; the model gets a ToolMessage with `status: 'error'`
//   whose content is `blocked by the runbook: ` and the module's sentence (a direct `invoke` without a tool
//   call throws ToolBlocked with that sentence instead);
// - needs-approval: the call is held until `approve` (the embedding program's callback, never the
//   agent's) answers; its answer is fed as an `approval` bound to the call's hash (`callSha256`) and the
//   call is decided again. No callback, a refusal, an approval the module does not accept, a callback
//   that throws or answers anything but `{approver, granted}`, no answer within `approvalTimeout`
//   seconds, or the graph aborted meanwhile (its `signal`): the call stays blocked;
// - arguments JSON cannot hold (a bigint, a cycle, a number that is not finite) are recorded by the run as
//   a malformed event: the run halts (`malformed-event`) and the tool never runs, nor does any later one.
//   The model's tool calls whose arguments did not parse (LangChain's `invalid_tool_calls`) never reach a
//   tool: `RunbookToolNode` records each as a malformed event (and answers it with an error ToolMessage),
//   and so does `endRun` when the agent stopped on one;
// - a run that cannot decide or record (RunBroken, RunOver, ...) blocks every call; a result that cannot
//   be recorded is not handed to the model (the tool call fails).
//
// The end: LangGraph has no end-of-agent hook a tool node sees, so the program calls `endRun(run, result)`
// with what the graph returned: when its last message is the model's answer (an AIMessage without tool
// calls) that is recorded as the final output; then the run ends and its bundle is written. Without a
// result (the graph threw) the run ends `interrupted`.
//
// What this adapter cannot see (coverage is complete only if every tool call goes through it): tools the
// agent calls outside the wrapped tools (a ToolNode or `createReactAgent` given unwrapped tools, tools a
// custom node or another tool calls directly, a sub-agent's own ToolNode); provider-hosted (native) tools
// bound to the model as plain objects (web search, code interpreter: the provider runs them, no ToolNode
// does); what an allowed call does beyond its name and arguments; state a tool changes through a returned
// Command. Claim `complete` only when every tool of the agent is a RunbookTool and none is native:
// `coverage({everyToolWrapped, nativeTools})` says which; anything else is a blind list, and the module
// then refuses destructive or irreversible work (`coverage-incomplete`).

import { isAIMessage, ToolMessage } from '@langchain/core/messages';
import { StructuredTool, Tool } from '@langchain/core/tools';
import { isGraphBubbleUp, isGraphDrained } from '@langchain/langgraph';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import { inspect } from 'node:util';
import { Run } from './run.js';
import { isObject, positive } from './shared.js';

export const ADAPTER = 'langgraph';
/** What the adapter cannot see when some tool of the agent is not wrapped. */
export const UNWRAPPED_TOOLS = 'tools-outside-wrapped-tools';
/** What it cannot see when the model has native tools (run by the model provider). */
export const NATIVE_TOOLS = 'native-tools';
/** How long a gated call waits for the approval callback, in seconds. */
export const DEFAULT_APPROVAL_TIMEOUT = 300;

/** The coverage to claim: complete only when every tool of the agent is wrapped and none is native. */
export function coverage({ everyToolWrapped, nativeTools = false } = {}) {
  if (typeof everyToolWrapped !== 'boolean') throw new TypeError('coverage({everyToolWrapped}): say whether every tool of the agent is wrapped (true or false)');
  const blind = [...(everyToolWrapped ? [] : [UNWRAPPED_TOOLS]), ...(nativeTools ? [NATIVE_TOOLS] : [])];
  return blind.length ? blind : 'complete';
}

/** `Run.create` with this adapter's name; `coverage` is required (see `coverage()`); `profile` R2,
 * `riskCeiling` irreversible and `agent` 'langgraph' unless given. */
export function createRun(policy, options) {
  if (options === null || typeof options !== 'object') throw new TypeError('createRun(policy, options): options must be an object');
  if ('adapter' in options) throw new TypeError(`createRun: \`adapter\` is this adapter's own (${ADAPTER})`);
  if (!('coverage' in options)) throw new TypeError('createRun: give `coverage`: coverage({everyToolWrapped: true}) when every tool of the agent is wrapped');
  return Run.create(policy, { profile: 'R2', riskCeiling: 'irreversible', agent: ADAPTER, ...options, adapter: ADAPTER });
}

/** A blocked call of a tool invoked directly (not through a tool call, so there is no ToolMessage to answer with). */
export class ToolBlocked extends Error {
  name = 'ToolBlocked';
}

const isToolCall = (v) => isObject(v) && v.type === 'tool_call';
// The class's name when `name` was left `Error` (LangChain's ToolInputParsingException does).
const errorName = (e) => (e.name === 'Error' && e.constructor?.name ? e.constructor.name : e.name);
const errorText = (e) => (e instanceof Error ? `${errorName(e)}: ${e.message}` : `thrown ${inspect(e, { depth: 2, breakLength: Infinity })}`);

/** `{run, approve, approvalTimeout}`, checked: what a RunbookTool and a RunbookToolNode are given. */
function supervision({ run, approve = null, approvalTimeout = DEFAULT_APPROVAL_TIMEOUT } = {}) {
  if (!(run instanceof Run)) throw new TypeError('`run` must be the Run to supervise (createRun)');
  if (approve !== null && typeof approve !== 'function') throw new TypeError('`approve` must be a function');
  return Object.freeze({ run, approve, approvalTimeout: positive(approvalTimeout, 'approvalTimeout') });
}

/**
 * Decides one call (`run.invokeWithApproval`): a Gated, whose `allowed` and `message` (the module's
 * sentence and, for a gated call, why it stays blocked) are what the tools read. A gated call waits here
 * for the approval callback.
 */
async function decide({ run, approve, approvalTimeout }, tool, args, callId, signal) {
  try {
    return await run.invokeWithApproval(tool, args, { callId, approve, approvalTimeout, signal, request: { toolCallId: callId } });
  } catch (e) {
    // The run cannot decide or record (broken, sealed): nothing runs unrecorded.
    return { allowed: false, message: `the runbook supervisor cannot decide this call (${e.message ?? e})` };
  }
}

/** Feeds a tool's result (`undefined`, a function that returned nothing, is `null`); throws when the run cannot record it. */
function record(run, tool, value, isError, callId) {
  try {
    run.result(tool, value === undefined ? null : value, { isError, callId });
  } catch (e) {
    // A result that is not on the record is not handed to the model.
    throw new Error(`blocked: the runbook supervisor cannot record this call's result (${e.message ?? e})`, { cause: e });
  }
}

/** The ToolMessage a blocked tool call answers with: LangChain's tool error, the module's sentence as content. */
function blockedMessage(call, message) {
  return new ToolMessage({ status: 'error', content: `blocked by the runbook: ${message}`, name: call.name, tool_call_id: call.id ?? '' });
}

/** Errors LangGraph throws through a node to pause or reroute the graph: the tool did not finish. */
const bubblesUp = (e) => e !== null && typeof e === 'object' && (isGraphBubbleUp(e) || isGraphDrained(e));

/** Errors already recorded as the result of their call (by `_call`). */
const RECORDED = new WeakSet();

/**
 * A LangChain tool whose calls the runbook decides first (see above). It offers the model the wrapped
 * tool's name, description and schema; what runs is the wrapped tool's own `_call`.
 */
export class RunbookTool extends StructuredTool {
  static lc_name() {
    return 'RunbookTool';
  }

  constructor(tool, options) {
    if (!(tool instanceof StructuredTool)) {
      throw new TypeError(`RunbookTool wraps a LangChain StructuredTool (tool(), DynamicStructuredTool, ...), not ${tool?.constructor?.name ?? typeof tool}`);
    }
    // Only LangChain's own fields go to the base class: they are what the tool serializes as.
    super({ responseFormat: tool.responseFormat, verboseParsingErrors: tool.verboseParsingErrors, metadata: tool.metadata, extras: tool.extras, defaultConfig: tool.defaultConfig });
    this.name = tool.name;
    this.description = tool.description;
    this.schema = tool.schema;
    this.returnDirect = tool.returnDirect;
    this.wrapped = tool;
    this.supervision = supervision(options);
  }

  /** Decides the call, then (allowed) runs the wrapped tool through StructuredTool's own invoke. */
  async invoke(input, config) {
    // A string tool (`Tool`) takes its text as `{input}`: decided in the shape the model sends it.
    if (this.wrapped instanceof Tool && (typeof input === 'string' || input == null)) input = { input };
    const call = isToolCall(input) ? input : null;
    const args = call ? call.args : input;
    const callId = (call ? call.id : config?.toolCall?.id) ?? null;
    const gated = await decide(this.supervision, this.name, args, callId, config?.signal);
    if (!gated.allowed) {
      if (call) return blockedMessage(call, gated.message);
      throw new ToolBlocked(`blocked by the runbook: ${gated.message}`);
    }
    try {
      return await super.invoke(input, config);
    } catch (e) {
      // Failed before the tool's function ran (its schema refused the arguments, a callback threw).
      if (!bubblesUp(e) && !(isObject(e) && RECORDED.has(e))) record(this.supervision.run, this.name, errorText(e), true, callId);
      throw e;
    }
  }

  /** As DynamicStructuredTool: traces name the tool, not this wrapper. */
  async call(arg, configArg, tags) {
    const config = isObject(configArg) && !('name' in configArg) ? { ...configArg } : configArg;
    if (isObject(config) && config.runName === undefined) config.runName = this.name;
    return super.call(arg, config, tags);
  }

  /** The wrapped tool's function, its return value (or error) recorded. */
  async _call(arg, runManager, config) {
    const { run } = this.supervision;
    const callId = config?.toolCall?.id ?? null;
    let value;
    try {
      value = await this.wrapped._call(arg, runManager, config);
    } catch (e) {
      if (bubblesUp(e)) throw e;
      record(run, this.name, errorText(e), true, callId);
      if (isObject(e)) RECORDED.add(e);
      throw e;
    }
    if (value !== null && typeof value === 'object' && typeof value[Symbol.asyncIterator] === 'function' && typeof value.next === 'function') {
      return this.#streamed(value, callId);
    }
    try {
      record(run, this.name, value, false, callId);
    } catch (e) {
      RECORDED.add(e); // nothing more to record: the run cannot
      throw e;
    }
    return value;
  }

  /** A streaming tool (an async generator): its return value, once consumed, is the result. */
  async *#streamed(gen, callId) {
    let value;
    try {
      value = yield* gen;
    } catch (e) {
      if (!bubblesUp(e)) record(this.supervision.run, this.name, errorText(e), true, callId);
      throw e;
    }
    record(this.supervision.run, this.name, value, false, callId);
    return value;
  }
}

/** Each tool wrapped in a RunbookTool bound to `options.run` (a RunbookTool given is kept as it is). */
export function runbookTools(tools, options) {
  if (!Array.isArray(tools)) throw new TypeError('runbookTools(tools, options): tools must be an array');
  const s = supervision(options);
  return tools.map((t) => (t instanceof RunbookTool ? t : new RunbookTool(t, s)));
}

/** Records the model's tool calls whose arguments did not parse as malformed events; the answers. */
function feedInvalid(run, calls) {
  return calls.map((c) => {
    const why = `arguments that are not JSON${typeof c.error === 'string' && c.error ? `: ${c.error}` : ''}`;
    let explanation;
    try {
      explanation = run.feedMalformed(`malformed LangGraph tool call (${why}): ${JSON.stringify({ name: c.name ?? null, args: c.args ?? null, id: c.id ?? null })}`).explanation;
    } catch (e) {
      explanation = `the runbook supervisor cannot record this call (${e.message ?? e})`;
    }
    return { call: c, explanation };
  });
}

/**
 * The prebuilt ToolNode with every tool wrapped (`runbookTools`). It also decides a call no wrapped tool
 * answers (a tool the node does not have, or one added to `tools` unwrapped: its ToolMessage content is
 * then the result), and records the model's `invalid_tool_calls` as malformed (answered with an error
 * ToolMessage each).
 */
export class RunbookToolNode extends ToolNode {
  constructor(tools, options = {}) {
    const { run, approve, approvalTimeout, ...nodeOptions } = options;
    const s = supervision({ run, approve, approvalTimeout });
    if (!Array.isArray(tools)) throw new TypeError('RunbookToolNode(tools, options): tools must be an array');
    // What is no StructuredTool (a RunnableToolLike, a provider's tool given as an object) stays as it is:
    // `runTool` decides its calls.
    super(
      tools.map((t) => (t instanceof StructuredTool ? runbookTools([t], s)[0] : t)),
      nodeOptions,
    );
    this.supervision = s;
  }

  async run(input, config) {
    const messages = Array.isArray(input) ? input : isObject(input) && Array.isArray(input.messages) && !('lg_tool_call' in input) ? input.messages : null;
    const last = messages?.findLast((m) => isAIMessage(m));
    const answered = new Set(messages?.filter((m) => m.getType?.() === 'tool').map((m) => m.tool_call_id));
    const invalid = (last?.invalid_tool_calls ?? []).filter((c) => c.id == null || !answered.has(c.id));
    // First, so that the halt they cause also blocks the valid calls of the same message.
    const extra = feedInvalid(this.supervision.run, invalid).map(({ call, explanation }) => blockedMessage(call, explanation));
    const out = await super.run(input, config);
    if (extra.length === 0) return out;
    if (Array.isArray(out) && Array.isArray(input)) return [...out, ...extra];
    if (isObject(out) && Array.isArray(out.messages)) return { ...out, messages: [...out.messages, ...extra] };
    return [...(Array.isArray(out) ? out : [out]), Array.isArray(input) ? extra : { messages: extra }];
  }

  async runTool(call, config, state) {
    if (this.tools.find((t) => t.name === call.name) instanceof RunbookTool) return super.runTool(call, config, state);
    const gated = await decide(this.supervision, call.name, call.args, call.id ?? null, config?.signal);
    if (!gated.allowed) return blockedMessage(call, gated.message);
    const out = await super.runTool(call, config, state);
    const isTool = out?.getType?.() === 'tool';
    try {
      record(this.supervision.run, call.name, isTool ? out.content : out, isTool && out.status === 'error', call.id ?? null);
    } catch (e) {
      return blockedMessage(call, e.message.replace(/^blocked: /, ''));
    }
    return out;
  }
}

/**
 * Ends `run` when the agent has finished; returns the outcome. `result` is what the graph returned (its
 * state, or its messages): when its last message is the model's answer, that is the final output; when it
 * is a tool call whose arguments did not parse, that is recorded as malformed. Without a result (the
 * graph threw) the run ends `interrupted`. Idempotent.
 */
export function endRun(run, result) {
  if (run.finished) return run.end();
  const messages = Array.isArray(result) ? result : isObject(result) && Array.isArray(result.messages) ? result.messages : null;
  const last = messages?.at(-1);
  if (!run.over && last && isAIMessage(last)) {
    run.tickIfDue();
    const invalid = last.invalid_tool_calls ?? [];
    if (invalid.length) feedInvalid(run, invalid);
    else if (!run.over && !(last.tool_calls?.length > 0)) run.finalOutput();
  }
  return run.end(result == null ? 'interrupted' : 'normal');
}
