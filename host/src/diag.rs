//! Findings as a person reads them: the place, the source line and a caret under the column.

use runbook_host::{Finding, Severity};

pub fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// Renders one finding against the document's text (as rustc and Cedar do).
pub fn render(f: &Finding, path: &str, source: &str) -> String {
    let mut out = format!("{}[{}]: {}\n", severity(f.severity), f.code, f.message);
    let gutter = f.line.to_string().len();
    out.push_str(&format!("{:gutter$}--> {path}:{}:{}\n", "", f.line, f.column));
    if let Some(text) = source.lines().nth(f.line.saturating_sub(1) as usize) {
        let text = text.trim_end_matches('\r');
        // A tab is shown as one visible character (`→`), so that it can be seen (YAML refuses tabs as
        // indentation) and the caret, one column a character, stays under its column.
        let shown: String = text.chars().map(|c| if c == '\t' { '→' } else { c }).collect();
        out.push_str(&format!("{:gutter$} |\n", ""));
        out.push_str(&format!("{} | {shown}\n", f.line));
        out.push_str(&format!("{:gutter$} | {:col$}^\n", "", "", col = f.column.saturating_sub(1) as usize));
    }
    if !f.pointer.is_empty() {
        out.push_str(&format!("{:gutter$} = at {}\n", "", f.pointer));
    }
    out
}

pub fn finding_json(f: &Finding) -> serde_json::Value {
    serde_json::json!({
        "code": f.code,
        "severity": severity(f.severity),
        "line": f.line,
        "column": f.column,
        "pointer": f.pointer,
        "message": f.message,
    })
}
