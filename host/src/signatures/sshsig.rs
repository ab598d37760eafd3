//! Verify SSH signatures (`ssh-keygen -Y sign`, the SSHSIG format) against an
//! OpenSSH `allowed_signers` file.
//!
//! A human approves a gated tool call by signing a message with an SSH key the
//! agent cannot use (ideally a FIDO `-sk` key that needs a physical touch); the
//! host checks the signature here. [`verify`] answers what
//! `ssh-keygen -Y verify -f allowed_signers -I principal -n namespace -s sig < msg`
//! would answer, except where noted:
//!
//! - The whole `allowed_signers` file is parsed up front and any malformed
//!   line is an error (ssh-keygen only notices bad lines it reaches while
//!   searching), so a typo is found when the file is loaded, not at approval time.
//! - FIDO (`sk-*`) signatures must carry the user-presence (touch) flag;
//!   ssh-keygen accepts them without it. The touch is the point of using such a key.
//! - `valid-after`/`valid-before` times without a `Z` suffix are read as UTC;
//!   ssh-keygen reads them in the local time zone (the same on a UTC host).
//! - `cert-authority` lines are parsed but never authorise anything:
//!   certificate signatures are out of scope.
//! - Key types: ssh-ed25519, ecdsa-sha2-nistp256, sk-ssh-ed25519@openssh.com
//!   and sk-ecdsa-sha2-nistp256@openssh.com. Other keys (RSA, P-384, ...) may
//!   appear in the file but their signatures are refused as unsupported.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use ssh_key::public::KeyData;
use ssh_key::{EcdsaCurve, HashAlg, PublicKey, SshSig};

/// Why a signature was not accepted (or the allowed signers could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigError {
    /// A line of the allowed_signers file is not valid (1-based line number).
    Malformed { line: usize, msg: String },
    /// The signature text is not an armored SSHSIG blob.
    NotArmored(String),
    /// The signing key's type is one this module does not verify.
    UnsupportedKeyType { key_type: String },
    /// The signature does not match the message (or is not by the key it names).
    BadSignature,
    /// The signature was made for another namespace.
    WrongNamespace { expected: String, found: String },
    /// A FIDO signature made without the user touching the authenticator.
    UserPresenceMissing { fingerprint: String },
    /// A passkey assertion made without user verification (a PIN or a biometric, not only a touch).
    UserVerificationMissing { fingerprint: String },
    /// No line of allowed_signers has the signing key.
    UnknownKey { fingerprint: String },
    /// The key is listed, but not for this principal.
    PrincipalMismatch { principal: String, fingerprint: String },
    /// The key is only listed as a `cert-authority`, which this module does not support.
    CertAuthorityOnly { line: usize },
    /// The key's `namespaces=` option excludes this namespace.
    NamespaceNotAllowed { namespace: String, line: usize },
    /// The key's `valid-after` time is later than now.
    NotYetValid { line: usize },
    /// The key's `valid-before` time is earlier than now.
    Expired { line: usize },
    /// Reading a file or running ssh-keygen failed.
    Io(String),
}

impl fmt::Display for SigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { line, msg } => write!(f, "allowed_signers line {line}: {msg}"),
            Self::NotArmored(why) => write!(f, "the signature is not an armored SSH signature: {why}"),
            Self::UnsupportedKeyType { key_type } => {
                write!(f, "signatures by {key_type} keys are not supported")
            }
            Self::BadSignature => write!(f, "the signature does not match the message"),
            Self::WrongNamespace { expected, found } => write!(f, "the signature is for namespace \"{found}\", not the expected \"{expected}\""),
            Self::UserPresenceMissing { fingerprint } => write!(f, "the security key {fingerprint} signed without being touched (no user presence)"),
            Self::UserVerificationMissing { fingerprint } => {
                write!(f, "the passkey {fingerprint} signed without verifying the user (no PIN or biometric)")
            }
            Self::UnknownKey { fingerprint } => {
                write!(f, "the signing key {fingerprint} is not in allowed_signers")
            }
            Self::PrincipalMismatch { principal, fingerprint } => write!(f, "the signing key {fingerprint} is not allowed to sign as \"{principal}\""),
            Self::CertAuthorityOnly { line } => write!(
                f,
                "the signing key is only listed as a cert-authority (line {line}); \
                 certificate signatures are not supported"
            ),
            Self::NamespaceNotAllowed { namespace, line } => {
                write!(f, "allowed_signers line {line} does not allow the key to sign in namespace \"{namespace}\"")
            }
            Self::NotYetValid { line } => {
                write!(f, "the signing key is not valid yet (valid-after, allowed_signers line {line})")
            }
            Self::Expired { line } => {
                write!(f, "the signing key has expired (valid-before, allowed_signers line {line})")
            }
            Self::Io(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for SigError {}

/// A successfully verified signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The principal asked for, or (when none was asked for) the first
    /// principal listed on the matching allowed_signers line, which may be a
    /// pattern such as `*@example.com` if that is what the line lists.
    pub principal: String,
    /// The allowed_signers line that authorised the key (1-based).
    pub line: usize,
    /// The signing key's fingerprint, `SHA256:...` as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The signing key's type, e.g. `sk-ssh-ed25519@openssh.com`.
    pub key_type: String,
}

