// The run viewer: opens a run bundle in the page (a folder or a .tar.gz; bundle-input.mjs), verifies it with
// the module's `verify-bundle` through the runbook-policy package (the checks `runbook-host verify` makes),
// and shows the run: the timeline of events and decisions, the step graph with the path taken (graph.mjs),
// deviations, approvals, checkpoints, budgets and share safety. The signatures the module leaves to the
// host (each signed approval's bytes, the receipt's DSSE envelope) are checked here as runbook-host verify
// checks them, with WebCrypto (signatures.mjs). Served by `runbook-host playground --runs DIR`, the page
// also lists the runs under DIR and opens one from that server (bundle-input.mjs `fromServer`).
//
// Every text that comes from the bundle (tool arguments, results, names, sentences) is untrusted: it is put
// in the page with textContent (or as a text node) only, never as HTML.

import { loadPolicy, ModuleMismatch } from './policy.mjs';
import { drawGraph, fitGraph } from './graph.mjs';
import { fromDirectoryEntry, fromFileList, fromServer, fromTarGz, Refused } from './bundle-input.mjs';
import { checkReceipt, checkSignedAnswer, signatureKind } from './signatures.mjs';

const $ = (id) => document.getElementById(id);
const h = (tag, attrs = {}, children = []) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of [].concat(children)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
};
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

let policy = null; // the runbook-policy package's Policy
let opened = 0;

function setStatus(text, kind = 'info') {
  const s = $('load-status');
  s.textContent = text;
  s.dataset.kind = kind;
}

function explain(kind, code) {
  if (code === null || code === undefined) return '';
  try {
    return policy.explain(kind, code) ?? '';
  } catch {
    return '';
  }
}

function text(bytes) {
  if (!bytes) return null;
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return null;
  }
}

function json(bytes) {
  const t = text(bytes);
  if (t === null) return null;
  try {
    return JSON.parse(t);
  } catch {
    return null;
  }
}

function table(caption, cols, rows, empty) {
  if (rows.length === 0) return h('p', { class: 'small' }, empty);
  return h('table', { class: 'steps-table' }, [
    h('caption', { class: 'visually-hidden' }, caption),
    h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c === null || c === undefined ? '—' : String(c)))))),
  ]);
}

// ---- the bundle's files -----------------------------------------------------------------------------------

/** The events.ndjson records: `{n, h, decision, event, eventText}` (eventText: the line as it was fed). */
function records(bytes) {
  const t = text(bytes);
  if (t === null) return [];
  const out = [];
  for (const [i, line] of t.split('\n').entries()) {
    if (line === '') continue;
    let rec;
    try {
      rec = JSON.parse(line);
    } catch {
      out.push({ n: i + 1, broken: line });
      continue;
    }
    if (rec === null || typeof rec !== 'object') {
      out.push({ n: i + 1, broken: line });
      continue;
    }
    // The record is `{"h":..,"decision":D,"event":E}` with D canonical: E is the rest, byte for byte.
    const prefix = `{"h":${JSON.stringify(rec.h)},"decision":${JSON.stringify(rec.decision)},"event":`;
    let eventText = null;
    if (line.startsWith(prefix) && line.endsWith('}')) {
      eventText = line.slice(prefix.length, -1);
      if (typeof rec.event === 'string') eventText = rec.event;
    }
    out.push({ n: i + 1, h: rec.h, decision: rec.decision, event: rec.event, eventText });
  }
  return out;
}

/**
 * The module's sentence for each recorded decision: the events fed again, in order, to a session of the
 * document (what the agent or the person was told when the run happened). Stops, leaving the rest to the
 * codes' sentences, where a decision differs (verify names that place) or the events cannot be replayed
 * (a redacted derivative holds digests, not arguments).
 */
