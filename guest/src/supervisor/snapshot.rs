//! The session snapshot `runbook-session-snapshot/v1`: a session's whole state as RFC 8785 canonical JSON,
//! so that one process can stop after any event and another go on from there with the same document bytes
//! (a tool-call hook runs one process per call). [`Session::restore`] analyzes the document again, refuses
//! anything the module would not have written (naming the JSON Pointer of the first bad field), and gives a
//! session that answers every later event, and reports, byte for byte as the one the snapshot was taken of.
//!
//! Every key is always present (null, empty, false or `"0"` when there is nothing; a snapshot before `start`
//! is exactly a new session's); lists of steps and checkpoints have
//! one entry per step or checkpoint of the document, in document order, each naming its id:
//!
//! ```text
//! schema             "runbook-session-snapshot/v1"
//! document_sha256    hex SHA-256 of the document's bytes (restore refuses other bytes)
//! phase              "new" (before `start`), "running", "over" (halted or ended)
//! claim              null before `start`, else the claim as the `start` event gave it: {run_id, profile,
//!                    allowlist, risk_ceiling, coverage ("complete" or the sorted list of what the adapter
//!                    cannot see), agent, available (null or a list)}
//! refusals           sorted refusal codes of a refused `start`
//! outcome            null until the run is over, then its outcome
//! position           null (no step: before `start`, or a manifest without steps), {"step": id} or
//!                    {"terminal": name}
//! steps              [{id, visits, judgement (null, "pass", "fail", "unevaluable": the last one),
//!                    budget_used (retries taken from the step's `retry` budget)}]
//! gate_open          whether a step-wide approval opened the current visit's gate
//! call_approvals     hashes of the call-bound approvals of this visit not yet used, in the order granted
//! approval_requests  the approval ledger (docs/spec/run.md#approvals-bound-to-a-call): the requests of this visit no answer consumed yet,
//!                    oldest first: {seq (of the `needs-approval` decision), call_sha256}
//! awaiting_verdict   whether the current step awaits a human's verdict
//! pending            the allowed calls without a result yet, oldest first: {call_id, tool, arguments,
//!                    scope (null, or the {step, visit} that allowed it), capability (null, or the name
//!                    of the capability it was matched to: names are unique in a document a run admits)}
//! checkpoints        [{id, status ("pending", "satisfied", "timed-out"), seq (null while pending)}]
//! final_output       whether `final_output` was seen
//! deviations         as in the report: [{seq, class, step, tool}]
//! approvals          as in the report: [{seq, step, call_sha256, approver, granted, accepted}]
//! events             how many events the session has answered (the next event's seq)
//! start_at, last_at  the `at` of the `start` event and of the latest event accepted, as decimal strings
//! ```
//!
//! Three fields are strings where a number would read more naturally, because restoring must be exact and
//! an RFC 8785 number is a double: `start_at` and `last_at` (an `at` is any u64; doubles are exact only to
//! 2^53), and each pending call's `arguments` (asserts compare the arguments' numbers as exact decimals: the
//! string is their canonical JSON, except that a number a double cannot hold is written exactly). Every
//! other number is a count, at most 2^53 - 1.

use super::{ApprovalRec, CheckpointStatus, DeviationRec, Outcome, PendingCall, Phase, Position, Session};
use crate::doc::{self, Profile, Risk};
use crate::event::{Claim, Coverage, Deviation, Refusal};
use crate::jcs;
use crate::json;
use crate::predicate::Truth;
use crate::value::{escape_token, Member, Node, Value};
use std::fmt::Display;
use std::rc::Rc;

pub const SCHEMA: &str = "runbook-session-snapshot/v1";

/// The largest count a snapshot holds: past 2^53 - 1 an RFC 8785 number is no longer exact.
const MAX_COUNT: u64 = (1 << 53) - 1;

