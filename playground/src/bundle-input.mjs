// A run bundle as the page receives it, turned into what the module's `verify-bundle` takes: the bundle
// directory's top-level entries, `[name, bytes]` for a regular file, `[name, count]` for a folder (how many
// entries it holds) and `[name, null]` for anything else (a symbolic link, a device: never read), as
// `runbook-host verify` lists a bundle (host/src/verify.rs `entries`).
//
// Three ways in: a folder from `<input type=file webkitdirectory>` (each file's path is `<folder>/<name>`),
// a folder dropped on the page (FileSystemDirectoryEntry), and a `.tar.gz` (the browser's
// DecompressionStream, then the tar read by modern-tar with its checksums checked). No byte leaves the page.

import { unpackTar } from 'modern-tar';

/** How much of a bundle is read into memory, in all (as the CLI: host/src/verify.rs MAX_BUNDLE_BYTES). */
export const MAX_BUNDLE_BYTES = 256 * 1024 * 1024;

/** A bundle the page refuses to open (nothing was verified): why, in one sentence. */
export class Refused extends Error {}

const tooMuch = () => new Refused(`the bundle holds more than ${MAX_BUNDLE_BYTES} bytes, which this page (like runbook-host verify) does not read`);

function entriesFrom(files, folders, others) {
  const out = [];
  for (const [name, bytes] of files) out.push([name, bytes]);
  for (const [name, inside] of folders) if (!files.has(name)) out.push([name, Math.min(inside.size, 0xffffffff)]);
  for (const name of others) if (!files.has(name) && !folders.has(name)) out.push([name, null]);
  return out;
}

/**
 * The entries of a folder chosen with a file input (`webkitRelativePath` is `<folder>/<path>`). A browser
 * reads through symbolic links and does not list empty folders: the caller says so.
 */
export async function fromFileList(list) {
  const files = new Map();
  const folders = new Map();
  let total = 0;
  let root = null;
  for (const f of list) {
    const parts = f.webkitRelativePath.split('/');
    if (root === null) root = parts[0];
    if (parts.length === 2) {
      total += f.size;
      if (total > MAX_BUNDLE_BYTES) throw tooMuch();
      files.set(parts[1], new Uint8Array(await f.arrayBuffer()));
    } else if (parts.length > 2) {
      folders.set(parts[1], (folders.get(parts[1]) ?? new Set()).add(parts[2]));
    }
  }
  return { name: root ?? '(folder)', entries: entriesFrom(files, folders, []) };
}

function readAll(dirEntry) {
  return new Promise((ok, fail) => {
    const reader = dirEntry.createReader();
    const all = [];
    const next = () => reader.readEntries((batch) => {
      if (batch.length === 0) ok(all);
      else {
        all.push(...batch);
        next();
      }
    }, fail);
    next();
  });
}

const fileOf = (entry) => new Promise((ok, fail) => entry.file(ok, fail));

/** The entries of a folder dropped on the page (a FileSystemDirectoryEntry). */
export async function fromDirectoryEntry(dir) {
  const files = new Map();
  const folders = new Map();
  const others = [];
  let total = 0;
  for (const e of await readAll(dir)) {
    if (e.isFile) {
      const f = await fileOf(e);
      total += f.size;
      if (total > MAX_BUNDLE_BYTES) throw tooMuch();
      files.set(e.name, new Uint8Array(await f.arrayBuffer()));
    } else if (e.isDirectory) {
      folders.set(e.name, new Set((await readAll(e)).map((x) => x.name)));
    } else {
      others.push(e.name);
    }
  }
  return { name: dir.name, entries: entriesFrom(files, folders, others) };
}

