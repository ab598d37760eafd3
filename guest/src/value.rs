//! The document and event data model: JSON values whose every node remembers where it stood in the
//! source, and numbers kept as exact decimals (the core does no float arithmetic).

use std::cmp::Ordering;

/// A 1-based line and column (column counted in Unicode scalar values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

/// An exact decimal number: `(-1)^neg * digits * 10^exp`, with `digits` free of leading and trailing
/// zeros (zero is the empty digit string). Comparisons are exact; no float is ever computed from it except
/// to print it the way RFC 8785 asks.
#[derive(Clone, Debug)]
pub struct Num {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
    /// The RFC 8785 text of the number (ECMAScript's shortest round-trip form of the nearest double).
    canonical: String,
    /// The number's text as written, kept only when it is not exact (docs/spec/runbook.md#exact-numbers): its canonical text
    /// stands for another decimal, so hashing and recording use this text instead.
    inexact: Option<Box<str>>,
    /// Parsed by the short-integer path, which is exact by construction.
    exact_fast: bool,
}

impl Num {
    /// Parses JSON number syntax (already checked by the caller). Returns None when the value is not a
    /// finite double (RFC 8785 numbers are IEEE doubles).
    pub fn parse(text: &str) -> Option<Num> {
        let mut num = Num::parse_decimal(text)?;
        // Exact (9.28) when the canonical text reads back as this very decimal.
        if !num.exact_fast && !Num::parse_decimal(&num.canonical).is_some_and(|c| c == num) {
            num.inexact = Some(text.into());
        }
        Some(num)
    }

    fn parse_decimal(text: &str) -> Option<Num> {
        let bytes = text.as_bytes();
        // A plain integer of at most 15 digits (most numbers in events and snapshots: seqs, times, counts)
        // is exact as a double and is its own RFC 8785 text, so it skips the round trip through one.
        if (1..=15).contains(&bytes.len()) && bytes.iter().all(u8::is_ascii_digit) && (bytes[0] != b'0' || bytes.len() == 1) {
            let mut digits: Vec<u8> = bytes.iter().map(|c| c - b'0').collect();
            let mut exp = 0;
            while digits.last() == Some(&0) {
                digits.pop();
                exp += 1;
            }
            let exp = if digits.is_empty() { 0 } else { exp };
            return Some(Num { neg: false, digits, exp, canonical: text.to_string(), inexact: None, exact_fast: true });
        }
        let mut i = 0;
        let mut neg = false;
        if i < bytes.len() && (bytes[i] == b'-' || bytes[i] == b'+') {
            neg = bytes[i] == b'-';
            i += 1;
        }
        let mut digits = Vec::new();
        let mut exp: i64 = 0;
        let mut seen_dot = false;
        let mut any = false;
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_digit() {
                any = true;
                digits.push(c - b'0');
                if seen_dot {
                    exp -= 1;
                }
            } else if c == b'.' && !seen_dot {
                seen_dot = true;
            } else {
                break;
            }
            i += 1;
        }
        if !any {
            return None;
        }
        if i < bytes.len() {
            if bytes[i] != b'e' && bytes[i] != b'E' {
                return None;
            }
            i += 1;
            let mut eneg = false;
            if i < bytes.len() && (bytes[i] == b'-' || bytes[i] == b'+') {
                eneg = bytes[i] == b'-';
                i += 1;
            }
            let mut e: i64 = 0;
            let mut edigits = false;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                edigits = true;
                e = e.saturating_mul(10).saturating_add((bytes[i] - b'0') as i64);
                if e > 1_000_000 {
                    return None;
                }
                i += 1;
            }
            if !edigits || i != bytes.len() {
                return None;
            }
            exp += if eneg { -e } else { e };
        }
        // Normalise: strip leading and trailing zeros.
        let first = digits.iter().position(|d| *d != 0);
        let digits: Vec<u8> = match first {
            None => Vec::new(),
            Some(f) => {
                let mut d = digits[f..].to_vec();
                while d.last() == Some(&0) {
                    d.pop();
                    exp += 1;
                }
                d
            }
        };
        let neg = neg && !digits.is_empty();
        let exp = if digits.is_empty() { 0 } else { exp };
        let canonical = canonical_text(neg, &digits, exp)?;
        Some(Num { neg, digits, exp, canonical, inexact: None, exact_fast: false })
    }

    /// docs/spec/runbook.md#exact-numbers: whether the decimal value of the canonical text equals the number as written
    /// (`1e2`, `0.1` and every integer up to 2^53 are; `1234567890123456789` is not).
    pub fn is_exact(&self) -> bool {
        self.inexact.is_none()
    }

    /// The text as written, for a number that is not exact.
    pub fn inexact_text(&self) -> Option<&str> {
        self.inexact.as_deref()
    }

    pub fn from_u64(v: u64) -> Num {
        Num::parse(&v.to_string()).expect("integers parse")
    }

    /// The value as a u64 when it is a non-negative integer that fits.
    pub fn as_u64(&self) -> Option<u64> {
        if self.neg {
            return None;
        }
        if self.digits.is_empty() {
            return Some(0);
        }
        if self.exp < 0 || self.digits.len() as i64 + self.exp > 20 {
            return None;
        }
        let mut v: u64 = 0;
        for d in &self.digits {
            v = v.checked_mul(10)?.checked_add(*d as u64)?;
        }
        for _ in 0..self.exp {
            v = v.checked_mul(10)?;
        }
        Some(v)
    }

    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// JSON number text that reads back as exactly this decimal: the RFC 8785 text when it does (nearly
    /// always), else `digits` `e` `exponent`. For state that must survive a round trip through text
    /// (a session snapshot), where rounding to the nearest double could change a later comparison.
    pub fn exact_text(&self) -> std::borrow::Cow<'_, str> {
        if Num::parse(&self.canonical).is_some_and(|c| c == *self) {
            return std::borrow::Cow::Borrowed(&self.canonical);
        }
        let mut s = String::with_capacity(self.digits.len() + 8);
        if self.neg {
            s.push('-');
        }
        s.extend(self.digits.iter().map(|d| (b'0' + d) as char));
        if self.exp != 0 {
            s.push('e');
            s.push_str(&self.exp.to_string());
        }
        std::borrow::Cow::Owned(s)
    }

    /// Compare magnitudes of two normalised decimals.
    fn cmp_abs(&self, other: &Num) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        // Position of the most significant digit.
        let ma = self.digits.len() as i64 + self.exp;
        let mb = other.digits.len() as i64 + other.exp;
        if ma != mb {
            return ma.cmp(&mb);
        }
        let n = self.digits.len().max(other.digits.len());
        for k in 0..n {
            let a = self.digits.get(k).copied().unwrap_or(0);
            let b = other.digits.get(k).copied().unwrap_or(0);
            if a != b {
                return a.cmp(&b);
            }
        }
        Ordering::Equal
    }
}

