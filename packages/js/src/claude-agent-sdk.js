// `runbook-policy/claude-agent-sdk` (Node only): supervise a Claude Agent SDK agent loop
// (@anthropic-ai/claude-agent-sdk) with a runbook, in the program's own process.
//
//   import { load } from 'runbook-policy';
//   import { createRun, endRun, runbookHooks } from 'runbook-policy/claude-agent-sdk';
//
//   const run = await createRun(await load(), { document: 'runbook.yaml', agent: 'deploy-bot' });
//   const options = { hooks: runbookHooks(run, { approve: askAPerson }), allowedTools: ['Bash'] };
//   for await (const message of query({ prompt, options })) { ... }
//   const outcome = endRun(run); // a no-op when the Stop hook already ended it
//
// The hooks are plain `{hooks: [callback], timeout, onFailure: 'block'}` matchers: this module does not
// import the SDK. What each hook does (the Python twin, runbook_policy.claude_agent_sdk, does the same):
//
// - PreToolUse feeds `invoke {tool: tool_name, arguments: tool_input, callId: tool_use_id}`, the tool
//   named as the SDK names it (`Bash`, `Read`, `mcp__server__tool`). `allow` answers `{}`: no opinion, so
//   the client's own permission rules (`allowedTools`, `permissionMode`, `canUseTool`) stay the outer
//   boundary (docs/spec/adapters.md#adapter-duties). `deny` and `halt` answer `permissionDecision: 'deny'` with the module's
//   explanation as the reason the model reads. `needs-approval` holds the call: the `approve` callback
//   (the embedding program's, never the agent's) gets an ApprovalRequest; its ApprovalAnswer is fed as an
//   `approval` bound to that call's hash (`callSha256` of the tool and its input), and a granted, accepted
//   approval is followed by the same `invoke` again, which the module now decides. No callback, a
//   refusal, an approval the module does not accept, a callback that throws or answers something else, or
//   no answer within `approvalTimeout` seconds: the call is denied (and can be retried). When the CLI gives
//   up on the callback first (its matcher timeout aborts the callback's signal), nothing more is fed.
//   A run the module halted answers every later call `halt` (recorded, denied); once the run has ended,
//   every call is denied.
// - PostToolUse feeds `result {tool, result: tool_response, isError, callId}` (`isError` from the
//   response's `is_error`/`isError`/`success: false`, as the Rust hook reads it); a `halt` answers
//   `decision: 'block'` with the reason, so the model is told to stop.
// - PostToolUseFailure (present in @anthropic-ai/claude-agent-sdk 0.3.333) feeds `result` with the
//   failure's `error` text as the result and `isError: true`.
// - Stop means: the main agent ended its turn with an answer. The adapter records `final_output` (unless the
//   run is already over), then, when the run stands at a terminal of the runbook or the module ended it,
//   ends the run (`end normal`: report and receipt written). Away from a terminal the run stays open: the
//   same session may get another prompt (streaming input) and go on; the program ends it when the session
//   stops, with `endRun` (outcome `incomplete` then). With `keepWorking: true` such a Stop is blocked once,
//   telling the model to keep working towards a terminal. SubagentStop is not a stop of the run (a
//   sub-agent's tool calls go through the same hooks, decided in the same run); SessionEnd is not used:
//   the CLI does not deliver it to SDK callbacks when `query()` ends (observed), hence `endRun`.
//
// A hook input not of the shape its event promises (no `tool_name` string, a `tool_input` that is not an
// object, a PostToolUse without `tool_response`, ...) is recorded with `run.feedMalformed`: a line that is
// no event, naming the hook, what is wrong and the input as JSON (less `cwd` and `transcript_path`, which
// name this machine's files), which the module decides `halt` with reason `malformed-event`; the call is
// denied, and so is every later one: never an allow.
//
// A callback that throws blocks the tool: the matchers are installed with `onFailure: 'block'`, with which
// the CLI blocks the action when a callback throws, resolves to undefined or to an answer it rejects
// (measured against the real CLI, see test/claude-agent-sdk.test.mjs). A callback that does not answer
// within the matcher's `timeout` is blocked whatever `onFailure` says, and its `signal` aborts; the adapter
// then feeds nothing more for that call. The CLI ignores `onFailure` on Stop. A Claude Code too old to
// honour `onFailure` makes the query fail at startup: the loop does not start unguarded.
//
// Coverage: the hooks see every tool call the agent loop makes, the shell and MCP tools included, and those
// of its sub-agents, so COVERAGE is `complete`, as for the Rust Claude Code hook. What they cannot see:
// what is not a tool call of the loop (the program's own code, the CLI's housekeeping, the memory and
// settings files it reads at start, command hooks of settings files); what an allowed call does beyond its
// name and input (processes a shell command leaves running, an MCP server's own side effects); an input
// rewritten after the decision by another PreToolUse hook or a `canUseTool` answering `updatedInput`
// (measured with the Python SDK's CLI: a second hook rewriting an allowed `echo hello` into `touch pwned`
// runs `touch pwned`, and only PostToolUse shows the new input; so install no such rewriter beside these
// hooks); and a session started without these hooks.

