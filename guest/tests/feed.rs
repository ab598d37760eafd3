//! One call per event: `feed` (typed) and `feed_line` (wire) decide exactly as `handle_line`, return the
//! canonical event line, the decision line and the chain link of docs/spec/bundle.md#the-hash-chain, and
//! leave the session in the same state (snapshot, report); `state` agrees with `status`; `next_deadline` is
//! the first `at` that fails a pending checkpoint.

use runbook_policy::testgen::{self, Rng};
use runbook_policy::{chain, codes, event, jcs, json, RunPhase, Session};
use std::path::Path;

fn sha256_hex(bytes: &[u8]) -> String {
    runbook_policy::doc::sha256_hex(bytes)
}

fn cases() -> Vec<(Vec<u8>, Vec<String>)> {
    let mut out = Vec::new();
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for d in std::fs::read_dir(&ex).unwrap() {
        let d = d.unwrap().path();
        if !d.is_dir() {
            continue;
        }
        let doc = ["runbook.yaml", "runbook.json"].iter().map(|f| d.join(f)).find(|p| p.exists()).unwrap();
        for f in std::fs::read_dir(&d).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "ndjson") {
                let lines = std::fs::read_to_string(&f).unwrap().lines().map(str::to_string).collect();
                out.push((std::fs::read(&doc).unwrap(), lines));
            }
        }
    }
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let (doc, shape) = testgen::document(&mut rng, 10);
        let events = testgen::events(&mut rng, &shape);
        out.push((doc.into_bytes(), events));
    }
    assert!(out.len() > 300);
    out
}

/// An independent reading of 9.22 from its text: replace the top-level `arguments` and `result` of the
/// canonical event by the hex sha256 of their canonical text, then hash prev || E || D; a line that is not
/// a JSON object with a string `type` enters as `{"malformed": <the line>}`.
fn link_by_the_text(prev: &str, event_line: &str, decision_line: &str) -> String {
    let parsed = json::parse(event_line);
    let is_event = parsed.issues.is_empty()
        && matches!(parsed.node.as_ref().map(|n| &n.value), Some(runbook_policy::value::Value::Obj(ms))
            if ms.iter().any(|m| m.key == "type" && matches!(m.value.value, runbook_policy::value::Value::Str(_))));
    let e = match runbook_policy::canonicalize(event_line) {
        Ok(canon) if is_event => {
            let node = json::parse(&canon).node.unwrap();
            let mut n = node.clone();
            if let runbook_policy::value::Value::Obj(ms) = &mut n.value {
                for m in ms.iter_mut() {
                    if m.key == "arguments" || m.key == "result" {
                        m.value = jcs::s(&sha256_hex(jcs::to_string(&m.value).as_bytes()));
                    }
                }
            }
            jcs::to_string(&n)
        }
        _ => jcs::to_string(&jcs::obj(vec![("malformed", jcs::s(event_line))])),
    };
    sha256_hex(format!("{prev}{e}{decision_line}").as_bytes())
}

#[test]
fn feed_line_decides_as_handle_line_and_links_the_chain() {
    let mut links = 0;
    for (doc, events) in cases() {
        let mut a = Session::new(&doc);
        let mut b = Session::new(&doc);
        let mut c = Session::new(&doc);
        let mut prev = "0".repeat(64);
        for line in &events {
            let want = a.handle_line(line);
            let r = b.feed_line(line, &prev);
            assert_eq!(r.decision_line, want);
            assert_eq!(r.decision.to_line(), want);
            assert_eq!(r.event_line, *line.strip_suffix('\n').unwrap_or(line));
            assert_eq!(r.link, link_by_the_text(&prev, line, &want), "{line}");
            assert_eq!(r.link, chain::link(&prev, line, &want, false));
            assert_eq!(c.replay_line(line, &prev), (r.decision_line.clone(), r.link.clone()), "the replay path gives the same line and link");
            assert!(!r.explanation.is_empty());
            prev = r.link;
            links += 1;
        }
        assert_eq!(a.snapshot(), b.snapshot());
        assert_eq!(a.report(), b.report());
    }
    assert!(links > 3000, "{links}");
}

