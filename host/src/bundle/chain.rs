//! `events.ndjson` records and the hash chain (docs/spec/bundle.md#the-hash-chain); the links themselves come from the module.

#[allow(unused_imports)]
use super::*;

/// The line a redacted derivative records for `event_line`: the module's chain form `E` of the event
/// (arguments and result replaced by their digests; docs/spec/bundle.md#the-hash-chain), so its link verifies without them.
pub fn chain_event_form(policy: &Policy, event_line: &str) -> Result<String, HostError> {
    policy.redact_line(event_line)
}

/// `hN` from `hN-1` (hex), the raw event line and the decision line (docs/spec/bundle.md#the-hash-chain), computed by the module.
pub fn chain_next_with(policy: &Policy, prev: &str, event_line: &str, decision_line: &str) -> Result<String, HostError> {
    policy.chain_link(prev, event_line, decision_line, false)
}

/// [`chain_next_with`] on the process's shared policy.
pub fn chain_next(prev: &str, event_line: &str, decision_line: &str) -> io::Result<String> {
    let policy = shared_policy().map_err(io_other)?;
    chain_next_with(&policy, prev, event_line, decision_line).map_err(io_other)
}
