// The signatures of a run bundle, checked in the page with WebCrypto (Ed25519, ECDSA P-256, SHA-2) and no
// other cryptography: what host/src/verify.rs checks after the module's `verify-bundle` passed.
//
// - `checkSignedAnswer(a)`: one signed answer the module found (`signatures.ndjson:N`), by the key the
//   signature carries, and its recorded fingerprint (host/src/verify.rs `signature_bytes`): an SSH signature
//   (SSHSIG, host/src/sshsig.rs) or a passkey assertion (host/src/passkey.rs).
// - `checkReceipt(files)`: the receipt's DSSE envelope (`receipt.dsse.json`) against the key run.json
//   announces (host/src/verify.rs `receipt_signature`, host/src/dsse.rs `verify_envelope`).
//
// Each returns null when the signature holds, or the failure `{place, message}` in the CLI's words where
// they can be matched (a parser's own message, such as a JSON syntax error, is the browser's).

export const SIGNATURE_NAMESPACE = 'runbook-approval@runbook-host';
const SSHSIG_BEGIN = '-----BEGIN SSH SIGNATURE-----';
const SSHSIG_END = '-----END SSH SIGNATURE-----';
const PASSKEY_BEGIN = '-----BEGIN RUNBOOK PASSKEY ASSERTION-----';
const PASSKEY_END = '-----END RUNBOOK PASSKEY ASSERTION-----';

const subtle = globalThis.crypto.subtle;
const enc = new TextEncoder();
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** A check that did not pass: `message` is SigError's Display (host/src/sshsig.rs). */
class SigError extends Error {}
const notArmored = (why) => new SigError(`the signature is not an armored SSH signature: ${why}`);
const BAD_SIGNATURE = 'the signature does not match the message';

// ---- bytes ----------------------------------------------------------------------------------------------

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const equal = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const sha = async (alg, bytes) => new Uint8Array(await subtle.digest(alg, bytes));
const hex = (bytes) => [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');

/** Standard base64 (padding required: the Rust decoders' STANDARD), or null. */
function b64(text) {
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text)) return null;
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

/** Base64 of either alphabet, padding optional (DSSE's lenient decoding), or null. */
function b64Lenient(text) {
  const std = /^[A-Za-z0-9+/]*={0,2}$/.test(text);
  const url = /^[A-Za-z0-9_-]*={0,2}$/.test(text);
  if (!std && !url) return null;
  const bare = text.replace(/=+$/, '');
  if (bare.length % 4 === 1) return null;
  const t = (std ? bare : bare.replace(/-/g, '+').replace(/_/g, '/'));
  return b64(t + '='.repeat((4 - (t.length % 4)) % 4));
}

/** Base64url without padding (URL_SAFE_NO_PAD), or null. */
function b64url(text) {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) return null;
  return b64Lenient(text);
}

const toB64 = (bytes) => btoa(String.fromCharCode(...bytes));
const toB64url = (bytes) => toB64(bytes).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');

/** An SSH wire-format reader (RFC 4251): uint32, string, byte. */
class Reader {
  constructor(bytes) {
    this.b = bytes;
    this.at = 0;
  }

  u32() {
    if (this.at + 4 > this.b.length) throw new Error('truncated');
    const v = new DataView(this.b.buffer, this.b.byteOffset + this.at, 4).getUint32(0);
    this.at += 4;
    return v;
  }

  bytes(n) {
    if (this.at + n > this.b.length) throw new Error('truncated');
    const v = this.b.subarray(this.at, this.at + n);
    this.at += n;
    return v;
  }

  string() {
    return this.bytes(this.u32());
  }

  text() {
    return strictUtf8.decode(this.string());
  }

  get done() {
    return this.at === this.b.length;
  }
}

const sshString = (bytes) => {
  const len = new Uint8Array(4);
  new DataView(len.buffer).setUint32(0, bytes.length);
  return concat(len, bytes);
};

// ---- keys -----------------------------------------------------------------------------------------------

