// The envelope playground: editor and lint findings, envelope and picture, admission, simulator, sharing.
// Every answer comes from the policy component through the runbook-policy package (policy.mjs); this file
// only moves text in and out of it.

import { loadPolicy, ModuleMismatch, Policy, sha256Hex, utf8Bytes } from './policy.mjs';
import { drawGraph, fitGraph, routeOrder } from './graph.mjs';
import { createEditor } from './editor.mjs';

const $ = (id) => document.getElementById(id);
const h = (tag, attrs = {}, children = []) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of [].concat(children)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
};

// The sentence for each code comes from the module (`explain`), so the page says what the terminal says.
async function explained(kind, code) {
  try {
    return (await policy.explain(kind, code)) ?? '';
  } catch {
    return '';
  }
}

let policy = null;
let examples = [];
const exampleTexts = new Map();
let currentExample = null;

/** What the document currently derives. */
const doc = { text: '', sha256: null, lint: null, envelope: null, env: null, generation: 0 };
/** The simulated run: its event lines, its decision lines and the session they went through. */
const sim = { events: [], decisions: [], run: null, status: null, report: null, over: false, trapped: null, lastInvoke: null };

// ---- small helpers ----------------------------------------------------------------------------------------

function list(s) {
  return s.split(',').map((x) => x.trim()).filter(Boolean);
}

function base64url(text) {
  const bytes = utf8Bytes(text);
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

function fromBase64url(s) {
  const b64 = s.replaceAll('-', '+').replaceAll('_', '/');
  const bin = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
}

function docFromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const d = params.get('doc');
  if (d === null) return null;
  try {
    return fromBase64url(d);
  } catch {
    setStatus('The link does not carry a readable document (base64url of UTF-8 text is expected).', 'error');
    return null;
  }
}

function shareUrl() {
  return `${location.origin}${location.pathname}#doc=${base64url(doc.text)}`;
}

function setStatus(text, kind = 'info') {
  const s = $('load-status');
  s.textContent = text;
  s.dataset.kind = kind;
}

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

async function copy(text, what) {
  try {
    await navigator.clipboard.writeText(text);
    setStatus(`${what} copied to the clipboard.`);
    return true;
  } catch {
    setStatus(`The clipboard is not available here: select the ${what.toLowerCase()} and copy it.`);
    return false;
  }
}

// ---- the editor (editor.mjs: CodeMirror), findings ---------------------------------------------------------

let editor = null;

function jumpTo(line, column) {
  editor.jumpTo(line, column);
  showCaretFindings();
}

function renderFindings(report) {
  const ol = $('findings');
  ol.replaceChildren();
  const errors = report.findings.filter((f) => f.severity === 'error').length;
  const warnings = report.findings.length - errors;
  $('lint-summary').textContent = report.findings.length === 0 ? 'no findings' : `${errors} error${errors === 1 ? '' : 's'}, ${warnings} warning${warnings === 1 ? '' : 's'}`;
  $('lint-summary').dataset.kind = errors ? 'error' : warnings ? 'warning' : 'ok';
  $('structure').textContent = report.structure ? `structure ${report.structure.toUpperCase()}` : 'structure: none (does not parse)';
  $('structure').dataset.structure = report.structure ? report.structure.toUpperCase() : '';
  for (const f of report.findings) {
    ol.append(h('li', { class: `finding ${f.severity}`, 'data-line': f.line, 'data-column': f.column, 'data-code': f.code, 'data-severity': f.severity, 'data-pointer': f.pointer }, [
      h('button', { type: 'button', class: 'jump', 'aria-label': `${f.line}:${f.column}, go to line ${f.line}, column ${f.column}`, onclick: () => jumpTo(f.line, f.column) }, `${f.line}:${f.column}`),
      ' ',
      h('span', { class: `sev ${f.severity}` }, f.severity),
      ' ',
      h('code', { class: 'code' }, f.code),
      ' ',
      h('span', { class: 'msg' }, f.message),
      ' ',
      h('code', { class: 'pointer' }, f.pointer),
    ]));
  }
  if (report.findings.length === 0) ol.append(h('li', { class: 'finding none' }, 'No findings.'));
}

