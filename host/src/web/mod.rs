//! The human's pages on 127.0.0.1: the approval page (`/approvals`), where a person answers the gated calls
//! of open runs with a passkey, and the registration page (`/register`) of `runbook-host approvers add`.
//!
//! The approval page is served by `runbook-host approvals serve`, the resident hook server and the HTTP
//! proxy (each mounts [`approvals_router`]). It shows only requests the host issued (the run is replayed
//! and the module's approval ledger names the request, as `runbook-host approve` does), each with the
//! exact call (canonical, with its hash), the step's prose quoted as untrusted, and the run's path so far.
//! An answer is accepted only with a passkey assertion whose challenge is that request's approval payload
//! (docs/spec/run.md#approvals-bound-to-a-call) by a passkey of the allowed-signers file: there is no
//! unsigned approve on the page, so a script that opens it without the person's authenticator answers
//! nothing. The answer is written to the run's approval channel with the assertion as its signature, and
//! the run's own driver checks it again before feeding it (crate::signatures::passkey, crate::run::Run::apply_grant).
//!
//! Requests are accepted only with the page's own `Host` (`localhost:PORT`, `127.0.0.1:PORT`) and, for a
//! POST, its own `Origin`: another site in the same browser, or a DNS-rebound name, can neither read the
//! pending calls nor post an answer.

use crate::run::approvals;
use crate::run::{Guard, Run};
use crate::signatures::passkey::{self, Assertion};
use crate::signatures::sshsig::AllowedSigners;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const STYLE: &str = include_str!("page.css");
const APPROVALS_HTML: &str = include_str!("approvals.html");
const APPROVALS_JS: &str = include_str!("approvals.js");
const REGISTER_HTML: &str = include_str!("register.html");
const REGISTER_JS: &str = include_str!("register.js");
/// The most a posted answer or registration may hold.
const MAX_BODY: usize = 64 * 1024;

/// Where the approval page finds runs and the passkeys that may answer.
pub struct ApprovalPage {
    pub runs: PathBuf,
    pub allowed_signers: PathBuf,
    pub port: u16,
}

/// The page's own names: requests naming anything else (a rebound DNS name, another port) are refused.
fn own_host(headers: &HeaderMap, port: u16) -> bool {
    let hosts: Vec<_> = headers.get_all(header::HOST).iter().collect();
    hosts.len() == 1
        && hosts[0].to_str().is_ok_and(|h| [format!("localhost:{port}"), format!("127.0.0.1:{port}")].iter().any(|n| n.eq_ignore_ascii_case(h.trim())))
}

/// A POST must come from the page itself: the only origin passkeys are registered for.
fn own_origin(headers: &HeaderMap, port: u16) -> bool {
    headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) == Some(format!("http://localhost:{port}").as_str())
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    );
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    respond(status, "application/json", v.to_string())
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, &json!({ "error": message.into() }))
}

/// The approval page's routes, all under `/approvals`, for any server on 127.0.0.1 to mount.
pub fn approvals_router(page: Arc<ApprovalPage>) -> Router {
    Router::new()
        .route("/approvals", get(approvals_html))
        .route("/approvals/", get(approvals_html))
        .route("/approvals/app.js", get(approvals_js))
        .route("/approvals/style.css", get(style))
        .route("/approvals/api/pending", get(pending))
        .route("/approvals/api/answer", axum::routing::post(answer))
        .with_state(page)
}

async fn approvals_html(State(p): State<Arc<ApprovalPage>>, headers: HeaderMap) -> Response {
    if !own_host(&headers, p.port) {
        return refuse(StatusCode::MISDIRECTED_REQUEST, "not this page's host");
    }
    respond(StatusCode::OK, "text/html; charset=utf-8", APPROVALS_HTML)
}

async fn approvals_js() -> Response {
    respond(StatusCode::OK, "text/javascript; charset=utf-8", APPROVALS_JS)
}

async fn style() -> Response {
    respond(StatusCode::OK, "text/css; charset=utf-8", STYLE)
}

