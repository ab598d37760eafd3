//! What the servers behind the proxy say to its clients (docs/spec/adapters.md#mcp-beyond-tools; issue 31): their requests
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
    GetExtensions, ListRootsRequest, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam, RequestId, ServerRequest,
};
use rmcp::model::{ResourceUpdatedNotification, ServerNotification};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions, RoleServer, SubscriptionSink};
use rmcp::{ErrorData as McpError, Peer};
use std::collections::BTreeMap;
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
    /// What the client must offer to be asked it (its call answers -32021 when it does not).
    pub kind: Kind,
    pub answer: oneshot::Sender<Result<ClientResult, McpError>>,
}

/// Where a 2026-07-28 call takes its server's requests, and what its client said it can answer.
#[derive(Clone)]
pub struct Mailbox {
    pub to: mpsc::UnboundedSender<Asked>,
    pub capabilities: ClientCapabilities,
    /// The least severe log message the call asked for (`_meta` `logLevel`); none asked, none sent.
    pub log_level: Option<LoggingLevel>,
}

/// How a request held in rounds ended at its server.
pub enum Outcome {
    Call(rmcp::model::CallToolResponse),
    Resource(rmcp::model::ReadResourceResponse),
    Prompt(rmcp::model::GetPromptResponse),
}

/// A 2026-07-28 request held between its client's rounds (`tools/call`, `resources/read`, `prompts/get`):
/// the server's request still running, the requests it made that wait for the client's answers, and what
/// the rounds belong to (the method and the tool, resource or prompt: a retry must name the same).
pub struct Flow {
    pub done: oneshot::Receiver<Result<Outcome, McpError>>,
    pub asked: mpsc::UnboundedReceiver<Asked>,
    pub waiting: std::collections::BTreeMap<String, Asked>,
    pub next_key: u64,
    pub subject: String,
    /// The task running the server's call: a flow dropped before its outcome (the client cancelled, left,
    /// or never came back within the call timeout) cancels the call at the server.
    pub task: tokio::task::AbortHandle,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A 2026-07-28 server's `tools/call` that answered `input_required`, passed to its 2026-07-28 client with
/// the server's own requests (their keys kept) and a `requestState` of the proxy's own wrapping the
/// server's: the client's retry is this call, already decided, continued.
pub struct Relay {
    /// The tool as the client named it, and its arguments as decided: a retry must repeat both.
    pub tool: String,
    pub arguments: Option<rmcp::model::JsonObject>,
    /// The server, and the tool as it knows it.
    pub server: usize,
    pub name: String,
    /// The client's request id of the decided call (its `invoke`), which its result is fed under.
    pub call_id: String,
    /// Whether the call's result is fed (not in a shadow run's forward of a call the module refused).
    pub feed: bool,
    /// The server's own `requestState`, sent back with the client's answers.
    pub state: Option<String>,
    /// What the server asked, by its keys (each answer is recorded beside its request).
    pub asked: rmcp::model::InputRequests,
}

/// The prefix of the proxy's own `requestState` (a server's own passes through untouched).
pub const FLOW_STATE: &str = "runbook-proxy-round:";

/// A log level's rank, least severe first.
fn severity(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The capability a client lacks to be asked `kind`, as -32021's `requiredCapabilities` names it.
pub fn missing(c: &ClientCapabilities, kind: Kind) -> Option<&'static str> {
    let name = match kind {
        Kind::Sampling => "sampling",
        Kind::Elicitation => "elicitation",
        Kind::Roots => "roots",
        _ => return None,
    };
    (!offers(c, kind)).then_some(name)
}

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
    subscribed: Mutex<BTreeMap<String, Vec<Client>>>,
    /// The servers' names, by index (as the bundle names them).
    pub names: Mutex<Vec<String>>,
    /// 2026-07-28 calls between their client's rounds, by the proxy's `requestState`.
    flows: Mutex<BTreeMap<String, Flow>>,
    /// 2026-07-28 servers' calls between their 2026-07-28 client's rounds, by the proxy's `requestState`.
    relays: Mutex<BTreeMap<String, Relay>>,
    /// 2026-07-28 clients' open `subscriptions/listen` streams: ticket, the run's key, the stream.
    listeners: Mutex<Vec<(u64, usize, SubscriptionSink)>>,
}

/// The client a server's request is for: its call's request id and, on 2026-07-28, its call's mailbox.
type Target = (Client, Option<RequestId>, Option<Mailbox>);