let lastCaretText = '';
function showCaretFindings() {
  if (!editor) return;
  const { line } = editor.caret();
  const fs = (doc.lint?.findings ?? []).filter((f) => f.line === line);
  const text = fs.length ? `Line ${line}: ${fs.map((f) => `${f.severity} ${f.code} at column ${f.column}: ${f.message}`).join(' · ')}` : '';
  if (text !== lastCaretText) {
    $('caret-findings').textContent = text;
    lastCaretText = text;
  }
}

// ---- the envelope, the picture, the steps table -----------------------------------------------------------

async function renderEnvelope(result, generation) {
  const pre = $('envelope');
  if (result.envelope !== undefined) {
    const sha = await sha256Hex(utf8Bytes(result.envelope));
    if (generation !== doc.generation) return;
    pre.hidden = false;
    pre.textContent = result.envelope;
    $('envelope-sha').textContent = sha;
    $('envelope-none').hidden = true;
    $('envelope-section').dataset.sha256 = sha;
  } else {
    pre.hidden = true;
    pre.textContent = '';
    $('envelope-sha').textContent = 'none';
    $('envelope-section').dataset.sha256 = '';
    const n = result.findings.length;
    $('envelope-none').hidden = false;
    $('envelope-none').textContent = `No envelope: ${n} error${n === 1 ? '' : 's'} leave the document without a complete model (${result.findings.map((f) => `${f.code} at ${f.line}:${f.column}`).join(', ')}).`;
  }
}

function renderPicture() {
  const box = $('picture');
  if (!doc.env) {
    box.replaceChildren(h('p', { class: 'notice' }, doc.lint?.structure ? 'No picture: the document has no complete model (see the findings).' : 'No picture: the document does not parse.'));
    $('steps-table').replaceChildren();
    return;
  }
  const overlay = sim.run ? { current: sim.status?.step ?? null, report: sim.report ? JSON.parse(sim.report) : null } : null;
  const svg = drawGraph(doc.env, overlay);
  box.replaceChildren(svg);
  fitGraph(svg);
  renderStepsTable(doc.env);
}

function renderStepsTable(env) {
  const t = $('steps-table');
  const head = h('tr', {}, ['step', 'risk', 'gated', 'assert', 'scope (capability → tool)', 'next', 'on_fail', 'retry', 'undeclared'].map((c) => h('th', { scope: 'col' }, c)));
  const rows = routeOrder(env).map((id) => {
    const s = env.steps[id];
    const retry = Object.entries(env.budgets).filter(([k]) => k.startsWith(`${id}->`)).map(([k, m]) => `${k.slice(id.length + 2)} ≤${m}`).join(', ');
    return h('tr', { 'data-step': id }, [
      h('th', { scope: 'row' }, id),
      h('td', {}, s.risk),
      h('td', {}, s.gated ? 'yes' : 'no'),
      h('td', {}, s.assert ? 'yes' : 'prose'),
      h('td', {}, s.tools.map((c) => `${c} → ${env.capabilities[c]?.tool ?? '?'}`).join(', ') || '—'),
      h('td', {}, s.next ?? '—'),
      h('td', {}, s.on_fail ?? '—'),
      h('td', {}, retry || '—'),
      h('td', {}, env.undeclared.filter((u) => u.step === id).map((u) => u.tool).join(', ') || '—'),
    ]);
  });
  t.replaceChildren(h('thead', {}, head), h('tbody', {}, rows));
}

function fillDatalists(env) {
  const tools = new Set();
  if (env) {
    for (const c of Object.values(env.capabilities)) tools.add(c.tool);
    for (const u of env.undeclared) tools.add(u.tool);
  }
  const opts = (xs) => [...xs].sort().map((x) => h('option', { value: x }));
  $('tool-list').replaceChildren(...opts(tools));
  const steps = env ? Object.keys(env.steps) : [];
  $('step-list').replaceChildren(...opts(steps));
  $('route-list').replaceChildren(...opts([...steps, ...(env?.terminals ?? [])]));
}

// ---- admission --------------------------------------------------------------------------------------------