/// A parsed allowed_signers file.
#[derive(Debug, Clone, Default)]
pub struct AllowedSigners {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    line: usize,
    /// OpenSSH pattern-list, matched against the requested principal.
    principals: String,
    opts: Options,
    key: KeyData,
}

#[derive(Debug, Clone, Default)]
struct Options {
    cert_authority: bool,
    /// OpenSSH pattern-list of allowed namespaces; None allows all.
    namespaces: Option<String>,
    valid_after: Option<u64>,
    valid_before: Option<u64>,
}

impl AllowedSigners {
    /// Parses the text of an allowed_signers file; the error names the first bad line.
    pub fn parse(text: &str) -> Result<Self, SigError> {
        let mut entries = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            if let Some(entry) = parse_line(raw, line).map_err(|msg| SigError::Malformed { line, msg })? {
                entries.push(entry);
            }
        }
        Ok(Self { entries })
    }

    /// Reads and parses an allowed_signers file.
    pub fn load(path: &Path) -> Result<Self, SigError> {
        let text = std::fs::read_to_string(path).map_err(|e| SigError::Io(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// Number of key lines (comments and blank lines excluded).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The lines (1-based) and types of the keys that sign without a human present: software keys
    /// (`ssh-ed25519`, `ecdsa-sha2-nistp256`), which whoever reads the private file or reaches an ssh-agent
    /// holding it signs with. A FIDO (`sk-`) key signs only on a touch, which [`verify`] checks.
    pub fn software_keys(&self) -> Vec<(usize, String)> {
        self.entries
            .iter()
            .filter(|e| !matches!(e.key, KeyData::SkEd25519(_) | KeyData::SkEcdsaSha2NistP256(_)))
            .map(|e| (e.line, e.key.algorithm().to_string()))
            .collect()
    }
}

/// Parses one line: `principals [options] keytype base64 [comment]`.
/// Returns None for blank and comment lines.
fn parse_line(raw: &str, line: usize) -> Result<Option<Entry>, String> {
    let rest = raw.trim_start();
    if rest.is_empty() || rest.starts_with('#') {
        return Ok(None);
    }
    let (principals, rest) = split_field(rest)?;
    let principals = principals.replace('"', ""); // ssh-keygen allows quoting the field
    if principals.is_empty() {
        return Err("empty principals field".into());
    }
    let rest = rest.trim_start();
    // Every option but `cert-authority` has `=`, and no key type name does.
    let (first, after_first) = split_field(rest)?;
    let (opts, rest) =
        if first.contains('=') || starts_with_ignore_case(first, "cert-authority") { (parse_options(first)?, after_first) } else { (Options::default(), rest) };
    let key = parse_key(rest)?;
    Ok(Some(Entry { line, principals, opts, key }))
}

/// Splits off the first whitespace-delimited field; whitespace inside double
/// quotes does not end it.
fn split_field(s: &str) -> Result<(&str, &str), String> {
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return Ok((&s[..i], &s[i..])),
            _ => {}
        }
    }
    if quoted {
        return Err("unterminated double quote".into());
    }
    Ok((s, ""))
}

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// Parses `opt,opt,...` (names case-insensitive, values double-quoted as ssh-keygen requires).
fn parse_options(opts: &str) -> Result<Options, String> {
    let mut o = Options::default();
    for opt in split_commas(opts) {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n.to_ascii_lowercase(), Some(v)),
            None => (opt.to_ascii_lowercase(), None),
        };
        let quoted = || value.and_then(|v| v.strip_prefix('"')?.strip_suffix('"')).ok_or_else(|| format!("option {name} needs a double-quoted value"));
        match name.as_str() {
            "cert-authority" if value.is_none() => o.cert_authority = true,
            "namespaces" if o.namespaces.is_none() => o.namespaces = Some(quoted()?.to_string()),
            "valid-after" if o.valid_after.is_none() => o.valid_after = Some(parse_time(quoted()?)?),
            "valid-before" if o.valid_before.is_none() => o.valid_before = Some(parse_time(quoted()?)?),
            "namespaces" | "valid-after" | "valid-before" => {
                return Err(format!("option {name} given twice"));
            }
            _ => return Err(format!("unsupported option \"{opt}\"")),
        }
    }
    if let (Some(after), Some(before)) = (o.valid_after, o.valid_before) {
        if before <= after {
            return Err("valid-before is not later than valid-after".into());
        }
    }
    Ok(o)
}

