// The README's example runs as written: extracted from README.md, run with `runbook-policy` installed
// the way npm links it, from a directory where its relative path names the example runbook; the bundle it
// writes verifies.

import assert from 'node:assert/strict';
import { cpSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { PACKAGE, ROOT, node, tempDir, verify } from './helpers.mjs';

test('the README\'s example runs and its bundle verifies', (t) => {
  const readme = readFileSync(join(PACKAGE, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  const code = blocks[0]; // the ten-line example; the adapters' examples follow (tested below)
  const loc = code.split('\n').filter((l) => l.trim() !== '').length;
  assert.ok(loc <= 10, `a ten-line example (${loc} lines)`);
  // <tmp>/examples/rotate-credentials and <tmp>/project/app: `../../examples/...` from the app resolves.
  const base = tempDir(t);
  cpSync(join(ROOT, 'examples', 'rotate-credentials'), join(base, 'examples', 'rotate-credentials'), { recursive: true });
  const app = join(base, 'project', 'app');
  mkdirSync(join(app, 'node_modules'), { recursive: true });
  symlinkSync(PACKAGE, join(app, 'node_modules', 'runbook-policy'), 'dir');
  writeFileSync(join(app, 'example.mjs'), code);
  const r = node([], join(app, 'example.mjs'), [], { cwd: app });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^allow .+ incomplete\n$/);
  const v = verify(join(app, '.runbook', 'runs', 'latest'));
  assert.equal(v.status, 0, JSON.stringify(v.result));
  assert.equal(v.result.outcome, 'incomplete');
});

// The book's JavaScript chapter (docs/javascript.md, where the root README's "Use from JavaScript" section moved).
const CHAPTER = join(ROOT, 'docs', 'javascript.md');

test('the book\'s JavaScript chapter shows this very example', () => {
  // The chapter shows the block the test above runs, first, not a copy that drifts.
  const ours = [...readFileSync(join(PACKAGE, 'README.md'), 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  const section = readFileSync(CHAPTER, 'utf8');
  const shown = [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.equal(shown[0], ours[0]);
});

test('each adapter\'s example is shown in the package README and the book as its test runs it', () => {
  // Every file of examples/ is run by its adapter's test; what a user copies must be that very file.
  const files = readdirSync(join(PACKAGE, 'examples')).filter((f) => f.endsWith('.mjs')).sort();
  assert.deepEqual(files, ['ai-sdk.mjs', 'langgraph.mjs', 'openai-agents.mjs']);
  const ours = [...readFileSync(join(PACKAGE, 'README.md'), 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  const section = readFileSync(CHAPTER, 'utf8');
  for (const f of files) {
    const text = readFileSync(join(PACKAGE, 'examples', f), 'utf8');
    assert.ok(ours.includes(text), `packages/js/README.md does not show examples/${f} as it is`);
    assert.ok(section.includes('```js\n' + text + '```'), `docs/javascript.md does not show examples/${f} as it is`);
  }
});