function claim() {
  const coverage = $('coverage').value.trim();
  const c = {
    type: 'start',
    at: 0,
    run_id: $('run-id').value,
    profile: $('profile').value,
    allowlist: list($('allowlist').value),
    risk_ceiling: $('risk-ceiling').value,
    coverage: coverage === 'complete' || coverage === '' ? 'complete' : list(coverage),
    agent: $('agent').value,
  };
  if ($('available').value.trim() !== '') c.available = list($('available').value);
  return JSON.stringify(c);
}

async function renderAdmission() {
  const line = claim();
  $('start-line').textContent = line;
  const box = $('admission');
  let decision;
  try {
    decision = JSON.parse(await policy.admit(doc.text, line));
  } catch (e) {
    box.replaceChildren(h('p', { class: 'error-text' }, `The module failed: ${e.message ?? e}`));
    return;
  }
  box.dataset.decision = decision.decision;
  box.dataset.refusals = decision.refusals.join(',');
  if (decision.decision === 'allow') {
    box.replaceChildren(h('p', { class: 'admitted' }, [h('strong', {}, 'Admitted'), ` — a run may start at ${decision.step ?? 'its first event'}.`]));
  } else {
    const sentences = await Promise.all(decision.refusals.map((r) => explained('refusal', r)));
    box.replaceChildren(
      h('p', { class: 'refused' }, [h('strong', {}, 'Refused'), decision.refusals.length ? ` for ${decision.refusals.length} reason${decision.refusals.length === 1 ? '' : 's'}:` : ` (${decision.reason ?? decision.decision}).`]),
      h('ul', { class: 'refusals' }, decision.refusals.map((r, i) => h('li', { 'data-refusal': r }, [h('code', {}, r), ` — ${sentences[i]}`]))),
    );
  }
}

// ---- the simulator ----------------------------------------------------------------------------------------

function closeRun() {
  sim.run?.close();
  sim.run = null;
  sim.status = null;
  sim.report = null;
  sim.over = false;
  sim.trapped = null;
}

function lastAt() {
  for (let i = sim.events.length - 1; i >= 0; i--) {
    try {
      const at = JSON.parse(sim.events[i]).at;
      if (Number.isSafeInteger(at)) return at;
    } catch {
      // a malformed line has no time
    }
  }
  return 0;
}

/** Feeds one line to the run; returns the decision line. */
function feed(line) {
  let decision;
  try {
    decision = sim.run.handleLine(line);
  } catch (e) {
    // As the Rust host does: a trap halts the run with `host-trap`, and no report is made up.
    sim.trapped = e?.message ?? String(e);
    decision = JSON.stringify({ decision: 'halt', deviation: null, reason: 'host-trap', refusals: [], seq: sim.decisions.length, step: null });
  }
  sim.decisions.push(decision);
  return decision;
}

function refreshRunState() {
  if (!sim.run) return;
  if (sim.trapped) {
    sim.over = true;
    return;
  }
  sim.status = sim.run.status();
  sim.report = sim.run.report();
  sim.over = sim.run.isOver();
}

let simRuns = 0;

/** Replaces the run with `events` fed, in order, to a new session of the current document. */
async function simulate(events) {
  closeRun();
  sim.events = events.slice();
  sim.decisions = [];
  sim.lastInvoke = null;
  if (sim.events.length) {
    sim.run = await policy.session(doc.text);
    for (const line of sim.events) {
      if (sim.trapped) break;
      feed(line);
      noteInvoke(line);
    }
    refreshRunState();
  }
  renderLog(true);
  renderSimState();
  renderPicture();
  document.body.dataset.simRuns = String(++simRuns);
}

async function sendLine(line) {
  if (!sim.run) {
    await simulate([line]);
  } else {
    if (sim.trapped) return;
    sim.events.push(line);
    feed(line);
    noteInvoke(line);
    refreshRunState();
    renderLog(false);
    renderSimState();
    renderPicture();
  }
  adaptComposer();
}

function noteInvoke(line) {
  try {
    const e = JSON.parse(line);
    if (e.type === 'invoke') sim.lastInvoke = { tool: e.tool, arguments: e.arguments ?? {}, call_id: e.call_id };
  } catch {
    // malformed: nothing to remember
  }
}