const TOP: &[&str] = &[
    "schema",
    "document_sha256",
    "phase",
    "claim",
    "refusals",
    "outcome",
    "position",
    "steps",
    "gate_open",
    "call_approvals",
    "awaiting_verdict",
    "pending",
    "checkpoints",
    "final_output",
    "deviations",
    "approval_requests",
    "approvals",
    "events",
    "start_at",
    "last_at",
];

const TRUTHS: [Truth; 3] = [Truth::Pass, Truth::Fail, Truth::Unevaluable];
const PHASES: [(&str, Phase); 3] = [("new", Phase::New), ("running", Phase::Running), ("over", Phase::Over)];
const CHECKPOINT_STATUS: [(&str, CheckpointStatus); 3] =
    [("pending", CheckpointStatus::Pending), ("satisfied", CheckpointStatus::Satisfied), ("timed-out", CheckpointStatus::TimedOut)];

impl Session {
    /// The session's whole state as canonical JSON (`runbook-session-snapshot/v1`, see the module docs).
    /// [`Session::restore`] with the same document bytes gives a session that answers exactly as this one.
    pub fn snapshot(&self) -> String {
        // Written directly, keys in RFC 8785 order, rather than through a tree: a long run's snapshot holds
        // thousands of records, and a hook process writes one every time.
        let a = &self.a;
        let mut w = W(String::with_capacity(1024 + 96 * (self.deviations.len() + self.approvals.len() + self.pending.len() + a.doc.steps.len())));
        let mut o = w.obj();
        o.key("approval_requests").list(&self.requests, |w, (seq, h)| {
            let mut o = w.obj();
            o.key("call_sha256").str(h);
            o.key("seq").count(*seq);
            o.end();
        });
        o.key("approvals").list(&self.approvals, |w, r| {
            let mut o = w.obj();
            o.key("accepted").bool(r.accepted);
            o.key("approver").str(&r.approver);
            o.key("call_sha256").opt_str(r.call_sha256.as_deref());
            o.key("granted").bool(r.granted);
            o.key("seq").count(r.seq);
            o.key("step").opt_str(r.step.as_deref());
            o.end();
        });
        o.key("awaiting_verdict").bool(self.awaiting_verdict);
        o.key("call_approvals").list(&self.call_approvals, |w, h| w.str(h));
        o.key("checkpoints").list(&a.doc.checkpoints.iter().zip(&self.checkpoints).collect::<Vec<_>>(), |w, (c, (st, seq))| {
            let mut o = w.obj();
            o.key("id").str(&c.id);
            o.key("seq").opt_count(*seq);
            o.key("status").str(CHECKPOINT_STATUS.iter().find(|(_, x)| x == st).map(|(name, _)| *name).unwrap_or("pending"));
            o.end();
        });
        match &self.claim {
            None => o.key("claim").null(),
            Some(c) => {
                let mut co = o.key("claim").obj();
                co.key("agent").str(&c.agent);
                co.key("allowlist").list(&c.allowlist, |w, x| w.str(x));
                match &c.available {
                    None => co.key("available").null(),
                    Some(v) => co.key("available").list(v, |w, x| w.str(x)),
                }
                match &c.coverage {
                    Coverage::Complete => co.key("coverage").str("complete"),
                    Coverage::Blind(v) => co.key("coverage").list(v, |w, x| w.str(x)),
                }
                co.key("profile").str(c.profile.as_str());
                co.key("risk_ceiling").str(c.risk_ceiling.as_str());
                co.key("run_id").str(&c.run_id);
                co.end();
            }
        }
        o.key("deviations").list(&self.deviations, |w, d| {
            let mut o = w.obj();
            o.key("class").str(d.class.as_str());
            o.key("seq").count(d.seq);
            o.key("step").opt_str(d.step.as_deref());
            o.key("tool").opt_str(d.tool.as_deref());
            o.end();
        });
        o.key("document_sha256").str(&a.sha256);
        o.key("events").count(self.events);
        o.key("final_output").bool(self.final_output);
        o.key("gate_open").bool(self.gate_open);
        o.key("last_at").time(self.last_at);
        o.key("outcome").opt_str(self.outcome.map(Outcome::as_str));
        o.key("pending").list(&self.pending, |w, p| {
            let mut o = w.obj();
            o.key("arguments").str(&jcs::to_string_exact(&p.arguments));
            o.key("call_id").opt_str(p.call_id.as_deref());
            o.key("capability").opt_str(p.cap.map(|c| a.doc.capabilities[c].name.as_str()));
            match p.scope {
                None => o.key("scope").null(),
                Some((i, visit)) => {
                    let mut so = o.key("scope").obj();
                    so.key("step").str(&a.doc.steps[i].id);
                    so.key("visit").count(visit);
                    so.end();
                }
            }
            o.key("tool").str(&p.tool);
            o.end();
        });
        o.key("phase").str(PHASES.iter().find(|(_, p)| *p == self.phase).map(|(name, _)| *name).unwrap_or("new"));
        match &self.pos {
            Position::Open => o.key("position").null(),
            Position::Step(i) => {
                let mut po = o.key("position").obj();
                po.key("step").str(&a.doc.steps[*i].id);
                po.end();
            }
            Position::Terminal(t) => {
                let mut po = o.key("position").obj();
                po.key("terminal").str(t);
                po.end();
            }
        }
        o.key("refusals").list(&self.refusals, |w, r| w.str(r.as_str()));
        o.key("schema").str(SCHEMA);
        o.key("start_at").time(self.start_at);
        o.key("steps").list(&a.doc.steps.iter().enumerate().collect::<Vec<_>>(), |w, (i, st)| {
            let mut o = w.obj();
            o.key("budget_used").count(self.budget_used[*i]);
            o.key("id").str(&st.id);
            o.key("judgement").opt_str(self.judgements[*i].map(Truth::as_str));
            o.key("visits").count(self.visits[*i]);
            o.end();
        });
        o.end();
        w.0
    }

