// `runbook-policy/ai-sdk` (Node only): supervise the tool loop of the Vercel AI SDK (`ai` 7: generateText,
// streamText, ToolLoopAgent, which ai 7.0 exports as Experimental_Agent) with a runbook, in the program's
// own process.
//
//   import { generateText, stepCountIs } from 'ai';
//   import { load } from 'runbook-policy';
//   import { createRun, endRunOnFinish, supervise } from 'runbook-policy/ai-sdk';
//
//   const run = await createRun(await load(), { document: 'runbook.yaml', agent: 'release-bot', tools });
//   await generateText({ model, tools: supervise(tools, run, { approve: askAPerson }),
//     stopWhen: stepCountIs(10), prompt, onFinish: endRunOnFinish(run) });
//
// The interception point is the tool's own `execute`: `supervise` returns the ToolSet with every `execute`
// wrapped (the rest of each tool, its schema, `needsApproval`, `toModelOutput`, ..., kept as it is). This
// module does not import the SDK. For each call the SDK executes:
//
// - the call is fed to the run as `invoke {tool: the ToolSet key, arguments: the input as the SDK parsed
//   and validated it, callId: the SDK's toolCallId}`, before anything runs;
// - allowed: the tool's `execute` runs; its output (the last one a streaming tool yields) is fed as a
//   `result`; an error it throws is fed as an error result (its text as the SDK shows it to the model,
//   `Error: message`) and thrown on, so the SDK reports it as usual;
// - blocked (`deny`, `halt`): the tool never runs; the wrapper throws a RunbookBlocked carrying the
//   module's sentence, which the SDK turns into its own tool error: a `tool-error` part in the step, and for
//   the model a tool result of output type `error-text` ("RunbookBlocked: blocked by the runbook: ...");
// - needs-approval: the call is held until `approve` (a callback of the embedding program, never the
//   agent's) answers; its answer is fed as an approval bound to this call's hash and the call is decided
//   again. No callback, a refusal, an approval the module does not accept, a callback that throws or answers
//   something else, no answer within `approvalTimeout` seconds, or the SDK's abortSignal firing: blocked;
// - an input with no JSON form (a schema whose transform makes a BigInt, ...) is fed as a malformed event:
//   recorded, the run halts (`malformed-event`), the tool never runs, nor does any later call;
// - a run that cannot decide or record (RunBroken, a sealed run) blocks the call, never runs it unrecorded.
//
// The end: `endRunOnFinish(run)` is the SDK's own end-of-loop hook (`onFinish` of generateText, streamText
// or ToolLoopAgent). When the model gave its final answer (the SDK's own rule: the last step finished with
// `stop`, or with text and no tool calls) it feeds `final_output`; then it ends the run (`end normal`:
// report and receipt written). When the loop stopped on calls still waiting for the program (the SDK's own
// `needsApproval`/`toolApproval`, tools without `execute`) it leaves the run open: the program resumes the
// loop with the same run, or ends it with `endRun`. When generateText throws, onFinish is not called: end
// the run with `endRun(run, 'interrupted')`.
//
// What this adapter cannot see (coverage is complete only if every tool of the agent goes through
// `supervise`): tools the provider executes itself (`providerExecuted` calls of provider tools such as a
// web search or code execution: they never reach `execute`), tools without `execute` (answered by the
// program or the UI, outside the loop), and tools given to the SDK beside the supervised ToolSet.
// `coverage(tools)` says which from the ToolSet's shapes (`createRun` claims it): anything else than
// `complete` is a list of what is out of sight, and the module then refuses destructive or irreversible
// work (`coverage-incomplete`). Calls the SDK refuses before `execute` (an unknown tool name, an input that
// is not JSON or fails the schema) never reach the adapter either: the SDK answers the model with its own
// tool error, nothing runs and nothing is recorded. Nor does it see what is not a tool call (the model's
// text, the program's own code) or what an allowed call does beyond its name and input.

import { inspect } from 'node:util';
import { RunOver } from './core.js';
import { Run } from './run.js';
import { isObject, positive } from './shared.js';

