//! How tight a `when` is (docs/spec/runbook.md#tight-conditions): which capabilities are shell tools, whether a shell capability's
//! `when` pins the command line to text no shell can read as more than one command, and whether a
//! pattern lets an argument start with `-` (a flag where the runbook meant a name).
//!
//! Patterns are analysed, never probed: `regex-syntax` parses each one into its HIR, with Unicode mode
//! off (so `\d`, `\w`, `\s`, `.` and `(?i)` are the ASCII ones regex-lite matches with) and invalid UTF-8
//! allowed (so `.` and `[^...]` are byte classes), and every literal and class is checked. A pattern that
//! turns Unicode mode on (`(?u)`) is not analysed: what it matches would depend on which Unicode tables a
//! build carries, and the module must answer alike in every build; it counts as admitting anything.

use crate::predicate::{Op, Pred};
use regex_syntax::ast::{self, Ast};
use regex_syntax::hir::{Class, Hir, HirKind};

/// The tools a capability is a shell through: whatever command line the agent writes, it runs. A
/// capability is a shell tool when its tool's name, or the part after the last `__` (an MCP tool as a
/// client names it, `mcp__<server>__<tool>`) and then after the last `.` (the MCP proxy's `<server>.<tool>`,
/// docs/spec/adapters.md#observations-per-adapter), is one of these, compared without regard to ASCII case. The list holds the POSIX and
/// Windows shells by name and the shell tools of the agent clients we know of (Claude Code `Bash`; Gemini
/// CLI `run_shell_command`; Cline `execute_command`; Cursor `run_terminal_cmd`; VS Code `run_in_terminal`;
/// OpenHands `execute_bash`; Codex `shell` and `local_shell`; Windsurf `run_command`; common MCP shell
/// servers' `exec`, `shell_exec`, `terminal`). Extend it here only: lint and its tests read it.
pub const SHELL_TOOLS: &[&str] = &[
    "bash",
    "sh",
    "zsh",
    "dash",
    "ksh",
    "fish",
    "shell",
    "exec",
    "local_shell",
    "run_shell_command",
    "shell_exec",
    "execute_command",
    "execute_bash",
    "run_command",
    "run_terminal_cmd",
    "run_in_terminal",
    "terminal",
    "powershell",
    "pwsh",
    "cmd",
];

/// The arguments a shell tool takes its command line in (Claude Code, Gemini CLI, Cline, OpenHands, Codex
/// and most MCP shell servers: `command`; others: `cmd`, `CommandLine`, `script`, `code`), compared
/// without regard to ASCII case. A shell capability's `when` pins the command only through a path that
/// is one of these at the top of the arguments (`/command`): pinning another argument (`/description`)
/// leaves the command line free.
pub const COMMAND_ARGUMENTS: &[&str] = &["command", "cmd", "commandline", "command_line", "script", "code"];

/// The characters through which a shell runs more than the one command a pattern shows: command
/// separators, pipes, substitutions, redirections, globs, grouping, history, escapes and line ends, in
/// the order a finding names the first one a pattern admits.
pub const SHELL_METACHARACTERS: &[u8] = b";&|$`<>(){}*?[]!\\\n\r\0";

/// Whether a capability's tool is a shell tool ([`SHELL_TOOLS`]).
pub fn is_shell_tool(tool: &str) -> bool {
    let last = tool.rsplit("__").next().unwrap_or(tool);
    let last = last.rsplit('.').next().unwrap_or(last);
    SHELL_TOOLS.iter().any(|s| s.eq_ignore_ascii_case(last))
}

/// Why a shell capability's `when` does not pin its command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loose {
    /// The capability has no `when`.
    NoWhen,
    /// Some way for the `when` to pass puts no `equals`, `in` or `matches` on a command argument.
    Unpinned,
    /// A `matches` on the command, at this pointer under the `when`, can match this character.
    Admits { pointer: String, pattern: String, byte: u8 },
    /// A `matches` on the command, at this pointer, that this analysis cannot read, and why ([`parse`]):
    /// it counts as admitting anything.
    Unreadable { pointer: String, pattern: String, why: &'static str },
}

