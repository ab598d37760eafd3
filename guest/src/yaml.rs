//! YAML input: YAML 1.2 core schema with no implicit typing beyond it, and none of the features that let a
//! small file stand for a large or ambiguous one (tags, anchors, aliases, merge keys) (docs/spec/runbook.md#lint-findings).
//! Events come from saphyr-parser; the tree is built here with an explicit stack, so depth is bounded.

use crate::json::{ParseIssue, Parsed, MAX_DEPTH};
use crate::value::{escape_token, Member, Node, Num, Pos, Value};
use saphyr_parser::{Event, Parser, ScalarStyle, Span};

enum Frame {
    Seq {
        pos: Pos,
        items: Vec<Node>,
    },
    /// `seen` holds the keys so far: duplicate checks stay n log n however large the mapping.
    Map {
        pos: Pos,
        members: Vec<Member>,
        key: Option<(String, Pos, bool)>,
        seen: std::collections::BTreeSet<String>,
    },
}

fn pos_of(span: &Span) -> Pos {
    Pos { line: span.start.line() as u32, column: span.start.col() as u32 + 1 }
}

pub fn parse(src: &str) -> Parsed {
    let mut issues = Vec::new();
    match build(src, &mut issues) {
        Ok(node) => Parsed { node: Some(node), issues },
        Err(e) => {
            issues.push(e);
            Parsed { node: None, issues }
        }
    }
}

fn pointer_of(stack: &[Frame]) -> String {
    let mut s = String::new();
    for f in stack {
        match f {
            Frame::Seq { items, .. } => {
                s.push('/');
                s.push_str(&items.len().to_string());
            }
            Frame::Map { key: Some((k, _, _)), .. } => {
                s.push('/');
                s.push_str(&escape_token(k));
            }
            Frame::Map { key: None, .. } => {}
        }
    }
    s
}

fn build(src: &str, issues: &mut Vec<ParseIssue>) -> Result<Node, ParseIssue> {
    let mut parser = Parser::new_from_str(src);
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0;
    let issue = |code: &'static str, pos: Pos, stack: &[Frame], msg: String| ParseIssue { code, pos, pointer: pointer_of(stack), message: msg };
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                let m = e.marker();
                let pos = Pos { line: m.line() as u32, column: m.col() as u32 + 1 };
                if e.info().contains("recursion limit") {
                    // The scanner's own bound (deeper than ours) was hit first: same answer as ours.
                    let pos = deep_flow_position(src).unwrap_or(pos);
                    return Err(issue("limit", pos, &[], format!("nesting deeper than {MAX_DEPTH} levels")));
                }
                // YAML indents with spaces only: a tab there is named, and the finding points at it.
                if e.info().contains("tab") {
                    let pos = indentation_tab(src, pos.line).unwrap_or(pos);
                    return Err(issue("parse-error", pos, &stack, format!("invalid YAML: {}; indent with spaces, not tabs", e.info())));
                }
                return Err(issue("parse-error", pos, &stack, format!("invalid YAML: {}", e.info())));
            }
        };
        let pos = pos_of(&span);
        let node = match event {
            Event::StreamStart | Event::Nothing | Event::DocumentEnd => continue,
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(issue("parse-error", pos, &stack, "a runbook is one YAML document; found a second `---`".into()));
                }
                continue;
            }
            Event::Alias(_) => return Err(issue("parse-error", pos, &stack, "YAML aliases are not allowed".into())),
            Event::SequenceStart(anchor, tag) | Event::MappingStart(anchor, tag) if anchor != 0 || tag.is_some() => {
                let what = if anchor != 0 { "anchors" } else { "tags" };
                return Err(issue("parse-error", pos, &stack, format!("YAML {what} are not allowed")));
            }
            Event::SequenceStart(..) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(issue("limit", pos, &stack, format!("nesting deeper than {MAX_DEPTH} levels")));
                }
                if let Some(Frame::Map { key: None, .. }) = stack.last() {
                    return Err(issue("parse-error", pos, &stack, "mapping keys must be plain strings".into()));
                }
                stack.push(Frame::Seq { pos, items: Vec::new() });
                continue;
            }
            Event::MappingStart(..) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(issue("limit", pos, &stack, format!("nesting deeper than {MAX_DEPTH} levels")));
                }
                if let Some(Frame::Map { key: None, .. }) = stack.last() {
                    return Err(issue("parse-error", pos, &stack, "mapping keys must be plain strings".into()));
                }
                stack.push(Frame::Map { pos, members: Vec::new(), key: None, seen: Default::default() });
                continue;
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq { pos, items }) => Node { value: Value::Arr(items), pos },
                _ => return Err(issue("parse-error", pos, &stack, "unbalanced sequence".into())),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map { pos, members, .. }) => Node { value: Value::Obj(members), pos },
                _ => return Err(issue("parse-error", pos, &stack, "unbalanced mapping".into())),
            },
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 {
                    return Err(issue("parse-error", pos, &stack, "YAML anchors are not allowed".into()));
                }
                if tag.is_some() {
                    return Err(issue("parse-error", pos, &stack, "YAML tags are not allowed".into()));
                }
                // A scalar in key position is a key, whatever it looks like.
                if let Some(Frame::Map { key, seen, .. }) = stack.last_mut() {
                    if key.is_none() {
                        if style == ScalarStyle::Plain && text == "<<" {
                            return Err(issue("parse-error", pos, &stack, "YAML merge keys are not allowed".into()));
                        }
                        let duplicate = !seen.insert(text.to_string());
                        if duplicate {
                            let mut ptr = pointer_of(&stack);
                            ptr.push('/');
                            ptr.push_str(&escape_token(&text));
                            issues.push(ParseIssue { code: "duplicate-key", pos, pointer: ptr, message: format!("duplicate key `{text}`") });
                        }
                        if let Some(Frame::Map { key, .. }) = stack.last_mut() {
                            *key = Some((text.into_owned(), pos, duplicate));
                        }
                        continue;
                    }
                }
                let value = if style == ScalarStyle::Plain {
                    match resolve_plain(&text) {
                        Some(v) => v,
                        None => return Err(issue("parse-error", pos, &stack, format!("number `{text}` is out of range"))),
                    }
                } else {
                    Value::Str(text.into_owned())
                };
                Node { value, pos }
            }
        };
        // Attach the finished node to its parent.
        match stack.last_mut() {
            None => {
                if root.is_some() {
                    return Err(issue("parse-error", pos, &stack, "more than one value at the top level".into()));
                }
                root = Some(node);
            }
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { members, key, .. }) => {
                let (k, key_pos, duplicate) = key.take().expect("scalar keys are taken above");
                // The first of duplicate keys wins; the duplicate is already an error.
                if !duplicate {
                    members.push(Member { key: k, key_pos, value: node });
                }
            }
        }
    }
    root.ok_or_else(|| ParseIssue { code: "parse-error", pos: Pos { line: 1, column: 1 }, pointer: String::new(), message: "the document is empty".into() })
}