#[test]
fn the_typed_feed_records_the_canonical_line_and_the_same_link() {
    let mut typed = 0;
    for (doc, events) in cases() {
        let mut a = Session::new(&doc);
        let mut b = Session::new(&doc);
        let (mut pa, mut pb) = ("0".repeat(64), "0".repeat(64));
        for line in &events {
            let ra = a.feed_line(line, &pa);
            let rb = match event::parse_line(line) {
                Ok(mut ev) => {
                    typed += 1;
                    // What the module fills in (the request a call-bound approval answers) is recorded too.
                    b.complete_typed(&mut ev);
                    let canonical = jcs::to_string(&ev.to_node());
                    let r = b.feed(Ok(ev), &pb);
                    assert_eq!(r.event_line, canonical, "the typed path records the canonical line");
                    r
                }
                Err(_) => b.feed_line(line, &pb),
            };
            assert_eq!(ra.decision_line, rb.decision_line, "{line}");
            assert_eq!(rb.link, link_by_the_text(&pb, &rb.event_line, &rb.decision_line), "{line}");
            pa = ra.link;
            pb = rb.link;
        }
        assert_eq!(a.snapshot(), b.snapshot());
    }
    assert!(typed > 2000, "{typed}");
}

#[test]
fn a_typed_event_that_cannot_be_read_is_recorded_and_replays_to_the_same_halt() {
    let doc = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rotate-credentials/runbook.yaml")).unwrap();
    let start = r#"{"type":"start","at":0,"run_id":"r","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a"}"#;
    let mut s = Session::new(&doc);
    let h1 = s.feed_line(start, "x").link;
    let r = s.feed(Err("arguments: not JSON".into()), &h1);
    assert_eq!(r.decision_line, r#"{"decision":"halt","deviation":null,"reason":"malformed-event","refusals":[],"seq":1,"step":"inspect"}"#);
    let mut replay = Session::new(&doc);
    replay.feed_line(start, "x");
    assert_eq!(replay.feed_line(&r.event_line, &h1), r);
}

#[test]
fn state_agrees_with_status_and_names_the_next_deadline() {
    for (doc, events) in cases().into_iter().take(320) {
        let mut s = Session::new(&doc);
        for line in &events {
            s.handle_line(line);
            let st = s.state();
            let status = json::parse(&s.status()).node.unwrap();
            let get = |k: &str| jcs::to_string(status.get(k).unwrap());
            assert_eq!(get("step"), st.step.as_deref().map_or("null".into(), |x| jcs::to_string(&jcs::s(x))));
            assert_eq!(get("scope"), jcs::to_string(&jcs::strs(st.scope.iter().map(|x| x.as_str()))));
            assert_eq!(get("events"), st.events.to_string());
            assert_eq!(get("approved"), st.approved.to_string());
            assert_eq!(get("outcome"), st.outcome.map_or("null".into(), |o| format!("\"{}\"", o.as_str())));
            assert_eq!(st.phase == RunPhase::Over, s.is_over());
        }
    }
    // A checkpoint of 100 ms, started at 50: pending until an event at 151 fails it.
    let doc = br#"{"runbook_id":"t","version":"1.0.0","capabilities":[{"name":"a","tool":"a","risk":"read-only"}],"checkpoints":[{"id":"cp","kind":"tool_call","match":{"tool":"a"},"timeout_ms":100,"required":true}]}"#;
    let mut s = Session::new(doc);
    assert_eq!(s.next_deadline(), None, "nothing before start");
    let d = s.handle_line(
        r#"{"type":"start","at":50,"run_id":"r","profile":"R1","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a"}"#,
    );
    assert!(d.contains("\"allow\""), "{d}");
    assert_eq!(s.next_deadline(), Some(151));
    assert!(s.handle_line(r#"{"type":"tick","at":150}"#).contains("\"allow\""));
    assert_eq!(s.next_deadline(), Some(151));
    let d = s.handle_line(r#"{"type":"tick","at":151}"#);
    assert!(d.contains("checkpoint-timeout"), "{d}");
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn every_decision_has_a_sentence_that_names_its_codes() {
    for (doc, events) in cases().into_iter().take(200) {
        let mut s = Session::new(&doc);
        let mut prev = String::new();
        for line in &events {
            let r = s.feed_line(line, &prev);
            prev = r.link.clone();
            let e = &r.explanation;
            assert!(e.ends_with('.') && e.chars().next().unwrap().is_uppercase(), "{e}");
            for code in r.decision.deviation.map(|d| d.as_str()).into_iter().chain(r.decision.reason.map(|x| x.as_str())) {
                assert!(e.contains(&format!("[{code}]")), "{e} lacks {code}");
            }
            for f in &r.decision.refusals {
                assert!(e.contains(&format!("[{}]", f.as_str())), "{e}");
            }
        }
    }
    assert_eq!(codes::explain("reason", "guarded").map(|s| s.contains("runbook-host")), Some(true));
    assert_eq!(codes::explain("reason", "no-such-code"), None);
}
