//! The hash chain of a run's recorded events (DESIGN 9.22), computed in the module so that every host
//! and `verify` compute it alike.
//!
//! `hN = sha256(hN-1 || E || D)`: `hN-1` as its 64 lowercase hex characters; `E` the JCS of the event with
//! the values of its top-level `arguments` and `result` keys replaced by the hex sha256 of their JCS (a
//! line that is not JSON the module reads enters as the JCS of the JSON string holding it); `D` the JCS of
//! the decision line; concatenated as UTF-8 with no separator.

use crate::doc::sha256_hex;
use crate::jcs;
use crate::value::{Node, Value};
use sha2::{Digest, Sha256};

/// JCS of any text: its canonical form when it is JSON, else the canonical JSON string holding it.
pub fn jcs_or_string(text: &str) -> String {
    crate::canonicalize(text).unwrap_or_else(|_| jcs::to_string(&jcs::s(text)))
}

/// `E` of an event tree: arguments and result replaced by their digests.
pub fn event_form_node(event: &Node) -> String {
    match &event.value {
        Value::Obj(members) if members.iter().any(|m| m.key == "arguments" || m.key == "result") => {
            let mut n = event.clone();
            if let Value::Obj(ms) = &mut n.value {
                for m in ms.iter_mut().filter(|m| m.key == "arguments" || m.key == "result") {
                    m.value = jcs::s(&sha256_hex(jcs::to_string(&m.value).as_bytes()));
                }
            }
            jcs::to_string(&n)
        }
        _ => jcs::to_string(event),
    }
}

/// `E` of an event line (with `digested`, the line is already in that form: a redacted bundle's).
pub fn event_form(event_line: &str, digested: bool) -> String {
    if digested {
        return jcs_or_string(event_line);
    }
    let p = crate::json::parse(event_line);
    match (p.node, p.issues.is_empty()) {
        (Some(n), true) => event_form_node(&n),
        _ => jcs_or_string(event_line),
    }
}

/// `hN` from `E` and `D` already in their canonical forms.
pub fn link_of_forms(prev: &str, event_form: &str, decision_jcs: &str) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(event_form.as_bytes());
    h.update(decision_jcs.as_bytes());
    hex(&h.finalize())
}

/// `hN` of one recorded line.
pub fn link(prev: &str, event_line: &str, decision_line: &str, digested: bool) -> String {
    link_of_forms(prev, &event_form(event_line, digested), &jcs_or_string(decision_line))
}

fn hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(D[(b >> 4) as usize] as char);
        s.push(D[(b & 15) as usize] as char);
    }
    s
}