export const ADAPTER = 'ai-sdk';
/** Coverage: a tool that the provider executes (a web search, code execution): never reaches `execute`. */
export const PROVIDER_EXECUTED_TOOLS = 'provider-executed-tools';
/** Coverage: a tool without `execute`, answered by the program or the UI outside the loop. */
export const TOOLS_WITHOUT_EXECUTE = 'tools-without-execute';
/** Coverage: tools given to the SDK beside the ToolSet that `supervise` wrapped. */
export const UNSUPERVISED_TOOLS = 'unsupervised-tools';
/** How long a gated call waits for the approval callback, in seconds. */
export const DEFAULT_APPROVAL_TIMEOUT = 300;

/** The wrapped tools carry this mark (not enumerable): a tool is supervised once, by one run. */
const SUPERVISED = Symbol.for('runbook-policy.ai-sdk.supervised');

const providerExecuted = (t) => t?.type === 'provider' && t.isProviderExecuted === true;

/**
 * What an agent with `tools` (its whole ToolSet, as given to `supervise`) lets this adapter see:
 * `complete`, or the list of what is out of sight. `everyToolSupervised: false` when the SDK is given
 * more tools than these, outside `supervise`.
 */
export function coverage(tools, { everyToolSupervised = true } = {}) {
  if (!isObject(tools)) throw new TypeError('coverage(tools): tools must be a ToolSet (an object of tools)');
  const blind = new Set(everyToolSupervised ? [] : [UNSUPERVISED_TOOLS]);
  for (const t of Object.values(tools)) {
    if (providerExecuted(t)) blind.add(PROVIDER_EXECUTED_TOOLS);
    else if (typeof t?.execute !== 'function') blind.add(TOOLS_WITHOUT_EXECUTE);
  }
  return blind.size === 0 ? 'complete' : [...blind].sort();
}

/**
 * `Run.create` with this adapter's name and the coverage of `tools` (the agent's ToolSet: `coverage(tools)`),
 * or an explicit `coverage`; `profile` R2, `riskCeiling` irreversible and `agent` 'ai-sdk' unless given.
 */
export function createRun(policy, options) {
  if (!isObject(options)) throw new TypeError('createRun(policy, options): options must be an object');
  if ('adapter' in options) throw new TypeError(`createRun: \`adapter\` is this adapter's own (${ADAPTER})`);
  const { tools, ...rest } = options;
  if ((tools === undefined) === (rest.coverage === undefined)) {
    throw new TypeError('createRun: give the agent\'s `tools` (the coverage is computed from them) or an explicit `coverage`, not both');
  }
  const claim = tools === undefined ? rest.coverage : coverage(tools);
  return Run.create(policy, { profile: 'R2', riskCeiling: 'irreversible', agent: ADAPTER, ...rest, adapter: ADAPTER, coverage: claim });
}

/** Ends `run` (when the loop failed, or stopped on calls still waiting); returns the outcome. Idempotent. */
export function endRun(run, reason = 'normal') {
  return run.end(reason);
}

/** Why a call did not run: the SDK shows it to the model as the call's tool error. */
export class RunbookBlocked extends Error {
  constructor(message, answer = null) {
    super(`blocked by the runbook: ${message}`);
    this.name = 'RunbookBlocked';
    /** The module's last answer for the call (null when the run could not decide). */
    this.answer = answer;
  }
}

/** Why a call of a finished run does not run. */
const over = (run) => `run ${run.runId} is over and its evidence is sealed; no further tool call runs in this loop.`;

/** One sentence: the module's explanation and what followed, joined by semicolons, one full stop. */
const sentence = (parts) => (parts.length === 1 ? parts[0] : `${parts.map((p) => p.trimEnd().replace(/\.$/, '')).join('; ')}.`);

/** The text the SDK shows the model for a thrown error (its getErrorMessage): recorded as the error result. */
function errorText(e) {
  if (e == null) return 'unknown error';
  if (typeof e === 'string') return e;
  if (e instanceof Error) return e.toString();
  try {
    return JSON.stringify(e) ?? String(e);
  } catch {
    return inspect(e, { depth: 4, breakLength: Infinity });
  }
}

