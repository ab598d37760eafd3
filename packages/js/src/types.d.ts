// The types of the public API shared by every entry. The WIT's own types, as jco generated them from
// wit/policy.wit, are in dist/interfaces/runbook-policy-policy.d.ts: the string unions below come from
// there, so a code added to the WIT shows up here.

import type * as Wit from '../dist/interfaces/runbook-policy-policy.js';

export type { Wit };

export type Severity = Wit.Severity;
export type Risk = Wit.Risk;
export type DecisionKind = Wit.DecisionKind;
export type Deviation = Wit.Deviation;
export type Reason = Wit.Reason;
export type Refusal = Wit.Refusal;
export type Phase = Wit.Phase;
export type Outcome = Wit.Outcome;
export type EndReason = Wit.EndReason;

/** The wire codes of the runtime profiles (the WIT spells them in lower case). */
export type Profile = 'R0' | 'R1' | 'R2';
/** The wire codes of the structure levels. */
export type Structure = 'P0' | 'P1' | 'P2';
/** What the adapter can see: everything, or the list of what it cannot (e.g. `["shell"]`). */
export type Coverage = 'complete' | string[];

/** Any value JSON can hold (tool arguments and results). */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A document: its exact bytes, or text (encoded as UTF-8). */
export type DocumentInput = Uint8Array | ArrayBuffer | string;

/** A lint finding: 1-based line and column (in Unicode scalar values) and a JSON Pointer. */
export interface Finding {
  code: string;
  severity: Severity;
  line: number;
  column: number;
  pointer: string;
  message: string;
}

export interface LintReport {
  /** Hex SHA-256 of the document's exact bytes. */
  sha256: string;
  /** Sorted by line, column, code. */
  findings: Finding[];
  /** Null when the document did not parse. */
  structure: Structure | null;
  /** True when no finding is an error. */
  ok: boolean;
}

// ---- events ---------------------------------------------------------------------------------------------

/** The `start` claim: the first event of every run. */
export interface StartEvent {
  type: 'start';
  runId: string;
  profile: Profile;
  /** Tools the client will allow at all; `*` for any. */
  allowlist: string[];
  riskCeiling: Risk;
  coverage: Coverage;
  agent: string;
  /** Tools (and `id@version` runbooks) available, for prerequisites; none leaves them unmet. */
  available?: string[] | null;
}

export interface InvokeEvent {
  type: 'invoke';
  tool: string;
  arguments: Json;
  callId?: string | null;
  step?: string | null;
  /** Set when the call names the run directory or the supervisor (a Run sets it itself). */
  guard?: boolean;
}

export interface ResultEvent {
  type: 'result';
  tool: string;
  result: Json;
  isError?: boolean;
  callId?: string | null;
}

export interface ApprovalEvent {
  type: 'approval';
  /** Who approves: never the agent (the module refuses that). */
  approver: string;
  granted: boolean;
  step?: string | null;
  /** Binds the approval to one call: what `callSha256(tool, arguments)` gives. */
  callSha256?: string | null;
  /** The request answered: the `seq` of the module's `needs-approval` decision (its approval ledger). */
  request?: number | bigint | null;
}

/** R1: the client routes the run to `step`. */
export interface AdvanceEvent {
  type: 'advance';
  step: string;
}

/** A human's ruling on an unevaluable step. */
export interface VerdictEvent {
  type: 'verdict';
  step: string;
  passed: boolean;
  by: string;
}

export interface FinalOutputEvent {
  type: 'final_output';
}

export interface TickEvent {
  type: 'tick';
}

export interface EndEvent {
  type: 'end';
  /** Default `normal`. */
  reason?: EndReason;
}

/**
 * A typed event. One that does not fit these types (a key misspelt, a value of the wrong type, arguments
 * with no JSON form) is not thrown back: it is fed as a malformed line and halts the run
 * (`malformed-event`), recorded, never an allow.
 */
export type Event =
  | StartEvent
  | InvokeEvent
  | ResultEvent
  | ApprovalEvent
  | AdvanceEvent
  | VerdictEvent
  | FinalOutputEvent
  | TickEvent
  | EndEvent;

// ---- decisions and state ------------------------------------------------------------------------------

export interface Decision {
  /** The event's 0-based position in the run; the `start` event is 0. */
  seq: number;
  kind: DecisionKind;
  /** The current step or terminal after the event. */
  step: string | null;
  deviation: Deviation | null;
  reason: Reason | null;
  /** Sorted; empty except on a refused `start`. */
  refusals: Refusal[];
}

