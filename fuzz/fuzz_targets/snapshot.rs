//! Snapshot text into `restore` (the first byte chooses the document): no panic; a snapshot it accepts
//! gives a session whose own snapshot restores to the same state (same snapshot bytes), and which decides
//! further events without panicking.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use runbook_policy::Session;

const PROBES: [&str; 4] = [
    r#"{"type":"invoke","at":5,"tool":"Bash","arguments":{"command":"ls"}}"#,
    r#"{"type":"result","at":6,"tool":"Bash","result":{"ok":true},"is_error":false}"#,
    r#"{"type":"tick","at":999999999}"#,
    r#"{"type":"end","at":1000000000,"reason":"normal"}"#,
];

fuzz_target!(|data: &[u8]| {
    let Some((doc, rest)) = common::split(data) else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let Ok(mut s) = Session::restore(doc, text) else { return };
    let snap = s.snapshot();
    let again = Session::restore(doc, &snap).unwrap_or_else(|e| panic!("the module's own snapshot is refused: {e}"));
    assert_eq!(again.snapshot(), snap, "a snapshot does not round-trip");
    for p in PROBES {
        common::assert_canonical("a decision line", &s.handle_line(p));
    }
    common::assert_canonical("the report", &s.report());
});