function summarize(line) {
  try {
    const e = JSON.parse(line);
    const bits = [e.type];
    if (e.tool) bits.push(e.tool);
    if (e.type === 'invoke' && e.arguments && Object.keys(e.arguments).length) bits.push(JSON.stringify(e.arguments));
    if (e.type === 'result') bits.push(e.is_error ? '(error)' : '(ok)');
    if (e.type === 'approval') bits.push(`${e.step ?? ''} by ${e.approver}${e.granted ? '' : ' (refused)'}${e.call_sha256 ? ' (call-bound)' : ''}`);
    if (e.type === 'advance') bits.push(`to ${e.to}`);
    if (e.type === 'verdict') bits.push(`${e.step} ${e.outcome} by ${e.by}`);
    if (e.type === 'end' && e.reason) bits.push(e.reason);
    if (e.type === 'start') bits.push(`${e.profile}, agent ${e.agent}`);
    return `${bits.join(' ')} @${e.at}`;
  } catch {
    return '(not a JSON line)';
  }
}

function logEntry(i) {
  const line = sim.events[i];
  const decision = sim.decisions[i];
  let d = {};
  try {
    d = JSON.parse(decision);
  } catch {
    // shown raw below
  }
  return h('li', { class: `entry dec-${d.decision}${d.deviation ? ' has-deviation' : ''}`, 'data-seq': d.seq }, [
    h('div', { class: 'entry-head' }, [
      h('span', { class: 'seq' }, `#${d.seq}`),
      h('span', { class: 'what' }, summarize(line)),
      h('span', { class: 'arrow', 'aria-hidden': 'true' }, '→'),
      h('strong', { class: `dec ${d.decision}` }, d.decision),
      d.step ? h('span', { class: 'at-step' }, `step ${d.step}`) : null,
      d.deviation ? h('span', { class: 'deviation' }, `deviation ${d.deviation}`) : null,
      d.reason ? h('span', { class: 'reason' }, `reason ${d.reason}`) : null,
      d.refusals?.length ? h('span', { class: 'refusal-list' }, `refusals ${d.refusals.join(', ')}`) : null,
    ]),
    h('code', { class: 'event-line' }, line),
    h('code', { class: 'decision-line' }, decision),
  ]);
}

function renderLog(full) {
  const ol = $('log');
  if (full) ol.replaceChildren(...sim.decisions.map((_, i) => logEntry(i)));
  else ol.append(logEntry(sim.decisions.length - 1));
  ol.lastElementChild?.scrollIntoView?.({ block: 'nearest' });
  $('ndjson').value = sim.events.length ? `${sim.events.join('\n')}\n` : '';
  if (full) hideReport();
  if (sim.over && !sim.trapped) showReport(true);
  else if (sim.run && !sim.trapped && !$('report-box').hidden) showReport(false);
  if (sim.trapped) {
    $('report-box').hidden = false;
    $('report-note').textContent = `The module trapped (${sim.trapped}): the run halted with host-trap and no report is made up.`;
    $('report').textContent = '';
  }
}

function showReport(final) {
  if (!sim.run || sim.trapped) return;
  if (!sim.report) sim.report = sim.run.report();
  const r = JSON.parse(sim.report);
  $('report-box').hidden = false;
  $('report-box').dataset.final = final ? 'yes' : 'no';
  $('report-note').textContent = final ? `The run is over: outcome ${r.outcome}${r.terminal ? ` at ${r.terminal}` : ''}, ${r.deviations.length} deviation${r.deviations.length === 1 ? '' : 's'}.` : 'The run has not ended: this report is not final.';
  $('report').textContent = sim.report;
}

function hideReport() {
  $('report-box').hidden = true;
  $('report').textContent = '';
}