/** What a host may act on between events. */
export interface RunState {
  phase: Phase;
  /** The current step or terminal. */
  step: string | null;
  /** True when `step` is a terminal. */
  atTerminal: boolean;
  /** Capability names in scope now, sorted. */
  scope: string[];
  /** The tools of those capabilities, sorted. */
  scopeTools: string[];
  gated: boolean;
  approved: boolean;
  callApprovals: number;
  awaitingVerdict: boolean;
  /** Set once the run is over. */
  outcome: Outcome | null;
  events: number;
  /** The earliest `at` at which a pending checkpoint times out: when to feed a `tick`. */
  nextDeadline: number | null;
  /** The module's approval ledger: the requests of this visit no answer consumed yet, oldest first. */
  approvalRequests: { seq: number; callSha256: string }[];
}

/** One event as a host records it (one call into the module). */
export interface Recorded {
  /** The canonical event line (what a host writes under `event`). */
  eventLine: string;
  decision: Decision;
  /** The decision's canonical line. */
  decisionLine: string;
  /** The hash-chain link of docs/spec/bundle.md#the-hash-chain: `sha256(prev || E || D)`, 64 lowercase hex digits. */
  link: string;
  /** The whole `events.ndjson` record of this event, newline included: what a host appends. */
  recordLine: string;
  /** One sentence explaining the decision to the agent or the person reading it. */
  explanation: string;
  /** The state after the event. */
  state: RunState;
}

/** One file operation of a run bundle, composed by the module; a host carries them out in order. */
export interface Effect {
  /** `create-dir` (an existing one is an error), `write` (atomically), `append` (one whole record,
   * fsync'd), `sign` (a DSSE envelope of the bytes with the host's receipt key, written at `path`). */
  op: Wit.EffectOp;
  /** Relative to the runs root: `latest.json`, `history.ndjson`, `<run-id>/run.json`. */
  path: string;
  bytes: Uint8Array;
}

/** How a run ends when its client leaves (the module's rule, docs/spec/adapters.md#adapter-duties). */
export interface Leaving {
  /** Feed `final_output` before `end`. */
  finalOutput: boolean;
  reason: EndReason;
}

// ---- verify -------------------------------------------------------------------------------------------

/** One top-level entry of a bundle directory: a regular file's bytes, a directory's entry count, or null for anything else. */
export type BundleItem = Uint8Array | number | null;

/** A signed answer whose payload the module checked; its signature bytes are `runbook-host verify`'s to check. */
export interface SignedAnswer {
  /** Where it is recorded (`signatures.ndjson:N`). */
  place: string;
  principal: string;
  /** The signed approval payload. */
  message: string;
  signature: string;
  fingerprint: string;
}

/** `policy.verifyBundle`'s options. */
export interface VerifyBundleOptions {
  /**
   * The module's result unaltered: no failing closed on signatures. `ok` then means only that every check
   * of the module passed; the bytes of `signedAnswers[].signature` and of `receipt.dsse.json` (when
   * `receiptSigned`) are NOT checked, and the caller must check them (the run viewer does, with WebCrypto).
   * Default false.
   */
  moduleResult?: boolean;
}

/** What `verify` / `policy.verifyBundle` found (frozen). */
export interface Verification {
  /** No check failed (and no signed answer awaits a signature check this package cannot make). */
  readonly ok: boolean;
  /** The checks that passed, in order: `runbook-host verify --format json`'s `checks[].id`. */
  readonly checks: readonly string[];
  /** The first check that failed: its place (a file, `events.ndjson:N`) and one sentence. */
  readonly failure: { readonly place: string; readonly message: string } | null;
  readonly runId: string | null;
  /** The outcome the bundle records (a string read from it: any text when a check failed). */
  readonly outcome: string | null;
  readonly events: number;
  /** Why a verified bundle is not share-ready. */
  readonly reasons: readonly { readonly code: string; readonly message: string }[];
  readonly warnings: readonly string[];
  /** A redacted derivative: its chain and receipt verified, its events not replayed. */
  readonly redacted: boolean;
  /** A shadow run: how many calls the module did not allow ran anyway; else null. */
  readonly shadow: number | null;
  readonly signedAnswers: readonly SignedAnswer[];
  /** The receipt is signed (`receipt.dsse.json`, or run.json says so): a bundle this package cannot check fails closed. */
  readonly receiptSigned: boolean;
}

/** What `session.replayEvents` established (frozen). */
export interface Replayed {
  /** The chain's head after the last record. */
  readonly head: string;
  readonly events: number;
  /** The last event's `at`. */
  readonly lastAt: number;
}

