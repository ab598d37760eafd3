// The playground in a real browser: Debian's Chromium driven by playwright-core, the page served by
// `runbook-host playground`, every answer compared byte for byte with the CLI's.
//
//   node --test playground/tests/
//
// Environment:
//   RUNBOOK_HOST          the CLI (default: $CARGO_TARGET_DIR or target/, then release/runbook-host)
//   PLAYGROUND_DIST       the built page (default playground/dist; playground/build makes it)
//   CHROMIUM              the browser (default /usr/bin/chromium: `apt-get install -y chromium`)
//   PLAYGROUND_SCREENSHOT where the picture of rotate-credentials is written (default: the system temp
//                         folder, so a test run leaves the tree clean)
//   PLAYGROUND_SCREENSHOTS the folder for screenshot-desktop.png and screenshot-phone.png (default: the
//                         system temp folder; set it to playground/ to refresh the README's pictures)
//
// A missing browser is a failure, not a skip.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const playground = resolve(here, '..');
const root = resolve(playground, '..');
const CLI = process.env.RUNBOOK_HOST || join(process.env.CARGO_TARGET_DIR || join(root, 'target'), 'release', 'runbook-host');
const DIST = process.env.PLAYGROUND_DIST || join(playground, 'dist');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SCREENSHOT = process.env.PLAYGROUND_SCREENSHOT || join(tmpdir(), 'runbook-playground-screenshot.png');
const SCREENSHOTS = process.env.PLAYGROUND_SCREENSHOTS || tmpdir();
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
const lines = (text) => text.split('\n').filter((l) => l.trim() !== '');