/// Whether `when` pins the command line of a shell capability; `None` when it does. Every way for the
/// predicate to pass must go through a pinning comparison of a command argument ([`COMMAND_ARGUMENTS`]):
/// `equals` or `in` (exact values the runbook wrote), or a `matches` whose pattern can match none of
/// [`SHELL_METACHARACTERS`]. `all` pins when one part pins; `any` when every part pins; `not` never pins.
pub fn loose(when: Option<&Pred>) -> Option<Loose> {
    match when {
        None => Some(Loose::NoWhen),
        Some(p) => loose_at(p, String::new()),
    }
}

fn loose_at(p: &Pred, pointer: String) -> Option<Loose> {
    match p {
        Pred::All(parts) => {
            let mut first = None;
            for (i, part) in parts.iter().enumerate() {
                match loose_at(part, format!("{pointer}/all/{i}")) {
                    None => return None,
                    Some(l) => {
                        first.get_or_insert(l);
                    }
                }
            }
            first
        }
        Pred::Any(parts) => parts.iter().enumerate().find_map(|(i, part)| loose_at(part, format!("{pointer}/any/{i}"))),
        Pred::Not(_) => Some(Loose::Unpinned),
        Pred::Cmp { tokens, op, value, .. } => {
            let command = tokens.len() == 1 && COMMAND_ARGUMENTS.iter().any(|a| a.eq_ignore_ascii_case(&tokens[0]));
            match op {
                Op::Equals | Op::In if command => None,
                Op::Matches if command => {
                    let pattern = value.as_ref().and_then(|v| v.as_str()).unwrap_or_default().to_string();
                    let pointer = format!("{pointer}/value");
                    match parse(&pattern) {
                        Err(why) => Some(Loose::Unreadable { pointer, pattern, why }),
                        Ok(hir) => metacharacter(&hir).map(|byte| Loose::Admits { pointer, pattern, byte }),
                    }
                }
                _ => Some(Loose::Unpinned),
            }
        }
    }
}

/// The HIR of a pattern as regex-lite reads it, or why it cannot be analysed (see the module's
/// documentation). Only for patterns regex-lite accepted (as `\A(?:pattern)\z` in a `when`): one that
/// regex-syntax cannot read on its own, such as `^a)|(b$` (which the wrapping turns into an alternation
/// that passes anything starting with `a`), is not analysed either.
pub fn parse(pattern: &str) -> Result<Hir, &'static str> {
    const NOT_ALONE: &str = "it is not a regular expression on its own";
    let ast = ast::parse::ParserBuilder::new().build().parse(pattern).map_err(|_| NOT_ALONE)?;
    if ast::visit(&ast, UnicodeMode).is_err() {
        return Err("it turns on Unicode mode, which is not analysed");
    }
    regex_syntax::hir::translate::TranslatorBuilder::new().unicode(false).utf8(false).build().translate(pattern, &ast).map_err(|_| NOT_ALONE)
}

/// Refuses a pattern that turns Unicode mode on anywhere.
struct UnicodeMode;

impl ast::Visitor for UnicodeMode {
    type Output = ();
    type Err = ();
    fn finish(self) -> Result<(), ()> {
        Ok(())
    }
    fn visit_pre(&mut self, a: &Ast) -> Result<(), ()> {
        let flags = match a {
            Ast::Flags(f) => Some(&f.flags),
            Ast::Group(g) => g.flags(),
            _ => None,
        };
        match flags.and_then(|f| f.flag_state(ast::Flag::Unicode)) {
            Some(true) => Err(()),
            _ => Ok(()),
        }
    }
}

fn class_has(c: &Class, b: u8) -> bool {
    match c {
        Class::Bytes(c) => c.ranges().iter().any(|r| r.start() <= b && b <= r.end()),
        Class::Unicode(c) => c.ranges().iter().any(|r| r.start() as u32 <= b as u32 && b as u32 <= r.end() as u32),
    }
}

fn class_any(c: &Class, f: impl Fn(u8) -> bool) -> bool {
    match c {
        Class::Bytes(c) => c.ranges().iter().any(|r| (r.start()..=r.end()).any(&f)),
        // Unicode classes only arise in Unicode mode, which `parse` refuses; a range reaching past ASCII
        // counts as holding every byte.
        Class::Unicode(c) => c.ranges().iter().any(|r| r.end() as u32 > 0x7f || (r.start() as u8..=r.end() as u8).any(&f)),
    }
}