// ---- errors -------------------------------------------------------------------------------------------

export type ErrorCode =
  | 'component-mismatch'
  | 'invalid-document'
  | 'snapshot-refused'
  | 'module-trap'
  | 'run-broken'
  | 'run-over'
  | 'run-tampered'
  | 'invalid-input'
  | 'session-closed';

/** The base of every error this package throws on purpose. */
export class PolicyError extends Error {
  readonly code: ErrorCode;
}
/** Bytes that are not the component this package was built for. */
export class ComponentMismatch extends PolicyError {
  readonly code: 'component-mismatch';
  readonly actual: string;
  readonly expected: string;
}
/** A document without an envelope; `findings` say why. */
export class InvalidDocument extends PolicyError {
  readonly code: 'invalid-document';
  readonly findings: Finding[];
}
/** A snapshot refused for these document bytes; `detail` is the module's message (a JSON Pointer in it). */
export class SnapshotRefused extends PolicyError {
  readonly code: 'snapshot-refused';
  readonly detail: string;
}
/** The component trapped: the session (or its instance) is unusable. */
export class ModuleTrap extends PolicyError {
  readonly code: 'module-trap';
}
/** The run could not record evidence, or its module trapped: every later call throws this. */
export class RunBroken extends PolicyError {
  readonly code: 'run-broken';
}
/** The run's bundle is finished: nothing more is recorded. */
export class RunOver extends PolicyError {
  readonly code: 'run-over';
}
/** Recorded evidence that does not check out (`Session.replayEvents`, `Run.resume`): where and why. */
export class RunTampered extends PolicyError {
  readonly code: 'run-tampered';
  /** `events.ndjson:N`, `run.json`, the document's file. */
  readonly place: string;
  readonly detail: string;
}
/** An argument of the wrong shape from the calling code; `detail` is the module's words when it has some. */
export class InvalidInput extends PolicyError {
  readonly code: 'invalid-input';
  readonly detail?: string;
}
/** A session used after `close()`. */
export class SessionClosed extends PolicyError {
  readonly code: 'session-closed';
}

// ---- the policy and sessions --------------------------------------------------------------------------

export interface SessionOptions {
  /**
   * `own` (the default): the session gets an instance of its own (20-80 ms to make), so a trap touches no
   * other session. `shared`: the instance of the stateless calls (no set-up cost; a trap there ends every
   * session sharing it).
   */
  instance?: 'own' | 'shared';
}

/** The loaded, verified component. Made by `load()`. */
export class Policy {
  private constructor();
  /** Hex sha256 of the component (what `runbook-host module --sha256` prints). */
  readonly sha256: string;
  /** The component's size in bytes. */
  readonly size: number;
  /** The jco version that transpiled the glue. */
  readonly jco: string;
  lint(document: DocumentInput): LintReport;
  /** The canonical envelope; throws InvalidDocument. */
  envelope(document: DocumentInput): string;
  /** Hex sha256 of canonical `{"arguments":..,"tool":..}`: what an approval bound to this call names. */
  callSha256(tool: string, args: Json): string;
  /** RFC 8785 canonical JSON; throws InvalidInput. */
  canonicalize(json: string): string;
  /** The canonical event line of a typed event; throws InvalidInput when it is malformed. */
  encodeEvent(event: Event, at: number | bigint): string;
  /** The chain link of docs/spec/bundle.md#the-hash-chain for one recorded line. */
  chainLink(prev: string, eventLine: string, decisionLine: string, digested?: boolean): string;
  /** One sentence for a wire code of a kind (`decision`, `reason`, `refusal`, `lint`, ...), or null. */
  explain(kind: string, code: string): string | null;
  version(): string;
  /** The document's prose as canonical JSON, or null when it does not parse. */
  prose(document: DocumentInput): string | null;
  /** A new supervised run of the document: feed the `start` claim first. */
  session(document: DocumentInput, options?: SessionOptions): Session;
  /** A new run's bundle as effects; `facts` (JSON text or a value) as wit/policy.wit says. Throws InvalidInput. */
  bundleCreate(document: DocumentInput, facts: string | Json): Effect[];
  /** One change to run.json (`manifest`: its text as last written). Throws InvalidInput. */
  bundleChange(manifest: string, change: string | Json): Effect[];
  /** The end of a run (`report` null: it ends without one). Throws InvalidInput. */
  bundleEnd(manifest: string, report: string | null, facts: string | Json): Effect[];
  /** The `events.ndjson` record of an event line and its decision line, newline included. */
  recordLine(link: string, eventLine: string, decisionLine: string): string;
  /** A line of `signatures.ndjson`. */
  signatureLine(seq: number | bigint, request: number | bigint, channelId: string, message: string, signature: string, principal: string, fingerprint: string): string;
  /** A line of `shadow.ndjson`. */
  shadowLine(seq: number | bigint, tool: string, callSha256: string, decision: string): string;
  /** A line of `traffic.ndjson` and its link (docs/spec/adapters.md#mcp-beyond-tools), from the previous link and an entry's JSON text. */
  trafficLine(prev: string, entryJson: string): [string, string];
  /** The guard's matching rule (docs/spec/run.md#guarded-calls) over a tool name and its arguments' JSON text. */
  guardNames(tool: string, argumentsJson: string, needles: string[]): boolean;
  /** The git state as counts only (JSON text), from `git status --porcelain=v1 -z`'s exit code (null: none) and output. */
  gitState(exitCode: number | null, porcelain: Uint8Array): string;
  /**
   * Every consistency check of a run bundle, by the module (`runbook-host verify`'s): `entries` are the
   * bundle directory's top-level entries (sorted here), `moduleSha256` the replaying module's (`policy.sha256`),
   * `signersSha256` that of the allowed signers trusted. Fail closed: a bundle with signed answers is not `ok`
   * (this package cannot check SSH signatures). In Node, `verify(runDir, {policy})` reads the entries.
   */
  verifyBundle(entries: readonly (readonly [name: string, item: BundleItem])[], moduleSha256: string, signersSha256?: string | null, options?: VerifyBundleOptions | null): Verification;
}

