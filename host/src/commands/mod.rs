/// `println!` that returns the error instead of panicking, so a closed pipe (`| head`) ends quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

pub mod approve;
pub mod check;
pub mod envelope;
pub mod hook;
pub mod lint;
pub mod module;
pub mod playground;
pub mod registry;
pub mod replay;
pub mod run;
pub mod sign;
pub mod verify;

use anyhow::{Context, Result};
use std::io::{IsTerminal, Read, Write};

/// Reads a document (or `-` for stdin) exactly as bytes: its sha256 is of these bytes.
pub fn read_input(path: &str) -> Result<Vec<u8>> {
    if path == "-" {
        let mut v = Vec::new();
        std::io::stdin().read_to_end(&mut v).context("reading standard input")?;
        return Ok(v);
    }
    std::fs::read(path).with_context(|| format!("cannot read `{path}`"))
}

/// The process's one policy module (the bundle's chain hashing uses the same one, so a command loads
/// the component once).
pub fn policy() -> Result<std::sync::Arc<runbook_host::Policy>> {
    runbook_host::bundle::shared_policy().map(std::sync::Arc::clone).map_err(anyhow::Error::from)
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
