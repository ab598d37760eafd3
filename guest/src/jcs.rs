//! RFC 8785 (JSON Canonicalization Scheme) output, and small constructors for building the artifacts.

use crate::value::{Member, Node, Num, Pos, Value};

/// Writes `node` as canonical JSON: members sorted by their keys' UTF-16 code units, no insignificant
/// whitespace, strings escaped as ECMAScript's JSON.stringify does, numbers in their RFC 8785 form.
pub fn to_string(node: &Node) -> String {
    let mut out = String::new();
    write(node, &mut out);
    out
}

pub fn write(node: &Node, out: &mut String) {
    write_with(node, out, Mode::Canonical);
}

/// How numbers are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// RFC 8785.
    Canonical,
    /// Every number as text that reads back as exactly its decimal (snapshots).
    Exact,
    /// A recorded event line: RFC 8785, but a number that is not exact (9.28) as it was written, so a
    /// replay of the record reads the very number the host was given.
    Record,
    /// What the hash chain and `call_sha256` digest: RFC 8785, but a number that is not exact (9.28) as
    /// the JSON string of its text as written, so two different numbers never hash alike.
    Hashing,
}

/// As [`to_string`], but every number in the text that reads back as exactly its decimal
/// ([`Num::exact_text`]): not RFC 8785 when a number has more precision than a double, and then only.
pub fn to_string_exact(node: &Node) -> String {
    let mut out = String::new();
    write_with(node, &mut out, Mode::Exact);
    out
}

/// RFC 8785 of an event as recorded (9.28): identical to [`to_string`] unless a number is not exact,
/// which is then written as it was given.
pub fn to_string_record(node: &Node) -> String {
    let mut out = String::new();
    write_with(node, &mut out, Mode::Record);
    out
}

/// RFC 8785 of what is hashed (9.28): identical to [`to_string`] unless a number is not exact, which
/// then enters as the JSON string of its text as written.
pub fn to_string_hashing(node: &Node) -> String {
    let mut out = String::new();
    write_with(node, &mut out, Mode::Hashing);
    out
}

/// Appends what [`to_string_record`] gives.
pub fn write_record(node: &Node, out: &mut String) {
    write_with(node, out, Mode::Record);
}

/// Appends what [`to_string_hashing`] gives.
pub fn write_hashing(node: &Node, out: &mut String) {
    write_with(node, out, Mode::Hashing);
}

/// Whether `node` holds a number that is not exact (9.28): the hot path's check (every `invoke`), which
/// allocates nothing; [`first_inexact`] names where.
pub fn has_inexact(node: &Node) -> bool {
    match &node.value {
        Value::Num(n) => !n.is_exact(),
        Value::Arr(items) => items.iter().any(has_inexact),
        Value::Obj(members) => members.iter().any(|m| has_inexact(&m.value)),
        _ => false,
    }
}

