//! The proxy's face to the client: an rmcp `ServerHandler`. Every `tools/call` becomes an `invoke` event;
//! the module's decision says what happens to it.

use super::passthrough::Kind;
use super::{Dec, Failure, FailureKind, Shared};
use crate::run::approvals;
use crate::{wire, DecisionKind, Profile};
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, ContentBlock, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceError};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clients::{Caller, Outcome, Relay};

/// A server's request held in rounds, as started for its client's first round.
type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Outcome, McpError>> + Send>>;

pub const STATUS_TOOL: &str = "runbook_status";
pub const ADVANCE_TOOL: &str = "runbook_advance";

/// How often a held call looks for a human's answer.
const POLL: Duration = Duration::from_millis(100);

/// The application error code of a refused `initialize` (JSON-RPC's implementation-defined range).
const RUNBOOK_FAILED: ErrorCode = ErrorCode(-32000);

fn server_config(instructions: String, upstream: Option<&super::upstream::Upstream>) -> ServerConfig {
    let mut caps = ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build();
    if let Some(u) = upstream {
        u.passed_capabilities(&mut caps);
    }
    ServerConfig::new(caps).with_server_info(Implementation::new("runbook-host", env!("CARGO_PKG_VERSION"))).with_instructions(instructions)
}

fn tool_error(text: impl Into<String>) -> CallToolResponse {
    let mut r = CallToolResult::error(vec![ContentBlock::text(text.into())]);
    // 2026-07-28 clients need `resultType` on every result (rmcp leaves it out for older ones).
    r.result_type = Some(rmcp::model::ResultType::COMPLETE);
    CallToolResponse::Complete(r)
}

fn failure_error(f: &Failure) -> McpError {
    McpError::new(RUNBOOK_FAILED, format!("{}: {}", f.text(), f.message), Some(json!({"runbook_failed": f.kind.code()})))
}

fn own_tool(name: &str, description: &str, schema: Value) -> Tool {
    serde_json::from_value(json!({
        "name": name,
        "description": description,
        "inputSchema": schema,
        "annotations": {"readOnlyHint": name == STATUS_TOOL, "destructiveHint": false, "openWorldHint": false},
    }))
    .expect("a valid tool")
}

/// Counts a request as answered when it produced an answer; a request dropped half-way (the client left)
/// stays in flight.
struct Answered<'a>(&'a Shared, bool);

impl Answered<'_> {
    fn done(mut self) {
        self.1 = true;
    }
}

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.requests_answered.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Stops a task when its owner is done with it.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What became of a call held for approval.
enum Held {
    /// A human approved and the module accepted it: decide the call again.
    Approved,
    /// Answer this tool error.
    Answer(String),
}

/// Which run a handler serves.
enum Bind {
    /// Over stdio: the proxy's one run.
    Fixed(Arc<Shared>),
    /// Over HTTP, a handler per MCP session (rmcp asks the factory for one): the session's own run once
    /// it sent `initialize`; a request without a session (2026-07-28) goes to the hub's stateless run.
    Http { hub: Arc<super::Hub>, mine: std::sync::OnceLock<Arc<Shared>> },
}

pub struct Proxy {
    bind: Bind,
}

impl Proxy {
    pub fn fixed(shared: Arc<Shared>) -> Proxy {
        Proxy { bind: Bind::Fixed(shared) }
    }

    pub fn http(hub: Arc<super::Hub>) -> Proxy {
        Proxy { bind: Bind::Http { hub, mine: std::sync::OnceLock::new() } }
    }

    /// This client, as the servers' requests and notifications find it (keyed by its run).
    fn client(&self, ctx: &RequestContext<RoleServer>) -> super::clients::Client {
        super::clients::Client { key: Arc::as_ptr(self.s()) as usize, peer: ctx.peer.clone(), run: Arc::downgrade(self.s()) }
    }

    /// The servers (without touching a run).
    fn upstream(&self) -> &super::upstream::Upstream {
        match &self.bind {
            Bind::Fixed(s) => &s.upstream,
            Bind::Http { hub, .. } => &hub.base.upstream,
        }
    }

    fn s(&self) -> &Arc<Shared> {
        match &self.bind {
            Bind::Fixed(s) => s,
            Bind::Http { hub, mine } => mine.get().unwrap_or_else(|| hub.stateless()),
        }
    }

    fn instructions(&self) -> String {
        let s = &self.s();
        let mut t = format!(
            "Supervised by runbook-host: runbook {} (sha256 {}, trust {}), profile {}. Only the tools the runbook allows are listed, and every call is decided by its policy module; a blocked call answers a tool error naming the deviation. Call `{STATUS_TOOL}` for the current step, what is in scope and what awaits a human's approval.",
            s.doc.reference,
            &s.doc.sha256[..12],
            s.doc.trust.as_str(),
            super::profile_str(s.profile)
        );
        if s.profile != Profile::R2 {
            t.push_str(&format!(" Move to the next step with `{ADVANCE_TOOL}` {{\"to\": \"<step>\"}} once a step's work is done."));
        }
        t
    }

    fn advance_offered(&self) -> bool {
        self.s().profile != Profile::R2 && self.s().envelope.as_ref().is_some_and(|e| e["steps"].as_object().is_some_and(|o| !o.is_empty()))
    }

    fn own_tools(&self) -> Vec<Tool> {
        let mut v = vec![own_tool(
            STATUS_TOOL,
            "The supervised run's state: the runbook, the current step and its tools, what awaits a human's approval, and whether the run can still complete. Read-only.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        )];
        if self.advance_offered() {
            v.push(own_tool(
                ADVANCE_TOOL,
                "Move the supervised run to another step or terminal along a route the runbook declares (R1: the client routes). The policy module accepts or refuses the move.",
                json!({"type": "object", "properties": {"to": {"type": "string", "description": "the step or terminal to move to"}}, "required": ["to"], "additionalProperties": false}),
            ));
        }
        v
    }

    fn started(&self, ctx: &RequestContext<RoleServer>) -> Result<(), Failure> {
        if lock_client_missing(&self.s()) {
            *super::lock(&self.s().client) = Some(ctx.peer.clone());
        }
        let name = ctx.client_info().map(|i| i.name);
        self.s().ensure_started(name.as_deref())
    }

    fn status_result(&self) -> CallToolResponse {
        let text = super::status::render(&self.s());
        CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    async fn advance(&self, arguments: &JsonObject) -> CallToolResponse {
        let Some(to) = arguments.get("to").and_then(|v| v.as_str()) else {
            return tool_error("runbook_advance needs {\"to\": \"<step or terminal>\"}");
        };
        let fed = {
            let mut run = self.s().lock_run();
            if let Some(t) = self.s().failed_text(&mut run, None) {
                return tool_error(t);
            }
            self.s().drive(&mut run, |r| r.advance(to))
        };
        self.s().after_event().await;
        match fed {
            Err(f) => tool_error(f.text()),
            Ok(d) if d.decision == DecisionKind::Allow => CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(format!(
                "now at `{}`\n{}",
                d.step.as_deref().unwrap_or("?"),
                super::status::render(&self.s())
            ))])),
            Ok(d) if d.decision == DecisionKind::Halt => tool_error(self.halt_text(&d)),
            Ok(d) => tool_error(format!(
                "{}: the move to `{to}` was not taken. {} Now at `{}`.",
                d.reason_code().or(d.deviation_code()).unwrap_or_else(|| "refused".into()),
                d.explanation,
                d.step.as_deref().unwrap_or("?"),
            )),
        }
    }

