"""The Python side of benches/benches/embedders.rs: one allowed invoke on the typed path, timed in process.

Reads the fixture (one JSON line: document, start line, tool, arguments, result, pairs_per_session), checks
the decisions, says `ready`; then for each request "typed N" or "line N" it times N invokes on that path
(`handle(Invoke(...))` or `handle_line(text)`; one perf_counter_ns pair around each, the result fed untimed
after it, a fresh session every pairs_per_session) and answers the total ns.
"""

import json
import sys
import time

import runbook_policy as rp


def main():
    fixture = json.loads(sys.stdin.readline())
    policy = rp.load()
    doc = fixture["document"].encode()
    invoke = rp.Invoke(tool=fixture["tool"], arguments=fixture["arguments"])
    result = rp.Result(tool=fixture["tool"], result=fixture["result"])
    invoke_line = fixture["invoke_line"]
    result_line = fixture["result_line"]
    per_session = fixture["pairs_per_session"]

    def fresh():
        s = policy.session(doc)
        first = json.loads(s.handle_line(fixture["start"]))
        if first["decision"] != "allow":
            raise SystemExit(f"admission: {first}")
        return s

    s = fresh()
    d = s.handle(invoke, at=1)
    r = s.handle(result, at=1)
    if d.kind != rp.DecisionKind.ALLOW or d.step != "inspect" or r.kind != rp.DecisionKind.ALLOW:
        print(f"unexpected decisions: {d} {r}", flush=True)
        return 1
    d = json.loads(s.handle_line(invoke_line))
    if d["decision"] != "allow" or d["step"] != "inspect":
        print(f"unexpected decision line: {d}", flush=True)
        return 1
    s.handle_line(result_line)
    print("ready", flush=True)
    clock = time.perf_counter_ns
    for request in sys.stdin:
        path, count = request.split()
        left = int(count)
        total = 0
        while left > 0:
            n = min(left, per_session)
            s = fresh()
            if path == "typed":
                for _ in range(n):
                    t = clock()
                    s.handle(invoke, at=1)
                    total += clock() - t
                    s.handle(result, at=1)
            else:
                for _ in range(n):
                    t = clock()
                    s.handle_line(invoke_line)
                    total += clock() - t
                    s.handle_line(result_line)
            left -= n
        print(total, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
