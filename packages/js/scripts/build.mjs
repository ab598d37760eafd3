#!/usr/bin/env node
// Builds dist/ from policy.wasm (`npm run build`; also the `prepare` script, so `npm ci` builds it).
//
//   1. policy.wasm must have the sha256 recorded in src/component.js: other bytes are refused here, as
//      `load` refuses them at run time;
//   2. `jco transpile --instantiation sync` (the jco pinned in package-lock.json) writes the JavaScript glue
//      (dist/policy.js) and the TypeScript types generated from the WIT (dist/policy.d.ts,
//      dist/interfaces/runbook-policy-policy.d.ts);
//   3. each core module jco extracted must be a byte range of the component: dist/layout.js records where,
//      and the core .wasm files are dropped. `load` compiles those ranges of the bytes it has just
//      verified, so the code that runs is the code that was checked, and the package ships the bytes once.
//
// dist/ is written beside as dist.tmp/ and swapped in whole. A build whose inputs (component, jco, this
// script) are unchanged is skipped.

import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { COMPONENT_SHA256 } from '../src/component.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const tmp = join(root, 'dist.tmp');
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

function fail(message) {
  console.error(`runbook-policy build: ${message}`);
  process.exit(1);
}

const component = readFileSync(join(root, 'policy.wasm'));
const actual = sha256(component);
if (actual !== COMPONENT_SHA256) {
  fail(`policy.wasm has sha256 ${actual}, but src/component.js records ${COMPONENT_SHA256}: refusing to build from other bytes`);
}

const require = createRequire(import.meta.url);
// jco's exports map hides its package.json: look for it where Node would look for the package.
const jcoPackage = (require.resolve.paths('@bytecodealliance/jco') ?? [])
  .map((dir) => join(dir, '@bytecodealliance', 'jco', 'package.json'))
  .find((p) => existsSync(p));
if (!jcoPackage) fail('jco is not installed: run `npm ci` in packages/js (it installs the pinned @bytecodealliance/jco)');
const jco = JSON.parse(readFileSync(jcoPackage, 'utf8'));
const stamp = JSON.stringify({
  component_sha256: actual,
  jco: jco.version,
  build_sha256: sha256(readFileSync(fileURLToPath(import.meta.url))),
});
if (existsSync(join(dist, 'policy.js')) && existsSync(join(dist, 'layout.js')) && readIf(join(dist, 'stamp.json')) === stamp) {
  console.log(`runbook-policy build: dist/ is already of component ${actual.slice(0, 12)}… and jco ${jco.version}`);
  process.exit(0);
}

function readIf(path) {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

rmSync(tmp, { recursive: true, force: true });
mkdirSync(tmp);
const out = join(tmp, 'jco.out');
// Sync instantiation: `policy.session(doc)` gives a session in an instance of its own without a promise
// (the core modules are compiled once, asynchronously, by `load`). No Node compatibility shims: the glue
// must run in a browser as it is.
const t0 = performance.now();
const r = spawnSync(
  process.execPath,
  [join(dirname(jcoPackage), jco.bin.jco), 'transpile', join(root, 'policy.wasm'), '-o', out, '--name', 'policy', '--instantiation', 'sync', '--no-nodejs-compat', '--quiet'],
  { stdio: ['ignore', 'inherit', 'inherit'] },
);
if (r.status !== 0) fail(`jco transpile failed (${r.error?.message ?? `exit ${r.status}`})`);

const cores = {};
for (const name of readdirSync(out).filter((n) => n.endsWith('.wasm')).sort()) {
  const bytes = readFileSync(join(out, name));
  const offset = component.indexOf(bytes);
  if (offset < 0) fail(`jco's ${name} is not a byte range of the component`);
  cores[name] = { offset, length: bytes.length, sha256: sha256(bytes) };
  rmSync(join(out, name));
}
const glue = readFileSync(join(out, 'policy.js'), 'utf8');
const asked = [...glue.matchAll(/getCoreModule\('([^']+)'\)/g)].map((m) => m[1]);
if (asked.length === 0) fail('the glue asks for no core module: not the output this build expects of jco');
for (const name of asked) if (!cores[name]) fail(`the glue asks for ${name}, which jco did not write`);

renameSync(join(out, 'policy.js'), join(tmp, 'policy.js'));
renameSync(join(out, 'policy.d.ts'), join(tmp, 'policy.d.ts'));
renameSync(join(out, 'interfaces'), join(tmp, 'interfaces'));
rmSync(out, { recursive: true });
const layout = { component_sha256: actual, size: component.length, jco: jco.version, cores };
writeFileSync(
  join(tmp, 'layout.js'),
  `// Written by scripts/build.mjs: where each core module of the glue sits inside policy.wasm.\nexport const LAYOUT = Object.freeze(${JSON.stringify(layout, null, 1)});\n`,
);
writeFileSync(join(tmp, 'stamp.json'), stamp);
rmSync(dist, { recursive: true, force: true });
renameSync(tmp, dist);
const where = Object.entries(cores).map(([n, c]) => `${n} at ${c.offset} (${c.length} bytes)`).join(', ');
console.log(`runbook-policy build: jco ${jco.version} transpiled component ${actual.slice(0, 12)}… in ${Math.round(performance.now() - t0)} ms; ${where}`);