/// The tab a scanner error is about: the first tab in the indentation of line `line` or, when that has
/// none, of the next line with content (a plain scalar is reported where it starts, the tab that ended it
/// is on a later line).
fn indentation_tab(src: &str, line: u32) -> Option<Pos> {
    let mut lines = src.split('\n').enumerate().skip(line.saturating_sub(1) as usize);
    let tab_in = |(i, l): (usize, &str)| {
        let lead = &l[..l.len() - l.trim_start_matches([' ', '\t']).len()];
        lead.find('\t').map(|at| Pos { line: i as u32 + 1, column: at as u32 + 1 })
    };
    let first = lines.next()?;
    if let Some(p) = tab_in(first) {
        return Some(p);
    }
    let next = lines.find(|(_, l)| {
        let t = l.trim_matches([' ', '\t', '\r']);
        !t.is_empty() && !t.starts_with('#')
    })?;
    tab_in(next)
}

/// Where flow brackets first nest deeper than the limit (quotes and comments aside, which is enough for
/// the only case that needs it: a scanner that gave up on deep nesting).
fn deep_flow_position(src: &str) -> Option<Pos> {
    let (mut depth, mut line, mut column) = (0usize, 1u32, 1u32);
    for c in src.chars() {
        match c {
            '[' | '{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(Pos { line, column });
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    None
}

/// YAML 1.2 core schema resolution of a plain scalar. None for a number no double can hold.
fn resolve_plain(s: &str) -> Option<Value> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF" | ".nan" | ".NaN" | ".NAN" => {
            // Infinities and NaN have no JSON form; the core has no floats.
            return None;
        }
        _ => {}
    }
    let b = s.as_bytes();
    if let Some(rest) = s.strip_prefix("0o") {
        if !rest.is_empty() && rest.bytes().all(|c| (b'0'..=b'7').contains(&c)) {
            return radix(rest, 8);
        }
    }
    if let Some(rest) = s.strip_prefix("0x") {
        if !rest.is_empty() && rest.bytes().all(|c| c.is_ascii_hexdigit()) {
            return radix(rest, 16);
        }
    }
    // [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let f = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = i - f;
    }
    if int_digits == 0 && frac_digits == 0 {
        return Some(Value::Str(s.to_string()));
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        let e = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == e {
            return Some(Value::Str(s.to_string()));
        }
    }
    if i != b.len() {
        return Some(Value::Str(s.to_string()));
    }
    // Num::parse takes a leading `+` and a trailing `.`, which YAML allows.
    let text = s.strip_suffix('.').unwrap_or(s);
    let text = if text.contains(".e") || text.contains(".E") { text.replacen('.', "", 1) } else { text.to_string() };
    Num::parse(&text).map(Value::Num)
}