const ED25519_SPKI_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]);
const SUPPORTED = new Set(['ssh-ed25519', 'ecdsa-sha2-nistp256', 'sk-ssh-ed25519@openssh.com', 'sk-ecdsa-sha2-nistp256@openssh.com']);

/**
 * An SSH public key blob: `{type, blob, fingerprint, verify(data, sigBlob)}` for a supported key, or
 * `{type, blob, fingerprint}` only. `application` for a security key.
 */
async function sshKey(blob) {
  const r = new Reader(blob);
  const type = r.text();
  const key = { type, blob, fingerprint: `SHA256:${toB64(await sha('SHA-256', blob)).replace(/=+$/, '')}` };
  if (!SUPPORTED.has(type)) {
    // Parse no further: refused as unsupported once the signature's namespace was checked.
    return key;
  }
  if (type === 'ssh-ed25519' || type === 'sk-ssh-ed25519@openssh.com') {
    const pk = r.string();
    if (pk.length !== 32) throw new Error('an Ed25519 key is 32 bytes');
    key.ed25519 = pk;
  } else {
    const curve = r.text();
    if (curve !== 'nistp256') throw new Error(`curve ${curve}`);
    const q = r.string();
    if (q.length !== 65 || q[0] !== 4) throw new Error('not an uncompressed P-256 point');
    key.p256 = q;
  }
  if (type.startsWith('sk-')) key.application = r.text();
  if (!r.done) throw new Error('trailing bytes after the key');
  return key;
}

/** A `keytype base64` public key (an allowed-signers key), as its blob; the type must match. */
async function sshKeyFromLine(line) {
  const [type, data] = line.trim().split(/\s+/);
  const blob = data === undefined ? null : b64(data);
  if (!blob) throw new Error('not `keytype base64`');
  const key = await sshKey(blob);
  if (key.type !== type) throw new Error(`the key is ${key.type}, the line says ${type}`);
  return key;
}

/** DER `SEQUENCE { INTEGER r, INTEGER s }` or SSH `mpint r, mpint s` integers as WebCrypto's r || s. */
function fixed32(int) {
  let i = 0;
  while (i < int.length - 1 && int[i] === 0) i++;
  const v = int.subarray(i);
  if (v.length > 32 || (v.length === 1 && v[0] === 0)) throw new Error('out of range');
  const out = new Uint8Array(32);
  out.set(v, 32 - v.length);
  return out;
}

function derToP1363(der) {
  // SEQUENCE (short length) of two INTEGERs, nothing after.
  if (der.length < 8 || der[0] !== 0x30 || der[1] !== der.length - 2 || der[1] > 0x7f) throw new Error('not DER');
  let at = 2;
  const ints = [];
  for (let k = 0; k < 2; k++) {
    if (der[at] !== 0x02) throw new Error('not DER');
    const n = der[at + 1];
    if (n === 0 || n > 33 || at + 2 + n > der.length) throw new Error('not DER');
    const v = der.subarray(at + 2, at + 2 + n);
    if (v[0] & 0x80 || (n > 1 && v[0] === 0 && !(v[1] & 0x80))) throw new Error('not DER');
    ints.push(fixed32(v));
    at += 2 + n;
  }
  if (at !== der.length) throw new Error('not DER');
  return concat(ints[0], ints[1]);
}

async function verifyEd25519(pk, sig, data) {
  if (sig.length !== 64) return false;
  const k = await subtle.importKey('raw', pk, { name: 'Ed25519' }, false, ['verify']);
  return subtle.verify({ name: 'Ed25519' }, k, sig, data);
}

async function verifyP256(q, sig, data) {
  const k = await subtle.importKey('raw', q, { name: 'ECDSA', namedCurve: 'P-256' }, false, ['verify']);
  return subtle.verify({ name: 'ECDSA', hash: 'SHA-256' }, k, sig, data);
}

// ---- SSH signatures (SSHSIG, PROTOCOL.sshsig) -----------------------------------------------------------