function sentences(docBytes, h0, recs, redacted) {
  const out = new Map();
  if (redacted || !docBytes || !h0) return out;
  let session;
  try {
    session = policy.session(docBytes);
  } catch {
    return out;
  }
  try {
    let prev = h0;
    for (const r of recs) {
      if (r.eventText === null || r.eventText === undefined) break;
      const rec = session.feedLine(r.eventText, prev);
      if (JSON.stringify(JSON.parse(rec.decisionLine)) !== JSON.stringify(r.decision)) break;
      out.set(r.n, rec.explanation);
      prev = rec.link;
    }
  } catch {
    // the rest from the codes
  } finally {
    try {
      session.close();
    } catch {
      // a trapped instance is dropped with it
    }
  }
  return out;
}

function codeSentence(d) {
  const parts = [explain('decision', d.decision)];
  if (d.reason) parts.push(explain('reason', d.reason));
  if (d.deviation) parts.push(explain('deviation', d.deviation));
  for (const r of d.refusals ?? []) parts.push(explain('refusal', r));
  return parts.filter(Boolean).join(' ');
}

function eventSummary(ev) {
  if (ev === null || typeof ev !== 'object') return { type: 'malformed', detail: typeof ev === 'string' ? ev : JSON.stringify(ev) };
  const type = typeof ev.type === 'string' ? ev.type : '?';
  const arg = (v) => (typeof v === 'string' ? v : JSON.stringify(v));
  switch (type) {
    case 'start':
      return { type, detail: `run ${ev.run_id}, profile ${ev.profile}, agent ${ev.agent}, risk ceiling ${ev.risk_ceiling}, coverage ${arg(ev.coverage)}, allowlist ${arg(ev.allowlist)}` };
    case 'invoke':
      return { type, detail: `${ev.tool}${ev.step ? ` (step ${ev.step})` : ''}${ev.guard ? ' [guarded]' : ''}`, code: arg(ev.arguments), codeLabel: 'arguments' };
    case 'result':
      return { type, detail: `${ev.tool}${ev.is_error ? ' (error)' : ''}`, code: arg(ev.result), codeLabel: 'result' };
    case 'approval':
      return { type, detail: `${ev.granted ? 'granted' : 'refused'} by ${ev.approver}${ev.step ? ` for step ${ev.step}` : ''}${ev.call_sha256 ? `, call ${String(ev.call_sha256).slice(0, 12)}…` : ''}${ev.request !== undefined && ev.request !== null ? `, answering request ${ev.request}` : ''}` };
    case 'advance':
      return { type, detail: `to ${ev.step ?? ev.to ?? arg(ev)}` };
    case 'verdict':
      return { type, detail: `step ${ev.step}: ${ev.pass ? 'pass' : 'fail'} by ${ev.by}` };
    case 'end':
      return { type, detail: `reason ${ev.reason}` };
    default:
      return { type, detail: '' };
  }
}

// ---- rendering --------------------------------------------------------------------------------------------

/**
 * What `runbook-host verify` (without --allowed-signers or --key) finds: the module's unaltered verification
 * `m` (`verifyBundle(..., {moduleResult: true})`), then the bytes of each signed answer the module accepted
 * (host/src/verify.rs `verify_dir_with`: a failure there comes before any the module found later), then,
 * when everything passed, the receipt's signature (`verify_bundle`, the check `receipt-signature`).
 */
async function withSignatures(m, files) {
  const v = { ...m, checks: [...m.checks], reasons: [...m.reasons], signers: [], receiptKeyId: null, receiptChecked: false };
  for (const a of m.signedAnswers) {
    const f = await checkSignedAnswer(a);
    if (f) {
      const at = v.checks.indexOf('signatures');
      if (at >= 0) v.checks = v.checks.slice(0, at);
      v.failure = f;
      v.reasons = [];
      return v;
    }
  }
  if (v.checks.includes('signatures')) v.signers = m.signedAnswers.map((a) => ({ place: a.place, principal: a.principal, kind: signatureKind(a.signature), fingerprint: a.fingerprint }));
  if (v.failure === null) {
    const r = await checkReceipt(files);
    v.failure = r.failure;
    v.receiptKeyId = r.keyId;
    if (r.keyId !== null || r.failure !== null) {
      v.checks.push('receipt-signature');
      v.receiptChecked = true;
    }
  }
  v.ok = v.failure === null;
  return v;
}

