//! Signatures the host checks and makes: DSSE envelopes over documents, modules and receipts ([`dsse`]), and
//! the approvals of a human: SSH signatures ([`sshsig`]) and passkey assertions ([`passkey`]), both checked
//! against one `allowed_signers` file ([`Signers`]) with the time of one clock.

pub mod dsse;
pub mod passkey;
pub mod sshsig;

use crate::clock::Clock;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;

/// The SSH signature namespace of an approval (`ssh-keygen -Y sign -n`): a signature made for anything
/// else (a git commit, a file) never counts as an approval.
pub const SIGNATURE_NAMESPACE: &str = "runbook-approval@runbook-host";

/// Why an `allowed_signers` file cannot be used (the file is named in the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignersError(pub String);

impl std::fmt::Display for SignersError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SignersError {}

/// The keys whose SSH signatures make an approval a human's: an `allowed_signers` file (ssh-keygen's
/// format) that the agent cannot write (docs/security.md), and its sha256, which the run records.
#[derive(Clone, Debug)]
pub struct Signers {
    pub set: Arc<sshsig::AllowedSigners>,
    pub sha256: String,
    /// Where it was read from (the approval page reads it again for the passkeys it may ask for).
    pub path: std::path::PathBuf,
}

impl Signers {
    /// Loads an `allowed_signers` file. A software key in it is refused unless `allow_software_keys`
    /// (issue 28, F4: with the human's key in an ssh-agent the agent can reach, `ssh-keygen -Y sign` made
    /// an approval accepted as theirs); when allowed, it is said on stderr each time the file is loaded.
    pub fn load(path: &Path, allow_software_keys: bool) -> Result<Signers, SignersError> {
        let bytes = std::fs::read(path).map_err(|e| SignersError(format!("cannot read the allowed signers {}: {e}", path.display())))?;
        let text = String::from_utf8(bytes.clone()).map_err(|_| SignersError(format!("{}: not UTF-8", path.display())))?;
        let set = sshsig::AllowedSigners::parse(&text).map_err(|e| SignersError(format!("{}: {e}", path.display())))?;
        if set.is_empty() {
            return Err(SignersError(format!("{} lists no key: no approval could ever be signed", path.display())));
        }
        let software = set.software_keys();
        if let Some((line, kind)) = software.first() {
            let lines = software.iter().map(|(l, _)| l.to_string()).collect::<Vec<_>>().join(", ");
            if !allow_software_keys {
                return Err(SignersError(format!(
                    "{}:{line}: a software key ({kind}) signs without a human: whoever can read its private file, or reach an ssh-agent \
                     holding it (`SSH_AUTH_SOCK`, `ssh -A`), signs as its principal. List FIDO keys (`ssh-keygen -t ed25519-sk`), which \
                     sign only on a touch, or pass --allow-software-keys to accept this explicitly",
                    path.display()
                )));
            }
            eprintln!(
                "runbook-host: --allow-software-keys: {} lists {} software key(s) (line {lines}); an approval they sign does not prove a human was present",
                path.display(),
                software.len()
            );
        }
        Ok(Signers { set: Arc::new(set), sha256: hex::encode(Sha256::digest(&bytes)), path: path.to_path_buf() })
    }
}

impl Signers {
    /// Whether `armored` (an SSH signature or a passkey assertion) signs `message` in the approvals'
    /// namespace by a key of this file, for `principal` when given, valid at `clock`'s time: the one
    /// check of an approval's signature, for the run driver, the approval page and `verify`.
    pub fn check(&self, principal: Option<&str>, message: &[u8], armored: &str, clock: &Clock) -> Result<sshsig::Verified, sshsig::SigError> {
        check_approval(&self.set, principal, message, armored, clock)
    }
}

/// [`Signers::check`] against a parsed set (a bundle's own key, a file read for one answer).
pub fn check_approval(
    set: &sshsig::AllowedSigners,
    principal: Option<&str>,
    message: &[u8],
    armored: &str,
    clock: &Clock,
) -> Result<sshsig::Verified, sshsig::SigError> {
    sshsig::verify(set, principal, SIGNATURE_NAMESPACE, message, armored, clock.now_ms() / 1000)
}