function renderSimState() {
  const p = $('sim-state');
  const composer = $('composer');
  if (!sim.run) {
    p.textContent = 'No run yet: start one with the claim above, or import an event stream.';
    composer.disabled = true;
    $('quick').replaceChildren();
    document.body.dataset.simEvents = '0';
    return;
  }
  composer.disabled = sim.over;
  const s = sim.status;
  if (sim.trapped) p.textContent = 'The run halted: the module trapped.';
  else if (sim.over) p.textContent = `The run is over${s?.outcome ? `: ${s.outcome}` : ''}${s?.step ? ` at ${s.step}` : ''}. ${sim.events.length} events.`;
  else {
    const waits = [];
    if (s.gated && !s.approved) waits.push('the step is gated: it awaits a human approval');
    if (s.awaiting_verdict) waits.push("it awaits a human's verdict");
    p.textContent = `Current step: ${s.step ?? '(none)'}; in scope: ${s.scope.length ? s.scope.join(', ') : 'nothing'}${waits.length ? `; ${waits.join('; ')}` : ''}. ${sim.events.length} event${sim.events.length === 1 ? '' : 's'} so far.`;
  }
  document.body.dataset.simEvents = String(sim.events.length);
  $('ev-at').value = String(lastAt() + 100);
  renderQuick();
}

function renderQuick() {
  const q = $('quick');
  q.replaceChildren();
  if (!sim.run || sim.over || !doc.env) return;
  const scope = sim.status?.scope ?? [];
  if (!scope.length) return;
  q.append(h('span', { class: 'hint' }, 'In scope now: '));
  for (const cap of scope) {
    const c = doc.env.capabilities[cap];
    if (!c) continue;
    q.append(h('button', {
      type: 'button',
      class: 'chip',
      onclick: () => {
        $('ev-type').value = 'invoke';
        showFields();
        $('ev-tool').value = c.tool;
        const path = c.when?.path;
        if (typeof path === 'string' && /^\/[^/]+$/.test(path)) $('ev-arguments').value = JSON.stringify({ [path.slice(1).replaceAll('~1', '/').replaceAll('~0', '~')]: '' });
        else $('ev-arguments').value = '{}';
        $('ev-arguments').focus();
      },
    }, `invoke ${cap}${cap === c.tool ? '' : ` (${c.tool})`}`));
  }
}

/** After a decision, offer the event that usually comes next. */
function adaptComposer() {
  const last = sim.decisions.at(-1);
  if (!last || sim.over) return;
  let d;
  let e;
  try {
    d = JSON.parse(last);
    e = JSON.parse(sim.events.at(-1));
  } catch {
    return;
  }
  if (e.type === 'invoke' && d.decision === 'allow') {
    $('ev-type').value = 'result';
    $('ev-tool').value = e.tool;
    $('ev-call-id').value = typeof e.call_id === 'string' ? e.call_id : '';
  } else if (d.decision === 'needs-approval') {
    $('ev-type').value = 'approval';
    $('ev-step').value = d.step ?? '';
  } else if (d.decision === 'needs-verdict') {
    $('ev-type').value = 'verdict';
    $('ev-step').value = d.step ?? '';
  } else if (e.type === 'result') {
    $('ev-type').value = 'invoke';
    $('ev-arguments').value = '{}';
    $('ev-call-id').value = '';
  }
  showFields();
}

function showFields() {
  const type = $('ev-type').value;
  for (const e of $('composer').querySelectorAll('[data-for]')) {
    e.hidden = !e.dataset.for.split(' ').includes(type);
  }
}

function parseJsonField(id, what) {
  const raw = $(id).value.trim() || '{}';
  try {
    return JSON.parse(raw);
  } catch (e) {
    throw new Error(`${what} is not JSON: ${e.message}`);
  }
}

function composeEvent() {
  const type = $('ev-type').value;
  const at = Number($('ev-at').value);
  if (!Number.isSafeInteger(at) || at < 0) throw new Error('`at` must be a whole number of milliseconds, 0 or more');
  const e = { type, at };
  const opt = (k, id) => {
    const v = $(id).value.trim();
    if (v !== '') e[k] = v;
  };
  const req = (k, id, what) => {
    const v = $(id).value.trim();
    if (v === '') throw new Error(`${what} is required`);
    e[k] = v;
  };
  switch (type) {
    case 'invoke':
      req('tool', 'ev-tool', 'the tool');
      e.arguments = parseJsonField('ev-arguments', 'the arguments');
      opt('call_id', 'ev-call-id');
      opt('step', 'ev-step');
      break;
    case 'result':
      req('tool', 'ev-tool', 'the tool');
      e.result = parseJsonField('ev-result', 'the result');
      e.is_error = $('ev-is-error').checked;
      opt('call_id', 'ev-call-id');
      break;
    case 'approval':
      opt('step', 'ev-step');
      opt('call_sha256', 'ev-call-sha');
      req('approver', 'ev-approver', 'the approver');
      e.granted = $('ev-granted').checked;
      break;
    case 'advance':
      req('to', 'ev-to', 'the step to advance to');
      break;
    case 'verdict':
      req('step', 'ev-step', 'the step');
      e.outcome = $('ev-outcome').value;
      req('by', 'ev-by', 'who rules');
      break;
    case 'end':
      e.reason = $('ev-reason').value;
      break;
    default:
      break;
  }
  return JSON.stringify(e);
}

