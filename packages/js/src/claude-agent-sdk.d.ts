// `runbook-policy/claude-agent-sdk` (Node only): supervise a Claude Agent SDK agent loop with a runbook.
// See claude-agent-sdk.js for what each hook does and what the hooks cannot see. The types below are
// structural: they fit the `hooks` option of @anthropic-ai/claude-agent-sdk's `query()` without this
// package depending on the SDK.
import type { EndReason, Json, Outcome, Policy } from './types.js';
import type { Run, RunOptions, ApprovalRequest as RunApprovalRequest, Approver as RunApprover } from './run.js';

export const ADAPTER: 'claude-agent-sdk';
/** The claim's coverage: the hooks see every tool call of the loop. */
export const COVERAGE: 'complete';
/** How long a gated call waits for the approval callback, in seconds (300). */
export const DEFAULT_APPROVAL_TIMEOUT: number;
/** The matchers' timeout, in seconds, for hooks that do not wait for a person (30). */
export const DEFAULT_HOOK_TIMEOUT: number;

/** What the approval callback is shown (`Run.invokeWithApproval`'s request), with the tool_use id of the call. */
export type ApprovalRequest = RunApprovalRequest<{ toolUseId: string | null }>;
export type { ApprovalAnswer } from './run.js';
/** The embedding program's approval channel (never the agent's): see `Approver` in `runbook-policy/run`. */
export type Approver = RunApprover<{ toolUseId: string | null }>;

export interface RunbookHooksOptions {
  approve?: Approver | null;
  /** Seconds a gated call waits for `approve` (default 300). */
  approvalTimeout?: number;
  /** The other matchers' timeout, in seconds (default 30). */
  hookTimeout?: number;
  /** Block a Stop away from a terminal once, telling the model to keep working (default false). */
  keepWorking?: boolean;
}

/** What a callback answers (a subset of the SDK's SyncHookJSONOutput). */
export type RunbookHookAnswer =
  | Record<string, never>
  | { hookSpecificOutput: { hookEventName: 'PreToolUse'; permissionDecision: 'deny'; permissionDecisionReason: string } }
  | { decision: 'block'; reason: string }
  | { systemMessage: string };

/** A hook callback as the SDK calls it. */
export type RunbookHookCallback = (input: unknown, toolUseID: string | undefined, options: { signal: AbortSignal }) => Promise<RunbookHookAnswer>;

/** One hook matcher (the SDK's HookCallbackMatcher): every tool, `onFailure: 'block'`. */
export interface RunbookHookMatcher {
  matcher?: string;
  hooks: RunbookHookCallback[];
  timeout?: number;
  onFailure?: 'continue' | 'block';
}

export interface RunbookHookMatchers {
  PreToolUse: RunbookHookMatcher[];
  PostToolUse: RunbookHookMatcher[];
  PostToolUseFailure: RunbookHookMatcher[];
  Stop: RunbookHookMatcher[];
}

export type CreateRunOptions = Omit<RunOptions, 'adapter' | 'coverage' | 'profile' | 'riskCeiling' | 'agent'> &
  Partial<Pick<RunOptions, 'profile' | 'riskCeiling' | 'agent'>>;

/** `Run.create` with this adapter's name and coverage; profile R2, riskCeiling irreversible, agent `claude-agent-sdk` unless given. */
export function createRun(policy: Policy, options: CreateRunOptions): Promise<Run>;

/** Ends the run when the session stopped with it still open; returns its outcome. */
export function endRun(run: Run, reason?: EndReason): Outcome;

/** The `hooks` option of `query()` that supervises the loop with `run`. */
export function runbookHooks(run: Run, options?: RunbookHooksOptions): RunbookHookMatchers;

/** The four callbacks bound to one run. */
export class RunbookHooks {
  constructor(run: Run, options?: RunbookHooksOptions);
  readonly run: Run;
  readonly approve: Approver | null;
  readonly approvalTimeout: number;
  readonly hookTimeout: number;
  readonly keepWorking: boolean;
  matchers(): RunbookHookMatchers;
  readonly preToolUse: RunbookHookCallback;
  readonly postToolUse: RunbookHookCallback;
  readonly postToolUseFailure: RunbookHookCallback;
  readonly stop: RunbookHookCallback;
}