function renderVerification(v, source, derivation) {
  const box = $('verdict');
  const run = `run ${v.runId ?? '?'} (${v.events} events, outcome ${v.outcome ?? 'none'})`;
  let share;
  let reasons;
  if (v.failure) {
    share = 'blocked';
    // As the CLI: the failure first, then the module's reasons (none when the module or an approval's
    // signature failed; a failed receipt signature keeps them).
    reasons = [{ code: 'VERIFY_FAILED', message: `${v.failure.place}: ${v.failure.message}` }, ...v.reasons];
  } else {
    share = v.reasons.length ? 'local_only' : 'share_ready';
    reasons = [...v.reasons];
  }
  if (v.failure) {
    box.replaceChildren(
      h('strong', { class: 'refused' }, 'NOT VERIFIED'),
      h('br'),
      'Failed at ', h('code', { id: 'failure-place' }, v.failure.place), ': ', h('span', { id: 'failure-message' }, v.failure.message),
    );
  } else {
    box.replaceChildren(
      h('strong', { class: 'admitted' }, 'VERIFIED'),
      h('br'),
      v.redacted ? `${run}: a redacted derivative; its chain, decisions and receipt verify; it cannot be replayed.` : `${run}: every event replayed through this page's module, every decision and the report reproduced byte for byte.`,
    );
  }
  box.dataset.ok = v.failure ? 'no' : 'yes';
  box.dataset.verification = JSON.stringify({
    checks: v.checks, events: v.events, failure: v.failure, outcome: v.outcome, redacted: v.redacted, run_id: v.runId,
    shadow: v.shadow, warnings: v.warnings, receipt_signed: v.receiptSigned, receipt_key_id: v.receiptKeyId,
    signed_answers: v.signedAnswers.map((a) => ({ place: a.place, principal: a.principal, fingerprint: a.fingerprint })),
    approvals_signed_by: v.signers,
    share_safety: { status: share, reasons },
  });
  $('checks').replaceChildren(...(v.checks.length ? v.checks.map((c) => h('li', { class: 'finding', 'data-check': c }, c)) : [h('li', { class: 'finding' }, 'none')]));

  // The signatures: what this page checked of them, and what it leaves to whoever decides whom to trust.
  const items = [];
  const failedAt = v.failure?.place;
  for (const a of v.signers) {
    const what = a.kind === 'passkey' ? 'passkey assertion (WebAuthn)' : 'SSH signature';
    items.push(h('li', { 'data-signature': a.place, 'data-status': 'verified' }, [
      h('code', {}, a.place), `: the ${what} of this approval verifies, by the key it carries (signer `, h('span', {}, a.principal), ', key ', h('code', {}, a.fingerprint),
      '), checked in this page. Whether that key may sign approvals is not: check it with ', h('code', {}, 'runbook-host verify --allowed-signers FILE'), '.',
    ]));
  }
  if (v.signers.length === 0 && v.signedAnswers.length) {
    const a = v.signedAnswers.find((x) => x.place === failedAt);
    if (a) items.push(h('li', { 'data-signature': a.place, 'data-status': 'failed' }, [h('code', {}, a.place), `: this approval's signature does not verify: `, h('span', {}, v.failure.message)]));
  }
  if (v.receiptChecked) {
    items.push(v.receiptKeyId
      ? h('li', { 'data-signature': 'receipt.dsse.json', 'data-status': 'verified' }, [
        h('code', {}, 'receipt.dsse.json'), ': the receipt\'s DSSE signature (ed25519) verifies, checked in this page against the key run.json announces (', h('code', {}, v.receiptKeyId),
        '). Whether to trust that key is not checked: run ', h('code', {}, 'runbook-host verify --key KEY.pub'), ' with the key you trust.',
      ])
      : h('li', { 'data-signature': 'receipt.dsse.json', 'data-status': 'failed' }, [h('code', {}, v.failure.place), ': the receipt\'s signature does not verify: ', h('span', {}, v.failure.message)]));
  } else if (v.receiptSigned) {
    items.push(h('li', { 'data-signature': 'receipt.dsse.json', 'data-status': 'not-reached' }, [h('code', {}, 'receipt.dsse.json'), ': the receipt is signed; its signature was not checked, as an earlier check failed.']));
  }
  if (items.length === 0) {
    items.push(h('li', {}, 'No signature: this bundle holds no signed approval and no signed receipt.'));
  }
  if (source === 'folder') {
    items.push(h('li', {}, 'A folder chosen in a browser is read through symbolic links (the CLI refuses a linked artifact) and its empty subfolders are not listed.'));
  }
  items.push(h('li', {}, 'Who may sign approvals (an allowed-signers file) and which receipt keys to trust are decisions of whoever runs runbook-host verify; this page trusts no key.'));
  $('unchecked').replaceChildren(...items);
  renderShare(share, reasons, v, derivation);
}

