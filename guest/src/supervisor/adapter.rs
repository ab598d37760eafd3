//! Rules every adapter applies around the decisions, kept in the module so that each host (the MCP proxy,
//! a hook, a library in a client's loop, a browser) applies them alike (docs/spec/adapters.md#adapter-duties and docs/spec/README.md#architecture): which tools a
//! client may see, how a run ends when its client leaves, and the exit code a run ends with.

use super::{Phase, Position, Session};
use crate::doc::Profile;
use crate::event::EndReason;
use crate::supervisor::Outcome;

/// How a run ends when its client leaves (docs/spec/adapters.md#adapter-duties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaving {
    /// Feed `final_output` first: a clean shutdown is the model's final answer to a proxy, which never
    /// sees that answer itself.
    pub final_output: bool,
    pub reason: EndReason,
}

impl Session {
    /// Which of `offered` (the tools the servers behind the adapter offer, in their order) a client may
    /// see now: none before admission or once the run is over; at R0, or when the host lists the whole
    /// allowlist (`whole_allowlist`), every tool a capability of the runbook names; else the tools of the
    /// current step's scope (docs/spec/adapters.md#adapter-duties: "the current step's scope where it can").
    pub fn visible_tools(&self, offered: &[String], whole_allowlist: bool) -> Vec<String> {
        if self.phase != Phase::Running {
            return Vec::new();
        }
        let caps = &self.a.doc.capabilities;
        let wanted: Vec<&str> = if whole_allowlist || self.profile() == Profile::R0 {
            caps.iter().map(|c| c.tool.as_str()).collect()
        } else {
            match &self.pos {
                Position::Open => caps.iter().map(|c| c.tool.as_str()).collect(),
                Position::Step(i) => self.a.step_caps[*i].iter().map(|c| caps[*c].tool.as_str()).collect(),
                Position::Terminal(_) => Vec::new(),
            }
        };
        offered.iter().filter(|t| wanted.contains(&t.as_str())).cloned().collect()
    }

    /// How the run ends when the client leaves (docs/spec/adapters.md#adapter-duties): with calls still unanswered it vanished
    /// (`client-closed`); after its last call waited in vain for a human, `approval-timeout`, the wait
    /// being over; otherwise a clean shutdown, `normal`, with `final_output` first.
    pub fn leaving(&self, calls_in_flight: u32, last_call_timed_out: bool) -> Leaving {
        if calls_in_flight > 0 {
            Leaving { final_output: false, reason: EndReason::ClientClosed }
        } else if last_call_timed_out {
            Leaving { final_output: true, reason: EndReason::ApprovalTimeout }
        } else {
            Leaving { final_output: true, reason: EndReason::Normal }
        }
    }

    /// The exit code of a process that ran this run (docs/spec/cli.md#exit-codes and docs/spec/adapters.md#adapter-duties): 0 only when the run completed; 3 for
    /// a shadow run (never enforcement evidence, even completed); else 1.
    pub fn exit_code(&self, shadow: bool) -> u8 {
        match (shadow, self.outcome()) {
            (true, _) => 3,
            (false, Some(Outcome::Completed)) => 0,
            _ => 1,
        }
    }
}
