// The package in a browser (and any runtime with fetch and WebCrypto): no Node API is imported here or by
// what this imports. The Run (a run bundle on disk) is Node's: import it from `runbook-policy/run` there.

import { InvalidInput, documentBytes, hex, loadVerified } from './core.js';

export {
  COMPONENT_SHA256,
  INTERFACE,
  PolicyError,
  ComponentMismatch,
  InvalidDocument,
  SnapshotRefused,
  ModuleTrap,
  RunBroken,
  RunOver,
  RunTampered,
  InvalidInput,
  SessionClosed,
  Policy,
  Session,
} from './core.js';

async function sha256Hex(bytes) {
  if (!globalThis.crypto?.subtle) {
    throw new InvalidInput('WebCrypto is unavailable: the page must be a secure context (https://, or http://127.0.0.1 / localhost)');
  }
  return hex(new Uint8Array(await crypto.subtle.digest('SHA-256', bytes)));
}

/**
 * Loads the component and checks its sha256 (WebCrypto) against the one this package records: `{bytes}`,
 * or `{url}` (fetched), or by default the package's policy.wasm beside it (`new URL('../policy.wasm',
 * import.meta.url)`, a pattern bundlers copy as an asset). Other bytes are refused (ComponentMismatch).
 */
export async function load(options = {}) {
  if (options === null || typeof options !== 'object') throw new InvalidInput('load(options): options must be an object');
  const { url, bytes, ...rest } = options;
  const unknown = Object.keys(rest);
  if (unknown.length) throw new InvalidInput(`load(options): unknown option ${unknown.map((k) => `\`${k}\``).join(', ')} (url, bytes)`);
  if (url !== undefined && bytes !== undefined) throw new InvalidInput('load(options): give `url` or `bytes`, not both');
  if (bytes !== undefined) return loadVerified(documentBytes(bytes, 'options.bytes'), sha256Hex, 'the given bytes');
  const where = url ?? new URL('../policy.wasm', import.meta.url);
  let response;
  try {
    response = await fetch(where);
  } catch (e) {
    throw new InvalidInput(`cannot fetch the component ${where}: ${e.message}`);
  }
  if (!response.ok) throw new InvalidInput(`cannot fetch the component ${where}: HTTP ${response.status}`);
  return loadVerified(new Uint8Array(await response.arrayBuffer()), sha256Hex, String(where));
}