/// The client's request a forwarded request answers: what the server asks or logs meanwhile goes there.
pub type Caller = (Client, RequestId, Option<Mailbox>);

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
            relays: Mutex::default(),
            listeners: Mutex::default(),
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

    /// A 2026-07-28 client's `subscriptions/listen` stream of the run `key` opened: it hears what its filter
    /// accepted (rmcp's sink drops the rest and tags each with the subscription's id) until it closes.
    pub fn listening(&self, key: usize, sink: SubscriptionSink) -> u64 {
        let ticket = {
            let mut t = lock(&self.next_ticket);
            *t += 1;
            *t
        };
        lock(&self.listeners).push((ticket, key, sink));
        ticket
    }

    pub fn unlistened(&self, ticket: u64) {
        lock(&self.listeners).retain(|l| l.0 != ticket);
    }

    /// Whether any client still follows `uri` (a 2025-11-25 subscription or a listen stream).
    pub fn watched(&self, uri: &str) -> bool {
        lock(&self.subscribed).get(uri).is_some_and(|l| !l.is_empty())
            || lock(&self.listeners).iter().any(|l| l.2.accepted().resource_subscriptions.as_ref().is_some_and(|u| u.iter().any(|u| u == uri)))
    }

    /// Sends a change to the listen streams (of run `key` only, when given) whose filter accepts it.
    async fn to_listeners(&self, key: Option<usize>, n: ServerNotification) {
        let sinks: Vec<SubscriptionSink> = lock(&self.listeners).iter().filter(|l| key.is_none_or(|k| k == l.1)).map(|l| l.2.clone()).collect();
        for sink in sinks {
            let _ = sink.send(n.clone()).await;
        }
    }

    /// The tools a run shows changed: its listen streams are told (its `initialize`d client is told by the run).
    pub async fn tools_changed(&self, key: usize) {
        self.to_listeners(Some(key), ServerNotification::ToolListChangedNotification(Default::default())).await;
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

    /// Keeps a 2026-07-28 server's call between its client's rounds under `token`, for at most the call
    /// timeout (a retry after that is refused as a state the proxy does not know).
    pub fn keep_relay(self: &std::sync::Arc<Self>, token: String, relay: Relay) {
        lock(&self.relays).insert(token.clone(), relay);
        let me = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(me.timeout).await;
            lock(&me.relays).remove(&token);
        });
    }

    pub fn take_relay(&self, token: &str) -> Option<Relay> {
        lock(&self.relays).remove(token)
    }

    /// Asks `client` (on 2025-11-25, during its request `call`) what a 2026-07-28 server asked in an
    /// `input_required` answer, with a request of the proxy's own, and records the exchange in its run.
    pub async fn ask_for(&self, server: Option<usize>, client: Client, call: RequestId, request: &InputRequest) -> Result<serde_json::Value, McpError> {
        let (kind, what, request) = match request.clone() {
            InputRequest::CreateMessage(r) => (Kind::Sampling, "sampling", ServerRequest::CreateMessageRequest(r)),
            InputRequest::Elicitation(r) => (Kind::Elicitation, "elicitation", ServerRequest::ElicitRequest(r)),
            InputRequest::ListRoots(r) => (Kind::Roots, "roots", ServerRequest::ListRootsRequest(r)),
            _ => return Err(McpError::invalid_params("an input request of a kind the proxy does not know", None)),
        };
        let answer = self.ask_to(server, Some((client, Some(call), None)), kind, what, request).await?;
        serde_json::to_value(&answer).map_err(|e| McpError::internal_error(format!("the client's answer cannot be passed on: {e}"), None))
    }

    /// Records in `client`'s run a request a 2026-07-28 server asked of it in an `input_required` answer,
    /// with the answer its retry carried.
    pub fn record_answer(&self, server: usize, client: &Client, request: &InputRequest, answer: &serde_json::Value) -> Result<(), McpError> {
        let wire = serde_json::to_value(request).unwrap_or_default();
        let method = wire["method"].as_str().unwrap_or("").to_string();
        let params = wire.get("params").cloned().unwrap_or_default();
        let name = lock(&self.names).get(server).cloned();
        let Some(run) = client.run.upgrade() else { return Ok(()) };
        let t = crate::run::Traffic { direction: "to-client", server: name.as_deref(), method: &method, params: &params, answer: Ok(answer) };
        run.record_traffic(&t).map_err(|f| McpError::internal_error(f.text(), None))
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
        self.ask_to(Some(server), target, kind, what, request).await
    }

    async fn ask_to(&self, server: Option<usize>, target: Option<Target>, kind: Kind, what: &str, request: ServerRequest) -> Result<ClientResult, McpError> {
        let wire = serde_json::to_value(&request).unwrap_or_default();
        let method = wire["method"].as_str().unwrap_or(what).to_string();
        let params = wire.get("params").cloned().unwrap_or_default();
        let name = server.and_then(|server| lock(&self.names).get(server).cloned());
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
            // A 2026-07-28 client: asked through its call's `input_required` answer, answered on its retry
            // (its call answers -32021 instead when the client did not declare the capability).
            let request = match request {
                ServerRequest::CreateMessageRequest(r) => InputRequest::CreateMessage(r),
                ServerRequest::ElicitRequest(r) => InputRequest::Elicitation(r),
                ServerRequest::ListRootsRequest(r) => InputRequest::ListRoots(r),
                _ => return Err(McpError::internal_error(format!("{what} cannot be asked of a 2026-07-28 client"), None)),
            };
            let (answer, answered) = oneshot::channel();
            mb.to
                .send(Asked { request, kind, answer })
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
        if let Some((client, _, mailbox)) = self.target(server) {
            // A 2026-07-28 call hears log messages only at the level its `_meta` asked for, if any.
            if let Some(mb) = mailbox {
                if mb.log_level.is_none_or(|l| severity(params.level) < severity(l)) {
                    return;
                }
            }
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
        self.to_listeners(None, ServerNotification::ResourceUpdatedNotification(ResourceUpdatedNotification::new(params))).await;
    }

    pub async fn resource_list_changed(&self) {
        if self.passes(Kind::Resources) {
            for c in self.every() {
                let _ = c.peer.notify_resource_list_changed().await;
            }
            self.to_listeners(None, ServerNotification::ResourceListChangedNotification(Default::default())).await;
        }
    }

    pub async fn prompt_list_changed(&self) {
        if self.passes(Kind::Prompts) {
            for c in self.every() {
                let _ = c.peer.notify_prompt_list_changed().await;
            }
            self.to_listeners(None, ServerNotification::PromptListChangedNotification(Default::default())).await;
        }
    }
}