/** host/src/sshsig.rs `verify`, for the key the signature carries: returns the key's fingerprint. */
async function verifySshsig(armored, namespace, message) {
  const text = armored.trim();
  if (!text.startsWith(SSHSIG_BEGIN) || !text.endsWith(SSHSIG_END)) throw notArmored('PEM Base64 error: no SSH SIGNATURE armor');
  const blob = b64(text.slice(SSHSIG_BEGIN.length, -SSHSIG_END.length).replace(/\s+/g, ''));
  if (!blob) throw notArmored('PEM Base64 error: not base64');
  let parsed;
  try {
    const r = new Reader(blob);
    if (strictUtf8.decode(r.bytes(6)) !== 'SSHSIG') throw new Error('no SSHSIG preamble');
    const version = r.u32();
    if (version !== 1) throw new Error(`version ${version}`);
    parsed = { keyBlob: r.string(), namespace: r.text(), reserved: r.string(), hashAlg: r.text(), signature: r.string() };
    if (!r.done) throw new Error('trailing bytes');
    parsed.key = await sshKey(parsed.keyBlob);
  } catch (e) {
    throw notArmored(`SSHSIG: ${e.message}`);
  }
  if (parsed.namespace !== namespace) throw new SigError(`the signature is for namespace "${parsed.namespace}", not the expected "${namespace}"`);
  const key = parsed.key;
  if (!SUPPORTED.has(key.type)) throw new SigError(`signatures by ${key.type} keys are not supported`);
  if (parsed.reserved.length !== 0) throw new SigError(BAD_SIGNATURE);
  const hashName = { sha512: 'SHA-512', sha256: 'SHA-256' }[parsed.hashAlg];
  if (!hashName) throw new SigError(BAD_SIGNATURE);
  // The signed data: the preamble, then namespace, reserved, hash algorithm and H(message) as SSH strings.
  const signed = concat(enc.encode('SSHSIG'), sshString(enc.encode(parsed.namespace)), sshString(parsed.reserved), sshString(enc.encode(parsed.hashAlg)), sshString(await sha(hashName, message)));
  let ok = false;
  let flags = 0;
  try {
    const r = new Reader(parsed.signature);
    const sigType = r.text();
    if (sigType !== key.type) throw new Error('another key type');
    const raw = r.string();
    let data = signed;
    if (key.type.startsWith('sk-')) {
      // A FIDO signature ends with flags (1 byte) and a counter (4 bytes), and covers
      // SHA-256(application) || flags || counter || SHA-256(data) (PROTOCOL.u2f).
      const tail = r.bytes(5);
      flags = tail[0];
      data = concat(await sha('SHA-256', enc.encode(key.application)), tail, await sha('SHA-256', signed));
    }
    if (!r.done) throw new Error('trailing bytes');
    if (key.ed25519) {
      ok = await verifyEd25519(key.ed25519, raw, data);
    } else {
      const m = new Reader(raw);
      const sig = concat(fixed32(m.string()), fixed32(m.string()));
      if (!m.done) throw new Error('trailing bytes');
      ok = await verifyP256(key.p256, sig, data);
    }
  } catch {
    ok = false;
  }
  if (!ok) throw new SigError(BAD_SIGNATURE);
  if (key.type.startsWith('sk-') && (flags & 0x01) === 0) throw new SigError(`the security key ${key.fingerprint} signed without being touched (no user presence)`);
  return key.fingerprint;
}

// ---- passkey assertions (host/src/passkey.rs) -----------------------------------------------------------

function originOfRp(origin, rp) {
  let rest = null;
  if (rp === 'localhost') {
    if (origin.startsWith('http://')) rest = origin.slice(7);
    else if (origin.startsWith('https://')) rest = origin.slice(8);
  } else if (origin.startsWith('https://')) rest = origin.slice(8);
  if (rest === null || !rest.startsWith(rp)) return false;
  const port = rest.slice(rp.length);
  return port === '' || /^:[0-9]{1,5}$/.test(port);
}

/** JSON text of a value as serde_json's Display writes it (for the CLI's words). */
const shown = (v) => (v === undefined ? 'null' : JSON.stringify(v));

