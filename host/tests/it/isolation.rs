//! The harness keeps the developer's own setup away from what the tests start ([`common::cmd`],
//! [`common::isolate`]): every process runs in a HOME of its test, with the registry and compiled-module
//! cache and the XDG directories inside it. Without that, a hook started by a test reads the user's
//! `~/.claude/settings.json`, whose deny rules change what the run admits.

use crate::common::{self, hooks, Tmp, BIN, PRIVATE_VARS};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Set only in the process that [`a_developers_claude_settings_do_not_reach_a_hook_the_harness_runs`]
/// starts, for [`probe_a_session_under_this_processs_home`].
const PROBE: &str = "RUNBOOK_IT_ISOLATION_PROBE";

/// `~/.claude/settings.json` of a developer who denies Claude Code the shell: the credential rotation, whose
/// steps run in Bash, is refused at its start where these settings are read.
fn developer_home() -> Tmp {
    let home = Tmp::new("developer");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::write(home.join(".claude/settings.json"), r#"{"permissions": {"deny": ["Bash"]}}"#).unwrap();
    home
}

/// What `c` sets (Some) and removes (None) of its environment.
fn envs(c: &Command) -> HashMap<String, Option<OsString>> {
    c.get_envs().map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(|v| v.to_owned()))).collect()
}

#[test]
fn a_command_of_the_harness_runs_in_a_home_of_its_test() {
    let env = envs(&common::cmd(BIN));
    let home = PathBuf::from(env["HOME"].clone().expect("HOME is set"));
    assert_ne!(Some(home.as_os_str()), std::env::var_os("HOME").as_deref(), "not this process's HOME");
    assert!(home.starts_with(std::env::temp_dir()) && home.is_dir(), "{}", home.display());
    for (var, under) in
        [("RUNBOOK_HOST_CACHE", ".cache/runbook-host"), ("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache"), ("XDG_DATA_HOME", ".local/share")]
    {
        assert_eq!(env[var], Some(home.join(under).into_os_string()), "{var}");
    }
    for var in PRIVATE_VARS {
        assert_eq!(env.get(*var), Some(&None), "{var} is removed, never inherited");
    }
    // The cache holds the compiled module already: a fresh HOME does not compile it again.
    assert!(std::fs::read_dir(home.join(".cache/runbook-host")).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".cwasm")));
    // The same HOME for the whole test; another test (another thread) has its own, removed when it ends.
    assert_eq!(envs(&common::cmd("sh"))["HOME"], Some(home.clone().into_os_string()));
    let other = std::thread::spawn(common::home).join().unwrap();
    assert_ne!(other, home);
    assert!(!other.exists(), "{} outlived its thread", other.display());
    // A HOME the test gives is the one used, the caches inside it.
    let given = Tmp::new("given-home");
    let env = envs(&common::cmd_in(BIN, given.path()));
    assert_eq!(env["HOME"], Some(given.0.clone().into_os_string()));
    assert_eq!(env["RUNBOOK_HOST_CACHE"], Some(given.join(".cache/runbook-host").into_os_string()));
}

/// A SessionStart of rotate-credentials in `w`, HOME as `c` has it.
fn session_start(mut c: Command, w: &Path) -> (i32, String) {
    let mut child =
        c.args(["hook", "--runbook", "runbook.yaml"]).current_dir(w).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(hooks::start("sess-isolation").to_string().as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    (o.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// The harness under a developer's HOME: this test binary runs again, only
/// [`probe_a_session_under_this_processs_home`], its own HOME (the one a test process inherits from the
/// developer's shell) a developer's whose `~/.claude` denies Bash. The probe's hook, started through the
/// harness, must not read that file. The same hook given that HOME is refused: the probe fails as soon as
/// the harness stops isolating.
#[test]
fn a_developers_claude_settings_do_not_reach_a_hook_the_harness_runs() {
    let developer = developer_home();
    // The settings do refuse the run where they are read.
    let w = hooks::work("developer");
    let (code, said) = session_start(common::cmd_in(BIN, developer.path()), &w.0);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("[capability-not-allowed]"), "{said}");
    // The probe, in a process whose HOME is the developer's.
    // This very binary, even when a build has replaced its file since it started.
    let o = Command::new("/proc/self/exe")
        .args(["--exact", "isolation::probe_a_session_under_this_processs_home", "--ignored", "--test-threads=1"])
        .env("HOME", developer.path())
        .env(PROBE, "1")
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && said.contains("1 passed"), "{said}");
}

#[test]
#[ignore = "run in a process of its own by a_developers_claude_settings_do_not_reach_a_hook_the_harness_runs"]
fn probe_a_session_under_this_processs_home() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let real = PathBuf::from(std::env::var_os("HOME").unwrap());
    assert!(real.join(".claude/settings.json").is_file(), "the developer's settings are where a hook would read them");
    let w = hooks::work("probe");
    let (code, said) = session_start(common::cmd(BIN), &w.0);
    assert_eq!(code, 0, "the developer's ~/.claude reached the hook: {said}");
    assert!(said.contains("supervising"), "{said}");
}
