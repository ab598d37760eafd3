// `runbook-policy/langgraph` (Node only): supervise the tool calls of a LangGraph agent with a runbook.
// See langgraph.js for what each call goes through and what the adapter cannot see.
import type { BaseMessage, ToolMessage } from '@langchain/core/messages';
import type { CallbackManagerForToolRun } from '@langchain/core/callbacks/manager';
import type { DynamicTool, StructuredTool, StructuredToolInterface, ToolRunnableConfig } from '@langchain/core/tools';
import type { RunnableToolLike } from '@langchain/core/runnables';
import type { ToolNode } from '@langchain/langgraph/prebuilt';
import type { Coverage, Json, Outcome, Policy } from './types.js';
import type { Run, RunOptions, ApprovalRequest as RunApprovalRequest, Approver as RunApprover } from './run.js';

export const ADAPTER: 'langgraph';
/** What the adapter cannot see when some tool of the agent is not wrapped. */
export const UNWRAPPED_TOOLS: 'tools-outside-wrapped-tools';
/** What it cannot see when the model has native tools (run by the model provider). */
export const NATIVE_TOOLS: 'native-tools';
/** How long a gated call waits for the approval callback, in seconds (300). */
export const DEFAULT_APPROVAL_TIMEOUT: number;

/** The coverage to claim: `complete` only when every tool of the agent is wrapped and none is native. */
export function coverage(options: { everyToolWrapped: boolean; nativeTools?: boolean }): Coverage;

export type CreateRunOptions = Omit<RunOptions, 'adapter' | 'profile' | 'riskCeiling' | 'agent'> & Partial<Pick<RunOptions, 'profile' | 'riskCeiling' | 'agent'>>;

/** `Run.create` with this adapter's name; profile R2, riskCeiling irreversible, agent `langgraph` unless given. */
export function createRun(policy: Policy, options: CreateRunOptions): Promise<Run>;

/** What the approval callback is shown (`Run.invokeWithApproval`'s request), with the model's tool-call id of the call. */
export type ApprovalRequest = RunApprovalRequest<{ toolCallId: string | null }>;
export type { ApprovalAnswer } from './run.js';
/** The embedding program's approval channel (never the agent's): see `Approver` in `runbook-policy/run`. */
export type Approver = RunApprover<{ toolCallId: string | null }>;

export interface RunbookOptions {
  /** The supervised run (`createRun`). */
  run: Run;
  /** Without one, gated calls stay blocked. */
  approve?: Approver | null;
  /** Seconds a gated call waits for `approve` (default 300). */
  approvalTimeout?: number;
}

/** The ToolNode's own options, and the supervision's. */
export interface RunbookToolNodeOptions extends RunbookOptions {
  name?: string;
  tags?: string[];
  handleToolErrors?: boolean;
}

/** The checked options a RunbookTool and a RunbookToolNode hold. */
export interface Supervision {
  readonly run: Run;
  readonly approve: Approver | null;
  readonly approvalTimeout: number;
}

/** A blocked call of a wrapped tool invoked directly (not through a tool call). */
export class ToolBlocked extends Error {}

/**
 * A LangChain tool whose calls the runbook decides first: it offers the model the wrapped tool's name,
 * description and schema; invoked with a tool call, a blocked call answers a ToolMessage with status
 * `error` and the module's sentence.
 */
export class RunbookTool<T extends StructuredTool = StructuredTool> extends StructuredTool<T['schema']> {
  static lc_name(): string;
  constructor(tool: T, options: RunbookOptions);
  name: string;
  description: string;
  schema: T['schema'];
  readonly wrapped: T;
  readonly supervision: Supervision;
  protected _call(arg: unknown, runManager?: CallbackManagerForToolRun, parentConfig?: ToolRunnableConfig): Promise<unknown>;
}

/** Each tool wrapped in a RunbookTool bound to `options.run` (a RunbookTool given is kept as it is). */
export function runbookTools<T extends StructuredTool>(tools: T[], options: RunbookOptions): RunbookTool<T>[];

/**
 * The prebuilt ToolNode with every StructuredTool wrapped; it also decides calls no wrapped tool answers,
 * and records the model's `invalid_tool_calls` as malformed.
 */
export class RunbookToolNode<S = any> extends ToolNode<S> {
  constructor(tools: (StructuredToolInterface | DynamicTool | RunnableToolLike)[], options: RunbookToolNodeOptions);
  readonly supervision: Supervision;
}

/** What a LangGraph agent returned: its state with `messages`, or the messages. */
export type AgentResult = { messages: BaseMessage[] } | BaseMessage[];

/**
 * Ends the run when the agent has finished and returns its outcome: the last message, when it is the
 * model's answer, is recorded as the final output. Without a result (the graph threw), `interrupted`.
 */
export function endRun(run: Run, result?: AgentResult | null): Outcome;

export type { ToolMessage };
