//! Test support: a real OCI registry (the CNCF distribution server, Debian's `docker-registry`) on a free
//! loopback port, with optional htpasswd (bcrypt) auth and TLS from a throwaway CA made with `openssl`,
//! its storage in a temp dir; plus a TCP server that never answers, for timeout tests.
//!
//! A real registry rather than a mock, so that the tests meet the status codes, headers and error
//! bodies that runbook-host will meet in production.

use super::{cmd, Tmp};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const USER: &str = "runbook";
pub const PASSWORD: &str = "s3cret";

/// bcrypt of "s3cret", made once with libxcrypt's crypt() (`$2b$`, cost 5 — the registry checks it on every
/// request, so a low cost keeps the tests fast); kept here so the tests need no `htpasswd` binary.
const HTPASSWD_LINE: &str = "runbook:$2b$05$0DzdQUdQjVWJlzcz5jjHbuRo4PLrcXault8mTOh3ciS9tz7g1hOke\n";

const READY_WITHIN: Duration = Duration::from_secs(20);

pub struct Registry {
    /// `127.0.0.1:PORT`
    pub addr: String,
    /// The test CA's certificate (empty without TLS).
    pub ca_pem: Vec<u8>,
    /// The registry's storage root; blobs are under docker/registry/v2/blobs/sha256/XX/HEX/data.
    pub storage: PathBuf,
    pub tls: bool,
    dir: Tmp,
    child: Child,
}

impl Registry {
    /// Starts a registry and waits until /v2/ answers 200 or 401; panics with its log otherwise.
    pub fn start(auth: bool, tls: bool) -> Registry {
        let mut dir = Tmp::new("oci-registry");
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).expect("storage dir");
        let ca_pem = if tls { make_certificates(dir.path()) } else { Vec::new() };
        if auth {
            std::fs::write(dir.path().join("htpasswd"), HTPASSWD_LINE).expect("htpasswd");
        }
        // The port is found by binding :0 and released just before the registry binds it; a lost race is retried.
        let mut last_failure = String::new();
        for _ in 0..3 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            write_config(dir.path(), &addr, &storage, auth, tls);
            let child = spawn(dir.path());
            let mut registry = Registry { addr, ca_pem: ca_pem.clone(), storage: storage.clone(), tls, dir, child };
            match registry.wait_ready() {
                Ok(()) => return registry,
                Err(failure) => {
                    registry.stop();
                    last_failure = failure;
                    dir = std::mem::replace(&mut registry.dir, Tmp::new("oci-registry-unused"));
                }
            }
        }
        panic!("docker-registry did not start: {last_failure}");
    }

    /// `oci://ADDR/REPO` (or `oci+http://` without TLS), for tests to append a tag or digest to.
    pub fn url(&self, repo_and_tag: &str) -> String {
        let scheme = if self.tls { "oci" } else { "oci+http" };
        format!("{scheme}://{}/{repo_and_tag}", self.addr)
    }

    /// Kills the registry and waits for it to exit; the storage stays.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the registry again on the same port and storage.
    pub fn restart(&mut self) {
        self.stop();
        self.child = spawn(self.dir.path());
        if let Err(failure) = self.wait_ready() {
            self.stop();
            panic!("docker-registry did not restart: {failure}");
        }
    }

    /// The registry's stdout and stderr so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let deadline = Instant::now() + READY_WITHIN;
        let scheme = if self.tls { "https" } else { "http" };
        let url = format!("{scheme}://{}/v2/", self.addr);
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(2));
        if self.tls {
            builder = builder.tls_certs_merge([reqwest::Certificate::from_pem(&self.ca_pem).expect("CA pem")]);
        }
        let client = builder.build().expect("probe client");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("it exited with {status}; log:\n{}", self.log()));
            }
            match runtime.block_on(async { client.get(&url).send().await }) {
                Ok(response) if matches!(response.status().as_u16(), 200 | 401) => return Ok(()),
                Ok(response) => last = format!("HTTP {}", response.status()),
                Err(e) => last = format!("{e:?}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{url} did not answer 200/401 within {READY_WITHIN:?} (last: {last}); log:\n{}", self.log()))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback TCP server that accepts connections and never answers; it gives up by itself after a minute.
pub fn hang_server() -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind hang server");
    let addr = listener.local_addr().expect("addr").to_string();
    listener.set_nonblocking(true).expect("nonblocking");
    let handle = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut held = Vec::new();
        while Instant::now() < deadline && held.len() < 64 {
            match listener.accept() {
                Ok((stream, _)) => held.push(stream),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (addr, handle)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

fn registry_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("docker-registry"))
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| PathBuf::from("/usr/bin/docker-registry"))
}

fn spawn(dir: &Path) -> Child {
    // A file, not a pipe: nobody drains a pipe while the test runs, and a full one would block the registry.
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("registry.log")).expect("log file");
    cmd(registry_binary())
        .arg("serve")
        .arg(dir.join("config.yml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} (apt-get install docker-registry): {e}", registry_binary().display()))
}

fn write_config(dir: &Path, addr: &str, storage: &Path, auth: bool, tls: bool) {
    let mut config = format!(
        "version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: {addr}
  secret: runbook-test-secret
",
        storage = storage.display()
    );
    if tls {
        config.push_str(&format!("  tls:\n    certificate: {}\n    key: {}\n", dir.join("server.crt").display(), dir.join("server.key").display()));
    }
    if auth {
        config.push_str(&format!("auth:\n  htpasswd:\n    realm: runbook-test\n    path: {}\n", dir.join("htpasswd").display()));
    }
    std::fs::write(dir.join("config.yml"), config).expect("config.yml");
}

/// Makes a throwaway CA and a server certificate for IP 127.0.0.1 and DNS localhost; returns the CA's PEM.
/// (`server.crt` and `server.key` in `dir`; the HTTPS registry of tests/distribution.rs uses them too.)
pub fn make_certificates(dir: &Path) -> Vec<u8> {
    let openssl = |args: &[&str]| {
        let out = cmd("openssl").args(args).current_dir(dir).output().expect("run openssl");
        assert!(out.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=runbook-host test CA"],
            &["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
    );
    openssl(&[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("server.ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    std::fs::read(dir.join("ca.crt")).expect("ca.crt")
}
