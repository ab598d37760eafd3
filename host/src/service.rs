//! Separated mode (docs/spec/README.md#threat-model, issue 28 item 1): the enforcement runs as its own system user, which alone
//! writes the evidence and the caches, reads the host's signing key and binds the hook server's port; the
//! agent's user is a client only. This module holds what `runbook-host service` and the separated-mode
//! client share: the layout of the service's directory, its configuration, and the facts of the system
//! (users, the privileged-port boundary, capabilities) it is judged by.
//!
//! ```text
//! <state>/                 root:root 0755
//! <state>/service.json     root:root 0644  runbook-service/v1: the service's user, port, clients, options
//! <state>/bin/runbook-host root:root 0755  the binary the service runs (a copy no client can write)
//! <state>/host.pub         root:root 0644  the host's public key: `verify --host-key` proves authorship
//! <state>/keys/host.key    svc:svc   0600  the host's private key (signs every run's receipt)
//! <state>/runs/            svc:svc   0750  the evidence (run bundles); readable by the service's group
//! <state>/cache/           svc:svc   0700  the registry cache and the compiled-module cache
//! ```
//!
//! Why a privileged TCP port rather than a Unix socket: Claude Code's `http` hooks take a URL and speak
//! TCP only. A port below `net.ipv4.ip_unprivileged_port_start` (1024 by default) can be bound only by
//! root or a process with `CAP_NET_BIND_SERVICE`, so the agent's user can neither squat it while the
//! service is down nor stand in for it; the client checks the listener's uid besides.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub const SCHEMA: &str = "runbook-service/v1";
pub const DEFAULT_USER: &str = "runbook-host";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/runbook-host";
/// Below 1024 and assigned to no common service.
pub const DEFAULT_PORT: u16 = 914;
/// `CAP_NET_BIND_SERVICE`: binds the privileged port.
pub const CAP_NET_BIND_SERVICE: u32 = 10;
/// `CAP_DAC_READ_SEARCH` and `CAP_SYS_PTRACE`: list `/proc/<pid>/fd` of the clients' processes (a 0500
/// directory of the process's user) and read its links, to find which process holds a connection's socket
/// (the session's own client, [`crate::adapters::hooks::peer`]). The kernel grants this to the process's
/// own user or to these two capabilities, nothing narrower. They let the service read any file and
/// inspect any process; it writes only where file permissions (and the unit's `ProtectSystem=strict`)
/// let it.
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_SYS_PTRACE: u32 = 19;
/// The capabilities the service runs with: (bit, name as systemd spells it, name as setpriv spells it).
pub const CAPS: [(u32, &str, &str); 3] = [
    (CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE", "net_bind_service"),
    (CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH", "dac_read_search"),
    (CAP_SYS_PTRACE, "CAP_SYS_PTRACE", "sys_ptrace"),
];

/// A user of this system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The user named `name`, from the system's user database (`getpwnam_r`: `/etc/passwd`, or NSS).
pub fn lookup_user(name: &str) -> Result<Option<User>> {
    let c = std::ffi::CString::new(name).map_err(|_| anyhow!("`{name}` is not a user name"))?;
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: an all-zero passwd is a valid out-parameter; buf outlives the call and its length is given.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 {
        bail!("cannot look up the user `{name}`: {}", std::io::Error::from_raw_os_error(rc));
    }
    Ok((!found.is_null()).then(|| User { name: name.to_string(), uid: pw.pw_uid, gid: pw.pw_gid }))
}

/// The lowest port any user may bind (`net.ipv4.ip_unprivileged_port_start`).
pub fn unprivileged_port_start() -> Result<u16> {
    let t = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start").context("cannot read net.ipv4.ip_unprivileged_port_start")?;
    t.trim().parse().context("net.ipv4.ip_unprivileged_port_start is not a number")
}

/// Refuses a port the agent's user could bind.
pub fn check_privileged(port: u16) -> Result<()> {
    let start = unprivileged_port_start()?;
    if port == 0 || port >= start {
        bail!(
            "port {port} can be bound by any user here (net.ipv4.ip_unprivileged_port_start is {start}): an agent could stand in for the service on it; choose a port below {start}"
        );
    }
    Ok(())
}

/// This process's effective capabilities (the `CapEff` mask of `/proc/self/status`).
pub fn effective_caps() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:")).ok_or_else(|| anyhow!("/proc/self/status has no CapEff"))?;
    u64::from_str_radix(hex.trim(), 16).context("CapEff is not hexadecimal")
}

/// The service's directory.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    pub fn new(root: &Path) -> Layout {
        Layout { root: root.to_path_buf() }
    }
    pub fn config(&self) -> PathBuf {
        self.root.join("service.json")
    }
    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("bin")
    }
    pub fn binary(&self) -> PathBuf {
        self.bin_dir().join("runbook-host")
    }
    pub fn public_key(&self) -> PathBuf {
        self.root.join("host.pub")
    }
    pub fn keys(&self) -> PathBuf {
        self.root.join("keys")
    }
    pub fn private_key(&self) -> PathBuf {
        self.keys().join("host.key")
    }
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }
    pub fn cache(&self) -> PathBuf {
        self.root.join("cache")
    }
}

