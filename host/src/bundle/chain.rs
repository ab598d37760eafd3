//! `events.ndjson` records and the hash chain (DESIGN 9.22); the links themselves come from the module.

#[allow(unused_imports)]
use super::*;

/// The end (exclusive) of the JSON value starting at `i` in canonical (whitespace-free) JSON text.
pub(crate) fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']') {
                i += 1;
            }
            Some(i)
        }
    }
}

pub(crate) fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The top-level members of a canonical (whitespace-free) JSON object as (raw key text with its quotes,
/// raw value text); None when the text is not such an object.
pub fn canonical_members(canon: &str) -> Option<Vec<(&str, &str)>> {
    let b = canon.as_bytes();
    if b.first() != Some(&b'{') || b.last() != Some(&b'}') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 1;
    if b.get(i) == Some(&b'}') {
        return (i + 1 == b.len()).then_some(out);
    }
    loop {
        let k_end = skip_string(b, i)?;
        if b.get(k_end) != Some(&b':') {
            return None;
        }
        let v_end = skip_value(b, k_end + 1)?;
        out.push((&canon[i..k_end], &canon[k_end + 1..v_end]));
        match b.get(v_end) {
            Some(b',') => i = v_end + 1,
            Some(b'}') if v_end + 1 == b.len() => return Some(out),
            _ => return None,
        }
    }
}

/// The line a redacted derivative records for `event_line`: the module's chain form `E` of the event
/// (arguments and result replaced by their digests; DESIGN 9.22), so its link verifies without them.
pub fn chain_event_form(policy: &Policy, event_line: &str) -> Result<String, HostError> {
    policy.redact_line(event_line)
}

/// `hN` from `hN-1` (hex), the raw event line and the decision line (DESIGN 9.22), computed by the module.
pub fn chain_next_with(policy: &Policy, prev: &str, event_line: &str, decision_line: &str) -> Result<String, HostError> {
    policy.chain_link(prev, event_line, decision_line, false)
}

/// `hN` for a line of a redacted derivative, whose event is already in its chain form `E`.
pub fn chain_next_redacted(policy: &Policy, prev: &str, event_form: &str, decision_line: &str) -> Result<String, HostError> {
    policy.chain_link(prev, event_form, decision_line, true)
}

/// [`chain_next_with`] on the process's shared policy.
pub fn chain_next(prev: &str, event_line: &str, decision_line: &str) -> io::Result<String> {
    let policy = shared_policy().map_err(io_other)?;
    chain_next_with(&policy, prev, event_line, decision_line).map_err(io_other)
}

/// `h0`: the envelope's sha256, or the document's when there is no envelope.
pub fn chain_h0(envelope: Option<&str>, document_sha256: &str) -> String {
    envelope.map(|e| sha256_hex(e.as_bytes())).unwrap_or_else(|| document_sha256.to_string())
}

/// The raw line from an embedded text (the inverse of `embed`).
pub(crate) fn unembed(text: &str) -> Option<String> {
    if text.trim_start().starts_with('"') {
        serde_json::from_str::<String>(text).ok()
    } else {
        Some(text.to_string())
    }
}

/// One parsed line of `events.ndjson`: the exact texts recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    pub h: String,
    pub event_line: String,
    pub decision_line: String,
}

/// Parses one line of `events.ndjson` (without its `\n`).
pub fn parse_event_record(line: &str) -> Result<EventRecord, String> {
    const PRE: &str = "{\"h\":\"";
    let rest = line.strip_prefix(PRE).ok_or("a line must start with {\"h\":\"")?;
    if rest.len() < 64 || !rest.as_bytes()[..64].iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        return Err("`h` must be 64 lowercase hex digits".into());
    }
    let h = rest[..64].to_string();
    let rest = rest[64..].strip_prefix("\",\"decision\":").ok_or("`decision` must follow `h`")?;
    let mut it = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
    match it.next() {
        Some(Ok(_)) => {}
        _ => return Err("`decision` is not JSON".into()),
    }
    let end = it.byte_offset();
    let decision_text = &rest[..end];
    let rest = rest[end..].strip_prefix(",\"event\":").ok_or("`event` must follow `decision`")?;
    let event_text = rest.strip_suffix('}').ok_or("a line must end with }")?;
    if serde_json::from_str::<serde::de::IgnoredAny>(line).is_err() {
        return Err("the line is not JSON".into());
    }
    let decision_line = unembed(decision_text).ok_or("`decision` is not a JSON object or string")?;
    let event_line = unembed(event_text).ok_or("`event` is not a JSON object or string")?;
    // One allowed form: the line must be exactly the record the module composes of these texts.
    let policy = shared_policy().map_err(|e| e.to_string())?;
    let composed = policy.record_line(&h, &event_line, &decision_line).map_err(|e| e.to_string())?;
    if composed.strip_suffix('\n') != Some(line) {
        return Err("a value is not stored in its one allowed form".into());
    }
    Ok(EventRecord { h, event_line, decision_line })
}

/// Reads `events.ndjson` bytes into records; the error names the 1-based line.
pub fn read_events(bytes: &[u8]) -> Result<Vec<EventRecord>, (usize, String)> {
    let text = std::str::from_utf8(bytes).map_err(|e| (bytes[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count() + 1, "not UTF-8".to_string()))?;
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let body = text.strip_suffix('\n').ok_or((text.split('\n').count(), "the last line does not end with a newline".to_string()))?;
    body.split('\n').enumerate().map(|(n, l)| parse_event_record(l).map_err(|e| (n + 1, e))).collect()
}