impl PartialEq for Num {
    fn eq(&self, other: &Num) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Num {}
impl PartialOrd for Num {
    fn partial_cmp(&self, other: &Num) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Num {
    fn cmp(&self, other: &Num) -> Ordering {
        match (self.neg, other.neg) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_abs(other),
            (true, true) => other.cmp_abs(self),
        }
    }
}

/// RFC 8785 number text: the ECMAScript form of the double nearest to the decimal. Parsing a decimal
/// string into a double and printing it back are exact, deterministic integer algorithms in Rust's core
/// library and ryu-js, so this is the same in every host.
fn canonical_text(neg: bool, digits: &[u8], exp: i64) -> Option<String> {
    if digits.is_empty() {
        return Some("0".to_string());
    }
    let mut s = String::with_capacity(digits.len() + 24);
    if neg {
        s.push('-');
    }
    for d in digits {
        s.push((b'0' + d) as char);
    }
    s.push('e');
    s.push_str(&exp.to_string());
    let f: f64 = s.parse().ok()?;
    if !f.is_finite() {
        return None;
    }
    if f == 0.0 {
        // Underflow to zero: RFC 8785 prints the double, which is 0.
        return Some("0".to_string());
    }
    let mut buf = ryu_js::Buffer::new();
    Some(buf.format_finite(f).to_string())
}

/// A JSON value.
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Bool(bool),
    Num(Num),
    Str(String),
    Arr(Vec<Node>),
    Obj(Vec<Member>),
}

/// One member of an object, in source order.
#[derive(Clone, Debug)]
pub struct Member {
    pub key: String,
    pub key_pos: Pos,
    pub value: Node,
}

/// A value and where it started in the source.
#[derive(Clone, Debug)]
pub struct Node {
    pub value: Value,
    pub pos: Pos,
}

