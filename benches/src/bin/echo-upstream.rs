//! A fast MCP upstream for the load and proxy benches: one `echo` tool over stdio (rmcp's server),
//! answering `Echo: <message>` as server-everything's `echo` does (host/tests/mcp/runbooks/echo-only.json
//! allows exactly it). So the proxy is measured against a server that is not the bottleneck.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ServiceExt;
use std::sync::Arc;

#[derive(Clone)]
struct Echo;

impl rmcp::ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(&self, _: Option<PaginatedRequestParams>, _: RequestContext<RoleServer>) -> Result<ListToolsResult, rmcp::ErrorData> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"message": {"type": "string", "description": "Message to echo"}},
            "required": ["message"],
        });
        let serde_json::Value::Object(schema) = schema else { unreachable!() };
        Ok(ListToolsResult::with_all_items(vec![Tool::new("echo", "Echoes back the input", Arc::new(schema))]))
    }

    async fn call_tool(&self, request: CallToolRequestParams, _: RequestContext<RoleServer>) -> Result<CallToolResponse, rmcp::ErrorData> {
        if request.name != "echo" {
            return Err(rmcp::ErrorData::invalid_params(format!("unknown tool `{}`", request.name), None));
        }
        let Some(message) = request.arguments.as_ref().and_then(|a| a.get("message")).and_then(|m| m.as_str()) else {
            return Err(rmcp::ErrorData::invalid_params("`message` (a string) is required", None));
        };
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(format!("Echo: {message}"))])))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One worker: a small server beside the proxy on a 2-core machine.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    rt.block_on(async {
        let service = Echo.serve(rmcp::transport::stdio()).await?;
        service.waiting().await?;
        Ok(())
    })
}