fn radix(digits: &str, base: u32) -> Option<Value> {
    let mut v: u128 = 0;
    for c in digits.chars() {
        v = v.checked_mul(base as u128)?.checked_add(c.to_digit(base)? as u128)?;
    }
    Num::parse(&v.to_string()).map(Value::Num)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(src: &str) -> Node {
        let p = parse(src);
        assert!(p.node.is_some(), "{src}: {:?}", p.issues);
        p.node.unwrap()
    }

    #[test]
    fn core_schema_only() {
        let n = root("a: yes\nb: 0o17\nc: 0x1F\nd: 1.5\ne: ~\nf: 'true'\ng: true\nh: .5\ni: 1e3\n");
        assert_eq!(n.get("a").unwrap().as_str(), Some("yes"));
        assert!(matches!(&n.get("b").unwrap().value, Value::Num(x) if x.as_u64() == Some(15)));
        assert!(matches!(&n.get("c").unwrap().value, Value::Num(x) if x.as_u64() == Some(31)));
        assert!(matches!(&n.get("e").unwrap().value, Value::Null));
        assert_eq!(n.get("f").unwrap().as_str(), Some("true"));
        assert!(matches!(&n.get("g").unwrap().value, Value::Bool(true)));
        assert!(matches!(&n.get("i").unwrap().value, Value::Num(x) if x.as_u64() == Some(1000)));
    }

    #[test]
    fn positions() {
        let n = root("steps:\n  - id: check\n    tool: db.read\n");
        let step = match &n.get("steps").unwrap().value {
            Value::Arr(items) => items[0].clone(),
            _ => panic!(),
        };
        assert_eq!(step.get("tool").unwrap().pos, Pos { line: 3, column: 11 });
    }

    #[test]
    fn refused_features() {
        for bad in ["a: &x 1\nb: *x\n", "a: !!str 1\n", "base: &b {x: 1}\nc:\n  <<: *b\n", "a: 1\n---\nb: 2\n", "a: .inf\n", "", "[a, b\n"] {
            assert!(parse(bad).node.is_none(), "{bad:?}");
        }
        let lol = format!("a: &a [x]\nb: &b [{}]\n", "*a,".repeat(10));
        assert!(parse(&lol).node.is_none());
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(parse(&deep).issues.last().unwrap().code, "limit");
    }

    #[test]
    fn a_tab_in_the_indentation_is_named_and_pointed_at() {
        for (src, line, column) in [
            ("capabilities:\n\t- {name: a}\n", 2, 1),
            ("capabilities:\n  - name: a\n\ttool: t\n", 3, 1),
            ("capabilities:\n  - name: a\n\n  # c\n  \ttool: t\n", 5, 3),
            ("id: x\n\tversion: 1\n", 2, 1),
        ] {
            let p = parse(src);
            assert!(p.node.is_none(), "{src:?}");
            let i = p.issues.last().unwrap();
            assert_eq!(i.code, "parse-error");
            assert!(i.message.starts_with("invalid YAML: ") && i.message.ends_with("; indent with spaces, not tabs"), "{src:?}: {}", i.message);
            assert_eq!(i.pos, Pos { line, column }, "{src:?}: {}", i.message);
        }
        // A tab inside a value is no indentation: no such finding.
        assert!(parse("a: x\ty\n").node.is_some());
    }

    #[test]
    fn duplicates_are_reported() {
        let p = parse("a: 1\na: 2\n");
        assert_eq!(p.issues[0].code, "duplicate-key");
        assert_eq!(p.issues[0].pos, Pos { line: 2, column: 1 });
    }
}
