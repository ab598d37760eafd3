// Loading: the recorded sha256 is checked before anything runs, in Node and through the browser entry.

import assert from 'node:assert/strict';
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import * as browser from '../src/browser.js';
import { COMPONENT_PATH, COMPONENT_SHA256, ComponentMismatch, InvalidInput, PolicyError, load } from '../src/node.js';
import { PACKAGE, cli, tempDir } from './helpers.mjs';

const original = readFileSync(COMPONENT_PATH);

/** The component with one byte changed (inside the first core module's code, past the headers). */
function tampered() {
  const bytes = Buffer.from(original);
  bytes[bytes.length >> 1] ^= 0x01;
  return bytes;
}

test('the bundled component is the CLI\'s: `runbook-host module --sha256` equals the recorded sha256', async () => {
  const policy = await load();
  assert.equal(policy.sha256, COMPONENT_SHA256);
  assert.equal(policy.sha256, cli(['module', '--sha256']).stdout.trim());
  assert.equal(policy.size, original.length);
  assert.equal(policy.jco, '1.35.0');
  assert.match(policy.version(), /^\d+\.\d+\.\d+/);
});

test('a copy of the component with one byte changed is refused at load (path and bytes)', async (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'policy.wasm');
  writeFileSync(file, tampered());
  for (const options of [{ path: file }, { bytes: tampered() }, { bytes: new Uint8Array(tampered()).buffer }]) {
    await assert.rejects(load(options), (e) => {
      assert.ok(e instanceof ComponentMismatch && e instanceof PolicyError);
      assert.equal(e.code, 'component-mismatch');
      assert.equal(e.expected, COMPONENT_SHA256);
      assert.notEqual(e.actual, COMPONENT_SHA256);
      assert.match(e.message, /refusing to load it/);
      return true;
    });
  }
  // The untouched copy loads: the refusal is about the bytes, not the place.
  const good = join(dir, 'good.wasm');
  copyFileSync(COMPONENT_PATH, good);
  assert.equal((await load({ path: good })).sha256, COMPONENT_SHA256);
  // So is a truncated one, and something that is not a component at all.
  await assert.rejects(load({ bytes: original.subarray(0, original.length - 1) }), { code: 'component-mismatch' });
  await assert.rejects(load({ bytes: Buffer.from('not wasm') }), { code: 'component-mismatch' });
});

test('load options are checked', async () => {
  await assert.rejects(load({ path: COMPONENT_PATH, bytes: original }), InvalidInput);
  await assert.rejects(load({ file: COMPONENT_PATH }), /unknown option `file`/);
  await assert.rejects(load({ path: '/nonexistent/policy.wasm' }), (e) => e.code === 'invalid-input' && /ENOENT/.test(e.message));
});

test('the browser entry loads with WebCrypto and refuses changed bytes too', async () => {
  const policy = await browser.load({ bytes: original });
  assert.equal(policy.sha256, COMPONENT_SHA256);
  assert.equal(policy.lint('runbook_id: x\nversion: 1.0.0\n').sha256.length, 64);
  await assert.rejects(browser.load({ bytes: tampered() }), (e) => e instanceof browser.ComponentMismatch && e.code === 'component-mismatch');
  assert.equal(typeof browser.Run, 'undefined', 'the Run is Node-only');
});

test('the browser entry imports no Node module, directly or through what it imports', () => {
  // Follows every static and dynamic relative import from src/browser.js.
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = readFileSync(file, 'utf8');
    for (const m of source.matchAll(/(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|^\s*import\s*['"]([^'"]+)['"]/gm)) {
      const spec = m[1] ?? m[2] ?? m[3];
      assert.ok(spec.startsWith('.'), `${file} imports ${spec}: the browser entry may import only the package's own files`);
      visit(join(file, '..', spec));
    }
  };
  visit(join(PACKAGE, 'src', 'browser.js'));
  const names = [...seen].map((f) => f.slice(PACKAGE.length + 1)).sort();
  assert.deepEqual(names, ['dist/layout.js', 'dist/policy.js', 'src/browser.js', 'src/component.js', 'src/core.js']);
  assert.ok(!readdirSync(join(PACKAGE, 'dist')).some((f) => f.endsWith('.wasm')), 'dist/ holds no second copy of the core modules');
});