    fn halt_text(&self, d: &Dec) -> String {
        let mut run = self.s().lock_run();
        let reason = d.reason_code();
        self.s().failed_text(&mut run, reason.as_deref()).unwrap_or_else(|| format!("runbook_failed:{}", reason.as_deref().unwrap_or("halted")))
    }

    fn deny_text(&self, tool: &str, d: &Dec) -> String {
        // A deviation names what was reached for; a denial without one (9.28's inexact-number) its reason.
        let class = d.deviation_code().or(d.reason_code()).unwrap_or_else(|| "denied".into());
        let in_scope = {
            let mut run = self.s().lock_run();
            self.s().visible_tool_names(&mut run)
        };
        format!(
            "{class}: `{tool}` was blocked and not forwarded. {} In scope now: {}. See `{STATUS_TOOL}`.",
            d.explanation,
            if in_scope.is_empty() { "nothing".to_string() } else { in_scope.join(", ") }
        )
    }

    /// Holds a gated call until a human answers through `runbook-host approve` (a channel the agent cannot
    /// reach), at most `--approval-timeout`, then feeds the answer to the module.
    async fn hold(&self, d: &Dec, tool: &str, arguments_json: &str, ctx: &RequestContext<RoleServer>) -> Held {
        let s = &self.s();
        let sha = match s.policy.call_sha256(tool, arguments_json) {
            Ok(Ok(h)) => h,
            _ => return Held::Answer("runbook_failed:host-error: the call's hash could not be computed".into()),
        };
        let (channel, command) = {
            let run = s.lock_run();
            (s.approval_channel(&run), s.approve_command(&run, d.step.as_deref()))
        };
        let Some(channel) = channel else { return Held::Answer("runbook_failed:host-error".into()) };
        let step = d.step.clone();
        // An answer that came after an earlier request for this very call timed out.
        if let Ok(Some((id, grant))) = channel.answered_for(&sha) {
            return self.apply(&id, grant).await;
        }
        let requested = {
            let mut st = s.lock_run();
            match st.run.as_mut() {
                Some(r) => r.request_approval(step.as_deref(), tool, arguments_json, &sha),
                None => return Held::Answer("runbook_failed:host-error".into()),
            }
        };
        let id = match requested {
            Ok(id) => id,
            Err(e) => return Held::Answer(format!("runbook_failed:host-error: the approval request could not be written: {e}")),
        };
        let timeout = s.approval_timeout;
        eprintln!(
            "runbook-host run: `{tool}` in step `{}` needs a human's approval (call sha256 {sha}); from another terminal: {command}   (waiting {}s)",
            step.as_deref().unwrap_or("-"),
            timeout.as_secs()
        );
        // `--approve-via elicitation`: the client is asked too; its answer is written where the terminal's
        // goes, so whichever comes first is the one fed (the other finds the request answered).
        let _asking = s.approve_via_elicitation.then(|| self.ask_approval(ctx, &channel, &id, tool, arguments_json, step.as_deref(), &sha)).flatten();
        let deadline = Instant::now() + timeout;
        loop {
            match channel.poll(&id) {
                Ok(Some(grant)) => return self.apply(&id, grant).await,
                Ok(None) => {}
                Err(e) => return Held::Answer(format!("needs-approval: the answer to request {id} is unusable ({e}); ask for a new approval with: {command}")),
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Never past the deadline: a short --approval-timeout is kept, not rounded up to the poll.
            tokio::select! {
                _ = tokio::time::sleep(POLL.min(deadline - now)) => {}
                _ = ctx.ct.cancelled() => return Held::Answer("needs-approval: the call was cancelled while it waited for approval".into()),
            }
        }
        s.last_call_timed_out.store(true, Ordering::SeqCst);
        Held::Answer(format!(
            "needs-approval: step `{}` is gated: `{tool}` with these exact arguments (call sha256 {sha}) needs a human's approval, and none came within {}s. A human approves from a terminal the agent cannot reach with: {command}   Retry this same call after a human approved; do not try another way around the gate.",
            step.as_deref().unwrap_or("-"),
            timeout.as_secs()
        ))
    }

    /// Asks the calling client for the approval of request `id` through `elicitation/create` (on the call's
    /// own stream over HTTP): the exact call, its step and hash, approve or deny, and who answers. An
    /// accepted answer is written as the terminal's would be, under the approver the client names; a
    /// declined or cancelled one, or none, leaves the request to the terminal. Recorded in
    /// `traffic.ndjson`. Only a client that offers elicitation on the `initialize` handshake is asked (a
    /// 2026-07-28 client, asked only in rounds, is not). The task ends with the returned guard.
    #[allow(clippy::too_many_arguments)]
    fn ask_approval(
        &self,
        ctx: &RequestContext<RoleServer>,
        channel: &approvals::SharedChannel,
        id: &str,
        tool: &str,
        arguments_json: &str,
        step: Option<&str>,
        sha: &str,
    ) -> Option<AbortOnDrop> {
        use rmcp::model::{ElicitRequest, ElicitRequestParams, ElicitationAction, ServerRequest};
        let offers = ctx.peer.peer_info().is_some_and(|i| i.capabilities.elicitation.is_some());
        if !offers {
            eprintln!("runbook-host run: the client does not offer elicitation: approve request {id} from a terminal");
            return None;
        }
        let step = step.unwrap_or("-").to_string();
        let message = format!(
            "runbook-host: step `{step}` is gated. Approve this exact call?\n  tool: {tool}\n  arguments: {arguments_json}\n  call sha256: {sha}\nAnswer only if you are the human responsible for this run, not the agent."
        );
        let params: ElicitRequestParams = match serde_json::from_value(json!({
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "title": "Decision", "enum": ["approve", "deny"], "description": "approve runs this one call; deny refuses it"},
                    "approver": {"type": "string", "title": "Your name", "description": "recorded in the run's evidence as the approver", "minLength": 1}
                },
                "required": ["decision", "approver"]
            }
        })) {
            Ok(p) => p,
            Err(_) => return None,
        };
        let mut request = ServerRequest::ElicitRequest(ElicitRequest::new(params.clone()));
        use rmcp::model::GetExtensions;
        request.extensions_mut().insert(rmcp::service::OriginatingRequestId(ctx.id.clone()));
        let (peer, channel, id, sha, timeout) = (ctx.peer.clone(), Arc::clone(channel), id.to_string(), sha.to_string(), self.s().approval_timeout);
        let shared = Arc::clone(self.s());
        let task = tokio::spawn(async move {
            let sent = peer.send_request_with_option(request, rmcp::service::PeerRequestOptions::with_timeout(timeout)).await;
            let answer = match sent {
                Ok(h) => h.await_response().await.map_err(|e| match e {
                    ServiceError::McpError(e) => e,
                    other => McpError::internal_error(other.to_string(), None),
                }),
                Err(e) => Err(McpError::internal_error(e.to_string(), None)),
            };
            let answered = answer.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()).map_err(|e| i64::from(e.code.0));
            let params = serde_json::to_value(&params).unwrap_or_default();
            let t = crate::run::Traffic {
                direction: "to-client",
                server: None,
                method: "elicitation/create",
                params: &params,
                answer: answered.as_ref().map_err(|c| *c),
            };
            if shared.record_traffic(&t).is_err() {
                return;
            }
            let Ok(rmcp::model::ClientResult::ElicitResult(r)) = answer else {
                eprintln!("runbook-host run: the client did not answer approval request {id}: approve it from a terminal");
                return;
            };
            let content = r.content.unwrap_or_default();
            let decision = content.get("decision").and_then(|v| v.as_str());
            let approver = content.get("approver").and_then(|v| v.as_str()).map(str::trim).unwrap_or("");
            match (r.action, decision) {
                (ElicitationAction::Accept, Some(d @ ("approve" | "deny"))) if !approver.is_empty() => {
                    eprintln!("runbook-host run: approval request {id} answered `{d}` through the client by `{approver}` (elicitation)");
                    if let Err(e) = channel.answer_signed(&id, approver, d == "approve", &sha, None) {
                        eprintln!("runbook-host run: the client's answer to request {id} was not written: {e}");
                    }
                }
                _ => eprintln!("runbook-host run: the client left approval request {id} unanswered: approve it from a terminal"),
            }
        });
        Some(AbortOnDrop(task.abort_handle()))
    }

    /// Feeds a human's answer to the module (which refuses it if the step asked about is no longer the
    /// current one).
    async fn apply(&self, id: &str, grant: approvals::Grant) -> Held {
        let s = &self.s();
        // One human answer is fed once, even when two identical calls waited on the same request.
        if !super::lock(&s.applied).insert(id.to_string()) {
            return Held::Answer(format!("needs-approval: the answer to request {id} was already used by another call; this call needs its own approval"));
        }
        let fed = {
            let mut run = s.lock_run();
            s.drive(&mut run, |r| r.apply_grant(id, &grant))
        };
        s.after_event().await;
        match fed {
            // An answer the host never asked for (or unsigned where signatures are required): the gate stays shut.
            Err(f) if f.kind == FailureKind::ApprovalRefused => Held::Answer(format!("needs-approval: {}", f.message)),
            Err(f) => Held::Answer(f.text()),
            Ok(d) if d.decision == DecisionKind::Allow && grant.granted => Held::Approved,
            Ok(d) if d.decision == DecisionKind::Allow => {
                Held::Answer(format!("needs-approval: `{}` refused this call (approval recorded, seq {}); it will not run", grant.approver, d.seq))
            }
            Ok(d) => {
                Held::Answer(format!("needs-approval: the approval by `{}` was not accepted, so the gate stays closed. {}", grant.approver, d.explanation))
            }
        }
    }

    async fn supervised_call(&self, request: CallToolRequestParams, ctx: &RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let s = &self.s();
        let tool = request.name.to_string();
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let arguments_json = serde_json::to_string(&arguments).unwrap_or_else(|_| "{}".into());
        let call_id = match &ctx.id {
            rmcp::model::NumberOrString::Number(n) => n.to_string(),
            rmcp::model::NumberOrString::String(t) => t.to_string(),
        };
        s.last_call_timed_out.store(false, Ordering::SeqCst);
        // The retry of a call a 2026-07-28 server answered `input_required`: the call decided before, continued.
        if let Some(token) = request.request_state.as_deref().filter(|t| t.starts_with(super::clients::FLOW_STATE)) {
            if let Some(relay) = s.upstream.clients.take_relay(token) {
                return self.relay_retry(relay, request, ctx).await;
            }
        }
        // A shadow run (`--mode shadow`) forwards what the module did not allow, after recording it in
        // shadow.ndjson; such a call's result is not fed (the module never let it run).
        let mut feed = true;
        // Decide; after an accepted approval, decide again (a bounded number of rounds).
        let mut rounds = 0;
        loop {
            rounds += 1;
            let fed = {
                let mut run = s.lock_run();
                if let Some(t) = s.failed_text(&mut run, None) {
                    if s.shadow && s.over_not_broken(&mut run) {
                        // The run ended (where enforcement would have stopped the agent): nothing is left
                        // to decide or record, and a shadow proxy blocks nothing.
                        eprintln!("runbook-host run: shadow: `{tool}` forwarded after the run ended ({t}); not recorded");
                        feed = false;
                        break;
                    }
                    return Ok(tool_error(t));
                }
                s.drive(&mut run, |r| r.invoke(&tool, &arguments, Some(&call_id), None))
            };
            let d = match fed {
                Ok(d) => d,
                Err(f) => return Ok(tool_error(f.text())),
            };
            if s.shadow && d.decision != DecisionKind::Allow {
                let recorded = {
                    let mut run = s.lock_run();
                    run.run.as_mut().map(|r| r.record_shadow_forward(&tool, &arguments, d.seq, &wire::code(d.decision)))
                };
                if let Some(Err(e)) = recorded {
                    return Ok(tool_error(Failure::from(e).text()));
                }
                s.after_event().await;
                feed = false;
                break;
            }
            match d.decision {
                DecisionKind::Allow => break,
                DecisionKind::Deny => {
                    s.after_event().await;
                    return Ok(tool_error(self.deny_text(&tool, &d)));
                }
                DecisionKind::NeedsApproval if rounds < 4 => match self.hold(&d, &tool, &arguments_json, ctx).await {
                    Held::Approved => continue,
                    Held::Answer(t) => return Ok(tool_error(t)),
                },
                DecisionKind::Halt => {
                    s.after_event().await;
                    return Ok(tool_error(self.halt_text(&d)));
                }
                DecisionKind::NeedsApproval | DecisionKind::NeedsVerdict => {
                    return Ok(tool_error(format!("needs-approval: the gate did not open (seq {})", d.seq)))
                }
            }
        }
        // Allowed: forward to the server that has it.
        let Some((server, name)) = s.upstream.route(&tool) else {
            let msg = format!("no server behind this proxy provides `{tool}`");
            if feed {
                let _ = self.feed_result(&tool, json!({"error": msg}), true, &call_id);
            }
            return Ok(tool_error(msg));
        };
        // The call as the server knows it; the client's own `_meta` stays here (the proxy sets its own
        // progress token), a 2026-07-28 retry's input responses and request state pass as they came.
        let mut params = CallToolRequestParams::new(name.clone());
        params.arguments = request.arguments.clone();
        let ours = request.request_state.as_deref().is_some_and(|t| t.starts_with(super::clients::FLOW_STATE));
        if s.upstream.servers[server].modern {
            // A 2026-07-28 server asks through its answer (`relayed`). A state of the proxy's that names no
            // call it holds (changed, or its call already ended) is refused, and the call recorded as failed.
            if ours {
                let e = McpError::invalid_params("requestState names no request held by this proxy (changed, or its request already ended)", None);
                return self.finish_call(&tool, &call_id, feed, Err(ServiceError::McpError(e))).await;
            }
            params.input_responses = request.input_responses;
            params.request_state = request.request_state;
            let relay = Relay { tool, arguments: request.arguments, server, name, call_id, feed, state: None, asked: Default::default() };
            return self.relayed(relay, params, ctx).await;
        }
        // A 2026-07-28 client cannot be sent a server's request: its call is held in rounds (`round`).
        let on_2026 = ctx.meta.protocol_version().is_some_and(|v| !v.has_initialize());
        let ours = request.request_state.as_deref().and_then(|t| t.strip_prefix(super::clients::FLOW_STATE)).is_some();
        let forwarded = if on_2026 || ours {
            let (resume, responses) = if ours {
                (request.request_state, request.input_responses)
            } else {
                // A server's own request state (a server on 2026-07-28) passes as it came.
                params.input_responses = request.input_responses;
                params.request_state = request.request_state;
                (None, None)
            };
            let subject = format!("tools/call `{tool}`");
            let base = Arc::clone(&self.s().base);
            let progress = ctx.meta.get_progress_token().map(|t| (ctx.peer.clone(), t));
            let start = move |caller: Caller| -> Pending {
                Box::pin(async move {
                    base.upstream.call(server, params, progress, Some(caller), None).await.map(Outcome::Call).map_err(|e| match e {
                        ServiceError::McpError(e) => e,
                        other => McpError::internal_error(format!("the server did not answer: {other}"), None),
                    })
                })
            };
            match self.round(subject, start, resume, responses, ctx).await {
                Ok(Ok(Outcome::Call(r))) => Ok(r),
                Ok(Ok(_)) => Err(ServiceError::UnexpectedResponse),
                Ok(Err(input)) => return Ok(CallToolResponse::InputRequired(input)),
                // Refused (-32021, a state the proxy did not give) or failed at the server: fed as the
                // call's failed result below, as any forwarded call's error is.
                Err(e) => Err(ServiceError::McpError(e)),
            }
        } else {
            params.input_responses = request.input_responses;
            params.request_state = request.request_state;
            tokio::select! {
                r = s.upstream.call(
                    server,
                    params,
                    ctx.meta.get_progress_token().map(|t| (ctx.peer.clone(), t)),
                    Some((self.client(ctx), ctx.id.clone(), None)),
                    None,
                ) => r,
                _ = ctx.ct.cancelled() => Err(ServiceError::Cancelled { reason: Some("cancelled by the client".into()) }),
            }
        };
        self.finish_call(&tool, &call_id, feed, forwarded).await
    }

    /// A forwarded call's answer: its result (or error) fed to the module, unless `feed` is off, and the
    /// answer the client hears.
    async fn finish_call(
        &self,
        tool: &str,
        call_id: &str,
        feed: bool,
        forwarded: Result<CallToolResponse, ServiceError>,
    ) -> Result<CallToolResponse, McpError> {
        let s = &self.s();
        match forwarded {
            // The server needs the client's input before it can answer (2026-07-28): not the call's result,
            // so nothing is fed; the client's retry is a call of its own, decided again.
            Ok(CallToolResponse::InputRequired(r)) => Ok(CallToolResponse::InputRequired(r)),
            Ok(CallToolResponse::Complete(mut result)) => {
                // A server on an older protocol leaves `resultType` out; a client on 2026-07-28 needs it
                // (rmcp drops it again for older clients).
                if result.result_type.is_none() {
                    result.result_type = Some(rmcp::model::ResultType::COMPLETE);
                }
                if !feed {
                    return Ok(CallToolResponse::Complete(result));
                }
                let observed = match &result.structured_content {
                    Some(v) => v.clone(),
                    None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
                };
                let d = self.feed_result(tool, observed, result.is_error.unwrap_or(false), call_id);
                s.after_event().await;
                match d {
                    Err(f) => Ok(tool_error(f.text())),
                    Ok(d) if d.decision == DecisionKind::Halt => Ok(tool_error(self.halt_text(&d))),
                    Ok(d) if d.decision == DecisionKind::NeedsVerdict => {
                        result.content.push(ContentBlock::text(format!(
                            "runbook: step `{}` cannot be judged from this result by the runbook's asserts; it waits for a human's verdict (see `{STATUS_TOOL}`).",
                            d.step.as_deref().unwrap_or("?")
                        )));
                        Ok(CallToolResponse::Complete(result))
                    }
                    Ok(_) => Ok(CallToolResponse::Complete(result)),
                }
            }
            // A task (the 2026-07-28 tasks extension) or a kind rmcp adds later.
            Ok(_) => {
                let msg = "the server answered with a task, which the proxy does not pass through".to_string();
                if feed {
                    let _ = self.feed_result(tool, json!({"error": msg}), true, call_id);
                    s.after_event().await;
                }
                Ok(tool_error(msg))
            }
            Err(e) => {
                let msg = e.to_string();
                if feed {
                    let _ = self.feed_result(tool, json!({"error": msg}), true, call_id);
                    s.after_event().await;
                }
                match e {
                    ServiceError::McpError(data) => Err(data),
                    _ => Ok(tool_error(format!("the server did not answer: {msg}"))),
                }
            }
        }
    }

    /// A call to a 2026-07-28 server, decided (`relay` names it). The server asks the client through its
    /// answer (`input_required`, with requests under keys of its own and a `requestState`):
    /// - a 2026-07-28 client is answered the server's requests as they are (their keys kept) under a
    ///   `requestState` of the proxy's own, which holds the server's; its retry ([`Self::relay_retry`])
    ///   continues this call without deciding it again, its answers and the server's state sent back. A
    ///   request for what it did not declare is never passed: the call answers -32021 and is recorded failed.
    /// - a 2025-11-25 client is asked with requests of the proxy's own (on its call's stream), and the
    ///   server is sent the answers; one the client cannot answer fails the call, recorded.
    ///
    /// The result is fed once, at the end, under the decided call's id.
    async fn relayed(&self, mut relay: Relay, mut params: CallToolRequestParams, ctx: &RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let s = &self.s();
        let on_2026 = ctx.meta.protocol_version().is_some_and(|v| !v.has_initialize());
        let mut rounds = 0;
        loop {
            let forwarded = tokio::select! {
                r = s.upstream.call(
                    relay.server,
                    params.clone(),
                    ctx.meta.get_progress_token().map(|t| (ctx.peer.clone(), t)),
                    Some((self.client(ctx), ctx.id.clone(), None)),
                    Some(self.told(ctx, on_2026)),
                ) => r,
                _ = ctx.ct.cancelled() => Err(ServiceError::Cancelled { reason: Some("cancelled by the client".into()) }),
            };
            let input = match forwarded {
                Ok(CallToolResponse::InputRequired(input)) => input,
                other => return self.finish_call(&relay.tool, &relay.call_id, relay.feed, other).await,
            };
            let asked = input.input_requests.clone().unwrap_or_default();
            if on_2026 {
                let caps = ctx.meta.client_capabilities().unwrap_or_default();
                let mut lacking = serde_json::Map::new();
                for r in asked.values() {
                    let Some(kind) = input_kind(r) else {
                        let e = McpError::invalid_params("the server asked the client for something of a kind the proxy does not know", None);
                        return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await;
                    };
                    // Withheld (`--block`) or not declared by the client: never asked of it.
                    if let Some(c) = super::clients::missing(&caps, kind) {
                        lacking.insert(c.to_string(), json!({}));
                    } else if !s.upstream.clients.passes(kind) {
                        let e = McpError::new(ErrorCode::METHOD_NOT_FOUND, format!("the proxy withholds {kind:?} from its client (`run --block`)"), None);
                        return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await;
                    }
                }
                if !lacking.is_empty() {
                    let e = McpError::missing_required_client_capability(serde_json::from_value(Value::Object(lacking)).unwrap_or_default());
                    return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await;
                }
                let token = match new_state() {
                    Ok(t) => t,
                    Err(e) => return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await,
                };
                relay.state = input.request_state;
                relay.asked = asked;
                s.upstream.clients.keep_relay(token.clone(), relay);
                let mut out = rmcp::model::InputRequiredResult::new(input.input_requests, Some(token));
                out.meta = input.meta;
                return Ok(CallToolResponse::InputRequired(out));
            }
            rounds += 1;
            if rounds > MAX_ROUNDS {
                let e = McpError::internal_error(format!("the server asked for the client's input more than {MAX_ROUNDS} times"), None);
                return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await;
            }
            match self.answered_here(Some(relay.server), &asked, ctx).await {
                Ok(responses) => params.input_responses = Some(responses),
                Err(e) => return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await,
            }
            params.request_state = input.request_state;
        }
    }

    /// A 2026-07-28 client's retry of a call relayed to its server ([`Self::relayed`]): the same tool with
    /// the same arguments (else refused, -32602, and the call recorded failed), not decided again; its
    /// answers are recorded beside the server's requests and sent to the server with the server's state.
    async fn relay_retry(&self, mut relay: Relay, request: CallToolRequestParams, ctx: &RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let s = &self.s();
        let same = request.name == relay.tool && request.arguments.clone().unwrap_or_default() == relay.arguments.clone().unwrap_or_default();
        if !same {
            let e = McpError::invalid_params(format!("requestState belongs to tools/call `{}` with the arguments it was decided on", relay.tool), None);
            return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await;
        }
        {
            let mut run = s.lock_run();
            if let Some(t) = s.failed_text(&mut run, None) {
                return Ok(tool_error(t));
            }
        }
        let responses = request.input_responses.clone().unwrap_or_default();
        for (key, asked) in &relay.asked {
            if let Some(answer) = responses.get(key) {
                if let Err(e) = s.upstream.clients.record_answer(relay.server, &self.client(ctx), asked, answer) {
                    return self.finish_call(&relay.tool, &relay.call_id, relay.feed, Err(ServiceError::McpError(e))).await;
                }
            }
        }
        let mut params = CallToolRequestParams::new(relay.name.clone());
        params.arguments = relay.arguments.clone();
        params.input_responses = request.input_responses;
        params.request_state = relay.state.take();
        self.relayed(relay, params, ctx).await
    }

    /// What a 2026-07-28 server asked, asked of this 2025-11-25 client with requests of the proxy's own
    /// (each recorded): the answers under the server's keys.
    async fn answered_here(
        &self,
        server: Option<usize>,
        asked: &rmcp::model::InputRequests,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InputResponses, McpError> {
        let mut responses = rmcp::model::InputResponses::new();
        for (key, r) in asked {
            let answer = self.s().upstream.clients.ask_for(server, self.client(ctx), ctx.id.clone(), r).await?;
            responses.insert(key.clone(), answer);
        }
        Ok(responses)
    }

    /// What a 2026-07-28 server is told of the client with each of its requests, in place of the proxy's
    /// own: the capabilities it declared (those passed through), and the log level it asked for (a
    /// 2026-07-28 client in its `_meta`; a 2025-11-25 one by `logging/setLevel`, else every message, as a
    /// 2025-11-25 server sends them).
    #[allow(deprecated)]
    fn told(&self, ctx: &RequestContext<RoleServer>, on_2026: bool) -> rmcp::model::RequestMetaObject {
        let up = &self.s().upstream;
        let (caps, level) = if on_2026 {
            (ctx.meta.client_capabilities().unwrap_or_default(), ctx.meta.log_level())
        } else {
            let caps = ctx.peer.peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
            (caps, Some(super::lock(&up.log_level).unwrap_or(rmcp::model::LoggingLevel::Debug)))
        };
        let mut told = rmcp::model::ClientCapabilities::default();
        if up.clients.passes(Kind::Sampling) {
            told.sampling = caps.sampling;
        }
        if up.clients.passes(Kind::Elicitation) {
            told.elicitation = caps.elicitation;
        }
        if up.clients.passes(Kind::Roots) {
            told.roots = caps.roots;
        }
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.set_client_capabilities(told);
        if let Some(l) = level.filter(|_| up.clients.passes(Kind::Logging)) {
            meta.set_log_level(l);
        }
        meta
    }

    /// One round of a 2026-07-28 request whose server may ask the client (sampling, elicitation, roots):
    /// `tools/call`, `resources/read` or `prompts/get`. The server speaks 2025-11-25 to the proxy and asks
    /// with requests of its own, which a 2026-07-28 client may not be sent. So the server's request runs
    /// on, held by the proxy; each round answers the client either the outcome or `input_required` with
    /// the server's requests and a `requestState` of the proxy's own, and the client's retry (`resume`,
    /// with its `inputResponses`) answers the server's requests and starts the next round. A request left
    /// unanswered is asked again; an unknown state, or one of another subject, is refused (-32602); a
    /// request for what the client did not declare answers -32021 and cancels the server's request. Each
    /// tool call retry is a call the module decides again; the outcome is fed with the last.
    async fn round(
        &self,
        subject: String,
        start: impl FnOnce(Caller) -> Pending,
        resume: Option<String>,
        responses: Option<rmcp::model::InputResponses>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<Outcome, rmcp::model::InputRequiredResult>, McpError> {
        use super::clients::{client_result, missing, Flow, Mailbox};
        let clients = Arc::clone(&self.s().upstream.clients);
        let capabilities = ctx.meta.client_capabilities().unwrap_or_default();
        let mut flow = match resume {
            Some(token) => {
                let Some(mut flow) = clients.take_flow(&token) else {
                    return Err(McpError::invalid_params("requestState names no request held by this proxy (changed, or its request already ended)", None));
                };
                if flow.subject != subject {
                    return Err(McpError::invalid_params(format!("requestState belongs to {}, not to {subject}", flow.subject), None));
                }
                let responses = responses.unwrap_or_default();
                for key in flow.waiting.keys().cloned().collect::<Vec<_>>() {
                    if let Some(answer) = responses.get(&key) {
                        let asked = flow.waiting.remove(&key).expect("listed");
                        let _ = asked.answer.send(client_result(&asked.request, answer.clone()));
                    }
                }
                flow
            }
            None => {
                let (to, asked) = tokio::sync::mpsc::unbounded_channel();
                let (done_tx, done) = tokio::sync::oneshot::channel();
                let mailbox = Mailbox { to, capabilities: capabilities.clone(), log_level: ctx.meta.log_level() };
                let pending = start((self.client(ctx), ctx.id.clone(), Some(mailbox)));
                let task = tokio::spawn(async move {
                    let _ = done_tx.send(pending.await);
                })
                .abort_handle();
                Flow { done, asked, waiting: Default::default(), next_key: 0, subject, task }
            }
        };
        if flow.waiting.is_empty() {
            tokio::select! {
                r = &mut flow.done => return r.unwrap_or_else(|_| Err(McpError::internal_error("the server's request ended without an answer", None))).map(Ok),
                Some(first) = flow.asked.recv() => {
                    // A server may ask several things at once: what comes within a moment joins this round.
                    let mut batch = vec![first];
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    while let Ok(more) = flow.asked.try_recv() {
                        batch.push(more);
                    }
                    // What the client did not declare it can answer is never asked of it (SEP-2575). The
                    // server asks only because the proxy offers everything on its one session: asked nothing
                    // the client can answer, the request answers -32021 naming what it lacks; asked some, the
                    // rest is refused to the server as a client without the capability would refuse it.
                    let (lacking, offered): (Vec<_>, Vec<_>) = batch.into_iter().partition(|a| missing(&capabilities, a.kind).is_some());
                    if offered.is_empty() {
                        let names: serde_json::Map<String, Value> =
                            lacking.iter().filter_map(|a| missing(&capabilities, a.kind)).map(|c| (c.to_string(), json!({}))).collect();
                        return Err(McpError::missing_required_client_capability(serde_json::from_value(Value::Object(names)).unwrap_or_default()));
                    }
                    for a in lacking {
                        let what = missing(&capabilities, a.kind).unwrap_or("it");
                        let _ = a.answer.send(Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, format!("the client behind the proxy does not offer {what}"), None)));
                    }
                    for a in offered {
                        flow.next_key += 1;
                        flow.waiting.insert(format!("r{}", flow.next_key), a);
                    }
                }
                _ = ctx.ct.cancelled() => return Err(McpError::internal_error("cancelled by the client", None)),
            }
        }
        let requests = flow.waiting.iter().map(|(k, a)| (k.clone(), a.request.clone())).collect();
        let token = new_state()?;
        clients.keep_flow(token.clone(), flow);
        Ok(Err(rmcp::model::InputRequiredResult::new(Some(requests), Some(token))))
    }

    /// How a `resources/read` or `prompts/get` of a 2026-07-28 client (or a retry carrying the proxy's
    /// own state) is forwarded: in rounds, so its server may ask the client.
    fn held_in_rounds(&self, request_state: Option<&str>, ctx: &RequestContext<RoleServer>) -> (bool, bool) {
        let ours = request_state.is_some_and(|t| t.starts_with(super::clients::FLOW_STATE));
        (ctx.meta.protocol_version().is_some_and(|v| !v.has_initialize()) || ours, ours)
    }

    /// A request besides tools as it was answered, recorded first in `traffic.ndjson` (its params and
    /// the answer's digest, or the error's code): the client hears the answer only once it is recorded.
    fn passed<T: serde::Serialize>(&self, method: &str, params: &impl serde::Serialize, answer: Result<T, McpError>) -> Result<T, McpError> {
        let params = serde_json::to_value(params).unwrap_or_default();
        let answered = answer.as_ref().map(|a| serde_json::to_value(a).unwrap_or_default()).map_err(|e| i64::from(e.code.0));
        let up = &self.s().upstream;
        // With several servers the request went to one of them or to each (a list): not named.
        let server = (up.servers.len() == 1).then(|| up.servers[0].name.as_str());
        let t = crate::run::Traffic { direction: "to-server", server, method, params: &params, answer: answered.as_ref().map_err(|c| *c) };
        self.s().record_traffic(&t).map_err(|f| failure_error(&f))?;
        answer
    }

    fn feed_result(&self, tool: &str, result: Value, is_error: bool, call_id: &str) -> Result<Dec, Failure> {
        let s = &self.s();
        let mut run = s.lock_run();
        s.drive(&mut run, |r| r.result(tool, &result, is_error, Some(call_id)))
    }
}

