//! The wire form of the WIT's enums, for messages and files. The WIT names are the wire codes themselves
//! (`needs-approval`, `host-trap`, `read-only`), so the form is derived from the type's own name by one rule
//! instead of a second table; profiles are the one exception (`R0`), and a test checks every variant
//! against the bytes the module writes. The sentences come from the module (`explain`).

use crate::{Outcome, Policy, Profile};

/// The kebab-case wire code of a WIT enum value (`NeedsApproval` -> `needs-approval`).
pub fn code<T: std::fmt::Debug>(v: T) -> String {
    let full = format!("{v:?}");
    // wasmtime's bindings print `Type::Variant`.
    let name = full.rsplit("::").next().unwrap_or(&full);
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `R0`, `R1`, `R2`.
pub fn profile(p: Profile) -> String {
    code(p).to_ascii_uppercase()
}

/// `completed: a terminal was reached, ...` (the module's sentence for the outcome).
pub fn outcome_sentence(policy: &Policy, o: Outcome) -> String {
    let c = code(o);
    match policy.explain("outcome", &c) {
        Ok(Some(s)) => format!("{c} ({s})"),
        _ => c,
    }
}