function renderShare(status, reasons, v, derivation) {
  const words = { share_ready: 'share_ready: no raw arguments, results or event text inside; it may be shared', local_only: 'local_only: raw data is inside; keep it on this machine or export a redacted derivative (runbook-host export)', blocked: 'blocked: the bundle does not verify (here)' };
  $('share-status').replaceChildren(h('strong', { id: 'share-code' }, status), ` — ${words[status].slice(status.length + 2)}`);
  $('share-status').dataset.status = status;
  $('share-reasons').replaceChildren(...reasons.map((r) => h('li', { 'data-reason': r.code }, [h('code', {}, r.code), `: ${r.message}`])));
  const facts = [];
  if (v.redacted) facts.push('This is a redacted derivative: arguments and results are replaced by their digests (derivation.json says how).');
  if (v.shadow !== null) facts.push(`A shadow run, not enforcement evidence: ${v.shadow} call(s) the module did not allow ran anyway.`);
  for (const w of v.warnings) facts.push(`Warning: ${w}`);
  if (derivation) facts.push(`derivation.json: ${derivation}`);
  $('share-facts').textContent = facts.join(' ');
}

function renderFacts(run, report, v, source, name) {
  const dl = $('run-facts');
  const rows = [];
  const add = (k, val) => {
    if (val === undefined || val === null || val === '') return;
    rows.push(h('dt', {}, k), h('dd', {}, String(val)));
  };
  add('Opened', `${name} (${source})`);
  add('Run id', run?.run_id ?? v.runId);
  if (run?.document) add('Runbook', `${run.document.runbook_id ?? '?'} ${run.document.version ?? ''} (${run.document.file ?? ''}, trust ${run.document.trust ?? '?'}${run.document.pinned_sha256 ? ', pinned' : ''})`);
  add('Outcome', run?.outcome ?? v.outcome);
  if (report) {
    add('Profile', report.profile);
    add('Terminal', report.terminal ?? 'none reached');
    add('Refusals', (report.refusals ?? []).join(', ') || null);
  }
  if (run?.adapter) add('Adapter', `${run.adapter.name}: ${run.adapter.sees ?? ''}`);
  if (run?.host) add('Host', `${run.host.name} ${run.host.version}`);
  if (run?.mode) add('Mode', run.mode);
  for (const l of run?.lifecycle ?? []) add(`Lifecycle: ${l.event}`, l.at);
  add('Events', v.events);
  add('Module', run?.module_sha256);
  dl.replaceChildren(...rows);
}

