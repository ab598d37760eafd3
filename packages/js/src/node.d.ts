// The Node entry (`runbook-policy` in Node): the browser entry's API, file loading, the Run and `verify`.
export * from './types.js';
export * from './run.js';
import type { Policy, Verification } from './types.js';

export interface LoadOptions {
  /** A component file (checked against the recorded sha256); default the package's policy.wasm. */
  path?: string | URL;
  /** The component's bytes (checked against the recorded sha256). */
  bytes?: Uint8Array | ArrayBuffer;
}

/** Loads the component and checks its sha256; other bytes throw ComponentMismatch. */
export function load(options?: LoadOptions): Promise<Policy>;

/** The path of the component this package ships. */
export const COMPONENT_PATH: string;

export interface VerifyOptions {
  /** The loaded policy (from `load()`): it runs the checks and replays the bundle; the receipt must name its sha256. */
  policy: Policy;
}

/**
 * Verifies the run bundle in `runDir` (`.runbook/runs/<run-id>`): every check `runbook-host verify` makes of
 * its bytes, made by the module. Symbolic links are never followed; more than 256 MiB is refused unread.
 * Fail closed: SSH signatures of signed approvals are not checked by this package, so such a bundle is not
 * `ok` (verify it with `runbook-host verify`); the receipt's DSSE signature is not checked either.
 * Rejects with InvalidInput when `runDir` cannot be opened.
 */
export function verify(runDir: string | URL, options: VerifyOptions): Promise<Verification>;

/** How much of a bundle `verify` reads, in all (256 MiB). */
export const MAX_BUNDLE_BYTES: number;
