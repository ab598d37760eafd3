//! The MCP servers behind the proxy: started as children (rmcp's client over `TokioChildProcess`),
//! initialized, their tools listed once, and named for the client (`tool`, or `server.tool` when there are
//! several servers, DESIGN 9.23).

use rmcp::model::{CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, JsonObject, Tool};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{Peer, ServiceError, ServiceExt};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a server may take to start and answer `initialize` and `tools/list`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Server {
    pub name: String,
    pub peer: Peer<RoleClient>,
    pub tools: Vec<Tool>,
    stop: std::sync::Mutex<Option<rmcp::service::RunningServiceCancellationToken>>,
    done: tokio::sync::watch::Receiver<bool>,
}

/// Every server, and the tools as the client sees them.
pub struct Upstream {
    pub servers: Vec<Server>,
    /// (listed name, server index, the server's own tool name), in listing order.
    pub routes: Vec<(String, usize, String)>,
}

fn sanitize(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    let s: String = last.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c.to_ascii_lowercase() } else { '-' }).collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() {
        "server".to_string()
    } else {
        s
    }
}

async fn start_one(spec: &super::ServerSpec) -> Result<(RunningService<RoleClient, ClientConfig>, Vec<Tool>), String> {
    let argv = &spec.argv;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).envs(spec.env.iter().map(|(k, v)| (k, v)));
    let transport = TokioChildProcess::new(cmd).map_err(|e| format!("cannot start `{}`: {e}", argv[0]))?;
    let me = ClientConfig::new(ClientCapabilities::default(), Implementation::new("runbook-host", env!("CARGO_PKG_VERSION")));
    let service = tokio::time::timeout(START_TIMEOUT, me.serve(transport))
        .await
        .map_err(|_| format!("`{}` did not answer `initialize` within {}s", argv[0], START_TIMEOUT.as_secs()))?
        .map_err(|e| format!("`{}` failed to initialize: {e}", argv[0]))?;
    let tools = if service.peer().peer_info().is_some_and(|i| i.capabilities.tools.is_some()) {
        tokio::time::timeout(START_TIMEOUT, service.peer().list_all_tools())
            .await
            .map_err(|_| format!("`{}` did not list its tools in time", argv[0]))?
            .map_err(|e| format!("`{}` failed to list its tools: {e}", argv[0]))?
    } else {
        Vec::new()
    };
    Ok((service, tools))
}

impl Upstream {
    /// Starts every server. `exited` receives a server's index when its connection closes.
    pub async fn start(specs: &[super::ServerSpec], exited: mpsc::UnboundedSender<usize>) -> Result<Upstream, String> {
        let mut servers = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let (service, tools) = start_one(spec).await?;
            let name = match &spec.name {
                Some(n) => n.clone(),
                None => {
                    service.peer().peer_info().and_then(|p| p.server_info.as_ref().map(|s| sanitize(&s.name))).unwrap_or_else(|| format!("server{}", i + 1))
                }
            };
            let peer = service.peer().clone();
            let stop = std::sync::Mutex::new(Some(service.cancellation_token()));
            let (done_tx, done) = tokio::sync::watch::channel(false);
            let tx = exited.clone();
            tokio::spawn(async move {
                let _ = service.waiting().await;
                let _ = done_tx.send(true);
                let _ = tx.send(i);
            });
            servers.push(Server { name, peer, tools, stop, done });
        }
        // Distinct names: a repeated default name gets a numeric suffix.
        let mut seen = std::collections::BTreeSet::new();
        for s in &mut servers {
            let base = s.name.clone();
            let mut k = 2;
            while !seen.insert(s.name.clone()) {
                s.name = format!("{base}-{k}");
                k += 1;
            }
        }
        let several = servers.len() > 1;
        let mut routes = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            for t in &s.tools {
                let listed = if several { format!("{}.{}", s.name, t.name) } else { t.name.to_string() };
                routes.push((listed, i, t.name.to_string()));
            }
        }
        Ok(Upstream { servers, routes })
    }

    /// Every tool name as listed to the client.
    pub fn names(&self) -> Vec<String> {
        self.routes.iter().map(|r| r.0.clone()).collect()
    }

    pub fn route(&self, listed: &str) -> Option<(usize, &str)> {
        self.routes.iter().find(|r| r.0 == listed).map(|r| (r.1, r.2.as_str()))
    }

    /// The tool's definition, renamed as listed.
    pub fn tool(&self, listed: &str) -> Option<Tool> {
        let (i, name) = self.route(listed)?;
        let mut t = self.servers[i].tools.iter().find(|t| t.name == name)?.clone();
        t.name = listed.to_string().into();
        Some(t)
    }

    pub async fn call(&self, server: usize, tool: &str, arguments: Option<JsonObject>) -> Result<CallToolResult, ServiceError> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        self.servers[server].peer.call_tool(params).await
    }

    /// Closes every server (stdin closed, then SIGTERM, then kill: rmcp's graceful shutdown) and waits
    /// for them, at most `bound`.
    pub async fn shutdown(&self, bound: Duration) {
        for s in &self.servers {
            if let Some(t) = s.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
                t.cancel();
            }
        }
        let waits = self.servers.iter().map(|s| {
            let mut done = s.done.clone();
            async move {
                let _ = done.wait_for(|d| *d).await;
            }
        });
        let _ = tokio::time::timeout(bound, futures_join_all(waits)).await;
    }
}

async fn futures_join_all<F: std::future::Future<Output = ()>>(futs: impl Iterator<Item = F>) {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    for f in set {
        f.await;
    }
}