function renderTimeline(recs, said) {
  const items = recs.map((r) => {
    if (r.broken !== undefined) {
      return h('li', { class: 'entry has-deviation', 'data-line': r.n }, [h('span', { class: 'seq' }, `events.ndjson:${r.n}`), ' not a record: ', h('code', {}, r.broken)]);
    }
    const d = r.decision ?? {};
    const ev = eventSummary(r.event);
    const sentence = said.get(r.n) ?? codeSentence(d);
    const head = h('div', { class: 'entry-head' }, [
      h('span', { class: 'seq' }, `#${d.seq ?? '?'}`),
      h('span', { class: 'at' }, `${typeof r.event?.at === 'number' ? `${r.event.at} ms` : ''}`),
      h('strong', {}, ev.type),
      h('span', { class: 'detail' }, ev.detail),
      h('span', { class: `dec ${d.decision}`, 'data-decision': d.decision }, String(d.decision)),
      d.step ? h('span', { class: 'at-step' }, `at ${d.step}`) : null,
      d.reason ? h('span', { class: 'reason' }, `reason ${d.reason}`) : null,
      d.deviation ? h('span', { class: 'deviation' }, `deviation ${d.deviation}`) : null,
      (d.refusals ?? []).length ? h('span', { class: 'refusal-list' }, `refused: ${d.refusals.join(', ')}`) : null,
    ]);
    return h('li', { class: `entry${d.deviation ? ' has-deviation' : ''}`, 'data-line': r.n, 'data-seq': d.seq }, [
      head,
      h('p', { class: 'sentence' }, sentence),
      ev.code !== undefined ? h('code', { 'aria-label': ev.codeLabel }, ev.code) : null,
    ]);
  });
  $('timeline').replaceChildren(...items);
}

function renderGraph(envelope, report, recs) {
  const box = $('picture');
  // The path taken: the step after each event, consecutive repeats folded.
  const path = [];
  for (const r of recs) {
    const s = r.decision?.step;
    if (typeof s === 'string' && path[path.length - 1] !== s) path.push(s);
  }
  $('path').replaceChildren(path.length ? h('span', {}, [h('strong', {}, 'Path taken: '), path.join(' → ')]) : h('span', { class: 'small' }, 'No step was reached.'));
  $('path').dataset.path = JSON.stringify(path);
  if (!envelope) {
    box.replaceChildren(h('p', { class: 'notice' }, 'No picture: the bundle holds no envelope (the document has no complete model), or it is not readable.'));
    return;
  }
  try {
    const current = report?.terminal ?? path[path.length - 1] ?? null;
    const svg = drawGraph(envelope, { current, report });
    box.replaceChildren(svg);
    fitGraph(svg);
  } catch (e) {
    box.replaceChildren(h('p', { class: 'notice' }, `No picture: ${e.message}`));
  }
}

function renderReportTables(report, signatures, v) {
  const dev = report?.deviations ?? [];
  $('deviations').replaceChildren(table('Deviations', ['event', 'class', 'step', 'tool', 'what it means'], dev.map((d) => [d.seq, d.class, d.step, d.tool, explain('deviation', d.class)]), report ? 'No deviation: every call was in scope and in order.' : 'No report in this bundle.'));
  const signedBySeq = new Map();
  for (const s of signatures) signedBySeq.set(s.seq, s);
  const checkedPlaces = new Map(v.signers.map((a) => [a.place, a]));
  const appr = report?.approvals ?? [];
  $('approvals').replaceChildren(table('Approvals', ['event', 'step', 'approver', 'answer', 'accepted', 'call', 'signed by'], appr.map((a) => {
    const s = signedBySeq.get(a.seq);
    let signed = 'not signed (an answer from the host\'s approval channel)';
    if (s) {
      const kind = /^-----BEGIN SSH SIGNATURE-----/.test(String(s.signature ?? '')) ? 'SSH signature' : /^-----BEGIN RUNBOOK PASSKEY ASSERTION-----/.test(String(s.signature ?? '')) ? 'passkey' : 'signature';
      const place = `signatures.ndjson:${signatures.indexOf(s) + 1}`;
      const status = checkedPlaces.has(place) ? 'verified in this page by the key it carries' : v.failure?.place === place ? 'does NOT verify' : 'not checked';
      signed = `${s.principal ?? '?'}, key ${s.fingerprint ?? '?'} (${kind}; ${status})`;
    }
    return [a.seq, a.step, a.approver, a.granted ? 'granted' : 'refused', a.accepted ? 'yes' : 'no', a.call_sha256 ? `${a.call_sha256.slice(0, 16)}…` : 'the whole step', signed];
  }), report ? 'No approval was asked for or given.' : 'No report in this bundle.'));
  if (checkedPlaces.size) $('approvals').dataset.signed = String(checkedPlaces.size);
  const cps = Object.entries(report?.checkpoints ?? {});
  $('checkpoints').replaceChildren(table('Checkpoints', ['checkpoint', 'status', 'event'], cps.map(([id, c]) => [id, c.status, c.seq]), report ? 'No checkpoint in this runbook.' : 'No report in this bundle.'));
  const buds = Object.entries(report?.budgets ?? {});
  $('budgets').replaceChildren(table('Budgets', ['route', 'used', 'max', 'left'], buds.map(([k, b]) => [k, b.used, b.max, b.max - b.used]), report ? 'No retry budget in this runbook.' : 'No report in this bundle.'));
}

