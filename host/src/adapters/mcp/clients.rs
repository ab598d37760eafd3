//! What the servers behind the proxy say to its clients (DESIGN 9.29; issue 31): their requests
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`) and their notifications (log messages,
//! `resources/updated`, the resource and prompt lists changed), each passed on unless `run --block` names
//! its kind. Each request and how it was answered (or refused) is recorded in the client's run
//! (`traffic.ndjson`); notifications are not.
//!
//! Which client hears a server: a request or a log message that comes while a forwarded tool call is in
//! flight at that server goes to the client that made the call, on that call's own stream over HTTP (the
//! request is marked with the call's id, so rmcp sends it on the POST's SSE stream); otherwise to the most
//! recent client. `resources/updated` goes to the clients subscribed to that URI, a list change to every
//! client. A client that does not offer a capability gets no request of it: the server is answered the
//! protocol's error instead, so nothing is asked of a client that never agreed to answer it.
#![allow(deprecated)]

use super::passthrough::Kind;
use super::Shared;
use rmcp::model::{ClientCapabilities, InputRequest};
use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ErrorCode,
    GetExtensions, ListRootsRequest, ListRootsResult, LoggingMessageNotificationParam, RequestId, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions, RoleServer};
use rmcp::{ErrorData as McpError, Peer};
use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A client of the proxy, keyed by its run (one per stdio proxy, one per HTTP session).
#[derive(Clone)]
pub struct Client {
    pub key: usize,
    pub peer: Peer<RoleServer>,
    /// The run that records what the servers asked of this client (`traffic.ndjson`).
    pub run: Weak<Shared>,
}

/// A forwarded tool call in flight: the server it went to, and the client's request it answers.
struct InFlight {
    ticket: u64,
    server: usize,
    client: Client,
    request: RequestId,
    mailbox: Option<Mailbox>,
}

/// A server's request for a client on 2026-07-28, which takes no request of a server (it is asked
/// through an `input_required` answer instead): handed to the client's call in flight, answered from the
/// client's retry.
pub struct Asked {
    pub request: InputRequest,
    pub answer: oneshot::Sender<Result<ClientResult, McpError>>,
}

/// Where a 2026-07-28 call takes its server's requests, and what its client said it can answer.
#[derive(Clone)]
pub struct Mailbox {
    pub to: mpsc::UnboundedSender<Asked>,
    pub capabilities: ClientCapabilities,
}

/// A 2026-07-28 call held between its client's rounds: the server's call still running, the requests it
/// made that wait for the client's answers, and the tool the rounds belong to.
pub struct Flow {
    pub done: oneshot::Receiver<Result<rmcp::model::CallToolResponse, rmcp::ServiceError>>,
    pub asked: mpsc::UnboundedReceiver<Asked>,
    pub waiting: std::collections::BTreeMap<String, Asked>,
    pub next_key: u64,
    pub tool: String,
    /// The task running the server's call: a flow dropped before its outcome (the client cancelled, left,
    /// or never came back within the call timeout) cancels the call at the server.
    pub task: tokio::task::AbortHandle,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The prefix of the proxy's own `requestState` (a server's own passes through untouched).
pub const FLOW_STATE: &str = "runbook-proxy-round:";

/// What a capability set lets a client be asked.
fn offers(c: &ClientCapabilities, kind: Kind) -> bool {
    match kind {
        Kind::Sampling => c.sampling.is_some(),
        Kind::Elicitation => c.elicitation.is_some(),
        Kind::Roots => c.roots.is_some(),
        _ => false,
    }
}

/// A client's answer (from `inputResponses`) to a request it was asked, as the server's request expects it.
pub fn client_result(asked: &InputRequest, answer: serde_json::Value) -> Result<ClientResult, McpError> {
    let bad = |e: serde_json::Error| McpError::invalid_params(format!("an input response is not the answer its request needs: {e}"), None);
    Ok(match asked {
        InputRequest::CreateMessage(_) => ClientResult::CreateMessageResult(Box::new(serde_json::from_value::<CreateMessageResult>(answer).map_err(bad)?)),
        InputRequest::Elicitation(_) => ClientResult::ElicitResult(serde_json::from_value::<ElicitResult>(answer).map_err(bad)?),
        InputRequest::ListRoots(_) => ClientResult::ListRootsResult(serde_json::from_value::<ListRootsResult>(answer).map_err(bad)?),
        _ => return Err(McpError::invalid_params("an input request of a kind the proxy does not know", None)),
    })
}

/// The proxy's clients as the servers need them.
pub struct Clients {
    pass: Vec<Kind>,
    /// How long a client may take to answer a server's request (the proxy's call timeout).
    timeout: Duration,
    known: Mutex<Vec<Client>>,
    calls: Mutex<Vec<InFlight>>,
    next_ticket: Mutex<u64>,
    /// Resource URI → the clients subscribed to it.
    subscribed: Mutex<HashMap<String, Vec<Client>>>,
    /// The servers' names, by index (as the bundle names them).
    pub names: Mutex<Vec<String>>,
    /// 2026-07-28 calls between their client's rounds, by the proxy's `requestState`.
    flows: Mutex<HashMap<String, Flow>>,
}

/// The client a server's request is for: its call's request id and, on 2026-07-28, its call's mailbox.
type Target = (Client, Option<RequestId>, Option<Mailbox>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes the call from the in-flight list when the forwarded call ends, however it ends.
pub struct CallGuard<'a> {
    clients: &'a Clients,
    ticket: u64,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        lock(&self.clients.calls).retain(|c| c.ticket != self.ticket);
    }
}

impl Clients {
    pub fn new(pass: Vec<Kind>, timeout: Duration) -> Clients {
        Clients {
            pass,
            timeout,
            known: Mutex::default(),
            calls: Mutex::default(),
            next_ticket: Mutex::new(0),
            subscribed: Mutex::default(),
            names: Mutex::default(),
            flows: Mutex::default(),
        }
    }

    pub fn passes(&self, kind: Kind) -> bool {
        self.pass.contains(&kind)
    }

    /// A client initialized: it is the most recent one.
    pub fn joined(&self, client: Client) {
        let mut known = lock(&self.known);
        known.retain(|c| c.key != client.key && !c.peer.is_transport_closed());
        known.push(client);
    }

    /// A forwarded call to `server` for the client's request `request`, until the guard drops.
    pub fn calling(&self, server: usize, client: Client, request: RequestId, mailbox: Option<Mailbox>) -> CallGuard<'_> {
        let ticket = {
            let mut t = lock(&self.next_ticket);
            *t += 1;
            *t
        };
        lock(&self.calls).push(InFlight { ticket, server, client, request, mailbox });
        CallGuard { clients: self, ticket }
    }

    pub fn subscribed(&self, uri: &str, client: Client) {
        let mut subs = lock(&self.subscribed);
        let list = subs.entry(uri.to_string()).or_default();
        list.retain(|c| c.key != client.key);
        list.push(client);
    }

    pub fn unsubscribed(&self, uri: &str, key: usize) {
        if let Some(list) = lock(&self.subscribed).get_mut(uri) {
            list.retain(|c| c.key != key);
        }
    }

    /// The client a server's request or log message is for, and the client's call it belongs to.
    fn target(&self, server: usize) -> Option<Target> {
        if let Some(c) = lock(&self.calls).iter().rev().find(|c| c.server == server && (c.mailbox.is_some() || !c.client.peer.is_transport_closed())) {
            return Some((c.client.clone(), Some(c.request.clone()), c.mailbox.clone()));
        }
        lock(&self.known).iter().rev().find(|c| !c.peer.is_transport_closed()).map(|c| (c.clone(), None, None))
    }

    /// Keeps a 2026-07-28 call between its client's rounds under `token`, for at most the call timeout
    /// (then its server's requests are answered as failed).
    pub fn keep_flow(self: &std::sync::Arc<Self>, token: String, flow: Flow) {
        lock(&self.flows).insert(token.clone(), flow);
        let me = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(me.timeout).await;
            lock(&me.flows).remove(&token);
        });
    }

    pub fn take_flow(&self, token: &str) -> Option<Flow> {
        lock(&self.flows).remove(token)
    }

    fn every(&self) -> Vec<Client> {
        lock(&self.known).iter().filter(|c| !c.peer.is_transport_closed()).cloned().collect()
    }

    /// Sends a server's request to the client it is for, on the client's call's stream, and records the
    /// exchange (or its refusal) in that client's run.
    async fn ask(&self, server: usize, kind: Kind, what: &str, request: ServerRequest) -> Result<ClientResult, McpError> {
        let target = self.target(server);
        let wire = serde_json::to_value(&request).unwrap_or_default();
        let method = wire["method"].as_str().unwrap_or(what).to_string();
        let params = wire.get("params").cloned().unwrap_or_default();
        let name = lock(&self.names).get(server).cloned();
        let answer = self.ask_unrecorded(target.clone(), kind, what, request).await;
        let run = target.and_then(|(c, _, _)| c.run.upgrade());
        let answered = answer.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()).map_err(|e| i64::from(e.code.0));
        let Some(run) = run else { return answer };
        let t = crate::run::Traffic {
            direction: "to-client",
            server: name.as_deref(),
            method: &method,
            params: &params,
            answer: answered.as_ref().map_err(|c| *c),
        };
        match run.record_traffic(&t) {
            Ok(()) => answer,
            Err(f) => Err(McpError::internal_error(f.text(), None)),
        }
    }

    async fn ask_unrecorded(&self, target: Option<Target>, kind: Kind, what: &str, mut request: ServerRequest) -> Result<ClientResult, McpError> {
        if !self.passes(kind) {
            return Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, format!("the proxy withholds {what} from its client (`run --block`)"), None));
        }
        let Some((client, call, mailbox)) = target else {
            return Err(McpError::internal_error(format!("no client is connected to the proxy to answer {what}"), None));
        };
        if let Some(mb) = mailbox {
            // A 2026-07-28 client: asked through its call's `input_required` answer, answered on its retry.
            if !offers(&mb.capabilities, kind) {
                return Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, format!("the client behind the proxy does not offer {what}"), None));
            }
            let request = match request {
                ServerRequest::CreateMessageRequest(r) => InputRequest::CreateMessage(r),
                ServerRequest::ElicitRequest(r) => InputRequest::Elicitation(r),
                ServerRequest::ListRootsRequest(r) => InputRequest::ListRoots(r),
                _ => return Err(McpError::internal_error(format!("{what} cannot be asked of a 2026-07-28 client"), None)),
            };
            let (answer, answered) = oneshot::channel();
            mb.to
                .send(Asked { request, answer })
                .map_err(|_| McpError::internal_error(format!("the client's call ended before it could be asked {what}"), None))?;
            return match tokio::time::timeout(self.timeout, answered).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(McpError::internal_error(format!("the client's call ended without an answer to {what}"), None)),
                Err(_) => Err(McpError::internal_error(format!("the client did not answer {what} within {:?}", self.timeout), None)),
            };
        }
        if client.peer.peer_info().map(|i| offers(&i.capabilities, kind)) != Some(true) {
            return Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, format!("the client behind the proxy does not offer {what}"), None));
        }
        if let Some(id) = call {
            request.extensions_mut().insert(OriginatingRequestId(id));
        }
        let handle = client
            .peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(self.timeout))
            .await
            .map_err(|e| McpError::internal_error(format!("the client did not take the request: {e}"), None))?;
        handle.await_response().await.map_err(|e| match e {
            rmcp::ServiceError::McpError(e) => e,
            other => McpError::internal_error(format!("the client did not answer {what}: {other}"), None),
        })
    }

    pub async fn create_message(&self, server: usize, params: CreateMessageRequestParams) -> Result<CreateMessageResult, McpError> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.ask(server, Kind::Sampling, "sampling", request).await? {
            ClientResult::CreateMessageResult(r) => Ok(*r),
            _ => Err(McpError::internal_error("the client answered sampling with a result of another kind", None)),
        }
    }

    pub async fn create_elicitation(&self, server: usize, params: ElicitRequestParams) -> Result<ElicitResult, McpError> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.ask(server, Kind::Elicitation, "elicitation", request).await? {
            ClientResult::ElicitResult(r) => Ok(r),
            _ => Err(McpError::internal_error("the client answered elicitation with a result of another kind", None)),
        }
    }

    pub async fn list_roots(&self, server: usize) -> Result<ListRootsResult, McpError> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.ask(server, Kind::Roots, "roots", request).await? {
            ClientResult::ListRootsResult(r) => Ok(r),
            _ => Err(McpError::internal_error("the client answered roots/list with a result of another kind", None)),
        }
    }

    /// A server's log message: to the client of its call in flight, else the most recent client.
    pub async fn log(&self, server: usize, params: LoggingMessageNotificationParam) {
        if !self.passes(Kind::Logging) {
            return;
        }
        if let Some((client, _, _)) = self.target(server) {
            let _ = client.peer.notify_logging_message(params).await;
        }
    }

    pub async fn resource_updated(&self, params: rmcp::model::ResourceUpdatedNotificationParam) {
        if !self.passes(Kind::Resources) {
            return;
        }
        let subs: Vec<Client> = lock(&self.subscribed).get(&params.uri).cloned().unwrap_or_default();
        for c in subs {
            let _ = c.peer.notify_resource_updated(params.clone()).await;
        }
    }

    pub async fn resource_list_changed(&self) {
        if self.passes(Kind::Resources) {
            for c in self.every() {
                let _ = c.peer.notify_resource_list_changed().await;
            }
        }
    }

    pub async fn prompt_list_changed(&self) {
        if self.passes(Kind::Prompts) {
            for c in self.every() {
                let _ = c.peer.notify_prompt_list_changed().await;
            }
        }
    }
}