/// How many times a 2025-11-25 client's request is sent again with its answers before the server's
/// asking is taken for a loop (rmcp's own client stops at the same number).
const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;

/// A fresh `requestState` of the proxy's own.
fn new_state() -> Result<String, McpError> {
    let mut token = [0u8; 16];
    getrandom::fill(&mut token).map_err(|e| McpError::internal_error(format!("the operating system's random source failed: {e}"), None))?;
    Ok(format!("{}{}", super::clients::FLOW_STATE, hex::encode(token)))
}

/// What a client must offer to be asked `request`.
fn input_kind(request: &rmcp::model::InputRequest) -> Option<Kind> {
    match request {
        rmcp::model::InputRequest::CreateMessage(_) => Some(Kind::Sampling),
        rmcp::model::InputRequest::Elicitation(_) => Some(Kind::Elicitation),
        rmcp::model::InputRequest::ListRoots(_) => Some(Kind::Roots),
        _ => None,
    }
}

/// A response of two kinds (complete, or the input a 2026-07-28 server needs first), serialized as
/// the result it carries, for `traffic.ndjson`.
struct Answer<T>(T);

impl serde::Serialize for Answer<ReadResourceResponse> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            ReadResourceResponse::Complete(r) => r.serialize(s),
            ReadResourceResponse::InputRequired(r) => r.serialize(s),
            _ => s.serialize_none(),
        }
    }
}

