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
use crate::value::{Member, Node, Value};
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

/// The record line of an event tree ([`jcs::to_string_record`]) and its `E` ([`event_form_node`]), from
/// one pass: the two differ only in the values of `arguments` and `result` and in numbers that are not
/// exact, so each member is written once and copied, and an exact `arguments` is digested from the
/// text just written rather than written again.
pub fn record_and_form(event: &Node) -> (String, String) {
    let Value::Obj(members) = &event.value else {
        return (jcs::to_string_record(event), event_form_node(event));
    };
    let mut sorted: Vec<&Member> = members.iter().collect();
    crate::sort::sort_by(&mut sorted, |a, b| jcs::utf16_order(&a.key, &b.key));
    let mut line = String::with_capacity(256);
    let mut form = String::with_capacity(256);
    line.push('{');
    form.push('{');
    for (i, m) in sorted.iter().enumerate() {
        let start = line.len();
        if i > 0 {
            line.push(',');
        }
        jcs::write_str(&m.key, &mut line);
        line.push(':');
        form.push_str(&line[start..]);
        let start = line.len();
        jcs::write_record(&m.value, &mut line);
        let exact = !jcs::has_inexact(&m.value);
        if m.key == "arguments" || m.key == "result" {
            let digest = if exact { sha256_hex(line[start..].as_bytes()) } else { value_digest(&m.value) };
            jcs::write_str(&digest, &mut form);
        } else if exact {
            form.push_str(&line[start..]);
        } else {
            jcs::write_hashing(&m.value, &mut form);
        }
    }
    line.push('}');
    form.push('}');
    (line, form)
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
            // A shallow copy: the arguments' tree (the bulk of an event) is digested, never cloned.
            let ms = members
                .iter()
                .map(|m| Member {
                    key: m.key.clone(),
                    key_pos: m.key_pos,
                    value: if m.key == "arguments" || m.key == "result" { jcs::s(&value_digest(&m.value)) } else { m.value.clone() },
                })
                .collect();
            jcs::to_string_hashing(&Node::new(Value::Obj(ms)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_gives_the_record_line_and_the_form() {
        for line in [
            r#"{"type":"invoke","at":3,"tool":"db.read","arguments":{"q":"a\"b","n":[1,2.50,1e30,0.1000000000000000000000001]},"call_id":"c"}"#,
            r#"{"type":"result","at":4,"tool":"t","result":"x","is_error":false,"z":1.000000000000000000001}"#,
            r#"{"type":"tick","at":5}"#,
            r#"{"type":"invoke","tool":"\u00e9","\ufb33":1,"\ud83d\ude00":2,"arguments":12345678901234567890123}"#,
        ] {
            let n = crate::json::parse(line).node.unwrap();
            assert_eq!(record_and_form(&n), (jcs::to_string_record(&n), event_form_node(&n)), "{line}");
        }
    }
}
