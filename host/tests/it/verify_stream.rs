//! `verify` in pieces (WIT `verifier`, what `runbook-host verify` uses): for bundles that verify and
//! bundles that do not (events changed, cut, with CRLF, without a final newline, not UTF-8; signatures and
//! shadow lists that name events; a redacted derivative), pushing `events.ndjson` in pieces of any size,
//! a line split across pieces, answers exactly what `verify-bundle` answers given the file whole.

use crate::common::{all_streams, document_of, event_lines, repo, Tmp};
use runbook_host::bundle::{self, Bundle};
use runbook_host::{registry, BundleItem, Policy};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn policy() -> &'static Policy {
    runbook_host::files::shared_policy().expect("load the policy module")
}

/// Writes a bundle for a replay of `lines` against `doc`, the way an adapter does; returns its directory.
fn write_bundle(runs: &Path, doc: &Path, lines: &[String]) -> PathBuf {
    let p = policy();
    let resolved = registry::resolve(doc.to_str().unwrap(), "unused").unwrap();
    let run_id = runbook_host::files::new_run_id().unwrap();
    let mut b = Bundle::create(runs, &run_id, &resolved, runbook_host::module_sha256(), "replay").unwrap();
    let mut session = p.session(&resolved.bytes).unwrap();
    for (i, line) in lines.iter().enumerate() {
        let d = session.handle_line(line);
        b.record(line, &d).unwrap();
        if i == 0 {
            b.admitted(d.contains(r#""decision":"allow""#)).unwrap();
        }
    }
    b.finish(&session.report().unwrap()).unwrap();
    b.dir().to_path_buf()
}

type Entries = Vec<(String, BundleItem)>;

fn file<'a>(entries: &'a Entries, name: &str) -> Option<&'a [u8]> {
    entries.iter().find_map(|(n, i)| match i {
        BundleItem::File(b) if n == name => Some(b.as_slice()),
        _ => None,
    })
}