/** Why `value` has no JSON form (what the run would refuse), or null. */
function noJsonForm(value) {
  try {
    const s = JSON.stringify(value, (k, v) => {
      if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`${v} is not a JSON number`);
      return v;
    });
    return s === undefined ? `${value === undefined ? 'undefined' : `a ${typeof value}`} has no JSON form` : null;
  } catch (e) {
    return `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
  }
}

const isAsyncIterable = (v) => v != null && typeof v[Symbol.asyncIterator] === 'function';
const AsyncGeneratorFunction = Object.getPrototypeOf(async function* () {}).constructor;

/**
 * `tools` with every `execute` decided by `run` first (see above). Tools the adapter cannot intercept
 * (provider-executed, without `execute`) are passed on as they are: `coverage(tools)` names them.
 */
export function supervise(tools, run, { approve = null, approvalTimeout = DEFAULT_APPROVAL_TIMEOUT } = {}) {
  if (!isObject(tools)) throw new TypeError('supervise(tools, run): tools must be a ToolSet (an object of tools)');
  if (!(run instanceof Run)) throw new TypeError('supervise(tools, run): run must be a Run (createRun)');
  if (approve !== null && typeof approve !== 'function') throw new TypeError('`approve` must be a function');
  const gate = new Gate(run, approve, positive(approvalTimeout, 'approvalTimeout'));
  const out = {};
  for (const [name, t] of Object.entries(tools)) {
    if (t?.[SUPERVISED]) throw new TypeError(`supervise: the tool \`${name}\` is supervised already`);
    out[name] = providerExecuted(t) || typeof t?.execute !== 'function' ? t : gate.wrap(name, t);
  }
  return out;
}

/** The run's side of every wrapped tool: decides a call, records its result. */
class Gate {
  constructor(run, approve, approvalTimeout) {
    this.run = run;
    this.approve = approve;
    this.approvalTimeout = approvalTimeout;
  }

  /** A copy of `t` (every own property, the non-enumerable ones too) whose `execute` is decided first. */
  wrap(name, t) {
    const original = t.execute;
    const gate = this;
    let execute;
    if (original instanceof AsyncGeneratorFunction) {
      // A streaming tool stays one: its outputs pass through as they come, the last one is the result.
      execute = async function* execute(input, options) {
        const callId = await gate.decide(name, input, options);
        let last = null;
        try {
          for await (const output of original.call(t, input, options)) {
            last = output;
            yield output;
          }
        } catch (e) {
          gate.record(name, errorText(e), true, callId);
          throw e;
        }
        gate.record(name, last, false, callId);
      };
    } else {
      execute = async function execute(input, options) {
        const callId = await gate.decide(name, input, options);
        let output;
        try {
          output = original.call(t, input, options);
          if (isAsyncIterable(output)) {
            // Not declared `async function*`: its stream is drained here, its last output is the result.
            let last;
            for await (const o of output) last = o;
            output = last;
          } else {
            output = await output;
          }
        } catch (e) {
          gate.record(name, errorText(e), true, callId);
          throw e;
        }
        gate.record(name, output, false, callId);
        return output;
      };
    }
    // Every own property is kept (a tool caller's definition is a non-enumerable one), `execute` replaced.
    const props = Object.getOwnPropertyDescriptors(t);
    props.execute = { value: execute, enumerable: true, writable: true, configurable: true };
    props[SUPERVISED] = { value: true };
    return Object.create(Object.getPrototypeOf(t), props);
  }

