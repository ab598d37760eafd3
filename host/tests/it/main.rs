//! The host's integration tests: one binary (one link of wasmtime and the host), one harness (common/).

mod common;

mod bad_input;
mod bounds;
mod bundle;
mod bundle_schema;
mod claude_code;
mod cli;
mod cline_cli;
mod codex_cli;
mod copilot_cli;
mod differential;
mod distribution;
mod dsse;
mod faults;
mod gemini_cli;
mod hook;
mod hook_server;
mod isolation;
mod oci;
mod opencode_cli;
mod packages;
mod playground;
mod proxy;
mod proxy_http;
mod qwen_code;
mod registry;
mod reproducible;
mod run_driver;
mod run_vectors;
mod schema;
mod security;
mod separated;
mod shadow;
mod sshsig;
mod verify_stream;
