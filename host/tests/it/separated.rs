//! Separated mode (issue 28, item 1; docs/spec/README.md#threat-model), tested as the attacker: as root, the
//! test installs the service for an agent user, starts it with the command `service install` prints, drives a
//! session as a client process of the agent's user would (the SessionStart command hook, then every event
//! posted by the same process, as Claude Code does), and attacks from the agent's uid: forged events from
//! another process, the service's files, its port, its process. Each attack must fail, and the run's evidence
//! must verify against the host's key.

use crate::common::hooks::{base, bash, post, pre, repo, start, BIN};
use crate::common::{self, Tmp};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

const PY: &str = "/usr/bin/python3";

/// A client process of the agent's user standing in for Claude Code: it runs the SessionStart command
/// hook as a child (as Claude Code does) and posts every other event itself, answering one JSON line per
/// JSON line it reads.
const CLIENT: &str = r#"
import http.client, json, subprocess, sys
exe, port, user = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for line in sys.stdin:
    ev = json.loads(line)
    if ev["hook_event_name"] == "SessionStart":
        p = subprocess.run([exe, "hook", "--service", str(port), "--service-user", user], input=line.encode(), capture_output=True)
        out = {"code": p.returncode, "body": p.stdout.decode(), "stderr": p.stderr.decode()}
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/runbook-hook", body=line.encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = {"code": r.status, "body": r.read().decode()}
    print(json.dumps(out), flush=True)
"#;

/// Everything the agent's shell would try, each answered by what happened.
const ATTACK: &str = r#"
import http.client, json, os, signal, socket, sys
port, state, run, pid, forged = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
res = {}
def attempt(name, f):
    try:
        f(); res[name] = "done"
    except Exception as e:
        res[name] = type(e).__name__ + ": " + str(e)