/** Runs the CLI from the checkout's root; returns {status, stdout (Buffer), stderr}. */
function cli(args) {
  const r = spawnSync(CLI, args, { cwd: root, maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`cannot run ${CLI}: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr.toString('utf8') };
}

/** The bundled examples as the page's index lists them (playground/build copies examples/ verbatim). */
const examples = JSON.parse(readFileSync(join(DIST, 'examples.json'), 'utf8'));

/**
 * A verify vector's bundle (conformance/vectors/verify/README.md) under `work`, changed as its case says;
 * returns its folder. The same changes `runbook-conformance` makes, a redaction by `runbook-host export`.
 */
function prepareVerifyVector(caseDir, c, work) {
  let dir = join(work, 'bundle');
  cpSync(resolve(caseDir, c.bundle), dir, { recursive: true });
  for (const m of c.changes) {
    if (m.redact) {
      const runId = JSON.parse(readFileSync(join(dir, 'run.json'), 'utf8')).run_id;
      const r = cli(['export', dir, '--out', join(work, 'redacted')]);
      assert.equal(r.status, 0, r.stderr);
      dir = join(work, 'redacted', runId);
      continue;
    }
    const file = join(dir, m.file);
    if (m.replace) {
      const text = readFileSync(file, 'utf8');
      assert.ok(text.includes(m.replace[0]), `${m.file} holds ${m.replace[0]}`);
      writeFileSync(file, text.replace(m.replace[0], m.replace[1]));
    } else if (m.append !== undefined) writeFileSync(file, readFileSync(file, 'utf8') + m.append);
    else if (m.write !== undefined) writeFileSync(file, m.write);
    else if (m.delete) rmSync(file);
    else if (m.drop_last_lines !== undefined) {
      const kept = lines(readFileSync(file, 'utf8')).slice(0, -m.drop_last_lines);
      writeFileSync(file, kept.map((l) => `${l}\n`).join(''));
    } else throw new Error(`a change this test does not know: ${JSON.stringify(m)}`);
  }
  return dir;
}

let server;
let origin;
let context;
let page;
let userData;
let downloads;
const requested = [];
const measurements = {};

async function startServer() {
  server = spawn(CLI, ['playground', '--dir', DIST, '--port', '0'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  server.stderr.on('data', (d) => {
    err += d;
  });
  const url = await new Promise((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`runbook-host playground printed no URL in 30 s; stderr: ${err}`)), 30_000);
    server.stdout.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        ok(out.slice(0, nl).trim());
      }
    });
    server.on('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`runbook-host playground exited with ${code}: ${err}`));
    });
  });
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
  return url;
}

/** Waits until the page has derived everything from the document that a click or an edit changed. */
async function afterUpdate(action) {
  const before = Number(await page.evaluate(() => document.body.dataset.done ?? '0'));
  await action();
  await page.waitForFunction((g) => Number(document.body.dataset.done ?? '0') > g && document.body.dataset.updating === 'no', before, { timeout: 30_000 });
}

async function afterSimulation(action) {
  const before = Number(await page.evaluate(() => document.body.dataset.simRuns ?? '0'));
  await action();
  await page.waitForFunction((g) => Number(document.body.dataset.simRuns ?? '0') > g, before, { timeout: 30_000 });
}

async function openExample(name) {
  await afterUpdate(() => page.click(`#examples button[data-example="${name}"]`));
}

/** The editor's text (CodeMirror's document; `playground.editor` is its EditorView). */
async function docText(p = page) {
  return p.evaluate(() => globalThis.playground.editor.state.doc.toString());
}

/** Replaces the editor's text as an edit would (the page re-lints it, as after typing). */
async function setDoc(text) {
  await page.evaluate((t) => {
    const v = globalThis.playground.editor;
    v.dispatch({ changes: { from: 0, to: v.state.doc.length, insert: t }, userEvent: 'input' });
  }, text);
}

/** Line and column (1-based, Unicode scalar values) of the caret, and whether the editor has the focus. */
async function caret() {
  return page.evaluate(() => {
    const v = globalThis.playground.editor;
    const pos = v.state.selection.main.head;
    const ln = v.state.doc.lineAt(pos);
    return { focused: v.hasFocus && document.activeElement.id === 'doc', line: ln.number, column: Array.from(ln.text.slice(0, pos - ln.from)).length + 1 };
  });
}

/** The inline diagnostics drawn in the editor: where each underline (or point) starts, and its severity. */
async function drawnDiagnostics() {
  return page.evaluate(() => {
    const v = globalThis.playground.editor;
    return [...document.querySelectorAll('#editor .cm-lintRange, #editor .cm-lintPoint')].map((e) => {
      const pos = v.posAtDOM(e, 0);
      const ln = v.state.doc.lineAt(pos);
      return { line: ln.number, column: Array.from(ln.text.slice(0, pos - ln.from)).length + 1, severity: /-error\b/.test(e.className) ? 'error' : 'warning', text: e.textContent };
    });
  });
}

/** The lines the lint gutter marks, by severity (a marker stands level with its line's number). */
async function gutterMarks() {
  return page.evaluate(() => {
    const numbers = [...document.querySelectorAll('#editor .cm-lineNumbers .cm-gutterElement')].map((e) => ({ top: Math.round(e.getBoundingClientRect().top), n: Number(e.textContent) })).filter((x) => x.n > 0);
    const out = { error: [], warning: [] };
    for (const m of document.querySelectorAll('#editor .cm-lint-marker')) {
      const top = Math.round(m.closest('.cm-gutterElement').getBoundingClientRect().top);
      const line = numbers.find((x) => Math.abs(x.top - top) <= 1)?.n;
      out[m.classList.contains('cm-lint-marker-error') ? 'error' : 'warning'].push(line);
    }
    out.error.sort((a, b) => a - b);
    out.warning.sort((a, b) => a - b);
    return out;
  });
}

/** GET `path` from the server with `accept-encoding` as given; the raw (still encoded) body and headers. */
function rawGet(path, acceptEncoding) {
  return new Promise((ok, fail) => {
    const headers = acceptEncoding ? { 'accept-encoding': acceptEncoding } : {};
    const req = request(new URL(path, origin), { headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => ok({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', fail);
    });
    req.on('error', fail);
    req.end();
  });
}

async function pageDecisions() {
  return page.$$eval('#log .decision-line', (els) => els.map((e) => e.textContent));
}

before(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no browser at ${CHROMIUM}: install Debian's Chromium with \`apt-get install -y chromium\` (or set CHROMIUM)`);
  }
  if (!existsSync(CLI)) throw new Error(`no CLI at ${CLI}: build it (cargo build --release -p runbook-host) or set RUNBOOK_HOST`);
  if (!existsSync(join(DIST, 'index.html'))) throw new Error(`no page in ${DIST}: run playground/build`);
  origin = await startServer();
  userData = mkdtempSync(join(tmpdir(), 'runbook-playground-chromium-'));
  downloads = mkdtempSync(join(tmpdir(), 'runbook-playground-downloads-'));
  context = await chromium.launchPersistentContext(userData, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1500, height: 1000 },
    acceptDownloads: true,
    downloadsPath: downloads,
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.on('request', (r) => requested.push(r.url()));
  page.on('pageerror', (e) => {
    measurements.pageErrors = [...(measurements.pageErrors ?? []), e.message];
  });
});

after(async () => {
  await context?.close();
  server?.kill();
  for (const d of [userData, downloads]) if (d) rmSync(d, { recursive: true, force: true });
  if (Object.keys(measurements).length) console.log(`playground measurements: ${JSON.stringify(measurements)}`);
});

describe('the playground in Chromium', () => {
  test('loads from runbook-host playground: first envelope, transferred size, the module sha256 in the footer', async (t) => {
    let transferred = 0;
    const sizes = [];
    page.on('requestfinished', (r) => {
      sizes.push(r.sizes().then((s) => {
        transferred += s.responseBodySize + s.responseHeadersSize;
      }).catch(() => {}));
    });
    const t0 = Date.now();
    await page.goto(origin);
    await page.waitForFunction(() => document.getElementById('envelope').textContent.length > 0, null, { timeout: 60_000 });
    const wall = Date.now() - t0;
    await Promise.all(sizes);
    const inPage = await page.evaluate(() => performance.getEntriesByName('first-envelope')[0]?.startTime);
    assert.ok(inPage > 0, 'the page marks its first envelope');
    await page.waitForSelector('body[data-prefetched="yes"]', { timeout: 30_000 });
    await Promise.all(sizes);
    // What had arrived by the first envelope, by the page's own resource timing (same origin: sizes are exposed).
    const timing = await page.evaluate((mark) => {
      const entries = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')];
      const sum = (es) => es.reduce((n, e) => n + e.transferSize, 0);
      return { before: sum(entries.filter((e) => e.responseEnd <= mark)), all: sum(entries), files: entries.filter((e) => e.responseEnd <= mark).length };
    }, inPage);
    measurements.first_envelope_ms = Math.round(inPage);
    measurements.first_envelope_wall_ms = wall;
    measurements.transferred_bytes_to_first_envelope = timing.before;
    measurements.files_to_first_envelope = timing.files;
    measurements.transferred_bytes_all = transferred;
    t.diagnostic(`load time to first envelope: ${Math.round(inPage)} ms from navigation start (${wall} ms from page.goto as Playwright saw it); transferred ${timing.before} bytes in ${timing.files} responses by then, ${transferred} bytes in all (headers and bodies, every example prefetched)`);

    const want = cli(['module', '--sha256']).stdout.toString('utf8').trim();
    assert.equal(await page.textContent('#module-sha'), want, 'the footer shows `runbook-host module --sha256`');
    assert.equal(await page.getAttribute('#module-check', 'data-ok'), 'yes');
    assert.equal(readFileSync(join(DIST, 'module.sha256'), 'utf8').trim(), want);
  });

  test('every bundled example: the envelope bytes and sha256 equal `runbook-host envelope`, the findings and structure equal `lint`', async () => {
    assert.ok(examples.length >= 6, 'the bundled examples are indexed');
    for (const ex of examples) {
      const path = ex.document;
      const source = join(root, path);
      await openExample(ex.name);
      assert.equal(await docText(), readFileSync(source, 'utf8'), `${ex.name}: the editor holds the file`);
      assert.equal(await page.getAttribute('body', 'data-doc-sha256'), sha256(readFileSync(source)), `${ex.name}: the module hashed the same bytes`);

      const env = cli(['envelope', path]);
      if (env.status === 0) {
        const shown = await page.textContent('#envelope');
        assert.ok(Buffer.from(shown, 'utf8').equals(env.stdout), `${ex.name}: envelope bytes differ from the CLI's`);
        assert.equal(await page.textContent('#envelope-sha'), sha256(env.stdout), `${ex.name}: envelope sha256`);
        assert.ok(await page.isVisible('#picture svg'), `${ex.name}: a picture is drawn`);
      } else {
        assert.equal(env.status, 1);
        assert.equal(await page.textContent('#envelope'), '', `${ex.name}: no envelope shown`);
        assert.ok(await page.isVisible('#envelope-none'), `${ex.name}: says why there is no envelope`);
      }

      const lint = JSON.parse(cli(['lint', '--format', 'json', path]).stdout.toString('utf8'));
      const shown = await page.$$eval('#findings li.finding:not(.none)', (els) => els.map((e) => ({
        line: Number(e.dataset.line), column: Number(e.dataset.column), code: e.dataset.code, severity: e.dataset.severity, pointer: e.dataset.pointer,
        message: e.querySelector('.msg').textContent,
      })));
      assert.deepEqual(shown, lint.findings.map((f) => ({ line: f.line, column: f.column, code: f.code, severity: f.severity, pointer: f.pointer, message: f.message })), `${ex.name}: findings`);
      assert.equal(await page.getAttribute('#structure', 'data-structure'), lint.structure ?? '', `${ex.name}: structure`);
    }
  });

  test('examples/broken: each finding is marked at its line and column in the editor', async () => {
    await openExample('broken');
    const lint = JSON.parse(cli(['lint', '--format', 'json', 'examples/broken/runbook.yaml']).stdout.toString('utf8'));
    assert.ok(lint.findings.length >= 8, 'broken has its findings');
    const errorLines = [...new Set(lint.findings.filter((f) => f.severity === 'error').map((f) => f.line))].sort((a, b) => a - b);
    const warningOnly = [...new Set(lint.findings.map((f) => f.line))].filter((l) => !errorLines.includes(l)).sort((a, b) => a - b);
    assert.deepEqual(await gutterMarks(), { error: errorLines, warning: warningOnly }, 'the lint gutter marks the error and warning lines');
    // Every finding is underlined (or pointed at, past the end of its line) from its line and column.
    const drawn = await drawnDiagnostics();
    for (const f of lint.findings) {
      assert.ok(drawn.some((d) => d.line === f.line && d.column === f.column && d.severity === f.severity), `${f.code}: an ${f.severity} diagnostic at ${f.line}:${f.column} (drawn: ${JSON.stringify(drawn)})`);
    }
    // Hovering the underline shows the module's message.
    const undeclared = lint.findings.find((f) => f.code === 'undeclared-tool');
    const mark = page.locator('#editor .cm-lintRange-error', { hasText: 'drop-tabel' }).first();
    await mark.hover();
    const tip = page.locator('.cm-tooltip-lint');
    await tip.waitFor({ timeout: 10_000 });
    assert.ok((await tip.textContent()).includes(undeclared.message), 'the tooltip shows the finding\'s message');
    await page.mouse.move(0, 0);
    // A finding is one keyboard action away: its button puts the caret at its line and column.
    await page.focus(`#findings li[data-code="${undeclared.code}"] button.jump`);
    await page.keyboard.press('Enter');
    assert.deepEqual(await caret(), { focused: true, line: undeclared.line, column: undeclared.column });
    assert.match(await page.textContent('#caret-findings'), /undeclared-tool/);
    assert.match(await page.textContent('#envelope-none'), /No envelope/);
  });

  test('every recorded event stream, imported into the simulator, gives the decisions and report bytes of `runbook-host replay`', async () => {
    let streams = 0;
    for (const ex of examples) {
      await openExample(ex.name);
      for (const path of ex.events) {
        const name = path.split('/').pop();
        const replay = cli(['replay', ex.document, path]);
        const out = replay.stdout.toString('utf8').split('\n').filter((l) => l !== '');
        const wantDecisions = out.slice(0, -1);
        const wantReport = out.at(-1);
        await afterSimulation(() => page.click(`#stream-examples button[data-stream="${name}"]`));
        const events = lines(readFileSync(join(root, path), 'utf8'));
        assert.equal(await page.getAttribute('body', 'data-sim-events'), String(events.length), `${path}: every event fed`);
        assert.deepEqual(await pageDecisions(), wantDecisions, `${path}: decision lines`);
        if ((await page.getAttribute('#report-box', 'data-final')) !== 'yes') await page.click('#show-report');
        assert.equal(await page.textContent('#report'), wantReport, `${path}: report bytes`);
        streams++;
      }
    }
    assert.ok(streams >= 9, `all recorded streams replayed (${streams})`);
  });

  test('import a file, export the stream: `runbook-host replay` accepts the export and agrees', async () => {
    await openExample('incident-rollback');
    const path = join(root, 'examples/incident-rollback/events-exhausted.ndjson');
    await afterSimulation(() => page.setInputFiles('#import-file', path));
    const decisions = await pageDecisions();
    assert.equal(decisions.length, lines(readFileSync(path, 'utf8')).length);
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export')]);
    const exported = join(downloads, 'exported.ndjson');
    await download.saveAs(exported);
    assert.equal(readFileSync(exported, 'utf8'), `${lines(readFileSync(path, 'utf8')).join('\n')}\n`);
    const replay = cli(['replay', 'examples/incident-rollback/runbook.yaml', exported]).stdout.toString('utf8').split('\n').filter(Boolean);
    assert.deepEqual(decisions, replay.slice(0, -1));
    assert.equal(await page.textContent('#report'), replay.at(-1));
  });

  test('clicking through a run: decisions as they happen, the current step highlighted, an export that replays the same', async () => {
    await openExample('rotate-credentials');
    await page.selectOption('#profile', 'R2');
    await afterSimulation(() => page.click('#start-run'));
    assert.equal(await page.getAttribute('#picture g.node.current', 'data-step'), 'inspect');

    const send = async () => {
      const n = Number(await page.getAttribute('body', 'data-sim-events'));
      await page.click('#send-event');
      await page.waitForFunction((k) => Number(document.body.dataset.simEvents) === k + 1, n);
      return JSON.parse((await pageDecisions()).at(-1));
    };
    // `inspect`: the quick button fills an invocation of the capability in scope.
    await page.click('#quick button:has-text("invoke kubectl-get")');
    await page.fill('#ev-arguments', JSON.stringify({ command: 'kubectl -n payments get secret payments-db-credentials' }));
    await page.fill('#ev-call-id', 'c1');
    assert.equal((await send()).decision, 'allow');
    // The composer now offers the result of that call.
    assert.equal(await page.inputValue('#ev-type'), 'result');
    await page.fill('#ev-result', JSON.stringify({ stdout: 'payments-db-credentials   Opaque   2   97d\n', stderr: '', interrupted: false }));
    assert.equal((await send()).step, 'check-age');
    assert.equal(await page.getAttribute('#picture g.node.current', 'data-step'), 'check-age');

    // An out-of-scope call is denied, with its deviation shown as it happens.
    await page.selectOption('#ev-type', 'invoke');
    await page.fill('#ev-tool', 'Bash');
    await page.fill('#ev-arguments', JSON.stringify({ command: 'vault write -f database/rotate-role/payments-app' }));
    await page.fill('#ev-call-id', '');
    const denied = await send();
    assert.equal(denied.decision, 'deny');
    assert.equal(denied.deviation, 'out-of-scope-tool');
    assert.equal(await page.textContent('#log li:last-child .deviation'), 'deviation out-of-scope-tool');

    await page.fill('#ev-tool', 'mcp__vault__read_metadata');
    await page.fill('#ev-arguments', '{"path":"database/creds/payments-app"}');
    assert.equal((await send()).decision, 'allow');
    await page.fill('#ev-result', '{"age_days":120}');
    assert.equal((await send()).step, 'rotate');
    assert.equal(await page.getAttribute('#picture g.node.current', 'data-step'), 'rotate');

    // The gated step: the call waits for a human; an approval bound to that call opens it.
    await page.selectOption('#ev-type', 'invoke');
    await page.fill('#ev-tool', 'Bash');
    await page.fill('#ev-arguments', JSON.stringify({ command: 'vault write -f database/rotate-role/payments-app' }));
    assert.equal((await send()).decision, 'needs-approval');
    assert.equal(await page.inputValue('#ev-type'), 'approval');
    await page.click('#bind-last');
    await page.waitForFunction(() => /^[0-9a-f]{64}$/.test(document.getElementById('ev-call-sha').value));
    await page.fill('#ev-approver', 'alice');
    assert.equal((await send()).decision, 'allow');
    await page.fill('#raw-line', '{"type":"end","at":5000,"reason":"client-closed"}');
    await page.press('#raw-line', 'Enter');
    await page.waitForSelector('#report-box[data-final="yes"]');
    const report = JSON.parse(await page.textContent('#report'));
    assert.equal(report.outcome, 'incomplete');
    assert.deepEqual(report.deviations.map((d) => d.class), ['out-of-scope-tool', 'terminal-not-reached']);

    const stream = await page.inputValue('#ndjson');
    const file = join(downloads, 'clicked.ndjson');
    writeFileSync(file, stream);
    const replay = cli(['replay', 'examples/rotate-credentials/runbook.yaml', file]).stdout.toString('utf8').split('\n').filter(Boolean);
    assert.deepEqual(await pageDecisions(), replay.slice(0, -1), 'the clicked stream replays to the same decisions');
    assert.equal(await page.textContent('#report'), replay.at(-1), 'and the same report');
  });

  test('admission: every refusal reason of `runbook-host check`', async () => {
    const cases = [
      { ex: 'rotate-credentials', profile: 'R1', coverage: 'shell', allow: '*', ceiling: 'irreversible' },
      { ex: 'rotate-credentials', profile: 'R2', coverage: 'complete', allow: 'Bash', ceiling: 'mutating' },
      { ex: 'incident-rollback', profile: 'R0', coverage: 'complete', allow: '*', ceiling: 'irreversible' },
      { ex: 'certificate-renewal', profile: 'R2', coverage: 'complete', allow: '*', ceiling: 'irreversible', available: 'acme.renew' },
      { ex: 'broken', profile: 'R2', coverage: 'complete', allow: '*', ceiling: 'irreversible' },
    ];
    for (const c of cases) {
      const ex = examples.find((e) => e.name === c.ex);
      await openExample(c.ex);
      await page.selectOption('#profile', c.profile);
      await page.fill('#coverage', c.coverage);
      await page.fill('#allowlist', c.allow);
      await page.selectOption('#risk-ceiling', c.ceiling);
      await page.fill('#available', c.available ?? '');
      const args = ['check', ex.document, '--profile', c.profile, '--coverage', c.coverage, '--allow', c.allow, '--risk-ceiling', c.ceiling, '--agent', 'agent-1', '--format', 'json'];
      if (c.available) args.push('--available', c.available);
      const want = JSON.parse(cli(args).stdout.toString('utf8'));
      await page.waitForFunction(([refusals, decision]) => {
        const a = document.getElementById('admission').dataset;
        return a.refusals === refusals && a.decision === decision && document.body.dataset.updating === 'no';
      }, [want.refusals.join(','), want.admitted ? 'allow' : 'halt']);
      assert.equal(await page.getAttribute('#admission', 'data-decision'), want.admitted ? 'allow' : 'halt', `${c.ex}: admitted?`);
      assert.deepEqual(await page.$$eval('#admission [data-refusal]', (els) => els.map((e) => e.dataset.refusal)), want.refusals, `${c.ex}: refusals`);
    }
    await page.fill('#allowlist', '*');
    await page.fill('#coverage', 'complete');
    await page.fill('#available', '');
  });

  test('verify: every verify vector a browser can read gives the verification `runbook-host verify` prints', async () => {
    const vectors = join(root, 'conformance/vectors/verify');
    const cases = readdirSync(vectors).filter((n) => existsSync(join(vectors, n, 'case.json'))).sort();
    assert.ok(cases.length >= 19, `${cases.length} verify vectors`);
    let checked = 0;
    for (const name of cases) {
      const c = JSON.parse(readFileSync(join(vectors, name, 'case.json'), 'utf8'));
      // A browser reads through a symbolic link (a file input cannot tell one from a file): the vector
      // about a link is the CLI's and the packages' alone.
      if (c.changes.some((m) => m.symlink_to !== undefined)) continue;
      const work = mkdtempSync(join(tmpdir(), 'runbook-verify-vector-'));
      try {
        const dir = prepareVerifyVector(join(vectors, name), c, work);
        const want = cli(['verify', dir, '--format', 'json']);
        const expected = JSON.parse(want.stdout.toString('utf8'));
        await page.$eval('#verify-result', (e) => delete e.dataset.verification);
        await page.setInputFiles('#bundle-dir', dir);
        await page.waitForFunction(() => document.getElementById('verify-result').dataset.verification !== undefined, null, { timeout: 30_000 });
        const got = JSON.parse(await page.$eval('#verify-result', (e) => e.dataset.verification));
        // What the case says, written from its clause ...
        assert.equal(got.failure === null, c.expect.ok, `${name}: ${JSON.stringify(got.failure)}`);
        if (c.expect.place) assert.equal(got.failure.place, c.expect.place, name);
        if (c.expect.message_contains) assert.ok(got.failure.message.includes(c.expect.message_contains), `${name}: ${got.failure.message}`);
        if (c.expect.checks) assert.deepEqual(got.checks, c.expect.checks, name);
        // ... and what the CLI finds in the same folder.
        assert.deepEqual(got.checks, expected.checks.map((x) => x.id), name);
        assert.deepEqual(got.failure, expected.failure, name);
        assert.equal(got.events, expected.events, name);
        assert.equal(got.outcome, expected.outcome, name);
        assert.equal(await page.$eval('#verify-result', (e) => e.dataset.ok), c.expect.ok ? 'yes' : 'no', name);
        checked += 1;
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    }
    assert.equal(checked, cases.length - 1, 'every vector but the symbolic link');
  });

  test('a shareable link carries the document in its fragment, and opens it', async () => {
    await openExample('read-only-investigation');
    const edited = `${await docText()}# édité ✓\n`;
    await afterUpdate(() => setDoc(edited));
    const text = await docText();
    const envelope = await page.textContent('#envelope');
    await page.click('#share');
    const link = await page.inputValue('#share-url');
    const url = new URL(link);
    assert.equal(`${url.origin}/`, origin);
    assert.equal(url.search, '', 'nothing in the query: the document is never sent to a server');
    assert.match(url.hash, /^#doc=[A-Za-z0-9_-]+$/);
    assert.equal(Buffer.from(url.hash.slice(5), 'base64url').toString('utf8'), text);
    const other = await context.newPage();
    const seen = [];
    other.on('request', (r) => seen.push(r.url()));
    await other.goto(link);
    await other.waitForSelector('body[data-ready="yes"]');
    assert.equal(await docText(other), text);
    assert.equal(await other.textContent('#envelope'), envelope);
    assert.ok(seen.every((u) => !u.includes(url.hash.slice(5))), 'the document never appears in a request');
    await other.close();
  });

  test('keyboard alone: every control is labelled, an example opens with Tab and Enter', async () => {
    const unlabelled = await page.evaluate(() => [...document.querySelectorAll('button, input, select, textarea, a[href]')]
      .filter((e) => !e.closest('[hidden]'))
      .filter((e) => {
        const name = e.getAttribute('aria-label') || (e.labels && [...e.labels].map((l) => l.textContent).join('').trim()) || e.textContent.trim() || e.getAttribute('title');
        return !name;
      })
      .map((e) => e.outerHTML.slice(0, 80)));
    assert.deepEqual(unlabelled, []);
    await page.goto(origin);
    await page.waitForSelector('body[data-ready="yes"]');
    let reached = null;
    for (let i = 0; i < 12 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => document.activeElement?.dataset?.example ?? null);
    }
    assert.equal(reached, 'rotate-credentials', 'Tab reaches the examples first');
    await page.keyboard.press('Tab');
    await afterUpdate(() => page.keyboard.press('Enter'));
    assert.equal(await page.getAttribute('body', 'data-doc-sha256'), sha256(readFileSync(join(root, 'examples/broken/runbook.yaml'))));
    assert.equal(await page.evaluate(() => document.activeElement.id), 'doc', 'the editor has the focus after opening an example');
  });

  test('offline once loaded, and no request ever leaves the server', async () => {
    await page.waitForSelector('body[data-prefetched="yes"]');
    await context.setOffline(true);
    try {
      await openExample('certificate-renewal');
      assert.ok((await page.textContent('#envelope')).includes('"runbook_id":"certificate-renewal"'));
      await afterSimulation(() => page.click('#stream-examples button[data-stream="events.ndjson"]'));
      assert.equal(JSON.parse(await page.textContent('#report')).outcome, 'completed');
    } finally {
      await context.setOffline(false);
    }
    const foreign = requested.filter((u) => !u.startsWith(origin) && !u.startsWith('data:') && !u.startsWith('blob:'));
    assert.deepEqual(foreign, []);
    assert.deepEqual(measurements.pageErrors ?? [], [], 'no uncaught error in the page');
  });

  test('the picture of rotate-credentials: every step, route, budget and terminal; a screenshot for the README', async () => {
    await page.setViewportSize({ width: 1500, height: 1000 });
    await openExample('rotate-credentials');
    const env = JSON.parse(cli(['envelope', 'examples/rotate-credentials/runbook.yaml']).stdout.toString('utf8'));
    const drawn = await page.evaluate(() => ({
      steps: [...document.querySelectorAll('#picture g.step')].map((g) => g.dataset.step).sort(),
      gated: [...document.querySelectorAll('#picture g.step.gated')].map((g) => g.dataset.step),
      terminals: [...document.querySelectorAll('#picture g.terminal')].map((g) => g.dataset.terminal).sort(),
      edges: [...document.querySelectorAll('#picture path.edge[data-kind]')].map((p) => `${p.dataset.from} ${p.dataset.kind} ${p.dataset.to}`).sort(),
      labels: [...document.querySelectorAll('#picture text.elabel')].map((t) => t.textContent),
      scope: Object.fromEntries([...document.querySelectorAll('#picture g.step')].map((g) => [g.dataset.step, [...g.querySelectorAll('text.scope')].map((t) => t.textContent)])),
    }));
    assert.deepEqual(drawn.steps, Object.keys(env.steps).sort());
    assert.deepEqual(drawn.gated, Object.keys(env.steps).filter((s) => env.steps[s].gated));
    assert.deepEqual(drawn.terminals, [...env.terminals].sort());
    const edges = [];
    for (const [id, s] of Object.entries(env.steps)) {
      if (s.next) edges.push(`${id} next ${s.next}`);
      if (s.on_fail) edges.push(`${id} on_fail ${s.on_fail}`);
    }
    for (const k of Object.keys(env.budgets)) edges.push(`${k.split('->')[0]} retry ${k.split('->')[1]}`);
    assert.deepEqual(drawn.edges, edges.sort());
    for (const [k, max] of Object.entries(env.budgets)) assert.ok(drawn.labels.includes(`retry ≤${max}`), `budget of ${k} shown`);
    for (const [id, s] of Object.entries(env.steps)) {
      for (const cap of s.tools) assert.ok(drawn.scope[id].some((l) => l.startsWith(cap)), `${id}: ${cap} listed in its scope`);
    }
    const png = await page.locator('#picture svg').screenshot({ path: SCREENSHOT, animations: 'disabled' });
    measurements.screenshot_bytes = png.length;
    assert.ok(png.length > 10_000 && png.length < 400_000, `a small, non-empty screenshot (${png.length} bytes) at ${relative(root, SCREENSHOT)}`);
  });

  test('undeclared tools are flagged in the picture', async () => {
    const yaml = 'runbook_id: flagged\nversion: 1.0.0\ncapabilities: [db.read]\nsteps:\n  - id: read\n    tool: db.read\n  - id: write\n    tool: db.wirte\n    next: done\nterminals: [done]\n';
    await afterUpdate(() => setDoc(yaml));
    assert.equal(await page.textContent('#picture g.step[data-step="write"] text.undeclared'), 'undeclared tool: db.wirte');
    assert.ok(await page.$('#picture g.step.has-undeclared[data-step="write"]'));
    const listed = readdirSync(DIST);
    assert.ok(listed.includes('policy.wasm') && listed.includes('module.sha256'));
  });
  test('inline diagnostics: a document with a known error, typed, is underlined at its line and column with the message', async () => {
    await page.setViewportSize({ width: 1280, height: 1000 });
    const yaml = 'runbook_id: typo\nversion: 1.0.0\ncapabilities: [db.read]\nsteps:\n  - id: read\n    tool: db.read\n    nxet: done\nterminals: [done]\n';
    await afterUpdate(() => setDoc(yaml));
    const file = join(mkdtempSync(join(tmpdir(), 'runbook-playground-doc-')), 'runbook.yaml');
    writeFileSync(file, yaml);
    const lint = JSON.parse(cli(['lint', '--format', 'json', file]).stdout.toString('utf8'));
    rmSync(dirname(file), { recursive: true, force: true });
    const unknown = lint.findings.find((f) => f.code === 'unknown-field');
    assert.ok(unknown, `lint reports the misspelt field (${JSON.stringify(lint.findings)})`);
    assert.equal(unknown.line, 7);
    const drawn = await drawnDiagnostics();
    const at = drawn.find((d) => d.line === unknown.line && d.column === unknown.column);
    assert.ok(at, `a diagnostic at ${unknown.line}:${unknown.column} (drawn: ${JSON.stringify(drawn)})`);
    assert.equal(at.severity, unknown.severity);
    assert.equal(at.text, 'nxet', 'the underline covers the misspelt key');
    await page.locator('#editor .cm-lintRange', { hasText: 'nxet' }).first().hover();
    const tip = page.locator('.cm-tooltip-lint');
    await tip.waitFor({ timeout: 10_000 });
    assert.ok((await tip.textContent()).includes(unknown.message), 'the message on hover');
    await page.mouse.move(0, 0);
    // Typing the fix by keyboard clears the diagnostic.
    await page.evaluate(() => {
      const v = globalThis.playground.editor;
      const from = v.state.doc.toString().indexOf('nxet');
      v.dispatch({ selection: { anchor: from, head: from + 4 } });
      v.focus();
    });
    await afterUpdate(() => page.keyboard.type('next'));
    assert.equal((await drawnDiagnostics()).filter((d) => d.line === 7).length, 0, 'fixed, no diagnostic on line 7');
    assert.equal(await page.getAttribute('#lint-summary', 'data-kind'), 'ok');
  });

  test('the picture is never clipped: every box inside the viewBox, the SVG scaled to its frame, at 1280 and 390 px', async () => {
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 900 });
      for (const ex of examples) {
        await openExample(ex.name);
        if (!(await page.$('#picture svg'))) continue;
        const r = await page.evaluate(() => {
          const svg = document.querySelector('#picture svg');
          const vb = svg.viewBox.baseVal;
          const inside = (b) => b.x >= vb.x - 0.5 && b.y >= vb.y - 0.5 && b.x + b.width <= vb.x + vb.width + 0.5 && b.y + b.height <= vb.y + vb.height + 0.5;
          const out = [];
          for (const n of svg.querySelectorAll('g.node, g.labels text, path.edge')) {
            const b = n.getBBox();
            if (!inside(b)) out.push(`${n.getAttribute('class')} ${n.dataset.step ?? n.dataset.terminal ?? n.textContent ?? ''} ${JSON.stringify([b.x, b.y, b.width, b.height])}`);
          }
          const frame = document.getElementById('picture');
          const s = svg.getBoundingClientRect();
          const f = frame.getBoundingClientRect();
          return { out, nodes: svg.querySelectorAll('g.node').length, vb: [vb.x, vb.y, vb.width, vb.height], svgWidth: s.width, frameWidth: frame.clientWidth, left: s.left - f.left, scrolls: getComputedStyle(frame).overflowX };
        });
        assert.ok(r.nodes > 0, `${ex.name} at ${width}px: boxes drawn`);
        assert.deepEqual(r.out, [], `${ex.name} at ${width}px: everything inside the viewBox ${JSON.stringify(r.vb)}`);
        assert.ok(r.svgWidth <= r.frameWidth + 1 && r.left >= -1, `${ex.name} at ${width}px: the SVG (${r.svgWidth}px) fits its frame (${r.frameWidth}px)`);
        assert.equal(r.scrolls, 'auto', 'the frame scrolls if anything is taller');
      }
    }
    await page.setViewportSize({ width: 1500, height: 1000 });
  });

  test('compression: gzip for the JavaScript and the component, fewer bytes for the page, the same bytes once decoded', async (t) => {
    const files = ['/', 'app.mjs', 'policy.wasm', 'style.css', 'module.sha256', 'examples.json'];
    let plain = 0;
    let gzip = 0;
    let chromiumLike = 0;
    const rows = [];
    for (const f of files) {
      const id = await rawGet(f, 'identity');
      const gz = await rawGet(f, 'gzip');
      const br = await rawGet(f, 'gzip, deflate, br, zstd');
      assert.equal(id.status, 200, f);
      assert.equal(id.headers['content-encoding'], undefined, `${f}: identity when asked`);
      assert.equal(gz.headers['content-type'], id.headers['content-type'], `${f}: the same content type`);
      if (['app.mjs', 'policy.wasm'].includes(f)) {
        assert.equal(gz.headers['content-encoding'], 'gzip', `${f}: gzip`);
        assert.match(gz.headers.vary ?? '', /accept-encoding/i, `${f}: Vary: Accept-Encoding`);
      }
      const decoded = gz.headers['content-encoding'] === 'gzip' ? (await import('node:zlib')).gunzipSync(gz.body) : gz.body;
      assert.ok(decoded.equals(id.body), `${f}: the same bytes once decoded`);
      plain += id.body.length;
      gzip += gz.body.length;
      chromiumLike += br.body.length;
      rows.push(`${f} ${id.body.length} -> ${gz.body.length} gzip, ${br.body.length} ${br.headers['content-encoding'] ?? 'identity'}`);
    }
    assert.equal((await rawGet('app.mjs', 'identity')).headers['content-type'], 'text/javascript; charset=utf-8');
    assert.equal((await rawGet('policy.wasm', 'gzip')).headers['content-type'], 'application/wasm');
    assert.ok(gzip < plain && chromiumLike < plain, 'compressed is smaller');
    measurements.page_bytes_uncompressed = plain;
    measurements.page_bytes_gzip = gzip;
    measurements.page_bytes_as_chromium_asks = chromiumLike;
    t.diagnostic(`the page's files: ${plain} bytes uncompressed, ${gzip} with gzip (${Math.round((100 * gzip) / plain)}%), ${chromiumLike} as Chromium asks (${Math.round((100 * chromiumLike) / plain)}%): ${rows.join('; ')}`);
  });

  test('the server refuses what is not a file of the page', async () => {
    for (const bad of ['/../Cargo.toml', '/%2e%2e/Cargo.toml', '/.hidden', '/jco/../../Cargo.toml', '/nope.js']) {
      assert.equal((await rawGet(bad, 'gzip')).status, 404, bad);
    }
    // Issue 28, F9: two Host headers, or an absolute-form target naming another host, are refused (421).
    const { host } = new URL(origin);
    const status = (head) => new Promise((ok, fail) => {
      const s = connect(Number(new URL(origin).port), '127.0.0.1', () => s.write(`${head}Connection: close\r\n\r\n`));
      let out = '';
      s.on('data', (d) => { out += d; });
      s.on('end', () => ok(Number(out.split(' ')[1])));
      s.on('error', fail);
    });
    assert.equal(await status(`GET /index.html HTTP/1.1\r\nHost: ${host}\r\n`), 200, 'the page itself');
    assert.equal(await status(`GET /index.html HTTP/1.1\r\nHost: ${host}\r\nHost: attacker.example\r\n`), 421, 'two Host headers');
    assert.equal(await status(`GET http://attacker.example/index.html HTTP/1.1\r\nHost: ${host}\r\n`), 421, 'an absolute-form target');
  });

  test('accessibility: axe-core finds no serious or critical violation', async (t) => {
    await page.setViewportSize({ width: 1280, height: 1000 });
    const found = [];
    for (const name of ['rotate-credentials', 'broken']) {
      await openExample(name);
      // Injected through the DevTools protocol, which the page's Content-Security-Policy does not govern.
      await page.evaluate(AXE);
      const violations = await page.evaluate(async () => (await globalThis.axe.run(document, { resultTypes: ['violations'] })).violations
        .map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5) })));
      for (const v of violations) t.diagnostic(`${name}: ${v.impact} ${v.id}: ${v.help} (${v.nodes.join(', ')})`);
      found.push(...violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => ({ example: name, ...v })));
    }
    assert.deepEqual(found, []);
    await page.setViewportSize({ width: 1500, height: 1000 });
  });

  test('screenshots at a desktop and a phone width', async () => {
    await page.setViewportSize({ width: 1280, height: 900 });
    await openExample('rotate-credentials');
    await page.evaluate(() => {
      document.activeElement?.blur();
      window.scrollTo(0, 0);
    });
    const desktop = await page.screenshot({ path: join(SCREENSHOTS, 'screenshot-desktop.png'), animations: 'disabled' });
    await page.setViewportSize({ width: 390, height: 844 });
    await openExample('broken');
    await page.locator('#editor').scrollIntoViewIfNeeded();
    await page.locator('#editor .cm-lintRange-error', { hasText: 'drop-tabel' }).first().hover();
    await page.locator('.cm-tooltip-lint').waitFor({ timeout: 10_000 });
    const phone = await page.screenshot({ path: join(SCREENSHOTS, 'screenshot-phone.png'), animations: 'disabled' });
    await page.mouse.move(0, 0);
    measurements.screenshot_desktop_bytes = desktop.length;
    measurements.screenshot_phone_bytes = phone.length;
    assert.ok(desktop.length > 20_000 && phone.length > 20_000);
    await page.setViewportSize({ width: 1500, height: 1000 });
  });
});
