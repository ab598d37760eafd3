// `runbook-policy/ai-sdk` (Node only): supervise the tool loop of the Vercel AI SDK (`ai`) with a runbook.
// See ai-sdk.js for what the wrapper does and what it cannot see. The types below are structural: a
// supervised ToolSet has the type of the ToolSet given, and `endRunOnFinish` fits the `onFinish` option of
// generateText, streamText and ToolLoopAgent, without this package depending on the SDK.
import type { Answer, Run, RunOptions, ApprovalRequest as RunApprovalRequest, Approver as RunApprover } from './run.js';
import type { Coverage, EndReason, Json, Outcome, Policy } from './types.js';

export const ADAPTER: 'ai-sdk';
/** Coverage: a tool that the provider executes (a web search, code execution): never reaches `execute`. */
export const PROVIDER_EXECUTED_TOOLS: 'provider-executed-tools';
/** Coverage: a tool without `execute`, answered by the program or the UI outside the loop. */
export const TOOLS_WITHOUT_EXECUTE: 'tools-without-execute';
/** Coverage: tools given to the SDK beside the ToolSet that `supervise` wrapped. */
export const UNSUPERVISED_TOOLS: 'unsupervised-tools';
/** How long a gated call waits for the approval callback, in seconds (300). */
export const DEFAULT_APPROVAL_TIMEOUT: number;

/** A ToolSet as the SDK takes it: tools by name. */
export type ToolSetLike = { readonly [name: string]: unknown };

/** What the approval callback is shown (`Run.invokeWithApproval`'s request), with the SDK's toolCallId of the call. */
export type ApprovalRequest = RunApprovalRequest<{ toolCallId: string | null }>;
export type { ApprovalAnswer } from './run.js';
/** The embedding program's approval channel (never the agent's): see `Approver` in `runbook-policy/run`. */
export type Approver = RunApprover<{ toolCallId: string | null }>;

export interface SuperviseOptions {
  approve?: Approver | null;
  /** Seconds a gated call waits for `approve` (default 300). */
  approvalTimeout?: number;
}

/** `tools` with every `execute` decided by `run` first; provider-executed tools and tools without `execute` passed on as they are. */
export function supervise<TOOLS extends ToolSetLike>(tools: TOOLS, run: Run, options?: SuperviseOptions): TOOLS;

/** `complete`, or what an agent with `tools` hides from this adapter (sorted). */
export function coverage(tools: ToolSetLike, options?: { everyToolSupervised?: boolean }): Coverage;

export type CreateRunOptions = Omit<RunOptions, 'adapter' | 'coverage' | 'profile' | 'riskCeiling' | 'agent'> &
  Partial<Pick<RunOptions, 'profile' | 'riskCeiling' | 'agent'>> &
  (
    | {
        /** The agent's whole ToolSet: the claimed coverage is `coverage(tools)`. */
        tools: ToolSetLike;
        coverage?: never;
      }
    | { tools?: never; coverage: Coverage }
  );

/** `Run.create` with this adapter's name and the coverage of `tools` (or the `coverage` given); profile R2, riskCeiling irreversible, agent `ai-sdk` unless given. */
export function createRun(policy: Policy, options: CreateRunOptions): Promise<Run>;

/** Ends the run (the loop failed, or stopped on calls still waiting); returns its outcome. Idempotent. */
export function endRun(run: Run, reason?: EndReason): Outcome;

/** One part of a step's content, as far as the adapter reads it. */
export interface StepContentPartLike {
  readonly type: string;
  readonly toolCallId?: string;
  readonly providerExecuted?: boolean;
}

/** One step of the loop, as far as the adapter reads it. */
export interface StepLike {
  readonly finishReason: string;
  readonly text: string;
  readonly content: ReadonlyArray<StepContentPartLike>;
}

/** What a finished loop gives: a generateText result, or the `onFinish` event of generateText, streamText or ToolLoopAgent. */
export interface FinishedLoop {
  readonly steps: ReadonlyArray<StepLike>;
}

/**
 * Feeds `final_output` when the model gave its final answer, then ends the run; returns its outcome, or
 * null (the run left open) when calls of the last step still wait for the program.
 */
export function finishRun(run: Run, finished: FinishedLoop): Outcome | null;

/** The `onFinish` callback that ends `run` with the loop (`finishRun`). */
export function endRunOnFinish(run: Run): (event: FinishedLoop) => void;

/** Why a call did not run; the SDK shows the model `RunbookBlocked: blocked by the runbook: ...` as the call's tool error. */
export class RunbookBlocked extends Error {
  constructor(message: string, answer?: Answer | null);
  readonly name: 'RunbookBlocked';
  /** The module's last answer for the call (null when the run could not decide). */
  readonly answer: Answer | null;
}
