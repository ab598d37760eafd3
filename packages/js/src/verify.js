// `verify` in Node (docs/spec/bundle.md#what-verify-checks and docs/spec/README.md#architecture): an IO shell over the module's `verify-bundle`, as host/src/verify.rs
// (`entries`, `verify_dir_with`) is in the Rust host. It lists the bundle directory's top-level entries
// without following a symbolic link (regular files with their bytes, at most MAX_BUNDLE_BYTES in all;
// directories with how many entries they hold; anything else unread) and the module runs every check.

import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidInput, Policy, unread } from './core.js';

/** How much of a bundle verify reads into memory, in all (host/src/verify.rs): more is refused, not read. */
export const MAX_BUNDLE_BYTES = 256 * 1024 * 1024;

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
// Where it exists (not on Windows), opening a symbolic link fails rather than following it.
const NO_FOLLOW = fs.constants.O_NOFOLLOW ?? 0;

class Unread extends Error {
  constructor(place, message) {
    super(message);
    this.place = place;
  }
}

/** A regular file's bytes, or Unread (host/src/verify.rs `read`). */
async function readFile(dir, name) {
  let handle;
  try {
    handle = await fs.open(path.join(dir, name), fs.constants.O_RDONLY | NO_FOLLOW);
  } catch (e) {
    if (e.code === 'ELOOP') throw new Unread(name, 'not a regular file');
    if (e.code === 'ENOENT') throw new Unread(name, 'missing');
    throw new Unread(name, `cannot be read: ${e.code ?? e.message}`);
  }
  try {
    if (!(await handle.stat()).isFile()) throw new Unread(name, 'not a regular file');
    const bytes = await handle.readFile();
    return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  } catch (e) {
    if (e instanceof Unread) throw e;
    throw new Unread(name, `cannot be read: ${e.code ?? e.message}`);
  } finally {
    await handle.close();
  }
}

/** The bundle's top-level entries as `policy.verifyBundle` takes them, or Unread. */
async function entries(dir) {
  let names;
  try {
    names = await fs.readdir(dir, { encoding: 'buffer' });
  } catch (e) {
    throw new InvalidInput(`cannot open the run directory ${dir}: ${e.code ?? e.message}`);
  }
  const out = [];
  let total = 0;
  for (const raw of names) {
    let name;
    try {
      name = strictUtf8.decode(raw);
    } catch {
      continue; // a name that is not UTF-8 names no artifact (the Rust host skips it too)
    }
    let meta;
    try {
      meta = await fs.lstat(path.join(dir, name));
    } catch (e) {
      throw new Unread(name, `cannot be read: ${e.code ?? e.message}`);
    }
    if (meta.isFile()) {
      total += meta.size;
      const tooMuch = () => new Unread(name, `the bundle holds more than ${MAX_BUNDLE_BYTES} bytes, which verify does not read`);
      if (total > MAX_BUNDLE_BYTES) throw tooMuch();
      const bytes = await readFile(dir, name);
      total += bytes.length - meta.size; // it may have grown since
      if (total > MAX_BUNDLE_BYTES) throw tooMuch();
      out.push([name, bytes]);
    } else if (meta.isDirectory()) {
      const n = await fs.readdir(path.join(dir, name)).then((l) => l.length, () => 0);
      out.push([name, Math.min(n, 0xffffffff)]);
    } else {
      out.push([name, null]);
    }
  }
  return out;
}

/**
 * Verifies the run bundle in `runDir` (a directory: `.runbook/runs/<run-id>`) with `policy` (from
 * `load()`): every check `runbook-host verify` makes of the bundle's bytes, made by the module itself
 * (`policy.verifyBundle`, replaying through `policy.sha256`), so its `checks`, `failure` and share-safety
 * `reasons` are the CLI's. A symbolic link in the bundle is never followed ("not a regular file"); a
 * bundle of more than 256 MiB is refused unread.
 *
 * Fail closed: this package does not check the bytes of SSH signatures, so a bundle holding signed
 * approvals never verifies here: `ok` is false, `failure` names the first signed answer (`place`) and
 * says to verify the bundle with `runbook-host verify`. Nor does it check the receipt's DSSE signature
 * (`receipt.dsse.json`, `runbook-host verify --key`).
 *
 * Resolves to the frozen result of `policy.verifyBundle`; rejects with InvalidInput when `runDir` cannot
 * be opened (the CLI's exit 2).
 */
export async function verify(runDir, options) {
  if (options === null || typeof options !== 'object') throw new InvalidInput('verify(runDir, {policy}): options must be an object');
  const { policy, ...rest } = options;
  const unknown = Object.keys(rest);
  if (unknown.length) throw new InvalidInput(`verify(runDir, options): unknown option ${unknown.map((k) => `\`${k}\``).join(', ')} (policy)`);
  if (!(policy instanceof Policy)) throw new InvalidInput('verify(runDir, {policy}): `policy` must be the Policy from load()');
  const dir = runDir instanceof URL ? fileURLToPath(runDir) : runDir;
  if (typeof dir !== 'string') throw new InvalidInput('verify(runDir): `runDir` must be a string or a file: URL');
  let found;
  try {
    found = await entries(dir);
  } catch (e) {
    if (e instanceof Unread) return unread(e.place, e.message);
    throw e;
  }
  return policy.verifyBundle(found, policy.sha256);
}