/// The first shell metacharacter (in [`SHELL_METACHARACTERS`] order) that some literal or class of the
/// pattern can match, looking at the nodes in order; None when the pattern can match none.
pub fn metacharacter(hir: &Hir) -> Option<u8> {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => None,
        HirKind::Literal(l) => SHELL_METACHARACTERS.iter().copied().find(|m| l.0.contains(m)),
        HirKind::Class(c) => SHELL_METACHARACTERS.iter().copied().find(|m| class_has(c, *m)),
        HirKind::Repetition(r) if r.max == Some(0) => None,
        HirKind::Repetition(r) => metacharacter(&r.sub),
        HirKind::Capture(c) => metacharacter(&c.sub),
        HirKind::Concat(parts) | HirKind::Alternation(parts) => parts.iter().find_map(metacharacter),
    }
}

/// Where an argument may begin, for the flag analysis: at the start of the value, after whitespace, or
/// elsewhere (sets of these as bits).
const START: u8 = 1;
const SPACE: u8 = 2;
const OTHER: u8 = 4;
const STATES: [u8; 3] = [START, SPACE, OTHER];

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn is_quote(b: u8) -> bool {
    matches!(b, b'"' | b'\'')
}

/// What a node does to the position, from each single position it may start at: the positions it may end
/// at, and whether it may put a `-` where an argument begins.
#[derive(Clone, Copy)]
struct Summary {
    out: [u8; 3],
    dash: [bool; 3],
}

impl Summary {
    const IDENTITY: Summary = Summary { out: [START, SPACE, OTHER], dash: [false; 3] };

    fn apply(&self, set: u8) -> (u8, bool) {
        let (mut out, mut dash) = (0, false);
        for (k, s) in STATES.iter().enumerate() {
            if set & s != 0 {
                out |= self.out[k];
                dash |= self.dash[k];
            }
        }
        (out, dash)
    }
}

/// Where the position goes after one byte that is not a `-` at an argument's start. A quote is
/// transparent: the shell removes it, so `"-rf"` is the flag `-rf`.
fn after_byte(set: u8, b: u8) -> u8 {
    if is_space(b) {
        SPACE
    } else if is_quote(b) {
        (if set & (START | SPACE) != 0 { SPACE } else { 0 }) | (if set & OTHER != 0 { OTHER } else { 0 })
    } else {
        OTHER
    }
}

fn summary(hir: &Hir) -> Summary {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Summary::IDENTITY,
        // A literal is text the runbook wrote: a `-` in it is a flag the runbook chose.
        HirKind::Literal(l) => {
            let mut s = Summary::IDENTITY;
            for (out, st) in s.out.iter_mut().zip(STATES) {
                *out = l.0.iter().fold(st, |set, b| after_byte(set, *b));
            }
            s
        }
        HirKind::Class(c) => {
            let dash = class_has(c, b'-');
            let space = class_any(c, is_space);
            let quote = class_any(c, is_quote);
            let other = class_any(c, |b| !is_space(b) && !is_quote(b));
            let mut s = Summary { out: [0; 3], dash: [false; 3] };
            for (k, st) in STATES.iter().enumerate() {
                let at_start = st & (START | SPACE) != 0;
                s.dash[k] = dash && at_start;
                s.out[k] = (if space { SPACE } else { 0 }) | (if other { OTHER } else { 0 }) | (if quote { after_byte(*st, b'"') } else { 0 });
            }
            s
        }
        HirKind::Repetition(r) if r.max == Some(0) => Summary::IDENTITY,
        HirKind::Repetition(r) => {
            let sub = summary(&r.sub);
            let mut s = Summary { out: [0; 3], dash: [false; 3] };
            for (k, st) in STATES.iter().enumerate() {
                // The positions before some iteration: the start, and, when it may repeat, after any.
                let mut before = *st;
                if r.max != Some(1) {
                    loop {
                        let next = before | sub.apply(before).0;
                        if next == before {
                            break;
                        }
                        before = next;
                    }
                }
                let (out, dash) = sub.apply(before);
                s.out[k] = out | if r.min == 0 { *st } else { 0 };
                s.dash[k] = dash;
            }
            s
        }
        HirKind::Capture(c) => summary(&c.sub),
        HirKind::Concat(parts) => {
            let subs: Vec<Summary> = parts.iter().map(summary).collect();
            let mut s = Summary { out: [0; 3], dash: [false; 3] };
            for (k, st) in STATES.iter().enumerate() {
                let (mut set, mut dash) = (*st, false);
                for sub in &subs {
                    let (o, d) = sub.apply(set);
                    set = o;
                    dash |= d;
                }
                s.out[k] = set;
                s.dash[k] = dash;
            }
            s
        }
        HirKind::Alternation(parts) => {
            let mut s = Summary { out: [0; 3], dash: [false; 3] };
            for sub in parts.iter().map(summary) {
                for k in 0..3 {
                    s.out[k] |= sub.out[k];
                    s.dash[k] |= sub.dash[k];
                }
            }
            s
        }
    }
}

