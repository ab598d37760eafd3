// The browser entry (`runbook-policy` outside Node, `runbook-policy/browser` anywhere).
export * from './types.js';
import type { Policy } from './types.js';

export interface LoadOptions {
  /** The component's bytes (checked against the recorded sha256). */
  bytes?: Uint8Array | ArrayBuffer;
  /** Where to fetch the component; default the package's policy.wasm beside this module. */
  url?: string | URL;
}

/** Loads the component and checks its sha256 (WebCrypto); other bytes throw ComponentMismatch. */
export function load(options?: LoadOptions): Promise<Policy>;