async function verifyPasskey(armored, namespace, message) {
  if (namespace !== SIGNATURE_NAMESPACE) throw new SigError(`the signature is for namespace "${SIGNATURE_NAMESPACE}", not the expected "${namespace}"`);
  const bad = (why) => notArmored(`passkey assertion: ${why}`);
  const text = armored.trim();
  if (!text.startsWith(PASSKEY_BEGIN) || !text.endsWith(PASSKEY_END)) throw bad('no armor');
  const bytes = b64(text.slice(PASSKEY_BEGIN.length, -PASSKEY_END.length).replace(/\s+/g, ''));
  if (!bytes) throw bad('not base64');
  let v;
  try {
    v = JSON.parse(strictUtf8.decode(bytes));
  } catch {
    throw bad('not JSON');
  }
  const field = (k) => {
    if (typeof v?.[k] !== 'string') throw bad(`\`${k}\` is missing`);
    return v[k];
  };
  const bin = (k) => {
    const out = b64url(field(k));
    if (!out) throw bad(`\`${k}\` is not base64url`);
    return out;
  };
  const a = { publicKey: field('public_key'), authenticatorData: bin('authenticator_data'), clientDataJSON: bin('client_data_json'), signature: bin('signature') };
  let key;
  try {
    key = await sshKeyFromLine(a.publicKey);
  } catch (e) {
    throw bad(`the key: ${e.message}`);
  }
  if (key.type !== 'sk-ecdsa-sha2-nistp256@openssh.com' && key.type !== 'sk-ssh-ed25519@openssh.com') throw new SigError(`signatures by ${key.type} keys are not supported`);
  const rp = key.application;
  // The client data: a webauthn.get whose challenge is the payload itself, on a page of the relying party.
  let cd;
  try {
    cd = JSON.parse(strictUtf8.decode(a.clientDataJSON));
  } catch {
    throw bad('the client data is not JSON');
  }
  if (cd?.type !== 'webauthn.get') throw bad(`the client data's type is ${shown(cd?.type)}, not webauthn.get`);
  if (cd.challenge !== toB64url(message)) throw new SigError(BAD_SIGNATURE);
  const origin = typeof cd.origin === 'string' ? cd.origin : '';
  if (!originOfRp(origin, rp)) throw bad(`made on ${JSON.stringify(origin)}, not a page of ${rp}`);
  if (cd.crossOrigin === true || (cd.topOrigin !== undefined && cd.topOrigin !== null)) throw bad('made in a frame of another site');
  // The authenticator data: that relying party, the user present and verified.
  const ad = a.authenticatorData;
  if (ad.length < 37) throw bad('the authenticator data is short');
  if (!equal(ad.subarray(0, 32), await sha('SHA-256', enc.encode(rp)))) throw bad(`the authenticator signed for another relying party than ${rp}`);
  if ((ad[32] & 0x01) === 0) throw new SigError(`the security key ${key.fingerprint} signed without being touched (no user presence)`);
  if ((ad[32] & 0x04) === 0) throw new SigError(`the passkey ${key.fingerprint} signed without verifying the user (no PIN or biometric)`);
  // The signature over authenticatorData || SHA-256(clientDataJSON): ES256 (DER) or Ed25519.
  const signed = concat(ad, await sha('SHA-256', a.clientDataJSON));
  let ok = false;
  try {
    ok = key.ed25519 ? await verifyEd25519(key.ed25519, a.signature, signed) : await verifyP256(key.p256, derToP1363(a.signature), signed);
  } catch {
    ok = false;
  }
  if (!ok) throw new SigError(BAD_SIGNATURE);
  return key.fingerprint;
}

/**
 * One signed answer (`{place, principal, message, signature, fingerprint}`, from the module's
 * `signed_answers`): null when its signature verifies by the key it carries and `fingerprint` is that
 * key's; else the failure as `runbook-host verify` words it. Also `kind`: `ssh` or `passkey`.
 */