/** The gzip-decompressed bytes of `file`, refusing more than MAX_BUNDLE_BYTES plus a little tar framing. */
async function gunzip(file) {
  const limit = MAX_BUNDLE_BYTES + 16 * 1024 * 1024;
  const reader = file.stream().pipeThrough(new DecompressionStream('gzip')).getReader();
  const chunks = [];
  let n = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      n += value.length;
      if (n > limit) {
        await reader.cancel();
        throw tooMuch();
      }
      chunks.push(value);
    }
  } catch (e) {
    if (e instanceof Refused) throw e;
    throw new Refused(`${file.name} is not gzip-compressed data that decompresses cleanly (${e.message})`);
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/**
 * One tar entry's name as path components, or Refused: an absolute name, a `..` component, a backslash,
 * a drive letter or a control character could name something outside the bundle, and the page refuses the
 * whole archive rather than guess (as `verify oci://` refuses a layer that is not one plain name).
 */
function components(name) {
  const shown = JSON.stringify(name);
  if (name === '') throw new Refused('the archive holds an entry without a name');
  if (name.startsWith('/')) throw new Refused(`the archive names ${shown}, an absolute path: refused`);
  if (/^[A-Za-z]:/.test(name)) throw new Refused(`the archive names ${shown}, a path with a drive letter: refused`);
  if (name.includes('\\')) throw new Refused(`the archive names ${shown}, with a backslash: refused`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(name)) throw new Refused(`the archive names ${shown}, with a control character: refused`);
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new Refused(`the archive names ${shown}, which climbs out of its folder (..): refused`);
  if (parts.length === 0) return null; // `./` itself
  return parts;
}

/**
 * The entries of a `.tar.gz` of a bundle: its files at the top of the archive, or inside one folder (the
 * run's, as `tar -czf run.tar.gz <run-id>` writes it). Regular files are read; symbolic links, hard links
 * and devices are never followed or read, but passed to the module as what they are (not regular files),
 * so an artifact that is one fails verification as it does in the CLI.
 */
export async function fromTarGz(file) {
  const tar = await gunzip(file);
  let items;
  try {
    items = await unpackTar(tar, { strict: true });
  } catch (e) {
    throw new Refused(`${file.name} is not a well-formed tar archive (${e.message})`);
  }
  const listed = [];
  const seen = new Set();
  for (const { header, data } of items) {
    const parts = components(header.name);
    if (parts === null) continue;
    const key = parts.join('/');
    if (seen.has(key)) throw new Refused(`the archive holds ${JSON.stringify(key)} twice: refused`);
    seen.add(key);
    const kind = header.type === 'file' ? 'file' : header.type === 'directory' ? 'directory' : 'other';
    listed.push({ parts, kind, data });
  }
  // One folder at the top that holds everything (and no run.json beside it): that folder is the bundle.
  const tops = new Set(listed.map((x) => x.parts[0]));
  let strip = 0;
  let name = file.name;
  if (tops.size === 1) {
    const [top] = tops;
    const topEntry = listed.find((x) => x.parts.length === 1);
    if (listed.some((x) => x.parts.length > 1) && (!topEntry || topEntry.kind === 'directory')) {
      strip = 1;
      name = top;
    }
  }
  const files = new Map();
  const folders = new Map();
  const others = [];
  let total = 0;
  for (const x of listed) {
    const parts = x.parts.slice(strip);
    if (parts.length === 0) continue;
    if (parts.length === 1) {
      if (x.kind === 'file') {
        total += x.data?.length ?? 0;
        if (total > MAX_BUNDLE_BYTES) throw tooMuch();
        files.set(parts[0], x.data ?? new Uint8Array(0));
      } else if (x.kind === 'directory') {
        if (!folders.has(parts[0])) folders.set(parts[0], new Set());
      } else {
        others.push(parts[0]);
      }
    } else {
      // Something inside a subfolder (the approval channel): counted, never read.
      const inside = folders.get(parts[0]) ?? new Set();
      inside.add(parts[1]);
      folders.set(parts[0], inside);
    }
  }
  return { name, entries: entriesFrom(files, folders, others) };
}

/** A name the local server serves (host `is_safe_name`): letters, digits, `.`, `_`, `-`, not hidden. */
const SAFE_NAME = /^(?!\.)[A-Za-z0-9._-]{1,128}$/;

/**
 * The entries of run `runId` as `runbook-host playground --runs DIR` lists them (`runs/index.json`:
 * `[name, "file" | count | null]`), each regular file fetched from that same server (`base`, relative to the
 * page: `runs/`), nothing sent anywhere else. A folder's entry count and an entry that is not a regular file
 * come from the listing, as the CLI reads them.
 */
export async function fromServer(base, runId, listing) {
  if (!SAFE_NAME.test(runId)) throw new Refused(`\`${runId}\` is not a run id this page opens`);
  const out = [];
  let total = 0;
  for (const [name, item] of listing) {
    if (typeof name !== 'string' || !SAFE_NAME.test(name)) throw new Refused(`the server listed \`${name}\`, not a bundle's file name`);
    if (item === 'file') {
      const r = await fetch(`${base}${encodeURIComponent(runId)}/${encodeURIComponent(name)}`, { cache: 'no-store', credentials: 'omit', redirect: 'error' });
      if (!r.ok) throw new Error(`the server did not hand out ${name} (${r.status})`);
      const bytes = new Uint8Array(await r.arrayBuffer());
      total += bytes.length;
      if (total > MAX_BUNDLE_BYTES) throw tooMuch();
      out.push([name, bytes]);
    } else if (typeof item === 'number' && Number.isInteger(item) && item >= 0) {
      out.push([name, Math.min(item, 0xffffffff)]);
    } else {
      out.push([name, null]);
    }
  }
  return { name: runId, entries: out };
}