/** One supervised run in the module. */
export class Session {
  private constructor();
  /** A session in the state of `snapshot` (written by `snapshot()` for these exact bytes); throws SnapshotRefused. */
  static restore(policy: Policy, document: DocumentInput, snapshot: string, options?: SessionOptions): Session;
  /** The typed path: `at` is milliseconds since the run began. */
  handle(event: Event, at: number | bigint): Decision;
  /** The typed path with the record; `prev` is the previous link (the chain's h0 for the start). */
  feed(event: Event, at: number | bigint, prev: string): Recorded;
  /** The wire path: an event line in, a canonical decision line out. */
  handleLine(line: string): string;
  /** The wire path with the record; the line is recorded exactly as given. */
  feedLine(line: string, prev: string): Recorded;
  /** The replay path: `[decisionLine, link]`. */
  replayLine(line: string, prev: string): [decisionLine: string, link: string];
  /**
   * The resume path: every record of events.ndjson (its bytes) replayed from `prev` (the chain's h0), each
   * checked by the module; throws RunTampered (`place`: `events.ndjson:N`) and closes the session if one does not check out.
   */
  replayEvents(events: Uint8Array | ArrayBuffer | string, prev: string): Replayed;
  /**
   * The resume path's first check: that `runJson` (run.json's text) is a run of this session's document and,
   * with `pin`, the pinned one; returns the chain's h0 (what `replayEvents` starts from), or throws RunTampered
   * (`place`: `run.json` or the document's file).
   */
  chainStart(runJson: string, pin?: [documentSha256: string, chainH0: string] | null): string;
  state(): RunState;
  /** The guard's needles (docs/spec/run.md#guarded-calls): a typed `invoke` naming one is fed as `guard: true`. Set again after `restore`. */
  setGuard(needles: string[]): void;
  /** Which of `offered` a client may see now (the module's rule). */
  visibleTools(offered: string[], wholeAllowlist?: boolean): string[];
  /** How the run ends when its client leaves (docs/spec/adapters.md#adapter-duties). */
  leaving(callsInFlight: number, lastCallTimedOut: boolean): Leaving;
  /** The exit code of a process that ran this run: 0 only when it completed, 3 for a shadow run, else 1. */
  exitCode(shadow?: boolean): number;
  /** The `runbook-run-report/v1` (canonical JSON). */
  report(): string;
  /** Current step, scope, what awaits a human (canonical JSON). */
  status(): string;
  isOver(): boolean;
  /** `runbook-session-snapshot/v1` (canonical JSON). */
  snapshot(): string;
  /** Whether the session's instance trapped. */
  readonly trapped: boolean;
  /** Frees the session (and its own instance); also `Symbol.dispose`, for `using`. */
  close(): void;
}

/** The sha256 of the component this package runs. */
export const COMPONENT_SHA256: string;
/** The WIT interface the glue binds. */
export const INTERFACE: string;
