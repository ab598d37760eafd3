//! How tight a `when` must be (docs/spec/runbook.md#tight-conditions): `unconstrained-shell` (an error that
//! withholds the envelope in a runbook with a gated step or a destructive capability, a warning elsewhere)
//! and `flag-argument`.

use runbook_policy::{Finding, Severity};

/// A runbook whose `shell` capability is `cap` (a YAML flow mapping or a bare tool name), beside a
/// read-only step and a second step that is gated (`requires_approval`), destructive, or neither.
fn doc(cap: &str, second: &str) -> String {
    let (risk, approval) = match second {
        "gated" => ("mutating", true),
        "destructive" => ("destructive", false),
        _ => ("mutating", false),
    };
    format!(
        "runbook_id: shell-lint\nversion: 1.0.0\ncapabilities:\n  - {cap}\n  - {{name: write, tool: db.write, risk: {risk}}}\nsteps:\n  - {{id: look, tool: shell}}\n  - {{id: fix, tool: write, requires_approval: {approval}, next: done}}\nterminals: [done]\n"
    )
}

fn bash(when: &str) -> String {
    format!("{{name: shell, tool: Bash, risk: read-only, when: {when}}}")
}

fn matches(pattern: &str) -> String {
    bash(&format!("{{path: /command, op: matches, value: '{pattern}'}}"))
}

fn findings(doc: &str, code: &str) -> Vec<Finding> {
    runbook_policy::lint(doc.as_bytes()).findings.into_iter().filter(|f| f.code == code).collect()
}

/// The one `unconstrained-shell` finding's severity, or None when there is none.
fn shell(doc: &str) -> Option<Severity> {
    let f = findings(doc, "unconstrained-shell");
    assert!(f.len() <= 1, "{f:?}");
    f.first().map(|f| f.severity)
}

/// An error blocks the envelope (and so every run); a warning leaves it.
fn assert_blocks(doc: &str, blocks: bool) {
    assert_eq!(runbook_policy::envelope(doc.as_bytes()).is_err(), blocks, "{doc}");
    let report = runbook_policy::lint(doc.as_bytes());
    assert_eq!(!report.ok(), blocks, "{:?}", report.findings);
}

#[test]
fn bash_without_when_in_a_gated_runbook_is_an_error() {
    for cap in ["Bash", "{name: shell, tool: Bash, risk: read-only}"] {
        let d = doc(cap, "gated").replace("tool: shell}", &format!("tool: {}}}", if cap == "Bash" { "Bash" } else { "shell" }));
        assert_eq!(shell(&d), Some(Severity::Error), "{d}");
        let f = &findings(&d, "unconstrained-shell")[0];
        assert_eq!((f.pos.line, f.pos.column, f.pointer.as_str()), (4, 5, "/capabilities/0"), "at the capability");
        assert!(f.message.contains("has no `when`"), "{}", f.message);
        assert_blocks(&d, true);
        let refused = runbook_policy::envelope(d.as_bytes()).unwrap_err();
        assert!(refused.iter().any(|f| f.code == "unconstrained-shell"), "the envelope names why: {refused:?}");
    }
}

#[test]
fn a_pattern_that_admits_anything_is_an_error() {
    for (pattern, ch) in [("^.*$", "`;`"), ("^git (.*)$", "`;`"), ("^ls [^a]+$", "`;`"), ("^ls\\s+x$", "a newline"), ("^echo \\$HOME$", "`$`")] {
        let d = doc(&matches(pattern), "gated");
        assert_eq!(shell(&d), Some(Severity::Error), "{pattern}");
        let f = &findings(&d, "unconstrained-shell")[0];
        assert!(f.message.contains(&format!("can match {ch}")), "{pattern}: {}", f.message);
        assert_blocks(&d, true);
    }
}