impl serde::Serialize for Answer<GetPromptResponse> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            GetPromptResponse::Complete(r) => r.serialize(s),
            GetPromptResponse::InputRequired(r) => r.serialize(s),
            _ => s.serialize_none(),
        }
    }
}

fn lock_client_missing(s: &Shared) -> bool {
    super::lock(&s.client).is_none()
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        server_config(self.instructions(), Some(&self.s().upstream))
    }

    /// What a 2026-07-28 client's `subscriptions/listen` may follow: the proxy's tool list (it changes with
    /// the run), and the servers' resources and prompts unless `--block` withholds them (rmcp keeps only
    /// what the proxy's capabilities offer).
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let up = self.upstream();
        let mut f = SubscriptionFilter::default();
        f.tools_list_changed = requested.tools_list_changed;
        if up.clients.passes(Kind::Resources) {
            f.resources_list_changed = requested.resources_list_changed;
            f.resource_subscriptions = requested.resource_subscriptions.clone();
        }
        if up.clients.passes(Kind::Prompts) {
            f.prompts_list_changed = requested.prompts_list_changed;
        }
        Some(f)
    }

    /// One listen stream, open until the client closes it: the resources it follows are subscribed at
    /// their servers for as long as some client follows them.
    async fn listen(&self, sub: SubscriptionContext) -> Result<(), McpError> {
        let up = self.upstream();
        let uris = sub.accepted().resource_subscriptions.clone().unwrap_or_default();
        for uri in &uris {
            let params = SubscribeRequestParams::new(uri.clone());
            let answer = up.subscribe(params.clone()).await;
            self.passed("resources/subscribe", &params, answer)?;
        }
        let ticket = up.clients.listening(Arc::as_ptr(self.s()) as usize, sub.sink().clone());
        sub.cancelled().await;
        up.clients.unlistened(ticket);
        for uri in uris {
            if !up.clients.watched(&uri) {
                let params = UnsubscribeRequestParams::new(uri);
                let answer = up.unsubscribe(params.clone()).await;
                let _ = self.passed("resources/unsubscribe", &params, answer);
            }
        }
        Ok(())
    }

    /// A tool as its server declares it (listed name): rmcp checks a 2026-07-28 call's `Mcp-Param-*`
    /// headers against its arguments by the schema's `x-mcp-header` (SEP-2243). Read from the servers'
    /// lists, never from a run: rmcp asks a handler it makes for the lookup alone.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.upstream().tool(name)
    }

    async fn initialize(&self, request: InitializeRequestParams, context: RequestContext<RoleServer>) -> Result<InitializeResult, McpError> {
        if let Bind::Http { hub, mine } = &self.bind {
            // A new MCP session: a run of its own.
            let _ = mine.set(hub.open());
        }
        context.peer.set_peer_info(request.clone());
        *super::lock(&self.s().client) = Some(context.peer.clone());
        self.s().upstream.clients.joined(self.client(&context));
        self.s().initialized.store(true, Ordering::SeqCst);
        let name = request.client_info.name.clone();
        if let Err(f) = self.s().ensure_started(Some(&name)) {
            return Err(failure_error(&f));
        }
        self.negotiate_initialize(&request)
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListToolsResult, McpError> {
        self.s().requests_begun.fetch_add(1, Ordering::SeqCst);
        self.s().last_request_ms.store(crate::clock::now_ms(), Ordering::SeqCst);
        let answered = Answered(&self.s(), false);
        if let Err(f) = self.started(&context) {
            answered.done();
            return Err(failure_error(&f));
        }
        let names = {
            let mut run = self.s().lock_run();
            let names = self.s().visible_tool_names(&mut run);
            run.last_listed = Some(names.clone());
            names
        };
        let mut tools: Vec<Tool> = names.iter().filter_map(|n| self.s().upstream.tool(n)).collect();
        tools.extend(self.own_tools());
        answered.done();
        // The list follows the run's step: never cached.
        Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(0))
    }

    // Everything but tools passes through to the servers (see `passthrough`); the run must have begun.
    async fn list_resources(&self, request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListResourcesResult, McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let answer = self.s().upstream.list_resources(request.clone()).await;
        self.passed("resources/list", &request, answer)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let answer = self.s().upstream.list_resource_templates(request.clone()).await;
        self.passed("resources/templates/list", &request, answer)
    }

    async fn read_resource(&self, request: ReadResourceRequestParams, context: RequestContext<RoleServer>) -> Result<ReadResourceResponse, McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let (rounds, ours) = self.held_in_rounds(request.request_state.as_deref(), &context);
        let answer = if rounds {
            let mut params = request.clone();
            let (resume, responses) = if ours { (params.request_state.take(), params.input_responses.take()) } else { (None, None) };
            let base = Arc::clone(&self.s().base);
            let start =
                move |caller: Caller| -> Pending { Box::pin(async move { base.upstream.read_resource(params, Some(caller)).await.map(Outcome::Resource) }) };
            match self.round(format!("resources/read `{}`", request.uri), start, resume, responses, &context).await {
                Ok(Ok(Outcome::Resource(r))) => Ok(r),
                Ok(Ok(_)) => Err(McpError::internal_error("the server answered with a result of another kind", None)),
                Ok(Err(input)) => Ok(ReadResourceResponse::InputRequired(input)),
                Err(e) => Err(e),
            }
        } else {
            // A 2026-07-28 server's `input_required` is asked of this 2025-11-25 client and answered back.
            let mut params = request.clone();
            let mut rounds = 0;
            loop {
                match self.s().upstream.read_resource(params.clone(), Some((self.client(&context), context.id.clone(), None))).await {
                    Ok(ReadResourceResponse::InputRequired(input)) if rounds < MAX_ROUNDS => {
                        rounds += 1;
                        match self.answered_here(None, &input.input_requests.clone().unwrap_or_default(), &context).await {
                            Ok(r) => params.input_responses = Some(r),
                            Err(e) => break Err(e),
                        }
                        params.request_state = input.request_state;
                    }
                    Ok(ReadResourceResponse::InputRequired(_)) => break Err(McpError::internal_error("the server kept asking for the client's input", None)),
                    other => break other,
                }
            }
        };
        self.passed("resources/read", &request, answer.map(Answer)).map(|a| a.0)
    }

    async fn subscribe(&self, request: SubscribeRequestParams, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let answer = self.s().upstream.subscribe(request.clone()).await;
        self.passed("resources/subscribe", &request, answer)?;
        self.s().upstream.clients.subscribed(&request.uri, self.client(&context));
        Ok(())
    }

    async fn unsubscribe(&self, request: UnsubscribeRequestParams, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        self.s().upstream.clients.unsubscribed(&request.uri, self.client(&context).key);
        let answer = self.s().upstream.unsubscribe(request.clone()).await;
        self.passed("resources/unsubscribe", &request, answer)
    }

    /// The client's roots changed: every server is told, when roots pass through.
    async fn on_roots_list_changed(&self, _context: rmcp::service::NotificationContext<RoleServer>) {
        let up = &self.s().upstream;
        if up.clients.passes(super::passthrough::Kind::Roots) {
            for server in &up.servers {
                let _ = server.peer.notify_roots_list_changed().await;
            }
        }
    }

    async fn list_prompts(&self, request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListPromptsResult, McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let answer = self.s().upstream.list_prompts(request.clone()).await;
        self.passed("prompts/list", &request, answer)
    }

    async fn get_prompt(&self, request: GetPromptRequestParams, context: RequestContext<RoleServer>) -> Result<GetPromptResponse, McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let (rounds, ours) = self.held_in_rounds(request.request_state.as_deref(), &context);
        let answer = if rounds {
            let mut params = request.clone();
            let (resume, responses) = if ours { (params.request_state.take(), params.input_responses.take()) } else { (None, None) };
            let base = Arc::clone(&self.s().base);
            let start = move |caller: Caller| -> Pending { Box::pin(async move { base.upstream.get_prompt(params, Some(caller)).await.map(Outcome::Prompt) }) };
            match self.round(format!("prompts/get `{}`", request.name), start, resume, responses, &context).await {
                Ok(Ok(Outcome::Prompt(r))) => Ok(r),
                Ok(Ok(_)) => Err(McpError::internal_error("the server answered with a result of another kind", None)),
                Ok(Err(input)) => Ok(GetPromptResponse::InputRequired(input)),
                Err(e) => Err(e),
            }
        } else {
            // A 2026-07-28 server's `input_required` is asked of this 2025-11-25 client and answered back.
            let mut params = request.clone();
            let mut rounds = 0;
            loop {
                match self.s().upstream.get_prompt(params.clone(), Some((self.client(&context), context.id.clone(), None))).await {
                    Ok(GetPromptResponse::InputRequired(input)) if rounds < MAX_ROUNDS => {
                        rounds += 1;
                        match self.answered_here(None, &input.input_requests.clone().unwrap_or_default(), &context).await {
                            Ok(r) => params.input_responses = Some(r),
                            Err(e) => break Err(e),
                        }
                        params.request_state = input.request_state;
                    }
                    Ok(GetPromptResponse::InputRequired(_)) => break Err(McpError::internal_error("the server kept asking for the client's input", None)),
                    other => break other,
                }
            }
        };
        self.passed("prompts/get", &request, answer.map(Answer)).map(|a| a.0)
    }

    async fn complete(&self, request: CompleteRequestParams, context: RequestContext<RoleServer>) -> Result<CompleteResult, McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let answer = self.s().upstream.complete(request.clone()).await;
        self.passed("completion/complete", &request, answer)
    }

    #[allow(deprecated)]
    async fn set_level(&self, request: rmcp::model::SetLevelRequestParams, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.started(&context).map_err(|f| failure_error(&f))?;
        let answer = self.s().upstream.set_level(request.clone()).await;
        self.passed("logging/setLevel", &request, answer)
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        self.s().requests_begun.fetch_add(1, Ordering::SeqCst);
        self.s().last_request_ms.store(crate::clock::now_ms(), Ordering::SeqCst);
        let answered = Answered(&self.s(), false);
        if let Err(f) = self.started(&context) {
            answered.done();
            return Ok(tool_error(f.text()));
        }
        let r = match request.name.as_ref() {
            STATUS_TOOL => Ok(self.status_result()),
            ADVANCE_TOOL if self.advance_offered() => Ok(self.advance(&request.arguments.clone().unwrap_or_default()).await),
            _ => self.supervised_call(request, &context).await,
        };
        // A call the client cancelled (or abandoned by leaving) was not answered.
        if !context.ct.is_cancelled() {
            answered.done();
        }
        // After the decision (and the result) were recorded, before the client hears it.
        crate::faults::point("answer", "before");
        r
    }
}