    /// A session of `document` in the state a [`Session::snapshot`] describes. Fails closed, naming the
    /// snapshot's field (a JSON Pointer): on text that is not JSON, another schema, a snapshot of other
    /// document bytes, a missing, unknown or mistyped field, lists that do not match the document's steps
    /// or checkpoints, a step, terminal or capability the document does not have, a number out of range,
    /// and some states no run reaches (an outcome before the run is over, a `seq` past the events, ...).
    /// It checks form, not history: a snapshot whose position, profile or gate was edited consistently
    /// restores into a state no recorded run reaches. A host restores only a snapshot it kept out of the
    /// agent's reach; to resume from evidence the agent could write, it replays the events.
    pub fn restore(document: &[u8], snapshot: &str) -> Result<Session, String> {
        let parsed = json::parse(snapshot);
        let root = match (parsed.node, parsed.issues.first()) {
            (Some(node), None) => node,
            (_, Some(i)) if i.code == "duplicate-key" => return Err(format!("snapshot {}: {}", i.pointer, i.message)),
            (_, Some(i)) => return Err(format!("snapshot: not JSON: {} at line {}, column {}", i.message, i.pos.line, i.pos.column)),
            (None, None) => return Err("snapshot: not JSON".into()),
        };
        let top = V::root(&root).obj(TOP)?;
        let schema = top.get("schema");
        if schema.str()? != SCHEMA {
            return Err(schema.err(format!("expected `{SCHEMA}`, found `{}`", schema.str()?)));
        }
        let a = doc::analysis_of(document);
        let sha = top.get("document_sha256");
        if sha.str()? != a.sha256 {
            return Err(sha.err(format!("the snapshot is of the document with sha256 {}, not of this one ({})", sha.str()?, a.sha256)));
        }
        let mut me = Session::from_analysis(a);
        let phase = top.get("phase");
        me.phase = PHASES
            .iter()
            .find(|(name, _)| *name == phase.str().unwrap_or(""))
            .map(|(_, p)| *p)
            .ok_or_else(|| phase.err("must be `new`, `running` or `over`"))?;
        // Before `start` a session is exactly a new one: kept while `me` still is one, to compare at the end.
        let fresh = (me.phase == Phase::New).then(|| me.snapshot());
        me.events = top.get("events").count()?;
        let events = me.events;
        let seq = |v: &V| -> Result<u64, String> {
            let x = v.count()?;
            if x >= events {
                return Err(v.err(format!("seq {x} is not below the {events} events answered")));
            }
            Ok(x)
        };

        me.claim = top.get("claim").nullable(|v| claim(&v))?;
        let refusals = top.get("refusals");
        me.refusals = refusals.list()?.iter().map(|r| r.pick(&Refusal::ALL, |x| x.as_str(), "a refusal code")).collect::<Result<_, String>>()?;
        if me.refusals.windows(2).any(|w| w[0] >= w[1]) {
            return Err(refusals.err("must be sorted, without duplicates"));
        }
        me.outcome = top.get("outcome").nullable(|v| v.pick(&Outcome::ALL, |x| x.as_str(), "an outcome"))?;

        let position = top.get("position");
        me.pos = match &position.node.value {
            Value::Null => Position::Open,
            Value::Obj(members) => {
                if let Some(m) = members.iter().find(|m| m.key != "step" && m.key != "terminal") {
                    return Err(position.child(&m.key).err("unknown field"));
                }
                if members.len() != 1 {
                    return Err(position.err("must name one step or one terminal"));
                }
                let v = position.child(&members[0].key);
                let name = v.str()?;
                if members[0].key == "step" {
                    Position::Step(me.a.step_index(name).ok_or_else(|| v.err(format!("the document has no step `{name}`")))?)
                } else if me.a.is_terminal(name) {
                    Position::Terminal(name.to_string())
                } else {
                    return Err(v.err(format!("the document has no terminal `{name}`")));
                }
            }
            _ => return Err(position.err(format!("must be null or an object, found {}", position.node.type_name()))),
        };

        let steps = top.get("steps");
        let items = steps.list()?;
        if items.len() != me.a.doc.steps.len() {
            return Err(steps.err(format!("the document has {} steps, the snapshot {}", me.a.doc.steps.len(), items.len())));
        }
        for (i, item) in items.iter().enumerate() {
            let o = item.obj(&["id", "visits", "judgement", "budget_used"])?;
            let st = &me.a.doc.steps[i];
            let id = o.get("id");
            if id.str()? != st.id {
                return Err(id.err(format!("step {i} of the document is `{}`, not `{}`", st.id, id.str()?)));
            }
            let visits = o.get("visits");
            me.visits[i] = visits.count()?;
            if me.visits[i] > events {
                return Err(visits.err(format!("{} visits in {events} events", me.visits[i])));
            }
            me.judgements[i] = o.get("judgement").nullable(|v| v.pick(&TRUTHS, |x| x.as_str(), "a judgement"))?;
            let used = o.get("budget_used");
            let max = st.retry.as_ref().map(|r| r.max).unwrap_or(0);
            me.budget_used[i] = used.count()?;
            if me.budget_used[i] > max {
                return Err(used.err(format!("{} retries used of a budget of {max}", me.budget_used[i])));
            }
        }

        me.gate_open = top.get("gate_open").bool()?;
        me.call_approvals = top.get("call_approvals").list()?.iter().map(sha256).collect::<Result<_, String>>()?;
        me.awaiting_verdict = top.get("awaiting_verdict").bool()?;
        me.pending = top.get("pending").list()?.iter().map(|v| pending(&me, v)).collect::<Result<_, String>>()?;

        let checkpoints = top.get("checkpoints");
        let items = checkpoints.list()?;
        if items.len() != me.a.doc.checkpoints.len() {
            return Err(checkpoints.err(format!("the document has {} checkpoints, the snapshot {}", me.a.doc.checkpoints.len(), items.len())));
        }
        for (i, item) in items.iter().enumerate() {
            let o = item.obj(&["id", "status", "seq"])?;
            let id = o.get("id");
            if id.str()? != me.a.doc.checkpoints[i].id {
                return Err(id.err(format!("checkpoint {i} of the document is `{}`, not `{}`", me.a.doc.checkpoints[i].id, id.str()?)));
            }
            let status = o.get("status");
            let st = CHECKPOINT_STATUS
                .iter()
                .find(|(name, _)| *name == status.str().unwrap_or(""))
                .map(|(_, x)| *x)
                .ok_or_else(|| status.err("must be `pending`, `satisfied` or `timed-out`"))?;
            let at = o.get("seq").nullable(|v| seq(&v))?;
            if (st == CheckpointStatus::Pending) != at.is_none() {
                return Err(o.get("seq").err("is null exactly while the checkpoint is pending"));
            }
            me.checkpoints[i] = (st, at);
        }

        me.final_output = top.get("final_output").bool()?;
        me.deviations = top
            .get("deviations")
            .list()?
            .iter()
            .map(|v| -> Result<DeviationRec, String> {
                let o = v.obj(&["seq", "class", "step", "tool"])?;
                let step = o.get("step");
                let name = step.opt_str()?;
                if let Some(x) = name {
                    if me.a.step_index(x).is_none() && !me.a.is_terminal(x) {
                        return Err(step.err(format!("the document has no step or terminal `{x}`")));
                    }
                }
                Ok(DeviationRec {
                    seq: seq(&o.get("seq"))?,
                    class: o.get("class").pick(&Deviation::ALL, |x| x.as_str(), "a deviation class")?,
                    step: name.map(str::to_string),
                    tool: o.get("tool").opt_str()?.map(str::to_string),
                })
            })
            .collect::<Result<_, String>>()?;
        me.requests = top
            .get("approval_requests")
            .list()?
            .iter()
            .map(|v| -> Result<(u64, String), String> {
                let o = v.obj(&["seq", "call_sha256"])?;
                Ok((seq(&o.get("seq"))?, sha256(&o.get("call_sha256"))?))
            })
            .collect::<Result<_, String>>()?;
        me.approvals = top
            .get("approvals")
            .list()?
            .iter()
            .map(|v| -> Result<ApprovalRec, String> {
                let o = v.obj(&["seq", "step", "call_sha256", "approver", "granted", "accepted"])?;
                Ok(ApprovalRec {
                    seq: seq(&o.get("seq"))?,
                    step: o.get("step").opt_str()?.map(str::to_string),
                    call_sha256: o.get("call_sha256").nullable(|v| sha256(&v))?,
                    approver: o.get("approver").str()?.to_string(),
                    granted: o.get("granted").bool()?,
                    accepted: o.get("accepted").bool()?,
                })
            })
            .collect::<Result<_, String>>()?;
        me.start_at = top.get("start_at").time()?;
        me.last_at = top.get("last_at").time()?;
        if me.last_at < me.start_at {
            return Err(top.get("last_at").err("is before `start_at`"));
        }

        // States no run reaches: refused here rather than answered from.
        if me.outcome.is_some() != (me.phase == Phase::Over) {
            return Err(top.get("outcome").err("is null exactly while the run is not over"));
        }
        if me.phase == Phase::Running && me.claim.is_none() {
            return Err(top.get("claim").err("a running session has its `start` claim"));
        }
        if me.phase == Phase::Running && !me.refusals.is_empty() {
            return Err(refusals.err("a running session was not refused"));
        }
        if let Some(fresh) = fresh {
            let fresh = json::parse(&fresh).node.expect("a snapshot is JSON");
            let mine = json::parse(&me.snapshot()).node.expect("a snapshot is JSON");
            if let (Value::Obj(f), Value::Obj(m)) = (&fresh.value, &mine.value) {
                for (x, y) in f.iter().zip(m) {
                    if jcs::to_string(&x.value) != jcs::to_string(&y.value) {
                        return Err(top.get(&x.key).err("differs from a new session's, and the phase is `new`"));
                    }
                }
            }
        }
        // The snapshot must be byte for byte the one the module writes for this state: a re-serialized
        // text (keys in another order, spaces, escapes) is refused, so one state has exactly one snapshot.
        let again = me.snapshot();
        if again != snapshot {
            let at = again.bytes().zip(snapshot.bytes()).position(|(x, y)| x != y).unwrap_or(again.len().min(snapshot.len()));
            return Err(format!("snapshot: not in the module's canonical form (it differs from what the module writes for this state at byte {at})"));
        }
        Ok(me)
    }
}