async fn pending(State(p): State<Arc<ApprovalPage>>, headers: HeaderMap) -> Response {
    if !own_host(&headers, p.port) {
        return refuse(StatusCode::MISDIRECTED_REQUEST, "not this page's host");
    }
    match tokio::task::spawn_blocking(move || list(&p)).await {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err(e)) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A pending request the host issued, with everything the page shows and the two payloads it may sign.
struct Issued {
    run_dir: PathBuf,
    run_id: String,
    id: String,
    step: Option<String>,
    call_sha256: String,
    request: u64,
    view: Value,
}

fn read_small(path: &Path) -> Option<Vec<u8>> {
    crate::files::read_path_bounded(path, crate::files::MAX_SMALL_FILE_BYTES).ok()
}

/// The requests of one run that the module's ledger names (others are listed as refused, never answerable).
fn issued(runs: &Path, run_id: &str) -> Result<(Vec<Issued>, Vec<Value>, Value), String> {
    let run_dir = runs.join(run_id);
    let pending = approvals::pending(&run_dir).map_err(|e| format!("run {run_id}: {e}"))?;
    let policy = crate::files::shared_policy().map_err(|e| e.to_string())?.clone();
    let manifest: Value = read_small(&run_dir.join("run.json")).and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
    let doc_file = manifest["document"]["file"].as_str().unwrap_or("");
    let prose: Value = (crate::files::is_safe_name(doc_file))
        .then(|| read_small(&run_dir.join(doc_file)))
        .flatten()
        .and_then(|d| policy.prose(&d).ok().flatten())
        .and_then(|p| serde_json::from_str(&p).ok())
        .unwrap_or(Value::Null);
    let (mut run, _) = Run::resume(policy.clone(), runs, run_id, 0, None, Guard::default()).map_err(|e| format!("run {run_id} does not check out: {e}"))?;
    let state = run.state().map_err(|e| e.to_string())?;
    let report: Value = run.report().ok().and_then(|r| serde_json::from_str(&r).ok()).unwrap_or(Value::Null);
    let mut visited: Vec<Value> = report["steps"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v["visits"].as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| json!({"step": k, "visits": v["visits"], "assert": v["assert"]}))
                .collect()
        })
        .unwrap_or_default();
    visited.sort_by(|a, b| a["step"].as_str().cmp(&b["step"].as_str()));
    let run_view = json!({
        "run_id": run_id,
        "document": manifest["document"]["reference"],
        "document_sha256": manifest["document"]["sha256"],
        "title": prose["runbook"]["title"],
        "current_step": state.step,
        "events": state.events,
        "visited": visited,
        "deviations": report["deviations"],
        "signed": manifest["approvals"]["signed"],
    });
    let (mut out, mut refused) = (Vec::new(), Vec::new());
    for p in pending {
        let record = approvals::request_record(&run_dir, &p.id).map_err(|e| e.to_string())?;
        let arguments_json = record["arguments_json"].as_str().unwrap_or("").to_string();
        let hash_ok = matches!(policy.call_sha256(&p.tool, &arguments_json), Ok(Ok(h)) if h == p.call_sha256);
        let request = run.request_for(p.step.as_deref(), &p.call_sha256).ok().flatten();
        let (true, Some(request)) = (hash_ok, request) else {
            let why = if hash_ok {
                "the policy module asked for no approval of this call in the run's current step"
            } else {
                "the request does not hash to its call"
            };
            refused.push(json!({"id": p.id, "why": why}));
            continue;
        };
        let canonical = match policy.canonicalize(&arguments_json) {
            Ok(Ok(c)) => c,
            _ => arguments_json.clone(),
        };
        let payload = |granted: bool| approvals::signed_message(run_id, request, p.step.as_deref(), &p.call_sha256, granted).map_err(|e| e.to_string());
        let step_prose = p.step.as_deref().map(|s| prose["steps"][s].clone()).unwrap_or(Value::Null);
        let view = json!({
            "run_id": run_id, "id": p.id, "request": request, "step": p.step, "tool": p.tool,
            "arguments": approvals::pretty(&canonical), "call_sha256": p.call_sha256, "requested_at": record["requested_at"],
            "prose": step_prose,
            "payload": {"approve": payload(true)?, "deny": payload(false)?},
        });
        out.push(Issued { run_dir: run_dir.clone(), run_id: run_id.to_string(), id: p.id, step: p.step, call_sha256: p.call_sha256, request, view });
    }
    Ok((out, refused, run_view))
}