impl Drop for Proxy {
    /// An HTTP session ended (the client's DELETE, or the proxy stopping): so does its run.
    fn drop(&mut self) {
        if let Bind::Http { mine, hub } = &self.bind {
            if let Some(s) = mine.get() {
                // A session closed for being idle is a client that went away, not a clean shutdown: no
                // final output (which could complete a run the agent abandoned).
                let idle = crate::clock::now_ms().saturating_sub(s.last_request_ms.load(Ordering::SeqCst));
                let (reason, final_output) =
                    if idle + 1000 >= s.session_idle.as_millis() as u64 { (crate::EndReason::ClientClosed, false) } else { s.leave_reason() };
                s.end_run(reason, final_output);
                // Its bundle is complete: the run's module instance and files are let go now.
                hub.forget(s);
            }
        }
    }
}

/// The handler used when nothing may run (the document did not resolve, was tampered with, or the host
/// could not start): `initialize` answers `runbook_failed:<code>`, and so does any other request.
pub struct Refusal {
    pub failure: Failure,
}

impl ServerHandler for Refusal {
    fn get_info(&self) -> ServerConfig {
        server_config(format!("{}: {}", self.failure.text(), self.failure.message), None)
    }

    async fn initialize(&self, _request: InitializeRequestParams, _context: RequestContext<RoleServer>) -> Result<InitializeResult, McpError> {
        Err(failure_error(&self.failure))
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>) -> Result<ListToolsResult, McpError> {
        Err(failure_error(&self.failure))
    }

    async fn call_tool(&self, _request: CallToolRequestParams, _context: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        Ok(tool_error(self.failure.text()))
    }
}