// ---- the document: load, update everything ----------------------------------------------------------------

let updateTimer = null;
function scheduleUpdate() {
  clearTimeout(updateTimer);
  updateTimer = setTimeout(update, 120);
}

let firstEnvelope = true;
async function update() {
  clearTimeout(updateTimer);
  const text = editor.text;
  const generation = ++doc.generation;
  doc.text = text;
  document.body.dataset.updating = 'yes';
  try {
    const lint = await policy.lint(text);
    if (generation !== doc.generation) return;
    doc.lint = lint;
    doc.sha256 = lint.sha256;
    $('doc-sha').textContent = `document sha256 ${lint.sha256}`;
    renderFindings(lint);
    editor.setFindings(lint.findings);
    showCaretFindings();
    const env = await policy.envelope(text);
    if (generation !== doc.generation) return;
    doc.envelope = env.envelope ?? null;
    doc.env = env.envelope !== undefined ? JSON.parse(env.envelope) : null;
    await renderEnvelope(env, generation);
    if (generation !== doc.generation) return;
    if (firstEnvelope && doc.envelope !== null) {
      firstEnvelope = false;
      performance.mark('first-envelope');
      document.body.dataset.firstEnvelopeMs = performance.now().toFixed(1);
    }
    fillDatalists(doc.env);
    await renderAdmission();
    if (sim.events.length) {
      // The run is a function of the document and its events: an edit replays the same events through it.
      await simulate(sim.events);
      if (sim.run) $('sim-state').textContent += ' (The events were replayed against the edited document.)';
    } else {
      renderPicture();
    }
    history.replaceState(null, '', `#doc=${base64url(text)}`);
    document.body.dataset.docSha256 = lint.sha256;
  } catch (e) {
    setStatus(`The policy module failed: ${e?.message ?? e}`, 'error');
    throw e;
  } finally {
    if (generation === doc.generation) {
      document.body.dataset.updating = 'no';
      document.body.dataset.done = String(generation);
    }
  }
}

async function exampleText(path) {
  if (!exampleTexts.has(path)) {
    const r = await fetch(path);
    if (!r.ok) throw new Error(`cannot load ${path}: HTTP ${r.status}`);
    exampleTexts.set(path, await r.text());
  }
  return exampleTexts.get(path);
}

async function loadExample(ex, { focus = false } = {}) {
  const text = await exampleText(ex.document);
  currentExample = ex;
  for (const b of $('examples').querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.example === ex.name));
  editor.replace(text);
  renderStreamButtons();
  closeRun();
  sim.events = [];
  sim.decisions = [];
  renderLog(true);
  renderSimState();
  await update();
  if (focus) editor.focus();
}

function renderStreamButtons() {
  const box = $('stream-examples');
  box.replaceChildren();
  if (!currentExample || !currentExample.events.length) return;
  box.append(h('span', { class: 'hint' }, `Recorded streams of ${currentExample.name}: `));
  for (const path of currentExample.events) {
    const name = path.split('/').pop();
    box.append(h('button', {
      type: 'button',
      class: 'chip',
      'data-stream': name,
      onclick: async () => {
        $('ndjson').value = await exampleText(path);
        await importStream();
      },
    }, `replay ${name}`));
  }
}

async function importStream() {
  const lines = $('ndjson').value.split('\n').filter((l) => l.trim() !== '');
  $('ndjson').dataset.imported = String(lines.length);
  await simulate(lines);
  adaptComposer();
}

// ---- verify ----------------------------------------------------------------------------------------------