impl Node {
    pub fn new(value: Value) -> Node {
        Node { value, pos: Pos::default() }
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Obj(members) => members.iter().find(|m| m.key == key).map(|m| &m.value),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match &self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Num(_) => "a number",
            Value::Str(_) => "a string",
            Value::Arr(_) => "a list",
            Value::Obj(_) => "a mapping",
        }
    }

    /// Resolves an RFC 6901 JSON Pointer (already validated into its reference tokens).
    pub fn pointer(&self, tokens: &[String]) -> Option<&Node> {
        let mut cur = self;
        for t in tokens {
            cur = match &cur.value {
                Value::Obj(members) => &members.iter().find(|m| &m.key == t)?.value,
                Value::Arr(items) => {
                    if t.is_empty() || (t.len() > 1 && t.starts_with('0')) || !t.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    let i: usize = t.parse().ok()?;
                    items.get(i)?
                }
                _ => return None,
            };
        }
        Some(cur)
    }
}

/// Deep equality, numbers by value, object members regardless of order.
pub fn json_eq(a: &Node, b: &Node) -> bool {
    match (&a.value, &b.value) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Num(x), Value::Num(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Arr(x), Value::Arr(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Obj(x), Value::Obj(y)) => x.len() == y.len() && x.iter().all(|m| y.iter().any(|n| n.key == m.key && json_eq(&m.value, &n.value))),
        _ => false,
    }
}

/// Splits a JSON Pointer into its reference tokens, or None when it is not a valid RFC 6901 pointer.
pub fn parse_pointer(p: &str) -> Option<Vec<String>> {
    if p.is_empty() {
        return Some(Vec::new());
    }
    if !p.starts_with('/') {
        return None;
    }
    let mut out = Vec::new();
    for raw in p[1..].split('/') {
        let mut t = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '~' {
                match chars.next() {
                    Some('0') => t.push('~'),
                    Some('1') => t.push('/'),
                    _ => return None,
                }
            } else {
                t.push(c);
            }
        }
        out.push(t);
    }
    Some(out)
}

/// Escapes one reference token for a JSON Pointer.
pub fn escape_token(t: &str) -> String {
    t.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value() {
        let n = |s| Num::parse(s).unwrap();
        assert_eq!(n("1"), n("1.0"));
        assert_eq!(n("100"), n("1e2"));
        assert!(n("-2") < n("-1.5"));
        assert!(n("0.1") < n("0.10001"));
        assert!(n("-0") == n("0"));
        assert_eq!(n("120").as_u64(), Some(120));
        assert_eq!(n("1.5").as_u64(), None);
    }

    #[test]
    fn numbers_print_as_rfc8785() {
        let c = |s: &str| Num::parse(s).unwrap().canonical().to_string();
        assert_eq!(c("1.0"), "1");
        assert_eq!(c("-0"), "0");
        assert_eq!(c("1e21"), "1e+21");
        assert_eq!(c("1e20"), "100000000000000000000");
        assert_eq!(c("0.000001"), "0.000001");
        assert_eq!(c("1e-7"), "1e-7");
        assert_eq!(c("4.50"), "4.5");
        assert!(Num::parse("1e400").is_none());
    }

    #[test]
    fn plain_integers_agree_with_the_general_path() {
        // The general path, reached through a form the shortcut does not take (an exponent of zero).
        for text in ["0", "7", "10", "100", "120", "999999999999999", "100000000000000", "123456789012345"] {
            let fast = Num::parse(text).unwrap();
            let slow = Num::parse(&format!("{text}e0")).unwrap();
            assert_eq!((fast.neg, &fast.digits, fast.exp, fast.canonical()), (slow.neg, &slow.digits, slow.exp, slow.canonical()), "{text}");
        }
    }

    #[test]
    fn exact_text_reads_back_as_the_same_decimal() {
        for text in ["0", "-0", "1.5", "0.1", "1e21", "120", "1.00000000000000000001", "9007199254740993", "-12345678901234567890.5", "1e-400", "4.50"] {
            let a = Num::parse(text).unwrap();
            let b = Num::parse(&a.exact_text()).unwrap();
            assert_eq!(a, b, "{text} -> {}", a.exact_text());
            assert_eq!(a.exact_text(), b.exact_text());
        }
        assert_eq!(Num::parse("1.50").unwrap().exact_text(), "1.5");
        assert_eq!(Num::parse("9007199254740993").unwrap().exact_text(), "9007199254740993");
        assert_eq!(Num::parse("1.00000000000000000001").unwrap().exact_text(), "100000000000000000001e-20");
    }
}
