//! A strict JSON parser (RFC 8259) that keeps every node's line and column, reports duplicate keys, and
//! bounds nesting. Iterative where depth matters, so no input can exhaust the stack.

use crate::value::{escape_token, Member, Node, Num, Pos, Value};

/// Nesting depth past which a document or event is refused (docs/spec/runbook.md#limits).
pub const MAX_DEPTH: usize = 64;

/// A problem found while parsing. `fatal` problems leave no value.
#[derive(Clone, Debug)]
pub struct ParseIssue {
    pub code: &'static str,
    pub pos: Pos,
    pub pointer: String,
    pub message: String,
}

pub struct Parsed {
    pub node: Option<Node>,
    /// Non-fatal issues (duplicate keys), plus the fatal one last when `node` is None.
    pub issues: Vec<ParseIssue>,
}

struct Parser<'a> {
    src: &'a str,
    bytes: &'a [u8],
    i: usize,
    line: u32,
    col: u32,
    issues: Vec<ParseIssue>,
    /// Where the parser is, for the pointer of a finding; built into text only when one is reported.
    path: Vec<Seg>,
}

enum Seg {
    Key(String),
    Index(usize),
}

/// Members past which duplicate keys are found with a set rather than a scan, so that an object with many
/// keys costs n log n, not n squared.
const SCAN_LIMIT: usize = 16;

type PResult<T> = Result<T, ParseIssue>;

pub fn parse(src: &str) -> Parsed {
    let mut p = Parser { src, bytes: src.as_bytes(), i: 0, line: 1, col: 1, issues: Vec::new(), path: Vec::new() };
    let result = p.document();
    match result {
        Ok(node) => Parsed { node: Some(node), issues: p.issues },
        Err(e) => {
            let mut issues = p.issues;
            issues.push(e);
            Parsed { node: None, issues }
        }
    }
}

impl<'a> Parser<'a> {
    fn pos(&self) -> Pos {
        Pos { line: self.line, column: self.col }
    }

    fn pointer(&self) -> String {
        let mut s = String::new();
        for seg in &self.path {
            s.push('/');
            match seg {
                Seg::Key(k) => s.push_str(&escape_token(k)),
                Seg::Index(i) => s.push_str(&i.to_string()),
            }
        }
        s
    }

    fn err(&self, msg: impl Into<String>) -> ParseIssue {
        ParseIssue { code: "parse-error", pos: self.pos(), pointer: self.pointer(), message: msg.into() }
    }