export async function checkSignedAnswer(a) {
  const passkey = a.signature.trimStart().startsWith(PASSKEY_BEGIN);
  let fingerprint;
  try {
    const msg = enc.encode(a.message);
    fingerprint = passkey ? await verifyPasskey(a.signature, SIGNATURE_NAMESPACE, msg) : await verifySshsig(a.signature, SIGNATURE_NAMESPACE, msg);
  } catch (e) {
    if (!(e instanceof SigError)) throw e;
    return { place: a.place, message: `the signature does not verify: ${e.message}` };
  }
  if (a.fingerprint !== fingerprint) return { place: a.place, message: "`fingerprint` is not the signing key's" };
  return null;
}

export const signatureKind = (signature) => (String(signature).trimStart().startsWith(PASSKEY_BEGIN) ? 'passkey' : 'ssh');

// ---- the receipt's DSSE envelope (host/src/dsse.rs) -----------------------------------------------------

const PAYLOAD_TYPE = 'application/vnd.in-toto+json';
const STATEMENT_TYPE = 'https://in-toto.io/Statement/v1';
const RECEIPT_PREDICATE = 'urn:runbook-host:receipt:v1';
const RECEIPT_SIGNATURE = 'receipt.dsse.json';
const MAX_ENVELOPE_BYTES = 1 << 20;
const MAX_SIGNATURES = 32;
const MAX_LISTED = 8;

class DsseError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
  }
}
const malformed = (m) => new DsseError('signature-malformed', m);

function list(items) {
  if (items.length === 0) return 'none';
  let out = items.slice(0, MAX_LISTED).join(', ');
  if (items.length > MAX_LISTED) out += `, and ${items.length - MAX_LISTED} more`;
  return out;
}

/** The ed25519 public key of an SPKI PEM (host/src/dsse.rs `read_public`): its 32 bytes. */
function readPublic(pem) {
  const start = pem.indexOf('-----BEGIN ');
  let label = null;
  let block = null;
  if (start >= 0) {
    const rest = pem.slice(start + 11);
    const l = rest.indexOf('-----');
    if (l >= 0) {
      label = rest.slice(0, l);
      const endMarker = `-----END ${label}-----`;
      const end = pem.indexOf(endMarker, start);
      if (end >= 0) block = pem.slice(start, end + endMarker.length);
      else label = null;
    }
  }
  if (label !== 'PUBLIC KEY') {
    const found = label === null ? 'no complete PEM block' : `a "${label}" PEM block`;
    throw malformed(`expected an ed25519 public key in SPKI PEM (-----BEGIN PUBLIC KEY-----, as \`openssl pkey -pubout\` writes), found ${found}`);
  }
  const der = b64(block.slice('-----BEGIN PUBLIC KEY-----'.length, -'-----END PUBLIC KEY-----'.length).replace(/\s+/g, ''));
  if (!der || der.length !== 44 || !equal(der.subarray(0, 12), ED25519_SPKI_PREFIX)) throw malformed('PUBLIC KEY PEM is not an ed25519 public key');
  return der.subarray(12);
}

const keyId = async (pk) => `sha256:${hex(await sha('SHA-256', concat(ED25519_SPKI_PREFIX, pk)))}`;

/** DSSE v1 pre-authentication encoding. */
const pae = (type, payload) => concat(enc.encode(`DSSEv1 ${enc.encode(type).length} ${type} ${payload.length} `), payload);

