//! host/tests/mcp/bad_server.py in this process, over an in-memory pipe (`adapters::mcp::ServerStream`):
//! the same bare JSON-RPC server (it initializes and lists its tools correctly, then `ok` answers `ok`,
//! `wrong_id` answers under another id, `garbage` writes a line that is not JSON, `not_rpc` a JSON object
//! that is not JSON-RPC, `hang` nothing), with no process, no python and no log file: the calls it received
//! are counted in memory. The fuzz target `mcp` includes this file too (by path), so that its inputs do not
//! wait on pipes to another process; the tests keep the real stdio server beside it.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const TOOLS: [&str; 5] = ["ok", "wrong_id", "garbage", "not_rpc", "hang"];

/// Starts the server on the current tokio runtime; returns the proxy's end of the pipe and the count of
/// `tools/call` requests the server received.
pub fn spawn() -> (tokio::io::DuplexStream, Arc<AtomicUsize>) {
    let (proxy, server) = tokio::io::duplex(1 << 16);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    tokio::spawn(async move {
        let (r, mut w) = tokio::io::split(server);
        let mut lines = tokio::io::BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
            let (method, id) = (msg["method"].as_str().unwrap_or_default(), msg.get("id").cloned());
            let out: Option<String> = match method {
                "initialize" => Some(answer(
                    &id,
                    json!({"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "bad-server", "version": "1.0.0"}}),
                )),
                "tools/list" => {
                    let tools: Vec<Value> = TOOLS.iter().map(|t| json!({"name": t, "description": t, "inputSchema": {"type": "object"}})).collect();
                    Some(answer(&id, json!({ "tools": tools })))
                }
                "tools/call" => {
                    counted.fetch_add(1, Ordering::SeqCst);
                    match msg["params"]["name"].as_str().unwrap_or_default() {
                        "ok" => Some(answer(&id, json!({"content": [{"type": "text", "text": "ok"}]}))),
                        "wrong_id" => {
                            let other = match id.as_ref().and_then(Value::as_i64) {
                                Some(n) => json!(n + 1000),
                                None => json!(format!("other-{}", id.clone().unwrap_or_default())),
                            };
                            Some(answer(&Some(other), json!({"content": [{"type": "text", "text": "answered under another id"}]})))
                        }
                        "garbage" => Some("this is not JSON-RPC {".to_string()),
                        "not_rpc" => Some(json!({"hello": "world", "result": {"content": [{"type": "text", "text": "not JSON-RPC"}]}}).to_string()),
                        _ => None,
                    }
                }
                m if !m.is_empty() && id.is_some() => {
                    Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no method {m}")}}).to_string())
                }
                _ => None,
            };
            if let Some(mut out) = out {
                out.push('\n');
                if w.write_all(out.as_bytes()).await.is_err() {
                    break;
                }
            }
        }
    });
    (proxy, calls)
}

fn answer(id: &Option<Value>, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}