fn passkeys(page: &ApprovalPage) -> Result<(String, Vec<(Vec<u8>, String)>), String> {
    let text = match std::fs::read_to_string(&page.allowed_signers) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("the allowed signers file: {e}")),
    };
    let creds = passkey::credentials(&text);
    Ok((text, creds))
}

fn open_runs(runs: &Path) -> Vec<String> {
    let mut ids: Vec<String> =
        std::fs::read_dir(runs).map(|rd| rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect()).unwrap_or_default();
    ids.retain(|id| crate::files::is_safe_name(id) && !id.starts_with('.') && approvals::pending(&runs.join(id)).is_ok_and(|p| !p.is_empty()));
    ids.sort();
    ids
}

fn list(page: &ApprovalPage) -> Result<Value, String> {
    let (_, creds) = passkeys(page)?;
    let mut runs = Vec::new();
    for run_id in open_runs(&page.runs) {
        match issued(&page.runs, &run_id) {
            Ok((requests, refused, mut view)) => {
                view["requests"] = Value::Array(requests.into_iter().map(|i| i.view).collect());
                view["refused"] = Value::Array(refused);
                runs.push(view);
            }
            Err(e) => runs.push(json!({"run_id": run_id, "error": e, "requests": []})),
        }
    }
    Ok(json!({
        "runs": runs,
        "passkeys": creds.iter().map(|(id, _)| URL_SAFE_NO_PAD.encode(id)).collect::<Vec<_>>(),
        "rp_id": passkey::RP_ID,
    }))
}

async fn answer(State(p): State<Arc<ApprovalPage>>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    if method != Method::POST || !own_host(&headers, p.port) || !own_origin(&headers, p.port) {
        return refuse(StatusCode::FORBIDDEN, "answers are taken only from this page, at http://localhost");
    }
    if body.len() > MAX_BODY {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "the answer is too large");
    }
    match tokio::task::spawn_blocking(move || take_answer(&p, &body)).await {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err((status, e))) => refuse(status, e),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

type Refusal = (StatusCode, String);

fn field_bytes(v: &Value, k: &str) -> Result<Vec<u8>, Refusal> {
    v[k].as_str().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok()).ok_or_else(|| (StatusCode::BAD_REQUEST, format!("`{k}` is missing or not base64url")))
}

/// Checks a posted answer and writes it to the run's approval channel.
fn take_answer(page: &ApprovalPage, body: &[u8]) -> Result<Value, Refusal> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("the answer is not JSON: {e}")))?;
    let run_id = v["run_id"].as_str().filter(|r| crate::files::is_safe_name(r)).ok_or_else(|| bad("`run_id` is missing".into()))?;
    let id = v["id"].as_str().ok_or_else(|| bad("`id` is missing".into()))?;
    let granted = v["granted"].as_bool().ok_or_else(|| bad("`granted` is missing".into()))?;
    let credential_id = field_bytes(&v, "credential_id")?;
    let (text, creds) = passkeys(page).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let Some((_, public_key)) = creds.into_iter().find(|(c, _)| *c == credential_id) else {
        return Err((StatusCode::FORBIDDEN, "this passkey is not in the allowed signers file".into()));
    };
    let (requests, _, _) = issued(&page.runs, run_id).map_err(|e| (StatusCode::CONFLICT, e))?;
    let Some(req) = requests.into_iter().find(|r| r.id == id) else {
        return Err((StatusCode::CONFLICT, format!("request {id} of run {run_id} is not awaiting an answer")));
    };
    let message = approvals::signed_message(&req.run_id, req.request, req.step.as_deref(), &req.call_sha256, granted)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let assertion = Assertion {
        public_key,
        authenticator_data: field_bytes(&v, "authenticator_data")?,
        client_data_json: field_bytes(&v, "client_data_json")?,
        signature: field_bytes(&v, "signature")?,
    };
    let armored = assertion.armor();
    let allowed = AllowedSigners::parse(&text).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let verified = crate::signatures::check_approval(&allowed, None, message.as_bytes(), &armored, &crate::clock::Clock::system())
        .map_err(|e| (StatusCode::FORBIDDEN, format!("the passkey's answer is refused: {e}")))?;
    match approvals::answer_signed(&req.run_dir, &req.id, &verified.principal, granted, &req.call_sha256, Some(&armored)) {
        Ok(()) => Ok(json!({
            "answered": if granted { "approved" } else { "denied" },
            "principal": verified.principal, "fingerprint": verified.fingerprint, "run_id": req.run_id, "id": req.id,
        })),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err((StatusCode::CONFLICT, format!("request {id} was already answered"))),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("writing the answer: {e}"))),
    }
}

