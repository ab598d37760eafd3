#!/usr/bin/env python3
"""The expected hash-chain links of the `chain` vectors, computed without the module (docs/spec/conformance.md#how-expectations-are-written).

docs/spec/bundle.md#the-hash-chain: h0 = the envelope's sha256 (here the case's `chain_h0`, any 64 hex digits: the module takes it
as the previous link of the first event, nothing more);

    hN = sha256(hN-1 || JCS(event with arguments and result replaced by the sha256 of their JCS) || JCS(decision))

where hN-1 enters as its 64 lowercase hex characters and the three parts are concatenated as UTF-8 with no
separator. No two different lines may give the same link: a line that is not a JSON event (not JSON, or
JSON that is not an object with a string `type`) enters as the object {"malformed": <the line as a JSON
string>}. docs/spec/runbook.md#exact-numbers: a number that is not exact (the decimal value of its RFC 8785 text is not the value
written) enters what is hashed as the JSON string of its text as written.

Everything here is written from that text: hashlib for sha256, and RFC 8785 (JCS) by json.dumps(sort_keys=True,
separators=(',', ':'), ensure_ascii=False), which is RFC 8785 for keys in the Basic Multilingual Plane (the
vectors use no others) and for integers within +-2^53. Every other number (a fraction, an exponent, `1.0`,
an integer beyond 2^53) has its RFC 8785 text (ECMAScript's Number.prototype.toString of the nearest double)
written by hand in HAND_NUMBERS below; a number token not listed there stops the script.

The decision lines are not the module's either: `decision`, `deviation` and `reason` come from each case's
hand-written `summary` in links.json, `seq` is the line's index, and `step` and `refusals` are written by
hand in STEPS and REFUSALS below, from the clauses the cases cite.

    python3 conformance/vectors/chain/make_links.py           writes `expected.links` into links.json
    python3 conformance/vectors/chain/make_links.py --check   checks them, and checks the blessed decision
                                                              lines (once blessed) against the hand-written
"""

import hashlib
import json
import sys
from pathlib import Path

VECTORS = Path(__file__).resolve().parent / "links.json"

# RFC 8785 text of the number tokens that are not integers within +-2^53, by hand: the nearest double,
# printed as ECMAScript does (shortest round-trip digits; plain notation from 1e-6 up to below 1e21,
# else d.ddde+N / de-N).
HAND_NUMBERS = {
    "1.0": "1",
    "2.50": "2.5",
    "1E2": "100",
    "0.1": "0.1",
    "5e-7": "5e-7",  # below 1e-6: exponent notation
    "1e21": "1e+21",  # 1e21 and above: exponent notation, with the sign
    "9007199254740993": "9007199254740992",  # 2^53 + 1 is no double; ties to even gives 2^53
    "-9007199254740993": "-9007199254740992",
    "18446744073709551616": "18446744073709552000",  # 2^64 exactly; shortest digits 18446744073709552, then zeros
    "123456789012345678901234567890": "1.2345678901234568e+29",
}

# The `step` of each decision line, by hand: the current step after the event (a passing result at R2
# routes `next` first; docs/spec/run.md#calls-and-results), null before admission and after a refused start.
STEPS = {
    "chain-invoke-result": ["look", "look", "done", "done"],
    "chain-not-json": ["look", "look", "look", "look"],
    "chain-non-canonical-lines": ["look", "look", "done", "done"],
    "chain-unicode-escapes": ["look", "look", "done", "done"],
    "chain-refused-start": [None, None, None, None],
    "chain-end-after-halt": ["look", "look", "look", "look", "look"],
    "chain-big-numbers": ["look", "look", "look", "done", "done"],
    "chain-malformed-bare-x": ["look", "look"],
    "chain-malformed-quoted-x": ["look", "look"],
    "chain-split": ["look", "purge", "purge", "purge", "purge", "done", "done"],
}

# `refusals` of a refused start (docs/spec/run.md#decision-lines: `[]` except on a refused start), by hand.
REFUSALS = {
    ("chain-refused-start", 0): ["capability-not-allowed"],
}

MAX_SAFE = 2**53