function signatureLines(bytes) {
  const t = text(bytes);
  if (t === null) return [];
  return t.split('\n').filter((l) => l !== '').map((l) => {
    try {
      return JSON.parse(l);
    } catch {
      return {};
    }
  });
}

// ---- opening ----------------------------------------------------------------------------------------------

async function open(read, source) {
  $('open-error').textContent = '';
  if (!policy) {
    $('open-error').textContent = 'The policy module is not loaded: nothing can be verified.';
    return;
  }
  let bundle;
  try {
    bundle = await read();
  } catch (e) {
    $('open-error').textContent = e instanceof Refused ? `Not opened: ${e.message}` : `Cannot read the bundle: ${e.message}`;
    $('verdict').textContent = 'No bundle opened.';
    $('verdict').dataset.ok = 'refused';
    $('verdict').dataset.verification = JSON.stringify({ refused: e.message });
    document.body.dataset.opened = String(++opened);
    return;
  }
  const files = new Map(bundle.entries.filter(([, x]) => x instanceof Uint8Array));
  let v;
  try {
    v = await withSignatures(policy.verifyBundle(bundle.entries, policy.sha256, null, { moduleResult: true }), files);
  } catch (e) {
    $('open-error').textContent = `Cannot verify: ${e.message}`;
    document.body.dataset.opened = String(++opened);
    return;
  }
  const run = json(files.get('run.json'));
  const report = json(files.get('report.json'));
  const envelope = json(files.get('envelope.json'));
  const derivation = json(files.get('derivation.json'));
  const docName = typeof run?.artifacts?.document === 'string' ? run.artifacts.document : files.has('runbook.yaml') ? 'runbook.yaml' : 'runbook.json';
  const recs = records(files.get('events.ndjson'));
  const derived = derivation ? `${typeof derivation.transformation === 'string' ? derivation.transformation : 'a redaction'}, from run ${derivation.source_run_id ?? '?'} at ${derivation.created_at ?? '?'}` : null;
  renderVerification(v, source, derived);
  renderFacts(run, report, v, source, bundle.name);
  renderTimeline(recs, sentences(files.get(docName), run?.chain_h0, recs, v.redacted || derivation !== null));
  renderGraph(envelope, report, recs);
  renderReportTables(report, signatureLines(files.get('signatures.ndjson')), v);
  setStatus(`Opened ${bundle.name}: ${v.failure ? 'not verified' : 'verified'}.`, v.failure ? 'error' : 'info');
  document.body.dataset.opened = String(++opened);
}

