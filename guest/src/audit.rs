//! `verify`'s consistency checks of a recorded run, in the module, so that the CLI, the packages and a
//! browser verify a bundle with the same code (docs/spec/README.md#architecture).
//!
//! A bundle with its raw events is verified by replay: the module decides every recorded event again and
//! its report must be the recorded one, byte for byte. A redacted derivative cannot be replayed (its
//! arguments and results are digests), so its report is checked against the recorded decision lines:
//! every field of the report that the decisions determine must be what they say.

use crate::json;
use crate::value::{json_eq, Node, Value};

/// Where a check failed (a file, `report.json`) and why, in one sentence.
pub type Failure = (String, String);

fn fail<T>(message: impl Into<String>) -> Result<T, Failure> {
    Err(("report.json".to_string(), message.into()))
}

fn parse(text: &str, place: &str) -> Result<Node, Failure> {
    let p = json::parse(text);
    match (p.node, p.issues.first()) {
        (Some(n), None) => Ok(n),
        (_, Some(i)) => Err((place.to_string(), format!("not JSON: {}", i.message))),
        (None, None) => Err((place.to_string(), "not JSON".to_string())),
    }
}

fn str_of<'a>(n: Option<&'a Node>) -> Option<&'a str> {
    n.and_then(Node::as_str)
}

fn u64_of(n: Option<&Node>) -> Option<u64> {
    match n.map(|n| &n.value) {
        Some(Value::Num(x)) => x.as_u64(),
        _ => None,
    }
}

/// The report against the decisions recorded (`records`: each event line, raw or redacted, and its
/// decision line), for the document `document`: refusals, deviations, approvals, outcome and terminal.
pub fn check_report(document: &[u8], records: &[(String, String)], report_text: &str) -> Result<(), Failure> {
    let mut decisions = Decisions::default();
    for (e, d) in records {
        decisions.push(e, d);
    }
    decisions.check(document, report_text)
}

/// What [`check_report`] holds a report against, gathered record by record as `events.ndjson` streams
/// past (verify): the first decision's refusals, the first halt, the deviations and the approval events
/// the decisions record (no more than the report itself lists), not the records.
#[derive(Default)]
pub struct Decisions {
    records: u64,
    /// The first decision line that is not JSON.
    failure: Option<Failure>,
    refusals: Option<Node>,
    /// The decision that ended the run: the first halt (any later one answers `halted`).
    end: Option<Node>,
    deviations: Vec<(u64, String)>,
    approvals: Vec<Node>,
}

impl Decisions {
    /// The next record: its event line, raw or redacted, and its decision line.
    pub fn push(&mut self, event_line: &str, decision_line: &str) {
        self.records += 1;
        if self.failure.is_some() {
            return;
        }
        let place = format!("events.ndjson:{}", self.records);
        // An event line that is not JSON is a malformed event: only its decision matters here.
        let e = parse(event_line, &place).unwrap_or_else(|_| Node::new(Value::Null));
        let d = match parse(decision_line, &place) {
            Ok(d) => d,
            Err(f) => {
                self.failure = Some(f);
                return;
            }
        };
        if self.records == 1 {
            self.refusals = d.get("refusals").cloned();
        }
        if let (Some(q), Some(c)) = (u64_of(d.get("seq")), str_of(d.get("deviation"))) {
            self.deviations.push((q, c.to_string()));
        }
        // Every approval event the module judged (one that halts, on a run already over or with a
        // malformed `at`, is never judged), as the report lists it.
        if str_of(e.get("type")) == Some("approval") && str_of(d.get("decision")) != Some("halt") {
            use crate::jcs::{b, obj};
            let null = || Node::new(Value::Null);
            self.approvals.push(obj(vec![
                ("accepted", b(str_of(d.get("decision")) == Some("allow"))),
                ("approver", e.get("approver").cloned().unwrap_or_else(null)),
                ("call_sha256", e.get("call_sha256").cloned().unwrap_or_else(null)),
                ("granted", e.get("granted").cloned().unwrap_or_else(null)),
                ("seq", d.get("seq").cloned().unwrap_or_else(null)),
                ("step", e.get("step").cloned().unwrap_or_else(null)),
            ]));
        }
        if self.end.is_none() && str_of(d.get("decision")) == Some("halt") {
            self.end = Some(d);
        }
    }