/** host/src/dsse.rs `verify_envelope` with one trusted key and no expiry in force: the signer's key id. */
async function verifyEnvelope(envelope, pk, expectedSha256) {
  if (envelope.length > MAX_ENVELOPE_BYTES) throw malformed(`envelope is ${envelope.length} bytes; at most ${MAX_ENVELOPE_BYTES} bytes are accepted`);
  let env;
  try {
    env = JSON.parse(strictUtf8.decode(envelope));
  } catch (e) {
    throw malformed(`envelope is not DSSE envelope JSON: ${e.message}`);
  }
  const shapeError = (why) => malformed(`envelope is not DSSE envelope JSON: ${why}`);
  if (env === null || typeof env !== 'object' || Array.isArray(env)) throw shapeError('not an object');
  for (const k of ['payloadType', 'payload']) if (typeof env[k] !== 'string') throw shapeError(`\`${k}\` is not a string`);
  if (!Array.isArray(env.signatures)) throw shapeError('`signatures` is not a list');
  for (const s of env.signatures) {
    if (s === null || typeof s !== 'object' || Array.isArray(s) || typeof s.sig !== 'string' || (s.keyid !== undefined && typeof s.keyid !== 'string')) throw shapeError('a signature is not {keyid, sig}');
  }
  if (env.payloadType !== PAYLOAD_TYPE) throw malformed(`payloadType is ${JSON.stringify(env.payloadType)}, expected ${JSON.stringify(PAYLOAD_TYPE)}`);
  const payload = b64Lenient(env.payload);
  if (!payload) throw malformed('payload is not base64');
  if (env.signatures.length === 0) throw malformed('envelope has no signatures');
  if (env.signatures.length > MAX_SIGNATURES) throw malformed(`envelope has ${env.signatures.length} signatures; at most ${MAX_SIGNATURES} are accepted`);
  const sigs = env.signatures.map((s, i) => {
    const keyid = s.keyid ?? '';
    const bytes = b64Lenient(s.sig);
    if (!bytes) throw malformed(`signature ${i} (keyid ${JSON.stringify(keyid)}) is not base64`);
    return { keyid, bytes };
  });
  // Signatures: the keyid is a hint; a signature naming the trusted key (or none) that fails is tampering.
  const msg = pae(PAYLOAD_TYPE, payload);
  const trustedId = await keyId(pk);
  let signed = false;
  const invalid = [];
  for (const [i, { keyid, bytes }] of sigs.entries()) {
    if (await verifyEd25519(pk, bytes, msg).catch(() => false)) {
      signed = true;
      break;
    }
    if (keyid === trustedId || keyid === '') invalid.push(`signature ${i} (keyid ${keyid === '' ? 'unset' : keyid})`);
  }
  if (!signed && invalid.length) {
    throw new DsseError('signature-invalid', `${list(invalid)} does not verify over the envelope's payload: the payload or signature was altered, or it was made over other bytes`);
  }
  if (!signed) {
    throw new DsseError('signature-untrusted', `no signature by a trusted key: envelope key ids [${list(sigs.map((s) => s.keyid || 'unset'))}], trusted key ids [${trustedId}]`);
  }
  // The payload: an in-toto Statement v1 about this receipt.
  let st;
  try {
    st = JSON.parse(strictUtf8.decode(payload));
  } catch (e) {
    throw malformed(`payload is not JSON: ${e.message}`);
  }
  if (st === null || typeof st !== 'object' || Array.isArray(st)) throw malformed('payload is not a JSON object (an in-toto Statement)');
  if (st._type !== STATEMENT_TYPE) throw malformed(`statement _type is ${st._type === undefined ? 'missing' : JSON.stringify(st._type)}, expected ${JSON.stringify(STATEMENT_TYPE)} (in-toto Statement v1)`);
  if (typeof st.predicateType !== 'string') throw malformed(`statement predicateType is ${st.predicateType === undefined ? 'missing' : JSON.stringify(st.predicateType)}, expected a string`);
  if (!Array.isArray(st.subject) || st.subject.length === 0) throw malformed('statement subject is not a non-empty array');
  const predicate = st.predicate;
  if (predicate !== undefined && (predicate === null || typeof predicate !== 'object' || Array.isArray(predicate))) throw malformed(`statement predicate is ${JSON.stringify(predicate)}, expected a JSON object`);
  if (st.predicateType !== RECEIPT_PREDICATE) throw new DsseError('signature-mismatch', `predicateType is ${JSON.stringify(st.predicateType)}, expected ${JSON.stringify(RECEIPT_PREDICATE)}`);
  const digests = st.subject.map((s) => (typeof s?.digest?.sha256 === 'string' ? s.digest.sha256 : null));
  if (!digests.includes(expectedSha256)) {
    const found = st.subject.map((s, i) => `${JSON.stringify(typeof s?.name === 'string' ? s.name : '')} sha256=${digests[i] ?? '(none)'}`);
    throw new DsseError('signature-mismatch', `no subject has the document's sha256 ${expectedSha256}; subjects found: ${list(found)}`);
  }
  if (predicate?.expires !== undefined) {
    // Checked for its form only: a receipt's signature does not expire (verify passes the beginning of time).
    if (typeof predicate.expires !== 'string') throw malformed(`predicate expires is ${JSON.stringify(predicate.expires)}, expected an RFC 3339 string`);
    if (!/^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/.test(predicate.expires)) throw malformed(`predicate expires ${JSON.stringify(predicate.expires)} is not an RFC 3339 time`);
  }
  return trustedId;
}