fn claim(v: &V) -> Result<Claim, String> {
    let o = v.obj(&["run_id", "profile", "allowlist", "risk_ceiling", "coverage", "agent", "available"])?;
    let profile = o.get("profile");
    let risk = o.get("risk_ceiling");
    let coverage = o.get("coverage");
    Ok(Claim {
        run_id: o.get("run_id").str()?.to_string(),
        profile: Profile::parse(profile.str()?).ok_or_else(|| profile.err("must be `R0`, `R1` or `R2`"))?,
        allowlist: o.get("allowlist").strings()?,
        risk_ceiling: Risk::parse(risk.str()?).ok_or_else(|| risk.err("must be a risk level"))?,
        coverage: match &coverage.node.value {
            Value::Str(x) if x == "complete" => Coverage::Complete,
            Value::Arr(_) => {
                let blind = coverage.strings()?;
                if blind.is_empty() || blind.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(coverage.err("must be `complete` or a sorted list, without duplicates, of what the adapter cannot see"));
                }
                Coverage::Blind(blind)
            }
            _ => return Err(coverage.err("must be `complete` or a list of what the adapter cannot see")),
        },
        agent: o.get("agent").str()?.to_string(),
        available: o.get("available").nullable(|v| v.strings())?,
    })
}

fn pending(me: &Session, v: &V) -> Result<PendingCall, String> {
    let o = v.obj(&["call_id", "tool", "arguments", "scope", "capability"])?;
    let tool = o.get("tool").str()?.to_string();
    let args = o.get("arguments");
    let parsed = json::parse(args.str()?);
    let arguments = match (parsed.node, parsed.issues.first()) {
        (Some(node), None) => node,
        (_, Some(i)) => return Err(args.err(format!("not JSON: {} at column {}", i.message, i.pos.column))),
        (None, None) => return Err(args.err("not JSON")),
    };
    let scope = o.get("scope").nullable(|v| {
        let so = v.obj(&["step", "visit"])?;
        let step = so.get("step");
        let name = step.str()?;
        let i = me.a.step_index(name).ok_or_else(|| step.err(format!("the document has no step `{name}`")))?;
        let visit = so.get("visit");
        let k = visit.count()?;
        if k == 0 || k > me.visits[i] {
            return Err(visit.err(format!("step `{name}` has had {} visits, so no visit {k}", me.visits[i])));
        }
        Ok((i, k))
    })?;
    let capability = o.get("capability");
    let cap = capability.nullable(|v| {
        let name = v.str()?;
        let mut found = me.a.doc.capabilities.iter().enumerate().filter(|(_, c)| c.name == name);
        let (ci, c) = found.next().ok_or_else(|| v.err(format!("the document has no capability `{name}`")))?;
        if found.next().is_some() {
            return Err(v.err(format!("the document declares `{name}` more than once")));
        }
        if c.tool != tool {
            return Err(v.err(format!("capability `{name}` is of tool `{}`, not `{tool}`", c.tool)));
        }
        Ok(ci)
    })?;
    if let Some((i, _)) = scope {
        match cap {
            Some(ci) if me.a.step_caps[i].contains(&ci) => {}
            _ => return Err(capability.err(format!("a call in the scope of step `{}` is one of its capabilities", me.a.doc.steps[i].id))),
        }
    }
    Ok(PendingCall { call_id: o.get("call_id").opt_str()?.map(str::to_string), tool, arguments, scope, cap })
}