    fn bump(&mut self) -> Option<char> {
        let b = *self.bytes.get(self.i)?;
        if b < 0x80 {
            self.i += 1;
            if b == b'\n' {
                self.line += 1;
                self.col = 1;
            } else {
                self.col += 1;
            }
            return Some(b as char);
        }
        let c = self.src[self.i..].chars().next()?;
        self.i += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(c) = self.peek() {
            if c == b' ' || c == b'\t' || c == b'\n' || c == b'\r' {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn document(&mut self) -> PResult<Node> {
        // A byte order mark is not JSON text (RFC 8259 8.1): refuse it rather than guess.
        self.ws();
        let node = self.value(0)?;
        self.ws();
        if self.i != self.bytes.len() {
            return Err(self.err("unexpected text after the JSON value"));
        }
        Ok(node)
    }

    fn value(&mut self, depth: usize) -> PResult<Node> {
        let pos = self.pos();
        match self.peek() {
            None => Err(self.err("unexpected end of input, expected a value")),
            Some(b'{') => {
                if depth >= MAX_DEPTH {
                    return Err(ParseIssue { code: "limit", pos, pointer: self.pointer(), message: format!("nesting deeper than {MAX_DEPTH} levels") });
                }
                self.bump();
                let mut members: Vec<Member> = Vec::new();
                let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.bump();
                    return Ok(Node { value: Value::Obj(members), pos });
                }
                loop {
                    self.ws();
                    let key_pos = self.pos();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected a string key"));
                    }
                    let key = self.string()?;
                    self.ws();
                    if self.peek() != Some(b':') {
                        return Err(self.err("expected `:` after the key"));
                    }
                    self.bump();
                    self.ws();
                    self.path.push(Seg::Key(key));
                    let v = self.value(depth + 1)?;
                    let duplicate = {
                        let Some(Seg::Key(key)) = self.path.last() else { unreachable!("pushed above") };
                        if members.len() < SCAN_LIMIT {
                            members.iter().any(|m| &m.key == key)
                        } else {
                            if seen.is_empty() {
                                seen.extend(members.iter().map(|m| m.key.clone()));
                            }
                            !seen.insert(key.clone())
                        }
                    };
                    if duplicate {
                        let pointer = self.pointer();
                        let Some(Seg::Key(key)) = self.path.pop() else { unreachable!("pushed above") };
                        self.issues.push(ParseIssue { code: "duplicate-key", pos: key_pos, pointer, message: format!("duplicate key `{key}`") });
                    } else {
                        let Some(Seg::Key(key)) = self.path.pop() else { unreachable!("pushed above") };
                        members.push(Member { key, key_pos, value: v });
                    }
                    self.ws();
                    match self.peek() {
                        Some(b',') => {
                            self.bump();
                        }
                        Some(b'}') => {
                            self.bump();
                            return Ok(Node { value: Value::Obj(members), pos });
                        }
                        _ => return Err(self.err("expected `,` or `}`")),
                    }
                }
            }
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return Err(ParseIssue { code: "limit", pos, pointer: self.pointer(), message: format!("nesting deeper than {MAX_DEPTH} levels") });
                }
                self.bump();
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.bump();
                    return Ok(Node { value: Value::Arr(items), pos });
                }
                loop {
                    self.ws();
                    self.path.push(Seg::Index(items.len()));
                    let v = self.value(depth + 1)?;
                    self.path.pop();
                    items.push(v);
                    self.ws();
                    match self.peek() {
                        Some(b',') => {
                            self.bump();
                        }
                        Some(b']') => {
                            self.bump();
                            return Ok(Node { value: Value::Arr(items), pos });
                        }
                        _ => return Err(self.err("expected `,` or `]`")),
                    }
                }
            }
            Some(b'"') => {
                let s = self.string()?;
                Ok(Node { value: Value::Str(s), pos })
            }
            Some(b't') => self.literal("true", Value::Bool(true), pos),
            Some(b'f') => self.literal("false", Value::Bool(false), pos),
            Some(b'n') => self.literal("null", Value::Null, pos),
            Some(c) if c == b'-' || c.is_ascii_digit() => self.number(pos),
            Some(_) => {
                let c = self.src[self.i..].chars().next().unwrap_or('?');
                Err(self.err(format!("unexpected character `{}`", c.escape_default())))
            }
        }
    }

    fn literal(&mut self, word: &str, v: Value, pos: Pos) -> PResult<Node> {
        if self.src[self.i..].starts_with(word) {
            for _ in 0..word.len() {
                self.bump();
            }
            Ok(Node { value: v, pos })
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn number(&mut self, pos: Pos) -> PResult<Node> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.bump();
        }
        match self.peek() {
            Some(b'0') => {
                self.bump();
            }
            Some(c) if c.is_ascii_digit() => {
                while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                    self.bump();
                }
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.bump();
            if !matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                return Err(self.err("invalid number: digits expected after `.`"));
            }
            while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                self.bump();
            }
        }
        if matches!(self.peek(), Some(b'e') | Some(b'E')) {
            self.bump();
            if matches!(self.peek(), Some(b'+') | Some(b'-')) {
                self.bump();
            }
            if !matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                return Err(self.err("invalid number: digits expected in the exponent"));
            }
            while matches!(self.peek(), Some(c) if c.is_ascii_digit()) {
                self.bump();
            }
        }
        let text = &self.src[start..self.i];
        match Num::parse(text) {
            Some(n) => Ok(Node { value: Value::Num(n), pos }),
            None => Err(ParseIssue { code: "parse-error", pos, pointer: self.pointer(), message: format!("number `{text}` is out of range") }),
        }
    }

    fn string(&mut self) -> PResult<String> {
        self.bump(); // opening quote
        let mut out = String::new();
        loop {
            // A run of plain characters in one go: no newline can be in it, so only the column moves,
            // by the number of characters (bytes that do not continue a UTF-8 sequence).
            let run_start = self.i;
            let rest = &self.bytes[self.i..];
            let n = rest.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).unwrap_or(rest.len());
            self.i += n;
            self.col += rest[..n].iter().filter(|&&c| (c & 0xC0) != 0x80).count() as u32;
            out.push_str(&self.src[run_start..self.i]);
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.bump();
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.bump();
                    let e = self.bump().ok_or_else(|| self.err("unterminated escape"))?;
                    match e {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        '/' => out.push('/'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            let hi = self.hex4()?;
                            if (0xD800..0xDC00).contains(&hi) {
                                if self.peek() != Some(b'\\') {
                                    return Err(self.err("lone surrogate in string escape"));
                                }
                                self.bump();
                                if self.bump() != Some('u') {
                                    return Err(self.err("lone surrogate in string escape"));
                                }
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("lone surrogate in string escape"));
                                }
                                let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                                out.push(char::from_u32(c).ok_or_else(|| self.err("invalid escape"))?);
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(self.err("lone surrogate in string escape"));
                            } else {
                                out.push(char::from_u32(hi).ok_or_else(|| self.err("invalid escape"))?);
                            }
                        }
                        _ => return Err(self.err("invalid escape in string")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }

    fn hex4(&mut self) -> PResult<u32> {
        let mut v = 0u32;
        for _ in 0..4 {
            let c = self.bump().ok_or_else(|| self.err("unterminated escape"))?;
            let d = c.to_digit(16).ok_or_else(|| self.err("invalid `\\u` escape"))?;
            v = v * 16 + d;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_duplicates() {
        let p = parse("{\n  \"a\": 1,\n  \"a\": 2\n}");
        let n = p.node.unwrap();
        assert_eq!(n.get("a").unwrap().pos, Pos { line: 2, column: 8 });
        assert_eq!(p.issues.len(), 1);
        assert_eq!(p.issues[0].code, "duplicate-key");
        assert_eq!(p.issues[0].pos, Pos { line: 3, column: 3 });
    }

    #[test]
    fn depth_is_bounded() {
        let deep = "[".repeat(100_000);
        let p = parse(&deep);
        assert!(p.node.is_none());
        assert_eq!(p.issues.last().unwrap().code, "limit");
    }

    #[test]
    fn bad_inputs_are_errors() {
        for bad in ["", "{", "[1,]", "01", "\"\\ud800\"", "{\"a\" 1}", "nul", "1 2", "\"a\nb\""] {
            let p = parse(bad);
            assert!(p.node.is_none(), "{bad}");
        }
    }
}