/// Whether a pattern lets an argument start with `-`: a class (or `.`) holding `-` that can match at the
/// start of the value or right after whitespace (a literal space, or a class holding whitespace), a quote
/// in between or not. Literal dashes are flags the runbook wrote, and are fine.
pub fn flag_argument(hir: &Hir) -> bool {
    summary(hir).apply(START).1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admits(p: &str) -> Option<char> {
        metacharacter(&parse(p).expect(p)).map(char::from)
    }

    fn flag(p: &str) -> bool {
        flag_argument(&parse(p).expect(p))
    }

    #[test]
    fn shell_tools_by_name_mcp_segment_and_case() {
        for t in ["Bash", "bash", "BASH", "sh", "exec", "mcp__shell__exec", "mcp__desktop__run_command", "shell.exec", "PowerShell", "cmd", "run_shell_command"]
        {
            assert!(is_shell_tool(t), "{t}");
        }
        for t in ["db.read", "mcp__slack__post_message", "kubectl.scale", "execute", "bashful", "mcp__bash__read", "Read", ""] {
            assert!(!is_shell_tool(t), "{t}");
        }
    }

    #[test]
    fn metacharacters_in_literals_and_classes() {
        for (p, want) in [
            ("^kubectl get [a-z]+$", None),
            ("^kubectl -n payments get (secret|pods)( [a-z0-9][a-z0-9.-]*)?$", None),
            ("^.*$", Some(';')),
            ("^git (.*)$", Some(';')),
            ("^ls [^a]$", Some(';')),
            ("^ls \\S+$", Some(';')),
            ("^ls\\s+x$", Some('\n')),
            ("^echo \\$HOME$", Some('$')),
            ("^ls [a-z*]+$", Some('*')),
            ("^(?s)x.$", Some(';')),
            ("^(?i)[a-z]+$", None),
            ("^[[:punct:]]$", Some(';')),
            ("^a{0}$", None),
            ("^df -h( /[a-z0-9/]*)?$", None),
        ] {
            assert_eq!(admits(p), want, "{p}");
        }
    }

    #[test]
    fn unicode_mode_is_not_analysed() {
        for p in ["(?u)^[a-z]+$", "^(?u:\\w)+$", "^(?ui)k$", "^\\pL$", "a)|(b"] {
            assert!(parse(p).is_err(), "{p}");
        }
        assert!(parse("(?-u)^[a-z]+$").is_ok());
    }

    #[test]
    fn flags_where_an_argument_begins() {
        for (p, want) in [
            ("^ls( [a-z.-]+)?$", true),
            ("^ls( [a-z][a-z.-]*)?$", false),
            ("^kubectl -n payments get (secret|deployment|pods)( [a-z0-9.-]+)?$", true),
            ("^kubectl -n payments get (secret|deployment|pods)( [a-z0-9][a-z0-9.-]*)?$", false),
            ("^[a-z0-9-]+$", true),
            ("^/var/log/[a-z0-9._/-]+$", false),
            ("^rm -rf x$", false),
            ("^echo [a-z -]+$", true),
            ("^echo [a-z ]+[a-z-]$", true),
            ("^echo x\\s[a-z-]+$", true),
            ("^echo \"[a-z-]+\"$", true),
            ("^echo x\"[a-z-]+\"$", false),
            ("^ls .$", true),
            ("^ls \\S+$", true),
            ("^ls (-|a)x$", true),
            ("^ls (-l|-a)$", false),
            ("^x(?: [a-z]+)*( [a-z-]+)?$", true),
            ("^x( [a-z][a-z-]*)*$", false),
            ("^du -xsh /var/[a-z0-9._/-]+$", false),
            ("^--timeout=[0-9-]+s$", false),
        ] {
            assert_eq!(flag(p), want, "{p}");
        }
    }
}