import { inspect } from 'node:util';
import { RunOver } from './core.js';
import { Run } from './run.js';
import { isObject, positive } from './shared.js';

export const ADAPTER = 'claude-agent-sdk';
/** The claim's coverage: the hooks see every tool call of the loop (see above for what they cannot see). */
export const COVERAGE = 'complete';
/** How long a gated call waits for the approval callback, in seconds. */
export const DEFAULT_APPROVAL_TIMEOUT = 300;
/** The matchers' timeout, in seconds, for hooks that do not wait for a person. */
export const DEFAULT_HOOK_TIMEOUT = 30;

/** `Run.create` with this adapter's name and coverage claim; `profile` R2, `riskCeiling` irreversible and
 * `agent` 'claude-agent-sdk' unless given. */
export function createRun(policy, options) {
  if (options === null || typeof options !== 'object') throw new TypeError('createRun(policy, options): options must be an object');
  for (const k of ['adapter', 'coverage']) {
    if (k in options) throw new TypeError(`createRun: \`${k}\` is this adapter's own (${k === 'adapter' ? ADAPTER : COVERAGE})`);
  }
  return Run.create(policy, { profile: 'R2', riskCeiling: 'irreversible', agent: ADAPTER, ...options, adapter: ADAPTER, coverage: COVERAGE });
}

/** Ends `run` when the session stopped with it still open; returns the outcome (the same outcome again
 * when the Stop hook already ended it). */
export function endRun(run, reason = 'normal') {
  return run.end(reason);
}

/** The `hooks` option of the SDK's `query()` that supervises the loop with `run`. */
export function runbookHooks(run, options = {}) {
  return new RunbookHooks(run, options).matchers();
}

const deny = (reason) => ({ hookSpecificOutput: { hookEventName: 'PreToolUse', permissionDecision: 'deny', permissionDecisionReason: reason } });
const block = (reason) => ({ decision: 'block', reason });

/** Whether a tool's response reports an error: `is_error`/`isError`, or `success: false`. */
function isErrorResponse(response) {
  if (!isObject(response)) return false;
  for (const k of ['is_error', 'isError']) if (typeof response[k] === 'boolean') return response[k];
  if (typeof response.success === 'boolean') return !response.success;
  return false;
}

/** Keys of a hook input that name this machine's files (the session's working directory, its transcript):
 * left out of what is recorded of a malformed input. */
const MACHINE_KEYS = ['cwd', 'transcript_path', 'agent_transcript_path'];

/** A hook input as recorded when it is malformed: JSON, or inspected when it has no JSON form (undefined,
 * a cycle, a BigInt); the keys that name this machine's files left out. */
function payload(input) {
  const shown = isObject(input) ? Object.fromEntries(Object.entries(input).filter(([k]) => !MACHINE_KEYS.includes(k))) : input;
  try {
    const json = JSON.stringify(shown);
    if (typeof json === 'string') return json;
  } catch {
    // no JSON form: inspected below
  }
  try {
    return inspect(shown, { depth: 6, breakLength: Infinity });
  } catch {
    return `<a ${typeof input} that cannot be shown>`;
  }
}

/** `{tool, args, callId}` of a tool hook's input, or why it is malformed (a string). */
function toolFields(input, toolUseID) {
  if (!isObject(input)) return 'not an object';
  if (typeof input.tool_name !== 'string' || input.tool_name === '') return 'no `tool_name` string';
  if (!isObject(input.tool_input)) return '`tool_input` is not an object';
  const callId = input.tool_use_id ?? toolUseID ?? null;
  if (callId !== null && typeof callId !== 'string') return '`tool_use_id` is not a string';
  return { tool: input.tool_name, args: input.tool_input, callId };
}

/** The four hook callbacks bound to one run; `matchers()` gives them as the SDK's `hooks` option. */
export class RunbookHooks {
  constructor(run, { approve = null, approvalTimeout = DEFAULT_APPROVAL_TIMEOUT, hookTimeout = DEFAULT_HOOK_TIMEOUT, keepWorking = false } = {}) {
    if (approve !== null && typeof approve !== 'function') throw new TypeError('`approve` must be a function');
    this.run = run;
    this.approve = approve;
    this.approvalTimeout = positive(approvalTimeout, 'approvalTimeout');
    this.hookTimeout = positive(hookTimeout, 'hookTimeout');
    this.keepWorking = Boolean(keepWorking);
  }

