// The approval page: lists the gated calls the host issued and answers one with a passkey assertion whose
// challenge is that request's approval payload. The arguments are shown as the host indented them, token
// for token (re-encoding them here could change a number the hash covers). Everything shown from a run is set as text, never as markup.
const b64u = {
  encode: (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, ''),
  decode: (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0)),
};
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
};
const runsBox = document.getElementById('runs');
const empty = document.getElementById('empty');
const globalStatus = document.getElementById('global-status');
let shown = '';
let passkeys = [];
let rpId = 'localhost';

function row(dl, term, value, code = false) {
  dl.append(el('dt', { text: term }), el('dd', {}, code ? el('code', { text: value }) : document.createTextNode(value)));
}

function proseBlock(prose) {
  if (!prose || typeof prose !== 'object') return null;
  const parts = [];
  if (prose.body) parts.push(prose.body);
  if (prose.expect) parts.push(`Expect: ${prose.expect}`);
  if (!parts.length) return null;
  return el('div', {},
    el('p', { class: 'untrusted-label', text: "The step's text, from the runbook (untrusted: it does not decide anything):" }),
    el('blockquote', { class: 'untrusted', text: parts.join('\n\n') }));
}

async function answer(req, granted, status, buttons) {
  buttons.forEach((b) => { b.disabled = true; });
  status.className = 'status';
  status.textContent = 'Waiting for your passkey…';
  try {
    const challenge = new TextEncoder().encode(granted ? req.payload.approve : req.payload.deny);
    const cred = await navigator.credentials.get({ publicKey: {
      rpId,
      challenge,
      allowCredentials: passkeys.map((id) => ({ type: 'public-key', id: b64u.decode(id) })),
      userVerification: 'required',
      timeout: 60000,
    } });
    const body = {
      run_id: req.run_id, id: req.id, granted,
      credential_id: b64u.encode(cred.rawId),
      authenticator_data: b64u.encode(cred.response.authenticatorData),
      client_data_json: b64u.encode(cred.response.clientDataJSON),
      signature: b64u.encode(cred.response.signature),
    };
    const r = await fetch('/approvals/api/answer', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const a = await r.json();
    if (r.ok) {
      status.className = 'status ok';
      status.textContent = `${a.answered} by ${a.principal} (passkey ${a.fingerprint})`;
      globalStatus.textContent = `Request ${a.id} of run ${a.run_id}: ${a.answered} by ${a.principal}.`;
    } else {
      status.className = 'status bad';
      status.textContent = `Refused: ${a.error}`;
      buttons.forEach((b) => { b.disabled = false; });
    }
  } catch (e) {
    status.className = 'status bad';
    status.textContent = `Not answered: ${e.name}: ${e.message}`;
    buttons.forEach((b) => { b.disabled = false; });
  }
}

function requestCard(req) {
  const card = el('article', { class: 'request', 'data-request': req.id, 'aria-labelledby': `h-${req.id}` });
  card.append(el('h3', { id: `h-${req.id}`, text: `Step ${req.step ?? '(none)'}: ${req.tool}` }));
  const dl = el('dl');
  row(dl, 'Tool', req.tool, true);
  row(dl, 'Request', `${req.id} (the module's request ${req.request})`);
  row(dl, 'Call sha256', req.call_sha256, true);
  if (req.requested_at) row(dl, 'Requested at', req.requested_at);
  card.append(dl);
  card.append(el('p', { class: 'muted', text: 'Arguments, exactly as hashed (canonical JSON):' }));
  card.append(el('pre', { class: 'arguments', text: req.arguments }));
  const prose = proseBlock(req.prose);
  if (prose) card.append(prose);
  const details = el('details', {}, el('summary', { text: 'What your passkey signs' }),
    el('pre', { class: 'payload', text: req.payload.approve }));
  card.append(details);
  const status = el('div', { class: 'status', role: 'status', 'aria-live': 'polite' });
  const approve = el('button', { type: 'button', class: 'approve', text: 'Approve with passkey' });
  const deny = el('button', { type: 'button', class: 'deny', text: 'Deny with passkey' });
  approve.addEventListener('click', () => answer(req, true, status, [approve, deny]));
  deny.addEventListener('click', () => answer(req, false, status, [approve, deny]));
  card.append(el('div', {}, approve, deny), status);
  return card;
}

function runSection(run) {
  const sec = el('section', { class: 'run', 'data-run': run.run_id, 'aria-labelledby': `r-${run.run_id}` });
  sec.append(el('h2', { id: `r-${run.run_id}`, text: `Run ${run.run_id}` }));
  if (run.error) {
    sec.append(el('p', { class: 'status bad', text: `Nothing of this run can be answered: ${run.error}` }));
    return sec;
  }
  const dl = el('dl');
  if (run.title) row(dl, 'Runbook', run.title);
  row(dl, 'Document', String(run.document ?? ''), true);
  row(dl, 'Document sha256', String(run.document_sha256 ?? ''), true);
  row(dl, 'Current step', String(run.current_step ?? '(none)'));
  const path = (run.visited ?? []).map((v) => `${v.step} ×${v.visits}${v.assert ? ` (${v.assert})` : ''}`).join(', ');
  row(dl, 'Steps visited', path || '(none yet)');
  row(dl, 'Events', String(run.events));
  row(dl, 'Deviations', String((run.deviations ?? []).length));
  sec.append(dl);
  for (const req of run.requests) sec.append(requestCard(req));
  for (const r of run.refused ?? []) sec.append(el('p', { class: 'muted', text: `Request ${r.id} is not shown: ${r.why}.` }));
  return sec;
}

async function refresh() {
  let data;
  try {
    const r = await fetch('/approvals/api/pending');
    data = await r.json();
    if (!r.ok) throw new Error(data.error);
  } catch (e) {
    globalStatus.textContent = `Cannot read the pending calls: ${e.message}`;
    return;
  }
  passkeys = data.passkeys;
  rpId = data.rp_id;
  const notice = document.getElementById('notice');
  if (location.hostname !== rpId) {
    notice.hidden = false;
    notice.textContent = `Passkeys work only on http://${rpId}:${location.port}/approvals (this page was opened as ${location.host}).`;
  } else if (!passkeys.length) {
    notice.hidden = false;
    notice.textContent = 'No passkey is registered in the allowed signers file: register one with `runbook-host approvers add NAME`.';
  } else {
    notice.hidden = true;
  }
  // Redraw only when the set of requests changed, so a person reading or using a card is not disturbed.
  const key = JSON.stringify(data.runs.map((r) => [r.run_id, r.error, (r.requests ?? []).map((q) => q.id)]));
  if (key === shown) return;
  shown = key;
  runsBox.replaceChildren(...data.runs.filter((r) => r.error || r.requests.length).map(runSection));
  empty.hidden = runsBox.children.length > 0;
}

await refresh();
setInterval(refresh, 2000);