/** The runs a `runbook-host playground --runs DIR` serves (`runs/index.json`), listed to open; none elsewhere. */
async function listRuns() {
  let index;
  try {
    const r = await fetch('runs/index.json', { cache: 'no-store', credentials: 'omit', redirect: 'error' });
    if (!r.ok || !(r.headers.get('content-type') ?? '').startsWith('application/json')) return;
    index = await r.json();
  } catch {
    return;
  }
  const runs = Array.isArray(index?.runs) ? index.runs.filter((x) => typeof x?.run_id === 'string' && Array.isArray(x.entries)) : [];
  const box = $('server-runs');
  box.hidden = false;
  if (runs.length === 0) {
    $('server-runs-list').replaceChildren(h('li', { class: 'small' }, 'No run under the folder this server was given.'));
    return;
  }
  $('server-runs-list').replaceChildren(...runs.map((x) => {
    const when = Number.isFinite(x.modified_ms) && x.modified_ms > 0 ? new Date(x.modified_ms).toISOString().replace('.000Z', 'Z') : '';
    const b = h('button', { type: 'button', class: 'run-open', 'data-run': x.run_id }, `Open ${x.run_id}`);
    b.addEventListener('click', () => open(() => fromServer('runs/', x.run_id, x.entries), 'server'));
    return h('li', {}, [b, when ? h('span', { class: 'small' }, ` run.json written ${when}`) : null]);
  }));
  document.body.dataset.runsListed = String(runs.length);
}

function isTar(name) {
  return /\.(tar\.gz|tgz)$/i.test(name);
}

function wire() {
  $('bundle-dir').addEventListener('change', async (e) => {
    const list = [...(e.target.files ?? [])];
    e.target.value = '';
    if (list.length) await open(() => fromFileList(list), 'folder');
  });
  $('bundle-tar').addEventListener('change', async (e) => {
    const f = e.target.files?.[0];
    e.target.value = '';
    if (f) await open(() => fromTarGz(f), 'archive');
  });
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => {
    e.preventDefault();
    drop.dataset.over = 'yes';
  });
  drop.addEventListener('dragleave', () => delete drop.dataset.over);
  drop.addEventListener('drop', async (e) => {
    e.preventDefault();
    delete drop.dataset.over;
    const item = [...(e.dataTransfer?.items ?? [])].find((i) => i.kind === 'file');
    const entry = item?.webkitGetAsEntry?.();
    const file = item?.getAsFile();
    if (entry?.isDirectory) await open(() => fromDirectoryEntry(entry), 'folder');
    else if (file && isTar(file.name)) await open(() => fromTarGz(file), 'archive');
    else $('open-error').textContent = 'Drop a run folder or a .tar.gz of one.';
  });
  // A drop anywhere else must not make the browser navigate to the file.
  window.addEventListener('dragover', (e) => e.preventDefault());
  window.addEventListener('drop', (e) => e.preventDefault());
}

async function main() {
  wire();
  let loaded;
  try {
    loaded = await loadPolicy();
  } catch (e) {
    if (e.info) {
      $('module-sha').textContent = e.info.sha256;
      $('module-check').textContent = `✗ differs from module.sha256 (${e.info.expected})`;
      $('module-check').dataset.ok = 'no';
    }
    setStatus(e instanceof ModuleMismatch ? e.message : `Cannot load the policy module: ${e?.message ?? e}`, 'error');
    document.body.dataset.failed = 'yes';
    return;
  }
  policy = loaded.policy;
  $('module-sha').textContent = loaded.sha256;
  $('module-check').textContent = '✓ equals module.sha256: these are the bytes this page loaded and runs';
  $('module-check').dataset.ok = 'yes';
  document.body.dataset.moduleSha256 = loaded.sha256;
  const version = policy.version();
  $('module-info').textContent = `runbook:policy component ${version}, ${loaded.size.toLocaleString('en')} bytes, hashed here with WebCrypto and run by the runbook-policy package (JavaScript glue by jco ${loaded.jco}). No bundle leaves this page.`;
  setStatus(`Policy module ${version} loaded and verified. Open a bundle.`);
  await listRuns();
  document.body.dataset.ready = 'yes';
}

main();