fn sha256(v: &V) -> Result<String, String> {
    let h = v.str()?;
    if h.len() != 64 || !h.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        return Err(v.err("must be 64 lowercase hex digits"));
    }
    Ok(h.to_string())
}

/// A node of the snapshot and where it is, for messages that name the field. The JSON Pointer is made
/// only for a message, or once per object or list for its members: a long run's snapshot has thousands.
struct V<'a> {
    node: &'a Node,
    parent: Rc<str>,
    seg: Seg<'a>,
}

#[derive(Clone, Copy)]
enum Seg<'a> {
    Here,
    Key(&'a str),
    Index(usize),
}

/// An object whose keys have been checked against the expected set.
struct Obj<'a> {
    ptr: Rc<str>,
    members: &'a [Member],
}

impl<'a> Obj<'a> {
    /// A member known to be present (checked by [`V::obj`]).
    fn get(&self, key: &str) -> V<'a> {
        let m = self.members.iter().find(|m| m.key == key).expect("checked by V::obj");
        V { node: &m.value, parent: self.ptr.clone(), seg: Seg::Key(&m.key) }
    }
}

impl<'a> V<'a> {
    fn root(node: &'a Node) -> V<'a> {
        V { node, parent: Rc::from(""), seg: Seg::Here }
    }

    fn ptr(&self) -> String {
        match self.seg {
            Seg::Here => self.parent.to_string(),
            Seg::Key(k) => format!("{}/{}", self.parent, escape_token(k)),
            Seg::Index(i) => format!("{}/{i}", self.parent),
        }
    }

    fn err(&self, what: impl Display) -> String {
        let ptr = self.ptr();
        if ptr.is_empty() {
            format!("snapshot: {what}")
        } else {
            format!("snapshot {ptr}: {what}")
        }
    }

    /// A member of this object that is there.
    fn child(&self, key: &str) -> V<'a> {
        match &self.node.value {
            Value::Obj(members) => match members.iter().find(|m| m.key == key) {
                Some(m) => V { node: &m.value, parent: Rc::from(self.ptr()), seg: Seg::Key(&m.key) },
                None => V { node: self.node, parent: self.parent.clone(), seg: self.seg },
            },
            _ => V { node: self.node, parent: self.parent.clone(), seg: self.seg },
        }
    }

