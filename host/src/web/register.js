// Registration page of `runbook-host approvers add`: creates a passkey (user verification required), then
// signs the server's proof challenge with it, so the server records only a key the browser holds.
const b64u = {
  encode: (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, ''),
  decode: (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0)),
};
const status = document.getElementById('status');
const say = (text, ok) => { status.textContent = text; status.className = 'status ' + (ok ? 'ok' : 'bad'); };

const options = await (await fetch('/register/api/options')).json();
document.getElementById('principal').textContent = options.principal;
if (location.hostname !== options.rp_id) {
  const n = document.getElementById('notice');
  n.hidden = false;
  n.textContent = `Passkeys work only on http://${options.rp_id}:${location.port}/register (this page was opened as ${location.host}).`;
}

document.getElementById('register').addEventListener('click', async (ev) => {
  const button = ev.currentTarget;
  button.disabled = true;
  try {
    const cred = await navigator.credentials.create({ publicKey: {
      rp: { id: options.rp_id, name: 'runbook-host approvals' },
      user: { id: b64u.decode(options.user_id), name: options.principal, displayName: options.principal },
      challenge: b64u.decode(options.create_challenge),
      pubKeyCredParams: [{ type: 'public-key', alg: -7 }, { type: 'public-key', alg: -8 }],
      authenticatorSelection: { userVerification: 'required', residentKey: 'preferred' },
      attestation: 'none',
      timeout: 120000,
    } });
    const proof = await navigator.credentials.get({ publicKey: {
      rpId: options.rp_id,
      challenge: b64u.decode(options.proof_challenge),
      allowCredentials: [{ type: 'public-key', id: cred.rawId }],
      userVerification: 'required',
      timeout: 120000,
    } });
    const body = {
      credential_id: b64u.encode(cred.rawId),
      alg: cred.response.getPublicKeyAlgorithm(),
      public_key: b64u.encode(cred.response.getPublicKey()),
      create_client_data_json: b64u.encode(cred.response.clientDataJSON),
      create_authenticator_data: b64u.encode(cred.response.getAuthenticatorData()),
      authenticator_data: b64u.encode(proof.response.authenticatorData),
      client_data_json: b64u.encode(proof.response.clientDataJSON),
      signature: b64u.encode(proof.response.signature),
    };
    const r = await fetch('/register/api/finish', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const answer = await r.json();
    if (r.ok) say(`Registered: ${answer.line}`, true);
    else { say(`Refused: ${answer.error}`, false); button.disabled = false; }
  } catch (e) {
    say(`No passkey was registered: ${e.name}: ${e.message}`, false);
    button.disabled = false;
  }
});