/// Splits on commas outside double quotes.
fn split_commas(s: &str) -> Vec<&str> {
    let (mut parts, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Parses `keytype base64 [comment]`.
fn parse_key(s: &str) -> Result<KeyData, String> {
    let mut fields = s.split_whitespace();
    let (Some(key_type), Some(base64)) = (fields.next(), fields.next()) else {
        return Err("missing key (expected: principals [options] keytype base64key)".into());
    };
    let key = PublicKey::from_openssh(&format!("{key_type} {base64}")).map_err(|e| format!("invalid {key_type} key: {e}"))?;
    Ok(key.key_data().clone())
}

/// Parses an OpenSSH timestamp `YYYYMMDD[HHMM[SS]][Z]` to Unix seconds (read as UTC).
fn parse_time(s: &str) -> Result<u64, String> {
    let bad = || format!("invalid timestamp \"{s}\" (expected YYYYMMDD[HHMM[SS]][Z])");
    let digits = s.strip_suffix(['Z', 'z']).unwrap_or(s);
    if !matches!(digits.len(), 8 | 12 | 14) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| digits.get(r).map_or(0, |d| d.parse::<u64>().unwrap_or(0));
    let (y, m, d) = (num(0..4), num(4..6), num(6..8));
    let (hh, mm, ss) = (num(8..10), num(10..12), num(12..14));
    let month_days = [31, if is_leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if y < 1970 || !(1..=12).contains(&m) || d < 1 || d > month_days[m as usize - 1] {
        return Err(bad());
    }
    if hh > 23 || mm > 59 || ss > 59 {
        return Err(bad());
    }
    let days_before_year: u64 = (1970..y).map(|yr| if is_leap(yr) { 366 } else { 365 }).sum();
    let days = days_before_year + month_days[..m as usize - 1].iter().sum::<u64>() + d - 1;
    Ok(days * 86_400 + hh * 3_600 + mm * 60 + ss)
}

fn is_leap(y: u64) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

/// OpenSSH pattern-list match: comma-separated `*`/`?` globs, where a matching
/// `!pattern` vetoes the whole list.
fn match_list(s: &str, list: &str) -> bool {
    let mut matched = false;
    for pat in list.split(',') {
        match pat.strip_prefix('!') {
            Some(neg) if glob(s.as_bytes(), neg.as_bytes()) => return false,
            Some(_) => {}
            None => matched |= glob(s.as_bytes(), pat.as_bytes()),
        }
    }
    matched
}

/// `*` matches any run of bytes, `?` exactly one; everything else literally.
fn glob(s: &[u8], p: &[u8]) -> bool {
    let (mut si, mut pi) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None; // (pattern after '*', text position)
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            si += 1;
            pi += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            backtrack = Some((pi + 1, si));
            pi += 1;
        } else if let Some((bp, bs)) = backtrack {
            // Let the last '*' swallow one more byte and retry.
            backtrack = Some((bp, bs + 1));
            pi = bp;
            si = bs + 1;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn is_supported(key: &KeyData) -> bool {
    match key {
        KeyData::Ed25519(_) | KeyData::SkEd25519(_) | KeyData::SkEcdsaSha2NistP256(_) => true,
        KeyData::Ecdsa(k) => k.curve() == EcdsaCurve::NistP256,
        _ => false,
    }
}

/// Verifies `armored` (an `ssh-keygen -Y sign` signature) over `message` in
/// `namespace`, and checks that `allowed` lets the key sign as `principal`
/// (any listed principal when None) at time `now_unix`.
pub fn verify(allowed: &AllowedSigners, principal: Option<&str>, namespace: &str, message: &[u8], armored: &str, now_unix: u64) -> Result<Verified, SigError> {
    if crate::signatures::passkey::is_armored(armored) {
        return crate::signatures::passkey::verify(allowed, principal, namespace, message, armored, now_unix);
    }
    let sig = SshSig::from_pem(armored.trim()).map_err(|e| SigError::NotArmored(e.to_string()))?;
    if sig.namespace() != namespace {
        return Err(SigError::WrongNamespace { expected: namespace.into(), found: sig.namespace().into() });
    }
    let key = sig.public_key();
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    let key_type = key.algorithm().as_str().to_string();
    if !is_supported(key) {
        return Err(SigError::UnsupportedKeyType { key_type });
    }
    // ssh-keygen always signs (and verifies) with an empty reserved field.
    if !sig.reserved().is_empty() {
        return Err(SigError::BadSignature);
    }
    PublicKey::from(key.clone()).verify(namespace, message, &sig).map_err(|_| SigError::BadSignature)?;
    if key.is_sk_ed25519() || key.is_sk_ecdsa_p256() {
        // A FIDO signature ends with flags (1 byte) and a counter (4 bytes);
        // flag 0x01 means the user touched the authenticator.
        let bytes = sig.signature_bytes();
        let flags = bytes.len().checked_sub(5).map_or(0, |i| bytes[i]);
        if flags & 0x01 == 0 {
            return Err(SigError::UserPresenceMissing { fingerprint });
        }
    }
    allowed.authorise(key, principal, namespace, now_unix)
}

impl AllowedSigners {
    /// Whether a line lets `key` (whose signature was checked) sign as `principal` (any listed principal
    /// when None) in `namespace` at `now_unix`. Like ssh-keygen, any one line that fully matches
    /// authorises the key; if none does, the reason is the one of the line that got furthest.
    pub fn authorise(&self, key: &KeyData, principal: Option<&str>, namespace: &str, now_unix: u64) -> Result<Verified, SigError> {
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        let key_type = key.algorithm().as_str().to_string();
        let mut refusal = None;
        for e in self.entries.iter().filter(|e| e.key == *key) {
            if e.opts.cert_authority {
                refusal.get_or_insert(SigError::CertAuthorityOnly { line: e.line });
                continue;
            }
            if let Some(p) = principal {
                if !match_list(p, &e.principals) {
                    refusal.get_or_insert(SigError::PrincipalMismatch { principal: p.into(), fingerprint: fingerprint.clone() });
                    continue;
                }
            }
            let err = if e.opts.namespaces.as_deref().is_some_and(|ns| !match_list(namespace, ns)) {
                SigError::NamespaceNotAllowed { namespace: namespace.into(), line: e.line }
            } else if e.opts.valid_after.is_some_and(|t| now_unix < t) {
                SigError::NotYetValid { line: e.line }
            } else if e.opts.valid_before.is_some_and(|t| now_unix > t) {
                SigError::Expired { line: e.line }
            } else {
                let principal = match principal {
                    Some(p) => p.to_string(),
                    None => e.principals.split(',').find(|p| !p.starts_with('!')).unwrap_or("").into(),
                };
                return Ok(Verified { principal, line: e.line, fingerprint, key_type });
            };
            refusal = Some(err);
        }
        Err(refusal.unwrap_or(SigError::UnknownKey { fingerprint }))
    }
}

/// Signs `message` by running `ssh-keygen -Y sign -f KEY -n NAMESPACE`, as a
/// human's own tooling would; for a `-sk` key ssh-keygen asks for a touch.
/// `key_path` may be a private key, or a public key whose private half is in ssh-agent.
pub fn sign_with_ssh_keygen(key_path: &Path, namespace: &str, message: &[u8]) -> Result<String, SigError> {
    // The message goes in on stdin, so the signature comes out on stdout.
    // stderr stays the caller's so the "Confirm user presence" prompt is seen.
    let mut child = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", namespace, "-f"])
        .arg(key_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| SigError::Io(format!("cannot run ssh-keygen: {e}")))?;
    // ssh-keygen reads all of stdin before writing, so this cannot deadlock.
    // A write error (ssh-keygen quit early) is reported after its exit status,
    // which says more.
    let written = child.stdin.take().map(|mut stdin| stdin.write_all(message));
    let out = child.wait_with_output().map_err(|e| SigError::Io(format!("ssh-keygen -Y sign failed: {e}")))?;
    if !out.status.success() {
        return Err(SigError::Io(format!("ssh-keygen -Y sign failed ({})", out.status)));
    }
    if let Some(Err(e)) = written {
        return Err(SigError::Io(format!("cannot send the message to ssh-keygen: {e}")));
    }
    String::from_utf8(out.stdout).map_err(|_| SigError::Io("ssh-keygen printed a non-UTF-8 signature".into()))
}

/// The public key (`keytype base64`, as an `allowed_signers` line takes it) inside an armored signature:
/// for checking a recorded signature by the key that made it, before asking whether that key is trusted.
pub fn signer_of(armored: &str) -> Result<String, SigError> {
    if crate::signatures::passkey::is_armored(armored) {
        return crate::signatures::passkey::signer_of(armored);
    }
    let sig = ssh_key::SshSig::from_pem(armored.trim()).map_err(|e| SigError::NotArmored(e.to_string()))?;
    ssh_key::PublicKey::from(sig.public_key().clone()).to_openssh().map_err(|e| SigError::NotArmored(e.to_string()))
}
