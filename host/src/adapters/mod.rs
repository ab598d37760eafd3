//! Adapters: each translates one client's protocol to [`crate::run::Run`] and back, and nothing else.
//!
//! - [`mcp`]: the MCP stdio proxy (`runbook-host run`); sees MCP tool calls only (coverage `["shell"]`).
//! - [`claude`]: the Claude Code hook (`runbook-host hook`); sees every invocation, the shell included.

pub mod claude;
pub mod mcp;
