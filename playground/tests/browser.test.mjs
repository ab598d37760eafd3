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
//                         folder, so a test run leaves the tree clean; set it to playground/screenshot.png to
//                         refresh the README's picture)
//
// A missing browser is a failure, not a skip.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
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
      assert.equal(await page.inputValue('#doc'), readFileSync(source, 'utf8'), `${ex.name}: the editor holds the file`);
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
    const gutter = await page.$$eval('#gutter .gl', (els) => ({
      error: els.filter((e) => e.classList.contains('has-error')).map((e) => Number(e.dataset.line)),
      warning: els.filter((e) => e.classList.contains('has-warning')).map((e) => Number(e.dataset.line)),
    }));
    assert.deepEqual(gutter.error, errorLines, 'the gutter marks the error lines');
    assert.deepEqual(gutter.warning, warningOnly, 'the gutter marks the warning lines');
    const text = readFileSync(join(root, 'examples/broken/runbook.yaml'), 'utf8').split('\n');
    for (const f of lint.findings) {
      // The highlighted line shows the mark under the character at the finding's column.
      const mark = await page.$eval(`#backdrop .bl[data-line="${f.line}"] mark[data-column="${f.column}"]`, (m) => ({
        text: m.textContent,
        before: [...m.parentElement.childNodes].slice(0, [...m.parentElement.childNodes].indexOf(m)).map((n) => n.textContent).join(''),
      }));
      const chars = Array.from(text[f.line - 1] ?? '');
      assert.equal(mark.text, chars[f.column - 1] ?? ' ', `${f.code}: the mark sits on column ${f.column} of line ${f.line}`);
      assert.equal(Array.from(mark.before).length, f.column - 1, `${f.code}: ${f.column - 1} characters before the mark`);
    }
    // The marks line up with the text: the mark's box starts where the text before it ends.
    const undeclared = lint.findings.find((f) => f.code === 'undeclared-tool');
    const geometry = await page.$eval(`#backdrop .bl[data-line="${undeclared.line}"]`, (row) => {
      const mark = row.querySelector('mark');
      const range = document.createRange();
      range.setStart(row.firstChild, 0);
      range.setEnd(row.firstChild, row.firstChild.length);
      return { textEnd: range.getBoundingClientRect().right, markStart: mark.getBoundingClientRect().left };
    });
    assert.ok(Math.abs(geometry.textEnd - geometry.markStart) < 1, 'the mark follows the text before it');
    // A finding is one keyboard action away: its button puts the caret at its line and column.
    await page.focus(`#findings li[data-code="${undeclared.code}"] button.jump`);
    await page.keyboard.press('Enter');
    const caret = await page.evaluate(() => {
      const ta = document.getElementById('doc');
      const before = ta.value.slice(0, ta.selectionStart).split('\n');
      return { focused: document.activeElement === ta, line: before.length, column: Array.from(before.at(-1)).length + 1 };
    });
    assert.deepEqual(caret, { focused: true, line: undeclared.line, column: undeclared.column });
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

  test('a shareable link carries the document in its fragment, and opens it', async () => {
    await openExample('read-only-investigation');
    const edited = `${await page.inputValue('#doc')}# édité ✓\n`;
    await afterUpdate(() => page.fill('#doc', edited));
    const text = await page.inputValue('#doc');
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
    assert.equal(await other.inputValue('#doc'), text);
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
    await afterUpdate(() => page.fill('#doc', yaml));
    assert.equal(await page.textContent('#picture g.step[data-step="write"] text.undeclared'), 'undeclared tool: db.wirte');
    assert.ok(await page.$('#picture g.step.has-undeclared[data-step="write"]'));
    const listed = readdirSync(DIST);
    assert.ok(listed.includes('policy.wasm') && listed.includes('module.sha256'));
  });
});