/// One registration (`runbook-host approvers add`): the principal, the two challenges (the credential's
/// creation, and an assertion by it that proves the browser holds the key it reported), and where the
/// outcome goes.
pub struct Registration {
    pub principal: String,
    pub port: u16,
    pub user_id: Vec<u8>,
    pub create_challenge: Vec<u8>,
    pub proof_challenge: Vec<u8>,
    /// The allowed-signers line, once a passkey was registered (the command then writes it and stops).
    pub done: tokio::sync::mpsc::Sender<String>,
}

pub fn register_router(reg: Arc<Registration>) -> Router {
    Router::new()
        .route("/register", get(register_html))
        .route("/register/app.js", get(register_js))
        .route("/register/style.css", get(style))
        .route("/register/api/options", get(register_options))
        .route("/register/api/finish", axum::routing::post(register_finish))
        .with_state(reg)
}

async fn register_html(State(r): State<Arc<Registration>>, headers: HeaderMap) -> Response {
    if !own_host(&headers, r.port) {
        return refuse(StatusCode::MISDIRECTED_REQUEST, "not this page's host");
    }
    respond(StatusCode::OK, "text/html; charset=utf-8", REGISTER_HTML)
}

async fn register_js() -> Response {
    respond(StatusCode::OK, "text/javascript; charset=utf-8", REGISTER_JS)
}

async fn register_options(State(r): State<Arc<Registration>>, headers: HeaderMap) -> Response {
    if !own_host(&headers, r.port) {
        return refuse(StatusCode::MISDIRECTED_REQUEST, "not this page's host");
    }
    json_response(
        StatusCode::OK,
        &json!({
            "rp_id": passkey::RP_ID,
            "principal": r.principal,
            "user_id": URL_SAFE_NO_PAD.encode(&r.user_id),
            "create_challenge": URL_SAFE_NO_PAD.encode(&r.create_challenge),
            "proof_challenge": URL_SAFE_NO_PAD.encode(&r.proof_challenge),
        }),
    )
}

async fn register_finish(State(r): State<Arc<Registration>>, headers: HeaderMap, body: Bytes) -> Response {
    if !own_host(&headers, r.port) || !own_origin(&headers, r.port) {
        return refuse(StatusCode::FORBIDDEN, "registrations are taken only from this page, at http://localhost");
    }
    if body.len() > MAX_BODY {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "too large");
    }
    match check_registration(&r, &body) {
        Ok(line) => {
            let _ = r.done.send(line.clone()).await;
            json_response(StatusCode::OK, &json!({"registered": r.principal, "line": line}))
        }
        Err(e) => refuse(StatusCode::BAD_REQUEST, e),
    }
}

/// The new credential's creation ceremony, then an assertion by its key over the proof challenge: a page
/// cannot register a key it does not hold.
fn check_registration(r: &Registration, body: &[u8]) -> Result<String, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let b = |k: &str| field_bytes(&v, k).map_err(|(_, m)| m);
    let alg = v["alg"].as_i64().ok_or("`alg` is missing")?;
    let key = passkey::key_from_spki(&b("public_key")?, alg)?;
    let fingerprint = key.fingerprint(ssh_key::HashAlg::Sha256).to_string();
    passkey::check_client_data(&b("create_client_data_json")?, "webauthn.create", &r.create_challenge, passkey::RP_ID).map_err(|e| e.to_string())?;
    passkey::check_authenticator_data(&b("create_authenticator_data")?, passkey::RP_ID, &fingerprint).map_err(|e| e.to_string())?;
    let public_key = ssh_key::PublicKey::from(key.clone()).to_openssh().map_err(|e| e.to_string())?;
    let proof = Assertion { public_key, authenticator_data: b("authenticator_data")?, client_data_json: b("client_data_json")?, signature: b("signature")? };
    passkey::check_ceremony(&proof, "webauthn.get", &r.proof_challenge).map_err(|e| format!("the proof of the new passkey: {e}"))?;
    passkey::signers_line(&r.principal, &key, &b("credential_id")?)
}