#[test]
fn a_pattern_that_pins_the_command_is_fine() {
    for pattern in ["^kubectl get [a-z]+$", "^kubectl -n payments get (secret|deployment|pods)( [a-z0-9][a-z0-9.-]*)?$", "^(?i)df -h$"] {
        let d = doc(&matches(pattern), "gated");
        assert_eq!(shell(&d), None, "{pattern}");
        assert_blocks(&d, false);
    }
    // Exact values the runbook wrote pin the command, whatever they hold.
    for when in [
        "{path: /command, op: equals, value: 'kubectl get pods | head'}",
        "{path: /command, op: in, value: ['df -h', 'uptime']}",
        "{all: [{path: /command, op: contains, value: kubectl}, {path: /command, op: matches, value: '^kubectl get pods$'}]}",
        "{any: [{path: /command, op: equals, value: uptime}, {path: /command, op: matches, value: '^df -h$'}]}",
        "{path: /CommandLine, op: equals, value: uptime}",
    ] {
        let d = doc(&bash(when), "gated");
        assert_eq!(shell(&d), None, "{when}");
    }
}

#[test]
fn conditions_that_do_not_pin_the_whole_string_are_errors() {
    for when in [
        "{path: /command, op: contains, value: kubectl}",
        "{path: /command, op: exists}",
        "{path: /command, op: len_lte, value: 20}",
        "{path: /command, op: not_equals, value: 'rm -rf /'}",
        "{not: {path: /command, op: matches, value: '^rm .*$'}}",
        // Pinning another argument leaves the command line free.
        "{path: /description, op: equals, value: list pods}",
        "{path: /command/0, op: equals, value: kubectl}",
        // Some way to pass leaves it free.
        "{any: [{path: /command, op: equals, value: uptime}, {path: /command, op: contains, value: df}]}",
        "{all: [{path: /command, op: contains, value: kubectl}, {path: /command, op: matches, value: '^kubectl .*$'}]}",
    ] {
        let d = doc(&bash(when), "gated");
        assert_eq!(shell(&d), Some(Severity::Error), "{when}");
        assert_blocks(&d, true);
    }
}

#[test]
fn unicode_mode_counts_as_admitting_anything() {
    let d = doc(&matches("^(?u)kubectl get pods$"), "gated");
    assert_eq!(shell(&d), Some(Severity::Error));
    assert!(findings(&d, "unconstrained-shell")[0].message.contains("cannot be checked"));
}

/// `^a)|(b$` passes the anchoring lint and would compile as `\A(?:^a)|(b$)\z`, which grants anything
/// starting with `a`: it is no regular expression on its own, so it is `invalid-regex` (for every tool).
#[test]
fn a_pattern_that_is_not_one_on_its_own_is_invalid() {
    let d = doc(&matches("^a)|(b$"), "gated");
    assert_eq!(shell(&d), None);
    assert_eq!(findings(&d, "invalid-regex").len(), 1);
    let other = runbook_policy::lint(
        br#"{"runbook_id":"x","version":"1","capabilities":[{"name":"q","tool":"sql.query","when":{"path":"/q","op":"matches","value":"^a)|(b$"}}],"steps":[{"id":"s","tool":"q","next":"done"}],"terminals":["done"]}"#,
    );
    assert!(other.findings.iter().any(|f| f.code == "invalid-regex"), "{:?}", other.findings);
}

#[test]
fn an_invalid_pattern_is_only_invalid_regex() {
    let d = doc(&matches("^kubectl (get$"), "gated");
    assert_eq!(shell(&d), None);
    assert_eq!(findings(&d, "invalid-regex").len(), 1);
}