  /** Decides the call; resolves to its callId when it may run, throws RunbookBlocked when not. */
  async decide(tool, input, options) {
    const run = this.run;
    const callId = typeof options?.toolCallId === 'string' ? options.toolCallId : null;
    if (run.finished) throw new RunbookBlocked(over(run));
    try {
      const why = noJsonForm(input);
      if (why !== null) {
        const a = run.feedMalformed(`malformed invoke of tool ${JSON.stringify(tool)} (AI SDK tool call ${callId}): its input has no JSON form (${why}): ${inspect(input, { depth: 6, breakLength: Infinity })}`);
        throw new RunbookBlocked(sentence([a.explanation, `the input has no JSON form (${why})`]), a);
      }
      const gated = await run.invokeWithApproval(tool, input, {
        callId,
        approve: this.approve,
        approvalTimeout: this.approvalTimeout,
        signal: options?.abortSignal,
        request: { toolCallId: callId },
      });
      if (gated.allowed) return callId;
      // The answer the call is blocked on: the approval's when one was fed and did not let it through.
      throw new RunbookBlocked(gated.message, gated.problem !== null && gated.approval !== null ? gated.approval : gated.answer);
    } catch (e) {
      if (e instanceof RunbookBlocked) throw e;
      // The run ended while the call waited for approval: nothing more was fed.
      if (e instanceof RunOver) throw new RunbookBlocked(over(run));
      // The run cannot decide or record (broken, trapped, sealed): nothing runs unrecorded.
      throw new RunbookBlocked(`the runbook supervisor cannot decide this call (${e?.message ?? e})`);
    }
  }

  /** The call's result (undefined, as the SDK sends it to the model, is null); thrown when not recorded. */
  record(tool, result, isError, callId) {
    try {
      this.run.result(tool, result === undefined ? null : result, { isError, callId });
    } catch (e) {
      // A result that cannot be recorded is not handed to the model: every event is on the record first.
      throw new RunbookBlocked(`the runbook supervisor cannot record this call's result (${e?.message ?? e})`);
    }
  }
}

/** Calls of the last step still waiting for the program: SDK approval requests, tools without `execute`. */
function pendingCalls(step) {
  const content = Array.isArray(step.content) ? step.content : [];
  const answered = new Set(content.filter((p) => p?.type === 'tool-result' || p?.type === 'tool-error').map((p) => p.toolCallId));
  return content.some((p) => p?.type === 'tool-approval-request' || (p?.type === 'tool-call' && !p.providerExecuted && !answered.has(p.toolCallId)));
}

/**
 * The loop finished (`finished`: a generateText result or the `onFinish` event of generateText, streamText
 * or ToolLoopAgent): feeds `final_output` when the model gave its final answer, then ends the run and
 * returns its outcome. Returns null, the run left open, when calls of the last step still wait for the
 * program. An event not of that shape is recorded as malformed (the run halts), then the run ends.
 */
export function finishRun(run, finished) {
  if (run.finished) return run.state().outcome;
  const last = Array.isArray(finished?.steps) ? finished.steps.at(-1) : undefined;
  if (!isObject(last) || typeof last.finishReason !== 'string') {
    run.feedMalformed(`malformed AI SDK onFinish event (no last step with a finishReason): ${inspect(finished, { depth: 2, breakLength: Infinity })}`);
    return run.end('normal');
  }
  if (pendingCalls(last)) return null;
  if (!run.over) run.tickIfDue();
  // The SDK's own rule for a final output: the step finished with `stop`, or with text and no tool calls.
  const answered = last.finishReason === 'stop' || (last.finishReason !== 'tool-calls' && typeof last.text === 'string' && last.text.length > 0);
  if (answered && !run.over) run.finalOutput();
  return run.end('normal');
}

/**
 * The `onFinish` callback (of generateText, streamText or ToolLoopAgent) that ends `run` with the loop:
 * `finishRun(run, event)`. The SDK ignores what an onFinish callback throws, so a failure is also emitted
 * as a process warning (and `run.broken` names it).
 */
export function endRunOnFinish(run) {
  if (!(run instanceof Run)) throw new TypeError('endRunOnFinish(run): run must be a Run (createRun)');
  return (event) => {
    try {
      finishRun(run, event);
    } catch (e) {
      process.emitWarning(`runbook: run ${run.runId} could not be ended when the AI SDK loop finished: ${e?.message ?? e}`);
      throw e;
    }
  };
}