class Num:
    """A number token as written in the line; its canonical text is computed or looked up by hand."""

    def __init__(self, token):
        self.token = token

    def exact(self):
        """docs/spec/runbook.md#exact-numbers: the decimal value of the canonical text equals the value written."""
        from decimal import Decimal

        return Decimal(self.token) == Decimal(self.canonical())

    def canonical(self):
        t = self.token
        digits = t[1:] if t.startswith("-") else t
        if digits.isdigit() and (digits == "0" or not digits.startswith("0")) and abs(int(t)) <= MAX_SAFE:
            return "0" if int(t) == 0 else str(int(t))
        if t not in HAND_NUMBERS:
            sys.exit(f"make_links.py: no hand-written RFC 8785 text for the number {t}: add it to HAND_NUMBERS")
        return HAND_NUMBERS[t]


class NotJson(Exception):
    pass


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise NotJson("duplicate keys")  # not I-JSON, so not JCS input
    return dict(pairs)


def parse(text):
    def constant(name):
        raise NotJson(name)  # NaN, Infinity: not JSON

    try:
        return json.loads(text, parse_int=Num, parse_float=Num, parse_constant=constant, object_pairs_hook=no_duplicates)
    except (ValueError, NotJson) as e:
        raise NotJson(str(e)) from None


def jcs(value):
    """RFC 8785 of a parsed value as hashed (Num leaves written as their canonical text, or, when not exact,
    as the JSON string of the token as written)."""
    if isinstance(value, Num):
        return value.canonical() if value.exact() else json.dumps(value.token)
    if isinstance(value, dict):
        for k in value:
            if any(ord(c) > 0xFFFF for c in k):
                sys.exit("make_links.py: a key beyond the BMP: sort_keys would not be UTF-16 order")
        items = sorted(value.items())
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + jcs(v) for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    # str, bool, None: json.dumps writes them as RFC 8785 does (escapes \b \f \n \r \t \" \\ and \u00xx
    # in lowercase hex for the other control characters; everything else as UTF-8).
    return json.dumps(value, ensure_ascii=False)


def sha256_hex(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def event_form(line):
    """E: the JCS of the event with `arguments` and `result` replaced by the hex sha256 of their JCS; a
    line that is not a JSON event as {"malformed": <the line as a JSON string>}."""
    malformed = '{"malformed":' + json.dumps(line, ensure_ascii=False) + "}"
    try:
        value = parse(line)
    except NotJson:
        return malformed
    if not (isinstance(value, dict) and isinstance(value.get("type"), str)):
        return malformed
    if isinstance(value, dict):
        for key in ("arguments", "result"):
            if key in value:
                value[key] = sha256_hex(jcs(value[key]))
    return jcs(value)


def decision_line(case_id, seq, summary):
    decision, deviation, reason = summary
    d = {
        "seq": seq,
        "decision": decision,
        "step": STEPS[case_id][seq],
        "deviation": deviation,
        "reason": reason,
        "refusals": REFUSALS.get((case_id, seq), []),
    }
    return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def links_of(case):
    cid = case["id"]
    events = case["input"]["events"]
    summary = case["expected"]["summary"]
    if len(STEPS[cid]) != len(events) or len(summary) != len(events):
        sys.exit(f"make_links.py: {cid}: {len(events)} events, {len(summary)} summary entries, {len(STEPS[cid])} steps")
    prev = case["input"]["chain_h0"]
    links, decisions = [], []
    for seq, line in enumerate(events):
        d = decision_line(cid, seq, summary[seq])
        prev = sha256_hex(prev + event_form(line) + d)
        links.append(prev)
        decisions.append(d)
    return links, decisions


def main():
    check = "--check" in sys.argv[1:]
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))
    problems = []
    for case in vectors["cases"]:
        cid = case["id"]
        if cid not in STEPS:
            problems.append(f"{cid}: no hand-written steps in STEPS")
            continue
        links, decisions = links_of(case)
        if check:
            if case["expected"].get("links") != links:
                problems.append(f"{cid}: `links` are not those computed here (run without --check)")
            blessed = case["expected"].get("decisions")
            if blessed is not None:
                for seq, (got, want) in enumerate(zip(blessed, decisions)):
                    if got != want:
                        problems.append(f"{cid}: blessed decision {seq} is {got}, the hand-written line {want}")
        else:
            case["expected"]["links"] = links
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1)
    if not check:
        VECTORS.write_text(json.dumps(vectors, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote the links of {len(vectors['cases'])} cases into {VECTORS}")
    else:
        print(f"{len(vectors['cases'])} cases: links and decision lines as computed here")


if __name__ == "__main__":
    main()