#[test]
fn mcp_shell_tools_error_when_destructive_and_warn_when_read_only() {
    let cap = "{name: shell, tool: mcp__shell__exec, risk: read-only}";
    let destructive = doc(cap, "destructive");
    assert_eq!(shell(&destructive), Some(Severity::Error));
    assert_blocks(&destructive, true);
    let read_only = doc(cap, "neither");
    assert_eq!(shell(&read_only), Some(Severity::Warning));
    assert_blocks(&read_only, false);
    let f = &findings(&read_only, "unconstrained-shell")[0];
    assert!(f.message.contains("`mcp__shell__exec`"), "{}", f.message);
    // A destructive capability makes it strict even when no step names it.
    let unused = read_only.replace(
        "  - {name: write, tool: db.write, risk: mutating}",
        "  - {name: write, tool: db.write, risk: mutating}\n  - {name: drop, tool: db.drop, risk: irreversible}",
    );
    assert_eq!(shell(&unused), Some(Severity::Error));
}

#[test]
fn shell_tools_are_named_by_their_last_segment_without_case() {
    for tool in [
        "bash",
        "BASH",
        "sh",
        "zsh",
        "shell",
        "exec",
        "run_shell_command",
        "shell_exec",
        "execute_command",
        "run_command",
        "terminal",
        "powershell",
        "pwsh",
        "cmd",
        "mcp__desktop__run_command",
        "box.exec",
    ] {
        let d = doc(&format!("{{name: shell, tool: {tool}, risk: read-only}}"), "gated");
        assert_eq!(shell(&d), Some(Severity::Error), "{tool}");
    }
    for tool in ["db.read", "mcp__slack__post_message", "Read", "execute", "mcp__bash__status"] {
        let d = doc(&format!("{{name: shell, tool: {tool}, risk: read-only}}"), "gated");
        assert_eq!(shell(&d), None, "{tool}");
    }
}

#[test]
fn flag_argument_warns_where_an_argument_may_start_with_a_dash() {
    for (pattern, warns) in [
        ("^ls( [a-z.-]+)?$", true),
        ("^ls( [a-z][a-z.-]*)?$", false),
        ("^kubectl -n payments get (secret|deployment|pods)( [a-z0-9.-]+)?$", true),
        ("^kubectl -n payments get (secret|deployment|pods)( [a-z0-9][a-z0-9.-]*)?$", false),
        ("^vault write -f database/rotate-role/payments-app$", false),
    ] {
        let d = doc(&matches(pattern), "neither");
        let f = findings(&d, "flag-argument");
        assert_eq!(!f.is_empty(), warns, "{pattern}: {f:?}");
        if let Some(f) = f.first() {
            assert_eq!(f.severity, Severity::Warning);
            assert_eq!(f.pointer, "/capabilities/0/when/value", "at the pattern");
            assert_eq!((f.pos.line, f.pos.column), (4, 91));
        }
        assert_blocks(&d, false);
    }
    // Any tool's `when`: an MCP tool that passes a value on to a command line takes flags too.
    let d = "runbook_id: f\nversion: 1.0.0\ncapabilities:\n  - {name: co, tool: mcp__git__checkout, when: {path: /branch, op: matches, value: '^[a-z0-9/-]+$'}}\nsteps:\n  - {id: a, tool: co, next: done}\nterminals: [done]\n";
    assert_eq!(findings(d, "flag-argument").len(), 1);
}

#[test]
fn the_examples_have_no_shell_or_flag_findings() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("examples");
    for ex in ["rotate-credentials/runbook.yaml", "read-only-investigation/runbook.yaml", "incident-rollback/runbook.yaml", "certificate-renewal/runbook.yaml"]
    {
        let bytes = std::fs::read(root.join(ex)).unwrap();
        let r = runbook_policy::lint(&bytes);
        assert!(r.findings.is_empty(), "{ex}: {:?}", r.findings);
    }
}

#[test]
fn a_seed_001_manifest_warns_at_the_checkpoint_that_names_the_shell() {
    let d = "runbook_id: m\nversion: 1.0.0\ncheckpoints:\n  - {id: cp, kind: tool_call, required: true, match: {tool: Bash}}\n";
    let f = findings(d, "unconstrained-shell");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Warning, "nothing is gated or destructive");
    assert_eq!((f[0].pos.line, f[0].pos.column, f[0].pointer.as_str()), (4, 61, "/checkpoints/0/match/tool"));
}
