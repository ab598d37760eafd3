// The Node entry (`runbook-policy` in Node): the browser entry's API, file loading, and the Run.
export * from './types.js';
export * from './run.js';
import type { Policy } from './types.js';

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
