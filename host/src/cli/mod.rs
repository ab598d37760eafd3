/// `println!` that returns the error instead of panicking, so a closed pipe (`| head`) ends quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

pub mod approvals;
pub mod approve;
pub mod check;
pub mod envelope;
pub mod export;
pub mod hook;
pub mod keygen;
pub mod lint;
pub mod module;
pub mod playground;
pub mod registry;
pub mod replay;
pub mod run;
pub mod service;
pub mod sign;
pub mod verify;

use anyhow::{Context, Result};
use std::io::{IsTerminal, Read, Write};

/// Reads a document (or `-` for stdin) exactly as bytes: its sha256 is of these bytes. At most
/// [`runbook_host::files::MAX_SMALL_FILE_BYTES`] (the module refuses a document over 1 MiB anyway): a
/// larger file is refused before it is read.
pub fn read_input(path: &str) -> Result<Vec<u8>> {
    const MAX: u64 = runbook_host::files::MAX_SMALL_FILE_BYTES;
    if path == "-" {
        let mut v = Vec::new();
        std::io::stdin().take(MAX + 1).read_to_end(&mut v).context("reading standard input")?;
        anyhow::ensure!(v.len() as u64 <= MAX, "standard input holds more than the {MAX} bytes this host reads");
        return Ok(v);
    }
    runbook_host::files::read_path_bounded(std::path::Path::new(path), MAX).with_context(|| format!("cannot read `{path}`"))
}

/// The process's one policy module (the bundle's chain hashing uses the same one, so a command loads
/// the component once).
pub fn policy() -> Result<std::sync::Arc<runbook_host::Policy>> {
    runbook_host::files::shared_policy().map(std::sync::Arc::clone).map_err(anyhow::Error::from)
}

/// Writes exact bytes to stdout, adding a newline only for a person at a terminal.
pub fn write_exact(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    if std::io::stdout().is_terminal() {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
