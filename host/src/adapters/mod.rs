//! Adapters: each translates one client's protocol to [`crate::run::Run`] and back, and nothing else.
//!
//! - [`mcp`]: the MCP stdio proxy (`runbook-host run`); sees MCP tool calls only (coverage `["shell"]`).
//! - [`hooks`]: the hook of every agent CLI (`runbook-host hook --client ...`); sees every invocation, the shell included.

pub mod hooks;
pub mod mcp;