/// The JSON Pointer of the first number in `node` (in document order) that is not exact (9.28).
pub fn first_inexact(node: &Node) -> Option<String> {
    fn walk(node: &Node, path: &mut String) -> bool {
        match &node.value {
            Value::Num(n) => !n.is_exact(),
            Value::Arr(items) => items.iter().enumerate().any(|(i, it)| {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                let found = walk(it, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Obj(members) => members.iter().any(|m| {
                let len = path.len();
                path.push('/');
                path.push_str(&m.key.replace('~', "~0").replace('/', "~1"));
                let found = walk(&m.value, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = String::new();
    walk(node, &mut path).then_some(path)
}

fn write_with(node: &Node, out: &mut String, mode: Mode) {
    match &node.value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Num(n) => match (mode, n.inexact_text()) {
            (Mode::Exact, _) => out.push_str(&n.exact_text()),
            (Mode::Record, Some(text)) => out.push_str(text),
            (Mode::Hashing, Some(text)) => write_str(text, out),
            _ => out.push_str(n.canonical()),
        },
        Value::Str(s) => write_str(s, out),
        Value::Arr(items) => {
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_with(it, out, mode);
            }
            out.push(']');
        }
        Value::Obj(members) => {
            let mut sorted: Vec<&Member> = members.iter().collect();
            crate::sort::sort_by(&mut sorted, |a, b| utf16_order(&a.key, &b.key));
            out.push('{');
            for (i, m) in sorted.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(&m.key, out);
                out.push(':');
                write_with(&m.value, out, mode);
            }
            out.push('}');
        }
    }
}

/// RFC 8785 orders keys by their UTF-16 code units (which differs from UTF-8 byte order only past U+FFFF).
pub fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    // UTF-8 bytes sort as code points, which differ from UTF-16 units only when a character past U+FFFF
    // meets one in U+E000..U+FFFF: both start with a byte of at least 0xEE. Keys are almost always
    // ASCII, and this runs on every member of every object written.
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let at = x.iter().zip(y).position(|(p, q)| p != q);
    // The differing characters' lead bytes are within the 3 bytes before the first difference.
    let wide = |s: &[u8], i: usize| s[i.saturating_sub(3)..=i].iter().any(|&c| c >= 0xEE);
    match at {
        Some(i) if wide(x, i) || wide(y, i) => a.encode_utf16().cmp(b.encode_utf16()),
        Some(i) => x[i].cmp(&y[i]),
        None => x.len().cmp(&y.len()),
    }
}

pub fn write_str(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Runs of bytes that need no escape are copied whole: every byte to escape is ASCII, so a run always
    // ends on a character boundary.
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &c) in bytes.iter().enumerate() {
        let esc = match c {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            c if c < 0x20 => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        start = i + 1;
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(c as usize) >> 4] as char);
            out.push(HEX[(c as usize) & 0xf] as char);
        } else {
            out.push_str(esc);
        }
    }
    out.push_str(&s[start..]);
    out.push('"');
}

// Constructors, so artifact code reads as the shape it produces.

pub fn obj(members: Vec<(&str, Node)>) -> Node {
    Node::new(Value::Obj(members.into_iter().map(|(k, v)| Member { key: k.to_string(), key_pos: Pos::default(), value: v }).collect()))
}

pub fn obj_owned(members: Vec<(String, Node)>) -> Node {
    Node::new(Value::Obj(members.into_iter().map(|(key, value)| Member { key, key_pos: Pos::default(), value }).collect()))
}

pub fn s(v: &str) -> Node {
    Node::new(Value::Str(v.to_string()))
}

pub fn opt_s(v: Option<&str>) -> Node {
    v.map(s).unwrap_or_else(null)
}

pub fn n(v: u64) -> Node {
    Node::new(Value::Num(Num::from_u64(v)))
}

pub fn b(v: bool) -> Node {
    Node::new(Value::Bool(v))
}

pub fn null() -> Node {
    Node::new(Value::Null)
}

pub fn arr(items: Vec<Node>) -> Node {
    Node::new(Value::Arr(items))
}

pub fn strs<'a>(items: impl IntoIterator<Item = &'a str>) -> Node {
    arr(items.into_iter().map(s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json;

    fn canon(src: &str) -> String {
        to_string(&json::parse(src).node.unwrap())
    }

    #[test]
    fn utf16_order_matches_code_units() {
        let words = [
            "",
            "a",
            "ab",
            "b",
            "\u{7f}",
            "\u{80}",
            "\u{e9}",
            "\u{d7ff}",
            "\u{e000}",
            "\u{fb33}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "a\u{1f600}",
            "a\u{fb33}",
            "\u{fb33}x",
            "\u{1f600}x",
        ];
        for x in words {
            for y in words {
                assert_eq!(utf16_order(x, y), x.encode_utf16().cmp(y.encode_utf16()), "{x:?} {y:?}");
            }
        }
    }

    #[test]
    fn strings_escape_as_json_stringify() {
        let mut out = String::new();
        write_str("a\"b\\c\u{8}\u{c}\n\r\t\u{1}\u{1f}é\u{1f600}\u{7f}", &mut out);
        assert_eq!(out, "\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0001\\u001fé\u{1f600}\u{7f}\"");
    }

    #[test]
    fn rfc8785_examples() {
        assert_eq!(canon(r#"{"b":2,"a":1,"c":{"z":[1.0,true,null],"y":"\u00e9\n"}}"#), r#"{"a":1,"b":2,"c":{"y":"é\n","z":[1,true,null]}}"#);
        // Sorting is by UTF-16 code units: U+1F600 (a surrogate pair) sorts before U+FB33.
        assert_eq!(canon("{\"\u{fb33}\":1,\"\u{1f600}\":2}"), "{\"\u{1f600}\":2,\"\u{fb33}\":1}");
        assert_eq!(canon(r#""\u001f\u007f""#), "\"\\u001f\u{7f}\"");
        assert_eq!(canon("[1E30, 0.000001, -1e-7, 333333333.33333329]"), "[1e+30,0.000001,-1e-7,333333333.3333333]");
    }
}
