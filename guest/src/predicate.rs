//! Assert and `when` predicates: a closed set of operators over a JSON observation, with three-valued
//! results (docs/spec/runbook.md#three-valued-logic). There is deliberately no model-based evaluator.

use crate::jcs;
use crate::value::{json_eq, Node, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truth {
    Pass,
    Fail,
    Unevaluable,
}

impl Truth {
    pub fn as_str(self) -> &'static str {
        match self {
            Truth::Pass => "pass",
            Truth::Fail => "fail",
            Truth::Unevaluable => "unevaluable",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Exists,
    Absent,
    Equals,
    NotEquals,
    In,
    Contains,
    Matches,
    Lt,
    Lte,
    Gt,
    Gte,
    LenEq,
    LenLte,
    LenGte,
}

pub const OPS: [(&str, Op); 14] = [
    ("exists", Op::Exists),
    ("absent", Op::Absent),
    ("equals", Op::Equals),
    ("not_equals", Op::NotEquals),
    ("in", Op::In),
    ("contains", Op::Contains),
    ("matches", Op::Matches),
    ("lt", Op::Lt),
    ("lte", Op::Lte),
    ("gt", Op::Gt),
    ("gte", Op::Gte),
    ("len_eq", Op::LenEq),
    ("len_lte", Op::LenLte),
    ("len_gte", Op::LenGte),
];

impl Op {
    pub fn name(self) -> &'static str {
        OPS.iter().find(|(_, o)| *o == self).map(|(n, _)| *n).unwrap_or("?")
    }
}

#[derive(Clone, Debug)]
pub enum Pred {
    Cmp { path: String, tokens: Vec<String>, op: Op, value: Option<Node>, regex: Option<regex_lite::Regex> },
    All(Vec<Pred>),
    Any(Vec<Pred>),
    Not(Box<Pred>),
}

impl Pred {
    /// Three-valued evaluation against an observation (docs/spec/runbook.md#three-valued-logic).
    pub fn eval(&self, obs: &Node) -> Truth {
        match self {
            Pred::All(parts) => {
                let mut unevaluable = false;
                for p in parts {
                    match p.eval(obs) {
                        Truth::Fail => return Truth::Fail,
                        Truth::Unevaluable => unevaluable = true,
                        Truth::Pass => {}
                    }
                }
                if unevaluable {
                    Truth::Unevaluable
                } else {
                    Truth::Pass
                }
            }
            Pred::Any(parts) => {
                let mut unevaluable = false;
                for p in parts {
                    match p.eval(obs) {
                        Truth::Pass => return Truth::Pass,
                        Truth::Unevaluable => unevaluable = true,
                        Truth::Fail => {}
                    }
                }
                if unevaluable {
                    Truth::Unevaluable
                } else {
                    Truth::Fail
                }
            }
            Pred::Not(p) => match p.eval(obs) {
                Truth::Pass => Truth::Fail,
                Truth::Fail => Truth::Pass,
                Truth::Unevaluable => Truth::Unevaluable,
            },
            Pred::Cmp { tokens, op, value, regex, .. } => cmp(obs.pointer(tokens), *op, value.as_ref(), regex.as_ref()),
        }
    }

    /// The normalised predicate, as it appears in the envelope.
    pub fn to_node(&self) -> Node {
        match self {
            Pred::All(ps) => jcs::obj(vec![("all", jcs::arr(ps.iter().map(Pred::to_node).collect()))]),
            Pred::Any(ps) => jcs::obj(vec![("any", jcs::arr(ps.iter().map(Pred::to_node).collect()))]),
            Pred::Not(p) => jcs::obj(vec![("not", p.to_node())]),
            Pred::Cmp { path, op, value, .. } => {
                let mut m = vec![("path", jcs::s(path)), ("op", jcs::s(op.name()))];
                if let Some(v) = value {
                    m.push(("value", v.clone()));
                }
                jcs::obj(m)
            }
        }
    }
}

fn bool_truth(b: bool) -> Truth {
    if b {
        Truth::Pass
    } else {
        Truth::Fail
    }
}

fn length(v: &Node) -> Option<u64> {
    match &v.value {
        Value::Str(s) => Some(s.chars().count() as u64),
        Value::Arr(a) => Some(a.len() as u64),
        Value::Obj(o) => Some(o.len() as u64),
        _ => None,
    }
}

fn cmp(x: Option<&Node>, op: Op, value: Option<&Node>, regex: Option<&regex_lite::Regex>) -> Truth {
    match op {
        Op::Exists => return bool_truth(x.is_some()),
        Op::Absent => return bool_truth(x.is_none()),
        _ => {}
    }
    let (Some(x), Some(v)) = (x, value) else { return Truth::Unevaluable };
    if crate::jcs::has_inexact(x) {
        // 9.28: a number with no exact canonical form is recorded as text, so nothing may be judged on it.
        return Truth::Unevaluable;
    }
    match op {
        Op::Exists | Op::Absent => unreachable!("handled above"),
        Op::Equals => bool_truth(json_eq(x, v)),
        Op::NotEquals => bool_truth(!json_eq(x, v)),
        Op::In => match &v.value {
            Value::Arr(items) => bool_truth(items.iter().any(|i| json_eq(x, i))),
            _ => Truth::Unevaluable,
        },
        Op::Contains => match (&x.value, &v.value) {
            (Value::Str(hay), Value::Str(needle)) => bool_truth(hay.contains(needle.as_str())),
            (Value::Arr(items), _) => bool_truth(items.iter().any(|i| json_eq(i, v))),
            (Value::Obj(members), Value::Str(k)) => bool_truth(members.iter().any(|m| &m.key == k)),
            _ => Truth::Unevaluable,
        },
        Op::Matches => match (&x.value, regex) {
            (Value::Str(s), Some(re)) => bool_truth(re.is_match(s)),
            _ => Truth::Unevaluable,
        },
        Op::Lt | Op::Lte | Op::Gt | Op::Gte => match (&x.value, &v.value) {
            (Value::Num(a), Value::Num(b)) => bool_truth(match op {
                Op::Lt => a < b,
                Op::Lte => a <= b,
                Op::Gt => a > b,
                _ => a >= b,
            }),
            _ => Truth::Unevaluable,
        },
        Op::LenEq | Op::LenLte | Op::LenGte => {
            let (Some(len), Value::Num(want)) = (length(x), &v.value) else { return Truth::Unevaluable };
            let Some(want) = want.as_u64() else { return Truth::Unevaluable };
            bool_truth(match op {
                Op::LenEq => len == want,
                Op::LenLte => len <= want,
                _ => len >= want,
            })
        }
    }
}