/**
 * Verifies the folder a person chose: its top-level files with their bytes (a file input gives each file's
 * path as `<folder>/<name>`), and each subfolder with how many entries it holds, as `runbook-host verify`
 * lists a bundle. The verification, in the vectors' JSON form, is left on the result for tests.
 */
async function verifyFolder(files) {
  const entries = new Map();
  const folders = new Map();
  for (const f of files) {
    const parts = f.webkitRelativePath.split('/');
    if (parts.length === 2) entries.set(parts[1], new Uint8Array(await f.arrayBuffer()));
    else if (parts.length > 2) folders.set(parts[1], (folders.get(parts[1]) ?? new Set()).add(parts[2]));
  }
  for (const [name, inside] of folders) entries.set(name, inside.size);
  const box = $('verify-result');
  let v;
  try {
    v = await policy.verifyBundle([...entries]);
  } catch (e) {
    box.textContent = `Cannot verify: ${e.message}`;
    box.dataset.ok = 'no';
    return;
  }
  const run = `run ${v.runId ?? '?'} (${v.events} events, outcome ${v.outcome ?? 'none'})`;
  const share = v.failure ? 'blocked' : v.reasons.length ? 'local_only' : 'share_ready';
  box.replaceChildren(
    v.failure
      ? h('strong', {}, `NOT VERIFIED: ${v.failure.place}: ${v.failure.message}`)
      : h('strong', {}, v.redacted ? `verified: ${run}; a redacted derivative: its chain and receipt verify, it cannot be replayed` : `verified: ${run}; replayed through this page's module`),
    h('br'),
    `share safety: ${share}`,
    ...v.reasons.map((r) => h('span', { class: 'small' }, ` · ${r.code}: ${r.message}`)),
    ...v.warnings.map((w) => h('span', { class: 'small' }, ` · warning: ${w}`)),
  );
  box.dataset.ok = v.failure ? 'no' : 'yes';
  box.dataset.verification = JSON.stringify({
    checks: v.checks, events: v.events, failure: v.failure, outcome: v.outcome, reasons: v.reasons, receipt_signed: v.receiptSigned,
    redacted: v.redacted, run_id: v.runId, shadow: v.shadow, signed_answers: v.signedAnswers, warnings: v.warnings,
  });
  $('verify-checks').replaceChildren(...v.checks.map((c) => h('li', {}, c)));
}

// ---- start-up ---------------------------------------------------------------------------------------------