    fn wrong(&self, want: &str) -> String {
        self.err(format!("must be {want}, found {}", self.node.type_name()))
    }

    /// An object with exactly the keys `keys`.
    fn obj(&self, keys: &[&str]) -> Result<Obj<'a>, String> {
        let Value::Obj(members) = &self.node.value else { return Err(self.wrong("an object")) };
        if let Some(m) = members.iter().find(|m| !keys.contains(&m.key.as_str())) {
            return Err(self.child(&m.key).err("unknown field"));
        }
        if let Some(k) = keys.iter().find(|k| !members.iter().any(|m| m.key == **k)) {
            return Err(format!("snapshot {}/{}: missing", self.ptr(), escape_token(k)));
        }
        Ok(Obj { ptr: Rc::from(self.ptr()), members })
    }

    fn str(&self) -> Result<&'a str, String> {
        self.node.as_str().ok_or_else(|| self.wrong("a string"))
    }

    fn opt_str(&self) -> Result<Option<&'a str>, String> {
        self.nullable(|v| v.str())
    }

    fn bool(&self) -> Result<bool, String> {
        match self.node.value {
            Value::Bool(x) => Ok(x),
            _ => Err(self.wrong("true or false")),
        }
    }

    /// A whole number from 0 to [`MAX_COUNT`].
    fn count(&self) -> Result<u64, String> {
        match &self.node.value {
            Value::Num(x) => {
                x.as_u64().filter(|c| *c <= MAX_COUNT).ok_or_else(|| self.err(format!("must be a whole number from 0 to {MAX_COUNT}, found {}", x.canonical())))
            }
            _ => Err(self.wrong("a whole number")),
        }
    }

    /// A u64 as a decimal string, without sign or leading zeros.
    fn time(&self) -> Result<u64, String> {
        let t = self.str()?;
        let plain = !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit()) && (t == "0" || !t.starts_with('0'));
        plain
            .then(|| t.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| self.err(format!("must be a whole number of milliseconds from 0 to {} as a decimal string, found `{t}`", u64::MAX)))
    }

    fn list(&self) -> Result<Vec<V<'a>>, String> {
        match &self.node.value {
            Value::Arr(items) => {
                let parent: Rc<str> = Rc::from(self.ptr());
                Ok(items.iter().enumerate().map(|(i, node)| V { node, parent: parent.clone(), seg: Seg::Index(i) }).collect())
            }
            _ => Err(self.wrong("a list")),
        }
    }

    fn strings(&self) -> Result<Vec<String>, String> {
        self.list()?.iter().map(|v| v.str().map(str::to_string)).collect()
    }

    fn nullable<T>(&self, f: impl FnOnce(V<'a>) -> Result<T, String>) -> Result<Option<T>, String> {
        match self.node.value {
            Value::Null => Ok(None),
            _ => f(V { node: self.node, parent: self.parent.clone(), seg: self.seg }).map(Some),
        }
    }

    /// One of `all`, by its code.
    fn pick<T: Copy>(&self, all: &[T], name: impl Fn(T) -> &'static str, what: &str) -> Result<T, String> {
        let code = self.str()?;
        all.iter().copied().find(|x| name(*x) == code).ok_or_else(|| self.err(format!("`{code}` is not {what}")))
    }
}

