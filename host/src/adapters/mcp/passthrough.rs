//! Everything of MCP but tools, passed through to the servers behind the proxy (docs/spec/adapters.md#mcp-beyond-tools; issue 31):
//! resources (list, templates, read, subscribe, unsubscribe), prompts (list, get), completion and the
//! logging level, each unless `run --block` names it. They are not tool calls and the module does not
//! decide them; each request and its answer's digest is recorded in the run's `traffic.ndjson` (see
//! `handler::Proxy::passed`). The proxy offers a capability when it is passed through and a server behind
//! it offers it.
//!
//! With one server a request goes to it as it came (its cursor included). With several, a list is every
//! capable server's whole list (no cursor), a prompt is named `server.prompt` (as tools are), and a
//! resource, a template or a prompt is routed to the server that listed it (a URI no list named goes to
//! the first capable server that knows it).
//!
//! Logging and `resources/subscribe` are deprecated in rmcp (2026-07-28 replaces them), and still what a
//! 2025-11-25 client sends: passed through as they come.
#![allow(deprecated)]

use super::clients::Caller;
use super::upstream::Upstream;
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, GetPromptRequest, GetPromptRequestParams, GetPromptResponse, ListPromptsRequest,
    ListPromptsResult, ListResourceTemplatesRequest, ListResourceTemplatesResult, ListResourcesRequest, ListResourcesResult, PaginatedRequestParams,
    PromptsCapability, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse, Reference, ResourcesCapability, ServerCapabilities, ServerResult,
    SetLevelRequest, SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams, UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{ErrorData as McpError, ServiceError};

/// What a server offers besides tools.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Resources,
    Prompts,
    Completions,
    Logging,
    /// The server-to-client requests (see [`super::clients`]).
    Sampling,
    Elicitation,
    Roots,
}

/// A result from a server on an older protocol has no `resultType`; a client on 2026-07-28 needs it (rmcp
/// drops it again for older clients).
fn complete(t: &mut Option<rmcp::model::ResultType>) {
    if t.is_none() {
        *t = Some(rmcp::model::ResultType::COMPLETE);
    }
}

/// The longest list gathered from one server across its pages.
const MAX_PAGES: usize = 100;

fn unexpected() -> McpError {
    McpError::internal_error("the server answered with a result of another kind", None)
}

fn mcp_error(e: ServiceError) -> McpError {
    match e {
        ServiceError::McpError(e) => e,
        other => McpError::internal_error(format!("the server behind the proxy did not answer: {other}"), None),
    }
}

impl Upstream {
    fn caps(&self, i: usize) -> Option<ServerCapabilities> {
        self.servers[i].peer.peer_info().map(|p| p.capabilities.clone())
    }

    /// The servers that offer `kind`, in order (none when it is not passed through).
    pub fn capable(&self, kind: Kind) -> Vec<usize> {
        if !self.pass_through.contains(&kind) {
            return Vec::new();
        }
        (0..self.servers.len())
            .filter(|&i| {
                self.caps(i).is_some_and(|c| match kind {
                    Kind::Resources => c.resources.is_some(),
                    Kind::Prompts => c.prompts.is_some(),
                    Kind::Completions => c.completions.is_some(),
                    Kind::Logging => c.logging.is_some(),
                    Kind::Sampling | Kind::Elicitation | Kind::Roots => false,
                })
            })
            .collect()
    }

    /// The proxy's capabilities besides tools: what any server behind it offers (resource subscriptions
    /// and list changes when one offers them).
    pub fn passed_capabilities(&self, caps: &mut ServerCapabilities) {
        let all: Vec<ServerCapabilities> = (0..self.servers.len()).filter_map(|i| self.caps(i)).collect();
        let on = |k: Kind| self.pass_through.contains(&k);
        if on(Kind::Resources) && all.iter().any(|c| c.resources.is_some()) {
            let mut r = ResourcesCapability::default();
            r.subscribe = all.iter().any(|c| c.resources.as_ref().is_some_and(|r| r.subscribe == Some(true))).then_some(true);
            r.list_changed = all.iter().any(|c| c.resources.as_ref().is_some_and(|r| r.list_changed == Some(true))).then_some(true);
            caps.resources = Some(r);
        }
        if on(Kind::Prompts) && all.iter().any(|c| c.prompts.is_some()) {
            let mut p = PromptsCapability::default();
            p.list_changed = all.iter().any(|c| c.prompts.as_ref().is_some_and(|p| p.list_changed == Some(true))).then_some(true);
            caps.prompts = Some(p);
        }
        if on(Kind::Completions) && all.iter().any(|c| c.completions.is_some()) {
            caps.completions = Some(Default::default());
        }
        if on(Kind::Logging) && all.iter().any(|c| c.logging.is_some()) {
            caps.logging = Some(Default::default());
        }
    }

    /// One request to server `i`, bounded by the call timeout.
    async fn forward(&self, i: usize, request: ClientRequest) -> Result<ServerResult, McpError> {
        self.forward_for(i, request, None).await
    }