    /// [`check_report`] of `report_text` against the records pushed.
    pub fn check(self, document: &[u8], report_text: &str) -> Result<(), Failure> {
        let report = parse(report_text, "report.json")?;
        if let Some(f) = self.failure {
            return Err(f);
        }
        let get = |key: &str| report.get(key);
        if u64_of(get("events")) != Some(self.records) {
            return fail("`events` is not the number of recorded events");
        }

        let refusals = self.refusals.unwrap_or_else(|| Node::new(Value::Arr(Vec::new())));
        if !get("refusals").is_some_and(|r| json_eq(r, &refusals)) {
            return fail(format!("`refusals` is not the start's decision's {}", crate::jcs::to_string(&refusals)));
        }
        let end = self.end.as_ref();
        let end_seq = end.and_then(|d| u64_of(d.get("seq")));
        let ended_normally = end.is_some_and(|d| str_of(d.get("reason")) == Some("run-ended"));

        let mut claimed: Vec<(u64, String)> = match get("deviations").map(|d| &d.value) {
            Some(Value::Arr(items)) => {
                items.iter().map(|d| (u64_of(d.get("seq")).unwrap_or(u64::MAX), str_of(d.get("class")).unwrap_or("").to_string())).collect()
            }
            _ => return fail("`deviations` is not a list"),
        };
        let mut decided = self.deviations;
        // `terminal-not-reached` is judged at the end and recorded without a decision of its own.
        decided.extend(claimed.iter().filter(|(q, c)| c == "terminal-not-reached" && Some(*q) == end_seq && ended_normally).cloned());
        crate::sort::sort(&mut claimed);
        crate::sort::sort(&mut decided);
        if claimed != decided {
            let missing: Vec<String> = decided.iter().filter(|x| !claimed.contains(x)).map(|(q, c)| format!("{c} at {q}")).collect();
            let extra: Vec<String> = claimed.iter().filter(|x| !decided.contains(x)).map(|(q, c)| format!("{c} at {q}")).collect();
            return fail(format!(
                "`deviations` is not what the decisions record (missing: {}; not decided: {})",
                if missing.is_empty() { "none".to_string() } else { missing.join(", ") },
                if extra.is_empty() { "none".to_string() } else { extra.join(", ") }
            ));
        }

        if !get("approvals").is_some_and(|a| json_eq(a, &Node::new(Value::Arr(self.approvals)))) {
            return fail("`approvals` is not the recorded approval events and their decisions");
        }

        let Some(end) = end else {
            return fail("the recorded decisions never end the run, yet the report has an outcome");
        };
        let reason = str_of(end.get("reason")).unwrap_or("");
        let outcome = str_of(get("outcome")).unwrap_or("");
        let allowed: &[&str] = match reason {
            _ if end_seq == Some(0) => &["refused"],
            "run-ended" => &["completed", "incomplete", "failed"],
            "budget-exhausted" => &["aborted"],
            _ => &["failed"],
        };
        if !allowed.contains(&outcome) {
            return fail(format!("`outcome` is {outcome}, but the run was ended by a `halt` with reason {reason}, which gives {}", allowed.join(" or ")));
        }
        let analysis = crate::doc::analysis_of(document);
        let ended_at = str_of(end.get("step")).filter(|st| analysis.doc.terminals.iter().any(|t| t == st));
        if str_of(get("terminal")) != ended_at {
            return fail(format!(
                "`terminal` is {}, but the run ended at {}",
                get("terminal").map(crate::jcs::to_string).unwrap_or_else(|| "missing".into()),
                end.get("step").map(crate::jcs::to_string).unwrap_or_else(|| "null".into())
            ));
        }
        if outcome == "completed" && claimed.iter().any(|(_, c)| c == "terminal-not-reached") {
            return fail("`outcome` is completed, but the run ended with terminal-not-reached");
        }
        Ok(())
    }
}
