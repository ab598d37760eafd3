// `runbook-policy/openai-agents` (Node only): supervise an OpenAI Agents SDK agent with a runbook, through
// the SDK's tool input and output guardrails. See openai-agents.js for what each guardrail does and what
// the adapter cannot see.
import type { Agent, FunctionTool, tool as sdkTool } from '@openai/agents';
import type { Coverage, EndReason, Json, Outcome, Policy } from './types.js';
import type { Answer, Run, RunOptions, ApprovalRequest as RunApprovalRequest, Approver as RunApprover } from './run.js';

export const ADAPTER: 'openai-agents';
/** How long a gated call waits for the approval callback, in seconds (300). */
export const DEFAULT_APPROVAL_TIMEOUT: number;
/** The guardrails' name in the SDK's guardrail results (`runbook`). */
export const GUARDRAIL_NAME: 'runbook';
/** What the adapter cannot see: tools the model provider runs (web search, file search, code interpreter, hosted MCP, ...). */
export const HOSTED_TOOLS: 'hosted-tools';
/** ... the runner's computer, shell and apply_patch executors. */
export const BUILTIN_TOOLS: 'builtin-tools';
/** ... tools of the agent's `mcpServers`. */
export const MCP_SERVER_TOOLS: 'mcp-server-tools';
/** ... the tool calls inside an agent used as a tool (`agent.asTool()`). */
export const AGENT_TOOL_INTERNALS: 'agent-tool-internals';

/** What the approval callback is shown (`Run.invokeWithApproval`'s request), with the model's call id of the call. */
export type ApprovalRequest = RunApprovalRequest<{ callId: string | null }>;
export type { ApprovalAnswer } from './run.js';
/** The embedding program's approval channel (never the agent's): see `Approver` in `runbook-policy/run`. */
export type Approver = RunApprover<{ callId: string | null }>;

export interface SuperviseOptions {
  approve?: Approver | null;
  /** Seconds a gated call waits for `approve` (default 300). */
  approvalTimeout?: number;
}

/** `'complete'` when every tool of `agent` (and of the agents it hands off to) is a function tool, with no MCP servers; else what is out of sight. */
export function coverage(agent: Agent<any, any>): Coverage;

export type CreateRunOptions = Omit<RunOptions, 'adapter' | 'coverage' | 'profile' | 'riskCeiling' | 'agent'> &
  Partial<Pick<RunOptions, 'profile' | 'riskCeiling' | 'agent'>>;

/** `Run.create` with this adapter's name and `coverage(agent)`; profile R2, riskCeiling irreversible, agent the SDK agent's name unless given. */
export function createRun(policy: Policy, agent: Agent<any, any>, options: CreateRunOptions): Promise<Run>;

/** Ends the run unless it has ended; returns its outcome. */
export function endRun(run: Run, reason?: EndReason): Outcome;

/** The SDK's `tool()`, its `execute` watched so that a throw is recorded as an error result. */
export const tool: typeof sdkTool;

/**
 * Gives every function tool of `agent` (and of the agents it hands off to) this module's guardrails bound
 * to `run`, and ends the run at the agent's end when it stands at a terminal. Returns `agent`.
 */
export function supervise<A extends Agent<any, any>>(agent: A, run: Run, options?: SuperviseOptions): A;

/** What the SDK's guardrails get back from this module's. */
export interface RunbookGuardrailOutput {
  outputInfo: { decision: Answer['kind'] | null; step?: string | null; deviation?: string | null; reason?: string | null };
  behavior: { type: 'allow' } | { type: 'rejectContent'; message: string };
}

/** One run's guardrails and end handling (what `supervise` installs). */
export class Supervisor {
  constructor(run: Run, options?: SuperviseOptions);
  readonly run: Run;
  readonly approve: Approver | null;
  readonly approvalTimeout: number;
  /** A copy of the function tool with the input guardrail last and the output guardrail first. */
  wrap<T extends FunctionTool<any, any, any>>(tool: T): T;
  /** The input guardrail's work for one call of `tool`. */
  decide(tool: string, toolCall: { callId?: string; arguments?: string }): Promise<RunbookGuardrailOutput>;
  /** The output guardrail's work for one call of `tool`. */
  record(tool: string, context: unknown, toolCall: { callId?: string }, output: unknown): Promise<RunbookGuardrailOutput>;
  /** `agent_end`: the final output; the run ends at a terminal (or once over). */
  agentEnd(): void;
}