    /// One request to server `i` for the client's request `caller`: what the server asks or logs meanwhile
    /// goes to that client (see [`super::clients`]).
    async fn forward_for(&self, i: usize, request: ClientRequest, caller: Option<Caller>) -> Result<ServerResult, McpError> {
        let _in_flight = caller.map(|(client, request, mailbox)| self.clients.calling(i, client, request, mailbox));
        let handle = self.servers[i].peer.send_request_with_option(request, PeerRequestOptions::with_timeout(self.call_timeout)).await.map_err(mcp_error)?;
        handle.await_response().await.map_err(mcp_error)
    }

    fn only(&self, kind: Kind, method: &str) -> Result<Vec<usize>, McpError> {
        let c = self.capable(kind);
        if c.is_empty() {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("the proxy withholds {method} (`runbook-host run --block`), or no server behind it offers them"),
                None,
            ));
        }
        Ok(c)
    }

    fn remember(&self, key: String, server: usize) {
        self.passthrough_routes.write().unwrap_or_else(|e| e.into_inner()).insert(key, server);
    }

    fn route_of(&self, key: &str) -> Option<usize> {
        self.passthrough_routes.read().unwrap_or_else(|e| e.into_inner()).get(key).copied()
    }

    pub async fn list_resources(&self, params: Option<PaginatedRequestParams>) -> Result<ListResourcesResult, McpError> {
        let servers = self.only(Kind::Resources, "resources")?;
        let mut all = Vec::new();
        for &i in &servers {
            let mut p = if servers.len() == 1 { params.clone() } else { None };
            for _ in 0..MAX_PAGES {
                let req =
                    ClientRequest::ListResourcesRequest(ListResourcesRequest { method: Default::default(), params: p.clone(), extensions: Default::default() });
                let ServerResult::ListResourcesResult(mut r) = self.forward(i, req).await? else { return Err(unexpected()) };
                complete(&mut r.result_type);
                for x in &r.resources {
                    self.remember(format!("uri:{}", x.uri), i);
                }
                if servers.len() == 1 {
                    return Ok(r);
                }
                all.extend(r.resources);
                match r.next_cursor {
                    Some(c) => p = Some(PaginatedRequestParams::default().with_cursor(Some(c))),
                    None => break,
                }
            }
        }
        Ok(ListResourcesResult::with_all_items(all))
    }

    pub async fn list_resource_templates(&self, params: Option<PaginatedRequestParams>) -> Result<ListResourceTemplatesResult, McpError> {
        let servers = self.only(Kind::Resources, "resources")?;
        let mut all = Vec::new();
        for &i in &servers {
            let mut p = if servers.len() == 1 { params.clone() } else { None };
            for _ in 0..MAX_PAGES {
                let req = ClientRequest::ListResourceTemplatesRequest(ListResourceTemplatesRequest {
                    method: Default::default(),
                    params: p.clone(),
                    extensions: Default::default(),
                });
                let ServerResult::ListResourceTemplatesResult(mut r) = self.forward(i, req).await? else { return Err(unexpected()) };
                complete(&mut r.result_type);
                for x in &r.resource_templates {
                    self.remember(format!("template:{}", x.uri_template), i);
                }
                if servers.len() == 1 {
                    return Ok(r);
                }
                all.extend(r.resource_templates);
                match r.next_cursor {
                    Some(c) => p = Some(PaginatedRequestParams::default().with_cursor(Some(c))),
                    None => break,
                }
            }
        }
        Ok(ListResourceTemplatesResult::with_all_items(all))
    }

    /// The servers to try for a resource URI: the one that listed it, else every capable one in order.
    fn for_uri(&self, uri: &str) -> Result<Vec<usize>, McpError> {
        let capable = self.only(Kind::Resources, "resources")?;
        Ok(match self.route_of(&format!("uri:{uri}")) {
            Some(i) => vec![i],
            None => capable,
        })
    }

    /// A resource as its server gives it: its contents or, on 2026-07-28, the input it needs first (the
    /// client's retry carries it back, with the request state, in `params`).
    pub async fn read_resource(&self, params: ReadResourceRequestParams, caller: Option<Caller>) -> Result<ReadResourceResponse, McpError> {
        let mut last = None;
        for i in self.for_uri(&params.uri)? {
            match self.forward_for(i, ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params.clone())), caller.clone()).await {
                Ok(ServerResult::ReadResourceResult(mut r)) => {
                    complete(&mut r.result_type);
                    return Ok(r.into());
                }
                Ok(ServerResult::InputRequiredResult(r)) => return Ok(ReadResourceResponse::InputRequired(r)),
                Ok(_) => return Err(unexpected()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(unexpected))
    }

    pub async fn subscribe(&self, params: SubscribeRequestParams) -> Result<(), McpError> {
        let mut last = None;
        for i in self.for_uri(&params.uri)? {
            // A 2026-07-28 server takes no `resources/subscribe`: the proxy listens for the URI's updates.
            let answer = if self.servers[i].modern {
                self.watch(i, &params.uri).await
            } else {
                self.forward(i, ClientRequest::SubscribeRequest(SubscribeRequest::new(params.clone()))).await.map(|_| ())
            };
            match answer {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(unexpected))
    }

    pub async fn unsubscribe(&self, params: UnsubscribeRequestParams) -> Result<(), McpError> {
        let mut last = None;
        for i in self.for_uri(&params.uri)? {
            if self.servers[i].modern {
                self.unwatch(i, &params.uri);
                return Ok(());
            }
            match self.forward(i, ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(params.clone()))).await {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(unexpected))
    }

    pub async fn list_prompts(&self, params: Option<PaginatedRequestParams>) -> Result<ListPromptsResult, McpError> {
        let servers = self.only(Kind::Prompts, "prompts")?;
        let several = self.servers.len() > 1;
        let mut all = Vec::new();
        for &i in &servers {
            let mut p = if servers.len() == 1 { params.clone() } else { None };
            for _ in 0..MAX_PAGES {
                let req =
                    ClientRequest::ListPromptsRequest(ListPromptsRequest { method: Default::default(), params: p.clone(), extensions: Default::default() });
                let ServerResult::ListPromptsResult(mut r) = self.forward(i, req).await? else { return Err(unexpected()) };
                complete(&mut r.result_type);
                if several {
                    for x in &mut r.prompts {
                        x.name = format!("{}.{}", self.servers[i].name, x.name);
                    }
                }
                if servers.len() == 1 {
                    return Ok(r);
                }
                all.extend(r.prompts);
                match r.next_cursor {
                    Some(c) => p = Some(PaginatedRequestParams::default().with_cursor(Some(c))),
                    None => break,
                }
            }
        }
        Ok(ListPromptsResult::with_all_items(all))
    }

    /// The server and its own name of a prompt as listed to the client.
    fn prompt_route(&self, listed: &str, kind: Kind) -> Result<(usize, String), McpError> {
        let capable = self.only(kind, if kind == Kind::Prompts { "prompts" } else { "completion" })?;
        if self.servers.len() == 1 {
            return Ok((capable[0], listed.to_string()));
        }
        capable
            .into_iter()
            .find_map(|i| listed.strip_prefix(&format!("{}.", self.servers[i].name)).map(|n| (i, n.to_string())))
            .ok_or_else(|| McpError::invalid_params(format!("no server behind the proxy has the prompt `{listed}`"), None))
    }

    /// A prompt as its server gives it, or the input it needs first (as [`Self::read_resource`]).
    pub async fn get_prompt(&self, mut params: GetPromptRequestParams, caller: Option<Caller>) -> Result<GetPromptResponse, McpError> {
        let (i, name) = self.prompt_route(&params.name, Kind::Prompts)?;
        params.name = name;
        match self.forward_for(i, ClientRequest::GetPromptRequest(GetPromptRequest::new(params)), caller).await? {
            ServerResult::GetPromptResult(mut r) => {
                complete(&mut r.result_type);
                Ok(r.into())
            }
            ServerResult::InputRequiredResult(r) => Ok(GetPromptResponse::InputRequired(r)),
            _ => Err(unexpected()),
        }
    }

    pub async fn complete(&self, mut params: CompleteRequestParams) -> Result<CompleteResult, McpError> {
        let i = match &mut params.r#ref {
            Reference::Prompt(p) => {
                let (i, name) = self.prompt_route(&p.name, Kind::Completions)?;
                p.name = name;
                i
            }
            Reference::Resource(r) => {
                let capable = self.only(Kind::Completions, "completion")?;
                self.route_of(&format!("template:{}", r.uri)).or_else(|| self.route_of(&format!("uri:{}", r.uri))).unwrap_or(capable[0])
            }
            _ => return Err(McpError::invalid_params("a completion reference of a kind the proxy does not know", None)),
        };
        match self.forward(i, ClientRequest::CompleteRequest(CompleteRequest::new(params))).await? {
            ServerResult::CompleteResult(mut r) => {
                complete(&mut r.result_type);
                Ok(r)
            }
            _ => Err(unexpected()),
        }
    }

    /// The client's logging level, for every server that logs.
    pub async fn set_level(&self, params: SetLevelRequestParams) -> Result<(), McpError> {
        let servers = self.only(Kind::Logging, "logging")?;
        // A 2026-07-28 server takes no `logging/setLevel`: it is told with each of the client's requests.
        *self.log_level.lock().unwrap_or_else(|e| e.into_inner()) = Some(params.level);
        for i in servers.into_iter().filter(|&i| !self.servers[i].modern) {
            self.forward(i, ClientRequest::SetLevelRequest(SetLevelRequest::new(params.clone()))).await?;
        }
        Ok(())
    }
}
