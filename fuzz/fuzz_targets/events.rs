//! Event lines into a running session of a corpus document (the first byte chooses it; the rest is lines):
//! no panic; every decision line and the report canonical; a second session fed the same lines answers the
//! same bytes; a session restored from a snapshot taken halfway answers the rest, and reports, exactly as
//! the original.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use runbook_policy::Session;

/// A new session of each corpus document, made once: each input starts from clones (a session is plain
/// data), so that the parse of the document is not most of every execution.
fn fresh() -> &'static Vec<Session> {
    static S: std::sync::OnceLock<Vec<Session>> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let made: Vec<Session> = common::DOCUMENTS.iter().map(|d| Session::new(d)).collect();
        for (i, d) in common::DOCUMENTS.iter().enumerate() {
            assert_eq!(Session::new(d).snapshot(), made[i].snapshot(), "a new session of document {i} differs from the last");
        }
        made
    })
}

fuzz_target!(init: { fresh(); }, |data: &[u8]| {
    let Some((first, _)) = data.split_first() else { return };
    let Some((doc, rest)) = common::split(data) else { return };
    let text = String::from_utf8_lossy(rest);
    let lines: Vec<&str> = text.split('\n').take(64).collect();
    let half = lines.len() / 2;
    let start = &fresh()[*first as usize % common::DOCUMENTS.len()];
    let mut a = start.clone();
    let mut b = start.clone();
    let mut restored: Option<Session> = None;
    for (i, line) in lines.iter().enumerate() {
        if i == half {
            let snap = a.snapshot();
            common::assert_canonical("the snapshot", &snap);
            restored = Some(Session::restore(doc, &snap).unwrap_or_else(|e| panic!("the module's own snapshot is refused: {e}")));
        }
        let d = a.handle_line(line);
        common::assert_canonical("a decision line", &d);
        assert_eq!(b.handle_line(line), d, "the same line decided twice differs");
        if let Some(r) = restored.as_mut() {
            assert_eq!(r.handle_line(line), d, "the restored session decides line {i} otherwise");
        }
    }
    let report = a.report();
    common::assert_canonical("the report", &report);
    assert_eq!(b.report(), report);
    if let Some(r) = restored {
        assert_eq!(r.report(), report, "the restored session reports otherwise");
    }
});