/// What `service install` decided, read by `service run`, `service status` and `service uninstall`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub user: String,
    pub port: u16,
    /// The client users: (name, uid).
    pub clients: Vec<(String, u32)>,
    /// The `runbook-host hook` options the service decides with (paths absolute).
    pub hook_args: Vec<String>,
}

impl Config {
    pub fn to_json(&self) -> String {
        let v = json!({
            "schema": SCHEMA,
            "user": self.user,
            "port": self.port,
            "clients": self.clients.iter().map(|(n, u)| json!({"name": n, "uid": u})).collect::<Vec<_>>(),
            "hook_args": self.hook_args,
        });
        serde_json::to_string_pretty(&v).expect("JSON") + "\n"
    }

    pub fn read(layout: &Layout) -> Result<Config> {
        let p = layout.config();
        let bytes = crate::files::read_path_bounded(&p, crate::files::MAX_SMALL_FILE_BYTES)
            .with_context(|| format!("cannot read {} (is the service installed? `runbook-host service install`)", p.display()))?;
        let v: Value = serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", p.display()))?;
        let bad = |what: &str| anyhow!("{}: {what}", p.display());
        if v["schema"] != SCHEMA {
            return Err(bad(&format!("schema is not {SCHEMA}")));
        }
        Ok(Config {
            user: v["user"].as_str().ok_or_else(|| bad("no user"))?.to_string(),
            port: v["port"].as_u64().and_then(|p| u16::try_from(p).ok()).ok_or_else(|| bad("no port"))?,
            clients: v["clients"]
                .as_array()
                .ok_or_else(|| bad("no clients"))?
                .iter()
                .map(|c| Some((c["name"].as_str()?.to_string(), u32::try_from(c["uid"].as_u64()?).ok()?)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("a client without a name and a uid"))?,
            hook_args: v["hook_args"]
                .as_array()
                .ok_or_else(|| bad("no hook_args"))?
                .iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("hook_args holds a non-string"))?,
        })
    }
}

/// The systemd unit that runs the service: as its user, with exactly the two capabilities it needs
/// ([`CAPS`]) and a read-only view of the system but its evidence and
/// caches.
pub fn systemd_unit(layout: &Layout, user: &str) -> String {
    let root = layout.root.display();
    let caps = CAPS.map(|c| c.1).join(" ");
    format!(
        "# Written by `runbook-host service install`; `runbook-host service uninstall` removes it.\n\
         [Unit]\n\
         Description=runbook-host: runbook enforcement for agent CLIs (separated mode)\n\
         After=network.target\n\
         \n\
         [Service]\n\
         User={user}\n\
         Group={user}\n\
         ExecStart={} service run --state-dir {root}\n\
         AmbientCapabilities={caps}\n\
         CapabilityBoundingSet={caps}\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ProtectHome=read-only\n\
         ReadWritePaths={}\n\
         PrivateTmp=yes\n\
         UMask=0027\n\
         Restart=on-failure\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        layout.binary().display(),
        layout.runs().display().to_string() + " " + &layout.cache().display().to_string(),
    )
}

/// The one command that starts the service where systemd does not run: as root, it becomes the service's
/// user with the same capabilities the unit grants (util-linux `setpriv`).
pub fn start_command(layout: &Layout, user: &str) -> Vec<String> {
    let caps = CAPS.map(|c| format!("+{}", c.2)).join(",");
    vec![
        "setpriv".into(),
        format!("--reuid={user}"),
        format!("--regid={user}"),
        "--init-groups".into(),
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
        format!("--bounding-set=-all,{caps}"),
        "--no-new-privs".into(),
        layout.binary().to_string_lossy().into_owned(),
        "service".into(),
        "run".into(),
        "--state-dir".into(),
        layout.root.to_string_lossy().into_owned(),
    ]
}

/// Whether systemd manages this machine (`sd_booted`'s test).
pub fn systemd_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_and_refuses_another_schema() {
        let d = tempfile::tempdir().unwrap();
        let l = Layout::new(d.path());
        let c = Config { user: "svc".into(), port: 914, clients: vec![("alice".into(), 1001)], hook_args: vec!["--runbook".into(), "x@1".into()] };
        std::fs::write(l.config(), c.to_json()).unwrap();
        assert_eq!(Config::read(&l).unwrap(), c);
        std::fs::write(l.config(), c.to_json().replace(SCHEMA, "other/v1")).unwrap();
        assert!(format!("{:#}", Config::read(&l).unwrap_err()).contains("schema is not runbook-service/v1"));
    }

    #[test]
    fn root_is_found_and_a_missing_user_is_none() {
        assert_eq!(lookup_user("root").unwrap().map(|u| u.uid), Some(0));
        assert_eq!(lookup_user("no-such-user-runbook").unwrap(), None);
    }

    #[test]
    fn a_port_any_user_may_bind_is_refused() {
        let start = unprivileged_port_start().unwrap();
        if start > 1 {
            assert!(check_privileged(start - 1).is_ok());
        }
        let e = check_privileged(start).unwrap_err().to_string();
        assert!(e.contains("can be bound by any user"), "{e}");
        assert!(check_privileged(0).is_err());
    }
}
