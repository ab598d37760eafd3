#!/usr/bin/env python3
"""Writes the whole-run vectors' inputs (conformance/vectors/run/<name>/script.json and the document) from the
definitions below; `runbook-conformance --bless` then writes each `expected/` from the first implementation
with a whole-run driver, and the full run checks every implementation against it, byte for byte.

Each vector carries, written by hand from the clauses it cites, what the run must show (`expect`): the
outcome, and for the hand-written sessions the decision of every recorded event (and its reason where it
is the point). The runner checks `expected/` against these before comparing any implementation's bytes, so
a blessed file can never hold a decision the clauses do not give.

    python3 conformance/vectors/run/make_scripts.py            (re-writes the inputs; keeps expected/)
    python3 conformance/vectors/run/make_scripts.py --check    (fails when an input differs from this file)
"""

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
T0 = 1796169600000  # 2026-12-02T00:00:00Z
HOST = {"name": "runbook-host", "version": "0.0.0-vectors"}
GIT = {"status": "not-a-checkout"}

ROT_CLAIM = {"agent": "claude-code", "profile": "R2", "allowlist": ["Bash", "mcp__vault__read_metadata", "mcp__slack__post_message"],
             "risk_ceiling": "destructive", "coverage": "complete", "available": None}
INSPECT = "kubectl -n payments get secret payments-db-credentials"
ROTATE = "vault write -f database/rotate-role/payments-app"
# sha256 of the canonical {"arguments":{"command":ROTATE},"tool":"Bash"} (docs/spec/run.md#approvals-bound-to-a-call), as the example's stream has it.
ROTATE_SHA = "37404f36c47c7a5a69240928a9b8813e51fc4fb24009aedf28ee69223cde5781"
OTHER_SHA = "0" * 64


def inv(at, command, call_id=None, tool="Bash", **args):
    return {"at": at, "invoke": {"tool": tool, "arguments": {"command": command, **args} if command is not None else args, "call_id": call_id, "step": None}}


def res(at, tool, result, call_id=None, is_error=False):
    return {"at": at, "result": {"tool": tool, "result": result, "is_error": is_error, "call_id": call_id}}


def bash_out(stdout):
    return {"stdout": stdout, "stderr": "", "interrupted": False}


def appr(at, sha, granted=True, step="rotate", approver="alice"):
    return {"at": at, "approval": {"step": step, "call_sha256": sha, "approver": approver, "granted": granted}}


def line(at, text):
    return {"at": at, "line": text}


def num_invoke(at, number_text):
    """A raw invoke line whose arguments hold a number exactly as written (9.28): only a line keeps the text
    of a number past a double, whatever JSON library an implementation's runner reads the script with."""
    return line(at, '{"type":"invoke","at":%d,"tool":"Bash","arguments":{"command":"%s","n":%s}}' % (at, INSPECT, number_text))


# Up to the gated step: inspect (allowed, passes), check-age (allowed, 97 days: passes), rotate asked.
TO_GATE = [
    inv(1200, INSPECT, "c1"),
    res(1650, "Bash", bash_out("payments-db-credentials   Opaque   2   97d\n"), "c1"),
    {"at": 2300, "invoke": {"tool": "mcp__vault__read_metadata", "arguments": {"path": "database/creds/payments-app"}, "call_id": "c2", "step": None}},
    res(2480, "mcp__vault__read_metadata", {"age_days": 97}, "c2"),
    inv(3100, ROTATE, "c3"),
]
TO_GATE_DECISIONS = ["allow", "allow", "allow", "allow", "allow", "needs-approval"]
ROTATED = [
    res(42900, "Bash", bash_out("Success! Data written to: database/rotate-role/payments-app\n"), "c4"),
    inv(43500, "kubectl -n payments rollout restart deployment/payments-api", "c5"),
    res(44100, "Bash", bash_out("deployment.apps/payments-api restarted\n"), "c5"),
    inv(44700, "kubectl -n payments rollout status deployment/payments-api --timeout=300s", "c6"),
    res(101300, "Bash", bash_out('deployment "payments-api" successfully rolled out\n'), "c6"),
    {"at": 102000, "invoke": {"tool": "mcp__slack__post_message", "arguments": {"channel": "#payments-oncall", "text": "rotated"}, "call_id": "c7", "step": None}},
    res(102400, "mcp__slack__post_message", {"ok": True}, "c7"),
]