  /** `{PreToolUse, PostToolUse, PostToolUseFailure, Stop}`, each one matcher for every tool, `onFailure: 'block'`. */
  matchers() {
    // The PreToolUse wait covers the approval: the CLI gives up on a callback after its timeout.
    const pre = this.approve ? this.approvalTimeout + this.hookTimeout : this.hookTimeout;
    const m = (hook, timeout) => [{ hooks: [hook], timeout, onFailure: 'block' }];
    return {
      PreToolUse: m(this.preToolUse, pre),
      PostToolUse: m(this.postToolUse, this.hookTimeout),
      PostToolUseFailure: m(this.postToolUseFailure, this.hookTimeout),
      Stop: m(this.stop, this.hookTimeout),
    };
  }

  #finished() {
    return `runbook: run ${this.run.runId} is over and its evidence is sealed; no further tool call runs in this session.`;
  }

  /**
   * Records a malformed hook input (`run.feedMalformed`): the line names the hook, why the input is
   * malformed and the input itself, so the module halts the run with `malformed-event`.
   */
  #malformed(kind, input, why) {
    return this.run.feedMalformed(`malformed Claude Agent SDK ${kind} hook input (${why}): ${payload(input)}`);
  }

  /** PreToolUse: decide the call; hold a gated one for the approval callback. */
  preToolUse = async (input, toolUseID, options) => {
    const run = this.run;
    if (run.finished) return deny(this.#finished());
    const f = toolFields(input, toolUseID);
    if (typeof f === 'string') {
      const a = this.#malformed('PreToolUse', input, f);
      return deny(`runbook: ${a.explanation} (the hook input was malformed: ${f}); this call is blocked.`);
    }
    let gated;
    try {
      gated = await run.invokeWithApproval(f.tool, f.args, {
        callId: f.callId,
        approve: this.approve,
        approvalTimeout: this.approvalTimeout,
        signal: options?.signal,
        request: { toolUseId: f.callId },
      });
    } catch (e) {
      // The run ended while the call waited for approval: nothing more was fed.
      if (e instanceof RunOver) return deny(this.#finished());
      throw e;
    }
    if (gated.allowed) return {};
    if (gated.problem === null) return deny(`runbook: ${gated.message}`);
    // Held, and still held: say what would let it through.
    return deny(
      `runbook: ${gated.message} \`${f.tool}\` with these exact arguments (call sha256 ${gated.answer.callSha256}) needs the approval of a person through the program that runs this agent; retry the same call once it is approved, and do not try another way around the gate.`,
    );
  };

  /** PostToolUse: the call's result. */
  postToolUse = async (input, toolUseID) => this.#result('PostToolUse', input, toolUseID);

  /** PostToolUseFailure: the call failed; its `error` text is the result, with `isError`. */
  postToolUseFailure = async (input, toolUseID) => this.#result('PostToolUseFailure', input, toolUseID);

  #result(kind, input, toolUseID) {
    const run = this.run;
    if (run.finished) return block(this.#finished());
    const failed = kind === 'PostToolUseFailure';
    const key = failed ? 'error' : 'tool_response';
    const f = toolFields(input, toolUseID);
    const why =
      typeof f === 'string' ? f : !Object.hasOwn(input, key) || input[key] === undefined ? `no \`${key}\`` : failed && typeof input.error !== 'string' ? '`error` is not text' : '';
    if (why) {
      const a = this.#malformed(kind, input, why);
      return block(`runbook: ${a.explanation} (the hook input was malformed: ${why}). Stop and tell the user.`);
    }
    const result = input[key];
    const a = run.result(f.tool, result, { isError: failed || isErrorResponse(result), callId: f.callId });
    if (a.kind === 'halt') {
      const outcome = a.state.outcome;
      return block(`runbook: ${a.explanation}${outcome ? ` The outcome is ${outcome}.` : ''} Stop and tell the user.`);
    }
    return {};
  }

  /** Stop: the agent's answer is the final output; at a terminal (or once over) the run ends. */
  stop = async (input) => {
    const run = this.run;
    if (run.finished) return {};
    if (!isObject(input)) this.#malformed('Stop', input, 'not an object');
    if (!run.over) run.tickIfDue();
    if (!run.over) run.finalOutput();
    const st = run.state();
    if (st.atTerminal || run.over) {
      const outcome = run.end('normal');
      return { systemMessage: `runbook: run ${run.runId} ended: ${outcome}.` };
    }
    const msg = `runbook: run ${run.runId} is at step \`${st.step}\`, not at a terminal of the runbook, so the procedure is incomplete`;
    const again = isObject(input) ? Boolean(input.stop_hook_active) : true;
    if (this.keepWorking && !again) return block(`${msg}. Keep working towards a terminal of the runbook.`);
    return { systemMessage: `${msg}.` };
  };
}