/// `entries` with `name` set to `item` (or removed), in the order a host lists them.
fn with(entries: &Entries, name: &str, item: Option<BundleItem>) -> Entries {
    let mut out: Entries = entries.iter().filter(|(n, _)| n != name).cloned().collect();
    out.extend(item.map(|i| (name.to_string(), i)));
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The verification of `entries` with the events (the `events.ndjson` entry's bytes) given as: the first
/// `first` bytes in the entry, then pieces of the sizes `pieces`, in turn.
fn streamed(entries: &Entries, first: usize, pieces: &[usize]) -> String {
    let events = file(entries, "events.ndjson");
    let listed = match events {
        Some(e) => with(entries, "events.ndjson", Some(BundleItem::File(e[..first.min(e.len())].to_vec()))),
        None => entries.clone(),
    };
    let mut v = policy().verifier(&listed, runbook_host::module_sha256(), None).unwrap();
    let mut rest = events.map(|e| &e[first.min(e.len())..]).unwrap_or_default();
    for n in pieces.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at((*n).min(rest.len()));
        v.push(piece).unwrap();
        rest = tail;
    }
    format!("{:?}", v.finish().unwrap())
}

/// Every way of cutting the events answers what `verify-bundle` answers; returns that answer.
fn same(name: &str, entries: &Entries) -> String {
    let whole = format!("{:?}", policy().verify_bundle(entries, runbook_host::module_sha256(), None).unwrap());
    let events = file(entries, "events.ndjson").unwrap_or_default();
    let mut cuts: Vec<(usize, Vec<usize>)> =
        vec![(0, vec![7]), (0, vec![4096]), (0, vec![usize::MAX]), (events.len(), vec![1]), (5, vec![3, 1, 250]), (events.len() / 2, vec![13])];
    // A line split at its newline: the line, the newline alone, the rest; and just after it.
    if let Some(nl) = events.iter().position(|b| *b == b'\n') {
        cuts.push((0, vec![nl, 1, usize::MAX]));
        cuts.push((nl + 1, vec![2, usize::MAX]));
    }
    if events.len() < 40_000 {
        cuts.push((0, vec![1]));
    }
    for (first, pieces) in cuts {
        assert_eq!(streamed(entries, first, &pieces), whole, "{name}: {first} bytes in the entry, then pieces of {pieces:?}");
    }
    whole
}

/// The events of `entries` changed by `f`.
fn events_changed(entries: &Entries, f: impl FnOnce(&mut Vec<u8>)) -> Entries {
    let mut e = file(entries, "events.ndjson").unwrap().to_vec();
    f(&mut e);
    with(entries, "events.ndjson", Some(BundleItem::File(e)))
}

fn run_json_changed(entries: &Entries, f: impl FnOnce(&mut Value)) -> Entries {
    let mut run: Value = serde_json::from_slice(file(entries, "run.json").unwrap()).unwrap();
    f(&mut run);
    with(entries, "run.json", Some(BundleItem::File(serde_json::to_vec_pretty(&run).unwrap())))
}

/// The 0-based positions of the events of type `kind`, and of those whose decision is not `allow`.
fn positions(entries: &Entries, kind: &str) -> (Vec<usize>, Vec<u64>) {
    let text = String::from_utf8(file(entries, "events.ndjson").unwrap().to_vec()).unwrap();
    let records: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let event = |r: &Value| -> Value { r["event"].as_str().map(|s| serde_json::from_str(s).unwrap_or(Value::Null)).unwrap_or_else(|| r["event"].clone()) };
    let of_kind = records.iter().enumerate().filter(|(_, r)| event(r)["type"] == kind).map(|(i, _)| i).collect();
    let denied = records.iter().filter(|r| r["decision"]["decision"] != "allow").filter_map(|r| r["decision"]["seq"].as_u64()).collect();
    (of_kind, denied)
}

#[test]
fn streaming_answers_what_verify_bundle_answers() {
    let t = Tmp::new("stream");
    let runs = t.0.join("runs");
    let mut verified = 0;
    for (doc, stream) in all_streams() {
        let dir = write_bundle(&runs, &doc, &event_lines(&stream));
        let entries = runbook_host::bundle::verify::entries(&cap_std::fs::Dir::open_ambient_dir(&dir, cap_std::ambient_authority()).unwrap()).unwrap();
        let answer = same(&stream.display().to_string(), &entries);
        verified += usize::from(answer.contains("failure: None"));
    }
    assert!(verified > 3, "the examples' bundles verify");
}

#[test]
fn streaming_answers_what_verify_bundle_answers_for_broken_bundles() {
    let t = Tmp::new("stream-broken");
    let runs = t.0.join("runs");
    let dir = write_bundle(&runs, &document_of("rotate-credentials"), &event_lines(&repo().join("examples/rotate-credentials/events-deviations.ndjson")));
    let open = |d: &Path| runbook_host::bundle::verify::entries(&cap_std::fs::Dir::open_ambient_dir(d, cap_std::ambient_authority()).unwrap()).unwrap();
    let entries = open(&dir);
    assert!(same("as written", &entries).contains("failure: None"));

    let line_start = |e: &[u8], n: usize| e.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(n - 1).map(|(i, _)| i + 1).unwrap();
    let mut cases: Vec<(&str, Entries)> = vec![
        (
            "a changed byte",
            events_changed(&entries, |e| {
                let at = line_start(e, 2) + 90;
                e[at] ^= 1
            }),
        ),
        ("CRLF", events_changed(&entries, |e| *e = String::from_utf8(e.clone()).unwrap().replace('\n', "\r\n").into_bytes())),
        (
            "no final newline",
            events_changed(&entries, |e| {
                e.pop();
            }),
        ),
        ("empty", events_changed(&entries, Vec::clear)),
        ("a blank line", events_changed(&entries, |e| e.insert(line_start(e, 3), b'\n'))),
        ("line 2 dropped", events_changed(&entries, |e| drop(e.drain(line_start(e, 1)..line_start(e, 2))))),
        ("the last line twice", events_changed(&entries, |e| e.extend(e[line_start(e, e.iter().filter(|b| **b == b'\n').count() - 1)..].to_vec()))),
        // Not UTF-8 late in the file counts before a line out of form early in it.
        (
            "not UTF-8 after a line out of form",
            events_changed(&entries, |e| {
                e[3] = b'X';
                let at = e.len() - 10;
                e[at] = 0xC3;
            }),
        ),
        // A line out of form counts before a chain broken earlier (the lines are read, then replayed).
        (
            "a line out of form after a chain break",
            events_changed(&entries, |e| {
                let at = line_start(e, 6);
                e.splice(at..at, b"{\"h\":\"zz\"}\n".to_vec());
                // A digit of line 3's `h`.
                let at = line_start(e, 2) + 10;
                e[at] = if e[at] == b'0' { b'1' } else { b'0' };
            }),
        ),
        ("a two-byte character", events_changed(&entries, |e| e.splice(line_start(e, 1) + 80..line_start(e, 1) + 81, "é".bytes()).for_each(drop))),
        ("events.ndjson missing", with(&entries, "events.ndjson", None)),
        ("events.ndjson a directory", with(&entries, "events.ndjson", Some(BundleItem::Directory(0)))),
        ("report.json missing", with(&entries, "report.json", None)),
    ];

    // Signed answers: each names an event by its position, which streaming must keep.
    let (approvals, denied) = positions(&entries, "approval");
    assert!(!approvals.is_empty() && !denied.is_empty());
    let signed = run_json_changed(&entries, |r| r["approvals"] = json!({"signed": true}));
    let sig = |seq: usize| json!({"seq": seq, "request": 1, "message": "m", "signature": "s", "principal": "p", "fingerprint": "f"}).to_string() + "\n";
    cases.push(("signed, no signatures.ndjson", signed.clone()));
    cases.push(("signed, none of the approvals", with(&signed, "signatures.ndjson", Some(BundleItem::File(Vec::new())))));
    cases.push(("a signature of the first approval", with(&signed, "signatures.ndjson", Some(BundleItem::File(sig(approvals[0]).into_bytes())))));
    cases.push(("a signature of the last approval", with(&entries, "signatures.ndjson", Some(BundleItem::File(sig(*approvals.last().unwrap()).into_bytes())))));
    cases.push(("a signature of the start", with(&entries, "signatures.ndjson", Some(BundleItem::File(sig(0).into_bytes())))));
    cases.push(("a signature past the end", with(&entries, "signatures.ndjson", Some(BundleItem::File(sig(10_000).into_bytes())))));
    // A shadow run's list names decisions by their seq.
    let shadow = run_json_changed(&entries, |r| r["mode"] = json!("shadow"));
    let list = |seqs: &[u64], decision: &str| seqs.iter().map(|q| json!({"seq": q, "decision": decision}).to_string() + "\n").collect::<String>().into_bytes();
    cases.push(("shadow, every denied call", with(&shadow, "shadow.ndjson", Some(BundleItem::File(list(&denied, "deny"))))));
    cases.push(("shadow, an allowed call", with(&shadow, "shadow.ndjson", Some(BundleItem::File(list(&[1], "allow"))))));
    cases.push(("shadow, no such seq", with(&shadow, "shadow.ndjson", Some(BundleItem::File(list(&[99_999], "deny"))))));

    // A redacted derivative is checked against its lines, not replayed.
    let out = bundle::export_redacted(&dir, &t.0.join("redacted")).unwrap();
    let redacted = open(&out);
    assert!(same("redacted", &redacted).contains("failure: None"));
    cases.push((
        "redacted, a changed byte",
        events_changed(&redacted, |e| {
            let at = line_start(e, 3) + 90;
            e[at] ^= 1
        }),
    ));
    cases.push(("redacted, the last line dropped", events_changed(&redacted, |e| e.truncate(line_start(e, e.iter().filter(|b| **b == b'\n').count() - 1)))));

    let mut answers = std::collections::BTreeSet::new();
    for (name, entries) in &cases {
        let answer = same(name, entries);
        assert!(!answer.contains("failure: None"), "{name}: {answer}");
        answers.insert(answer);
    }
    assert!(answers.len() > cases.len() - 3, "the cases fail in different ways");
}