def vec(name, clauses, why, steps, expect, document="rotate-credentials", adapter="library", claim=None):
    return {"name": name, "clauses": clauses, "why": why, "document": document, "adapter": adapter, "claim": claim or ROT_CLAIM, "steps": steps, "expect": expect}


HAND = [
    # Each adapter kind's end rules (docs/spec/cli.md#exit-codes and docs/spec/adapters.md#adapter-duties; outcomes: docs/spec/run.md#outcomes).
    vec("end-library-completed", ["docs/spec/cli.md#exit-codes", "docs/spec/run.md#outcomes", "docs/spec/adapters.md#adapter-duties"], "a library run that reaches its terminal and ends normal completes; the end event itself is answered halt (run-ended)",
        TO_GATE + [appr(41000, ROTATE_SHA), inv(41800, ROTATE, "c4")] + ROTATED + [{"at": 103000, "final_output": True}, {"at": 103100, "end": "normal"}],
        {"outcome": "completed", "decisions": TO_GATE_DECISIONS + ["allow", "allow"] + ["allow"] * 7 + ["allow", "halt"], "reasons": {"16": "run-ended"}}),
    vec("end-proxy-clean-shutdown", ["docs/spec/adapters.md#adapter-duties"], "a proxy's clean shutdown feeds final_output, then ends normal",
        TO_GATE + [appr(41000, ROTATE_SHA), inv(41800, ROTATE, "c4")] + ROTATED + [{"at": 103100, "leave": {"calls_in_flight": 0, "last_call_timed_out": False}}],
        {"outcome": "completed", "decisions": TO_GATE_DECISIONS + ["allow", "allow"] + ["allow"] * 7 + ["allow", "halt"]}, adapter="mcp-proxy"),
    vec("end-proxy-client-vanished", ["docs/spec/adapters.md#adapter-duties", "docs/spec/run.md#outcomes"], "a client that leaves with a call unanswered ends client-closed, without final_output: incomplete",
        TO_GATE[:1] + [{"at": 1300, "leave": {"calls_in_flight": 1, "last_call_timed_out": False}}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "halt"]}, adapter="mcp-proxy"),
    vec("end-proxy-approval-timeout", ["docs/spec/adapters.md#adapter-duties", "docs/spec/run.md#approvals-bound-to-a-call"], "a last call that waited in vain for a human: final_output, then approval-timeout",
        TO_GATE + [{"at": 93100, "leave": {"calls_in_flight": 0, "last_call_timed_out": True}}],
        {"outcome": "incomplete", "decisions": TO_GATE_DECISIONS + ["allow", "halt"]}, adapter="mcp-proxy"),
    vec("end-hook-interrupted", ["docs/spec/adapters.md#adapter-duties", "docs/spec/run.md#outcomes"], "a hook run interrupted (the agent CLI killed) before its terminal is incomplete",
        TO_GATE[:2] + [{"at": 1700, "end": "interrupted"}], {"outcome": "incomplete", "decisions": ["allow", "allow", "allow", "halt"]}, adapter="hook"),
    vec("end-server-exited", ["docs/spec/adapters.md#adapter-duties", "docs/spec/run.md#outcomes"], "the tool server exits mid-run: incomplete", TO_GATE[:2] + [{"at": 1700, "end": "server-exited"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "allow", "halt"]}, adapter="mcp-proxy"),
    vec("end-normal-short-of-terminal", ["docs/spec/cli.md#exit-codes", "docs/spec/run.md#outcomes"], "a normal end short of a terminal is incomplete", TO_GATE[:2] + [{"at": 1700, "final_output": True}, {"at": 1800, "end": "normal"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "allow", "allow", "halt"]}, adapter="claude-agent-sdk"),
    vec("admission-profile-too-low", ["docs/spec/run.md#admission-and-refusals", "docs/spec/envelope.md#effective-minimum-profile"], "an R2 runbook under an R1 claim is refused before any tool runs (the start answered halt, refused); nothing after is fed", [{"at": 10, "end": "normal"}],
        {"outcome": "refused", "decisions": ["halt"], "reasons": {"0": "refused"}, "refusals": ["profile-too-low"]}, claim={**ROT_CLAIM, "profile": "R1"}),
    vec("admission-coverage-blind", ["docs/spec/run.md#admission-and-refusals", "docs/spec/envelope.md#effective-minimum-profile"], "a destructive runbook under an adapter blind to the shell is refused (coverage-incomplete)", [{"at": 10, "end": "normal"}],
        {"outcome": "refused", "decisions": ["halt"], "reasons": {"0": "refused"}, "refusals": ["coverage-incomplete"]}, claim={**ROT_CLAIM, "coverage": {"blind": ["shell"]}}, adapter="pydantic-ai"),
    # The approval ledger (docs/spec/run.md#approvals-bound-to-a-call).
    vec("ledger-approval-consumed", ["docs/spec/run.md#approvals-bound-to-a-call"], "a call-bound approval admits its call once: the same call again needs a new approval",
        TO_GATE + [appr(41000, ROTATE_SHA), inv(41800, ROTATE, "c4"), inv(41900, ROTATE, "c5"), {"at": 42000, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": TO_GATE_DECISIONS + ["allow", "allow", "needs-approval", "halt"]}),
    vec("ledger-replayed-approval", ["docs/spec/run.md#approvals-bound-to-a-call"], "the same answer fed again after it was used up is refused (no pending request)",
        TO_GATE + [appr(41000, ROTATE_SHA), inv(41800, ROTATE, "c4"), appr(41850, ROTATE_SHA), inv(41900, ROTATE, "c5"), {"at": 42000, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": TO_GATE_DECISIONS + ["allow", "allow", "deny", "needs-approval", "halt"], "reasons": {"8": "no-pending"}}),
    vec("ledger-approval-for-another-call", ["docs/spec/run.md#approvals-bound-to-a-call"], "an approval naming another call's hash is refused; the asked call stays gated",
        TO_GATE + [appr(41000, OTHER_SHA), inv(41800, ROTATE, "c4"), {"at": 42000, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": TO_GATE_DECISIONS + ["deny", "needs-approval", "halt"], "reasons": {"6": "no-pending"}}),
    vec("ledger-approval-before-request", ["docs/spec/run.md#approvals-bound-to-a-call"], "an answer for the current gated step before the module asked anything is refused",
        TO_GATE[:4] + [appr(2500, ROTATE_SHA), {"at": 2600, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "allow", "allow", "allow", "deny", "halt"], "reasons": {"5": "no-pending"}}),
    vec("ledger-step-wide", ["docs/spec/run.md#approvals-bound-to-a-call"], "a step-wide approval answers every request of the visit",
        TO_GATE + [appr(41000, None), inv(41800, ROTATE, "c4")] + ROTATED + [{"at": 103000, "final_output": True}, {"at": 103100, "end": "normal"}],
        {"outcome": "completed", "decisions": TO_GATE_DECISIONS + ["allow", "allow"] + ["allow"] * 7 + ["allow", "halt"]}),
    vec("ledger-refused-answer", ["docs/spec/run.md#approvals-bound-to-a-call"], "a human's refusal is an answer (allow) that uses the request up: the call needs a new request",
        TO_GATE + [appr(41000, ROTATE_SHA, granted=False), inv(41800, ROTATE, "c4"), {"at": 42000, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": TO_GATE_DECISIONS + ["allow", "needs-approval", "halt"]}),
    # Exact numbers (docs/spec/runbook.md#exact-numbers).
    vec("numbers-three-around-a-double", ["docs/spec/runbook.md#exact-numbers"], "1234567890123456800 is exact; ...768 and ...789 share its double and are denied, recorded as written",
        [num_invoke(100, "1234567890123456800"), num_invoke(200, "1234567890123456768"), num_invoke(300, "1234567890123456789"), {"at": 400, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "deny", "deny", "halt"], "reasons": {"2": "inexact-number", "3": "inexact-number"}}),
    vec("numbers-exponent-and-fraction", ["docs/spec/runbook.md#exact-numbers"], "1e2 and 0.1 are exact (their canonical text reads back as the same decimal)",
        [num_invoke(100, "1e2"), num_invoke(200, "0.1"), {"at": 300, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "allow", "halt"]}),
    vec("numbers-two-to-the-53", ["docs/spec/runbook.md#exact-numbers"], "2^53 is exact, 2^53+1 is not", [num_invoke(100, "9007199254740992"), num_invoke(200, "9007199254740993"), {"at": 300, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "deny", "halt"], "reasons": {"2": "inexact-number"}}),
    vec("numbers-in-a-result", ["docs/spec/runbook.md#exact-numbers", "docs/spec/bundle.md#the-hash-chain"], "a result holding a number that is not exact is recorded as written (the step's asserts do not read it)",
        [inv(100, INSPECT, "c1"), line(200, '{"type":"result","at":200,"tool":"Bash","result":{"stdout":"payments-db-credentials","n":12345678901234567890123},"is_error":false,"call_id":"c1"}'),
         {"at": 300, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "allow", "halt"]}),
    # Lines that are not events (docs/spec/bundle.md#the-hash-chain, docs/spec/run.md#decision-lines and docs/spec/run.md#outcomes).
    vec("malformed-bare-word", ["docs/spec/bundle.md#the-hash-chain"], "the line x halts the run (malformed-event); it is recorded as the JSON string holding it", [line(100, "x"), {"at": 200, "end": "normal"}],
        {"outcome": "failed", "decisions": ["allow", "halt"], "reasons": {"1": "malformed-event"}}),
    vec("malformed-json-string", ["docs/spec/bundle.md#the-hash-chain"], "the JSON string \"x\" halts the run too, and links apart from the line x", [line(100, '"x"'), {"at": 200, "end": "normal"}],
        {"outcome": "failed", "decisions": ["allow", "halt"], "reasons": {"1": "malformed-event"}}),
    vec("malformed-both", ["docs/spec/bundle.md#the-hash-chain"], "x then \"x\": one halts, the other is answered halted and recorded; two different links", [line(100, "x"), line(150, '"x"'), {"at": 200, "end": "normal"}],
        {"outcome": "failed", "decisions": ["allow", "halt", "halt"], "reasons": {"1": "malformed-event", "2": "halted"}}),
    vec("malformed-object-not-an-event", ["docs/spec/bundle.md#the-hash-chain"], "a JSON object that is no event is recorded as the object and halts",
        [line(100, '{"type":"bogus","at":100}'), {"at": 200, "end": "normal"}], {"outcome": "failed", "decisions": ["allow", "halt"]}),
    vec("malformed-duplicate-keys", ["docs/spec/bundle.md#the-hash-chain"], "an object with a duplicate key is not an event object: recorded as a string, it halts",
        [line(100, '{"type":"tick","at":100,"at":101}'), {"at": 200, "end": "normal"}], {"outcome": "failed", "decisions": ["allow", "halt"]}),
    # Deviations and scope (docs/spec/run.md).
    vec("deny-undeclared-tool", ["docs/spec/run.md#deviations", "docs/spec/run.md#which-capability-a-call-is"], "a tool no capability names is denied and the run goes on",
        [inv(100, None, "c1", tool="Write", file_path="/etc/passwd"), {"at": 200, "end": "interrupted"}], {"outcome": "incomplete", "decisions": ["allow", "deny", "halt"]}),
    vec("deny-out-of-scope", ["docs/spec/run.md#deviations", "docs/spec/run.md#which-capability-a-call-is"], "the gated rotation before its step is out of scope", [inv(100, ROTATE, "c1"), {"at": 200, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": ["allow", "deny", "halt"]}),
]

# The examples' streams, as sessions (each example's `events*.ndjson`): realistic runs end to end.
EXAMPLES = [
    ("example-rotate-credentials", "rotate-credentials", "events.ndjson", "completed"),
    ("example-rotate-credentials-deviations", "rotate-credentials", "events-deviations.ndjson", None),
    ("example-certificate-renewal", "certificate-renewal", "events.ndjson", None),
    ("example-executive-snapshot", "executive-snapshot", "events.ndjson", None),
    ("example-executive-snapshot-incomplete", "executive-snapshot", "events-incomplete.ndjson", None),
    ("example-incident-rollback", "incident-rollback", "events.ndjson", None),
    ("example-incident-rollback-exhausted", "incident-rollback", "events-exhausted.ndjson", None),
    ("example-read-only-investigation", "read-only-investigation", "events.ndjson", None),
    ("example-broken", "broken", "events.ndjson", "refused"),
]


# Written after the examples so that adding them renumbers no earlier vector's run id.
LATER = [
    # Names chosen by an agent or an approver are data, not paths (docs/spec/bundle.md#relative-paths-only).
    vec("deny-tools-named-like-paths", ["docs/spec/run.md#deviations", "docs/spec/bundle.md#relative-paths-only"],
        "tools named like absolute paths are undeclared: denied, listed as deviations by name, and the bundle still verifies",
        [inv(100 * (i + 1), None, f"c{i + 1}", tool=t) for i, t in enumerate(["/etc/passwd", "~root", "C:\\Windows", "file:///etc/shadow", "\\\\host\\share"])]
        + [{"at": 600, "end": "interrupted"}], {"outcome": "incomplete", "decisions": ["allow"] + ["deny"] * 5 + ["halt"]}),
    vec("ledger-approver-named-like-a-path", ["docs/spec/run.md#approvals-bound-to-a-call", "docs/spec/bundle.md#relative-paths-only"],
        "an approver's name is data: an answer signed `/home/alice` is refused like any early answer, and the bundle still verifies",
        TO_GATE[:4] + [appr(2500, ROTATE_SHA, approver="/home/alice"), {"at": 2600, "end": "interrupted"}],
        {"outcome": "incomplete", "decisions": ["allow", "allow", "allow", "allow", "allow", "deny", "halt"], "reasons": {"5": "no-pending"}}),
]


# Resuming a run in another process (docs/spec/bundle.md#resuming-a-run): the resumed run writes what one run
# would have; evidence the agent edited, or a pin of another run, is refused before anything is appended.
RESUME = {"at": 5000, "resume": {"pin": "kept"}}
# The attack of docs/security.md row 5: the gate removed from the bundle's document, run.json's sha256 edited
# to match. The swapped document is the example's without its `requires_approval` line.
SWAPPED = "swapped.yaml"
RESUMES = [
    vec("resume-continues-the-run", ["docs/spec/bundle.md#resuming-a-run", "docs/spec/bundle.md#the-hash-chain"],
        "a run let go before its gate and resumed with its pin goes on and ends as one run would: the same decisions, one chain",
        TO_GATE + [RESUME, appr(41000, ROTATE_SHA), inv(41800, ROTATE, "c4")] + ROTATED + [{"at": 103000, "final_output": True}, {"at": 103100, "end": "normal"}],
        {"outcome": "completed", "decisions": TO_GATE_DECISIONS + ["allow", "allow"] + ["allow"] * 7 + ["allow", "halt"]}),
    vec("resume-swapped-document", ["docs/spec/bundle.md#resuming-a-run"],
        "a document swapped in the bundle with run.json's sha256 edited to match is refused at resume (run.json's chain_h0 is not the new document's), without a pin",
        TO_GATE + [{"at": 5000, "resume": {"swap_document": SWAPPED, "refused": {"place": "run.json", "reason": "chain_h0 is not the digest of its document's envelope"}}}],
        {"decisions": TO_GATE_DECISIONS, "resume_refused": True}),
    vec("resume-another-pin", ["docs/spec/bundle.md#resuming-a-run"],
        "an untouched bundle resumed with the pin of another run is refused, naming the document",
        TO_GATE + [{"at": 5000, "resume": {"pin": "another", "refused": {"place": "runbook.yaml", "reason": "the document is not the one pinned when the run began"}}}],
        {"decisions": TO_GATE_DECISIONS, "resume_refused": True}),
]


def swapped_document(src):
    """The example's document without its gate (`requires_approval: true` dropped)."""
    text = src.read_text()
    assert "    requires_approval: true\n" in text
    return text.replace("    requires_approval: true\n", "", 1)


def call_id(e):
    """A call id as a driver takes it: text (a stream's numeric id, as its decimal text)."""
    c = e.get("call_id")
    return c if c is None or isinstance(c, str) else json.dumps(c)


def example_session(events_path):
    claim, steps = None, []
    for text in events_path.read_text().splitlines():
        if not text.strip():
            continue
        e = json.loads(text)
        t, at = e["type"], e.get("at", 0)
        if t == "start":
            cov = e["coverage"]
            claim = {"agent": e["agent"], "profile": e["profile"], "allowlist": e["allowlist"], "risk_ceiling": e["risk_ceiling"],
                     "coverage": "complete" if cov == "complete" else {"blind": cov}, "available": e.get("available")}
        elif t == "invoke":
            steps.append({"at": at, "invoke": {"tool": e["tool"], "arguments": e["arguments"], "call_id": call_id(e), "step": e.get("step")}})
        elif t == "result":
            steps.append({"at": at, "result": {"tool": e["tool"], "result": e["result"], "is_error": e.get("is_error", False), "call_id": call_id(e)}})
        elif t == "approval":
            steps.append({"at": at, "approval": {"step": e.get("step"), "call_sha256": e.get("call_sha256"), "approver": e["approver"], "granted": e["granted"]}})
        elif t == "advance":
            steps.append({"at": at, "advance": e["to"]})
        elif t == "verdict":
            steps.append({"at": at, "verdict": {"step": e["step"], "pass": e["outcome"] == "pass", "by": e["by"]}})
        elif t in ("final_output", "tick"):
            steps.append({"at": at, t: True})
        elif t == "end":
            steps.append({"at": at, "end": e.get("reason", "normal")})
        else:
            steps.append(line(at, text))
    return claim, steps


def all_vectors():
    out = list(HAND)
    for name, example, stream, outcome in EXAMPLES:
        claim, steps = example_session(ROOT / "examples" / example / stream)
        out.append(vec(name, ["docs/spec/conformance.md#how-expectations-are-written"], f"examples/{example}/{stream} as a whole run", steps, {"outcome": outcome} if outcome else {}, document=example, claim=claim))
    return out + LATER + RESUMES


def write(check):
    differ = []
    for i, v in enumerate(all_vectors()):
        d = HERE / v["name"]
        src = next((ROOT / "examples" / v["document"]).glob("runbook.*"))
        script = {
            "clauses": v["clauses"], "why": v["why"], "document": src.name, "adapter": v["adapter"],
            "facts": {"run_id": "r-20261202T000000Z-%012x" % (i + 1), "t0": T0, "host": HOST, "git": GIT, "reference": src.name},
            "claim": v["claim"], "steps": v["steps"], "expect": v["expect"],
        }
        text = json.dumps(script, indent=2) + "\n"
        swap = any(isinstance(st.get("resume"), dict) and st["resume"].get("swap_document") for st in v["steps"])
        if check:
            if not (d / "script.json").is_file() or (d / "script.json").read_text() != text or (d / src.name).read_bytes() != src.read_bytes():
                differ.append(v["name"])
            elif swap and (not (d / SWAPPED).is_file() or (d / SWAPPED).read_text() != swapped_document(src)):
                differ.append(v["name"])
            continue
        d.mkdir(exist_ok=True)
        (d / "script.json").write_text(text)
        shutil.copyfile(src, d / src.name)
        if swap:
            (d / SWAPPED).write_text(swapped_document(src))
    if differ:
        sys.exit("make_scripts.py --check: these vectors' inputs differ from the definitions: " + ", ".join(differ))


if __name__ == "__main__":
    write("--check" in sys.argv)
