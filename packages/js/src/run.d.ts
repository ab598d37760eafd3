// `runbook-policy/run` (Node only): a supervised run that writes the same bundle as runbook-host.
import type { Coverage, Decision, EndReason, Json, Leaving, Outcome, Policy, Profile, Risk, RunBroken, RunState } from './types.js';

export const HOST_NAME: 'runbook-policy-js';
export const HOST_VERSION: string;

/** The module's answer to one event, recorded (fsync'd) before it is returned. */
export interface Answer {
  readonly decision: Decision;
  readonly kind: Decision['kind'];
  /** Run the tool only when this is true. */
  readonly allowed: boolean;
  /** One sentence for the agent or the person reading it. */
  readonly explanation: string;
  readonly state: RunState;
  readonly eventLine: string;
  readonly decisionLine: string;
  /** This event's chain link. */
  readonly link: string;
  /** For a `needs-approval` call: the hash an approval bound to it names; else null. */
  readonly callSha256: string | null;
}

export interface RunOptions {
  /** The runbook: its bytes, or a path (a string or a file: URL). */
  document: Uint8Array | ArrayBuffer | string | URL;
  /** The agent's identity (an approval from it is refused). */
  agent: string;
  profile: Profile;
  riskCeiling: Risk;
  /** What the adapter can see: set it from what your loop routes through the run. */
  coverage: Coverage;
  /** Default `["*"]`. */
  allowlist?: string[];
  available?: string[] | null;
  /** Default `.runbook/runs`. */
  runsRoot?: string;
  /** Default a new `r-<time>-<random>`. */
  runId?: string;
  /** The document's name in run.json (a file name only); default the file's name. */
  reference?: string;
  /** `library` (default), `claude-agent-sdk`, `pydantic-ai`, ... (run.json's adapter). */
  adapter?: string;
  /** More paths the agent must not touch (the guard of docs/spec/run.md#guarded-calls). */
  guardPaths?: string[];
  /** The run's clock, Unix milliseconds (default `Date.now`): the bundle's times and every event's `at`. */
  clock?: () => number;
  /** The host run.json and the receipt name; default this package's. */
  host?: { name: string; version: string };
  /** run.json's `source.git` (counts only); default measured with `git status` in the working directory. */
  git?: { [key: string]: Json };
}

/** What an adapter keeps outside the bundle when a run begins (`run.pin`), to resume it. */
export interface Pin {
  documentSha256: string;
  chainH0: string;
}

export interface ResumeOptions {
  /** The run's wall-clock start in Unix milliseconds: `run.t0` of the Run that created it (every `at` counts from it). */
  t0: number;
  /** Default `.runbook/runs`. */
  runsRoot?: string;
  /** When given, the document and the chain's h0 must be these (a swapped document is refused even with run.json edited to match). */
  pin?: Pin | null;
  /** The run's clock, Unix milliseconds (default `Date.now`). */
  clock?: () => number;
  /** More paths the agent must not touch (as given to `create`). */
  guardPaths?: string[];
}

/**
 * What an approval callback is shown (`Run.invokeWithApproval`): the call the module holds, named by its
 * hash, with the adapter's own fields (`Extra`, such as the framework's call id).
 */
export type ApprovalRequest<Extra extends object = {}> = {
  readonly runId: string;
  /** The gated step (null in a runbook without steps). */
  readonly step: string | null;
  readonly tool: string;
  readonly arguments: Json;
  /** The hex sha256 the approval is bound to: `run.callSha256(tool, arguments)`. */
  readonly callSha256: string;
  /** The module's explanation of why the call waits. */
  readonly explanation: string;
} & Readonly<Extra>;

/** A person's answer; the module refuses an approval whose approver is the run's agent. */
export interface ApprovalAnswer {
  /** Who answers (a non-empty string). */
  approver: string;
  granted: boolean;
}

/**
 * The embedding program's approval channel (never the agent's), sync or async. `signal` aborts once the
 * wait is over (the timeout, the framework's signal, or the answer came). Throwing, rejecting, or
 * answering anything but an ApprovalAnswer blocks the call.
 */
export type Approver<Extra extends object = {}> = (request: ApprovalRequest<Extra>, options: { signal: AbortSignal }) => ApprovalAnswer | Promise<ApprovalAnswer>;

export interface InvokeWithApprovalOptions<Extra extends object = {}> {
  callId?: string | null;
  step?: string | null;
  /** Asked when the module answers `needs-approval`; without it a gated call stays blocked. */
  approve?: Approver<Extra> | null;
  /** Seconds to wait for `approve` (a positive number; at most about 24.8 days); null or absent: no limit. */
  approvalTimeout?: number | null;
  /** The framework's signal: when it aborts, the wait ends, the callback's signal aborts, nothing more is fed. */
  signal?: AbortSignal | null;
  /** The adapter's own fields for the request (not `runId`, `step`, `tool`, `arguments`, `callSha256` or `explanation`). */
  request?: Extra;
}