/// A canonical JSON writer for the snapshot's fixed shape: the caller writes each object's keys in RFC 8785
/// order (all keys here are ASCII, where that is byte order).
struct W(String);

/// An object being written; [`ObjW::key`] before each value, [`ObjW::end`] after the last.
struct ObjW<'w> {
    w: &'w mut W,
    last: &'static str,
}

impl W {
    fn obj(&mut self) -> ObjW<'_> {
        self.0.push('{');
        ObjW { w: self, last: "" }
    }

    fn null(&mut self) {
        self.0.push_str("null");
    }

    fn bool(&mut self, v: bool) {
        self.0.push_str(if v { "true" } else { "false" });
    }

    fn str(&mut self, v: &str) {
        jcs::write_str(v, &mut self.0);
    }

    fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(v) => self.str(v),
            None => self.null(),
        }
    }

    /// A count: an integer below 2^53 is its own RFC 8785 text.
    fn count(&mut self, v: u64) {
        use std::fmt::Write;
        let _ = write!(self.0, "{v}");
    }

    fn opt_count(&mut self, v: Option<u64>) {
        match v {
            Some(v) => self.count(v),
            None => self.null(),
        }
    }

    fn time(&mut self, v: u64) {
        use std::fmt::Write;
        let _ = write!(self.0, "\"{v}\"");
    }

    fn list<T>(&mut self, items: &[T], mut each: impl FnMut(&mut W, &T)) {
        self.0.push('[');
        for (i, x) in items.iter().enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            each(self, x);
        }
        self.0.push(']');
    }
}

impl ObjW<'_> {
    fn key(&mut self, k: &'static str) -> &mut W {
        debug_assert!(self.last < k, "snapshot keys out of order: `{}` after `{}`", k, self.last);
        if !self.last.is_empty() {
            self.w.0.push(',');
        }
        self.last = k;
        self.w.0.push('"');
        self.w.0.push_str(k);
        self.w.0.push_str("\":");
        self.w
    }

    fn end(self) {
        self.w.0.push('}');
    }
}
