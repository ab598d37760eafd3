//! The hash chain of a run's recorded events (docs/spec/bundle.md#the-hash-chain), computed in the module so that every host
//! and `verify` compute it alike.
//!
//! `hN = sha256(hN-1 || E || D)`: `hN-1` as its 64 lowercase hex characters; `E` the JCS of the event with
//! the values of its top-level `arguments` and `result` keys replaced by the hex sha256 of their JCS (a
//! number that is not exact, 9.28, enters as the JSON string of its text as written, so two different
//! numbers never link alike); a line that is not a JSON event (not an object with a string `type`, or not
//! JSON at all) enters as the object `{"malformed": <the line as a JSON string>}`, so the line `x` and the
//! line `"x"` link apart; `D` the JCS of the decision line; concatenated as UTF-8 with no separator.

use crate::doc::sha256_hex;
use crate::jcs;
use crate::value::{Node, Value};
use sha2::{Digest, Sha256};

/// JCS of any text: its canonical form when it is JSON, else the canonical JSON string holding it.
pub fn jcs_or_string(text: &str) -> String {
    crate::canonicalize(text).unwrap_or_else(|_| jcs::to_string(&jcs::s(text)))
}

/// The digest that stands for an event's `arguments` or `result` in the chain (and in a redacted
/// derivative): the hex sha256 of its JCS, numbers that are not exact entering as strings (9.28).
pub fn value_digest(value: &Node) -> String {
    sha256_hex(jcs::to_string_hashing(value).as_bytes())
}

/// Whether a parsed line is a JSON event for the chain: an object with a string `type`.
fn is_event(node: &Node) -> bool {
    match &node.value {
        Value::Obj(ms) => ms.iter().any(|m| m.key == "type" && matches!(m.value.value, Value::Str(_))),
        _ => false,
    }
}

/// `E` of a line that is not a JSON event (9.22).
pub fn malformed_form(line: &str) -> String {
    jcs::to_string(&jcs::obj(vec![("malformed", jcs::s(line))]))
}

/// `E` of the line `line`, already parsed into `node` without issues.
pub fn event_form_parsed(node: &Node, line: &str) -> String {
    if is_event(node) {
        event_form_node(node)
    } else {
        malformed_form(line)
    }
}

/// `E` of an event tree (an object with a string `type`): arguments and result replaced by their digests.
pub fn event_form_node(event: &Node) -> String {
    match &event.value {
        Value::Obj(members) if members.iter().any(|m| m.key == "arguments" || m.key == "result") => {
            let mut n = event.clone();
            if let Value::Obj(ms) = &mut n.value {
                for m in ms.iter_mut().filter(|m| m.key == "arguments" || m.key == "result") {
                    m.value = jcs::s(&value_digest(&m.value));
                }
            }
            jcs::to_string_hashing(&n)
        }
        _ => jcs::to_string_hashing(event),
    }
}

/// `E` of an event line (with `digested`, the line is already in that form: a redacted bundle's).
pub fn event_form(event_line: &str, digested: bool) -> String {
    let p = crate::json::parse(event_line);
    match (p.node, p.issues.is_empty()) {
        (Some(n), true) if is_event(&n) => {
            if digested {
                jcs::to_string_hashing(&n)
            } else {
                event_form_node(&n)
            }
        }
        _ => malformed_form(event_line),
    }
}

/// The line a redacted derivative records for `event_line` (docs/spec/bundle.md#the-hash-chain): a JSON event in its chain form
/// `E` (arguments and result replaced by their digests), whose link the `digested` path computes alike; a
/// line that is not a JSON event as it is (it enters the chain as `{"malformed": line}` either way).
pub fn redacted_line(event_line: &str) -> String {
    let p = crate::json::parse(event_line);
    match (p.node, p.issues.is_empty()) {
        (Some(n), true) if is_event(&n) => event_form_node(&n),
        _ => event_line.to_string(),
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