/** The object keys of a JSON text that appear twice in one object (a file whose bytes nothing pins). */
function duplicateKey(text) {
  const stack = [];
  const re = /"(?:[^"\\]|\\.)*"|[{}[\]:,]/g;
  let m;
  let prev = null;
  while ((m = re.exec(text))) {
    const t = m[0];
    if (t === '{') stack.push(new Set());
    else if (t === '[') stack.push(null);
    else if (t === '}' || t === ']') stack.pop();
    else if (t === ':' && prev && prev.startsWith('"')) {
      const top = stack[stack.length - 1];
      if (top) {
        const key = JSON.parse(prev);
        if (top.has(key)) return key;
        top.add(key);
      }
    }
    prev = t;
  }
  return null;
}

/**
 * host/src/verify.rs `receipt_signature` without --key: the receipt's envelope against the key run.json
 * announces. `files`: the bundle's regular files (name → bytes). Returns `{failure: null | {place, message},
 * keyId: null | string}`; `keyId` null and no failure when the receipt is not signed.
 */
export async function checkReceipt(files) {
  const fail = (place, message) => ({ failure: { place, message }, keyId: null });
  let run;
  try {
    run = JSON.parse(strictUtf8.decode(files.get('run.json')));
  } catch (e) {
    return fail('run.json', `not JSON: ${e.message}`);
  }
  const announced = run?.receipt_signature ?? null;
  const envelope = files.get(RECEIPT_SIGNATURE);
  if (!envelope) {
    if (announced !== null) return fail(RECEIPT_SIGNATURE, 'missing: run.json says the receipt was signed (`receipt_signature`), and the signature is gone');
    return { failure: null, keyId: null };
  }
  if (typeof announced?.public_key !== 'string') return fail('run.json', `${RECEIPT_SIGNATURE} is present but run.json names no \`receipt_signature.public_key\``);
  let pk;
  try {
    pk = readPublic(announced.public_key);
  } catch (e) {
    return fail('run.json', `\`receipt_signature.public_key\`: ${e.message}`);
  }
  const receipt = files.get('receipt.json');
  if (!receipt) return fail('receipt.json', 'missing');
  let id;
  try {
    id = await verifyEnvelope(envelope, pk, hex(await sha('SHA-256', receipt)));
  } catch (e) {
    if (!(e instanceof DsseError)) throw e;
    return fail(RECEIPT_SIGNATURE, e.message);
  }
  if (typeof announced.key_id === 'string' && announced.key_id !== id) return fail('run.json', `\`receipt_signature.key_id\` is ${announced.key_id}, the receipt is signed by ${id}`);
  // Exactly one signature, named by its key: anything else in the envelope is something nobody signed.
  const text = strictUtf8.decode(envelope);
  const twice = duplicateKey(text);
  if (twice !== null) return fail(RECEIPT_SIGNATURE, `not JSON: the key \`${twice}\` appears twice`);
  const sigs = JSON.parse(text).signatures;
  if (sigs.length !== 1 || sigs[0].keyid !== id) return fail(RECEIPT_SIGNATURE, `a receipt's envelope holds exactly one signature, with keyid ${id}`);
  return { failure: null, keyId: id };
}