def post(path, body=None, method="POST"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return "%d %s" % (r.status, r.read().decode().strip())
res["forged_event"] = post("/runbook-hook", forged)
res["status"] = post("/runbook-hook/status", method="GET")
res["shutdown"] = post("/runbook-hook/shutdown", "")
def write(p):
    with open(p, "a") as f: f.write("x")
attempt("append_events", lambda: write(os.path.join(run, "events.ndjson")))
attempt("list_runs", lambda: os.listdir(os.path.join(state, "runs")))
attempt("plant_cache", lambda: write(os.path.join(state, "cache", "planted")))
attempt("replace_binary", lambda: write(os.path.join(state, "bin", "runbook-host")))
attempt("edit_config", lambda: write(os.path.join(state, "service.json")))
attempt("read_key", lambda: open(os.path.join(state, "keys", "host.key")).read())
attempt("kill_service", lambda: os.kill(pid, signal.SIGKILL))
def squat():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", port)); s.listen()
attempt("squat_port", squat)
print(json.dumps(res))
"#;

/// A service's user and an agent's user made for one test, and a root-owned directory for its files;
/// removed when dropped (a running service is killed first, so that its user can be removed).
struct Setup {
    svc: String,
    agent: String,
    top: PathBuf,
    /// Removes `top` after the service and the users are gone.
    _tmp: Tmp,
    state: PathBuf,
    port: u16,
    service: Option<Child>,
    log: PathBuf,
    /// The command `service install` printed, to start the service again.
    start_cmd: String,
}

impl Setup {
    /// `tag` keeps the users and files of tests running at once apart; `ports`, their ports.
    fn new(tag: &str, ports: std::ops::Range<u16>) -> Setup {
        let id = std::process::id();
        let (svc, agent) = (format!("rbhs{tag}{id}"), format!("rbha{tag}{id}"));
        let o = Command::new("useradd").args(["--no-create-home", "--shell", "/bin/sh", &agent]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let tmp = Tmp::new(&format!("separated-{tag}"));
        let top = tmp.0.clone();
        std::fs::create_dir_all(top.join("src")).unwrap();
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
        let port = ports.clone().find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok()).expect("a free port below 1024");
        Setup { svc, agent, state: top.join("state"), log: top.join("service.log"), top, _tmp: tmp, port, service: None, start_cmd: String::new() }
    }
    fn st(&self) -> String {
        self.state.to_string_lossy().into_owned()
    }
    /// `service install` for the agent's user; its stdout (the start command) and stderr.
    fn install(&self, hook: &[&str]) -> (i32, String, String) {
        let (p, st) = (self.port.to_string(), self.st());
        let mut args = vec!["service", "install", "--state-dir", &st, "--user", &self.svc, "--port", &p, "--client", &self.agent, "--"];
        args.extend(hook);
        rh(&args)
    }
    /// Installs and starts the service with the command `install` printed.
    fn start(&mut self, hook: &[&str]) {
        let (code, start_cmd, err) = self.install(hook);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains(&format!("hook install --service {}", self.port)), "{err}");
        self.start_cmd = start_cmd.trim().to_string();
        self.restart();
    }
    /// Starts the installed service (again), its log new.
    fn restart(&mut self) {
        let child = common::cmd("sh").args(["-c", &format!("exec {}", self.start_cmd)]).stderr(std::fs::File::create(&self.log).unwrap()).spawn().unwrap();
        self.service = Some(child);
        wait_listening(&self.log);
    }
    fn stop(&mut self) {
        if let Some(mut c) = self.service.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    fn exe(&self) -> PathBuf {
        self.state.join("bin/runbook-host")
    }
    /// The run directory of a session the service decided.
    fn run_dir(&self, session: &str) -> PathBuf {
        let v: Value = serde_json::from_slice(&std::fs::read(self.state.join(format!("runs/.hook/{session}.json"))).unwrap()).unwrap();
        self.state.join("runs").join(v["run_id"].as_str().unwrap())
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.stop();
        if self.state.join("service.json").exists() {
            let _ = rh(&["service", "uninstall", "--purge", "--state-dir", &self.st()]);
        }
        for n in [&self.svc, &self.agent] {
            let _ = Command::new("userdel").arg(n).output();
        }
    }
}

fn as_user(user: &str) -> Command {
    let mut c = common::cmd("setpriv");
    c.args([format!("--reuid={user}"), format!("--regid={user}"), "--init-groups".into()]);
    c
}

fn rh(args: &[&str]) -> (i32, String, String) {
    let o = common::cmd(BIN).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn start(agent: &str, exe: &Path, port: u16, service_user: &str) -> Client {
        let mut child = as_user(agent)
            .args([PY, "-c", CLIENT, &exe.to_string_lossy(), &port.to_string(), service_user])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Client { child, stdin, stdout }
    }
    fn send(&mut self, ev: Value) -> Value {
        writeln!(self.stdin, "{ev}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("client said `{line}`: {e}"))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn denied(answer: &Value) -> bool {
    answer["body"].as_str().is_some_and(|b| b.contains("\"permissionDecision\":\"deny\""))
}

fn wait_listening(log: &Path) {
    for _ in 0..500 {
        if std::fs::read_to_string(log).unwrap_or_default().contains("runbook-host service: listening") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("the service did not start: {}", std::fs::read_to_string(log).unwrap_or_default());
}

#[test]
fn the_agents_user_is_a_client_only() {
    if !is_root() {
        eprintln!("(skipped: separated mode is installed by root)");
        return;
    }
    let mut setup = Setup::new("a", 900..950);
    let (svc, agent, state, port) = (setup.svc.clone(), setup.agent.clone(), setup.state.clone(), setup.port);
    let (st, p, top) = (setup.st(), port.to_string(), setup.top.clone());
    let runbook = top.join("src/runbook.yaml");
    std::fs::copy(repo().join("examples/rotate-credentials/runbook.yaml"), &runbook).unwrap();
    let rb = runbook.to_string_lossy().into_owned();

    // Refused before anything is made: a port the agent could bind, a runbook the agent could write.
    let (code, _, err) = rh(&["service", "install", "--state-dir", &st, "--user", &svc, "--port", "5000", "--client", &agent, "--", "--runbook", &rb]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("port 5000 can be bound by any user"), "{err}");
    let agents_copy = top.join("agents.yaml");
    std::fs::copy(&runbook, &agents_copy).unwrap();
    let o = Command::new("chown").arg(&agent).arg(&agents_copy).output().unwrap();
    assert!(o.status.success());
    let (code, _, err) = setup.install(&["--runbook", &agents_copy.to_string_lossy()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("belongs to a client"), "{err}");
    let (code, _, err) = setup.install(&["--runbook", "no-such-runbook@1.0.0", "--registry", &top.join("src").to_string_lossy()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the service could not run `no-such-runbook@1.0.0`"), "{err}");
    let (code, _, err) = setup.install(&["--runbook", &rb, "--runs", "elsewhere"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--runs is the service's own"), "{err}");
    assert!(!state.exists(), "a refused install makes nothing");

    // Installed: the printed command starts the service, as its user.
    setup.start(&["--runbook", &rb]);
    let log = setup.log.clone();
    let (code, out, err) = rh(&["service", "status", "--state-dir", &st]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("on 127.0.0.1:{port}")), "{out}");
    let svc_pid = setup.service.as_ref().unwrap().id();

    // The session, from its client.
    let exe = state.join("bin/runbook-host");
    let mut client = Client::start(&agent, &exe, port, &svc);
    let s = "sess-sep";
    let a = client.send(start(s));
    assert_eq!(a["code"], 0, "{a}");
    let a = client.send(pre(s, "Bash", bash("kubectl -n payments get pods"), "c1"));
    assert_eq!(a["code"], 200, "{a}");
    assert!(!denied(&a), "{a}");
    let a = client.send(pre(s, "Bash", bash("rm -rf /"), "c2"));
    assert!(denied(&a), "outside the runbook: {a}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains(&format!("session {s} is bound to its client (pid")), "{logged}");

    // The agent's shell, same uid, another process: every attack fails.
    let run_dir = setup.run_dir(s);
    let forged = pre(s, "Bash", bash("kubectl -n payments get pods"), "f1").to_string();
    let o = as_user(&agent).args([PY, "-c", ATTACK, &p, &st, &run_dir.to_string_lossy(), &svc_pid.to_string(), &forged]).output().unwrap();
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let says = |k: &str, want: &str| {
        let got = r[k].as_str().unwrap_or_default();
        assert!(got.contains(want), "{k}: wanted `{want}`, got `{got}`");
    };
    says("forged_event", &format!("403 runbook-host hook serve: session {s} belongs to its client"));
    says("status", "403");
    says("shutdown", "403");
    for k in ["append_events", "list_runs", "plant_cache", "replace_binary", "edit_config", "read_key", "kill_service"] {
        says(k, "PermissionError");
    }
    says("squat_port", "PermissionError");
    // Another user, not a client: refused whatever it sends.
    let o = common::cmd("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", PY, "-c", ATTACK, &p, &st, &run_dir.to_string_lossy(), &svc_pid.to_string(), &forged])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["forged_event"].as_str().unwrap().contains("403 runbook-host hook serve: uid 65534 is not a client of this service"), "{r}");
    // The agent's `service status` is refused too.
    let o = as_user(&agent).args([exe.to_str().unwrap(), "service", "status", "--state-dir", &st]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));

    // The session ends; its evidence verifies, its receipt by the host's key.
    let a = client.send(base(s, "SessionEnd"));
    assert_eq!(a["code"], 200, "{a}");
    let events = std::fs::read_to_string(run_dir.join("events.ndjson")).unwrap();
    assert_eq!(events.lines().count(), 4, "the start, the client's two calls and its end: {events}");
    assert!(!events.contains("\"f1\""), "the forged call is not recorded: {events}");
    let host_key = state.join("host.pub");
    let (code, out, err) = rh(&["verify", &run_dir.to_string_lossy(), "--host-key", &host_key.to_string_lossy()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("a key given with --key"), "{out}");
    let other = top.join("other");
    let (code, _, err) = rh(&["keygen", "--out", &other.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = rh(&["verify", &run_dir.to_string_lossy(), "--host-key", &format!("{}.pub", other.display())]);
    assert_ne!(code, 0, "another key is not the host's: {out}{err}");

    // The service down: a session of the client is refused (fail closed), and its port stays out of the
    // agent's reach.
    setup.stop();
    let mut client2 = Client::start(&agent, &exe, port, &svc);
    let a = client2.send(start("sess-down"));
    assert_eq!(a["code"], 2, "{a}");
    assert!(a["stderr"].as_str().unwrap().contains("the runbook-host service is not running"), "{a}");
    let o = as_user(&agent).args([PY, "-c", &format!("import socket; s=socket.socket(); s.bind(('127.0.0.1', {port}))")]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("PermissionError"), "{}", String::from_utf8_lossy(&o.stderr));

    // Uninstalled: the user and everything but the evidence are gone; the evidence is root's.
    let (code, _, err) = rh(&["service", "uninstall", "--state-dir", &st]);
    assert_eq!(code, 0, "{err}");
    assert!(!state.join("keys").exists() && !state.join("bin").exists() && !state.join("service.json").exists());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(run_dir.join("events.ndjson")).unwrap().uid(), 0);
    let o = Command::new("id").arg(&svc).output().unwrap();
    assert!(!o.status.success(), "the service's user is removed");
}

/// The real Claude Code, run by the agent's user, with the hooks `hook install --service` wrote: the
/// service decides every call, and the session's evidence is the service's, signed by the host's key.
#[test]
fn claude_code_as_the_agents_user_is_decided_by_the_service() {
    if !is_root() {
        eprintln!("(skipped: separated mode is installed by root)");
        return;
    }
    let mut setup = Setup::new("c", 950..1000);
    let runbook = setup.top.join("src/runbook.yaml");
    std::fs::copy(repo().join("host/tests/claude/say-hello.yaml"), &runbook).unwrap();
    setup.start(&["--runbook", &runbook.to_string_lossy()]);
    // The agent's own project and HOME; the hooks installed there by the agent's user.
    let (project, scratch) = (setup.top.join("project"), setup.top.join("scratch"));
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(scratch.join("home")).unwrap();
    for d in [&project, &scratch.join("home")] {
        let o = Command::new("chown").arg(&setup.agent).arg(d).output().unwrap();
        assert!(o.status.success());
    }
    let port = setup.port.to_string();
    let o = as_user(&setup.agent)
        .arg(setup.exe())
        .args(["hook", "install", "--service", &port, "--service-user", &setup.svc])
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let settings = std::fs::read_to_string(project.join(".claude/settings.json")).unwrap();
    assert!(settings.contains(&format!("http://127.0.0.1:{port}/runbook-hook")) && !settings.contains("Authorization"), "{settings}");

    let turns = serde_json::json!([
        {"tool_use": [{"name": "Bash", "input": {"command": "touch pwned"}}]},
        {"tool_use": [{"name": "Bash", "input": {"command": "echo hello"}}]},
        {"text": "Said hello."}
    ]);
    let r = common::claude_cli::run_as(Some(&setup.agent), &project, &scratch, &turns, "Say hello through the shell.", &[]);
    assert_eq!(r.code, Some(0), "{}", r.show());
    assert_eq!(r.denied_commands(), ["touch pwned"], "{}", r.show());
    assert!(!project.join("pwned").exists());
    let session = r.json["session_id"].as_str().unwrap().to_string();
    let log = std::fs::read_to_string(&setup.log).unwrap();
    assert!(log.contains(&format!("session {session} is bound to its client (pid")), "{log}");
    assert!(!log.contains("refused"), "{log}");
    // The evidence is in the service's directory, out of the agent's reach, and proves its author.
    assert!(!project.join(".runbook").exists(), "the client keeps no runs of its own");
    let run_dir = setup.run_dir(&session);
    let report: Value = serde_json::from_slice(&std::fs::read(run_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["outcome"], "completed", "{report}");
    let (code, out, err) = rh(&["verify", &run_dir.to_string_lossy(), "--host-key", &setup.state.join("host.pub").to_string_lossy()]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A service killed and started again resumes each open session from its checkpoint (issue 32, item 3):
/// only the records after it are replayed. A checkpoint that does not fit the evidence is not used (the
/// whole run is replayed), and the agent's user cannot write one.
#[test]
fn a_restarted_service_resumes_from_its_checkpoints() {
    if !is_root() {
        eprintln!("(skipped: separated mode is installed by root)");
        return;
    }
    let mut setup = Setup::new("r", 1000..1024);
    let runbook = setup.top.join("src/runbook.yaml");
    std::fs::copy(repo().join("examples/read-only-investigation/runbook.yaml"), &runbook).unwrap();
    setup.start(&["--runbook", &runbook.to_string_lossy(), "--profile", "R1"]);
    let (exe, port, svc, agent) = (setup.exe(), setup.port, setup.svc.clone(), setup.agent.clone());
    let mut client = Client::start(&agent, &exe, port, &svc);
    let s = "sess-cp";
    assert_eq!(client.send(start(s))["code"], 0);
    // 1 + 2 x 150 records: a checkpoint at 257, 44 records after it.
    for i in 0..150 {
        let id = format!("c{i}");
        let a = client.send(pre(s, "Bash", bash("df -h /var"), &id));
        assert!(a["code"] == 200 && !denied(&a), "{a}");
        let a = client.send(post(s, "Bash", bash("df -h /var"), serde_json::json!({"stdout": "ok"}), &id));
        assert_eq!(a["code"], 200, "{a}");
    }
    let cp = setup.state.join(format!("runs/.hook/server/checkpoints/{s}.json"));
    let v: Value = serde_json::from_slice(&std::fs::read(&cp).unwrap()).unwrap();
    assert_eq!(v["events"], 257, "{v}");

    // The agent's user cannot plant a checkpoint.
    let o = as_user(&agent).args([PY, "-c", &format!("open({:?}, 'w').write('{{}}')", cp.to_str().unwrap())]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("PermissionError"), "{}", String::from_utf8_lossy(&o.stderr));

    setup.stop();
    setup.restart();
    let logged = std::fs::read_to_string(&setup.log).unwrap();
    assert!(logged.contains(&format!("resumed session {s} (run ")) && logged.contains("301 records, 44 replayed"), "{logged}");
    // The client's next call is decided on the resumed run.
    let a = client.send(pre(s, "Bash", bash("rm -rf /var/log"), "d1"));
    assert!(denied(&a), "{a}");

    // A checkpoint that does not fit: not used, the run replayed whole, the session still served.
    setup.stop();
    let mut v: Value = serde_json::from_slice(&std::fs::read(&cp).unwrap()).unwrap();
    v["head"] = Value::String("0".repeat(64));
    std::fs::write(&cp, v.to_string()).unwrap();
    setup.restart();
    let logged = std::fs::read_to_string(&setup.log).unwrap();
    assert!(logged.contains("its checkpoint is not used") && logged.contains("302 records, 302 replayed"), "{logged}");
    let a = client.send(pre(s, "Bash", bash("df -h /var"), "c-last"));
    assert!(a["code"] == 200 && !denied(&a), "{a}");
    let a = client.send(base(s, "SessionEnd"));
    assert_eq!(a["code"], 200, "{a}");
    assert!(!cp.exists(), "a finished session's checkpoint is removed");
    let (code, out, err) = rh(&["verify", &setup.run_dir(s).to_string_lossy()]);
    assert_eq!(code, 0, "{out}{err}");
}
