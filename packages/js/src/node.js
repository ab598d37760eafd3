// The package in Node: everything of the browser entry, `load` reading files with node:fs and hashing with
// node:crypto, the Run (the run-bundle writer of src/run.js) and `verify` (src/verify.js).

import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { InvalidInput, documentBytes, loadVerified } from './core.js';

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
export { Run, Guard, HOST_NAME, HOST_VERSION } from './run.js';
export { verify, MAX_BUNDLE_BYTES } from './verify.js';

/** The component this package ships (policy.wasm beside package.json). */
export const COMPONENT_PATH = fileURLToPath(new URL('../policy.wasm', import.meta.url));

const sha256Hex = async (bytes) => createHash('sha256').update(bytes).digest('hex');

/**
 * Loads the component and checks its sha256 against the one this package records: the bundled
 * policy.wasm, or `{path}` (a file), or `{bytes}`. Other bytes are refused (ComponentMismatch).
 */
export async function load(options = {}) {
  if (options === null || typeof options !== 'object') throw new InvalidInput('load(options): options must be an object');
  const { path, bytes, ...rest } = options;
  const unknown = Object.keys(rest);
  if (unknown.length) throw new InvalidInput(`load(options): unknown option ${unknown.map((k) => `\`${k}\``).join(', ')} (path, bytes)`);
  if (path !== undefined && bytes !== undefined) throw new InvalidInput('load(options): give `path` or `bytes`, not both');
  if (bytes !== undefined) return loadVerified(documentBytes(bytes, 'options.bytes'), sha256Hex, 'the given bytes');
  const file = path === undefined ? COMPONENT_PATH : path instanceof URL ? fileURLToPath(path) : path;
  if (typeof file !== 'string') throw new InvalidInput('load(options): `path` must be a string or a file: URL');
  let data;
  try {
    data = await readFile(file);
  } catch (e) {
    throw new InvalidInput(`cannot read the component ${file}: ${e.code ?? e.message}`);
  }
  return loadVerified(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), sha256Hex, file);
}