function wire() {
  editor = createEditor($('editor'), {
    contentAttributes: { id: 'doc', tabindex: '0', 'aria-labelledby': 'editor-h', 'aria-describedby': 'doc-hint caret-findings' },
    onChange: () => {
      currentExample = null;
      for (const b of $('examples').querySelectorAll('button')) b.setAttribute('aria-pressed', 'false');
      renderStreamButtons();
      scheduleUpdate();
    },
    onCaret: showCaretFindings,
  });
  // The editor for the tests and the console: `playground.editor` is the CodeMirror EditorView.
  globalThis.playground = { editor: editor.view };

  $('share').addEventListener('click', async () => {
    const url = shareUrl();
    const input = $('share-url');
    input.hidden = false;
    input.value = url;
    if (!(await copy(url, 'Link'))) {
      input.focus();
      input.select();
    }
  });
  $('copy-envelope').addEventListener('click', () => doc.envelope !== null && copy(doc.envelope, 'Envelope'));
  $('download-envelope').addEventListener('click', () => doc.envelope !== null && download('envelope.json', doc.envelope, 'application/json'));
  $('download-svg').addEventListener('click', () => {
    const svg = $('picture').querySelector('svg');
    if (svg) download(`${doc.env?.document.runbook_id ?? 'runbook'}.svg`, new XMLSerializer().serializeToString(svg), 'image/svg+xml');
  });

  const claimForm = $('claim');
  claimForm.addEventListener('submit', (e) => e.preventDefault());
  claimForm.addEventListener('input', () => renderAdmission());
  claimForm.addEventListener('change', () => renderAdmission());
  $('start-run').addEventListener('click', async () => {
    await simulate([claim()]);
    adaptComposer();
    $('ev-type').focus();
  });

  $('ev-type').addEventListener('change', showFields);
  $('send-event').addEventListener('click', async () => {
    $('ev-error').textContent = '';
    let line;
    try {
      line = composeEvent();
    } catch (e) {
      $('ev-error').textContent = e.message;
      return;
    }
    await sendLine(line);
  });
  const sendRaw = async () => {
    const line = $('raw-line').value;
    if (line.trim() === '') return;
    await sendLine(line);
    $('raw-line').value = '';
  };
  $('send-raw').addEventListener('click', sendRaw);
  $('raw-line').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      sendRaw();
    }
  });
  $('bind-last').addEventListener('click', async () => {
    if (!sim.lastInvoke) {
      $('ev-error').textContent = 'No invocation yet to bind to.';
      return;
    }
    const r = await policy.callSha256(sim.lastInvoke.tool, JSON.stringify(sim.lastInvoke.arguments));
    if (r.sha256) $('ev-call-sha').value = r.sha256;
    else $('ev-error').textContent = r.error;
  });
  $('show-report').addEventListener('click', () => {
    if (sim.run) showReport(sim.over);
  });
  $('reset-run').addEventListener('click', () => simulate([]));
  $('import').addEventListener('click', importStream);
  $('import-file').addEventListener('change', async (e) => {
    const f = e.target.files?.[0];
    if (!f) return;
    $('ndjson').value = await f.text();
    e.target.value = '';
    await importStream();
  });
  $('export').addEventListener('click', () => {
    if (sim.events.length) download(`${doc.env?.document.runbook_id ?? 'run'}-events.ndjson`, `${sim.events.join('\n')}\n`, 'application/x-ndjson');
  });
  $('bundle-dir').addEventListener('change', async (e) => {
    const files = [...(e.target.files ?? [])];
    e.target.value = '';
    if (files.length) await verifyFolder(files);
  });
  window.addEventListener('hashchange', async () => {
    const text = docFromHash();
    if (text !== null && text !== editor.text) {
      editor.replace(text);
      currentExample = null;
      renderStreamButtons();
      await update();
    }
  });
  showFields();
}

async function main() {
  wire();
  const t0 = performance.now();
  const loading = loadPolicy();
  const index = fetch('examples.json').then((r) => (r.ok ? r.json() : []));
  const fromHash = docFromHash();
  let loaded;
  try {
    loaded = await loading;
  } catch (e) {
    const info = e.info;
    if (info) {
      $('module-sha').textContent = info.sha256;
      $('module-check').textContent = `✗ differs from module.sha256 (${info.expected})`;
      $('module-check').dataset.ok = 'no';
    }
    setStatus(e instanceof ModuleMismatch ? e.message : `Cannot load the policy module: ${e?.message ?? e}`, 'error');
    document.body.dataset.failed = 'yes';
    return;
  }
  policy = new Policy(loaded);
  $('module-sha').textContent = loaded.sha256;
  $('module-check').textContent = '✓ equals module.sha256: these are the bytes this page loaded and runs';
  $('module-check').dataset.ok = 'yes';
  document.body.dataset.moduleSha256 = loaded.sha256;
  const version = await policy.version();
  $('module-info').textContent = `runbook:policy component ${version}, ${loaded.size.toLocaleString('en')} bytes, hashed here with WebCrypto and run by the runbook-policy package (JavaScript glue by jco ${loaded.jco}). Nothing leaves this page.`;
  setStatus(`Policy module ${version} loaded and verified in ${Math.round(performance.now() - t0)} ms.`);

  examples = await index;
  $('examples').replaceChildren(...examples.map((ex) => h('li', {}, h('button', {
    type: 'button', 'data-example': ex.name, 'aria-pressed': 'false', onclick: () => loadExample(ex, { focus: true }),
  }, ex.name))));
  if (fromHash !== null) {
    editor.replace(fromHash);
    await update();
  } else if (examples.length) {
    await loadExample(examples[0]);
  } else {
    await update();
  }
  document.body.dataset.ready = 'yes';
  // Everything else the page may show, fetched now, so that it keeps working offline.
  await Promise.allSettled(examples.flatMap((ex) => [ex.document, ...ex.events].map((p) => exampleText(p))));
  document.body.dataset.prefetched = 'yes';
}

main();