/** How a call that may need approval was decided (`Run.invokeWithApproval`). */
export interface Gated {
  /** The decision the call is run or blocked on: the last `invoke` fed for it. */
  readonly answer: Answer;
  /** The module's answer to the approval fed for the call; null when none was fed. */
  readonly approval: Answer | null;
  /**
   * Why the call stays blocked though the module held it for approval: no callback, it threw, timed out,
   * was aborted or answered no `{approver, granted}` (nothing fed), or the approval fed was not accepted
   * or was a refusal. Null when the call is allowed, or when `answer` alone blocks it.
   */
  readonly problem: string | null;
  /** Run the tool only when this is true: `answer.allowed`. */
  readonly allowed: boolean;
  /**
   * Why the call is blocked, one sentence for the agent: the module's explanation and `problem`, joined
   * by a semicolon, one full stop at the end. Empty when the call is allowed.
   */
  readonly message: string;
}

/** What names the run's evidence or the supervisor (docs/spec/run.md#guarded-calls): the needles the module matches calls against. */
export class Guard {
  addPath(path: string): this;
  addName(name: string): this;
  readonly needles: string[];
}

/** One supervised run with its bundle; every method records its event before it returns. */
export class Run {
  private constructor();
  /** Creates the bundle and feeds the start claim (a refused run is finished at once: `over` is true). */
  static create(policy: Policy, options: RunOptions): Promise<Run>;
  /**
   * Reopens a run another process created (and left without `end`) by a replay of its events.ndjson, every
   * record checked by the module; later events append to the same bundle. Throws RunTampered for evidence
   * that does not check out (or a document other than the pinned one), RunOver for a finished bundle,
   * RunBroken for a bundle it cannot read or a run that takes signed approvals or a signed receipt.
   */
  static resume(policy: Policy, runId: string, options: ResumeOptions): Run;
  /** The answer to the start claim; null for a resumed run. */
  readonly start: Answer | null;
  readonly runId: string;
  readonly dir: string;
  readonly head: string;
  /** The run's wall-clock start (Unix ms): `Run.resume`'s `t0`. */
  readonly t0: number;
  /** `Run.resume`'s `pin`. */
  readonly pin: Pin;
  readonly guard: Guard;
  readonly over: boolean;
  readonly finished: boolean;
  readonly broken: RunBroken | null;
  invoke(tool: string, args: Json, options?: { callId?: string | null; step?: string | null }): Answer;
  result(tool: string, result: Json, options?: { isError?: boolean; callId?: string | null }): Answer;
  /** `request`: the `seq` of the needs-approval decision answered; by default the module's pending request for the call. */
  approval(approver: string, granted: boolean, options?: { step?: string | null; callSha256?: string | null; request?: number | null }): Answer;
  advance(step: string): Answer;
  verdict(step: string, passed: boolean, by: string): Answer;
  finalOutput(): Answer;
  tick(): Answer;
  /** A tick when a checkpoint deadline has passed, else null. */
  tickIfDue(): Answer | null;
  /** Milliseconds until a checkpoint deadline passes, or null. */
  msUntilDeadline(): number | null;
  /** Ends the run (idempotent) and returns its outcome. */
  end(reason?: EndReason): Outcome;
  state(): RunState;
  report(): string;
  callSha256(tool: string, args: Json): string;
  /**
   * A tool call that may be held for a person, the one implementation the adapters share: `invoke`; on
   * `needs-approval`, `approve` is asked, its answer fed as an approval bound to the call's hash, and a
   * granted, accepted approval is followed by the same `invoke` again. Fail closed: no callback, a
   * callback that throws, rejects, times out, is aborted by `signal` or answers no `{approver, granted}`
   * leaves the call blocked with nothing fed; a refused or not accepted approval is fed and blocks it too.
   * Rejects with what `invoke` and `approval` throw (RunBroken, InvalidInput, ...), and with RunOver when
   * the run was finished while the call waited.
   */
  invokeWithApproval<Extra extends object = {}>(tool: string, args: Json, options?: InvokeWithApprovalOptions<Extra>): Promise<Gated>;
  /**
   * An adapter's: records its framework's input that is not of the shape the framework promised (the raw
   * input, JSON-encoded or inspected when it is not text, best preceded by why). Fed as an event line that
   * is no event (one line, at most 4096 characters of the text, prefixed `malformed event: ` when empty or
   * when it begins with `{`), so the module halts the run with `malformed-event`; recorded like any event.
   */
  feedMalformed(text: string): Answer;
  /** The wire path: one event line (docs/spec/run.md#events), fed and recorded exactly as given (no guard: use `invoke` for calls). */
  feedLine(line: string): Answer;
  /** Which of `offered` a client may see now (the module's rule). */
  visibleTools(offered: string[], wholeAllowlist?: boolean): string[];
  /** How the run ends when its client leaves: feed `finalOutput()` first when it says so, then `end(reason)`. */
  leaving(callsInFlight?: number, lastCallTimedOut?: boolean): Leaving;
  /** The exit code of a process that ran this run: 0 only when it completed, else 1. */
  exitCode(): number;
}
